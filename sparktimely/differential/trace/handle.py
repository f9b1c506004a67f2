"""Shared traces: the spine an arrangement writes, and the handles that read it.

A :class:`TraceBox` is one worker's trace of one arrangement. Its writer (the arrange
operator) inserts batches and seals frontiers; readers hold :class:`TraceAgent` handles.
Each handle carries two frontiers: *logical compaction* (the handle will only ask about times
at or beyond it) and *physical compaction* (the batch boundaries it still needs). The trace
compacts to the meet of all handles' frontiers; once no handle is left it frees its batches.
Listeners (imports into other dataflows) are told of every batch and frontier as they come,
whatever the handles do: they follow the arrangement until their own dataflow is dropped.

>>> box = TraceBox("example", [0])
>>> handle = TraceAgent(box)
>>> handle.set_logical_compaction([3]); box.logical_frontier()
[3]
>>> handle.close(); box.freed
True
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable

from ...progress.frontier import MutableAntichain
from ..lattice import antichain, antichain_join, frontier_le
from .spine import Spine


class TraceBox:
    """One worker's trace of one arrangement, shared by every handle on it.

    >>> box = TraceBox("example", [0])
    >>> first, second = TraceAgent(box), TraceAgent(box)
    >>> first.set_logical_compaction([5]); box.logical_frontier()     # the meet of both
    [0]
    >>> second.set_logical_compaction([3]); box.logical_frontier()
    [3]
    """

    def __init__(self, name: str, minimum_frontier: list, kind: Any = None, worker: Any = None,
                 phase: int = 0) -> None:
        self.name = name
        self.kind = kind
        self.worker = worker
        self.spine = Spine(minimum_frontier, phase)
        if worker is not None:
            self.spine.on_work = worker.defer       # merge ahead while the worker is idle
        self._minimum = list(minimum_frontier)
        self._logical = MutableAntichain()
        self._physical = MutableAntichain()
        self._sole: tuple[list, list] | None = None
        """The frontiers of the only handle, while there is one (then the antichains are
        empty): the usual case, one operator reading, skips the counting."""
        self._handles = 0
        self._listeners: list[weakref.ref] = []
        self.freed = False
        self.key: Any = None
        """The key columns of an Arrow arrangement (None: Python updates), which the
        arrangements imported from it are keyed by too."""

    # -- writer side -------------------------------------------------------------------------

    def insert(self, batch: Any, time: Any) -> None:
        """Add a batch the arrangement sent at capability ``time``; listeners get it even
        once the trace is freed (an import follows the arrangement, not the handles)."""
        if not self.freed:
            self.spine.insert(batch)
        for listener in self._live_listeners():
            listener.push_batch(batch, time)

    def seal(self, upper: list) -> None:
        """No more updates will come at times not beyond ``upper``."""
        self.spine.advance_upper(upper)        # freed: no batches, the upper still moves
        for listener in self._live_listeners():
            listener.push_upper(upper)

    def drop_writer(self) -> None:
        """The arrangement writing this trace is gone (its dataflow was dropped): nothing
        more will come, so the trace is sealed at ``[]`` and imports complete, as
        differential's ``TraceWriter`` seals its trace when dropped.

        >>> box = TraceBox("example", [0])
        >>> box.drop_writer(); TraceAgent(box).read_upper()
        []
        """
        if self.spine.upper:
            self.seal([])

    def restore(self, batch: Any, upper: list) -> None:
        """Start from ``batch`` (None: nothing), complete up to ``upper`` (a checkpoint's
        contents, see :mod:`..recovery`)."""
        self.spine.restore(batch, upper)

    def add_listener(self, listener: Any) -> None:
        """Send ``listener`` (held weakly) the batches and frontiers from now on. The
        references of listeners gone are pruned here too: a sealed trace sends nothing
        more, and the imports of short dataflows come and go."""
        self._live_listeners()
        self._listeners.append(weakref.ref(listener))

    def remove_listener(self, listener: Any) -> None:
        self._listeners = [ref for ref in self._listeners if ref() not in (None, listener)]

    def _live_listeners(self) -> list:
        live = [ref() for ref in self._listeners]
        if None in live:
            self._listeners = [ref for ref in self._listeners if ref() is not None]
            live = [x for x in live if x is not None]
        return live

    # -- reader side -------------------------------------------------------------------------

    def logical_frontier(self) -> list:
        sole = self._sole
        return list(sole[0]) if sole is not None else self._logical.frontier()

    def physical_frontier(self) -> list:
        sole = self._sole
        return list(sole[1]) if sole is not None else self._physical.frontier()

    def _register(self, logical: list, physical: list) -> None:
        self._handles += 1
        if self._handles == 1:
            self._sole = ([], [])
        elif self._sole is not None:          # a second handle: count both from now on
            sole_logical, sole_physical = self._sole
            self._sole = None
            self._adjust([], sole_logical, [], sole_physical)
        self._adjust([], logical, [], physical)

    def _adjust(self, old_logical: list, new_logical: list, old_physical: list,
                new_physical: list) -> None:
        if self._sole is not None:
            self._sole = (new_logical, new_physical)
            if not self.freed:
                self.spine.set_frontiers(list(new_logical), list(new_physical))
            return
        if old_logical != new_logical:
            self._logical.update_iter([(t, -1) for t in old_logical]
                                      + [(t, 1) for t in new_logical])
        if old_physical != new_physical:
            self._physical.update_iter([(t, -1) for t in old_physical]
                                       + [(t, 1) for t in new_physical])
        if not self.freed:
            self.spine.set_frontiers(self._logical.frontier(), self._physical.frontier())

    def _release(self, logical: list, physical: list) -> None:
        self._handles -= 1
        self._adjust(logical, [], physical, [])
        if self._handles == 1 and self._sole is None:    # the remaining handle's frontiers
            self._sole = (self._logical.frontier(), self._physical.frontier())
            self._logical, self._physical = MutableAntichain(), MutableAntichain()
        elif self._handles == 0:
            self._sole = None
            self.freed = True
            self.spine.clear()

    def __repr__(self) -> str:
        return (f"TraceBox({self.name!r}, {len(self.spine)} updates, upper {self.spine.upper}, "
                f"{self._handles} handle(s))")


def as_frontier(frontier: Iterable[Any], what: str) -> list:
    """A frontier given by the user (a list of times, an Antichain) as an antichain list."""
    if isinstance(frontier, (str, bytes)) or not hasattr(frontier, "__iter__"):
        raise TypeError(f"{what}: a frontier is a list of times (e.g. [5], or [] to release), "
                        f"not {frontier!r}")
    times = list(frontier)
    return times if len(times) < 2 else antichain(times)


def _advanced(old: list, new: list) -> list:
    """The join of a handle's frontier ``old`` and a requested ``new`` one: ``new`` itself
    when it is at or past ``old`` (operators move their handles forward), without the
    pairwise joins."""
    return new if frontier_le(old, new) else antichain_join(old, new)


class TraceAgent:
    """A reading handle on a shared trace, with its own compaction frontiers.

    >>> handle = TraceAgent(TraceBox("example", [0]))
    >>> handle.set_physical_compaction([]); handle.get_physical_compaction()
    []
    >>> handle.read_upper()
    [0]
    """

    def __init__(self, box: TraceBox, logical: list | None = None,
                 physical: list | None = None) -> None:
        self._box = box
        self._logical = list(box._minimum if logical is None else logical)
        self._physical = list(box._minimum if physical is None else physical)
        self._closed = False
        box._register(self._logical, self._physical)

    @property
    def name(self) -> str:
        """The name of the trace (its arrangement's operator).

        >>> TraceAgent(TraceBox("knows", [0])).name
        'knows'
        """
        return self._box.name

    def _check_open(self, action: str) -> None:
        if self._closed:
            raise RuntimeError(f"cannot {action}: this handle on the trace of {self._box.name!r} "
                               f"is closed")

    def __reduce__(self) -> tuple:
        raise TypeError(f"a handle on the trace of {self._box.name!r} cannot be pickled: the "
                        f"trace lives in this worker's memory; import it into a dataflow of "
                        f"the same worker (import_), or send its contents")

    def clone(self) -> "TraceAgent":
        """Another handle on the same trace, with this handle's frontiers.

        >>> handle = TraceAgent(TraceBox("example", [0]))
        >>> handle.set_logical_compaction([3])
        >>> other = handle.clone(); other.get_logical_compaction()
        [3]
        >>> handle.close(); other.closed
        False
        """
        self._check_open("clone")
        return type(self)(self._box, self._logical, self._physical)

    def clone_from_start(self) -> "TraceAgent":
        """Another handle on the same trace, with this handle's logical frontier and the
        trace's least physical frontier: an operator's, which reads the batch boundaries
        from its start as its input frontier moves (a copy of a handle compacted physically,
        as with :meth:`clone`, would let the trace merge across them).

        >>> handle = TraceAgent(TraceBox("example", [0]))
        >>> handle.set_compaction([3], [])
        >>> reader = handle.clone_from_start()
        >>> reader.get_logical_compaction(), reader.get_physical_compaction()
        ([3], [0])
        """
        self._check_open("clone")
        return type(self)(self._box, self._logical, self._box._minimum)

    def set_logical_compaction(self, frontier: Iterable[Any]) -> None:
        """This handle will only ask about times at or beyond ``frontier`` (``[]``: about
        none). The trace may then coalesce earlier times. A handle's frontier never moves
        back: it becomes the join of the old and the new one.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     trace.set_logical_compaction([1])           # reads only times >= 1 from now on
        ...     result = trace.get_logical_compaction()
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        [1]
        """
        self._move(frontier, self._physical, "set_logical_compaction")

    def set_physical_compaction(self, frontier: Iterable[Any]) -> None:
        """This handle will not need batch boundaries before ``frontier`` (``[]``: any);
        the trace may then merge its batches up to there.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     trace.set_physical_compaction([])           # no batch boundaries needed: merge
        ...     result = trace.get_physical_compaction()
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        []
        """
        self._move(self._logical, frontier, "set_physical_compaction")

    def set_compaction(self, logical: list, physical: list) -> None:
        """``set_logical_compaction(logical)`` and ``set_physical_compaction(physical)`` in
        one adjustment of the trace (operators move both after every batch).

        >>> box = TraceBox("example", [0])
        >>> handle = TraceAgent(box)
        >>> handle.set_compaction([4], [2]); box.logical_frontier(), box.physical_frontier()
        ([4], [2])
        """
        self._move(logical, physical, "set_compaction")

    def _follow(self, logical: list, physical: list) -> None:
        """:meth:`set_compaction` for the operators that hold this handle, with frontiers
        of the dataflow's own times (an input's frontier, a batch's upper): their times
        are not checked again, as a user's are."""
        self._check_open("set_compaction")
        self._advance(logical, physical)

    def _checked(self, frontier: Iterable[Any], action: str) -> list:
        """A user's ``frontier`` as a list, after checking that its times are of the trace's
        type (TypeError naming ``action``)."""
        times = as_frontier(frontier, action)
        kind = self._box.kind
        if kind is not None:
            for time in times:
                kind.check(time, where=action)
        return times

    def _move(self, logical: Iterable[Any], physical: Iterable[Any], action: str) -> None:
        """Each frontier joined with the requested one (its times checked, unless it is the
        frontier already held), the trace adjusted once if either moved; ``action`` names
        the caller in errors."""
        self._check_open(action)
        self._advance(logical if logical == self._logical else self._checked(logical, action),
                      physical if physical == self._physical else self._checked(physical, action))

    def _advance(self, logical: Any, physical: Any) -> None:
        """Join each frontier with the requested one (a frontier equal to the one held
        leaves it as it is) and adjust the trace once if either moved."""
        old_logical, old_physical = self._logical, self._physical
        new_logical = old_logical if logical == old_logical else _advanced(old_logical, logical)
        new_physical = old_physical if physical == old_physical else _advanced(old_physical,
                                                                               physical)
        if new_logical != old_logical or new_physical != old_physical:
            self._box._adjust(old_logical, new_logical, old_physical, new_physical)
            self._logical, self._physical = new_logical, new_physical

    def get_logical_compaction(self) -> list:
        """This handle's logical compaction frontier.

        >>> handle = TraceAgent(TraceBox("example", [0]))
        >>> handle.get_logical_compaction()
        [0]
        >>> handle.set_logical_compaction([2]); handle.get_logical_compaction()
        [2]
        """
        return list(self._logical)

    def get_physical_compaction(self) -> list:
        """This handle's physical compaction frontier.

        >>> handle = TraceAgent(TraceBox("example", [0]))
        >>> handle.set_physical_compaction([4]); handle.get_physical_compaction()
        [4]
        """
        return list(self._physical)

    def read_upper(self) -> list:
        """The trace's upper frontier: the times not yet complete in it (``[]`` when the
        arrangement's input has ended).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     result = trace.read_upper()                  # time 0 is complete in the trace
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        [1]
        """
        self._check_open("read_upper")
        return list(self._box.spine.upper)

    def batches_through(self, frontier: list) -> list:
        """The trace's batches holding the updates at times not beyond ``frontier``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     result = [len(batch) for batch in trace.batches_through([1])]
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        [1]
        """
        self._check_open("read")
        return self._box.spine.batches_through(frontier)

    def batches(self) -> list:
        """Every batch of the trace, oldest first.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     result = sum(len(batch) for batch in trace.batches())
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        1
        """
        self._check_open("read")
        return self._box.spine.batches()

    def close(self) -> None:
        """Drop this handle: its frontiers no longer hold the trace back. A trace with no
        handle left frees its batches.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     knows = dd.InputSession()
        ...     trace = worker.dataflow(lambda scope: knows.to_collection(scope)
        ...                             .arrange_by_key().trace)
        ...     knows.insert(("ann", "bob")); knows.advance_to(1)
        ...     worker.step_while(lambda: trace.read_upper() == [0])
        ...     spare = trace.clone()
        ...     spare.close()                              # the trace forgets its frontiers
        ...     result = spare.closed, trace.closed
        ...     knows.close()
        ...     return result
        >>> st.execute_directly(job)
        (True, False)
        """
        if not self._closed:
            self._closed = True
            self._box._release(self._logical, self._physical)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called.

        >>> handle = TraceAgent(TraceBox("example", [0]))
        >>> handle.closed, (handle.close(), handle.closed)[1]
        (False, True)
        """
        return self._closed

    def __del__(self) -> None:
        if getattr(self, "_closed", True) is False:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"logical {self._logical}, physical {self._physical}"
        return f"{type(self).__name__}({self._box.name!r}, {state})"

