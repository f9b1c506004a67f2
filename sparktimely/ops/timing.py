"""Operators that move records in time: delay, delay_batch and reclock."""
from __future__ import annotations

from typing import Any, Callable, Self

from ..dataflow import Pipeline
from ..dataflow.stream import StreamCore
from ..progress.timestamp import less_equal
from ._stash import PerTime


def _later(time: Any, new_time: Any, operator: str) -> Any:
    if not less_equal(time, new_time):
        raise ValueError(f"{operator}: new time {new_time!r} is earlier than the "
                         f"record's time {time!r}")
    return new_time


class TimingOps(StreamCore):
    """``delay``, ``delay_total``, ``delay_batch`` and ``reclock``."""

    __slots__ = ()

    def delay(self, f: Callable[[Any, Any], Any]) -> Self:
        """Re-stamps each record ``x`` at time ``t`` with ``f(x, t)`` (not earlier than
        ``t``); records are sent once their new time is complete upstream.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([1, 5]).delay(lambda x, t: x).capture()).extract()
        [(1, [1]), (5, [5])]
        """
        stash: PerTime[list] = PerTime(list)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                time = cap.time
                for x in batch:
                    stash.at(cap, notificator, _later(time, f(x, time), "delay")).append(x)
            for cap, records in stash.completed(notificator):
                output.give_at(cap, records)
        return self.unary_notify(Pipeline, "Delay", [], logic)

    def delay_total(self, f: Callable[[Any, Any], Any]) -> Self:
        """:meth:`delay` for totally ordered times (the same result; kept for timely's API).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([2]).delay_total(lambda x, t: t + 1)
        ...            .capture()).extract()
        [(1, [2])]
        """
        return self.delay(f)

    def delay_batch(self, f: Callable[[Any], Any]) -> Self:
        """Re-stamps each whole batch at time ``t`` with ``f(t)`` (not earlier than ``t``),
        without looking at its records; sent once the new time is complete upstream.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([1, 2]).delay_batch(lambda t: t + 10)
        ...            .capture()).extract()
        [(10, [1, 2])]
        """
        stash: PerTime[list] = PerTime(list)

        def logic(input: Any, output: Any, notificator: Any) -> None:
            for cap, batch in input:
                stash.at(cap, notificator, _later(cap.time, f(cap.time), "delay_batch")).append(batch)
            for cap, batches in stash.completed(notificator):
                for batch in batches:
                    output.give_at(cap, batch)
        return self.unary_notify(Pipeline, "DelayBatch", [], logic)

    def reclock(self, clock: Self) -> Self:
        """Holds each record until a record of ``clock`` arrives at a time not earlier than
        the record's, and re-stamps it with that clock time.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     data = scope.to_stream(range(6)).delay(lambda x, t: x)
        ...     ticks = scope.to_stream([2, 4]).delay(lambda x, t: x)
        ...     return data.reclock(ticks).capture()
        >>> st.example(build).extract()
        [(2, [0, 1, 2]), (4, [3, 4])]
        """
        stash: dict = {}

        def logic(data: Any, ticks: Any, output: Any, notificator: Any) -> None:
            for cap, batch in data:
                stash.setdefault(cap.time, []).extend(batch)
            for cap, _ in ticks:
                notificator.notify_at(cap.retain())
            for cap, _ in notificator:
                ready = [t for t in stash if less_equal(t, cap.time)]
                records = [x for t in sorted(ready) for x in stash.pop(t)]
                if records:
                    output.give_at(cap, records)
        return self.binary_notify(clock, Pipeline, Pipeline, "Reclock", [], logic)
