"""The worker observer attached while a log is registered: turns what the worker tells its
observers (:class:`~sparktimely.dataflow.observer.WorkerObserver`) into event records in the
buffers of the registered loggers.

The worker and its dataflows call observers behind one ``is None`` check each, so none of
this runs while nothing is registered. Batches that stay on their worker never pass the
worker, so while logging is on every channel's local end shows its batches to
:meth:`WorkerHooks.local` (``LocalPusher.observe``, timely's ``LogPusher``), until
:meth:`WorkerHooks.detach`.
"""
from __future__ import annotations

import time as _time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from ..dataflow.observer import WorkerObserver
from ..dataflow.ports import batch_length
from ..dataflow.subgraph import DATA, GRAPH, PROGRESS
from .events import (ChannelsEvent, MessagesEvent, OperatesEvent, ParkEvent, ProgressEvent,
                     ScheduleEvent, ShutdownEvent, StepsEvent, describe)

if TYPE_CHECKING:
    from ..dataflow.channels import LocalPusher
    from ..dataflow.subgraph import Dataflow

RECENT = 16
"""How many of a worker's last events a failure's traceback lists."""

STEPS_EVERY_NS = 1_000_000
"""A worker logs a :class:`StepsEvent` (where its steps' time went) at most this often."""

_new = tuple.__new__            # builds an event without NamedTuple's Python-level __new__


def structure(dataflow: "Dataflow", first_operator: int, first_channel: int, worker: int,
              time: int) -> tuple[list[OperatesEvent], list[ChannelsEvent]]:
    """The operators and channels of ``dataflow`` as events, with ids counted from
    ``first_operator`` and ``first_channel`` (also for a dataflow still being built)."""
    operators = dataflow.operators
    operates = [OperatesEvent(time, worker, first_operator + op.index, op.address, op.name,
                              dataflow.scopes.get(op.address[:-1], dataflow.name))
                for op in operators]
    outputs = {id(port): (op.index, number)
               for op in operators for number, port in enumerate(op.outputs)}
    channels = []
    for number, (source, target, pact, _) in enumerate(dataflow.edges):
        operator = operators[target.operator]
        source_op, source_port = outputs.get(id(source), (-1, 0))
        channels.append(ChannelsEvent(
            time, worker, first_channel + number, operator.address[:-1],
            (first_operator + source_op, source_port),
            (first_operator + target.operator, _index_of(operator.inputs, target)),
            type(pact).__name__))
    return operates, channels


def _index_of(items: list, item: Any) -> int:
    for number, candidate in enumerate(items):
        if candidate is item:
            return number
    return -1


def _progress_batch(message: tuple) -> list | None:
    """The progress batch a message between workers carries: a PROGRESS message's, or the
    build-time drops a GRAPH message brings along (None: none)."""
    kind = message[0]
    if kind == PROGRESS:
        return message[2]
    return message[6] if kind == GRAPH else None


def _scheduled_ns(events: list) -> int:
    """The time operators ran in ``events`` (from each ScheduleEvent start to its stop)."""
    total, started = 0, None
    for event in events:
        if type(event) is ScheduleEvent:
            if event.is_start:
                started = event.time
            elif started is not None:
                total += event.time - started
                started = None
    return total


class WorkerHooks(WorkerObserver):
    """One worker's logging hooks (see the module doc); ``timely`` and ``progress`` are the
    buffers of the ``"timely"`` and ``"timely/progress"`` loggers, or None."""

    def __init__(self, worker: int, origin: int) -> None:
        self.worker = worker
        self.origin = origin
        self.clock: Callable[[], int] = _time.perf_counter_ns
        self.timely: list | None = None
        self.progress: list | None = None
        self.recent: deque = deque(maxlen=RECENT)       # the last batches delivered
        self.logged = 0
        self.names: dict[int, str] = {}
        # Per dataflow not dropped (so that a program building dataflow after dataflow keeps
        # none of the dropped ones): its operator and channel ids and their events, ...
        self._structure: dict[int, tuple[range, range, list]] = {}
        self._bases: dict[int, int] = {}           # ... its first operator id, ...
        self._locations: dict[int, dict[int, tuple[int, int, bool]]] = {}   # ... its ports,
        self._observed: dict[int, list[LocalPusher]] = {}   # ... its channels' local ends
        self._next_operator = 0
        self._next_channel = 0
        self._channels: dict[tuple[int, int], int] = {}   # (dataflow, input location) -> id
        self._sequence: dict[tuple, int] = {}
        self._step_marks = [0, 0, 0, 0]      # this step's start, received, computed, sending
        self._computed_at = 0                # events in the buffer when its dataflows were done
        self._steps = [0, 0, 0, 0, origin]   # steps, their ns, communication, checkpoints; logged

    def now(self) -> int:
        return self.clock() - self.origin

    def _next(self, key: tuple) -> int:
        sequence = self._sequence
        number = sequence.get(key, 0)
        sequence[key] = number + 1
        return number

    # -- structure --------------------------------------------------------------------------

    @property
    def built(self) -> list:
        """The OperatesEvent and ChannelsEvent of every dataflow not dropped."""
        return [event for _, _, events in self._structure.values() for event in events]

    def dataflow_built(self, dataflow: "Dataflow") -> None:
        base, first_channel = self._next_operator, self._next_channel
        self._bases[dataflow.index] = base
        self._next_operator += len(dataflow.operators)
        edges = dataflow.edges
        self._next_channel += len(edges)
        operates, channels = structure(dataflow, base, first_channel, self.worker, self.now())
        for event in operates:
            self.names[event.id] = event.name
        self._structure[dataflow.index] = (range(base, self._next_operator),
                                           range(first_channel, self._next_channel),
                                           operates + channels)
        if self.timely is not None:
            self.timely += operates + channels
        locations = self._locations.setdefault(dataflow.index, {})
        for op in dataflow.operators:
            for port, input in enumerate(op.inputs):
                locations[input.location] = (base + op.index, port, True)
            for port, output in enumerate(op.outputs):
                locations[output.location] = (base + op.index, port, False)
        observed = self._observed[dataflow.index] = []
        for number, edge in enumerate(edges):
            channel = first_channel + number
            self._channels[(dataflow.index, edge.target.location)] = channel
            edge.local.observe(partial(self.local, channel))
            observed.append(edge.local)

    def dataflow_dropped(self, dataflow: "Dataflow") -> None:
        """Forget what was kept about ``dataflow``: nothing of it is logged any more (a
        failure's list of the last events names its operators by id only)."""
        index = dataflow.index
        kept = self._structure.pop(index, None)
        if kept is None:
            return
        operators, channels, _ = kept
        self._bases.pop(index, None)
        self._locations.pop(index, None)
        for local in self._observed.pop(index, ()):
            local.observe(None)
        self._channels = {key: channel for key, channel in self._channels.items()
                          if key[0] != index}
        self._sequence = {key: number for key, number in self._sequence.items()
                          if not (key[1] == index if key[0] == "progress"
                                  else key[0] in channels)}
        names = self.names
        for operator in operators:
            names.pop(operator, None)

    def detach(self) -> None:
        """Stop the channel ends showing their batches to :meth:`local`."""
        for observed in self._observed.values():
            for local in observed:
                local.observe(None)
        self._observed = {}

    # -- what the worker reports ------------------------------------------------------------

    def scheduled(self, dataflow: int, index: int, is_start: bool) -> None:
        buffer = self.timely
        if buffer is not None:
            buffer.append(_new(ScheduleEvent, (self.clock() - self.origin, self.worker,
                                               self._bases[dataflow] + index, is_start)))

    def local(self, channel: int, batch: Any) -> None:
        buffer = self.timely
        if buffer is not None:
            me = self.worker
            buffer.append(_new(MessagesEvent, (self.clock() - self.origin, me, True, channel, me,
                                               me, self._next((channel, me, me)),
                                               batch_length(batch))))

    def sent(self, target: int, dataflow: int, location: int, batch: Any) -> None:
        buffer = self.timely
        if buffer is not None:
            channel = self._channels.get((dataflow, location), -1)
            buffer.append(MessagesEvent(self.now(), self.worker, True, channel, self.worker,
                                        target, self._next((channel, self.worker, target)),
                                        batch_length(batch)))

    def received(self, source: int, message: tuple) -> None:
        kind = message[0]
        if kind == DATA and self.timely is not None:
            _, dataflow, location, _, batch = message
            channel = self._channels.get((dataflow, location), -1)
            self.timely.append(MessagesEvent(self.now(), self.worker, False, channel, source,
                                             self.worker, self._next((channel, source,
                                                                      self.worker)),
                                             batch_length(batch)))
        elif self.progress is not None and (batch := _progress_batch(message)) is not None:
            self.progress.append(self._progress(False, source, message[1], batch))

    def broadcast(self, message: tuple) -> None:
        if self.progress is not None and (batch := _progress_batch(message)) is not None:
            self.progress.append(self._progress(True, self.worker, message[1], batch))

    def _progress(self, is_send: bool, source: int, dataflow: int, batch: list) -> ProgressEvent:
        locations = self._locations.get(dataflow, {})
        messages: list[tuple] = []
        internal: list[tuple] = []
        for (location, time), delta in batch:
            operator, port, is_target = locations.get(location, (-1, location, True))
            (messages if is_target else internal).append((operator, port, time, delta))
        return ProgressEvent(self.now(), self.worker, is_send, source, dataflow,
                             self._next(("progress", dataflow, source)), messages, internal)

    def dataflow_finished(self, dataflow: "Dataflow") -> None:
        buffer = self.timely
        if buffer is not None:
            now, base = self.now(), self._bases.get(dataflow.index)
            if base is not None:
                buffer += [ShutdownEvent(now, self.worker, base + op.index)
                           for op in dataflow.operators]

    def parked(self, timeout: float | None) -> None:
        if self.timely is not None:
            self.timely.append(ParkEvent(self.now(), self.worker, True, timeout))

    def unparked(self) -> None:
        if self.timely is not None:
            self.timely.append(ParkEvent(self.now(), self.worker, False, None))

    # -- where a step's time goes ------------------------------------------------------------

    def step_began(self) -> None:
        self._step_marks[:] = [self.clock(), 0, 0, 0]

    def step_received(self) -> None:
        self._step_marks[1] = self.clock()

    def step_computed(self) -> None:
        self._step_marks[2] = self.clock()
        self._computed_at = 0 if self.timely is None else len(self.timely)

    def step_sending(self) -> None:
        self._step_marks[3] = self.clock()

    def step_ended(self) -> None:
        """Account for the step, then deliver its events to the callbacks (once per step)."""
        self._account_step()
        self.flush()

    def _account_step(self) -> None:
        """Add this step to the steps not yet logged (receiving until ``received``, its
        dataflows until ``computed``, checkpoints until ``sending`` but the operators they
        run, then sending); log them once a millisecond."""
        began, received, computed, sending = self._step_marks
        if not (began and received and computed):
            return                            # logging began during the step
        now = self.clock()
        sending = sending or now
        self._step_marks[0] = 0
        steps = self._steps
        steps[0] += 1
        steps[1] += now - began
        steps[2] += received - began + now - sending
        checkpointing = sending - computed
        if self.timely is not None and len(self.timely) > self._computed_at:
            checkpointing -= _scheduled_ns(self.timely[self._computed_at:])
        steps[3] += checkpointing
        if now - steps[4] >= STEPS_EVERY_NS:
            self.log_steps(now)

    def log_steps(self, now: int | None = None) -> None:
        """Log the steps taken since the last :class:`StepsEvent` as one (if any)."""
        steps = self._steps
        if steps[0] and self.timely is not None:
            now = self.clock() if now is None else now
            self.timely.append(StepsEvent(now - self.origin, self.worker, *steps[:4]))
            self._steps[:] = [0, 0, 0, 0, now]

    # -- delivering ---------------------------------------------------------------------------

    flush: Callable[[], None]
    """Hand the buffered events to the callbacks (set by the registry)."""

    def remember(self, batch: list) -> None:
        """Keep a delivered ``"timely"`` batch (the last few) for :meth:`failed`."""
        self.logged += len(batch)
        self.recent.append(batch)

    def failed(self, error: BaseException) -> None:
        """The worker is failing with ``error``: deliver what is buffered (so files and
        callbacks keep this worker's last events) and name the last events in the error's
        traceback."""
        try:
            self.flush()
        except Exception as flush_error:             # the original error matters more
            error.add_note(f"sparktimely.logging: delivering worker {self.worker}'s last "
                           f"events failed too: {type(flush_error).__name__}: {flush_error}")
        last = [event for batch in self.recent for event in batch][-RECENT:]
        if last:
            lines = [describe(event, self.names) for event in last]
            error.add_note(f"sparktimely.logging: the last {len(lines)} of the {self.logged} "
                           f"events worker {self.worker} logged:\n" + "\n".join(lines))
