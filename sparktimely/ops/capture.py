"""Observing streams from outside: probe and capture."""
from __future__ import annotations

from typing import Any

from ..dataflow import Pipeline, ProbeHandle, Stream
from ..dataflow.operator import sink_operator


def probe_with(stream: Stream, handle: ProbeHandle) -> Stream:
    """Adds this stream's frontier to ``handle``; returns the stream for chaining."""
    def logic(input):
        for _ in input:
            pass
    handle._watch(sink_operator(stream, Pipeline, "Probe", logic).frontier)
    return stream


def probe(stream: Stream) -> ProbeHandle:
    """A handle reporting which times may still appear on this stream.

    >>> import sparktimely as st
    >>> probe = st.example(lambda scope: scope.to_stream([1]).probe())
    >>> probe.done()
    True
    """
    handle = ProbeHandle()
    probe_with(stream, handle)
    return handle


class Capture:
    """What a stream carried on this worker: ``extract()`` gives ``(time, records)`` pairs."""

    def __init__(self) -> None:
        self._batches: list[tuple[Any, Any]] = []

    def _record(self, time, batch) -> None:
        self._batches.append((time, batch))

    def extract(self) -> list[tuple[Any, Any]]:
        """``(time, sorted records)`` per distinct time, sorted by time; Arrow streams give
        ``(time, pyarrow.Table)`` with rows sorted by its columns, left to right."""
        by_time: dict = {}
        for time, batch in self._batches:
            by_time.setdefault(time, []).append(batch)
        result = []
        for time, batches in by_time.items():
            if batches[0].__class__ is list:
                records = [x for batch in batches for x in batch]
                try:
                    records.sort()
                except TypeError:
                    pass
                result.append((time, records))
            else:
                import pyarrow
                table = pyarrow.Table.from_batches(batches)
                try:
                    table = table.sort_by([(name, "ascending") for name in table.column_names])
                except pyarrow.ArrowException:
                    pass
                result.append((time, table))
        try:
            result.sort(key=lambda pair: pair[0])
        except TypeError:
            pass
        return result


def capture(stream: Stream) -> Capture:
    """Records everything the stream carries on this worker.

    >>> import sparktimely as st
    >>> st.example(lambda scope: scope.to_stream([2, 1]).capture()).extract()
    [(0, [1, 2])]
    """
    captured = Capture()

    def logic(input):
        for cap, batch in input:
            captured._record(cap.time, batch)
    stream.sink(Pipeline, "Capture", logic)
    return captured
