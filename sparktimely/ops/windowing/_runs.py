"""The merged partial of each sliding window, in O(1) merges a window instead of one a pane.

A sliding window of ``size`` by ``slide`` is a run of ``size / gcd(size, slide)`` panes, and
the windows of a worker close in order, each run starting at or after the one before. Merging
every pane of each closing window costs ``size / slide`` merges a pane (3,600 for an hour
sliding by the second). :class:`PaneRuns` keeps the runs as a queue in two stacks (the
"two stacks" sliding aggregation): panes enter at the back, where one running merge of the
back's panes is kept; when the front runs out, the back moves to the front as the merges
of each pane with the ones after it, so a window's partial is the merge of the front's
first entry and the back's running merge. Each pane is merged about three times in all,
whatever the window's length, in the panes' order (so ``merge`` need only be associative).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

NOTHING_TAKEN = float("-inf")
"""``PaneRuns.taken`` while no pane is in the queue (every pane number is above it)."""


class PaneRuns:
    """The merges of runs of consecutive panes ``[first, end)``, asked for in order.

    ``merge(a, b)`` combines two partials into a new one (changing neither); a run's panes
    missing from ``partials`` have no data. A pane taken in (below :attr:`taken`) that
    changes afterwards makes the queue stale: the owner calls :meth:`reset`.

    >>> runs = PaneRuns(lambda a, b: a + b)
    >>> partials = {0: "a", 1: "b", 2: "c", 4: "e"}
    >>> [runs.merged(partials, first, first + 3) for first in range(4)]
    ['abc', 'bc', 'ce', 'e']
    """

    __slots__ = ("merge", "taken", "_first", "_front", "_back", "_back_merged")

    def __init__(self, merge: Callable[[Any, Any], Any]) -> None:
        self.merge = merge
        self.taken: int | float = NOTHING_TAKEN
        """The first pane not yet taken into the queue."""
        self._first: int | float = NOTHING_TAKEN
        self._front: list[tuple[int, Any]] = []     # (pane, its merge with the front's later
        #                                             panes), the earliest pane last
        self._back: list[tuple[int, Any]] = []      # (pane, partial), in pane order
        self._back_merged: Any = None

    def reset(self) -> None:
        """Forget the queue (a pane taken in changed): the next run is merged anew."""
        self.taken = self._first = NOTHING_TAKEN
        self._front.clear()
        self._back.clear()
        self._back_merged = None

    def merged(self, partials: Mapping[int, Any], first: int, end: int) -> Any:
        """The merge of the partials of panes ``first`` to ``end - 1`` (None: none has data),
        for runs asked for in order (``first`` and ``end`` never decrease)."""
        if first < self._first or first >= self.taken:      # no pane taken in is in the run
            self.reset()
            self.taken = first
        self._first = first
        front = self._front
        while front and front[-1][0] < first:
            front.pop()
        if not front and self._back:
            self._turn(first)
        merge, back = self.merge, self._back
        for pane in range(int(self.taken), end):
            partial = partials.get(pane)
            if partial is not None:
                back.append((pane, partial))
                self._back_merged = (partial if self._back_merged is None
                                     else merge(self._back_merged, partial))
        self.taken = max(self.taken, end)
        if not front:
            return self._back_merged
        return front[-1][1] if self._back_merged is None else merge(front[-1][1],
                                                                    self._back_merged)

    def _turn(self, first: int) -> None:
        """Move the back's panes from ``first`` on to the front, each as its merge with the
        panes after it."""
        merge, front = self.merge, self._front
        merged = None
        for pane, partial in reversed(self._back):
            if pane < first:
                break
            merged = partial if merged is None else merge(partial, merged)
            front.append((pane, merged))
        self._back.clear()
        self._back_merged = None
