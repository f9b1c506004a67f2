"""Immutable batches of updates for the Python-object path, and the buffer that seals them.

A :class:`Batch` holds the consolidated updates whose times lie between two frontiers,
``lower`` (inclusive) and ``upper`` (exclusive), indexed by key: ``data[key]`` is a list of
``(val, time, diff)`` with no two entries for the same ``(val, time)`` and no zero diff.
``since`` is the frontier it is compacted to (logical compaction): a key's updates are
advanced by it and consolidated, except a key's lone update, which may keep its time (see
:func:`compact_updates`). A batch is never changed after it is built; merging two makes a
third, sharing the per-key lists of keys only one of them holds.

>>> b = Batch.from_updates([(("a", 1), 0, 1), (("a", 1), 0, 1), (("b", 2), 1, 1)], [0], [2])
>>> b.get("a"), len(b)
([(1, 0, 2)], 2)
>>> merge_all([b, Batch.from_updates([(("a", 1), 2, -2)], [2], [3])], [3]).get("a") is None
True
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from ...progress.timestamp import Product, less_equal
from ..lattice import advance_by, antichain, beyond, frontier_le

Updates = list  # list[(val, time, diff)]


class Batch:
    """Consolidated updates ``key -> [(val, time, diff)]`` for times in ``[lower, upper)``.

    >>> batch = Batch.from_updates([(("k", "v"), 3, 2)], [0], [5])
    >>> batch.get("k"), batch.lower, batch.upper, len(batch)
    ([('v', 3, 2)], [0], [5], 1)
    """

    __slots__ = ("data", "lower", "upper", "since", "length")
    merge_cost = 32
    """Rows of merge work (a spine's unit: an Arrow row's share of a merge) that merging one
    update costs: about 2-3 us against an Arrow row's 0.1 us here, so a spine's piece of
    8,192 rows is 256 Python updates, under a millisecond."""

    def __init__(self, data: dict, lower: list, upper: list, since: list, length: int) -> None:
        self.data = data
        self.lower = lower
        self.upper = upper
        self.since = since
        self.length = length

    @classmethod
    def from_updates(cls, updates: Iterable[tuple], lower: list, upper: list) -> "Batch":
        """A batch of ``((key, val), time, diff)`` updates (consolidated here), compacted
        to nothing beyond its ``lower``."""
        return cls.from_keyed(consolidate_keyed(updates), lower, upper)

    @classmethod
    def from_keyed(cls, data: dict, lower: list, upper: list, since: list | None = None) -> "Batch":
        """A batch of already consolidated ``key -> [(val, time, diff)]``."""
        return cls(data, lower, upper, lower if since is None else since,
                   sum(map(len, data.values())))

    def get(self, key: Any) -> Updates | None:
        """The updates of ``key``, or None."""
        return self.data.get(key)

    def items(self) -> Iterator[tuple[Any, Updates]]:
        return iter(self.data.items())

    def keys(self):
        return self.data.keys()

    def __len__(self) -> int:
        return self.length

    def merged(self, newer: "Batch", since: list) -> "Batch":
        """This batch and the adjacent ``newer`` one as one batch (see :func:`merge_all`)."""
        return merge_all([self, newer], since)

    def merged_all(self, newer: list, since: list, consolidating: bool = True) -> "Batch":
        """This batch and the adjacent ``newer`` ones (a trace's small batches at its end)
        as one batch, times advanced by ``since`` for the keys the newer ones hold
        (``touched_only``, see :class:`BatchMerge`): this batch's other keys wait for the
        trace's next merge of large batches, done in pieces. Updates of one key and time
        are summed whatever ``consolidating`` says: merging dicts groups them."""
        return merge_all([self, *newer], since, touched_only=True)

    def merging(self, newer: list, since: list, piece_rows: int) -> "BatchMerge":
        """:meth:`merged_all` of this batch and the adjacent ``newer`` ones, to be done in
        pieces (:meth:`BatchMerge.work`; ``piece_rows`` is the spine's, which the merge
        does not need to plan its pieces)."""
        return BatchMerge([self, *newer], since)

    def as_of(self, frontier: list) -> "AdvancedBatch":
        """This batch read with every time advanced by ``frontier`` (a view: its lone
        updates may keep earlier times than its ``since``).

        >>> Batch.from_updates([(("k", "v"), 1, 1)], [0], [3]).compacted([2]).as_of([2]).get("k")
        [('v', 2, 1)]
        """
        return AdvancedBatch(self, frontier)

    def compacted(self, since: list) -> "Batch":
        """This batch compacted to ``since``: times advanced and consolidated (see
        :func:`compact_updates`)."""
        data = {}
        for key, updates in self.data.items():
            compacted = compact_updates(updates, since)
            if compacted:
                data[key] = compacted
        return Batch(data, self.lower, self.upper, since, sum(map(len, data.values())))

    def __repr__(self) -> str:
        return f"Batch({self.lower} .. {self.upper}, {self.length} updates, since {self.since})"


class AdvancedBatch:
    """A read-only view of a batch with every time advanced by a frontier (what an
    import shows of a trace's batches: their lone updates may keep earlier times, see
    :func:`compact_updates`). Nothing is copied: times are advanced, and updates
    consolidated, as they are read.

    >>> batch = Batch.from_updates([(("k", "v"), 1, 1), (("k", "v"), 2, 1)], [0], [3])
    >>> AdvancedBatch(batch, [2]).get("k")
    [('v', 2, 2)]
    """

    __slots__ = ("batch", "frontier", "lower", "upper", "since")

    def __init__(self, batch: Batch, frontier: list) -> None:
        self.batch = batch
        self.frontier = frontier
        self.lower = batch.lower
        self.upper = batch.upper
        self.since = frontier

    def get(self, key: Any) -> Updates | None:
        updates = self.batch.get(key)
        return None if updates is None else advance_updates(updates, self.frontier)

    def items(self) -> Iterator[tuple[Any, Updates]]:
        frontier = self.frontier
        for key, updates in self.batch.items():
            advanced = advance_updates(updates, frontier)
            if advanced:
                yield key, advanced

    def keys(self):
        return self.batch.keys()

    def __len__(self) -> int:
        return len(self.batch)


class EnteredBatch:
    """A read-only view of a batch from the enclosing scope inside an iterative one: every
    time ``t`` reads as ``Product(t, 0)`` (nothing is copied)."""

    __slots__ = ("batch", "lower", "upper", "since")

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.lower = entered_frontier(batch.lower)
        self.upper = entered_frontier(batch.upper)
        self.since = entered_frontier(batch.since)

    def get(self, key: Any) -> Updates | None:
        updates = self.batch.get(key)
        return None if updates is None else [(v, Product(t, 0), d) for v, t, d in updates]

    def items(self) -> Iterator[tuple[Any, Updates]]:
        for key, updates in self.batch.items():
            yield key, [(v, Product(t, 0), d) for v, t, d in updates]

    def keys(self):
        return self.batch.keys()

    def __len__(self) -> int:
        return len(self.batch)


def updates_reader(batches: list) -> Callable[[Any], Updates]:
    """A function from a key to its updates in all of ``batches``, oldest first, for a
    reader that looks up many keys in the same batches: a plain :class:`Batch` is read
    through its dict's own ``get`` (no Python call per batch and key).

    >>> older = Batch.from_updates([(("k", "v"), 0, 1)], [0], [1])
    >>> newer = Batch.from_updates([(("k", "v"), 1, 1), (("j", "w"), 1, 1)], [1], [2])
    >>> read = updates_reader([older, AdvancedBatch(newer, [2])])
    >>> read("k"), read("x")
    ([('v', 0, 1), ('v', 2, 1)], [])
    """
    getters = [batch.data.get if batch.__class__ is Batch else batch.get for batch in batches]

    def updates_of(key: Any) -> Updates:
        found: Updates = []
        for get in getters:
            updates = get(key)
            if updates:
                found += updates
        return found
    return updates_of


def entered_frontier(frontier: list) -> list:
    """A frontier of the enclosing scope as seen inside an iterative one."""
    return [Product(t, 0) for t in frontier]


def consolidate_keyed(updates: Iterable[tuple]) -> dict:
    """``((key, val), time, diff)`` updates as ``key -> [(val, time, diff)]``, diffs of equal
    ``(key, val, time)`` summed and zeros dropped."""
    sums: dict = {}
    get = sums.get
    for kv, time, diff in updates:
        entry = (kv, time)
        sums[entry] = get(entry, 0) + diff
    data: dict = {}
    for ((key, val), time), diff in sums.items():
        if diff:
            bucket = data.get(key)
            if bucket is None:
                data[key] = [(val, time, diff)]
            else:
                bucket.append((val, time, diff))
    return data


def consolidate_updates(updates: Iterable[tuple]) -> list:
    """``(val, time, diff)`` triples with equal ``(val, time)`` summed and zeros dropped.

    >>> consolidate_updates([("x", 1, 1), ("y", 1, 1), ("x", 1, -1)])
    [('y', 1, 1)]
    """
    sums: dict = {}
    get = sums.get
    for val, time, diff in updates:
        entry = (val, time)
        sums[entry] = get(entry, 0) + diff
    return [(val, time, diff) for (val, time), diff in sums.items() if diff]


def advance_updates(updates: Updates, frontier: list) -> Updates:
    """``updates`` with times advanced by ``frontier``, consolidated (the same list when no
    time moves)."""
    if not frontier:
        return updates
    if len(frontier) == 1 and frontier[0].__class__ is int:
        f = frontier[0]
        if len(updates) == 1:                   # most keys of a trace: nothing to sum
            val, time, diff = updates[0]
            return updates if time >= f else [(val, f, diff)]
        if all(t >= f for _, t, _ in updates):
            return updates
        return consolidate_updates([(v, t if t >= f else f, d) for v, t, d in updates])
    if all(beyond(frontier, t) for _, t, _ in updates):
        return updates
    return consolidate_updates([(v, advance_by(t, frontier), d) for v, t, d in updates])


def compact_updates(updates: Updates, since: list) -> Updates:
    """A key's updates as a batch compacted to ``since`` holds them: advanced by it and
    consolidated; but a lone update as it is. Advancing a lone update's time could combine
    it with nothing, and what it says is the same either way to every reader, as readers
    compare a trace's times only with times at or beyond ``since``, where a time and its
    advance compare alike. Sparing it is most of a Python trace's compaction work, as most
    keys of a large trace hold one update (:class:`AdvancedBatch` shows the times advanced).

    >>> compact_updates([("v", 1, 1)], [5]), compact_updates([("v", 1, 1), ("v", 2, 1)], [5])
    ([('v', 1, 1)], [('v', 5, 2)])
    """
    return updates if len(updates) == 1 else advance_updates(updates, since)


def merge_all(batches: list, since: list, touched_only: bool = False) -> Batch:
    """One batch with the updates of adjacent ``batches`` (oldest first), times advanced by
    ``since`` (the trace's logical compaction frontier) where that moves them (with
    ``touched_only``, those of the keys the newer batches hold): a :class:`BatchMerge` done
    at once.

    >>> older = Batch.from_updates([(("a", 1), 0, 1), (("b", 1), 1, 1), (("b", 2), 1, 1)],
    ...                            [0], [2])
    >>> newer = Batch.from_updates([(("a", 1), 2, -1), (("c", 1), 2, 1)], [2], [3])
    >>> merged = merge_all([older, newer], [3])     # c's lone update keeps its time
    >>> merged.get("a"), merged.get("b"), merged.get("c"), len(merged), merged.upper
    (None, [(1, 3, 1), (2, 3, 1)], [(1, 2, 1)], 3, [3])
    """
    merging = BatchMerge(batches, since, touched_only)
    merging.work(None)
    return merging.result()


class BatchMerge:
    """A merge of adjacent Python batches (oldest first), times advanced by ``since``, that
    can be done a piece at a time (:meth:`work`), the batches staying as they are for
    readers meanwhile. The batch with the most keys is taken first, its per-key lists shared
    unless their times move (at once, with a C-level dict copy, when merged whole; a key's
    lone update keeps its time, see :func:`compact_updates`); then the
    others' keys are visited, so that merging a few tiny batches into a large one costs the
    tiny ones, not the large one once per tiny one.

    Batches hold disjoint times until compaction: once times were advanced (now or before),
    a key present in several may have equal ``(val, time)`` in them, so such keys are
    consolidated.

    With ``touched_only`` (the small batches at a trace's end merged into a batch that is
    still small), the oldest batch's keys that no other batch holds keep their times, as
    advancing them is a Python loop over its every update at each such merge; the keys the
    others hold are advanced and consolidated, so that a key inserted and removed again
    cancels out. The result then says it is compacted to the oldest batch's ``since``, which
    every update is at or beyond. (Only when the oldest batch is the widest and ``since`` is
    at or beyond its ``since``; else the whole merge advances times.)

    >>> older = Batch.from_updates([((k, 0), 0, 1) for k in range(4)], [0], [1])
    >>> merge = BatchMerge([older, Batch.from_updates([((9, 0), 1, 1)], [1], [2])], [2])
    >>> merge.work(2 * Batch.merge_cost), merge.work(None), len(merge.result())
    (False, True, 5)
    """

    def __init__(self, batches: list, since: list, touched_only: bool = False) -> None:
        self.batches = batches
        self.since = since
        advancing = [bool(since) and not frontier_le(since, b.lower) and since != b.since
                     for b in batches]
        self.compacted = any(advancing) or any(b.since != b.lower for b in batches)
        widest = max(range(len(batches)), key=lambda i: len(batches[i].data))
        oldest = batches[0]
        self.claimed = since if since else oldest.since    # what the result is compacted to
        if touched_only and widest == 0 and since and frontier_le(oldest.since, since):
            advancing[0] = False
            self.claimed = oldest.since
        order = [widest] + [i for i in range(len(batches)) if i != widest]
        self._stages = [(batches[i], advancing[i]) for i in order]
        self._stage = 0
        self._items: Iterator | None = None          # the current stage's keys left
        self.data: dict = {}
        self.length = 0                              # updates in data

    def work(self, rows: int | None) -> bool:
        """Merge about ``rows`` rows' worth of updates (see :attr:`Batch.merge_cost`; at
        least one key), or everything left for None; True once everything is merged."""
        budget = None if rows is None else max(rows // Batch.merge_cost, 1)
        while self._stage < len(self._stages):
            source, advance = self._stages[self._stage]
            if self._stage == 0 and not advance and budget is None and self._items is None:
                self.data.update(source.data)         # the widest batch at once
                self.length += len(source)
            else:
                if self._items is None:
                    self._items = iter(source.items())
                budget = self._take(self._items, advance, budget)
                if budget is not None and budget <= 0:
                    return False
            self._stage += 1
            self._items = None
        return True

    def _take(self, items: Iterator, advance: bool, budget: int | None) -> int | None:
        """Merge keys from ``items`` until they run out or ``budget`` updates are merged;
        the budget left (None: unlimited)."""
        data, since, compacted = self.data, self.since, self.compacted
        get = data.get
        length = self.length
        for key, updates in items:
            present = get(key)
            if present is None:
                if advance and len(updates) > 1:     # compact_updates, inlined: every key
                    updates = advance_updates(updates, since)
                if updates:
                    data[key] = updates
                    length += len(updates)
            elif not compacted:
                data[key] = present + updates
                length += len(updates)
            else:
                merged = consolidate_updates(
                    [(v, advance_by(t, since), d) for v, t, d in present + updates] if since
                    else present + updates)
                length += len(merged) - len(present)
                if merged:
                    data[key] = merged
                else:
                    del data[key]
            if budget is not None:
                budget -= len(updates)
                if budget <= 0:
                    break
        self.length = length
        return budget

    def result(self) -> Batch:
        """The merged batch (once :meth:`work` said True)."""
        batches = self.batches
        return Batch(self.data, batches[0].lower, batches[-1].upper, self.claimed, self.length)


class Batcher:
    """Buffers updates until their times are complete, then hands them out in batches.

    ``push(updates)`` keeps a list of ``(data, time, diff)``; ``seal(frontier)`` returns the
    updates whose times are not beyond ``frontier`` and keeps the others;
    ``frontier_times()`` are the earliest times still buffered (what capabilities must
    still be held for).

    >>> batcher = Batcher()
    >>> batcher.push([("a", 1, 1), ("b", 4, 1)])
    >>> batcher.seal([3]), batcher.frontier_times()
    ([('a', 1, 1)], [4])
    """

    def __init__(self) -> None:
        self._buffered: list[tuple[list, list]] = []      # (earliest times, updates)

    def push(self, updates: list) -> None:
        if updates:
            self._buffered.append((_earliest(updates), updates))

    def __bool__(self) -> bool:
        return bool(self._buffered)

    def seal(self, frontier: list) -> list:
        """The updates not beyond ``frontier`` (all of them for ``[]``), removed from the
        buffer."""
        if not frontier:
            ready = [u for _, updates in self._buffered for u in updates]
            self._buffered = []
            return ready
        ready = []
        keep: list = []
        single_int = len(frontier) == 1 and frontier[0].__class__ is int
        f = frontier[0] if single_int else None
        for earliest, updates in self._buffered:
            if all(beyond(frontier, t) for t in earliest):
                keep.append((earliest, updates))
                continue
            if single_int:
                now = [u for u in updates if u[1] < f]
                later = [u for u in updates if u[1] >= f] if len(now) < len(updates) else []
            else:
                now = [u for u in updates if not beyond(frontier, u[1])]
                later = [u for u in updates if beyond(frontier, u[1])] if len(now) < len(updates) else []
            ready.extend(now)
            if later:
                keep.append((_earliest(later), later))
        self._buffered = keep
        return ready

    def frontier_times(self) -> list:
        """The earliest times of the buffered updates."""
        return antichain(t for earliest, _ in self._buffered for t in earliest)

    def updates(self) -> list:
        """Every buffered update (they stay buffered)."""
        return [u for _, updates in self._buffered for u in updates]


def _earliest(updates: list) -> list:
    """The minimal times among ``updates``."""
    first = updates[0][1]
    if first.__class__ is int:
        return [min(u[1] for u in updates)]
    return antichain(set(u[1] for u in updates))


def split_by_capabilities(updates: list, caps: list, time_of: Callable[[Any], Any]) -> list[list]:
    """``updates`` split into one list per capability time in ``caps``: each update goes to
    the last capability (in the given order) whose time is at or before its time, so the
    parts tile the interval as in differential's batch descriptions."""
    if len(caps) == 1:
        return [updates]
    parts: list[list] = [[] for _ in caps]
    indexed = list(enumerate(caps))[::-1]
    for update in updates:
        time = time_of(update)
        for i, cap in indexed:
            if less_equal(cap, time):
                parts[i].append(update)
                break
        else:
            raise AssertionError(f"update at {time!r} is before every held capability {caps}")
    return parts


def capability_intervals(lower: list, upper: list, caps: list) -> list[tuple[Any, list, list]]:
    """``(cap, part_lower, part_upper)`` for each capability time in ``caps`` (sorted): the
    interval of ``[lower, upper)`` whose updates :func:`split_by_capabilities` gives ``cap``,
    so that the batches sealed at the capabilities tile ``[lower, upper)``.

    >>> capability_intervals([0], [5], [1, 3])
    [(1, [0], [3]), (3, [3], [5])]
    """
    intervals = []
    for i, cap in enumerate(caps):
        part_upper = antichain(list(upper) + caps[i + 1:])
        intervals.append((cap, lower, part_upper))
        lower = part_upper
    return intervals
