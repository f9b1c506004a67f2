"""Per-time and keyed aggregation: accumulate, count, aggregate and state_machine."""
from __future__ import annotations

import copy
from typing import Any, Callable

from ..dataflow import Exchange, Pipeline, Stream
from ..hashing import stable_hash


def accumulate(stream: Stream, init: Any, f: Callable[[Any, list], Any]) -> Stream:
    """Folds each time's batches on this worker, ``acc = f(acc, batch)`` starting from a
    copy of ``init``, and sends ``acc`` once the time is complete.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream(range(5)).accumulate(0, lambda a, b: a + sum(b))
    ...            .capture()).extract()
    [(0, [10])]
    """
    totals: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            time = cap.time
            if time not in totals:
                totals[time] = copy.copy(init)
                notificator.notify_at(cap.retain())
            totals[time] = f(totals[time], batch)
        for cap, _ in notificator:
            output.give_at(cap, [totals.pop(cap.time)])
    return stream.unary_notify(Pipeline, "Accumulate", [], logic)


def count(stream: Stream) -> Stream:
    """The number of records at each time on this worker, once the time is complete.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream("hello").count().capture()).extract()
    [(0, [5])]
    """
    return accumulate(stream, 0, lambda total, batch: total + len(batch))


def aggregate(stream: Stream, fold: Callable[[Any, Any, Any], Any],
              emit: Callable[[Any, Any], Any],
              route: Callable[[Any], int] = stable_hash) -> Stream:
    """For ``(key, val)`` records: per time and key, ``agg = fold(key, val, agg)`` (``agg``
    starts as None) on worker ``route(key) % peers``; once the time is complete, sends
    ``emit(key, agg)`` for each key. ``route`` defaults to :func:`~sparktimely.stable_hash`;
    a route must give every worker the same answer (never the salted built-in ``hash``).

    >>> import sparktimely as st
    >>> def build(scope):
    ...     words = scope.to_stream("a b a".split()).map(lambda w: (w, 1))
    ...     return words.aggregate(lambda k, v, agg: (agg or 0) + v,
    ...                            lambda k, agg: (k, agg), st.stable_hash).capture()
    >>> st.example(build).extract()
    [(0, [('a', 2), ('b', 1)])]
    """
    aggregates: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            time = cap.time
            per_key = aggregates.get(time)
            if per_key is None:
                per_key = aggregates[time] = {}
                notificator.notify_at(cap.retain())
            get = per_key.get
            for key, val in batch:
                per_key[key] = fold(key, val, get(key))
        for cap, _ in notificator:
            output.give_at(cap, [emit(k, agg) for k, agg in aggregates.pop(cap.time).items()])
    return stream.unary_notify(Exchange(lambda kv: route(kv[0])), "Aggregate", [], logic)


def state_machine(stream: Stream, fold: Callable,
                  route: Callable[[Any], int] = stable_hash) -> Stream:
    """Keyed state across times: for each ``(key, val)`` in time order,
    ``fold(key, val, state)`` returns ``(remove, outputs)`` or ``(remove, outputs,
    new_state)``. ``state`` starts as None; ``remove`` discards it. Outputs are sent at the
    record's time once that time is complete. Keys live on worker ``route(key) % peers``
    (default :func:`~sparktimely.stable_hash`).

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
    states: dict = {}
    pending: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            time = cap.time
            if time not in pending:
                pending[time] = []
                notificator.notify_at(cap.retain())
            pending[time].extend(batch)
        for cap, _ in notificator:
            results = []
            for key, val in pending.pop(cap.time):
                outcome = fold(key, val, states.get(key))
                if len(outcome) == 3:
                    remove, outputs, states[key] = outcome
                else:
                    remove, outputs = outcome
                if remove:
                    states.pop(key, None)
                results.extend(outputs)
            output.give_at(cap, results)
    return stream.unary_notify(Exchange(lambda kv: route(kv[0])), "StateMachine", [], logic)
