"""Event-time windows (``import sparktimely.windows as win``).

Records carry their own event time (an int, e.g. epoch milliseconds); a stream's timely
times are **watermarks**: a record at timely time ``t`` arrived when its input promised no
more event times below ``t``. The frontier across all workers is the global watermark (the
minimum of every worker's input), so a window's result is exact once the frontier passes it.

- :class:`EventTimeInput`: an input whose time follows the event times of what it sends
  (``st.io.FileSource(..., event_time="ts", out_of_order=W)`` does the same for files).
- Window kinds :class:`Tumbling`, :class:`Sliding`, :class:`Session`; results name their
  :class:`Window`.
- Aggregations :func:`count`, :func:`sum`, :func:`min`, :func:`max`, :func:`mean`,
  :func:`collect`, :func:`fold` for Python records; Arrow batches take a dict
  ``{out_column: (op, in_column)}``.
- ``stream.window(kind, time_of=, aggregate=, key=None, lateness=0)`` returns a
  :class:`WindowOut` with ``.results`` and ``.late`` streams.

>>> import sparktimely as st
>>> import sparktimely.windows as win
>>> def job(worker):
...     readings = win.EventTimeInput(out_of_order=5)
...     def build(scope):
...         out = scope.input_from(readings).window(
...             win.Tumbling(10), time_of=lambda r: r[0], key=lambda r: r[1],
...             aggregate=win.max(lambda r: r[2]))
...         return out.results.capture(), out.late.capture()
...     results, late = worker.dataflow(build)
...     for reading in [(1, "a", 3), (8, "a", 5), (16, "a", 1), (4, "a", 9), (30, "a", 2)]:
...         readings.send(reading, reading[0])
...     readings.close()
...     worker.run()
...     return results.extract(), late.extract()
>>> results, late = st.execute_directly(job)
>>> for time, maxima in results:
...     print(time, maxima)
9 [('a', Window(start=0, end=10), 5)]
19 [('a', Window(start=10, end=20), 1)]
39 [('a', Window(start=30, end=40), 2)]
>>> late                     # sent when the watermark was already 16 - 5 = 11
[(11, [(4, 'a', 9)])]
"""
from __future__ import annotations

from typing import Any

from ..dataflow import InputHandle
from ..ops.windowing.aggregations import (Aggregation, collect, count, fold, max, mean, min,
                                          sum)
from ..ops.windowing.kinds import Session, Sliding, Tumbling, Window
from ..ops.windowing.operator import WindowOut

__all__ = ["Aggregation", "EventTimeInput", "Session", "Sliding", "Tumbling", "Window",
           "WindowOut", "collect", "count", "fold", "max", "mean", "min", "sum"]


class EventTimeInput(InputHandle):
    """An input handle (use it with ``scope.input_from``) whose time follows the data:
    ``send(record, event_time)`` sends the record at the handle's current time, then moves
    the time to ``max(time, event_time - out_of_order)``: the watermark. ``advance_to(t)``,
    ``time()``, ``flush()``, ``close()`` and ``send_batch(records)`` (at the current time)
    are those of :class:`~sparktimely.InputHandle`. Each worker's input is its own
    watermark and the frontier is their minimum, so an idle worker's input holds every
    window back until it is advanced or closed.

    Records go out in one batch per time: when every record moves the watermark, every
    record is a batch of its own, and each time costs the window operator a notification.
    For throughput, send a batch with ``send_batch`` and then ``advance_to`` its watermark
    (``st.io.FileSource(..., event_time=...)`` does that per file batch).

    >>> import sparktimely as st
    >>> import sparktimely.windows as win
    >>> def job(worker):
    ...     events = win.EventTimeInput(out_of_order=10)
    ...     captured = worker.dataflow(lambda scope: scope.input_from(events).capture())
    ...     for ts in (100, 95, 130, 112):
    ...         events.send(ts, ts)
    ...     times = events.time()
    ...     events.close()
    ...     worker.run()
    ...     return times, captured.extract()
    >>> st.execute_directly(job)
    (120, [(0, [100]), (90, [95, 130]), (120, [112])])
    """

    def __init__(self, out_of_order: int = 0, name: str = "input") -> None:
        if out_of_order.__class__ is not int or out_of_order < 0:
            raise ValueError(f"EventTimeInput: out_of_order must be a non-negative int, got "
                             f"{out_of_order!r}")
        super().__init__(name)
        self.out_of_order = out_of_order

    def send(self, record: Any, event_time: int) -> None:  # type: ignore[override]
        """Send ``record`` at the current time, then move the time to
        ``event_time - out_of_order`` if that is later.

        >>> import sparktimely as st, sparktimely.windows as win
        >>> def job(worker):
        ...     events = win.EventTimeInput(out_of_order=10)
        ...     captured = worker.dataflow(lambda scope: scope.input_from(events).capture())
        ...     events.send("a", 25); events.send("b", 20); events.close()
        ...     worker.run()
        ...     return captured.extract()
        >>> st.execute_directly(job)               # "b" at the watermark 25 - 10 = 15
        [(0, ['a']), (15, ['b'])]
        """
        if event_time.__class__ is not int:
            raise TypeError(f"{self.name}.send({record!r}): event_time {event_time!r} is "
                            f"not an int")
        super().send(record)
        watermark = event_time - self.out_of_order
        if watermark > self.time():
            self.advance_to(watermark)
