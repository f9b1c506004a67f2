"""Notifications: run logic once all data for a time has arrived.

An operator asks to be notified at a capability's time; the notification is delivered, with
the capability, once no input frontier could still deliver data at that time (or earlier).
Deliveries respect the order of times: a time is never delivered before an earlier time that
is also ready, including times requested while notifications are being delivered, and
requests for the same time are delivered once.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

from ..progress.frontier import MutableAntichain
from ..progress.timestamp import Timestamp, sort_times
from .capability import Capability, CapabilityError, InputCapability


class FrontierNotificator:
    """Tracks requested notifications against frontiers you pass in (timely's type).

    ``notify_at(cap)`` requests; ``for_each(frontiers, logic)`` calls ``logic(cap, self)``
    for each time no frontier can still reach, in time order, until none is left (requests
    made inside ``logic`` included).

    >>> import sparktimely as st
    >>> def build(scope):
    ...     def ctor(cap, info):
    ...         notificator = st.FrontierNotificator()
    ...         for time in (3, 1):
    ...             notificator.notify_at(cap.delayed(time))
    ...         cap.drop()
    ...         def logic(input, output):
    ...             for cap, batch in input:
    ...                 pass
    ...             notificator.for_each([input.frontier],
    ...                                  lambda cap, _: output.session(cap).give(cap.time))
    ...         return logic
    ...     return scope.to_stream([]).unary_frontier(st.Pipeline, "Times", ctor).capture()
    >>> st.example(build).extract()
    [(1, [1]), (3, [3])]
    """

    def __init__(self, capabilities: Iterable[Capability] = ()) -> None:
        self._pending: dict[Timestamp, list] = {}   # time -> [capability, request count]
        self._ready: list[Timestamp] = []           # complete pending times, latest first
        self._requested = False                     # requests since _ready was computed
        self._available: set[Timestamp] = set()     # complete by the requester's frontiers
        for capability in capabilities:
            self.notify_at(capability)

    def notify_at(self, cap: Capability) -> None:
        """Request a notification at ``cap.time`` (keeping the capability until then).
        An input capability holds no time past its batch: ``retain()`` it first.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator()
        ...     for time in (2, 2, 5):
        ...         notificator.notify_at(cap.delayed(time))
        ...     print(notificator.pending()); cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ask", ctor))
        [(2, 2), (5, 1)]
        """
        if cap.__class__ is InputCapability:
            raise CapabilityError(f"notify_at needs a Capability, which holds its time until "
                                  f"the notification: retain() the input capability for "
                                  f"time {cap.time!r}")
        cap._check_live("notify_at with")
        time = cap.time
        entry = self._pending.get(time)
        if entry is None:
            self._pending[time] = [cap, 1]
            self._requested = True
        else:
            entry[1] += 1

    def notify_at_frontiered(self, capability: Capability,
                             frontiers: Sequence[MutableAntichain]) -> None:
        """Request a notification at ``capability.time``; if these ``frontiers`` have
        passed the time it is available at once: the next :meth:`next` or :meth:`for_each`
        delivers it whatever frontiers that call is given (timely's ``notify_at_frontiered``).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def ctor(cap, info):
        ...         notificator = st.FrontierNotificator()
        ...         def logic(input, output):
        ...             for batch_cap, batch in input:
        ...                 notificator.notify_at_frontiered(batch_cap.retain(), [])
        ...             notificator.for_each([input.frontier],
        ...                                  lambda cap, _: output.session(cap).give(cap.time))
        ...         cap.drop()
        ...         return logic
        ...     early = scope.to_stream(["x"])
        ...     return early.unary_frontier(st.Pipeline, "Early", ctor).capture()
        >>> st.example(build).extract()
        [(0, [0])]
        """
        self.notify_at(capability)
        time = capability.time
        if not any(f.less_equal(time) for f in frontiers):
            self._available.add(time)

    def _complete(self, frontiers: Sequence[MutableAntichain]) -> list[Timestamp]:
        available = self._available
        return [t for t in self._pending
                if t in available or not any(f.less_equal(t) for f in frontiers)]

    def next_count(self, frontiers: Sequence[MutableAntichain]) -> tuple[Capability, int] | None:
        """The earliest complete requested time's capability and how many requests it had,
        removed from the pending requests; None if no requested time is complete.

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain(); _ = frontier.update_iter([(3, 1)])
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(t) for t in (2, 2, 5)])
        ...     print(notificator.next_count([frontier]), notificator.next_count([frontier]))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ready", ctor))
        (Capability(2), 2) None
        """
        ready = self._ready
        if self._requested or not ready:
            # Complete times stay complete, and a time earlier than a complete one is
            # complete too: only new requests can add a time before those already found.
            ready[:] = sort_times(self._complete(frontiers))[::-1]
            self._requested = False
        while ready:
            time = ready.pop()
            entry = self._pending.pop(time, None)
            if entry is not None:
                self._available.discard(time)
                return entry[0], entry[1]
        return None

    def next(self, frontiers: Sequence[MutableAntichain]) -> Capability | None:
        """The earliest deliverable notification's capability, or None.

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain(); _ = frontier.update_iter([(3, 1)])
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(5), cap.delayed(2)])
        ...     print(notificator.next([frontier]), notificator.next([frontier]))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ready", ctor))
        Capability(2) None
        """
        found = self.next_count(frontiers)
        return None if found is None else found[0]

    def for_each(self, frontiers: Sequence[MutableAntichain],
                 f: Callable[[Capability, "FrontierNotificator"], None]) -> None:
        """Deliver, in time order, every notification whose time the frontiers have passed,
        including those requested by ``f`` itself for complete times.

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain(); _ = frontier.update_iter([(3, 1)])
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(t) for t in (5, 2, 1)])
        ...     notificator.for_each([frontier], lambda cap, n: print(cap, n.pending()))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ready", ctor))
        Capability(1) [(5, 1), (2, 1)]
        Capability(2) [(5, 1)]
        """
        while True:
            capability = self.next(frontiers)
            if capability is None:
                return
            f(capability, self)

    def monotonic(self, frontiers: Sequence[MutableAntichain]) -> "Notificator":
        """A :class:`Notificator` over these requests and ``frontiers``.

        >>> import sparktimely as st
        >>> frontier = st.MutableAntichain(); _ = frontier.update_iter([(3, 1)])
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(5), cap.delayed(1)])
        ...     print(list(notificator.monotonic([frontier])))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ready", ctor))
        [(Capability(1), 1)]
        """
        return Notificator(frontiers, lambda: None, self)

    def pending(self) -> list[tuple[Timestamp, int]]:
        """The requested times not yet delivered, with their request counts.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(t) for t in (2, 5, 2)])
        ...     print(notificator.pending())
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ask", ctor))
        [(2, 2), (5, 1)]
        """
        return [(t, n) for t, (_, n) in self._pending.items()]

    def has_available(self, frontiers: Sequence[MutableAntichain]) -> bool:
        """True if some requested time is complete.

        >>> import sparktimely as st
        >>> frontier, done = st.MutableAntichain(), st.MutableAntichain()
        >>> _ = frontier.update_iter([(3, 1)])
        >>> def ctor(cap, info):
        ...     notificator = st.FrontierNotificator([cap.delayed(5)])
        ...     print(notificator.has_available([frontier]), notificator.has_available([done]))
        ...     cap.drop()
        ...     return lambda output: None
        >>> _ = st.example(lambda scope: st.source(scope, "Ask", ctor))
        False True
        """
        return bool(self._complete(frontiers))

    def __len__(self) -> int:
        return len(self._pending)


class Notificator:
    """The notificator handed to ``unary_notify``/``binary_notify`` logic: a
    :class:`FrontierNotificator` bound to the operator's input frontiers.

    ``notify_at(cap)`` requests a notification; iterating yields ``(cap, count)`` for the
    complete requested times in time order (``count``: how many requests the time had),
    including times requested while iterating. ``frontier(i)`` is input ``i``'s frontier.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     def logic(input, output, notificator):
    ...         for cap, batch in input:
    ...             notificator.notify_at(cap.retain())
    ...         for cap, count in notificator:
    ...             output.session(cap).give((cap.time, count))
    ...     data = scope.to_stream([1, 2]).delay(lambda x, t: x)
    ...     return data.unary_notify(st.Pipeline, "Count", [], logic).capture()
    >>> st.example(build).extract()
    [(1, [(1, 1)]), (2, [(2, 1)])]
    """

    def __init__(self, frontiers: Sequence[MutableAntichain], activate: Callable[[], None],
                 inner: FrontierNotificator | None = None) -> None:
        self._frontiers = frontiers
        self._inner = FrontierNotificator() if inner is None else inner
        self._activate = activate

    def notify_at(self, capability: Capability) -> None:
        """Request a notification at ``capability.time``.

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     for cap, batch in input:
        ...         notificator.notify_at(cap.delayed(cap.time + 1))
        ...     for cap, count in notificator:
        ...         output.session(cap).give("next time")
        >>> st.example(lambda scope: scope.to_stream([1, 2]).unary_notify(
        ...     st.Pipeline, "Later", [], logic).capture()).extract()
        [(1, ['next time'])]
        """
        self._inner.notify_at(capability)

    def next(self) -> tuple[Capability, int] | None:
        """The next complete requested time's ``(capability, count)``, or None.

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     while (found := notificator.next()) is not None:
        ...         print(found)
        >>> _ = st.example(lambda scope: scope.to_stream([]).unary_notify(
        ...     st.Pipeline, "Next", [1, 2, 2], logic))
        (Capability(1), 1)
        (Capability(2), 2)
        """
        return self._inner.next_count(self._frontiers)

    def __iter__(self) -> Iterator[tuple[Capability, int]]:
        while True:
            found = self._inner.next_count(self._frontiers)
            if found is None:
                return
            yield found

    def for_each(self, logic: Callable[[Capability, int, "Notificator"], None]) -> None:
        """Call ``logic(cap, count, notificator)`` for each delivered notification.

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     notificator.for_each(lambda cap, count, _: output.session(cap).give(count))
        >>> st.example(lambda scope: scope.to_stream([]).unary_notify(
        ...     st.Pipeline, "Counts", [1, 2, 2], logic).capture()).extract()
        [(1, [1]), (2, [2])]
        """
        for cap, count in self:
            logic(cap, count, self)

    def frontier(self, input: int) -> MutableAntichain:
        """The frontier of input ``input`` (0 for the first).

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     for cap, batch in input:
        ...         print(batch, notificator.frontier(0))
        >>> _ = st.example(lambda scope: scope.to_stream([7]).unary_notify(
        ...     st.Pipeline, "Show", [], logic))
        [7] MutableAntichain(frontier=[0])
        """
        return self._frontiers[input]

    def pending(self) -> list[tuple[Timestamp, int]]:
        """The requested times not yet delivered, with their request counts.

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     notificator.for_each(lambda cap, count, n: print(cap.time, n.pending()))
        >>> _ = st.example(lambda scope: scope.to_stream([]).unary_notify(
        ...     st.Pipeline, "Left", [1, 2, 2], logic))
        1 [(2, 2)]
        2 []
        """
        return self._inner.pending()

    def _after_logic(self) -> None:
        """After the operator's logic ran: complete times it did not take make it run again."""
        if self._inner.has_available(self._frontiers):
            self._activate()
