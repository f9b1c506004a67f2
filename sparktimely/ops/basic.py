"""Record-at-a-time operators that keep records on their worker: map, filter, and friends.

Each runs the user's function inside one list comprehension per batch.
"""
from __future__ import annotations

from typing import Any, Callable

from ..dataflow import OperatorBuilder, Pipeline, Stream


def _per_batch(stream: Stream, name: str, transform: Callable[[Any, list], list]) -> Stream:
    """A pipeline operator sending ``transform(time, batch)`` for each input batch."""
    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                output.give_at(cap, transform(cap.time, batch))
        return logic
    return stream.unary(Pipeline, name, ctor)


def map(stream: Stream, f: Callable[[Any], Any]) -> Stream:
    """Each record ``x`` becomes ``f(x)``.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture()).extract()
    [(0, [0, 1, 4, 9])]
    """
    return _per_batch(stream, "Map", lambda time, batch: [f(x) for x in batch])


def flat_map(stream: Stream, f: Callable[[Any], Any]) -> Stream:
    """Each record ``x`` becomes the records of the iterable ``f(x)``.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream(["a b", "c"]).flat_map(str.split).capture()).extract()
    [(0, ['a', 'b', 'c'])]
    """
    return _per_batch(stream, "FlatMap", lambda time, batch: [y for x in batch for y in f(x)])


def filter(stream: Stream, predicate: Callable[[Any], bool]) -> Stream:
    """Keeps the records for which ``predicate(x)`` is true.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture()).extract()
    [(0, [1, 3, 5])]
    """
    return _per_batch(stream, "Filter", lambda time, batch: [x for x in batch if predicate(x)])


def inspect(stream: Stream, f: Callable[[Any], None]) -> Stream:
    """Calls ``f(x)`` for each record and passes the records on unchanged."""
    def look(time, batch):
        for x in batch:
            f(x)
        return batch
    return _per_batch(stream, "Inspect", look)


def inspect_time(stream: Stream, f: Callable[[Any, Any], None]) -> Stream:
    """Calls ``f(time, x)`` for each record and passes the records on unchanged."""
    def look(time, batch):
        for x in batch:
            f(time, x)
        return batch
    return _per_batch(stream, "InspectTime", look)


def inspect_batch(stream: Stream, f: Callable[[Any, Any], None]) -> Stream:
    """Calls ``f(time, batch)`` for each batch and passes it on unchanged."""
    def look(time, batch):
        f(time, batch)
        return batch
    return _per_batch(stream, "InspectBatch", look)


def concat(stream: Stream, other: Stream) -> Stream:
    """The records of both streams."""
    return stream.scope.concatenate([stream, other])


def partition(stream: Stream, parts: int, route: Callable[[Any], tuple[int, Any]]) -> list[Stream]:
    """``parts`` streams: ``route(x)`` returns ``(part, y)`` and ``y`` goes to stream ``part``.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     evens, odds = scope.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
    ...     return evens.capture(), odds.capture()
    >>> [c.extract() for c in st.example(build)]
    [[(0, [0, 2, 4])], [(0, [1, 3])]]
    """
    builder = OperatorBuilder("Partition", stream.scope)
    input = builder.new_input(stream, Pipeline)
    outputs, streams = zip(*[builder.new_output() for _ in range(parts)])

    def ctor(capabilities):
        for capability in capabilities:
            capability.drop()

        def logic(frontiers):
            for cap, batch in input:
                buckets: list[list] = [[] for _ in range(parts)]
                for x in batch:
                    part, y = route(x)
                    if not 0 <= part < parts:
                        raise ValueError(f"partition route returned part {part}, "
                                         f"not in 0..{parts - 1}")
                    buckets[part].append(y)
                for output, bucket in zip(outputs, buckets):
                    if bucket:
                        output.give_at(cap, bucket)
        return logic
    builder.build(ctor)
    return list(streams)


def branch(stream: Stream, predicate: Callable[[Any, Any], bool]) -> tuple[Stream, Stream]:
    """Splits by ``predicate(time, x)``: returns ``(false_stream, true_stream)``."""
    builder = OperatorBuilder("Branch", stream.scope)
    input = builder.new_input(stream, Pipeline)
    (output_false, false_stream), (output_true, true_stream) = builder.new_output(), builder.new_output()

    def ctor(capabilities):
        for capability in capabilities:
            capability.drop()

        def logic(frontiers):
            for cap, batch in input:
                time = cap.time
                yes, no = [], []
                for x in batch:
                    (yes if predicate(time, x) else no).append(x)
                if no:
                    output_false.give_at(cap, no)
                if yes:
                    output_true.give_at(cap, yes)
        return logic
    builder.build(ctor)
    return false_stream, true_stream


class Ok:
    """A successful result for :func:`ok_err`."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Ok({self.value!r})"


class Err:
    """A failed result for :func:`ok_err`."""

    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"Err({self.error!r})"


def ok_err(stream: Stream, f: Callable[[Any], Ok | Err]) -> tuple[Stream, Stream]:
    """Splits by ``f(x)``, which returns ``Ok(v)`` or ``Err(e)``: returns ``(oks, errs)``.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     checked = scope.to_stream(["1", "x"]).ok_err(
    ...         lambda s: st.Ok(int(s)) if s.isdigit() else st.Err(s))
    ...     return [c.capture() for c in checked]
    >>> [c.extract() for c in st.example(build)]
    [[(0, [1])], [(0, ['x'])]]
    """
    def route(x):
        result = f(x)
        if result.__class__ is Ok:
            return 0, result.value
        if result.__class__ is Err:
            return 1, result.error
        raise TypeError(f"ok_err function must return st.Ok or st.Err, not {result!r}")
    oks, errs = partition(stream, 2, route)
    return oks, errs
