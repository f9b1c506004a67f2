"""The window engines for Arrow batches: the same windows as :mod:`._records`, computed with
numpy and pyarrow kernels over whole batches (no Python per row).

- Tumbling and sliding: each row's pane is ``(time - offset) // gcd(size, slide)``; a time's
  rows are grouped by key and pane (``group_by``) into partial aggregates kept per pane; a
  closing window groups its panes' partials by key.
- Sessions: a time's rows and the open sessions of their keys are sorted by key and start;
  a running maximum of the ends (over ranks, per key) finds where a new session begins, and
  one ``group_by`` over session numbers merges the partials.

Partials: ``count`` and ``sum`` add up, ``min`` and ``max`` take theirs, ``mean`` keeps a sum
and a count. State for checkpoints is a Table routed by its hash column (the key columns'
:func:`~sparktimely.hashing.hash_rows`, as the exchange before the operator routes rows).
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...dataflow.containers import large_layouts, one_zero, unified
from ...hashing import hash_rows, stable_hash
from ..arrow import AGGREGATES, FLOAT_SUM, check_aggregate_columns, group_rows, integer_column
from ._records import PaneWindows
from ._runs import PaneRuns
from .kinds import Session, Sliding

NONE_ROUTE = stable_hash(None)
"""The route of every row when the window has no key (as for Python records without one)."""
_COMPACT_EVERY = 16     # partial batches kept per pane before they are merged into one
_REDUCE_AT: dict[str, np.ufunc] = {"count_all": np.add, "count": np.add, "sum": np.add,
                                   "min": np.minimum, "max": np.maximum}
"""How :meth:`Aggregates.in_sessions` merges each kind of partial along a session."""


class Aggregates:
    """An Arrow ``aggregate`` dict ``{out: (op, in_column)}`` as partial, merging and final
    steps, over the key columns ``keys``. The engines' own columns (panes, session bounds,
    partials, hashes) are named by :meth:`internal`, with a prefix that begins none of the
    columns the window reads, so a key or input column never meets one of them.

    >>> Aggregates({"n": ("count", None)}, ["k"]).internal("hash")
    '__hash'
    >>> Aggregates({"n": ("sum", "__v")}, ["__pane"]).internal("hash")
    '___hash'
    """

    def __init__(self, aggregate: dict, keys: list[str]) -> None:
        for key in keys:
            if key in ("window_start", "window_end"):
                raise ValueError(f"window: key column {key!r} has the name of a column of "
                                 f"the results (rename it)")
            if keys.count(key) > 1:
                raise ValueError(f"window: key column {key!r} is named twice")
        self.keys = keys
        self.ops: list[tuple[str, str]] = []
        partial: list[tuple] = []
        merging: list[str] = []
        for out, spec in aggregate.items():
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise TypeError(f"window: aggregate {out!r} must be (op, in_column), got "
                                f"{spec!r}")
            op, column = spec
            if op not in AGGREGATES:
                raise ValueError(f"window: aggregate {out!r}: unknown op {op!r} (known: "
                                 f"{', '.join(AGGREGATES)})")
            if column is None and op != "count":
                raise ValueError(f"window: aggregate {out!r}: {op!r} needs an input column")
            if out in keys or out in ("window_start", "window_end"):
                raise ValueError(f"window: aggregate {out!r}: the name of an output column "
                                 f"is taken (by a key or window_start/window_end)")
            if op == "mean":
                partial += [(column, FLOAT_SUM), (column, "count")]
                merging += ["sum", "sum"]
            elif op == "count":
                partial.append(([], "count_all") if column is None else (column, "count"))
                merging.append("sum")
            else:
                partial.append((column, op))
                merging.append(op)
            self.ops.append((out, op))
        if not self.ops:
            raise ValueError("window: aggregate names no output column")
        self.aggregate = aggregate
        self.read = list(dict.fromkeys(keys + [c for c, _ in partial if isinstance(c, str)]))
        """The columns the partials read: the keys, then the aggregates' input columns."""
        self.prefix = "__"
        while any(name.startswith(self.prefix) for name in self.read):
            self.prefix += "_"
        self.names = [self.internal(f"p{i}") for i in range(len(partial))]
        self.partial = partial
        self.merging = list(zip(self.names, merging))

    def internal(self, name: str) -> str:
        """The name of the engines' own column ``name``."""
        return self.prefix + name

    def check_columns(self, rows: pa.Table) -> None:
        """A KeyError naming the aggregate whose input column ``rows`` lack; a TypeError
        naming one that sums or averages a column that holds no numbers."""
        check_aggregate_columns("window", self.aggregate, rows.schema)

    def partials(self, rows: pa.Table, name: str, values: pa.Array, keyed: bool
                 ) -> pa.RecordBatch:
        """Input rows grouped by the internal column ``name`` holding ``values`` (one per
        row), after the keys if ``keyed``: those columns, then the partial columns."""
        column = self.internal(name)
        return group_rows(rows.select(self.read).append_column(column, values),
                          self.keys + [column] if keyed else [column], self.partial, self.names)

    def merged(self, partials: list | pa.Table, by: list[str]) -> pa.RecordBatch:
        """Partial rows merged per ``by``: its columns, then the partial columns."""
        return group_rows(partials, by, self.merging, self.names)

    def in_sessions(self, sessions: pa.Table | None, rows: pa.Table, merged: Merged
                    ) -> list[np.ndarray] | None:
        """Each session's partial columns (int64 arrays, by session number), from the open
        ``sessions`` (their partial columns; the first intervals of ``merged``) and the
        records ``rows`` (the others), summed, or their minimum or maximum taken, along
        ``merged.order`` by numpy's ``reduceat``: the work of two ``group_by``s, without
        them, when every partial is a count, or a sum, min or max of an int64 column
        without nulls (integer arithmetic, exact as theirs); None otherwise.

        >>> aggregates = Aggregates({"n": ("count", None), "top": ("max", "v")}, ["k"])
        >>> rows = pa.table({"k": [1, 1, 2], "v": [5, 9, 4]})
        >>> merged = merge_intervals([rows.column("k")], np.array([0, 3, 0]), np.array([5, 8, 5]))
        >>> [column.tolist() for column in aggregates.in_sessions(None, rows, merged)]
        [[2, 1], [9, 4]]
        """
        columns = []
        for name, (column, op) in zip(self.names, self.partial):
            reduce = _REDUCE_AT.get(op)
            if reduce is None or op != "count_all" and rows.column(column).null_count:
                return None
            if op in ("count_all", "count"):
                values = np.ones(rows.num_rows, np.int64)
            elif rows.schema.field(column).type == pa.int64():
                values = rows.column(column).to_numpy()
            else:
                return None
            if sessions is not None and sessions.num_rows:
                partial = sessions.column(name)
                if partial.type != pa.int64() or partial.null_count:
                    return None
                values = np.concatenate([partial.to_numpy(), values])
            columns.append(reduce.reduceat(values[merged.order], merged.bounds))
        return columns

    def finish(self, partials: pa.RecordBatch | pa.Table, start: np.ndarray | int,
               end: np.ndarray | int) -> pa.RecordBatch:
        """Results from partial rows (key columns, then partial columns): the keys,
        ``window_start``, ``window_end`` and the output columns."""
        rows = partials.num_rows
        columns = [partials.column(k) for k in self.keys]
        parts = iter(partials.column(name) for name in self.names)
        outputs = []
        for _, op in self.ops:
            column = next(parts)
            outputs.append(pc.divide(pc.cast(column, pa.float64()), next(parts))
                           if op == "mean" else column)
        bounds = [pa.array(np.broadcast_to(np.asarray(b, np.int64), rows)) for b in (start, end)]
        return pa.RecordBatch.from_arrays(
            [_array(c) for c in columns + bounds + outputs],
            self.keys + ["window_start", "window_end"] + [out for out, _ in self.ops])


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def event_times(rows: pa.Table, column: str, margin: int, window: str) -> np.ndarray:
    """The int64 event times of ``rows`` (the error names the column, or the first row whose
    time is null). Windows of Arrow rows compute their bounds and close times in int64,
    adding at most ``margin`` to an event time or taking it away: a time closer than that
    to the int64 limits is refused (the error names it, its row and ``window``, the window
    kind and lateness), as is any time when ``margin`` leaves no room at all."""
    values = integer_column(rows, column, "window", "time")
    low, high = _INT64.min + margin, _INT64.max - margin
    if len(values) and (values.min() < low or values.max() > high):
        outside = (values < low) | (values > high)
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise ValueError(
                f"window: event time {int(values[row])} in column {column!r} (row "
                f"{rows.slice(row, 1).to_pylist()[0]}) is too near the int64 limits for "
                f"{window}: windows of Arrow rows compute bounds and close times in int64, "
                + (f"which holds them for event times from {low} to {high}" if low <= high
                   else "which cannot hold them for any event time"))
    return values.astype(np.int64, copy=False)


_INT64 = np.iinfo(np.int64)


def key_hashes(rows: pa.Table | pa.RecordBatch, keys: list[str]) -> np.ndarray:
    """Each row's route: the hash of its key columns (the same for every row without keys)."""
    if keys:
        return hash_rows(rows, keys)
    return np.full(rows.num_rows, NONE_ROUTE, np.uint64)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    return table.combine_chunks().to_batches()[0]


def _taken_in(batches: Iterable[pa.RecordBatch]) -> tuple[pa.Table, pa.Schema]:
    """The batches as one table whose columns Arrow can filter, take and group (view layouts
    as large ones, each dictionary column on one dictionary without nulls), and the schema
    they came in.

    >>> rows, schema = _taken_in([pa.record_batch({"k": pa.array(["a"], pa.string_view())})])
    >>> rows.schema.types, schema.types
    ([DataType(large_string)], [DataType(string_view)])
    """
    table = pa.Table.from_batches(list(batches))
    return unified(large_layouts(table)), table.schema


def _late(rows: pa.Table, late: np.ndarray, schema: pa.Schema) -> tuple[list, pa.Table]:
    """The late rows as a list of (at most one) batch of ``schema``, the one they came in,
    and the other rows."""
    if not late.any():
        return [], rows
    late_rows = _one_batch(rows.filter(late))
    if late_rows.schema != schema:
        late_rows = late_rows.cast(schema)
    return [late_rows], rows.filter(~late)


class ArrowPanes(PaneWindows):
    """Tumbling and sliding windows of Arrow rows: per pane, partial rows by key."""

    def __init__(self, kind: Sliding, time_of: str, keys: list[str], aggregates: Aggregates,
                 lateness: int) -> None:
        super().__init__(kind, lateness)
        self.margin = abs(kind.offset) + kind.size + kind.slide + lateness
        self.described = f"{kind!r} with lateness {lateness}"
        self.time_of = time_of
        self.keys = keys
        self.aggregates = aggregates
        self.panes: dict[int, list[pa.RecordBatch]] = {}
        """Per pane, batches of partial rows, each with one row per key it holds."""
        self.runs = PaneRuns(self._merged) if kind.size > kind.pane else None
        """The windows' merges of panes (a window of one pane has nothing to merge)."""

    def apply(self, time: int, batches: Iterable[pa.RecordBatch]) -> list:
        kind, keys = self.kind, self.keys
        rows, schema = _taken_in(batches)
        relative = event_times(rows, self.time_of, self.margin, self.described) - kind.offset
        self.aggregates.check_columns(rows)
        too_late = time > self.last_close + relative // kind.slide * kind.slide
        late, rows = _late(rows, too_late, schema)
        if late:
            relative = relative[~too_late]
        if not rows.num_rows:
            return late
        partials = self.aggregates.partials(rows, "pane", pa.array(relative // kind.pane), True)
        panes = partials.column(len(keys)).to_numpy()
        order = np.argsort(panes, kind="stable")
        partials = partials.take(pa.array(order)).drop_columns([self.aggregates.internal("pane")])
        panes = panes[order]
        starts = np.flatnonzero(np.r_[True, panes[1:] != panes[:-1]])
        if self.runs is not None and panes[0] < self.runs.taken:
            self.runs.reset()           # a pane that closed windows merged changes
        for begin, end in zip(starts, np.r_[starts[1:], len(panes)]):
            j = int(panes[begin])
            part = partials.slice(begin, end - begin)
            held = self.panes.get(j)
            if held is None:
                self.panes[j] = [part]
                self._schedule(j, time)
            else:
                held.append(part)
                if len(held) >= _COMPACT_EVERY:
                    held[:] = [self.aggregates.merged(held, keys)]
        return late

    def _close(self, time: int) -> pa.RecordBatch | None:
        closing = self._closing(time)
        if closing is None:
            return None
        i, window_panes, following = closing
        if self.runs is not None:     # a pane's parts, or a merge of them
            run = self.runs.merged(self.panes, window_panes.start, window_panes.stop)
            merged = None if run is None else self._merged(run)
        else:
            merged = self._merged(*(self.panes.get(j, []) for j in window_panes))
        self._drop_panes(self.panes, following)
        if merged is None:
            return None
        return self.aggregates.finish(merged, *self.kind.window(i))

    def _merged(self, *partials: list[pa.RecordBatch] | pa.RecordBatch
                ) -> pa.RecordBatch | None:
        """The partial rows of ``partials`` (batches, or lists of them) merged per key (None:
        there are none)."""
        parts = [p for part in partials for p in ([part] if isinstance(part, pa.RecordBatch)
                                                   else part)]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else self.aggregates.merged(parts, self.keys)

    def snapshot(self) -> pa.Table:
        """The partial rows with their pane, the time done and their key's hash (internal
        columns ``pane``, ``done``, ``hash``)."""
        internal = self.aggregates.internal
        if not self.panes:
            return pa.table({internal("hash"): pa.array([], pa.uint64())})
        tables = [pa.Table.from_batches(parts).append_column(
                      internal("pane"),
                      pa.array(np.full(sum(p.num_rows for p in parts), j, np.int64)))
                  for j, parts in self.panes.items()]
        table = pa.concat_tables(tables)
        table = table.append_column(internal("done"), pa.array(np.full(table.num_rows,
                                                                       self.done, np.int64)))
        return table.append_column(internal("hash"), pa.array(key_hashes(table, self.keys)))

    def restore(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        internal = self.aggregates.internal
        panes = table.column(internal("pane")).to_numpy()
        columns = self.keys + self.aggregates.names
        for j in np.unique(panes):       # one partial row per key, as each pane's parts have
            self.panes.setdefault(int(j), []).append(self.aggregates.merged(
                table.filter(pa.array(panes == j)).select(columns), self.keys))
        self.reschedule(self.panes, int(pc.max(table.column(internal("done"))).as_py()))


def _differs(column: pa.ChunkedArray) -> np.ndarray:
    """Whether each value differs from the one before it (nulls equal each other, and NaNs,
    as the other windows' grouping takes them).

    >>> _differs(pa.chunked_array([[1.0, float("nan"), float("nan"), None, None]])).tolist()
    [True, False, True, False]
    """
    if pa.types.is_null(column.type):
        return np.zeros(max(len(column) - 1, 0), bool)     # nulls only: all one group
    after, before = column.slice(1), column.slice(0, len(column) - 1)
    unequal = pc.fill_null(pc.not_equal(after, before), True)
    same = pc.and_(pc.is_null(after), pc.is_null(before))
    if pa.types.is_floating(column.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(after), pc.is_nan(before)), False))
    return (pc.and_not(unequal, same).to_numpy(zero_copy_only=False)
            if len(column) > 1 else np.zeros(0, bool))


class Merged(NamedTuple):
    """What :func:`merge_intervals` finds: the session ``number`` of each interval; per
    session its ``start``, its ``stop`` and the index of its ``first`` interval; and the
    intervals' ``order`` by key and start, in which session ``s`` holds
    ``order[bounds[s]:bounds[s + 1]]``."""

    number: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    first: np.ndarray
    order: np.ndarray
    bounds: np.ndarray


def merge_intervals(keys: list[pa.ChunkedArray], begin: np.ndarray, end: np.ndarray) -> Merged:
    """Intervals ``[begin, end)`` per key merged where they overlap (see :class:`Merged`).

    >>> merged = merge_intervals(
    ...     [pa.chunked_array([["a", "a", "b", "a"]])], np.array([0, 12, 3, 4]),
    ...     np.array([5, 17, 8, 9]))
    >>> merged.number.tolist(), merged.start.tolist(), merged.stop.tolist()
    ([0, 1, 2, 0], [0, 12, 3], [9, 17, 8])
    >>> merged.first.tolist(), merged.order.tolist(), merged.bounds.tolist()
    ([0, 1, 2], [0, 3, 1, 2], [0, 2, 3])
    """
    rows = len(begin)
    keys = [_plain(column) for column in keys]
    order = _key_time_order(keys, begin)
    begin, end = begin[order], end[order]
    new_key = np.zeros(rows, bool)
    new_key[0] = True
    taken = pa.array(order)
    for column in keys:
        new_key[1:] |= _differs(column.take(taken))
    # A session starts where an interval begins at or after the furthest end so far of its
    # key: a running maximum over times offset by key, so that keys never reach each other
    # (over the ranks of the times when the offsets would overflow int64).
    low = int(begin.min())
    span = int(end.max()) - low + 1
    segments = np.cumsum(new_key)
    if span * (int(segments[-1]) + 1) < 2 ** 62:
        offset = segments * np.int64(span)
        firsts_at, reaches = begin - low, end - low
    else:
        values, ranks = np.unique(np.concatenate([begin, end]), return_inverse=True)
        offset = segments * np.int64(len(values) + 1)
        firsts_at, reaches = ranks[:rows], ranks[rows:]
    reach = np.maximum.accumulate(offset + reaches)
    starts = np.ones(rows, bool)
    starts[1:] = offset[1:] + firsts_at[1:] >= reach[:-1]
    firsts = np.flatnonzero(starts)
    number = np.empty(rows, np.int64)
    number[order] = np.cumsum(starts) - 1
    return Merged(number, begin[firsts], np.maximum.reduceat(end, firsts), order[firsts], order,
                  firsts)


def _in_group_order(merged: Merged, keep: np.ndarray, held: int) -> np.ndarray:
    """The numbers of the sessions ``keep`` marks in the order a ``group_by`` of the records'
    partials, then of the ``held`` open sessions, gives them (first appearance: a session's
    first record, else its open session), so that both ways of merging keep the open
    sessions, and so the results, in one order.

    >>> merged = merge_intervals([pa.chunked_array([[1, 2, 2, 1]])], np.array([0, 0, 3, 9]),
    ...                          np.array([5, 5, 8, 14]))      # held: the first row
    >>> merged.number.tolist()          # sessions 2 and 1 first appear in records 0 and 2
    [0, 2, 2, 1]
    >>> _in_group_order(merged, np.array([True, True, True]), 1).tolist()
    [2, 1, 0]
    """
    rows = len(merged.number)
    records = rows - held
    position = np.concatenate([np.arange(records, rows), np.arange(records)])
    first_seen = np.minimum.reduceat(position[merged.order], merged.bounds)
    n = np.flatnonzero(keep)
    by_position = np.full(rows, -1, np.int64)   # positions are distinct: placed, not sorted
    by_position[first_seen[n]] = n
    return by_position[by_position >= 0]


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary-encoded key column as its values (what Arrow sorts and compares; each
    chunk may have its own dictionary), any other column as it is.

    >>> import pyarrow.compute as pc
    >>> _plain(pa.chunked_array([pc.dictionary_encode(pa.array(["b", "a", "b"]))])).to_pylist()
    ['b', 'a', 'b']
    """
    if pa.types.is_dictionary(column.type):
        return column.cast(column.type.value_type)
    return column


def _key_time_order(keys: list[pa.ChunkedArray], begin: np.ndarray) -> np.ndarray:
    """The order of rows by key (nulls together) and then by ``begin``: one numpy argsort
    of ``key * span + begin`` for one integer key column without nulls whose products fit in
    int64, else Arrow's sort over the columns (the same order of keys and times). The numpy
    sort need not be stable: rows of one key and one ``begin`` fall into one session whatever
    their order (a gap is positive), and numpy's unstable argsort is about five times faster.

    >>> _key_time_order([pa.chunked_array([[7, 3, 7, 3]])], np.array([5, 9, 1, 2])).tolist()
    [3, 1, 2, 0]
    """
    if not keys:
        return np.argsort(begin, kind="stable")
    if (len(keys) == 1 and pa.types.is_integer(keys[0].type) and not keys[0].null_count
            and len(begin)):
        values = keys[0].to_numpy().astype(np.int64)
        low_key, low = int(values.min()), int(begin.min())
        span = int(begin.max()) - low + 1
        if (int(values.max()) - low_key + 1) * span < 2 ** 62:
            return np.argsort((values - low_key) * np.int64(span) + (begin - low))
    return pc.sort_indices(
        pa.table({**{f"k{i}": k for i, k in enumerate(keys)}, "begin": begin}),
        sort_keys=[(f"k{i}", "ascending") for i in range(len(keys))] +
                  [("begin", "ascending")]).to_numpy()


def _numpy(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy()


class ArrowSessions:
    """Session windows of Arrow rows: the open sessions as one Table (key columns, then the
    internal columns ``start``, ``end``, the partials and ``hash``)."""

    def __init__(self, kind: Session, time_of: str, keys: list[str], aggregates: Aggregates,
                 lateness: int) -> None:
        self.margin = kind.gap + lateness
        self.described = f"{kind!r} with lateness {lateness}"
        self.gap = kind.gap
        self.time_of = time_of
        self.keys = keys
        self.aggregates = aggregates
        self.lateness = lateness
        self.open: pa.Table | None = None
        self._next: int | None = None      # the earliest close time of ``open``
        self.start, self.end, self.hash = map(aggregates.internal, ("start", "end", "hash"))
        self.columns = keys + [self.start, self.end] + aggregates.names + [self.hash]

    def apply(self, time: int, batches: Iterable[pa.RecordBatch]) -> list:
        keys, aggregates = self.keys, self.aggregates
        rows, schema = _taken_in(batches)
        begin = event_times(rows, self.time_of, self.margin, self.described)
        aggregates.check_columns(rows)
        hashes = key_hashes(rows, keys)
        sessions, rest = self._touched(hashes)
        m = sessions.num_rows if sessions is not None else 0
        # A session's key is its first interval's: -0.0 as 0.0, whichever row came first.
        row_keys = one_zero(rows.select(keys), keys)
        if sessions is not None and m:     # open sessions first, then the records
            key_columns = [pa.chunked_array(sessions.column(k).chunks +
                                            row_keys.column(k).chunks,
                                            rows.schema.field(k).type) for k in keys]
            hashes = np.concatenate([_numpy(sessions, self.hash), hashes])
            merged = merge_intervals(
                key_columns, np.concatenate([_numpy(sessions, self.start), begin]),
                np.concatenate([_numpy(sessions, self.end), begin + self.gap]))
        else:
            key_columns = [row_keys.column(k) for k in keys]
            merged = merge_intervals(key_columns, begin, begin + self.gap)
        number, start, stop, first = merged.number, merged.start, merged.stop, merged.first
        closes = stop - 1 + self.lateness
        # Closed before ``time``: only sessions of records alone (an open session closes at
        # ``time`` or later, and merging only moves that later); their records are late.
        late_sessions = closes < time
        records = number[m:]
        summed = aggregates.in_sessions(sessions, rows, merged)
        late, rows = _late(rows, late_sessions[records], schema)
        if summed is not None:
            n = _in_group_order(merged, ~late_sessions, m)
            partials = [pa.array(column[n]) for column in summed]
        else:
            # Grouped by session number alone (a session has one key): each session's key
            # columns and hash are those of its first interval.
            parts = [aggregates.partials(rows, "n", pa.array(records[~late_sessions[records]]),
                                         False)] if rows.num_rows else []
            by = [aggregates.internal("n")]
            if sessions is not None and m:
                parts.append(pa.RecordBatch.from_arrays(
                    [pa.array(number[:m])] +
                    [_array(sessions.column(name)) for name in aggregates.names],
                    by + aggregates.names))
            grouped = aggregates.merged(parts, by) if parts else None
            n = np.zeros(0, np.int64) if grouped is None else grouped.column(0).to_numpy()
            partials = [] if grouped is None else [grouped.column(name)
                                                   for name in aggregates.names]
        if not len(n):
            return late
        representative = first[n]
        taken = pa.array(representative)
        opened = pa.Table.from_arrays(
            [_array(column.take(taken)) for column in key_columns] +
            [pa.array(start[n]), pa.array(stop[n])] + partials +
            [pa.array(hashes[representative])], self.columns)
        self.open = opened if rest is None else pa.concat_tables([rest, opened])
        if self.open.column(0).num_chunks > _COMPACT_EVERY:
            self.open = self.open.combine_chunks()
        earliest = int(closes[n].min())
        self._next = earliest if self._next is None else min(self._next, earliest)
        return late

    def next_close(self) -> int | None:
        return self._next

    def _touched(self, hashes: np.ndarray) -> tuple[pa.Table | None, pa.Table | None]:
        """The open sessions whose key hash is among ``hashes`` (a hash shared by another
        key only adds a session that stays as it is), and the others."""
        if self.open is None:
            return None, None
        touched = pc.is_in(self.open.column(self.hash), value_set=pa.array(hashes))
        return self.open.filter(touched), self.open.filter(pc.invert(touched))

    def close(self, through: int | None) -> list[tuple[int, pa.RecordBatch]]:
        """The sessions closing at or before ``through``, in one pass: finished together,
        then sliced by close time."""
        if self._next is None or through is not None and self._next > through:
            return []
        assert self.open is not None
        closes = _numpy(self.open, self.end) - 1 + self.lateness
        closed = closes <= through if through is not None else np.ones(len(closes), bool)
        left = closes[~closed]
        self._next = int(left.min()) if len(left) else None
        if not closed.any():            # ``_next`` was a session's close time before it grew
            return []
        done = self.open.filter(closed)
        self.open = self.open.filter(~closed)
        closes = closes[closed]
        order = np.argsort(closes, kind="stable")
        results = self.aggregates.finish(done, _numpy(done, self.start),
                                         _numpy(done, self.end)).take(pa.array(order))
        closes = closes[order]
        starts = np.flatnonzero(np.r_[True, closes[1:] != closes[:-1]])
        return [(close, results.slice(a, b - a)) for close, a, b in zip(
            closes[starts].tolist(), starts.tolist(), starts[1:].tolist() + [len(closes)])]

    def snapshot(self) -> pa.Table:
        """The open sessions (with their key's hash)."""
        if self.open is None:
            return pa.table({self.hash: pa.array([], pa.uint64())})
        return self.open

    def restore(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self.open = table.select(self.columns).combine_chunks()
        self._next = int(_numpy(self.open, self.end).min()) - 1 + self.lateness
