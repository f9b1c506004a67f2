"""Operators that move records in time: delay, delay_batch and reclock.

Each holds records across times. Under epoch checkpoints (:mod:`sparktimely.io`) what they
hold is keyed state (:class:`_Held`): a checkpoint of epoch ``e`` holds the records of
epochs ``<= e`` they have not sent yet, and a resumed run sends them at the times an
undisturbed run does, on whichever worker owns them at its worker count. So that a snapshot
holds exactly those, nothing held is sent at a time after the epoch the checkpoints let the
operator see (its ``EpochGate`` limit). Without checkpoints none of this costs anything.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Self, Sequence, TypeVar

from ..dataflow import Notificator, OperatorBuilder, Pipeline
from ..dataflow.capability import not_earlier
from ..dataflow.containers import kept
from ..dataflow.stream import StreamCore
from ..errors import require_function, short_repr
from ..progress.frontier import MutableAntichain
from ..progress.timestamp import TimeKind, Timestamp, less_equal, relation
from ._stash import PerTime
from .basic import not_records
from .recovery import HOLD_ALL, EpochGate, KeyedState, epoch_time

if TYPE_CHECKING:
    from ..dataflow import Capability

S = TypeVar("S", bound=StreamCore)


_BATCH = object()
"""``_later``'s ``record`` when a whole batch moves."""


def _later(kind: TimeKind, time: Any, new_time: Any, operator: str, record: Any = _BATCH) -> Any:
    """``new_time``, unless it is not at or after ``time`` (ValueError naming the record)."""
    if not not_earlier(kind, time, new_time):
        of = "the batch's" if record is _BATCH else f"record {short_repr(record)}'s"
        raise ValueError(f"{operator}: new time {new_time!r} is {relation(new_time, time)} "
                         f"{of} time {time!r}")
    return new_time


def _slot(key: int) -> int:
    """The route of a held time's checkpoint entry: its key, ``worker + peers * n``."""
    return key


class _Held(PerTime[list]):
    """The records (or batches) an operator holds, per time, as keyed state of checkpoints.

    ``at`` (a time to be notified at, as :class:`PerTime`) or ``keep`` (a time the operator
    only looks up) gives a time's list. A snapshot has an entry ``(time, list)`` per held time
    under a key ``worker + peers * n`` unique among the workers' snapshots, routed by that key
    (so every entry is restored once, on one worker, at any worker count); ``wake`` says
    whether restored times are to be notified at (their records sent then) or only kept.
    """

    __slots__ = ("_wake", "_waking", "_index", "_peers")

    def __init__(self, wake: bool, index: int, peers: int) -> None:
        super().__init__(list)
        self._wake = wake
        self._waking: list[Timestamp] = []
        self._index = index
        self._peers = peers

    def keep(self, time: Timestamp) -> list:
        """The list of ``time``, started (without a notification) if needed."""
        state = self._states.get(time)
        if state is None:
            state = self._states[time] = []
        return state

    def times(self) -> list[Timestamp]:
        """The held times."""
        return list(self._states)

    def snapshot(self) -> dict[int, tuple[Timestamp, list]]:
        """Every held time's entry ``(time, list)``, under a key of this worker's own."""
        index, peers = self._index, self._peers
        return {index + peers * n: entry for n, entry in enumerate(self._states.items())}

    def restore(self, state: dict[int, tuple[Timestamp, list]]) -> None:
        """Hold the entries of snapshots (of any workers) this worker owns, before any input."""
        for time, items in state.values():
            if time not in self._states and self._wake:
                self._waking.append(time)
            self.keep(time).extend(items)

    def wake(self, initial: "Capability", notificator: Notificator) -> None:
        """Request the restored times' notifications from ``initial`` (the operator's first
        capability, at the least time), then drop it."""
        for time in self._waking:
            notificator.notify_at(initial.delayed(time))
        self._waking.clear()
        initial.drop()


class _GateFrontier:
    """A frontier at the first time of the first root epoch ``gate`` holds back (none once it
    holds nothing back): beside the inputs' frontiers, it keeps the notificator from
    delivering times the next snapshot must still hold."""

    __slots__ = ("antichain", "_gate", "_minimum", "_at")

    def __init__(self, gate: EpochGate, minimum: Timestamp) -> None:
        self.antichain = MutableAntichain()
        self._gate = gate
        self._minimum = minimum
        self._at: list[Timestamp] = []
        self.follow()

    def follow(self) -> None:
        """Move to the gate's current limit."""
        limit = self._gate.limit
        wanted = [] if limit is None else [epoch_time(self._minimum, limit + 1)]
        if wanted != self._at:
            self.antichain.update_iter([(t, -1) for t in self._at] + [(t, 1) for t in wanted])
            self._at = wanted


def _holding(streams: Sequence[S], name: str, wake: bool, logic: Callable[..., None]) -> S:
    """An operator of ``streams`` (Pipeline inputs) with one output and a notificator, whose
    ``logic(*inputs, output, notificator, held)`` holds records for later in ``held`` (a
    :class:`_Held`; ``wake`` as there), which checkpoints hold as keyed state.

    Under checkpoints the operator keeps its first capability until it is started (restored
    first when the run resumes) and requests the restored times' notifications from it."""
    scope = streams[0].scope
    builder = OperatorBuilder(name, scope)
    inputs = [builder.new_input(stream, Pipeline) for stream in streams]
    output, result = builder.new_output()
    held = _Held(wake, scope.index, scope.peers)
    gate = KeyedState(scope, f"{name}#{builder.index}", builder.index, held.snapshot,
                      held.restore, _slot).gate
    activate = scope.activator_for(builder.address).activate

    def ctor(capabilities: list["Capability"]) -> Callable[[list], None]:
        frontiers = [input.frontier for input in inputs]
        if gate is None:
            capabilities[0].drop()
            notificator = Notificator(frontiers, activate)
            return lambda _: logic(*inputs, output, notificator, held)
        gated = _GateFrontier(gate, scope.kind.minimum())
        notificator = Notificator(frontiers + [gated.antichain], activate)
        starting = capabilities[:1]

        def run(_: list) -> None:
            if starting:
                if gate.limit == HOLD_ALL:         # not started (nor restored) yet
                    return
                held.wake(starting.pop(), notificator)
            gated.follow()
            logic(*inputs, output, notificator, held)
        return run
    builder.build(ctor)
    return result


class TimingOps(StreamCore):
    """``delay``, ``delay_total``, ``delay_batch`` and ``reclock``."""

    __slots__ = ()

    def delay(self, f: Callable[[Any, Any], Any]) -> Self:
        """Re-stamps each record ``x`` at time ``t`` with ``f(x, t)`` (not earlier than
        ``t``); records are sent once their new time is complete upstream. Epoch
        checkpoints hold the records waiting.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([1, 5]).delay(lambda x, t: x).capture()).extract()
        [(1, [1]), (5, [5])]
        """
        return self._delayed(f, "delay")

    def delay_total(self, f: Callable[[Any, Any], Any]) -> Self:
        """:meth:`delay` for totally ordered times (the same result; kept for timely's API).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([2]).delay_total(lambda x, t: t + 1)
        ...            .capture()).extract()
        [(1, [2])]
        """
        return self._delayed(f, "delay_total")

    def _delayed(self, f: Callable[[Any, Any], Any], call: str) -> Self:
        """:meth:`delay`, whose errors name ``call``."""
        require_function(call, f)
        kind = self.scope.kind

        def logic(input: Any, output: Any, notificator: Notificator, held: _Held) -> None:
            for cap, batch in input:
                if batch.__class__ is not list:
                    raise not_records("Delay", batch)
                time = cap.time
                for x in batch:
                    held.at(cap, notificator, _later(kind, time, f(x, time), call, x)).append(x)
            for cap, records in held.completed(notificator):
                output.give_at(cap, records)
        return _holding([self], "Delay", True, logic)

    def delay_batch(self, f: Callable[[Any], Any]) -> Self:
        """Re-stamps each whole batch at time ``t`` with ``f(t)`` (not earlier than ``t``),
        without looking at its records; sent once the new time is complete upstream. Epoch
        checkpoints hold the batches waiting.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([1, 2]).delay_batch(lambda t: t + 10)
        ...            .capture()).extract()
        [(10, [1, 2])]
        """
        require_function("delay_batch", f)
        peers, kind = self.scope.peers, self.scope.kind

        def logic(input: Any, output: Any, notificator: Notificator, held: _Held) -> None:
            for cap, batch in input:
                time = cap.time
                held.at(cap, notificator, _later(kind, time, f(time), "delay_batch")).append(
                    kept(batch, peers))                # not a view of a ring, held for long
            for cap, batches in held.completed(notificator):
                for batch in batches:
                    output.give_at(cap, batch)
        return _holding([self], "DelayBatch", True, logic)

    def reclock(self, clock_stream: Self) -> Self:
        """Holds each record until a record of ``clock_stream`` arrives at a time not earlier
        than the record's, and re-stamps it with that clock time. Epoch checkpoints hold the
        records waiting. As in timely, each worker reclocks its own records by the clock
        records it receives: a clock made on one worker reaches every worker with
        ``.broadcast()`` (records never ticked for are dropped when the streams end).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     data = scope.to_stream(range(6)).delay(lambda x, t: x)
        ...     ticks = scope.to_stream([2, 4]).delay(lambda x, t: x)
        ...     return data.reclock(ticks).capture()
        >>> st.example(build).extract()
        [(2, [0, 1, 2]), (4, [3, 4])]
        """
        def logic(data: Any, ticks: Any, output: Any, notificator: Notificator,
                  held: _Held) -> None:
            for cap, batch in data:
                if batch.__class__ is not list:
                    raise not_records("Reclock", batch)
                held.keep(cap.time).extend(batch)
            for cap, _ in ticks:
                notificator.notify_at(cap.retain())
            for cap, _ in notificator:
                ready = [t for t in held.times() if less_equal(t, cap.time)]
                records = [x for t in sorted(ready) for x in held.pop(t) or ()]
                if records:
                    output.give_at(cap, records)
        return _holding([self, clock_stream], "Reclock", False, logic)
