"""Operators that move records in time: delay and reclock."""
from __future__ import annotations

from typing import Any, Callable

from ..dataflow import Pipeline, Stream
from ..progress.timestamp import less_equal


def delay(stream: Stream, f: Callable[[Any, Any], Any]) -> Stream:
    """Re-stamps each record ``x`` at time ``t`` with ``f(x, t)`` (not earlier than ``t``);
    records are sent once their new time is complete upstream.

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream([1, 5]).delay(lambda x, t: x).capture()).extract()
    [(1, [1]), (5, [5])]
    """
    def logic(input, output, notificator):
        for cap, batch in input:
            time = cap.time
            for x in batch:
                new_time = f(x, time)
                if not less_equal(time, new_time):
                    raise ValueError(f"delay: new time {new_time!r} is earlier than the "
                                     f"record's time {time!r}")
                bucket = stash.get(new_time)
                if bucket is None:
                    stash[new_time] = [x]
                    notificator.notify_at(cap.delayed(new_time))
                else:
                    bucket.append(x)
        for cap, _ in notificator:
            output.give_at(cap, stash.pop(cap.time))
    stash: dict = {}
    return stream.unary_notify(Pipeline, "Delay", [], logic)


def delay_total(stream: Stream, f: Callable[[Any, Any], Any]) -> Stream:
    """:func:`delay` for totally ordered times (the same result; kept for timely's API)."""
    return delay(stream, f)


def reclock(stream: Stream, clock: Stream) -> Stream:
    """Holds each record until a record of ``clock`` arrives at a time not earlier than the
    record's, and re-stamps it with that clock time.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     data = scope.to_stream(range(6)).delay(lambda x, t: x)
    ...     ticks = scope.to_stream([2, 4]).delay(lambda x, t: x)
    ...     return data.reclock(ticks).capture()
    >>> st.example(build).extract()
    [(2, [0, 1, 2]), (4, [3, 4])]
    """
    stash: dict = {}

    def logic(data, ticks, output, notificator):
        for cap, batch in data:
            stash.setdefault(cap.time, []).extend(batch)
        for cap, _ in ticks:
            notificator.notify_at(cap.retain())
        for cap, _ in notificator:
            ready = [t for t in stash if less_equal(t, cap.time)]
            records = [x for t in sorted(ready) for x in stash.pop(t)]
            if records:
                output.give_at(cap, records)
    return stream.binary_notify(clock, Pipeline, Pipeline, "Reclock", [], logic)
