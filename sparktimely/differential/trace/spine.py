"""A spine: the batches of one trace, merged in geometrically growing sizes.

Batches arrive in time order. A batch joins the merged part only once its ``upper`` is
through the *physical compaction frontier* (no reader still needs to see the boundaries
inside it); there, adjacent batches are merged while the older is not more than twice as
large, so sizes shrink geometrically from oldest to newest: about ``log2(n)`` batches, and
every update takes part in about ``log2(n)`` merges over its life: work proportional to what
was inserted, as differential's ``Spine``. Each insert performs at most one merge, so a
cascade is spread over the following inserts. Small batches wait for a few others and are
merged together; advances of the upper without a batch merge the small batches at the end
now and then, so an idle trace also ends up tidy. Merging advances times to the *logical
compaction frontier* and consolidates, so updates that cancel out disappear; merges of small
batches into a batch that is still small only put them in order (see :data:`SMALL_BATCH`).

>>> from sparktimely.differential.trace.batch import Batch
>>> spine = Spine([0])
>>> spine.set_frontiers([0], [])
>>> for t in range(20):
...     spine.insert(Batch.from_updates([((t, 0), t, 1)], [t], [t + 1]))
>>> [len(b) for b in spine.batches()]          # MAX_TINY + 1 tiny batches merged, 3 waiting
[17, 1, 1, 1]
"""
from __future__ import annotations

from typing import Any, Callable

from ..lattice import antichain_join, frontier_le

SMALL_BATCH = 4096
"""Batches smaller than this are not merged one by one: up to :data:`MAX_SMALL` of them wait
at the end of the spine and are then merged in one go (a merge has a fixed cost, large for
Arrow batches, that would otherwise dominate small updates). While their merged batch stays
smaller than this it is not consolidated (for Arrow batches: concatenated and sorted by key
hash, no grouping of rows): the batch at the end keeps growing by small merges, and grouping
its rows every time would cost a multiple of the updates added. Readers cope with repeated
rows; the merge that makes the batch large, and an idle trace's tidying, consolidate it.
(Python batches group by key in any merge; theirs advance only the keys the new batches
hold, see ``Batch.merged_all``: the rest wait for the next merge of large batches.)"""
MAX_SMALL = 8
MAX_TINY = 16
TINY_ROWS = 64
"""A tail of small batches whose newer ones average at most this many rows (one small update
each, such as 10 rows of a join's input) waits for up to :data:`MAX_TINY` of them instead
of :data:`MAX_SMALL`: readers look such tiny batches up together (the Arrow readers'
``lookup_all``), so more of them cost little, and the tail merges land on half as many
rounds. Tails of larger batches, which readers' keys hit more often, keep MAX_SMALL."""
STAGGER = 4
"""Traces fed in lock-step (every arrangement of a dataflow gets a batch each round) would
all merge their small batches in the same round, one long round among short ones: the
first merge of a spine of ``phase`` ``i`` (the ``i``-th trace of its dataflow) comes after
``MAX_SMALL - 2 * (i % STAGGER)`` small batches instead, and as every later one takes
``MAX_SMALL`` more, they stay apart."""
IDLE_ADVANCES = 16
"""Advances of the upper without a batch after which an idle trace tidies its small batches
(a power of two: it tidies again each time their count doubles)."""
PIECE_ROWS = 8192
"""A merge of two large batches of more rows than this is done in pieces (their
``merging``: ``arrow.batch.PiecewiseMerge``, ``trace.batch.BatchMerge``), as differential
merges with fuel. Rows here are units of merge work: a batch's ``merge_cost`` says what
one of its updates costs (an Arrow row 1, a Python update 32). Each batch that joins the
merged part earns :data:`FUEL` times its rows of merge work (an advance without a batch, as
one row), spent a piece at a time once it covers this many rows, so a merge of ``n`` rows
spreads over the updates that follow instead of adding ``n`` rows of work to one of them
(the p99 of small updates). A worker with nothing else to do merges ahead
(:meth:`Spine.idle_work`), so that paced updates seldom meet a piece. Readers see the
batches being merged until the merge completes."""
FUEL = 8


class Spine:
    """The batches of one trace, oldest first, with the frontiers that govern merging.

    >>> from sparktimely.differential.trace.batch import Batch
    >>> spine = Spine([0])
    >>> spine.insert(Batch.from_updates([(("k", 1), 0, 1)], [0], [1]))
    >>> [b.upper for b in spine.batches_through([1])], spine.upper
    ([[1]], [1])
    """

    def __init__(self, minimum_frontier: list, phase: int = 0) -> None:
        self.merged: list = []          # through the physical frontier; geometric sizes
        self.pending: list = []         # not yet through it: kept apart, boundaries intact
        self.upper: list = list(minimum_frontier)
        self.logical: list = list(minimum_frontier)
        self.physical: list = list(minimum_frontier)
        self._busy = False
        self._idle = 0
        self._max_small = MAX_SMALL - 2 * (phase % STAGGER)
        self._merging: Any = None       # a merge in progress, of batches still in merged
        self._merging_batches: list = []
        self._fuel = 0                  # rows of merge work earned by new batches, unspent
        self._small = 0                 # how many batches at the end of merged are small
        self.on_work: Callable[[Callable[[], bool]], None] | None = None
        """Called with :meth:`idle_work` when merge work could be done ahead of time: a
        worker's ``defer``, so that it merges while it has nothing else to do."""
        self._offered = False           # idle_work is with on_work and has not said "done"
        self._restored: list | None = None  # the upper restore() began at: all readers saw it

    def insert(self, batch: Any) -> None:
        """Add the next batch (its times follow every batch already held)."""
        self.pending.append(batch)
        self.upper = batch.upper
        self._busy = True
        self._maintain()

    def advance_upper(self, upper: list) -> None:
        """The trace is complete up to ``upper``. An advance without a batch earns the merge
        work of a one-row batch, as differential's empty batches do: a trace that a loop
        advances every round, with nothing new, pays for the merge in progress a piece at a
        time once its rounds add up to one, not a piece every round (a worker with nothing
        else to do merges ahead, :meth:`idle_work`). The :data:`IDLE_ADVANCES`-th advance
        without a batch, and each that doubles their count, merges the small batches at the
        end into one (and compacts them to the logical frontier, which may have moved since):
        an idle trace tidies up at a cost bounded by :data:`SMALL_BATCH`, a logarithmic
        number of times however long it idles, large batches being left to the geometric
        merges that new data brings."""
        self.upper = list(upper)
        if self._busy:
            self._busy = False
            self._idle = 0
            return
        idle = self._idle = self._idle + 1
        self._earn(1)
        if idle < IDLE_ADVANCES or idle & (idle - 1):          # not 16, 32, 64, ...
            return
        merged = self.merged
        small = self._small
        if small >= 2:
            self._merge_tail(small)
        elif small == 1 and self.logical and merged[-1].since != self.logical \
                and not frontier_le(self.logical, merged[-1].since):
            merged[-1] = merged[-1].compacted(self.logical)
            self._count_small()

    def set_frontiers(self, logical: list, physical: list) -> None:
        """New compaction frontiers (the meet over the trace's handles)."""
        self.logical = logical
        self.physical = physical
        self._maintain()

    def batches(self) -> list:
        """Every batch held, oldest first."""
        return self.merged + self.pending

    def batches_through(self, frontier: list) -> list:
        """The batches whose upper bound is at or before ``frontier`` (the updates at times
        not beyond it), for a reader whose physical frontier is at or before ``frontier``.
        Merged batches beyond ``frontier`` are left out too: a reader that came after the
        trace merged past its start (an import, a reader of a handle compacted physically)
        reads up to the batches it is handed, which it gets as input. Every reader has seen
        what a checkpoint restored, so ``frontier`` counts as at least the restored upper,
        however the restored batch was merged or compacted since (a join whose other input
        brought nothing new reads at the least frontier for many epochs).

        >>> from sparktimely.differential.trace.batch import Batch
        >>> spine = Spine([0])
        >>> spine.restore(Batch.from_updates([(("k", 1), 0, 1)], [0], [4]), [4])
        >>> spine.set_frontiers([9], [0])
        >>> for _ in range(16):                  # idle: the restored batch is compacted anew
        ...     spine.advance_upper([4])
        >>> [len(batch) for batch in spine.batches_through([0])]
        [1]
        """
        restored = self._restored
        if restored is not None and not frontier_le(restored, frontier):
            frontier = antichain_join(frontier, restored)
        merged = self.merged
        if merged and not frontier_le(merged[-1].upper, frontier):
            return [batch for batch in merged if frontier_le(batch.upper, frontier)]
        result = list(merged)
        for batch in self.pending:
            if not frontier_le(batch.upper, frontier):
                break
            result.append(batch)
        return result

    def clear(self) -> None:
        self.merged = []
        self.pending = []
        self._restored = None
        self._merging, self._merging_batches = None, []
        self._small = 0

    def restore(self, batch: Any, upper: list) -> None:
        """Start from ``batch`` (the contents of a checkpoint, complete up to ``upper``) as
        the one merged batch: readers see it whatever their frontier, as they saw the batches
        it stands for before the checkpoint."""
        self.merged = [batch] if batch is not None and len(batch) else []
        self._restored = list(upper)
        self.pending = []
        self.upper = list(upper)
        self._merging, self._merging_batches = None, []
        self._count_small()

    def __len__(self) -> int:
        return sum(len(b) for b in self.merged) + sum(len(b) for b in self.pending)

    def _maintain(self) -> None:
        pending = self.pending
        physical = self.physical
        moved = 0
        while moved < len(pending) and frontier_le(pending[moved].upper, physical):
            self._add_merged(pending[moved])
            moved += 1
        if moved:
            del pending[:moved]
            if self.on_work is not None and not self._offered and self._has_work():
                self._offered = True
                self.on_work(self.idle_work)

    def _add_merged(self, batch: Any) -> None:
        self.merged.append(batch)
        self._small = self._small + 1 if len(batch) < SMALL_BATCH else 0
        self._merge_step()
        self._earn(len(batch) * batch.merge_cost)

    def _earn(self, rows: int) -> None:
        """Add :data:`FUEL` times ``rows`` rows of merge work (nothing while no merge is in
        progress) and spend it once it covers a piece."""
        if self._merging is None:
            self._fuel = 0
            return
        self._fuel += FUEL * rows
        if self._fuel >= PIECE_ROWS:
            fuel, self._fuel = self._fuel, 0
            self._exert(fuel)

    def _exert(self, rows: int) -> None:
        """Do about ``rows`` rows of the merge in progress, if any; put its result in place
        of its batches once it is done."""
        merging = self._merging
        if merging is None or not merging.work(rows):
            return
        batches = self._merging_batches
        merged = self.merged
        start = next(i for i, b in enumerate(merged) if b is batches[0])
        merged[start:start + len(batches)] = [merging.result()]
        self._merging, self._merging_batches = None, []
        self._count_small()

    def _merge_step(self) -> None:
        """At most one merge that is due: the small batches at the end once there are more
        than :data:`MAX_SMALL` (:data:`MAX_TINY` tiny ones; fewer the first time, see
        :data:`STAGGER`), else the newest pair of large batches whose sizes are within a
        factor of two. A cascade of merges is thus spread over the following inserts
        instead of landing on one update."""
        merged = self.merged
        small = self._small
        if small > self._max_small and (
                small > self._max_small + MAX_TINY - MAX_SMALL
                or sum(len(b) for b in merged[1 - small:]) > TINY_ROWS * (small - 1)):
            self._merge_small_tail(small)
            self._max_small = MAX_SMALL
            return
        if self._merging is None:                       # one large merge at a time
            self._begin_large_merge(small)

    def _due_pair(self, small: int) -> int | None:
        """The index of the newer of the newest pair of large batches due to be merged (sizes
        within a factor of two), or None."""
        merged = self.merged
        for i in range(len(merged) - 1 - small, 0, -1):    # past the small tail: no pair there
            if len(merged[i]) >= SMALL_BATCH and len(merged[i - 1]) <= 2 * len(merged[i]):
                return i
        return None

    def _begin_large_merge(self, small: int) -> None:
        """Merge the due pair of large batches (see :meth:`_due_pair`), if any, in pieces if
        it is large."""
        i = self._due_pair(small)
        if i is None:
            return
        merged = self.merged
        older, newer = merged[i - 1], merged[i]
        if (len(older) + len(newer)) * older.merge_cost > PIECE_ROWS:
            self._merging = older.merging([newer], self.logical, PIECE_ROWS)
            self._merging_batches = [older, newer]
        else:
            merged[i - 1:i + 1] = [older.merged(newer, self.logical)]
            self._count_small()

    def _has_work(self) -> bool:
        """Whether :meth:`idle_work` has something to do."""
        small = self._small
        return self._merging is not None or small >= 2 or self._due_pair(small) is not None

    def idle_work(self) -> bool:
        """One unit of the merging that new batches would otherwise do, for a worker with
        nothing else to do: a piece of the merge in progress, else the small batches at the
        end merged into one (consolidated once they make a large batch), else the due merge
        of large batches begun. True while more remains.

        >>> from sparktimely.differential.trace.batch import Batch
        >>> spine = Spine([0])
        >>> spine.set_frontiers([0], [])
        >>> for t in range(3):
        ...     spine.insert(Batch.from_updates([((t, 0), t, 1)], [t], [t + 1]))
        >>> spine.idle_work(), [len(b) for b in spine.batches()]
        (False, [3])
        """
        if self._merging is not None:
            self._exert(PIECE_ROWS)
        elif self._small >= 2:
            self._merge_small_tail(self._small)
        else:
            self._begin_large_merge(self._small)
        more = self._has_work()
        if not more:
            self._offered = False   # the worker drops the task: offer it again when due
        return more

    def _count_small(self) -> None:
        """Count the batches at the end of the merged part that are smaller than
        :data:`SMALL_BATCH` again, after a merge replaced some (appends keep the count)."""
        merged = self.merged
        small = 0
        while small < len(merged) and len(merged[-1 - small]) < SMALL_BATCH:
            small += 1
        self._small = small

    def _merge_small_tail(self, small: int) -> None:
        """The ``small`` small batches at the end as one, consolidated only once they make a
        large batch (see :data:`SMALL_BATCH`)."""
        tail = self.merged[-small:]
        self._merge_tail(small, consolidating=sum(len(b) for b in tail) >= SMALL_BATCH)

    def _merge_tail(self, count: int, consolidating: bool = True) -> None:
        """The last ``count`` merged batches as one, times advanced to the logical frontier
        (and consolidated, if ``consolidating``)."""
        merged = self.merged
        tail = merged[-count:]
        del merged[-count:]
        merged.append(tail[0].merged_all(tail[1:], self.logical, consolidating))
        self._count_small()
