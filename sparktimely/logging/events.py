"""The events a worker logs: small typed records, as timely's ``TimelyEvent`` kinds.

Every record starts with ``time`` (nanoseconds since the worker's log registry was created;
see :attr:`~sparktimely.logging.Registry.epoch_ns` for the wall clock of time 0) and
``worker`` (the index of the worker that logged it). Operators and channels have
worker-unique integer ids, the same on every worker (every worker builds the same
dataflows), assigned in the order the dataflows and their operators were built.

The ``"timely"`` log carries :class:`OperatesEvent`, :class:`ChannelsEvent`,
:class:`ScheduleEvent`, :class:`MessagesEvent`, :class:`ShutdownEvent`, :class:`ParkEvent` and
:class:`StepsEvent`; the ``"timely/progress"`` log carries :class:`ProgressEvent`.

>>> event = ScheduleEvent(time=1500, worker=0, id=3, is_start=True)
>>> event.id, event.is_start
(3, True)
>>> describe(event, {3: "Map"})
'     0.002 ms  w0  start Map (operator 3)'
"""
from __future__ import annotations

from typing import Any, NamedTuple


class OperatesEvent(NamedTuple):
    """An operator was built: ``id`` (worker-unique), ``addr`` (its address: dataflow
    index, nested scope ids, its index in the dataflow), ``name``, and ``scope``, the name
    of the scope it lives in (``"dataflow-0/iterative-1"``).

    >>> OperatesEvent(0, 0, 1, (0, 1), "Map", "dataflow-0").name
    'Map'
    """

    time: int
    worker: int
    id: int
    addr: tuple
    name: str
    scope: str


class ChannelsEvent(NamedTuple):
    """A channel between two operators was built: ``id`` (worker-unique), ``scope_addr``
    (the address of the scope of the operator it feeds), ``source`` = ``(operator id,
    output port)``, ``target`` = ``(operator id, input port)`` and ``pact``
    (``"Pipeline"``, ``"Exchange"``, ``"Broadcast"``, ...).

    >>> ChannelsEvent(0, 0, 0, (0,), (0, 0), (1, 0), "Exchange").target
    (1, 0)
    """

    time: int
    worker: int
    id: int
    scope_addr: tuple
    source: tuple
    target: tuple
    pact: str


class ScheduleEvent(NamedTuple):
    """Operator ``id`` starts (``is_start``) or stops running its logic once. An operator
    that raised has a start and no stop.

    >>> ScheduleEvent(10, 1, 4, False).is_start
    False
    """

    time: int
    worker: int
    id: int
    is_start: bool


class MessagesEvent(NamedTuple):
    """A batch of ``length`` records on channel ``channel`` from worker ``source`` to
    worker ``target``: logged by the sender (``is_send``) and, when it crosses workers, by
    the receiver too. ``seq_no`` counts the batches of one channel between one pair of
    workers, so a send and its receive have the same ``(channel, source, target, seq_no)``.
    A batch that stays on its worker is logged once, as a send to itself.

    >>> MessagesEvent(0, 0, True, 2, 0, 1, 0, 4096).length
    4096
    """

    time: int
    worker: int
    is_send: bool
    channel: int
    source: int
    target: int
    seq_no: int
    length: int


class ProgressEvent(NamedTuple):
    """A batch of progress updates for dataflow ``dataflow`` that worker ``source`` shared
    with the others: logged by the sender (``is_send``) and by each receiver. ``seq_no``
    counts the sender's batches for the dataflow. ``messages`` are changes of records in
    flight to operator inputs, ``internal`` changes of capabilities held at operator
    outputs, each a list of ``(operator id, port, time, delta)``. A lone worker shares
    nothing, so it logs no progress events.

    >>> ProgressEvent(0, 0, True, 0, 0, 0, [(1, 0, 5, 3)], [(0, 0, 5, -1)]).messages
    [(1, 0, 5, 3)]
    """

    time: int
    worker: int
    is_send: bool
    source: int
    dataflow: int
    seq_no: int
    messages: list
    internal: list


class ShutdownEvent(NamedTuple):
    """Operator ``id`` is gone: its dataflow completed or was dropped.

    >>> ShutdownEvent(99, 0, 1).id
    1
    """

    time: int
    worker: int
    id: int


class ParkEvent(NamedTuple):
    """The worker had nothing to do and waits (``is_park``, for at most ``timeout``
    seconds, None for no limit) or wakes up again.

    >>> ParkEvent(7, 0, True, 0.25).timeout
    0.25
    """

    time: int
    worker: int
    is_park: bool
    timeout: float | None


class StepsEvent(NamedTuple):
    """Where the worker's steps went since its previous ``StepsEvent``: it took ``steps``
    steps, which lasted ``step_ns`` nanoseconds together, ``communication_ns`` of them
    taking in and sending out messages and ``checkpoint_ns`` taking and committing epoch
    checkpoints. The rest of a step is its operators' logic (their :class:`ScheduleEvent`
    intervals) and the runtime's own work (progress tracking, scheduling). Logged at the
    end of a step at most once a millisecond, and when the log is removed; time outside
    steps (the program's own code between them, parking) is not in it.

    >>> StepsEvent(2_000_000, 0, 40, 1_500_000, 300_000, 0).step_ns
    1500000
    """

    time: int
    worker: int
    steps: int
    step_ns: int
    communication_ns: int
    checkpoint_ns: int


def describe(event: Any, names: dict[int, str] | None = None) -> str:
    """One line of text for an event, with operator names from ``names`` (id to name).

    >>> describe(MessagesEvent(2_000_000, 1, True, 4, 1, 0, 7, 12))
    '     2.000 ms  w1  sent 12 records on channel 4 to worker 0 (batch 7)'
    """
    names = names or {}

    def operator(id: int) -> str:
        return f"{names[id]} (operator {id})" if id in names else f"operator {id}"

    kind = type(event)
    if kind is ScheduleEvent:
        what = f"{'start' if event.is_start else 'stop '} {operator(event.id)}"
    elif kind is MessagesEvent:
        what = (f"sent {event.length} records on channel {event.channel} to worker "
                f"{event.target}" if event.is_send else
                f"received {event.length} records on channel {event.channel} from worker "
                f"{event.source}") + f" (batch {event.seq_no})"
    elif kind is OperatesEvent:
        what = f"built {operator(event.id)} at {event.addr} in {event.scope}"
    elif kind is ChannelsEvent:
        what = (f"built channel {event.id} ({event.pact}) from {operator(event.source[0])} "
                f"to {operator(event.target[0])}")
    elif kind is ShutdownEvent:
        what = f"shut down {operator(event.id)}"
    elif kind is ParkEvent:
        what = (f"park (up to {event.timeout} s)" if event.is_park else "unpark")
    elif kind is StepsEvent:
        what = (f"{event.steps} steps: {event.step_ns / 1e6:.3f} ms, "
                f"{event.communication_ns / 1e6:.3f} ms of them communicating, "
                f"{event.checkpoint_ns / 1e6:.3f} ms checkpointing")
    elif kind is ProgressEvent:
        what = (f"{'shared' if event.is_send else 'received from worker ' + str(event.source)}"
                f" progress of dataflow {event.dataflow}: {len(event.messages)} message and "
                f"{len(event.internal)} capability changes (batch {event.seq_no})")
    else:
        return f"{getattr(event, 'time', 0) / 1e6:10.3f} ms  {event!r}"
    return f"{event.time / 1e6:10.3f} ms  w{event.worker}  {what}"


__all__ = ["ChannelsEvent", "MessagesEvent", "OperatesEvent", "ParkEvent", "ProgressEvent",
           "ScheduleEvent", "ShutdownEvent", "StepsEvent", "describe"]
