"""Record-at-a-time operators that keep records on their worker: map, filter, and friends
(timely's ``map``, ``filter``, ``inspect``, ``partition``, ``branch`` and ``ok_err``).

Each runs the user's function inside one list comprehension per batch.
"""
from __future__ import annotations

from itertools import chain
from operator import length_hint
from typing import Any, Callable, Iterator, Self

from ..dataflow import Exchange, OperatorBuilder, Pipeline
from ..dataflow.builder import FrontierInterest, operator_failed, per_batch
from ..dataflow.stream import StreamCore
from ..errors import require_function
from ..hashing import Route


class Ok:
    """A successful result for ``ok_err`` (and a batch event in ``inspect_core``).

    >>> import sparktimely as st
    >>> st.Ok(3).value
    3
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return other.__class__ is Ok and other.value == self.value

    def __hash__(self) -> int:
        return hash(("Ok", self.value))

    def __repr__(self) -> str:
        return f"Ok({self.value!r})"


class Err:
    """A failed result for ``ok_err`` (and a frontier event in ``inspect_core``).

    >>> import sparktimely as st
    >>> st.Err("bad").error
    'bad'
    """

    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error

    def __eq__(self, other: object) -> bool:
        return other.__class__ is Err and other.error == self.error

    def __hash__(self) -> int:
        return hash(("Err", self.error))

    def __repr__(self) -> str:
        return f"Err({self.error!r})"


def not_records(operator: str, batch: Any) -> TypeError:
    """The error of a record operator given an Arrow batch (iterating it would give its
    columns, not its rows)."""
    return TypeError(f"{operator} takes Python records, but this stream carries "
                     f"{type(batch).__name__}es: use map_batches, filter_batches or "
                     f"inspect_batch on them, or from_arrow() for records (dicts or tuples)")


def _taken(batch: list, records: Iterator) -> Any:
    """The record of ``batch`` last taken from ``records`` (its iterator)."""
    return batch[len(batch) - length_hint(records) - 1]


class RecordsExchange(Exchange):
    """The exchange into an operator of Python records (``operator``): an Arrow batch, which
    its route (a function of one record) cannot route, is told as :func:`not_records`."""

    def __init__(self, route: Route, operator: str) -> None:
        super().__init__(route)
        self.operator = operator

    def refusal(self, batch: Any) -> Exception | None:
        return None if batch.__class__ is list else not_records(self.operator, batch)


class BasicOps(StreamCore):
    """map, flat_map, filter, inspect*, map_in_place, partition, branch, branch_when, ok_err."""

    __slots__ = ()

    def _per_record(self, name: str, transform: Callable[[Any, Iterator], Any]) -> Self:
        """A pipeline operator sending ``transform(time, records)`` for each input batch of
        records (the batch itself when it returns None), ``records`` an iterator over the
        batch: an error ``transform`` raises names the operator and the record last taken
        (the one the user's function raised on)."""
        def ctor(capability: Any, info: Any) -> Callable:
            capability.drop()

            def logic(input: Any, output: Any) -> None:
                for cap, batch in input:
                    if batch.__class__ is not list:
                        raise not_records(name, batch)
                    records = iter(batch)
                    try:
                        out = transform(cap.time, records)
                    except Exception as error:
                        raise operator_failed(name, info.address, error,
                                              _taken(batch, records)) from error
                    output.give_at(cap, batch if out is None else out)
            return logic
        return self.unary(Pipeline, name, ctor)

    def map(self, f: Callable[[Any], Any]) -> Self:
        """Each record ``x`` becomes ``f(x)``.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture()).extract()
        [(0, [0, 1, 4, 9])]
        """
        require_function("map", f)
        return self._per_record("Map", lambda time, records: [f(x) for x in records])

    def map_in_place(self, f: Callable[[Any], None]) -> Self:
        """Calls ``f(x)`` on each record to change it in place (timely's ``map_in_place``);
        records must be mutable, and not shared with another consumer of this stream (its
        consumers share record objects).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([[1], [2]]).map_in_place(lambda x: x.append(0))
        ...            .capture()).extract()
        [(0, [[1, 0], [2, 0]])]
        """
        require_function("map_in_place", f)

        def change(time: Any, records: Iterator) -> Any:
            for x in records:
                f(x)
        return self._per_record("MapInPlace", change)

    def flat_map(self, f: Callable[[Any], Any]) -> Self:
        """Each record ``x`` becomes the records of the iterable ``f(x)``. The results are
        produced lazily, in batches, as downstream consumes them, so an ``f`` that returns
        far more records than it gets runs in bounded memory.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream(["a b", "c"]).flat_map(str.split).capture()).extract()
        [(0, ['a', 'b', 'c'])]
        """
        require_function("flat_map", f)

        def ctor(capability: Any, info: Any) -> Callable:
            capability.drop()

            def produced(batch: list) -> Iterator:
                records = iter(batch)
                try:
                    yield from chain.from_iterable(map(f, records))
                except Exception as error:
                    raise operator_failed("FlatMap", info.address, error,
                                          _taken(batch, records)) from error

            def logic(input: Any, output: Any) -> None:
                for cap, batch in input:
                    if batch.__class__ is not list:
                        raise not_records("FlatMap", batch)
                    output.session(cap).give_iterator_later(produced(batch))
            return logic
        return self.unary(Pipeline, "FlatMap", ctor)

    def filter(self, pred: Callable[[Any], bool]) -> Self:
        """Keeps the records for which ``pred(x)`` is true.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture()).extract()
        [(0, [1, 3, 5])]
        """
        require_function("filter", pred)
        return self._per_record("Filter", lambda time, records: [x for x in records if pred(x)])

    def inspect(self, f: Callable[[Any], None]) -> Self:
        """Calls ``f(x)`` for each record and passes the records on unchanged.

        >>> import sparktimely as st
        >>> seen = []
        >>> _ = st.example(lambda s: s.to_stream([1, 2]).inspect(seen.append).probe())
        >>> seen
        [1, 2]
        """
        require_function("inspect", f)

        def look(time: Any, records: Iterator) -> None:
            for x in records:
                f(x)
        return self._per_record("Inspect", look)

    def inspect_time(self, f: Callable[[Any, Any], None]) -> Self:
        """Calls ``f(time, x)`` for each record and passes the records on unchanged.

        >>> import sparktimely as st
        >>> seen = []
        >>> _ = st.example(lambda s: s.to_stream([7]).inspect_time(lambda t, x: seen.append((t, x)))
        ...                .probe())
        >>> seen
        [(0, 7)]
        """
        require_function("inspect_time", f)

        def look(time: Any, records: Iterator) -> None:
            for x in records:
                f(time, x)
        return self._per_record("InspectTime", look)

    def inspect_batch(self, f: Callable[[Any, Any], None]) -> Self:
        """Calls ``f(time, batch)`` for each batch and passes it on unchanged.

        >>> import sparktimely as st
        >>> seen = []
        >>> _ = st.example(lambda s: s.to_stream([1, 2]).inspect_batch(
        ...     lambda t, b: seen.append((t, list(b)))).probe())
        >>> seen
        [(0, [1, 2])]
        """
        require_function("inspect_batch", f)

        def look(time: Any, batch: Any) -> Any:
            f(time, batch)
            return batch
        return per_batch(self, Pipeline, "InspectBatch", look)

    def inspect_core(self, f: Callable[[Ok | Err], None]) -> Self:
        """Calls ``f(st.Ok((time, batch)))`` for each batch and ``f(st.Err(frontier))`` (a
        list of times) each time the input frontier changes; passes batches on unchanged.

        >>> import sparktimely as st
        >>> events = []
        >>> _ = st.example(lambda s: s.to_stream([5]).delay(lambda x, t: x)
        ...                .inspect_core(events.append).probe())
        >>> events
        [Err([5]), Ok((5, [5])), Err([])]
        """
        require_function("inspect_core", f)

        def ctor(capability: Any, info: Any) -> Callable:
            capability.drop()
            seen = [self.scope.kind.minimum()]

            def logic(input: Any, output: Any) -> None:
                frontier = input.frontier.frontier()
                if frontier != seen:
                    seen[:] = frontier
                    f(Err(frontier))
                for cap, batch in input:
                    f(Ok((cap.time, batch)))
                    output.give_at(cap, batch)
            return logic
        return self.unary_frontier(Pipeline, "InspectCore", ctor)

    def partition(self, parts: int, route: Callable[[Any], tuple[int, Any]], *,
                  name: str = "Partition") -> list[Self]:
        """``parts`` streams: ``route(x)`` returns ``(part, y)`` and ``y`` goes to stream ``part``
        (``name`` names the operator).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     evens, odds = scope.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
        ...     return evens.capture(), odds.capture()
        >>> [c.extract() for c in st.example(build)]
        [[(0, [0, 2, 4])], [(0, [1, 3])]]
        """
        if parts.__class__ is not int or parts < 1:
            raise ValueError(f"{name}: parts must be a positive int, not {parts!r}")
        require_function(name, route)
        builder = OperatorBuilder(name, self.scope)
        input = builder.new_input(self, Pipeline)
        builder.set_notify_for(0, FrontierInterest.NEVER)
        outputs, streams = zip(*[builder.new_output() for _ in range(parts)])

        def ctor(capabilities: list) -> Callable:
            for capability in capabilities:
                capability.drop()

            def logic(frontiers: list) -> None:
                for cap, batch in input:
                    if batch.__class__ is not list:
                        raise not_records(name, batch)
                    buckets: list[list] = [[] for _ in range(parts)]
                    for x in batch:
                        try:
                            routed = route(x)
                        except Exception as error:
                            raise operator_failed(name, builder.address, error, x) from error
                        try:
                            part, y = routed
                            if 0 <= part < parts:
                                buckets[part].append(y)
                                continue
                        except (TypeError, ValueError):         # not a pair, part not an int
                            pass
                        raise ValueError(f"partition route returned {routed!r} for the record "
                                         f"{x!r}: it must return (part, record) with part an "
                                         f"int in 0..{parts - 1}")
                    for output, bucket in zip(outputs, buckets):
                        if bucket:
                            output.give_at(cap, bucket)
            return logic
        builder.build(ctor)
        return list(streams)

    def branch(self, pred: Callable[[Any, Any], bool]) -> tuple[Self, Self]:
        """Splits by ``pred(time, x)``: returns ``(false_stream, true_stream)``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     small, big = scope.to_stream([1, 9, 2]).branch(lambda t, x: x > 5)
        ...     return small.capture(), big.capture()
        >>> [c.extract() for c in st.example(build)]
        [[(0, [1, 2])], [(0, [9])]]
        """
        require_function("branch", pred)

        def split(time: Any, batch: Any, address: tuple) -> tuple[list, list]:
            if batch.__class__ is not list:
                raise not_records("Branch", batch)
            yes: list = []
            no: list = []
            records = iter(batch)
            try:
                for x in records:
                    (yes if pred(time, x) else no).append(x)
            except Exception as error:
                raise operator_failed("Branch", address, error, _taken(batch, records)) from error
            return no, yes
        return self._split("Branch", split)

    def branch_when(self, predicate: Callable[[Any], bool]) -> tuple[Self, Self]:
        """Splits whole batches by their time: ``predicate(time)`` false to the first
        stream, true to the second (timely's ``branch_when``).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     timed = scope.to_stream([1, 4, 6]).delay(lambda x, t: x)
        ...     early, late = timed.branch_when(lambda t: t >= 4)
        ...     return early.capture(), late.capture()
        >>> [c.extract() for c in st.example(build)]
        [[(1, [1])], [(4, [4]), (6, [6])]]
        """
        require_function("branch_when", predicate)
        return self._split("BranchWhen", lambda time, batch, address:
                           ((), batch) if predicate(time) else (batch, ()))

    def _split(self, name: str, split: Callable[[Any, Any, tuple], tuple[Any, Any]]
               ) -> tuple[Self, Self]:
        """Two streams: ``split(time, batch, address)`` (the operator's address) returns the
        batches for the first and second."""
        builder = OperatorBuilder(name, self.scope)
        input = builder.new_input(self, Pipeline)
        builder.set_notify_for(0, FrontierInterest.NEVER)
        (output_false, false_stream), (output_true, true_stream) = (builder.new_output(),
                                                                    builder.new_output())

        def ctor(capabilities: list) -> Callable:
            for capability in capabilities:
                capability.drop()

            def logic(frontiers: list) -> None:
                for cap, batch in input:
                    no, yes = split(cap.time, batch, builder.address)
                    if len(no):
                        output_false.give_at(cap, no)
                    if len(yes):
                        output_true.give_at(cap, yes)
            return logic
        builder.build(ctor)
        return false_stream, true_stream

    def ok_err(self, f: Callable[[Any], Ok | Err]) -> tuple[Self, Self]:
        """Splits by ``f(x)``, which returns ``Ok(v)`` or ``Err(e)``: returns ``(oks, errs)``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     checked = scope.to_stream(["1", "x"]).ok_err(
        ...         lambda s: st.Ok(int(s)) if s.isdigit() else st.Err(s))
        ...     return [c.capture() for c in checked]
        >>> [c.extract() for c in st.example(build)]
        [[(0, [1])], [(0, ['x'])]]
        """
        require_function("ok_err", f)

        def route(x: Any) -> tuple[int, Any]:
            result = f(x)
            if result.__class__ is Ok:
                return 0, result.value
            if result.__class__ is Err:
                return 1, result.error
            raise TypeError(f"ok_err function must return st.Ok or st.Err, not {result!r}")
        oks, errs = self.partition(2, route, name="OkErr")
        return oks, errs
