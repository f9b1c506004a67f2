"""What the ``"timely"`` events add up to: time and records per operator and channel, and
where each worker's time went (operators, progress, communication, checkpoints, parked,
other), what
ddshow shows first when asked "why is it slow".

>>> from sparktimely.logging import OperatesEvent, ScheduleEvent
>>> events = [OperatesEvent(0, 0, 0, (0, 0), "Map", "dataflow-0"),
...           ScheduleEvent(1_000, 0, 0, True), ScheduleEvent(4_000, 0, 0, False)]
>>> summary = summarize(events)
>>> summary.operators[0].runs, summary.operators[0].busy_ns
(1, 3000)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .events import (ChannelsEvent, MessagesEvent, OperatesEvent, ParkEvent, ScheduleEvent,
                     StepsEvent)


@dataclass
class OperatorSummary:
    """One operator over all workers: ``runs`` (schedulings), ``busy_ns`` (time in its
    logic), ``records_in`` and ``records_out`` (records on the channels into and out of it).

    >>> OperatorSummary(3, "Map").busy_ns
    0
    """

    id: int
    name: str
    runs: int = 0
    busy_ns: int = 0
    records_in: int = 0
    records_out: int = 0


@dataclass
class WorkerSummary:
    """One worker: the span from its first to its last event (``first_ns``, ``last_ns``:
    ``logged_ns``) and where that time went, in parts that add up to it: ``busy_ns`` (in
    operators' logic), ``progress_ns`` (the rest of its steps: progress tracking,
    scheduling), ``communication_ns`` (taking in and sending out messages),
    ``checkpoint_ns`` (epoch checkpoints), ``parked_ns`` (waiting for work) and
    ``other_ns`` (outside steps: the program's own code between them, building dataflows,
    writing logs). ``steps`` and ``step_ns`` come from its
    :class:`~sparktimely.logging.StepsEvent` records.

    >>> worker = WorkerSummary(0, busy_ns=50, parked_ns=20, first_ns=0, last_ns=100,
    ...                        steps=3, step_ns=70, communication_ns=5, checkpoint_ns=4)
    >>> worker.progress_ns, worker.other_ns
    (11, 10)
    """

    worker: int
    busy_ns: int = 0
    parked_ns: int = 0
    first_ns: int = 0
    last_ns: int = 0
    steps: int = 0
    step_ns: int = 0
    communication_ns: int = 0
    checkpoint_ns: int = 0

    @property
    def logged_ns(self) -> int:
        """The span from the first event to the last.

        >>> WorkerSummary(0, first_ns=20, last_ns=100).logged_ns
        80
        """
        return self.last_ns - self.first_ns

    @property
    def progress_ns(self) -> int:
        """Step time outside operators, communication and checkpoints (0 at least).

        >>> WorkerSummary(0, busy_ns=50, step_ns=70, communication_ns=5).progress_ns
        15
        """
        return max(self.step_ns - self.communication_ns - self.checkpoint_ns - self.busy_ns, 0)

    @property
    def other_ns(self) -> int:
        """Logged time outside steps and parking (0 at least).

        >>> WorkerSummary(0, busy_ns=50, parked_ns=20, last_ns=100, step_ns=60).other_ns
        20
        """
        return max(self.logged_ns - self.busy_ns - self.progress_ns - self.communication_ns
                   - self.checkpoint_ns - self.parked_ns, 0)


@dataclass
class Summary:
    """The sums of :func:`summarize`: ``operators`` and ``workers`` by id and index,
    ``channels`` (channel id to records carried), ``intervals`` (per worker, the
    ``(start, stop, operator)`` of every scheduling, for timelines), ``parks`` (per
    worker, the ``(start, stop)`` of every time it parked) and ``steps`` (per worker, the
    ``(time, step ns, communication ns, checkpoint ns)`` of every :class:`StepsEvent`).

    >>> Summary().total_busy_ns()
    0
    """

    operators: dict[int, OperatorSummary] = field(default_factory=dict)
    channels: dict[int, int] = field(default_factory=dict)
    workers: dict[int, WorkerSummary] = field(default_factory=dict)
    intervals: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    parks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    steps: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)

    def total_busy_ns(self) -> int:
        """Time spent in operators, over all workers.

        >>> Summary(operators={0: OperatorSummary(0, "A", busy_ns=5),
        ...                    1: OperatorSummary(1, "B", busy_ns=7)}).total_busy_ns()
        12
        """
        return sum(op.busy_ns for op in self.operators.values())


def summarize(events: Iterable) -> Summary:
    """Add up ``"timely"`` events (of any number of workers, in time order per worker).

    >>> from sparktimely.logging import ChannelsEvent, MessagesEvent, OperatesEvent
    >>> summary = summarize([OperatesEvent(0, 0, 0, (0, 0), "A", "d"),
    ...                      OperatesEvent(0, 0, 1, (0, 1), "B", "d"),
    ...                      ChannelsEvent(0, 0, 0, (0,), (0, 0), (1, 0), "Pipeline"),
    ...                      MessagesEvent(5, 0, True, 0, 0, 0, 0, 12)])
    >>> summary.channels, summary.operators[0].records_out, summary.operators[1].records_in
    ({0: 12}, 12, 12)
    >>> from sparktimely.logging import ParkEvent
    >>> parked = summarize([ParkEvent(10, 0, True, None), ParkEvent(30, 0, False, None)])
    >>> parked.parks, parked.workers[0].parked_ns
    ({0: [(10, 30)]}, 20)
    """
    summary = Summary()
    operators, workers = summary.operators, summary.workers
    channel_ends: dict[int, tuple[int, int]] = {}
    started: dict[int, tuple[int, int]] = {}           # worker -> (operator, start time)
    parked: dict[int, int] = {}
    for event in events:
        kind = type(event)
        worker = workers.get(event.worker)
        if worker is None:
            worker = workers[event.worker] = WorkerSummary(event.worker, first_ns=event.time)
        worker.last_ns = max(worker.last_ns, event.time)
        if kind is ScheduleEvent:
            if event.is_start:
                started[event.worker] = (event.id, event.time)
            elif event.worker in started:
                id, start = started.pop(event.worker)
                operator = operators.setdefault(id, OperatorSummary(id, f"operator {id}"))
                operator.runs += 1
                operator.busy_ns += event.time - start
                worker.busy_ns += event.time - start
                summary.intervals.setdefault(event.worker, []).append((start, event.time, id))
        elif kind is MessagesEvent:
            if event.is_send:
                summary.channels[event.channel] = (summary.channels.get(event.channel, 0)
                                                   + event.length)
        elif kind is ParkEvent:
            if event.is_park:
                parked[event.worker] = event.time
            elif event.worker in parked:
                start = parked.pop(event.worker)
                worker.parked_ns += event.time - start
                summary.parks.setdefault(event.worker, []).append((start, event.time))
        elif kind is StepsEvent:
            worker.steps += event.steps
            worker.step_ns += event.step_ns
            worker.communication_ns += event.communication_ns
            worker.checkpoint_ns += event.checkpoint_ns
            summary.steps.setdefault(event.worker, []).append(
                (event.time, event.step_ns, event.communication_ns, event.checkpoint_ns))
        elif kind is OperatesEvent:
            operators.setdefault(event.id, OperatorSummary(event.id, event.name)).name = event.name
        elif kind is ChannelsEvent:
            channel_ends[event.id] = (event.source[0], event.target[0])
    for channel, records in summary.channels.items():
        if channel in channel_ends:
            source, target = channel_ends[channel]
            for id in (source, target):
                operators.setdefault(id, OperatorSummary(id, f"operator {id}"))
            operators[source].records_out += records
            operators[target].records_in += records
    return summary


__all__ = ["OperatorSummary", "Summary", "WorkerSummary", "summarize"]
