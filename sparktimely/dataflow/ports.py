"""Operator inputs and outputs: queues of timestamped batches and the sessions that fill them.

Batches cross every boundary (never single records). Progress accounting follows timely's
rule: a producer reports ``+len(batch)`` at the receiving input for the batch's time, and
the consumer reports ``-len(batch)`` when it takes the batch; both changes happen within the
same scheduling step as the capability changes that justify them.
"""
from __future__ import annotations

import os
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..errors import require_positive_int
from ..progress.frontier import MutableAntichain
from ..progress.timestamp import TimeKind, Timestamp
from .capability import Capability, CapabilityError, InputCapability

if TYPE_CHECKING:
    from .subgraph import Dataflow

BATCH_SIZE = 4096
"""Records buffered per time by an output session before they are sent as one batch."""


def _queue_limit_of_environment() -> int:
    """``$SPARKTIMELY_QUEUE_LIMIT`` (16 if unset); a ValueError naming it unless it is a
    positive integer (a limit below 1 never has room: lazily given records never left)."""
    text = os.environ.get("SPARKTIMELY_QUEUE_LIMIT", "16")
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"$SPARKTIMELY_QUEUE_LIMIT must be a positive integer, got {text!r}")
    return limit


QUEUE_LIMIT = _queue_limit_of_environment()
"""Batches that records given lazily (``Session.give_iterator_later``) may leave waiting in
each consumer's queue on this worker before the producing operator yields to the scheduler;
the default of ``OutputHandle.queue_limit``."""


def own_copy(batch: Any) -> Any:
    """A batch another consumer may keep and change: lists are copied, Arrow batches are
    immutable and shared."""
    return list(batch) if batch.__class__ is list else batch


def batch_length(batch: Any) -> int:
    """The number of records in a batch (a list or a pyarrow.RecordBatch)."""
    return len(batch) if batch.__class__ is list else batch.num_rows


class OutputPort:
    """One output of an operator: the channels its batches are pushed into."""

    __slots__ = ("dataflow", "location", "kind", "pushers", "consumers", "held")

    def __init__(self, dataflow: "Dataflow", location: int, kind: TimeKind) -> None:
        self.dataflow = dataflow
        self.location = location
        self.kind = kind
        self.pushers: list = []
        self.consumers: list[InputPort] = []     # the inputs on this worker it feeds
        self.held = 0                            # live capabilities for this output

    def has_room(self, limit: int) -> bool:
        """True while every consumer on this worker has fewer than ``limit`` batches waiting."""
        for consumer in self.consumers:
            if len(consumer.queue) >= limit:
                return False
        return True

    def push(self, time: Timestamp, batch: Any) -> None:
        """Send one non-empty batch at ``time`` to every consumer of this output (once the
        dataflow is built: what is sent while it is built, when not every consumer is
        connected yet, waits for that)."""
        if self.dataflow.graph is not None:
            self.dataflow.hold_until_built(self, time, batch)
            return
        pushers = self.pushers
        if len(pushers) == 1:                   # the usual: one consumer
            pushers[0].push(time, batch)
            return
        last = len(pushers) - 1
        for i, pusher in enumerate(pushers):
            # Consumers may keep or change the lists they receive: each gets its own.
            pusher.push(time, batch if i == last else own_copy(batch))


class InputPort:
    """One input of an operator, as its logic sees it.

    Iterate it to take the waiting batches: ``for cap, batch in input: ...``.
    ``input.frontier`` tells which times may still arrive.
    """

    __slots__ = ("queue", "dataflow", "location", "operator", "frontier", "_outputs",
                 "_summaries", "_admits", "_held")

    def __init__(self, dataflow: "Dataflow", location: int, operator: int,
                 frontier: Any) -> None:
        self.queue: deque = deque()
        self.dataflow = dataflow
        self.location = location
        self.operator = operator
        self.frontier: MutableAntichain = frontier
        self._outputs: list[OutputPort] = []
        self._summaries: list[list] = []
        self._admits: Callable[[Timestamp], bool] | None = None
        self._held: deque = deque()

    def gate(self, admits: Callable[[Timestamp], bool] | None) -> None:
        """Hold back from the operator the batches whose time ``admits(time)`` rejects (None:
        no gate). Held batches stay counted at this input, not consumed, so its frontier,
        and every frontier downstream, stays at their times. After ``admits`` changes its
        mind, :meth:`reopen` lets the batches it now admits through. Epoch checkpoints gate
        stateful operators this way (``sparktimely.ops.recovery.EpochGate``).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Gated", scope)
        ...     times = scope.to_stream([0, 1, 2, 3]).delay(lambda x, t: x)
        ...     input = builder.new_input(times, st.Pipeline)
        ...     limit, seen = [1], []
        ...     input.gate(lambda time: time <= limit[0])
        ...     def logic(frontiers):
        ...         seen.extend(cap.time for cap, _ in input)
        ...         if limit[0] == 1 and input.frontier.frontier() == [2]:  # 2 and 3 held
        ...             seen.append("reopen")
        ...             limit[0] = 3
        ...             input.reopen()
        ...     builder.build(lambda capabilities: logic)
        ...     return seen
        >>> st.example(build)
        [0, 1, 'reopen', 2, 3]
        """
        self._admits = admits
        self.dataflow.operators[self.operator].gated = admits is not None or bool(self._held)

    def reopen(self) -> None:
        """Move the held batches the gate now admits back to the front of the queue, in
        their order, and schedule the operator."""
        admits, held = self._admits, self._held
        released = [entry for entry in held if admits is None or admits(entry[0])]
        if released:
            kept = [entry for entry in held if admits is not None and not admits(entry[0])]
            held.clear()
            held.extend(kept)
            self.queue.extendleft(reversed(released))
        if admits is None and not held:
            self.dataflow.operators[self.operator].gated = False
        self.dataflow.operators[self.operator].poked = True
        self.dataflow.activate(self.operator)

    def hold_back(self) -> None:
        """Apply the gate to the waiting batches (the operator does, before its logic)."""
        admits, queue = self._admits, self.queue
        if admits is not None and queue and not all(admits(entry[0]) for entry in queue):
            keep = [entry for entry in queue if admits(entry[0])]
            self._held.extend(entry for entry in queue if not admits(entry[0]))
            queue.clear()
            queue.extend(keep)

    def _set_outputs(self, outputs: list[OutputPort], summaries: list[list]) -> None:
        self._outputs = outputs
        self._summaries = summaries

    def __iter__(self) -> Iterator[tuple[InputCapability, Any]]:
        queue = self.queue
        update = self.dataflow.update
        location = self.location
        operator = self.dataflow.operators[self.operator]
        while queue:
            time, batch, count = queue.popleft()
            update(location, time, -count)
            yield InputCapability(time, self._outputs, self._summaries, operator), batch

    def next(self) -> tuple[InputCapability, Any] | None:
        """The next waiting ``(capability, batch)``, or None."""
        return next(iter(self), None)

    def for_each(self, logic: Callable[[InputCapability, Any], Any]) -> None:
        """Call ``logic(cap, batch)`` for every waiting batch."""
        for cap, batch in self:
            logic(cap, batch)

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __repr__(self) -> str:
        return f"InputPort(waiting={len(self.queue)}, frontier={self.frontier.frontier()})"


class Ended(list):
    """The buffer of a session that has ended: giving to it raises CapabilityError with
    ``message`` (the session's time may be complete since)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def refuse(self, *records: Any) -> None:
        raise CapabilityError(self.message)

    append = extend = refuse


_ENDED = Ended("a session sends only while the operator's logic that opened it runs: open "
               "another with output.session(capability)")


class Session:
    """Buffers records sent at one time on one output; flushed in batches and on exit. A
    session lasts while the operator's logic that opened it runs; giving to it afterwards
    raises CapabilityError.

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     def logic(output):
    ...         with output.session(cap) as session:
    ...             session.give("a")
    ...             session.give_batch(["b", "c"])
    ...             session.give_iterator(str(i) for i in range(2))
    ...         cap.drop()
    ...     return logic
    >>> st.example(lambda scope: st.source(scope, "Give", ctor).capture()).extract()
    [(0, ['0', '1', 'a', 'b', 'c'])]
    """

    __slots__ = ("_handle", "_port", "_time", "_buffer")

    def __init__(self, handle: "OutputHandle", time: Timestamp) -> None:
        self._handle = handle
        self._port = handle._port
        self._time = time
        self._buffer: list = []

    def give(self, record: Any) -> None:
        """Send one record."""
        buffer = self._buffer
        buffer.append(record)
        if len(buffer) >= BATCH_SIZE:
            self._send_buffered()

    def give_iterator(self, records: Iterable[Any]) -> None:
        """Send every record of an iterable now, as timely's ``give_iterator`` does: the
        iterable is consumed before this call returns, in batches of ``BATCH_SIZE`` pushed as
        they fill, so memory stays bounded by the channel, not by the iterable."""
        buffer = self._buffer
        if (records.__class__ is list or records.__class__ is tuple) and \
                len(buffer) + len(records) < BATCH_SIZE:       # the usual few records
            buffer.extend(records)
            return
        records = iter(records)
        while True:
            buffer.extend(islice(records, BATCH_SIZE - len(buffer)))
            if len(buffer) < BATCH_SIZE:
                return
            self._send_buffered()
            buffer = self._buffer

    def give_iterator_later(self, records: Iterable[Any]) -> None:
        """Send the records of an iterable *later*, at this session's time: it is consumed
        after the operator's logic returns, in batches of ``BATCH_SIZE``, and while a
        consumer on this worker has ``output.queue_limit`` batches waiting the operator
        yields to the scheduler (taking no new input) until they are consumed. An operator
        that produces far more than it reads (``flat_map`` uses this) then runs in bounded
        memory.

        The iterable must not depend on anything the logic changes afterwards. Python's
        closures bind late: a generator expression reading a loop variable sees the
        variable's value when it is consumed, not when it was given.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     def logic(output):
        ...         with output.session(cap) as session:
        ...             for word in ["a", "b"]:
        ...                 session.give_iterator_later(word for _ in range(2))
        ...                 session.give_iterator(word for _ in range(2))
        ...         cap.drop()
        ...     return logic
        >>> st.example(lambda scope: st.source(scope, "Late", ctor).capture()).extract()
        [(0, ['a', 'a', 'b', 'b', 'b', 'b', 'b', 'b'])]
        """
        if self._buffer.__class__ is Ended:
            self._buffer.refuse()
        self._send_buffered()
        self._handle._defer(self._time, iter(records))

    def give_batch(self, batch: Any) -> None:
        """Send a whole batch (a pyarrow.RecordBatch, or a list or any other iterable of
        records: a tuple, a list subclass) as one message; records are copied into a list
        of their own, so the caller may reuse its container."""
        if self._buffer.__class__ is Ended:
            self._buffer.refuse()
        self._send_buffered()
        if not hasattr(batch, "num_rows"):
            batch = list(batch)
        if batch_length(batch):
            self._port.push(self._time, batch)

    def flush(self) -> None:
        """Send the buffered records now."""
        self._send_buffered()

    def _send_buffered(self) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self._port.push(self._time, batch)

    def _end(self) -> None:
        """Send what is buffered; from now on the session refuses records."""
        self._send_buffered()
        self._buffer = _ENDED

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self._send_buffered()


class OutputHandle:
    """An operator's handle on one of its outputs: ``with output.session(cap) as s: s.give(x)``.

    ``queue_limit`` bounds the batches of lazily given records waiting in each consumer on
    this worker (see :meth:`Session.give_iterator_later`).

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     cap.drop()
    ...     return lambda input, output: [output.give_at(c, [len(b)]) for c, b in input]
    >>> st.example(lambda s: s.to_stream("abc").unary(st.Pipeline, "Len", ctor)
    ...            .capture()).extract()
    [(0, [3])]
    """

    __slots__ = ("_port", "_index", "_sessions", "_pending", "queue_limit")

    def __init__(self, port: OutputPort, index: int) -> None:
        self._port = port
        self._index = index
        self._sessions: list[Session] = []
        self._pending: deque[tuple[Capability, Iterator[Any]]] = deque()
        self.queue_limit = QUEUE_LIMIT

    @property
    def port(self) -> OutputPort:
        """The output this handle sends into."""
        return self._port

    @property
    def output_index(self) -> int:
        """Which output of its operator this is (0 for the first)."""
        return self._index

    def _time_of(self, capability: Capability | InputCapability) -> Timestamp:
        if capability.__class__ is InputCapability:
            capability._check_current("send with")
            outputs = capability._outputs
            if self._index < len(outputs) and outputs[self._index] is self._port:
                capability._check_allows(capability.time, self._index)
                return capability.time
            raise CapabilityError("the input capability belongs to another operator")
        if isinstance(capability, Capability):
            if not capability._live:
                capability._check_live("send with")
            if capability._port is not self._port:
                index = self._index
                raise CapabilityError(
                    f"capability for time {capability._time!r} belongs to another output: a "
                    f"session on output {index} needs a capability of output {index} "
                    f"(delayed_for_output(t, {index}) or retain_for_output({index}) of an input "
                    f"capability, or the constructor's capability for it)")
            return capability._time
        raise TypeError(f"session() needs a Capability or InputCapability, "
                        f"not {type(capability).__name__}")

    def session(self, capability: Capability | InputCapability) -> Session:
        """A session sending at ``capability``'s time; the capability must be for this output."""
        session = Session(self, self._time_of(capability))
        self._sessions.append(session)
        return session

    def give_at(self, capability: Capability | InputCapability, batch: Any) -> None:
        """Send a whole batch (list or pyarrow.RecordBatch) at ``capability``'s time. The
        batch then belongs to the dataflow: do not change it afterwards."""
        time = self._time_of(capability)
        if batch_length(batch):
            self._port.push(time, batch)

    def _defer(self, time: Timestamp, records: Iterator[Any]) -> None:
        """Send ``records`` lazily, holding a capability for ``time`` until they are sent."""
        self._pending.append((Capability(time, self._port), records))

    def _flush(self) -> bool:
        """Send what sessions still buffer, then lazily given records while consumers have
        room (called after each scheduling of the operator); True if records remain."""
        if self._sessions:
            for session in self._sessions:
                session._end()
            self._sessions = []
        return bool(self._pending) and self._drain()

    def _drain(self) -> bool:
        """Send batches of lazily given records while every consumer on this worker has
        room; True if records remain."""
        pending, port, limit = self._pending, self._port, self.queue_limit
        if limit.__class__ is not int or limit < 1:     # (a limit below 1 never has room)
            require_positive_int(limit, f"output {self._index}'s queue_limit")
        while pending:
            capability, records = pending[0]
            while port.has_room(limit):
                batch = list(islice(records, BATCH_SIZE))
                if batch:
                    port.push(capability._time, batch)
                if len(batch) < BATCH_SIZE:
                    break
            else:
                return True
            pending.popleft()
            capability.drop()
        return False

