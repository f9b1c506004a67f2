"""Per-time state held until its time completes: the stash-and-notify pattern in one place.

Operators that gather input per time and act once the time is complete (``accumulate``,
``aggregate``, ``delay``, the Arrow joins, ...) keep a :class:`PerTime` inside their
``unary_notify``/``binary_notify`` logic: :meth:`PerTime.at` finds or starts the state for a
time (requesting the notification that releases it, with a capability that holds the time
open), and :meth:`PerTime.completed` yields each complete time's capability and state, in
time order, removing it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, TypeVar

if TYPE_CHECKING:
    from ..dataflow import Capability, InputCapability, Notificator

V = TypeVar("V")


class PerTime(Generic[V]):
    """State per time, started with ``new()`` and released when the time completes.

    >>> import sparktimely as st
    >>> from sparktimely.ops._stash import PerTime
    >>> def build(scope):
    ...     sums = PerTime(list)
    ...     def logic(input, output, notificator):
    ...         for cap, batch in input:
    ...             sums.at(cap, notificator).extend(batch)
    ...         for cap, batch in sums.completed(notificator):
    ...             output.session(cap).give(sum(batch))
    ...     return scope.to_stream([1, 2, 3]).unary_notify(st.Pipeline, "Sum", [], logic).capture()
    >>> st.example(build).extract()
    [(0, [6])]
    """

    __slots__ = ("_states", "_new")

    def __init__(self, new: Callable[[], V]) -> None:
        self._states: dict[Any, V] = {}
        self._new = new

    def at(self, cap: "InputCapability", notificator: "Notificator", time: Any = None) -> V:
        """The state for ``time`` (default: the batch's own time, ``cap.time``), started
        and scheduled for notification the first time it is asked for."""
        if time is None:
            time = cap.time
        state = self._states.get(time)
        if state is None:
            state = self._states[time] = self._new()
            notificator.notify_at(cap.retain() if time == cap.time else cap.delayed(time))
        return state

    def completed(self, notificator: "Notificator") -> Iterator[tuple["Capability", V]]:
        """Each complete time's capability and state, removed from the stash."""
        for cap, _ in notificator:
            yield cap, self._states.pop(cap.time)

    def __len__(self) -> int:
        return len(self._states)

    def pop(self, time: Any) -> V | None:
        """The state of ``time``, removed; None if none was started. For operators that
        also ask for notifications of their own (at times without input) and so take the
        notifications themselves instead of through :meth:`completed`."""
        return self._states.pop(time, None)
