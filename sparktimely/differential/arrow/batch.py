"""Arrow trace batches: updates as columns, sorted by the hash of their key.

An :class:`ArrowBatch` is the columnar twin of :class:`~..trace.batch.Batch`: a pyarrow Table
holding the data columns and the int64 ``diff`` column, a ``(coordinates, rows)`` int64 numpy
array of times (an ``int`` time has one coordinate; ``Product(t, i)`` two), and the uint64
hash of each row's key columns. Rows are consolidated and sorted by hash, so finding a set of
keys is a ``numpy.searchsorted`` and gathering them one ``take``; key equality is checked on
the gathered rows only (hashes may collide). Merging, compaction and consolidation are
pyarrow/numpy kernels (``concat``, ``group_by``, ``argsort``, ``take``), never a Python loop
over rows.

>>> import pyarrow as pa
>>> from sparktimely.progress.timestamp import TimeKind
>>> rows = pa.table({"w": ["b", "a", "b"], "diff": [1, 1, 1]})
>>> batch = ArrowBatch.build(rows, times_for(TimeKind(int), [0, 0, 0]), ["w"], [0], [1])
>>> sorted(zip(*batch.data.to_pydict().values()))
[('a', 1), ('b', 2)]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...dataflow.containers import HASH_COLUMN as HASH, unified
from ...hashing import hash_array, hash_rows, temporal_family
from ...progress.timestamp import Product, TimeKind
from ..updates import DIFF
from ..lattice import frontier_le
from ..trace.batch import entered_frontier

TIME_PREFIX = "__t"
ZERO = pa.scalar(0, pa.int64())
FALSE = pa.scalar(False)
"""Arrow scalars for compute calls: a Python literal there costs a failed import per call
(pyarrow looks for ``dateutil`` when converting Python scalars)."""
INT64 = pa.int64()


def int64_array(values: Sequence[int | None]) -> pa.Array:
    """An int64 Arrow array of Python integers (None: null), made through numpy when there
    is no null: ``pa.array`` of a list converts it value by value and reads ``os.environ``
    at every call (about twice as long for the few values of one update's output).

    >>> int64_array([3, -1]).to_pylist(), int64_array([3, None]).to_pylist()
    ([3, -1], [3, None])
    """
    try:
        return pa.array(np.array(values, np.int64))
    except TypeError:                   # a None among them
        return pa.array(list(values), INT64)


def key_columns(operator: str, schema: pa.Schema, key: Any) -> list:
    """The key column names for ``key`` (a name, a list of names, or None for every
    column but ``diff``), checked against ``schema``."""
    names = [n for n in schema.names if n != DIFF and n != HASH]
    if key is None:
        if not names:
            raise ValueError(f"{operator}: the Arrow batch has no data columns")
        return names
    columns = [key] if isinstance(key, str) else list(key)
    missing = [c for c in columns if c not in names]
    if missing or not columns:
        raise KeyError(f"{operator}: key column(s) {missing or columns} not among the batch's "
                       f"data columns ({', '.join(names)})")
    return columns


def with_key_hashes(operator: str, batch: pa.RecordBatch, key: Any) -> pa.RecordBatch:
    """``batch`` with a ``HASH`` column: the hash of each row's ``key`` columns (see
    :func:`key_columns`), computed once where a combiner consolidates it, so that neither
    the exchange routing it nor the arrangement sealing it hashes the keys again.

    >>> import pyarrow as pa
    >>> batch = with_key_hashes("Arrange", pa.record_batch({"w": ["a"], "diff": [1]}), "w")
    >>> batch.schema.names, bool(carried_hashes([batch])[0] == hash_rows(batch, ["w"])[0])
    (['w', 'diff', '__hash'], True)
    """
    try:
        hashes = hash_rows(batch, key_columns(operator, batch.schema, key))
    except TypeError as error:                  # a key column of a type no key may have
        raise TypeError(f"{operator}: {error}") from None
    return batch.append_column(HASH, pa.array(hashes, pa.uint64()))


def carried_hashes(batches: Sequence[pa.RecordBatch]) -> np.ndarray | None:
    """The key hashes the ``batches`` carry (see :func:`with_key_hashes`), concatenated;
    None unless every one carries them."""
    if not all(HASH in b.schema.names for b in batches):
        return None
    return np.concatenate([column_numpy(b, HASH) for b in batches])


def coordinate_kind(kind: TimeKind) -> TimeKind:
    """``kind`` as the int64 coordinates Arrow batches store its times in: a dataflow whose
    root times are ``Product``s of ints (``worker.dataflow(build, timestamp=st.Product)``)
    stores them as an iterative scope of an int dataflow does, as ``(outer, inner)``.
    TypeError for a root type other than int and Product.

    >>> coordinate_kind(TimeKind(Product)), coordinate_kind(TimeKind(int).nested())
    (TimeKind(int, int), TimeKind(int, int))
    """
    stored = TimeKind(int, inners=(int,) + kind.inners) if kind.base is Product else kind
    coordinates(stored)
    return stored


def coordinates(kind: TimeKind) -> int:
    """How many int64 coordinates a time of ``kind`` has (a kind as
    :func:`coordinate_kind` gives it)."""
    if kind.base is not int:
        raise TypeError(f"Arrow collections need int or Product-of-int times, not "
                        f"{kind.base.__name__}")
    if any(inner is not int for inner in kind.inners):
        raise TypeError(f"Arrow collections need int or Product-of-int times, not times "
                        f"like {kind.minimum()!r} (a scope.scoped of other rounds)")
    return kind.depth + 1


def time_coordinates(kind: TimeKind, time: Any) -> tuple:
    """``time`` as a tuple of ints, outermost first."""
    return kind.coordinates(time)


def coordinates_le(coords: Sequence[int], at: Sequence[int]) -> bool:
    """Whether the time with coordinates ``coords`` is ``<=`` the one with ``at`` in the
    partial order (every coordinate no greater).

    >>> coordinates_le((1, 5), (2, 5)), coordinates_le((1, 5), (2, 4))
    (True, False)
    """
    for mine, bound in zip(coords, at):
        if mine > bound:
            return False
    return True


def time_from(kind: TimeKind, coords: Sequence[int] | np.ndarray) -> Any:
    """The time whose coordinates are ``coords`` (inverse of :func:`time_coordinates`)."""
    time: Any = int(coords[0])
    for inner in coords[1:]:
        time = Product(time, int(inner))
    return time


SMALL_ROWS = 32
"""Arrays of at most this many rows take the Python paths of the helpers that have them
(:func:`distinct_times`, the reducer's row grouping): a numpy call costs a microsecond or
more whatever its length, where a loop over so few rows costs less than the several calls."""


def times_for(kind: TimeKind, times: Sequence[Any]) -> np.ndarray:
    """A ``(coordinates, len(times))`` int64 array of the given times."""
    k = coordinates(kind)
    return np.array([time_coordinates(kind, t) for t in times], np.int64).reshape(len(times), k).T.copy()


def constant_times(kind: TimeKind, time: Any, rows: int) -> np.ndarray:
    """A ``(coordinates, rows)`` array holding ``time`` in every row; an OverflowError naming
    ``time`` where it is beyond int64's range, in which Arrow batches keep their times.

    >>> constant_times(TimeKind(int), 2 ** 63, 1)
    Traceback (most recent call last):
    OverflowError: Arrow collections keep their times in int64: the time 9223372036854775808 is beyond its range (collections of Python records take any int time)
    """
    coords = time_coordinates(kind, time)
    out = np.empty((len(coords), rows), np.int64)
    try:
        for i, c in enumerate(coords):
            out[i] = c
    except OverflowError:
        raise OverflowError(f"Arrow collections keep their times in int64: the time {time!r} is "
                            f"beyond its range (collections of Python records take any int "
                            f"time)") from None
    return out


def consolidate(data: pa.Table, times: np.ndarray, hashes: Any = None, key: list | None = None
                ) -> tuple[pa.Table, np.ndarray, Any]:
    """Rows of equal data and time merged (their diffs summed), zero diffs dropped; the
    rows' key ``hashes``, if given, are carried along (grouped with, being a function of the
    ``key`` columns)."""
    if data.num_rows == 0:
        return data, times, hashes
    if hashes is not None:
        fast = consolidate_hashed(data, times, hashes, key)
        if fast is not None:
            return fast
    columns = [n for n in data.column_names if n != DIFF]
    time_names = [f"{TIME_PREFIX}{i}" for i in range(len(times))]
    table = data.select(columns)
    for name, coords in zip(time_names, times):
        table = table.append_column(name, pa.array(coords))
    group = columns + time_names
    if hashes is not None:
        table = table.append_column(HASH, pa.array(hashes))
        group = [HASH] + group
    table = table.append_column(DIFF, data.column(DIFF))
    grouped = nonzero_sums(table, group)
    out_times = np.vstack([column_numpy(grouped, n) for n in time_names]).reshape(
        len(times), grouped.num_rows)
    out_hashes = column_numpy(grouped, HASH) if hashes is not None else None
    result = grouped.select(columns).append_column(DIFF, grouped.column(DIFF))
    return result.combine_chunks(), out_times, out_hashes


def consolidate_hashed(data: pa.Table, times: np.ndarray, hashes: np.ndarray,
                       key: list | None = None) -> tuple[pa.Table, np.ndarray, np.ndarray] | None:
    """:func:`consolidate` for rows whose ``key`` hashes are known, sorted by (hash, time,
    the other columns: integers as they are, others by their hash): rows equal in all of
    these are merged once their data are seen to be equal (compared with the group's first
    row, on the repeated rows only), so no grouping of the data columns (strings: a hash
    table) is needed, and the result comes out sorted by hash. None if two rows so grouped
    differ (a hash collision): the caller then groups by every column.

    >>> import numpy as np, pyarrow as pa
    >>> data = pa.table({"w": ["b", "a", "b"], "diff": [1, 1, 1]})
    >>> out, times, hashes = consolidate_hashed(data, np.zeros((1, 3), np.int64),
    ...                                          np.array([7, 3, 7], np.uint64))
    >>> out.to_pydict(), hashes.tolist()
    ({'w': ['a', 'b'], 'diff': [1, 2]}, [3, 7])
    """
    columns = [n for n in data.column_names if n != DIFF]
    values = [sortable(data.column(n), n) for n in columns if key is not None and n not in key]
    order = hash_order(hashes, (*times, *values))
    ordered_hashes = hashes[order]
    ordered_times = times[:, order]
    first = np.empty(len(order), bool)
    first[0] = True
    np.not_equal(ordered_hashes[1:], ordered_hashes[:-1], out=first[1:])
    for coords in (*ordered_times, *(v[order] for v in values)):
        first[1:] |= coords[1:] != coords[:-1]
    starts = np.flatnonzero(first)
    unsure = columns if key is None else [   # the columns the sort did not compare itself
        n for n in columns if (n in key and not hash_is_key(data, key, data, key)) or not (
            n in key or pa.types.is_integer(data.column(n).type) and not data.column(n).null_count)]
    if len(starts) < len(order) and unsure:
        repeated = np.flatnonzero(~first)
        leaders = order[starts[np.cumsum(first)[repeated] - 1]]
        compared = data.select(unsure)
        equal = keys_equal(compared.take(order[repeated]), unsure, compared.take(leaders), unsure)
        if equal is not None and not equal.all():
            return None
    sums = np.add.reduceat(column_numpy(data, DIFF)[order], starts)
    keep = sums != 0
    rows = order[starts[keep]]
    result = data.select(columns).take(rows).append_column(DIFF, pa.array(sums[keep]))
    return (result.combine_chunks(), ordered_times[:, starts[keep]],
            ordered_hashes[starts[keep]])


def unsorted_order(hashes: np.ndarray) -> np.ndarray | None:
    """The order that sorts ``hashes`` (as :func:`hash_order`), or None if they are sorted
    already. At most :data:`SMALL_ROWS` of them are sorted in Python: one conversion instead
    of the six numpy calls of checking and sorting, whatever the length.

    >>> unsorted_order(np.array([9, 3, 5], np.uint64)).tolist(), unsorted_order(np.arange(3))
    ([1, 2, 0], None)
    """
    n = len(hashes)
    if n <= SMALL_ROWS:
        values = hashes.tolist()
        order = sorted(range(n), key=values.__getitem__)
        return None if order == list(range(n)) else np.array(order, np.intp)
    if np.all(hashes[1:] >= hashes[:-1]):
        return None
    return hash_order(hashes)


def hash_order(hashes: np.ndarray, others: Sequence[np.ndarray] = ()) -> np.ndarray:
    """The order of rows sorted by ``hashes``, then by each of ``others`` in turn; rows equal
    in all of them may come in any order. When none of ``others`` varies, the hashes alone
    are sorted: a few sorted runs (the batches a merge concatenates) by numpy's stable sort,
    which merges runs in linear time; others by its vectorised quicksort, several times
    faster than a stable sort or ``lexsort`` of random 64-bit keys.

    >>> import numpy as np
    >>> hash_order(np.array([9, 3, 5], np.uint64)).tolist()
    [1, 2, 0]
    >>> hash_order(np.array([5, 5, 3], np.uint64), [np.array([2, 1, 7])]).tolist()
    [2, 1, 0]
    """
    varying = [o for o in others if len(o) and (o != o[0]).any()]
    if varying:
        return np.lexsort((*varying[::-1], hashes))
    runs = np.count_nonzero(hashes[1:] < hashes[:-1]) + 1
    return np.argsort(hashes, kind="stable" if runs <= FEW_RUNS else "quicksort")


FEW_RUNS = 4
"""Up to this many ascending runs, a stable sort (timsort: merging the runs) beats a
quicksort of 64-bit keys."""


def sortable(column: Any, name: str) -> np.ndarray:
    """A numpy array that sorts equal values of ``column`` together: the values of an
    integer column without nulls, else a hash of each value; a TypeError naming the column
    ``name`` if its type has no hash."""
    if not column.null_count and pa.types.is_integer(column.type):
        return column_numpy_of(column)
    try:
        return hash_array(column)
    except TypeError:
        raise TypeError(f"value column {name!r} holds {column.type}: a collection's rows are "
                        f"grouped by all their columns, and this type cannot be: use integer, "
                        f"floating, temporal, boolean, string, binary or dictionary columns "
                        f"(or a null column)") from None


COMBINE_FROM = 4096
"""Batches at least this long are consolidated before they are exchanged, and when an
arrangement seals them. Shorter ones are sealed as they came unless at least half their
rows repeat a key or one has diff 0 (``ArrowBatch.build``'s ``repeats``): a ``group_by``
costs more than the few repeats it would remove, yet a join multiplies repeated rows."""


def consolidated_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A long batch of updates (data columns and ``diff``) with equal rows merged and zero
    diffs dropped; short ones (or ones without a ``diff`` column) as they are."""
    if batch.num_rows < COMBINE_FROM or DIFF not in batch.schema.names:
        return batch
    return _merged_rows(batch)


def consolidated_if_short(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The updates of a time read out of an arrangement (data columns and ``diff``) with
    equal rows merged and zero diffs dropped, as ``consolidate`` promises: a batch shorter
    than :data:`COMBINE_FROM` may hold them (an arrangement seals short batches as they
    came), a longer one was consolidated when sealed or merged.

    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"k": [2, 1, 2, 3], "diff": [1, 1, 1, 0]})
    >>> consolidated_if_short(batch).to_pydict()
    {'k': [1, 2], 'diff': [1, 2]}
    """
    if batch.num_rows >= COMBINE_FROM or (
            batch.num_rows == 1 and batch.column(DIFF)[0].as_py() != 0):
        return batch
    return _merged_rows(batch)


def _merged_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch``'s equal rows merged (diffs summed) and zero diffs dropped; a batch without
    data columns as it is."""
    columns = [n for n in batch.schema.names if n != DIFF]
    if not columns:
        return batch
    grouped = nonzero_sums(pa.Table.from_batches([batch]), columns)
    return table_batch(grouped.select(batch.schema.names).cast(batch.schema))


def nonzero_sums(table: pa.Table, columns: list) -> pa.Table:
    """:func:`group_sum` without the groups whose diffs sum to zero.

    >>> import pyarrow as pa
    >>> nonzero_sums(pa.table({"k": [2, 1, 2], "diff": [1, 1, -1]}), ["k"]).to_pydict()
    {'k': [1], 'diff': [1]}
    """
    grouped = group_sum(table, columns)
    return grouped.filter(pc.not_equal(grouped.column(DIFF), ZERO))


def group_sum(table: pa.Table, columns: list) -> pa.Table:
    """One row per distinct value of ``columns`` with its ``diff`` summed (``columns`` then
    ``diff``). Fixed-width columns without nulls are grouped with numpy (``lexsort`` and
    ``add.reduceat``), others with pyarrow's ``group_by``, whose set-up costs more than the
    whole numpy path on small tables.

    >>> import pyarrow as pa
    >>> group_sum(pa.table({"k": [2, 1, 2], "diff": [1, 1, 1]}), ["k"]).to_pydict()
    {'k': [1, 2], 'diff': [1, 2]}
    """
    arrays = []
    for name in columns:
        column = table.column(name)
        kind = column.type
        if column.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                     or pa.types.is_boolean(kind)):
            return group_by(table, columns, [(DIFF, "sum")]).rename_columns(columns + [DIFF])
        arrays.append(column_numpy(table, name))
    diffs = column_numpy(table, DIFF)
    if not len(diffs):
        return table.select(columns + [DIFF])
    order = np.lexsort(arrays[::-1])
    changes = np.zeros(len(order), bool)
    changes[0] = True
    for values in arrays:
        ordered = values[order]
        changes[1:] |= ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(changes)
    sums = np.add.reduceat(diffs[order], starts)
    return table.select(columns).take(order[starts]).append_column(DIFF, pa.array(sums))


def group_by(table: pa.Table, keys: list, aggregations: list) -> pa.Table:
    """``table.group_by(keys).aggregate(aggregations)`` on one thread, key columns first
    (pyarrow may put them last), dictionary columns unified first (batches encoded apart
    carry different dictionaries, which ``group_by`` refuses to mix)."""
    out = unified(table).group_by(keys, use_threads=False).aggregate(aggregations)
    names = out.column_names
    if names[:len(keys)] != keys:
        out = out.select(keys + [n for n in names if n not in keys])
    return out


def advance_times(times: np.ndarray, frontier: list, kind: TimeKind) -> np.ndarray:
    """Every time (column of ``times``) advanced by ``frontier``: the meet over its elements
    of the component-wise maximum."""
    if not frontier:
        return times
    result: Any = None
    for element in frontier:
        coords = np.array(time_coordinates(kind, element), np.int64).reshape(-1, 1)
        joined = np.maximum(times, coords)
        result = joined if result is None else np.minimum(result, joined)
    return result


def times_le(times: np.ndarray, time: Any, kind: TimeKind) -> np.ndarray:
    """A boolean mask: which times (columns of ``times``) are ``<= time``."""
    coords = np.array(time_coordinates(kind, time), np.int64).reshape(-1, 1)
    return np.all(times <= coords, axis=0)


def distinct_times(times: np.ndarray, kind: TimeKind) -> list:
    """The distinct times (as time objects) among the columns of ``times``, in the order of
    their coordinates (a few columns through a Python set, more with ``np.unique``).

    >>> from sparktimely.progress import Product
    >>> distinct_times(np.array([[2, 1, 2], [0, 5, 0]]), TimeKind(int, 1))
    [Product(1, 5), Product(2, 0)]
    """
    if times.shape[1] == 0:
        return []
    if times.shape[1] <= SMALL_ROWS:
        return [time_from(kind, coords) for coords in sorted(set(zip(*times.tolist())))]
    if times.shape[0] == 1:
        return [int(t) for t in np.unique(times[0])]
    if times.shape[0] == 2 and times.min() >= 0 and times.max() < 2**31:
        packed = np.unique((times[0] << 32) | times[1])
        return [time_from(kind, (int(p >> 32), int(p & 0xFFFFFFFF))) for p in packed]
    unique = np.unique(times, axis=1)
    return [time_from(kind, unique[:, i]) for i in range(unique.shape[1])]


def _sorted_by_hash(data: pa.Table, times: np.ndarray, hashes: np.ndarray,
                    at: Any) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Rows, times and hashes in the order of the hashes (``at``: every row is at that one
    time, so the times need not move)."""
    order = unsorted_order(hashes)
    if order is None:
        return data, times, hashes
    return data.take(order), times if at is not None else times[:, order], hashes[order]


def _mostly_repeats(hashes: np.ndarray) -> bool:
    """Whether at least half the rows sorted by ``hashes`` repeat the hash before them:
    enough repeated keys (rows, maybe) that consolidating them pays, as a join would
    multiply them; a few repeats (two words alike among a hundred) cost less as they are."""
    n = len(hashes)
    if n <= SMALL_ROWS:
        values = hashes.tolist()
        repeats = sum(a == b for a, b in zip(values, values[1:]))
    else:
        repeats = int(np.count_nonzero(hashes[1:] == hashes[:-1]))
    return n > 1 and 2 * repeats >= n


class ArrowBatch:
    """Consolidated Arrow updates for times in ``[lower, upper)``, sorted by key hash.

    A few rows sealed at once (at most :data:`SMALL_ROWS`) keep their table in the order
    they came until something reads it as a table (:attr:`data`): the hashes, times and the
    numpy columns that lookups, joins and counts read are in hash order from the start, and
    an Arrow ``take`` of a few rows costs more than all of those.
    """

    __slots__ = ("_data", "_order", "times", "hashes", "key", "kind", "lower", "upper", "since",
                 "_numpy", "_hash_set", "_time_range", "_integer_key")
    merge_cost = 1
    """Rows of merge work (a spine's unit) that merging one row costs."""

    def __init__(self, data: pa.Table, times: np.ndarray, hashes: np.ndarray, key: list,
                 kind: TimeKind, lower: list, upper: list, since: list) -> None:
        self._data = data
        self._order: np.ndarray | None = None    # the rows' hash order, not yet applied
        self.times = times
        self.hashes = hashes
        self.key = key
        self.kind = kind
        self.lower = lower
        self.upper = upper
        self.since = since
        self._numpy: dict = {}
        self._hash_set: frozenset | None = None
        self._time_range: tuple[tuple, tuple] | None = None
        self._integer_key: Any = False         # False: not looked at yet

    @classmethod
    def build(cls, data: pa.Table, times: np.ndarray, key: list, lower: list, upper: list,
              kind: TimeKind | None = None, since: list | None = None,
              consolidated: bool = False, hashes: np.ndarray | None = None,
              at: Any = None, repeats: bool = False) -> "ArrowBatch":
        """A batch of ``data`` (columns and ``diff``) at ``times``: consolidated (unless
        ``consolidated``), hashed by ``key`` (unless ``hashes`` are given) and sorted. ``at``
        says that every row is at that one time (known to :meth:`time_range` without a
        look). ``repeats`` (with ``consolidated``): the rows were not consolidated, and are
        if at least half of them repeat a key or one has diff 0 (a few rows as they came: a
        look at the sorted hashes costs far less than grouping them, and a join would
        multiply repeated rows and give out rows for zero diffs).

        >>> import pyarrow as pa
        >>> rows = pa.table({"k": [2, 1, 2, 2], "diff": [1, 1, 1, 1]})
        >>> ArrowBatch.build(rows, times_for(TimeKind(int), [0, 0, 0, 0]), ["k"], [0], [1],
        ...                  consolidated=True, repeats=True).data.to_pydict()
        {'k': [1, 2], 'diff': [1, 3]}
        >>> rows = pa.table({"k": [2, 1, 3], "diff": [1, 0, 1]})
        >>> sorted(ArrowBatch.build(rows, times_for(TimeKind(int), [0, 0, 0]), ["k"], [0], [1],
        ...                         consolidated=True, repeats=True).data.column("k").to_pylist())
        [2, 3]
        """
        kind = kind or TimeKind(int, times.shape[0] - 1)
        if not consolidated:
            data, times, hashes = consolidate(data, times, hashes)
        if hashes is None:
            hashes = hash_rows(data, key) if data.num_rows else np.empty(0, np.uint64)
        order = unsorted_order(hashes)
        if order is not None:
            hashes = hashes[order]
            times = times if at is not None else times[:, order]
            if data.num_rows > SMALL_ROWS:
                data, order = data.take(order), None
        diffs = None
        if repeats:
            diffs = column_numpy_of(data.column(DIFF))
            if order is not None:
                diffs = diffs[order]
            if _mostly_repeats(hashes) or np.count_nonzero(diffs) < len(diffs):
                if order is not None:
                    data, order = data.take(order), None
                data, times, hashes = _sorted_by_hash(*consolidate(data, times, hashes, key),
                                                      at)
                diffs = None
        batch = cls(data, times, hashes, list(key), kind, lower, upper,
                    lower if since is None else since)
        batch._order = order
        if diffs is not None:           # readers take them as numpy: made once
            batch._numpy[DIFF] = diffs
        if at is not None:
            coords = time_coordinates(kind, at)
            batch._time_range = (coords, coords)
        return batch

    @property
    def data(self) -> pa.Table:
        """The rows (data columns and ``diff``) in the order of :attr:`hashes`.

        >>> import pyarrow as pa
        >>> batch = ArrowBatch.build(pa.table({"k": [3, 1, 2], "diff": [1, 2, 3]}),
        ...                          times_for(TimeKind(int), [0, 0, 0]), ["k"], [0], [1])
        >>> [c.tolist() for c in batch.integer_columns(["k", "diff"])] == [
        ...     batch.data.column(name).to_pylist() for name in ("k", "diff")]
        True
        """
        order = self._order
        if order is not None:
            self._data, self._order = self._data.take(order), None
        return self._data

    @property
    def schema(self) -> pa.Schema:
        """The schema of :attr:`data` (read without putting a few rows in order)."""
        return self._data.schema

    def __len__(self) -> int:
        return self._data.num_rows

    @property
    def diffs(self) -> np.ndarray:
        return self.numpy(DIFF)

    def numpy(self, name: str) -> np.ndarray:
        """Column ``name``, an integer column without nulls (such as ``diff``), as numpy
        (see :meth:`integer_columns`)."""
        columns = self.integer_columns([name])
        if columns is None:
            raise TypeError(f"column {name!r} of {self!r} is not an integer column without "
                            f"nulls: {self.schema.field(name).type}")
        return columns[0]

    def integer_columns(self, names: list) -> list | None:
        """The columns ``names`` as numpy arrays of their own integer types, or None if one
        of them is not an integer column without nulls. Made once per column (readers look
        at a batch of a trace at every update and gather a few of its rows; the batch never
        changes).

        >>> import pyarrow as pa
        >>> rows = pa.table({"k": [2, 1], "s": ["x", "y"], "diff": [1, 1]})
        >>> batch = ArrowBatch.build(rows, times_for(TimeKind(int), [0, 0]), ["k"], [0], [1])
        >>> [c.tolist() for c in batch.integer_columns(["k", "diff"])], batch.integer_columns(["s"])
        ([[1, 2], [1, 1]], None)
        """
        cache = self._numpy
        columns = []
        for name in names:
            values = cache.get(name, False)
            if values is False:
                column = self._data.column(name)
                values = column_numpy_of(column) if pa.types.is_integer(column.type) \
                    and not column.null_count else None
                if values is not None and self._order is not None:
                    values = values[self._order]
                cache[name] = values
            if values is None:
                return None
            columns.append(values)
        return columns

    def take_columns(self, names: list, rows: np.ndarray) -> list:
        """Columns ``names`` at ``rows``, as Arrow arrays: gathered with numpy when they are
        integer columns without nulls (for a few rows, an Arrow take costs more to set up
        than it does), else with one Arrow take.

        >>> import pyarrow as pa
        >>> batch = ArrowBatch.build(pa.table({"k": [5, 5], "s": ["x", "y"], "diff": [1, 1]}),
        ...                          times_for(TimeKind(int), [0, 0]), ["k"], [0], [1],
        ...                          consolidated=True)
        >>> [c.to_pylist() for c in batch.take_columns(["k", "s"], np.array([1, 1, 0]))]
        [[5, 5, 5], ['y', 'y', 'x']]
        """
        columns = self.integer_columns(names)
        if columns is None:
            return table_batch(self.data.select(names).take(rows)).columns
        return [pa.array(values[rows]) for values in columns]

    def projected(self, columns: list) -> "ArrowBatch":
        """This batch with only the data columns ``columns`` (and ``diff``): rows may
        repeat where they differed only in the others.

        >>> import pyarrow as pa
        >>> batch = ArrowBatch.build(pa.table({"k": [1, 1], "s": ["x", "y"], "diff": [1, 1]}),
        ...                          times_for(TimeKind(int), [0, 0]), ["k"], [0], [1])
        >>> batch.projected(["k"]).data.to_pylist()
        [{'k': 1, 'diff': 1}, {'k': 1, 'diff': 1}]
        """
        return ArrowBatch(self.data.select(list(columns) + [DIFF]), self.times, self.hashes,
                          self.key, self.kind, self.lower, self.upper, self.since)

    def keys(self) -> set:
        raise TypeError("an Arrow arrangement is read by key columns, not key by key")

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(probe, rows)``: for every probe hash, the rows of this batch with that hash
        (``probe[i]`` indexes ``hashes``, ``rows[i]`` this batch's rows)."""
        return match_sorted(self.hashes, hashes)

    def hash_set(self) -> frozenset:
        """The key hashes of this batch as a set of ints (made once: a tiny batch of a trace
        is asked at every update whether it holds any of a few keys)."""
        if self._hash_set is None:
            self._hash_set = frozenset(self.hashes.tolist())
        return self._hash_set

    def time_range(self) -> tuple[tuple, tuple]:
        """The least and the greatest value of each time coordinate among the rows, as two
        tuples (equal when every row is at one time); made once per batch. A join asks it
        of the batches of a trace at every update: when the new batch's rows are all at one
        time and no row of a trace batch is later, each match is at that time.

        >>> import pyarrow as pa
        >>> rows = pa.table({"k": [1, 2], "diff": [1, 1]})
        >>> batch = ArrowBatch.build(rows, np.array([[3, 3], [0, 4]]), ["k"], [], [],
        ...                          TimeKind(int, 1))
        >>> batch.time_range()
        ((3, 0), (3, 4))
        """
        if self._time_range is None:
            times = self.times
            if times.shape[1] == 0:
                self._time_range = ((), ())
            else:
                self._time_range = (tuple(times.min(axis=1).tolist()),
                                    tuple(times.max(axis=1).tolist()))
        return self._time_range

    def integer_key(self) -> pa.DataType | None:
        """The type of the key when it is one integer column without nulls (whose hash
        :func:`hash_is_key` says is the key itself), else None; looked at once per batch.

        >>> import pyarrow as pa
        >>> t = pa.table({"k": [1, 2], "s": ["a", None], "diff": [1, 1]})
        >>> times = times_for(TimeKind(int), [0, 0])
        >>> [ArrowBatch.build(t, times, [key], [0], [1]).integer_key() for key in "ks"]
        [DataType(int64), None]
        """
        if self._integer_key is False:
            self._integer_key = integer_key_type(self._data, self.key)
        return self._integer_key

    def merged(self, newer: "ArrowBatch", since: list) -> "ArrowBatch":
        """This batch and the adjacent ``newer`` one as one batch (see :meth:`merged_all`)."""
        return self.merged_all([newer], since)

    def merged_all(self, newer: list, since: list, consolidating: bool = True) -> "ArrowBatch":
        """This batch and the adjacent ``newer`` ones as one batch, times advanced by
        ``since`` (the trace's logical compaction frontier). Hashes are reused; rows are
        consolidated only once times were advanced (before, batches hold disjoint times),
        and only if ``consolidating`` (else only sorted by hash: rows may repeat).

        >>> import pyarrow as pa
        >>> from sparktimely.progress.timestamp import TimeKind
        >>> def batch(t, diff):
        ...     return ArrowBatch.build(pa.table({"w": ["a"], "diff": [diff]}),
        ...                             times_for(TimeKind(int), [t]), ["w"], [t], [t + 1])
        >>> len(batch(0, 1).merged_all([batch(1, -1)], [2])), len(batch(0, 1).merged_all(
        ...     [batch(1, -1)], [2], consolidating=False))
        (0, 2)
        """
        parts = [self] + list(newer)
        stored = [b._stored() for b in parts]
        data = pa.concat_tables([d for d, _, _ in stored], promote_options="none")
        times = np.concatenate([t for _, t, _ in stored], axis=1)
        hashes = np.concatenate([h for _, _, h in stored])
        moved = bool(since) and not frontier_le(since, self.lower)
        if moved:
            times = advance_times(times, since, self.kind)
        if consolidating and (moved or any(b.since != b.lower for b in parts)):
            data, times, hashes = consolidate(data, times, hashes, self.key)
        return ArrowBatch.build(data, times, self.key, self.lower, parts[-1].upper, self.kind,
                                since or self.since, consolidated=True, hashes=hashes)

    def _stored(self) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """``(table, times, hashes)`` row for row as the table is stored: a merge sorts its
        parts' rows together, so the few rows of a batch not yet in hash order
        (:attr:`data`) need not be put in order first."""
        order = self._order
        if order is None:
            return self._data, self.times, self.hashes
        hashes = np.empty_like(self.hashes)
        hashes[order] = self.hashes
        times = np.empty_like(self.times)
        times[:, order] = self.times
        return self._data, times, hashes

    def merging(self, newer: list, since: list, piece_rows: int) -> "PiecewiseMerge":
        """:meth:`merged_all` of this batch and the adjacent ``newer`` ones, to be done a
        piece of about ``piece_rows`` rows at a time (see :class:`PiecewiseMerge`)."""
        return PiecewiseMerge([self] + list(newer), since, piece_rows)

    def sliced(self, start: int, stop: int) -> "ArrowBatch":
        """Rows ``start:stop`` (a run of hashes) as a batch with this batch's bounds."""
        return ArrowBatch(self.data.slice(start, stop - start), self.times[:, start:stop],
                          self.hashes[start:stop], self.key, self.kind, self.lower, self.upper,
                          self.since)

    def compacted(self, since: list) -> "ArrowBatch":
        """This batch with its times advanced to ``since`` and consolidated."""
        return self.advanced(since)

    def as_of(self, frontier: list) -> "ArrowBatch":
        """This batch with every time advanced by ``frontier``: itself when it is compacted
        that far already."""
        return self if frontier_le(frontier, self.since) else self.advanced(frontier)

    def advanced(self, frontier: list) -> "ArrowBatch":
        """This batch with its times advanced by ``frontier`` (consolidated, hashes kept)."""
        times = advance_times(self.times, frontier, self.kind)
        data, times, hashes = consolidate(self.data, times, self.hashes, self.key)
        return ArrowBatch.build(data, times, self.key, self.lower, self.upper, self.kind,
                                frontier, consolidated=True, hashes=hashes)

    def entered(self) -> "ArrowBatch":
        """This batch inside an iterative scope: each time ``t`` becomes ``Product(t, 0)``
        (one more, zero, time coordinate; the data columns are shared)."""
        times = np.vstack([self.times, np.zeros((1, self.times.shape[1]), np.int64)])
        return ArrowBatch(self.data, times, self.hashes, self.key, self.kind.nested(),
                          entered_frontier(self.lower), entered_frontier(self.upper),
                          entered_frontier(self.since))

    def to_record_batches(self) -> list[tuple[Any, pa.RecordBatch]]:
        """``(time, RecordBatch)`` per distinct time, holding the data columns and ``diff``."""
        return split_by_time(self.data, self.times, self.kind)

    def __repr__(self) -> str:
        return f"ArrowBatch({self.lower} .. {self.upper}, {len(self)} rows, key {self.key})"


class PiecewiseMerge:
    """A merge of adjacent batches (oldest first) done in pieces, so that a trace's large
    merges are spread over the updates that follow instead of landing on one of them. A
    piece is a range of hashes: the rows of every batch in it (a slice of each, the batches
    being sorted by hash) are merged as :meth:`ArrowBatch.merged_all` merges whole batches,
    times advanced by ``since``; rows of one hash fall in one piece, so consolidating piece
    by piece is consolidating the whole. The pieces, in hash order, make the merged batch.

    >>> import pyarrow as pa
    >>> from sparktimely.progress.timestamp import TimeKind
    >>> def batch(keys, t):
    ...     return ArrowBatch.build(pa.table({"k": keys, "diff": [1] * len(keys)}),
    ...                             times_for(TimeKind(int), [t] * len(keys)), ["k"], [t], [t + 1])
    >>> merge = batch(list(range(6)), 0).merging([batch([1, 2, 9], 1)], [2], piece_rows=3)
    >>> merge.work(3), merge.work(3), merge.work(3)
    (False, False, True)
    >>> whole = batch(list(range(6)), 0).merged(batch([1, 2, 9], 1), [2])
    >>> merge.result().data.equals(whole.data), merge.result().upper
    (True, [2])
    """

    def __init__(self, batches: list, since: list, piece_rows: int) -> None:
        self.batches = batches
        self.since = since
        total = sum(len(b) for b in batches)
        largest = max(batches, key=len)
        step = max(1, piece_rows * len(largest) // max(total, 1))
        splits = np.unique(largest.hashes[step::step])        # piece boundaries: hashes
        self.bounds = [np.concatenate([[0], b.hashes.searchsorted(splits), [len(b)]])
                       for b in batches]                       # each batch's row ranges
        self.rows = np.sum(self.bounds, axis=0)                # rows before each boundary
        self.pieces: list = []
        self.next = 0                                          # the first piece not merged

    def work(self, rows: int) -> bool:
        """Merge the next pieces, as many as fit in ``rows`` rows (at least one), as one;
        True once every piece is merged."""
        ends = self.rows
        if self.next < len(ends) - 1:
            last = int(np.searchsorted(ends, ends[self.next] + rows, "right")) - 1
            stop = min(max(last, self.next + 1), len(ends) - 1)
            parts = [b.sliced(int(bounds[self.next]), int(bounds[stop]))
                     for b, bounds in zip(self.batches, self.bounds)]
            self.pieces.append(parts[0].merged_all(parts[1:], self.since))
            self.next = stop
        return self.next >= len(ends) - 1

    def result(self) -> "ArrowBatch":
        """The merged batch (once :meth:`work` said True)."""
        first, pieces = self.batches[0], self.pieces
        if len(pieces) == 1:
            data, times, hashes = pieces[0].data, pieces[0].times, pieces[0].hashes
        else:
            data = pa.concat_tables([p.data for p in pieces]).combine_chunks()
            times = np.concatenate([p.times for p in pieces], axis=1)
            hashes = np.concatenate([p.hashes for p in pieces])
        return ArrowBatch(data, times, hashes, first.key, first.kind, first.lower,
                          self.batches[-1].upper, self.since or first.since)


def column_numpy(table: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    return column_numpy_of(table.column(name))


def column_numpy_of(column: Any) -> np.ndarray:
    """An Arrow array or chunked array as numpy (zero-copy when it can)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column.to_numpy(zero_copy_only=False)


def match_sorted(sorted_hashes: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, j)`` with ``probes[i] == sorted_hashes[j]``, as two index arrays.

    >>> import numpy as np
    >>> [x.tolist() for x in match_sorted(np.array([1, 1, 5], np.uint64),
    ...                                   np.array([7, 1, 5], np.uint64))]
    [[1, 1, 2], [0, 1, 2]]
    """
    if not len(sorted_hashes) or not len(probes):
        empty = np.empty(0, np.int64)
        return empty, empty
    if len(probes) == 1:                # one key (a one-row update): a scalar search
        probe = probes[0]
        first = int(sorted_hashes.searchsorted(probe))
        if first == len(sorted_hashes) or sorted_hashes[first] != probe:     # the usual miss
            empty = np.empty(0, np.int64)
            return empty, empty
        end = int(sorted_hashes.searchsorted(probe, "right"))
        return np.zeros(end - first, np.int64), np.arange(first, end)
    lo = sorted_hashes.searchsorted(probes)
    if not np.count_nonzero(sorted_hashes.take(lo, mode="clip") == probes):   # the usual miss
        empty = np.empty(0, np.int64)
        return empty, empty
    counts = sorted_hashes.searchsorted(probes, "right") - lo
    total = int(counts.sum())
    matched = counts.nonzero()[0]
    if total == len(matched):                           # each probe matched at most once
        return matched, lo[matched]
    probe = np.repeat(np.arange(len(probes)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return probe, np.repeat(lo, counts) + offsets


TINY = 256
"""Trace batches of at most this many rows are searched by :func:`lookup_all` only if
:func:`_tiny_hits` finds a probe among them."""


def lookup_all(batches: list, probes: np.ndarray) -> list[tuple[ArrowBatch, np.ndarray, np.ndarray]]:
    """``(batch, probe, rows)`` for each of ``batches`` (in order) holding some of the
    ``probes`` hashes, as :meth:`ArrowBatch.lookup` gives them. A trace ends in a few tiny
    batches (one per recent update) that a probe almost always misses: only those that
    :func:`_tiny_hits` finds holding a probe are searched.

    >>> import pyarrow as pa
    >>> from sparktimely.progress.timestamp import TimeKind
    >>> def batch(keys):
    ...     return ArrowBatch.build(pa.table({"k": keys, "diff": [1] * len(keys)}),
    ...                             times_for(TimeKind(int), [0] * len(keys)), ["k"], [0], [1])
    >>> batches = [batch([1, 2]), batch([3]), batch([2, 4])]
    >>> probes = batches[2].hashes
    >>> [(batches.index(b), rows.tolist()) for b, _, rows in lookup_all(batches, probes)]
    [(0, [1]), (2, [0, 1])]
    """
    found = []
    tiny = []
    for index, batch in enumerate(batches):
        length = len(batch)
        if length > TINY:
            probe, rows = batch.lookup(probes)
            if len(rows):
                found.append((index, batch, probe, rows))
        elif length:
            tiny.append((index, batch))
    if not tiny or not len(probes):
        return [(batch, probe, rows) for _, batch, probe, rows in found]
    for index, batch in _tiny_hits(tiny, probes):
        probe, rows = batch.lookup(probes)
        found.append((index, batch, probe, rows))
    found.sort(key=lambda entry: entry[0])
    return [(batch, probe, rows) for _, batch, probe, rows in found]


def _tiny_hits(tiny: list, probes: np.ndarray) -> list:
    """The ``(index, batch)`` entries of ``tiny`` (batches of at most :data:`TINY` rows)
    holding one of ``probes``. A few probes ask each batch's set of hashes
    (:meth:`ArrowBatch.hash_set`: a few dict lookups, no numpy call); many are sorted once
    and every tiny batch's hashes are searched among them together."""
    if len(probes) <= FEW_PROBES:
        wanted = probes.tolist()
        return [entry for entry in tiny if not entry[1].hash_set().isdisjoint(wanted)]
    hashes = np.concatenate([batch.hashes for _, batch in tiny])
    ordered = np.sort(probes)
    hit = ordered.take(ordered.searchsorted(hashes), mode="clip") == hashes
    if not np.count_nonzero(hit):
        return []
    ends = np.cumsum([len(batch) for _, batch in tiny])
    return [tiny[i] for i in np.unique(ends.searchsorted(np.flatnonzero(hit), "right"))]


FEW_PROBES = 64
"""Up to this many probes, :func:`_tiny_hits` asks the tiny batches' sets of hashes."""


def hash_is_key(left: pa.Table, left_key: list, right: pa.Table, right_key: list) -> bool:
    """True if equal key hashes mean equal keys, so :func:`keys_equal` need not look: one
    integer key column of the same type on both sides, without nulls (``hash_rows`` of one
    integer column is a bijection of its 64 bits, splitmix64's finaliser).

    >>> import pyarrow as pa
    >>> t = pa.table({"k": [1, 2], "s": ["a", None]})
    >>> hash_is_key(t, ["k"], t, ["k"]), hash_is_key(t, ["s"], t, ["s"])
    (True, False)
    """
    kind = integer_key_type(left, left_key)
    return kind is not None and kind == integer_key_type(right, right_key)


def integer_key_type(table: pa.Table, key: list) -> pa.DataType | None:
    """The type of ``key`` when it is one integer column without nulls, else None (see
    :func:`hash_is_key`)."""
    if len(key) != 1:
        return None
    column = table.column(key[0])
    return column.type if pa.types.is_integer(column.type) and not column.null_count else None


def keys_equal(left: pa.Table, left_key: list, right: pa.Table, right_key: list) -> np.ndarray:
    """Row-wise equality of the key columns of two equally long tables, as Python compares
    their values (nulls equal nulls; ``1 == 1.0``; a string never equals bytes, nor a
    timestamp an int; one instant in two units is one value).

    >>> import datetime as dt
    >>> left = pa.table({"k": pa.array([dt.date(2020, 1, 1), None], pa.date32())})
    >>> right = pa.table({"k": pa.array([dt.date(2020, 1, 1), None], pa.date64())})
    >>> keys_equal(left, ["k"], right, ["k"]).tolist()
    [True, True]
    >>> keys_equal(pa.table({"k": [5]}), ["k"],
    ...            pa.table({"k": pa.array([5], pa.timestamp("us"))}), ["k"]).tolist()
    [False]
    """
    mask: Any = None
    for a_name, b_name in zip(left_key, right_key):
        a, b = left.column(a_name), right.column(b_name)
        if pa.types.is_null(a.type) and pa.types.is_null(b.type):
            flags = np.ones(len(a), bool)       # every value null: one key
        elif a.type != b.type and value_family(a.type) != value_family(b.type):
            flags = np.asarray(pc.and_(a.is_null(), b.is_null()))
        else:
            equal = pc.equal(a, b) if a.type == b.type else _equal_across_types(a, b)
            if equal.null_count:
                equal = pc.or_(equal.fill_null(FALSE), pc.and_(a.is_null(), b.is_null()))
            flags = np.asarray(equal)
        mask = flags if mask is None else mask & flags
    return mask


def value_family(kind: pa.DataType) -> str:
    """The kind of Python value a column type holds, as far as equality goes: numbers
    (integers, floats, booleans), strings, bytes, one family per kind of time
    (:func:`~sparktimely.hashing.temporal_family`), else the type itself; a dictionary's
    values'.

    >>> value_family(pa.uint8()), value_family(pa.large_string()), value_family(pa.binary())
    ('number', 'string', 'bytes')
    """
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return "number"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or \
            pa.types.is_fixed_size_binary(kind):
        return "bytes"
    if pa.types.is_temporal(kind):
        return temporal_family(kind)
    return str(kind)


def _equal_across_types(a: pa.ChunkedArray, b: pa.ChunkedArray) -> Any:
    """``pc.equal`` of columns of one family and two types (Arrow's common type), or the
    values compared in Python where Arrow has none (a uint64 beyond int64's range against
    an int64, a boolean against an integer)."""
    try:
        return pc.equal(a, b)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([x == y for x, y in zip(a.to_pylist(), b.to_pylist())], pa.bool_())


def split_by_time(data: pa.Table | pa.RecordBatch, times: np.ndarray, kind: TimeKind) -> list[tuple[Any, pa.RecordBatch]]:
    """``data``'s rows grouped by their time: ``[(time, RecordBatch)]``."""
    if data.num_rows == 0:
        return []
    if np.all(times == times[:, :1]):
        return [(time_from(kind, times[:, 0]), table_batch(data))]
    unique, inverse = np.unique(times, axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse, minlength=unique.shape[1])
    ordered = table_batch(data.take(order))
    result, start = [], 0
    for i, n in enumerate(counts.tolist()):
        result.append((time_from(kind, unique[:, i]), ordered.slice(start, n)))
        start += n
    return result


def table_batch(table: pa.Table) -> pa.RecordBatch:
    """A Table as one RecordBatch."""
    if isinstance(table, pa.RecordBatch):
        return table
    batches = table.combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return batches[0]
