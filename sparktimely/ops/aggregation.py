"""Per-time and keyed aggregation: accumulate, count, aggregate and state_machine."""
from __future__ import annotations

import copy
from typing import Any, Callable, Self

from ..dataflow import Pipeline
from ..dataflow.channels import route_name
from ..dataflow.stream import StreamCore
from ..errors import require_function
from ..hashing import Route, Routed, stable_hash
from ..ordering import one_nan
from ._stash import PerTime
from .basic import RecordsExchange, not_records
from .recovery import KeyedState


class AggregationOps(StreamCore):
    """``accumulate``, ``count``, ``aggregate`` and ``state_machine``."""

    __slots__ = ()

    def accumulate(self, init: Any, f: Callable[[Any, list], Any]) -> Self:
        """Folds each time's batches on this worker, ``acc = f(acc, batch)`` starting from a
        deep copy of ``init`` (each time its own), and sends ``acc`` once the time is
        complete. Epoch checkpoints (:mod:`sparktimely.io`) hold nothing of it: its state
        lives per time and is empty once an epoch is complete everywhere; inputs of later
        epochs are replayed after a resume.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream(range(5)).accumulate(0, lambda a, b: a + sum(b))
        ...            .capture()).extract()
        [(0, [10])]
        """
        require_function("accumulate", f)
        totals: PerTime[list] = PerTime(lambda: [copy.deepcopy(init)])

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                total = totals.at(cap, notificator)
                total[0] = f(total[0], batch)
            for cap, total in totals.completed(notificator):
                output.give_at(cap, total)
        return self.unary_notify(Pipeline, "Accumulate", [], logic)

    def count(self) -> Self:
        """The number of records at each time on this worker, once the time is complete.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream("hello").count().capture()).extract()
        [(0, [5])]
        """
        return self.accumulate(0, lambda total, batch: total + len(batch))

    def aggregate(self, fold: Callable[[Any, Any, Any], Any], emit: Callable[[Any, Any], Any],
                  route: Route = stable_hash) -> Self:
        """For ``(key, val)`` records: per time and key, ``agg = fold(key, val, agg)``
        (``agg`` starts as None) on worker ``route(key) % peers``; once the time is complete,
        sends ``emit(key, agg)`` for each key. ``route`` defaults to
        :func:`~sparktimely.stable_hash`; a route must give every worker the same answer
        (never the salted built-in ``hash``). NaN keys, alone or in tuples, are one key. As
        with :meth:`accumulate`, its state lives per time, so epoch checkpoints need to hold
        nothing of it.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     words = scope.to_stream("a b a".split()).map(lambda w: (w, 1))
        ...     return words.aggregate(lambda k, v, agg: (agg or 0) + v,
        ...                            lambda k, agg: (k, agg), st.stable_hash).capture()
        >>> st.example(build).extract()
        [(0, [('a', 2), ('b', 1)])]
        """
        require_function("aggregate", fold, "fold: expected a function")
        require_function("aggregate", emit, "emit: expected a function")
        require_function("aggregate", route, "route: expected a function")
        aggregates: PerTime[dict] = PerTime(dict)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                if batch.__class__ is not list:
                    raise not_records("Aggregate", batch)
                per_key = aggregates.at(cap, notificator)
                get = per_key.get
                try:
                    for record in batch:
                        if record.__class__ is not tuple:
                            _check_pair("Aggregate", record)
                        key, val = record
                        if key != key or isinstance(key, tuple):
                            key = one_nan(key)
                        per_key[key] = fold(key, val, get(key))
                except (TypeError, ValueError) as error:
                    raise _no_pair("Aggregate", batch) or _unhashable("Aggregate", batch) \
                        or error
            for cap, per_key in aggregates.completed(notificator):
                output.give_at(cap, [emit(k, agg) for k, agg in per_key.items()])
        return self.unary_notify(RecordsExchange(_by_key(route, "Aggregate"), "Aggregate"),
                                 "Aggregate", [], logic)

    def state_machine(self, fold: Callable[[Any, Any, Any], tuple],
                      route: Route = stable_hash) -> Self:
        """Keyed state across times: for each ``(key, val)`` in time order,
        ``fold(key, val, state)`` returns ``(remove, outputs)`` or ``(remove, outputs,
        new_state)``. ``state`` starts as None; ``remove`` discards it; the 2-tuple form keeps
        it as it is (a mutable state a 3-tuple set may be changed in place). Outputs are sent
        at the record's time once that time is complete. Keys live on worker
        ``route(key) % peers`` (default :func:`~sparktimely.stable_hash`); NaN keys, alone or
        in tuples, are one key. Epoch checkpoints
        (:mod:`sparktimely.io`) hold the state of every key, so a resumed run continues from
        it, at any number of workers.

        >>> import sparktimely as st
        >>> def running_sum(key, val, total):
        ...     total = (total or 0) + val
        ...     return False, [(key, total)], total
        >>> def build(scope):
        ...     records = scope.to_stream([("x", 1), ("x", 2), ("y", 5)])
        ...     return records.state_machine(running_sum, st.stable_hash).capture()
        >>> st.example(build).extract()
        [(0, [('x', 1), ('x', 3), ('y', 5)])]
        """
        require_function("state_machine", fold)
        require_function("state_machine", route, "route: expected a function")
        states: dict = {}
        pending: PerTime[list] = PerTime(list)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                if batch.__class__ is not list:
                    raise not_records("StateMachine", batch)
                pending.at(cap, notificator).extend(batch)
            for cap, records in pending.completed(notificator):
                results = []
                try:
                    for record in records:
                        if record.__class__ is not tuple:
                            _check_pair("StateMachine", record)
                        key, val = record
                        if key != key or isinstance(key, tuple):
                            key = one_nan(key)
                        outcome = _FOLDING
                        outcome = fold(key, val, states.get(key))
                        if len(outcome) == 3:
                            remove, outputs, states[key] = outcome
                        else:
                            remove, outputs = outcome
                        if remove:
                            states.pop(key, None)
                        results.extend(outputs)
                except (TypeError, ValueError) as error:
                    raise _no_pair("StateMachine", records) or \
                        _unhashable("StateMachine", records) or _misshapen(outcome) or error
                output.give_at(cap, results)
        stream = self.unary_notify(RecordsExchange(_by_key(route, "StateMachine"),
                                                   "StateMachine"), "StateMachine", [], logic)
        index = len(self.scope.dataflow.operators) - 1
        KeyedState(self.scope, f"StateMachine#{index}", index, lambda: states,
                   lambda state: states.update((one_nan(k), v) for k, v in state.items()),
                   route)      # the checkpoint's NaNs are objects of their own
        return stream


def _check_pair(operator: str, record: Any) -> None:
    """A TypeError (:func:`_no_pair`) unless ``record`` (not a tuple: those are checked by
    unpacking them) is a ``(key, val)`` pair.

    >>> _check_pair("Aggregate", "ab")
    Traceback (most recent call last):
    TypeError: Aggregate: the record 'ab' is not a (key, val) pair
    """
    error = _no_pair(operator, [record])
    if error is not None:
        raise error


def _no_pair(operator: str, records: list) -> TypeError | None:
    """A TypeError naming ``operator`` and the first of ``records`` that is no ``(key,
    val)`` pair (a tuple or list of two), or None if all are (looked through only once a
    loop over them failed: a loop that works unpacks its tuples at full speed).

    >>> _no_pair("Aggregate", [("a", 1), ("a", 1, 2)])
    TypeError("Aggregate: the record ('a', 1, 2) is not a (key, val) pair")
    >>> _no_pair("Aggregate", [("a", 1), ["b", 2]]) is None
    True
    """
    for record in records:
        if not (isinstance(record, (tuple, list)) and len(record) == 2):
            return TypeError(f"{operator}: the record {record!r} is not a (key, val) pair")
    return None


def _unhashable(operator: str, records: list) -> TypeError | None:
    """A TypeError naming ``operator`` and the first of ``records`` (``(key, val)`` pairs)
    whose key cannot be a dict key, or None if every key can.

    >>> _unhashable("Aggregate", [("a", 1), (["b"], 2)])
    TypeError("Aggregate: the key ['b'] of the record (['b'], 2) is a list, which cannot be hashed; a key must be hashable (e.g. a tuple, not a list)")
    """
    for key, val in records:
        try:
            hash(key)
        except TypeError:
            return TypeError(f"{operator}: the key {key!r} of the record {(key, val)!r} is a "
                             f"{type(key).__name__}, which cannot be hashed; a key must be "
                             f"hashable (e.g. a tuple, not a list)")
    return None


_FOLDING = object()
"""What ``outcome`` holds while a state machine's fold runs (so that an error of the fold's
own is not blamed on what it returned)."""


def _misshapen(outcome: Any) -> TypeError | None:
    """A TypeError saying what a state machine's fold must return, if ``outcome`` (what it
    returned) is not that; None if it is, or if the fold itself raised.

    >>> _misshapen(7)
    TypeError('StateMachine: the fold returned 7: it must return (remove, outputs) or (remove, outputs, state), outputs an iterable of records')
    >>> _misshapen((False, [1])) is None
    True
    """
    if outcome is _FOLDING:
        return None
    if isinstance(outcome, (tuple, list)) and len(outcome) in (2, 3):
        try:
            iter(outcome[1])
            return None
        except TypeError:
            pass
    return TypeError(f"StateMachine: the fold returned {outcome!r:.80}: it must return (remove, "
                     f"outputs) or (remove, outputs, state), outputs an iterable of records")


def _by_key(route: Route, operator: str) -> Route:
    """``route`` of the key of a ``(key, val)`` record, named ``route(key)`` (as an
    exchange's error shows it), for ``operator`` (which a record that is no pair names).

    >>> _by_key(stable_hash, "Aggregate").__qualname__, _by_key(len, "Aggregate")(("abc", 1))
    ('stable_hash(key)', 3)
    """
    def by_key(record: Any) -> Routed:
        if record.__class__ is not tuple:
            _check_pair(operator, record)
        return route(record[0])
    by_key.__qualname__ = f"{route_name(route)}(key)"
    return by_key
