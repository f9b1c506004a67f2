"""Notifications: run logic once all data for a time has arrived.

An operator asks to be notified at a capability's time; the notification is delivered, with
the capability, once no input frontier could still deliver data at that time (or earlier).
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

from ..progress.timestamp import Timestamp, sort_times
from .capability import Capability


class FrontierNotificator:
    """Tracks requested notifications against frontiers you pass in (timely's type).

    ``notify_at(cap)`` requests; ``for_each(frontiers, logic)`` calls ``logic(cap, self)``
    for each time no frontier can still reach, in time order.

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     cap.drop()
    ...     notificator = st.FrontierNotificator()
    ...     def logic(input, output):
    ...         for cap, batch in input:
    ...             notificator.notify_at(cap.retain())
    ...         notificator.for_each([input.frontier],
    ...                              lambda cap, _: output.session(cap).give(cap.time))
    ...     return logic
    >>> st.example(lambda s: s.to_stream([1, 4]).delay(lambda x, t: x).unary_frontier(
    ...     st.Pipeline, "Done", ctor).capture()).extract()
    [(1, [1]), (4, [4])]
    """

    def __init__(self) -> None:
        self._pending: dict[Timestamp, list] = {}   # time -> [capability, count]

    def notify_at(self, capability: Capability) -> None:
        """Request a notification at ``capability.time`` (keeping the capability until then)."""
        time = capability.time
        entry = self._pending.get(time)
        if entry is None:
            self._pending[time] = [capability, 1]
        else:
            entry[1] += 1

    def _available(self, frontiers: Sequence) -> list[tuple[Timestamp, Capability, int]]:
        ready = [(t, cap, n) for t, (cap, n) in self._pending.items()
                 if not any(f.less_equal(t) for f in frontiers)]
        if not ready:
            return ready
        for t, _, _ in ready:
            del self._pending[t]
        order = {t: i for i, t in enumerate(sort_times([t for t, _, _ in ready]))}
        ready.sort(key=lambda entry: order[entry[0]])
        return ready

    def for_each(self, frontiers: Sequence, logic: Callable[[Capability, "FrontierNotificator"], None]) -> None:
        """Deliver every notification whose time the frontiers have passed."""
        for _, cap, _ in self._available(frontiers):
            logic(cap, self)

    def next(self, frontiers: Sequence) -> Capability | None:
        """The earliest deliverable notification's capability, or None."""
        ready = self._available(frontiers)
        if not ready:
            return None
        for t, cap, n in ready[1:]:
            self._pending[t] = [cap, n]
        return ready[0][1]

    def pending(self) -> list[tuple[Timestamp, int]]:
        """The requested times not yet delivered, with their request counts."""
        return [(t, n) for t, (_, n) in self._pending.items()]

    def has_available(self, frontiers: Sequence) -> bool:
        return any(not any(f.less_equal(t) for f in frontiers) for t in self._pending)

    def __len__(self) -> int:
        return len(self._pending)


class Notificator:
    """The notificator handed to ``unary_notify``/``binary_notify`` logic.

    ``notify_at(cap)`` requests a notification; iterating yields ``(cap, count)`` for the
    times that were complete when this scheduling began, in time order. Requests made while
    iterating are delivered at a later scheduling.

    >>> import sparktimely as st
    >>> def logic(input, output, notificator):
    ...     for cap, batch in input:
    ...         notificator.notify_at(cap.retain())
    ...     for cap, count in notificator:
    ...         output.session(cap).give((cap.time, count))
    >>> st.example(lambda s: s.to_stream([1, 2]).unary_notify(st.Pipeline, "Once", [], logic)
    ...            .capture()).extract()
    [(0, [(0, 1)])]
    """

    def __init__(self, frontiers: Sequence, activate: Callable[[], None]) -> None:
        self._frontiers = frontiers
        self._inner = FrontierNotificator()
        self._ready: list[tuple[Timestamp, Capability, int]] = []
        self._activate = activate

    def notify_at(self, capability: Capability) -> None:
        self._inner.notify_at(capability)

    def _begin(self) -> None:
        self._ready = self._inner._available(self._frontiers)

    def _end(self) -> None:
        # Notifications not taken this time stay requested.
        for t, cap, n in self._ready:
            entry = self._inner._pending.get(t)
            if entry is None:
                self._inner._pending[t] = [cap, n]
            else:
                entry[1] += n
        self._ready = []
        if self._inner.has_available(self._frontiers):
            self._activate()

    def __iter__(self) -> Iterator[tuple[Capability, int]]:
        while self._ready:
            _, cap, count = self._ready.pop(0)
            yield cap, count

    def for_each(self, logic: Callable[[Capability, int, "Notificator"], None]) -> None:
        """Call ``logic(cap, count, notificator)`` for each delivered notification."""
        for cap, count in self:
            logic(cap, count, self)

    def pending(self) -> list[tuple[Timestamp, int]]:
        return self._inner.pending()

