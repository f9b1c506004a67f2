"""Grouped aggregations of Arrow arrangements: count, distinct, sum, min and max.

The reducer works on sets of keys, not key by key: the hashes of the keys that changed (and
of keys set aside for a later time) are looked up in every batch of the input and output
traces with ``searchsorted``, and the gathered rows are aggregated with ``group_by``. The
times to evaluate are those of differential's interesting-times closure, computed over the
(few) distinct times of the gathered rows; at each, the desired output (the aggregation of
the input accumulated to that time) minus the output accumulated to it is the correction
sent. Keys evaluated at a time where nothing changed simply produce no correction.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...dataflow.containers import one_zero
from ...ops.arrow import check_aggregate_columns, orderable
from ...progress.timestamp import TimeKind, less_equal
from ..updates import DIFF
from ..lattice import beyond, interesting_times
from .batch import (HASH, INT64, SMALL_ROWS, ZERO, ArrowBatch, column_numpy, constant_times,
                    coordinate_kind, coordinates, coordinates_le, distinct_times, group_by,
                    group_sum, hash_is_key, hash_order, int64_array, keys_equal, lookup_all,
                    nonzero_sums, table_batch, time_from, times_le)

AGGREGATES = ("count", "sum", "min", "max")
FEW_ROWS = 128
"""A count or distinct over integer columns gathering at most this many rows from both traces
evaluates them as Python tuples (:meth:`ArrowReducer._evaluate_rows`): measured on 2026-12-02,
that beat the int64 matrices' numpy calls up to about 128 rows at 20 interesting times, and
at any size at one to five (a small update of an iterative scope gathers tens of rows)."""
COUNT_FIELDS = [pa.field("count", pa.int64()), pa.field(DIFF, pa.int64())]


class AggregateSpec:
    """The output a key should have, given its input rows (data columns and ``diff``)."""

    outputs: tuple = ()
    """The columns the output has after the key columns (and before ``diff``)."""

    def desired(self, rows: pa.Table, key: list) -> pa.Table:
        raise NotImplementedError

    def check_key(self, operator: str, key: list) -> None:
        """Raise a ValueError naming ``operator`` if an output column would repeat a key
        column's name or ``diff``'s (the output's schema could not hold both)."""
        clash = [name for name in self.outputs if name in key or name == DIFF]
        if clash:
            raise ValueError(f"{operator}: the output column {clash[0]!r} would repeat "
                             f"{'the diff column' if clash[0] == DIFF else 'a key column'} "
                             f"(key columns {', '.join(key)}); rename the input's column "
                             f"(e.g. with map_batches) or choose another output name")


class CountSpec(AggregateSpec):
    """The key columns and an int64 ``count`` (the summed diffs), for non-zero counts."""

    outputs = ("count",)

    def desired(self, rows: pa.Table, key: list) -> pa.Table:
        return nonzero_sums(rows, key).rename_columns(key + ["count"])


class DistinctSpec(AggregateSpec):
    """Each row (its data columns) whose summed diff is positive, once."""

    def desired(self, rows: pa.Table, key: list) -> pa.Table:
        return _present(rows).drop_columns([DIFF])


def _present(rows: pa.Table) -> pa.Table:
    """The collection ``rows`` accumulate to, as a Python ``reduce`` is given it: each
    distinct row (its data columns) once, with its diffs summed, where that sum is positive
    (a row whose updates sum to zero or less is not in the collection; -0.0 and 0.0 are one
    value, whose diffs cancel as in Python).

    >>> _present(pa.table({"k": [1, 1, 1], "v": [10, 3, 10], "diff": [1, -1, 1]})).to_pydict()
    {'k': [1], 'v': [10], 'diff': [2]}
    >>> _present(pa.table({"k": [1, 1], "v": [-0.0, 0.0], "diff": [1, -1]})).num_rows
    0
    """
    data = [n for n in rows.column_names if n != DIFF]
    grouped = group_sum(one_zero(rows, data), data)
    return grouped.filter(pc.greater(grouped.column(DIFF), ZERO))


class AggregateColumns(AggregateSpec):
    """``{name: (function, column)}`` per key over the rows present in the collection
    (:func:`_present`: those whose diffs sum to more than zero, with that count), for keys
    with such rows: ``count`` (rows with ``column`` None, else the column's non-null
    values), ``sum`` (of ``column``'s non-null values weighted by count; null where none is
    present, as SQL's), and ``min``/``max`` (over the values present)."""

    def __init__(self, aggs: dict) -> None:
        self.aggs = dict(aggs)
        for name, spec in self.aggs.items():
            if not (isinstance(spec, tuple) and len(spec) == 2 and spec[0] in AGGREGATES):
                raise ValueError(f"reduce: aggregation {name!r} must be (function, column) with "
                                 f"function one of {', '.join(AGGREGATES)}, not {spec!r}")
            if spec[1] is None and spec[0] != "count":
                raise ValueError(f"reduce: aggregation {name!r} ({spec[0]}) needs a column")
        self.outputs = tuple(self.aggs)
        self._checked: pa.Schema | None = None          # the last schema found right

    def desired(self, rows: pa.Table, key: list) -> pa.Table:
        if not rows.schema == self._checked:
            check_aggregate_columns("reduce", self.aggs, rows.schema, internal=(DIFF, HASH),
                                    sums_of_dictionaries=False)
            self._checked = rows.schema
        rows = _present(rows)
        diff = rows.column(DIFF)
        first = pa.array(np.arange(rows.num_rows))
        table = rows.select(key).append_column(DIFF, diff).append_column(_FIRST, first)
        sums = []
        for i, (name, (function, column)) in enumerate(self.aggs.items()):
            if function in ("sum", "count") and column is not None:
                # How many of the column's values are present (non-null), by their diffs.
                present = pc.if_else(pc.is_valid(rows.column(column)), diff, ZERO)
                table = table.append_column(f"_n{i}", present)
                sums.append((f"_n{i}", "sum"))
            kind = None if column is None else rows.schema.field(column).type
            if function == "sum" and _integral(kind):
                table = table.append_column(f"_w{i}", _weighted(rows, column, diff))
                sums.append((f"_w{i}", "sum"))
            elif function == "sum" and not pa.types.is_floating(kind):
                table = table.append_column(f"_w{i}", pc.multiply(rows.column(column), diff))
                sums.append((f"_w{i}", "sum"))
        grouped = _by_first_row(group_by(table, key, [(DIFF, "sum"), (_FIRST, "min")] + sums))
        out = grouped.select(key)
        for i, (name, (function, column)) in enumerate(self.aggs.items()):
            if function == "count":
                out = out.append_column(name, grouped.column(
                    f"{DIFF}_sum" if column is None else f"_n{i}_sum"))
            elif function == "sum":
                kind = rows.schema.field(column).type
                if pa.types.is_floating(kind):
                    total = _net_sum(rows, key, column, first)
                else:
                    total = _in_int64(grouped.column(f"_w{i}_sum"), name, column)
                out = out.append_column(name, pc.if_else(
                    pc.greater(grouped.column(f"_n{i}_sum"), ZERO), total,
                    pa.scalar(None, total.type)))
            else:
                out = out.append_column(name, _extremes(rows, key, column, function, first))
        return out.filter(pc.greater(grouped.column(f"{DIFF}_sum"), ZERO))


_FIRST = "__first_row"
"""The column of row numbers whose minimum per key names the key's group in every
``group_by`` of one table: the groups of two group_bys line up by it, nulls in the keys
included (a join would match no null key)."""


def _by_first_row(grouped: pa.Table) -> pa.Table:
    """The groups of a ``group_by`` that took the minimum of :data:`_FIRST`, in the order of
    their keys' first rows."""
    return grouped.take(np.argsort(column_numpy(grouped, f"{_FIRST}_min"), kind="stable"))


def _integral(kind: pa.DataType | None) -> bool:
    """Whether a column of type ``kind`` sums as Python ints (integers, booleans)."""
    return kind is not None and (pa.types.is_integer(kind) or pa.types.is_boolean(kind))


def _weighted(rows: pa.Table, column: str, diff: Any) -> Any:
    """An integer (or boolean) ``column`` times the diffs: int64 where no sum of them can
    wrap (all of them as large as the largest cannot), else decimal256, whose sums are
    exact (:func:`_in_int64` takes them back).

    >>> _weighted(pa.table({"v": [2 ** 61, 1]}), "v", pa.array([1, 3])).type
    DataType(int64)
    >>> _weighted(pa.table({"v": [2 ** 62, -1]}), "v", pa.array([2, 1])).type
    Decimal256Type(decimal256(41, 0))
    """
    values = rows.column(column)
    if pa.types.is_boolean(values.type):
        values = values.cast(INT64)
    try:
        weighted = pc.multiply_checked(values.cast(INT64), diff)
        extremes = pc.min_max(weighted)
        largest = max(abs(extremes["min"].as_py() or 0), abs(extremes["max"].as_py() or 0))
        if largest * len(weighted) < 2 ** 63:
            return weighted
    except pa.ArrowInvalid:                 # a value (uint64) or a product beyond int64
        pass
    return pc.multiply(values.cast(_WIDE), diff.cast(_WIDE))


_WIDE = pa.decimal256(20, 0)
"""Every int64 and uint64 value, and their products and sums of them, exactly."""

_INT64_RANGE = (pa.scalar(-2 ** 63, pa.decimal256(20, 0)),
                pa.scalar(2 ** 63 - 1, pa.decimal256(20, 0)))


def _in_int64(sums: Any, name: str, column: str) -> Any:
    """The sums of :func:`_weighted` values as int64; an OverflowError naming the sum
    ``name`` of ``column`` where one is beyond int64's range (Python's ints do not wrap).

    >>> _in_int64(pa.chunked_array([pa.array([5], pa.decimal256(76, 0))]), "s", "v").type
    DataType(int64)
    """
    if pa.types.is_decimal(sums.type):
        low, high = (bound.cast(sums.type) for bound in _INT64_RANGE)
        if pc.any(pc.or_(pc.less(sums, low), pc.greater(sums, high))).as_py():
            raise OverflowError(f"reduce: the sum {name!r} of column {column!r} is beyond "
                                f"int64's range (for some key)")
        sums = sums.cast(INT64)
    return sums


def _net_sum(rows: pa.Table, key: list, column: str, first: pa.Array) -> pa.ChunkedArray:
    """The sum per key of a floating ``column``'s values times their diffs summed per value
    first (the values present, as Python sums the accumulated collection: ``1e20 + 1.0 -
    1e20`` is ``1.0``, not the ``0.0`` of adding the updates one by one), in the order of
    the keys' first rows."""
    values = _per_value(rows, key, column, first)
    weighted = pc.multiply(values.column(column), values.column(f"{DIFF}_sum"))
    by_key = group_by(values.select(key).append_column("_weighted", weighted)
                      .append_column(_FIRST, values.column(f"{_FIRST}_min")),
                      key, [("_weighted", "sum"), (_FIRST, "min")])
    return _by_first_row(by_key).column("_weighted_sum")


def _per_value(rows: pa.Table, key: list, column: str, first: pa.Array) -> pa.Table:
    """The rows grouped by key and ``column``'s value (-0.0 and 0.0 one value, as their diffs
    cancel in Python): the key and value columns, the diffs summed (``DIFF_sum``) and each
    group's first row (``_FIRST_min``)."""
    rows = one_zero(rows, [column])
    return group_by(rows.select(key + [column]).append_column(DIFF, rows.column(DIFF))
                    .append_column(_FIRST, first), key + [column],
                    [(DIFF, "sum"), (_FIRST, "min")])


def _extremes(rows: pa.Table, key: list, column: str, function: str,
              first: pa.Array) -> pa.ChunkedArray:
    """``function`` (min or max) of ``column`` per key over the values present (their diffs
    summing to more than zero), in the order of the keys' first rows; null where none is. A
    dictionary-encoded column or a duration is compared as :func:`orderable` says."""
    comparable, back = orderable(rows.column(column))
    rows = rows.set_column(rows.schema.get_field_index(column), column, comparable)
    values = _per_value(rows, key, column, first)
    present = pc.greater(values.column(f"{DIFF}_sum"), ZERO)
    kept = pc.if_else(present, values.column(column),
                      pa.scalar(None, values.schema.field(column).type))
    by_key = group_by(values.select(key).append_column(column, kept)
                      .append_column(_FIRST, values.column(f"{_FIRST}_min")),
                      key, [(column, function), (_FIRST, "min")])
    extremes = _by_first_row(by_key).column(f"{column}_{function}")
    return extremes if back is None else extremes.cast(back)


def count_spec() -> AggregateSpec:
    return CountSpec()


def distinct_spec() -> AggregateSpec:
    return DistinctSpec()


def aggregate_spec(aggs: dict) -> AggregateSpec:
    return AggregateColumns(aggs)


class ArrowReducer:
    """Retires intervals of Arrow batches for one grouped aggregation. A count at totally
    ordered times keeps small updates' output in its :class:`CountIndex` alone while it
    answers (with ``keep_index``: not when checkpointing, which snapshots the output
    trace), bringing the output trace up to date before another path reads it.

    Such a count reads no input trace either (:attr:`reads_history` is False): a key's
    input accumulated through ``lower`` sums to its count in the output, so the one path
    that reads the input, after a hash collision, reads the output's rows as input rows
    (:func:`counts_as_input`)."""

    def __init__(self, name: str, spec: AggregateSpec, kind: TimeKind,
                 keep_index: bool = False) -> None:
        self.name = name
        self.spec = spec
        self.kind = kind = coordinate_kind(kind)
        self.total = kind.depth == 0
        self.pending: dict = {}          # time -> uint64 hashes of keys to evaluate then
        self.out_schema: pa.Schema | None = None
        self._out_fields: pa.Schema | None = None   # out_schema without the hash
        self.key: list = []
        self.counts = CountIndex()
        self.keep_index = keep_index
        self.reads_history = not (self.total and isinstance(spec, CountSpec) and keep_index)

    def pending_times(self) -> list:
        return list(self.pending)

    def retire(self, batches: list, history: list, out_history: list, lower: list,
               upper: list) -> tuple[list, list]:
        batches = [b for b in batches if len(b)]
        if batches:
            self._keyed_by(batches[0].key)
        ready = [t for t in self.pending if not beyond(upper, t)]
        if not batches and not ready:
            return [], []
        counting = self.total and isinstance(self.spec, CountSpec) and bool(batches)
        if counting and sum(len(b) for b in batches) <= SMALL_COUNT:
            fast = self.counts.updates(batches, out_history, lower, upper, self.kind,
                                       self.keep_index)
            if fast is not None:
                return fast[0], [fast[1]] if fast[1] is not None else []
        caught_up = self.counts.release(lower, self.kind)   # another path reads the trace
        out_history = out_history + caught_up
        counted = count_updates(batches, out_history, lower, upper, self.kind) \
            if counting else None
        produced, out_batch = counted or self._general(batches, ready, history, out_history,
                                                       lower, upper)
        return produced, caught_up + ([out_batch] if out_batch is not None else [])

    def _keyed_by(self, key: list) -> None:
        """Take the input's key columns at the first batch (checked against the output's
        columns)."""
        if not self.key:
            self.spec.check_key(self.name, key)
            self.key = key

    def retire_rows(self, parts: list, key: list, out_history: list, lower: list,
                    upper: list) -> tuple[list, list] | None:
        """:meth:`retire` for a count that arranges nothing (``count_total_stream``), of
        its new rows as they arrived (``(time, RecordBatch)`` entries): through the index
        when they are few and it can say, else None (the caller seals them and calls
        :meth:`retire`)."""
        self._keyed_by(key)
        if sum(batch.num_rows for _, batch in parts) > SMALL_COUNT:
            return None
        fast = self.counts.row_updates(parts, key, out_history, lower, upper, self.kind)
        return None if fast is None else (fast[0], [])

    def _general(self, batches: list, ready: list, history: list, out_history: list,
                 lower: list, upper: list) -> tuple[list, ArrowBatch | None]:
        """Any aggregation at any times: the keys' rows gathered from both traces."""
        key = self.key                   # set by retire at the first batch
        if not self.reads_history:
            history = counts_as_input(out_history, key)
            batches = [b.projected(key) for b in batches]
        hashes = [b.hashes for b in batches] + [self.pending.pop(t) for t in ready]
        keys = np.unique(np.concatenate(hashes))
        new_times: Any = np.concatenate([b.times for b in batches], axis=1) if batches else None
        integers = self._gather_integers(batches, history, out_history, keys)
        if integers is not None:
            schema, (in_data, in_times), (out_data, out_times), few = integers
        else:
            in_data, in_times = _gather(history, keys, batches)
            out_data, out_times = _gather(out_history, keys, [])
            in_data = None if in_data is None else one_zero(in_data, key)
            out_data = None if out_data is None else one_zero(out_data, key)
        seeds = set(ready) | set(distinct_times(new_times, self.kind) if batches else [])
        future: set = set()
        if self.total:
            times = sorted(seeds)
        else:
            partners = _times_among(in_times, self.kind) | _times_among(out_times, self.kind)
            times, future = interesting_times(seeds, partners, upper)
        for time in future:
            present = self.pending.get(time)
            self.pending[time] = keys if present is None else np.union1d(present, keys)
        if integers is not None:
            evaluate = self._evaluate_rows if few else self._evaluate_integers
            return self._integer_output(schema, evaluate(schema, in_data, in_times, out_data,
                                                         out_times, times), key, lower, upper)
        produced: list = []
        made: list = []
        made_times: list = []
        grouping = [HASH] + key              # the hash rides along: no re-hashing of outputs
        for time in times:
            rows = in_data if in_data is not None else None
            if rows is not None and not (self.total and len(times) == 1):
                rows = rows.filter(times_le(in_times, time, self.kind))
            wanted = self.spec.desired(rows, grouping) if rows is not None and rows.num_rows else None
            have = _accumulated(out_data, out_times, made, made_times, time, self.kind)
            correction = _difference(wanted, have, self.out_schema)
            if correction is None or not correction.num_rows:
                continue
            self.out_schema = correction.schema
            made.append(correction)
            made_times.append(constant_times(self.kind, time, correction.num_rows))
            produced.append((time, table_batch(correction.drop_columns([HASH]))))
        if not made:
            return produced, None
        data = pa.concat_tables(made)
        out_batch = ArrowBatch.build(data.drop_columns([HASH]), np.concatenate(made_times, axis=1),
                                     key, lower, upper, self.kind, consolidated=True,
                                     hashes=column_numpy(data, HASH))
        return produced, out_batch

    # -- count and distinct over integer columns: numpy matrices ------------------------------

    def _gather_integers(self, batches: list, history: list, out_history: list,
                         keys: np.ndarray) -> tuple | None:
        """``(output schema, (input rows, times), (output rows, times), few)`` when
        ``count``/``distinct`` can evaluate with numpy alone: every column read is an integer
        column without nulls (the usual shape of a graph computation). The rows of the keys
        ``keys`` (and every row of ``batches``) are int64 matrices, one row per update: the
        key hash, the columns the spec reads (the output's: the key columns and ``count``,
        or every data column), the diff; ``(None, None)`` where there are none. The output
        schema is the one the Arrow path would make (hash first, ``diff`` last). When at most
        :data:`FEW_ROWS` rows match, the rows are Python tuples and the times
        coordinate tuples instead (``([], [])`` where there are none), and the last item,
        ``few``, is True. None otherwise: then the Arrow path gathers and evaluates."""
        spec = self.spec
        if not isinstance(spec, (CountSpec, DistinctSpec)):
            return None
        sample = next((b for b in (*batches, *history) if len(b)), None)
        if sample is None:
            return None
        if self.out_schema is None:
            data = sample.schema
            names = self.key if isinstance(spec, CountSpec) else [n for n in data.names
                                                                  if n != DIFF]
            fields = [pa.field(HASH, pa.uint64())] + [data.field(n) for n in names]
            if isinstance(spec, CountSpec):
                fields.append(pa.field("count", pa.int64()))
            schema = pa.schema(fields + [pa.field(DIFF, pa.int64())])
            if any(not pa.types.is_integer(f.type) for f in schema):
                return None
        else:
            schema = self.out_schema
        read = list(schema.names[1:-1])
        if isinstance(spec, CountSpec):
            read.pop()                                  # the input has no count column
        in_matches = _matches(history, keys, batches)
        out_matches = _matches(out_history, keys, [])
        few = sum(len(batch) if isinstance(rows, slice) else len(rows)
                  for batch, rows in in_matches + out_matches) <= FEW_ROWS
        gather = _gather_int_rows if few else _gather_int64
        in_rows = gather(in_matches, read)
        out_rows = gather(out_matches, list(schema.names[1:-1]))
        if in_rows is None or out_rows is None:
            return None
        return schema, in_rows, out_rows, few

    def _evaluate_integers(self, schema: pa.Schema, rows_in: np.ndarray | None,
                           in_times: Any, rows_out: np.ndarray | None, out_times: Any,
                           times: list) -> list[tuple[Any, np.ndarray]]:
        """The evaluation loop of :meth:`retire` over the int64 matrices of
        :meth:`_gather_integers`: ``[(time, correction)]``, each correction an int64 matrix
        of output rows (hash first, diff last) sorted by their columns; same results as
        the Arrow path."""
        counting = isinstance(self.spec, CountSpec)
        width = len(schema) - 1                 # the output's columns before the diff
        if rows_in is None:                     # only keys set aside, with no input left
            rows_in = np.empty((0, width if counting else width + 1), np.int64)
            in_times = np.empty((coordinates(self.kind), 0), np.int64)
        made: list = []
        for time in times:
            if self.total and len(times) == 1:
                visible = rows_in
            else:
                visible = rows_in[times_le(in_times, time, self.kind)]
            grouped = _summed(visible, visible.shape[1] - 1)
            if counting:               # (hash, key..., count, 1) for non-zero counts
                wanted = np.hstack([grouped, np.ones((len(grouped), 1), np.int64)])
            else:                      # each row with a positive count, once
                wanted = grouped[grouped[:, -1] > 0]
                wanted[:, -1] = 1
            have = [wanted]
            if rows_out is not None:
                have.append(_negated(rows_out[times_le(out_times, time, self.kind)]))
            for earlier, matrix in made:        # every row of a correction is at its time
                if less_equal(earlier, time):
                    have.append(_negated(matrix))
            correction = _summed(np.vstack(have), width)
            if len(correction):
                made.append((time, correction))
        return made

    def _evaluate_rows(self, schema: pa.Schema, rows_in: list, in_coords: list,
                       rows_out: list, out_coords: list, times: list
                       ) -> list[tuple[Any, np.ndarray]]:
        """:meth:`_evaluate_integers` for the few rows of :meth:`_gather_integers`' Python
        path (tuples, and their times as coordinate tuples): grouped in dicts, without a
        numpy call per time. ``schema`` is unused: the tuples carry their own width."""
        counting = isinstance(self.spec, CountSpec)
        kind = self.kind
        written = list(zip(rows_out, out_coords))     # the output so far
        corrections: list = []          # (coordinates, rows): every row at its correction's time
        made: list = []
        for time in times:
            at = kind.coordinates(time)
            totals: dict = {}
            for row, coords in zip(rows_in, in_coords):
                if coordinates_le(coords, at):
                    group = row[:-1]
                    totals[group] = totals.get(group, 0) + row[-1]
            if counting:               # (hash, key..., count) for non-zero counts
                wanted = {group + (total,): 1 for group, total in totals.items() if total}
            else:                      # each row with a positive count, once
                wanted = {group: 1 for group, total in totals.items() if total > 0}
            seen = [row for row, coords in written if coordinates_le(coords, at)]
            for earlier, rows in corrections:
                if coordinates_le(earlier, at):
                    seen.extend(rows)
            for row in seen:
                group = row[:-1]
                wanted[group] = wanted.get(group, 0) - row[-1]
            correction = [group + (diff,) for group, diff in sorted(wanted.items()) if diff]
            if correction:
                corrections.append((at, correction))
                made.append((time, np.array(correction, np.int64)))
        return made

    def _integer_output(self, schema: pa.Schema, made: list, key: list, lower: list,
                        upper: list) -> tuple[list, ArrowBatch | None]:
        """What :meth:`retire` returns for the corrections ``[(time, int64 matrix)]`` of an
        integer evaluation: a batch per time to send, and one for the output trace."""
        if not made:
            return [], None
        if schema is not self.out_schema or self._out_fields is None:
            self.out_schema, self._out_fields = schema, pa.schema(list(schema)[1:])
        matrix = made[0][1] if len(made) == 1 else np.vstack([m for _, m in made])
        rows = _matrix_batch(matrix, self._out_fields)
        produced = []                   # each time's rows: a slice of the trace's batch
        start = 0
        for time, m in made:
            produced.append((time, rows.slice(start, len(m))))
            start += len(m)
        out_batch = ArrowBatch.build(
            pa.Table.from_batches([rows]),
            np.concatenate([constant_times(self.kind, time, len(m)) for time, m in made],
                           axis=1),
            key, lower, upper, self.kind, consolidated=True,
            hashes=np.ascontiguousarray(matrix[:, 0]).view(np.uint64))
        return produced, out_batch


def _times_among(times: Any, kind: TimeKind) -> set:
    """The distinct times of gathered rows: columns of a times array, coordinate tuples (the
    Python path of :meth:`ArrowReducer._gather_integers`), or None (no rows)."""
    if times is None:
        return set()
    if isinstance(times, list):
        return {time_from(kind, coords) for coords in set(times)}
    return set(distinct_times(times, kind))


def _summed(matrix: np.ndarray, width: int) -> np.ndarray:
    """Rows grouped by their first ``width`` columns, the last column summed, zero sums
    dropped (a ``width + 1``-column result, in the order of the grouped columns); a few rows
    are grouped in a dict, more with ``lexsort``.

    >>> _summed(np.array([[5, 1, 1], [2, 0, 1], [5, 1, 2], [2, 1, -1], [2, 1, 1]]), 2).tolist()
    [[2, 0, 1], [5, 1, 3]]
    """
    if not len(matrix):
        return np.empty((0, width + 1), np.int64)
    if len(matrix) <= SMALL_ROWS:
        totals: dict = {}
        for row in matrix.tolist():
            group = tuple(row[:width])
            totals[group] = totals.get(group, 0) + row[-1]
        kept = [group + (total,) for group, total in sorted(totals.items()) if total]
        return np.array(kept, np.int64).reshape(len(kept), width + 1)
    keys = matrix[:, :width]
    order = np.lexsort(keys.T[::-1])
    keys = keys[order]
    first = np.ones(len(order), bool)
    first[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(first)
    sums = np.add.reduceat(matrix[order, -1], starts)
    keep = sums != 0
    return np.hstack([keys[starts[keep]], sums[keep, None]])


def _negated(matrix: np.ndarray) -> np.ndarray:
    out = matrix.copy()
    out[:, -1] = -out[:, -1]
    return out


def _matrix_batch(matrix: np.ndarray, fields: pa.Schema) -> pa.RecordBatch:
    """An int64 matrix as a batch of ``fields``, the matrix's columns but its first (the key
    hash).

    >>> _matrix_batch(np.array([[9, 4, 1], [8, -2, -1]]),
    ...               pa.schema([("k", pa.int32()), (DIFF, pa.int64())])).to_pydict()
    {'k': [4, -2], 'diff': [1, -1]}
    """
    arrays = []
    for i, field in enumerate(fields, start=1):
        values = np.ascontiguousarray(matrix[:, i])
        if field.type == _UINT64:
            values = values.view(np.uint64)
        arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=fields)


_UINT64 = pa.uint64()


def count_updates(batches: list, out_history: list, lower: list, upper: list,
                  kind: TimeKind) -> tuple[list, ArrowBatch | None] | None:
    """``count`` for totally ordered times, from the output alone: each changed key's new
    count is its old count (the output trace, then what this call made at the batches'
    earlier times) plus the diffs that arrived at the time, so the input's history is not
    read, and the batches' times are taken in order, each once (not each against all the
    earlier ones: a window's retractions released together span many times). Sorting,
    grouping and alignment are numpy over the key hashes; None (use the general path) if
    two keys share a hash."""
    key = batches[0].key
    if len(batches) == 1:                             # an ArrowBatch is sorted by hash
        times, data, hashes = batches[0].times, batches[0].data, batches[0].hashes
        order = None
        diffs = batches[0].diffs
    else:
        times = np.concatenate([b.times for b in batches], axis=1)
        data = pa.concat_tables([b.data for b in batches])
        hashes = np.concatenate([b.hashes for b in batches])
        order = hash_order(hashes)                    # each batch is sorted: a few runs
        hashes = hashes[order]
        diffs = column_numpy(data, DIFF)[order]
        times = times[:, order]
    first = np.empty(len(hashes), bool)
    first[0] = True
    np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    unique = hashes[starts]
    keys = data.select(key)
    if order is None and len(starts) == len(hashes):
        firsts = keys
    else:
        firsts = keys.take(starts if order is None else order[starts])
    if len(starts) < len(hashes) and not hash_is_key(keys, key, keys, key):   # the same key?
        repeated = np.flatnonzero(~first)
        if not keys_equal(keys.take(repeated if order is None else order[repeated]), key,
                          firsts.take(np.cumsum(first)[repeated] - 1), key).all():
            return None                               # a hash collision: the general path
    old = np.zeros(len(unique), np.int64)
    present = np.zeros(len(unique), bool)
    found = lookup_all(out_history, unique)
    if found and not hash_is_key(keys, key, keys, key):
        # an output row of a probed hash may be another key's (a collision): compare keys
        outputs = pa.concat_tables([b.data.select(key).take(rows) for b, _, rows in found])
        probed = np.concatenate([p for _, p, _ in found])
        if not keys_equal(outputs, key, firsts.take(probed), key).all():
            return None                               # another key's count: general path
    if found:
        probe = np.concatenate([p for _, p, _ in found])
        count = np.concatenate([b.numpy("count")[rows] for b, _, rows in found])
        grouped = live_counts(probe, count,
                              np.concatenate([b.diffs[rows] for b, _, rows in found]))
        if grouped is None:
            return None                               # not one count per key: general path
        by, _, live = grouped
        old[probe[by][live]] = count[by][live]
        present[probe[by][live]] = True
    integers = all(pa.types.is_integer(c.type) and not c.null_count for c in firsts.columns)
    schema = pa.schema(list(firsts.schema) + COUNT_FIELDS)
    produced, made, made_rows, made_times = [], [], [], []
    for time, changed, delta in _deltas_by_time(times[0], diffs, first, starts):
        new = old[changed] + delta
        retract = changed[present[changed]]
        insert = changed[new != 0]
        rows = np.concatenate([retract, insert])
        if not len(rows):
            continue
        counts_out = np.concatenate([old[retract], new[new != 0]])
        diffs_out = np.ones(len(rows), np.int64)
        diffs_out[:len(retract)] = -1
        by = np.argsort(rows, kind="stable")         # by hash: the trace batch needs no sort
        rows, counts_out, diffs_out = rows[by], counts_out[by], diffs_out[by]
        if integers:
            key_arrays = [pa.array(column_numpy(firsts, n)[rows]) for n in key]   # no Arrow take
        else:
            key_arrays = list(firsts.take(rows).columns)
        table = pa.Table.from_arrays(key_arrays + [pa.array(counts_out), pa.array(diffs_out)],
                                     schema=schema)
        produced.append((time, table_batch(table)))
        made.append(table)
        made_rows.append(rows)
        made_times.append(constant_times(kind, time, table.num_rows))
        old[changed] = new
        present[changed] = new != 0
    if not made:
        return [], None
    if len(made) == 1:                                # rows ascending: sorted by hash already
        out = ArrowBatch(made[0], made_times[0], unique[made_rows[0]], list(key), kind, lower,
                         upper, lower)
    else:
        out = ArrowBatch.build(pa.concat_tables(made), np.concatenate(made_times, axis=1), key,
                               lower, upper, kind, consolidated=True,
                               hashes=unique[np.concatenate(made_rows)])
    return produced, out


SMALL_COUNT = 256
"""Updates of at most this many rows are counted by :class:`CountIndex` (Python containers),
larger ones by :func:`count_updates` (numpy over the output trace's batches)."""
INDEX_LIMIT = 100_000
"""A count whose output trace holds more rows than this keeps no :class:`CountIndex`."""


class CountIndex:
    """``count`` for totally ordered times on small updates, with plain Python containers:
    the current count of every key of the output (``{key: count}``, the output trace
    accumulated through the last retired interval, made from the trace when first needed)
    answers each changed key with one dict lookup, where :func:`count_updates` searches
    every batch of the output trace with numpy calls whose fixed costs a batch of a hundred
    rows does not repay. Same output as :func:`count_updates` (rows sorted by hash within
    each time, retraction before insertion), less the no-op pairs of keys whose updates
    cancel.

    The dict is keyed by the key's values (a tuple of them for several key columns), so
    that a lookup compares keys once and two keys of one hash are two entries. Float key
    columns are left to :func:`count_updates`: a NaN is not equal to itself in Python, so
    a dict would never find its key again.

    With ``keep``, the index is the output's only record: no batch for the output trace,
    which no one reads while the index answers (no batch built, inserted or merged). The
    index remembers what the trace held for each key it changed since (``behind``), and
    :meth:`release` gives the one batch that brings the trace up to date, before another
    path reads it. The reducer releases the index whenever another path is to count.

    >>> import pyarrow as pa
    >>> from sparktimely.progress.timestamp import TimeKind
    >>> from .batch import ArrowBatch, times_for
    >>> def words(ws, t):
    ...     return ArrowBatch.build(pa.table({"w": ws, "diff": [1] * len(ws)}),
    ...                             times_for(TimeKind(int), [t] * len(ws)), ["w"], [t], [t + 1])
    >>> index = CountIndex()
    >>> produced, out = index.updates([words(["a", "b", "a"], 0)], [], [0], [1], TimeKind(int))
    >>> sorted(produced[0][1].to_pylist(), key=lambda r: r["w"])
    [{'w': 'a', 'count': 2, 'diff': 1}, {'w': 'b', 'count': 1, 'diff': 1}]
    >>> produced, _ = index.updates([words(["a"], 1)], [out], [1], [2], TimeKind(int))
    >>> produced[0][1].to_pylist()
    [{'w': 'a', 'count': 2, 'diff': -1}, {'w': 'a', 'count': 3, 'diff': 1}]
    """

    def __init__(self) -> None:
        self.current: dict | None = None
        self.behind: dict = {}              # key -> the trace's count (0: none), if kept
        self.behind_from: list | None = None    # the trace's upper when the index kept output
        self.schema: pa.Schema | None = None       # the output's
        self.plain_keys = False                 # no float key column
        self._input_schema: pa.Schema | None = None

    def release(self, lower: list, kind: TimeKind) -> list:
        """Forget the index, and return the batches (none or one) that bring the output
        trace up to ``lower`` with the counts it kept: each key's retraction of what the
        trace holds and its current count, at the time the index began to keep them (the
        trace is compacted to ``lower``, so only the accumulation matters)."""
        current, behind, since = self.current, self.behind, self.behind_from
        self.current, self.behind, self.behind_from = None, {}, None
        if current is None or since is None or self.schema is None:
            return []
        keys: list = []
        counts: list = []
        diffs: list = []
        for k, old in behind.items():
            new = current.get(k, 0)
            if old != new:
                for count, diff in ((old, -1), (new, 1)):
                    if count:
                        keys.append(k)
                        counts.append(count)
                        diffs.append(diff)
        if not keys:
            return []
        table = pa.Table.from_batches([count_table(keys, counts, diffs, self.schema)])
        return [ArrowBatch.build(table, constant_times(kind, since[0], len(keys)),
                                 list(self.schema.names[:-2]), since, lower, kind, since,
                                 consolidated=True)]

    def updates(self, batches: list, out_history: list, lower: list, upper: list,
                kind: TimeKind, keep: bool = False) -> tuple[list, ArrowBatch | None] | None:
        """What :func:`count_updates` returns for ``batches`` (the new input), or None if
        the index cannot say (key columns whose values do not identify keys, an output too
        large to index or holding two keys of one hash): the caller counts with numpy then.
        With ``keep``, no batch for the output trace (see the class docstring)."""
        key = batches[0].key
        return self._counted(lambda: _deltas(batches, key), batches[0].schema, key,
                             out_history, lower, upper, kind, keep)

    def row_updates(self, parts: list, key: list, out_history: list, lower: list,
                    upper: list, kind: TimeKind) -> tuple[list, ArrowBatch | None] | None:
        """:meth:`updates` with ``keep`` (no output batch) for an input that is not
        arranged: ``parts`` are ``(time, RecordBatch)`` entries as they arrived (key
        columns, maybe the ``HASH`` column an exchange's combiner added, ``diff``); the
        rows of a key at a time are summed here, and the output has the keys in the order
        they came (not sorted by hash)."""
        return self._counted(lambda: _row_deltas(parts, key), parts[0][1].schema, key,
                             out_history, lower, upper, kind, True)

    def _counted(self, deltas: Callable[[], dict], input_schema: pa.Schema, key: list,
                 out_history: list, lower: list, upper: list, kind: TimeKind,
                 keep: bool) -> tuple[list, ArrowBatch | None] | None:
        """The output of the changes ``deltas()`` gives (``{time: (hash, key, summed
        diff) rows in hash order}``), or None if the index cannot say."""
        schema = self._output_schema(input_schema, key)
        if not self.plain_keys:
            return None
        current = self.current
        if current is None:
            current = self.current = self._indexed(out_history)
            if current is None:
                return None
        by_time = deltas()
        produced: list = []
        outputs: list[pa.RecordBatch] = []
        hashes: list[np.ndarray] = []
        times: list[tuple[Any, int]] = []               # (time, its output rows), by time
        current_get = current.get
        keep_first = self.behind.setdefault
        for time in sorted(by_time):
            # the output's columns: hashes, keys, counts, diffs (retraction, then insertion)
            out_h: list = []
            out_k: list = []
            out_c: list = []
            out_d: list = []
            for h, k, d in by_time[time]:           # each key once
                if not d:
                    continue
                count = current_get(k, 0)
                new = count + d
                if count and new:
                    out_h += (h, h)
                    out_k += (k, k)
                    out_c += (count, new)
                    out_d += (-1, 1)
                elif count or new:
                    out_h.append(h)
                    out_k.append(k)
                    out_c.append(count or new)
                    out_d.append(-1 if count else 1)
                if keep:
                    keep_first(k, count)
                if new:
                    current[k] = new
                else:
                    del current[k]
            if not out_h:
                continue
            output = count_table(out_k, out_c, out_d, schema)
            produced.append((time, output))
            times.append((time, len(out_h)))
            if not keep:
                outputs.append(output)
                hashes.append(np.array(out_h, np.uint64))
        if keep and self.behind_from is None:
            self.behind_from = lower
        if not outputs:
            return produced, None
        out_times = np.concatenate([constant_times(kind, time, rows) for time, rows in times],
                                   axis=1)
        table = pa.Table.from_batches(outputs)
        if len(outputs) == 1:
            out = ArrowBatch(table, out_times, hashes[0], list(key), kind, lower, upper, lower)
        else:
            out = ArrowBatch.build(table, out_times, key, lower, upper, kind,
                                   consolidated=True, hashes=np.concatenate(hashes))
        return produced, out

    def _output_schema(self, input_schema: pa.Schema, key: list) -> pa.Schema:
        """The key columns of ``input_schema``, then ``count`` and ``diff`` (made once)."""
        known = self._input_schema
        if known is not input_schema and (known is None or not input_schema.equals(known)):
            self._input_schema = input_schema
            fields = [input_schema.field(n) for n in key]
            self.schema = pa.schema(fields + COUNT_FIELDS)
            self.plain_keys = all(_indexable(f.type) for f in fields)
        assert self.schema is not None
        return self.schema

    @staticmethod
    def _indexed(out_history: list) -> dict | None:
        """``{key: count}`` of the output accumulated over ``out_history``; None if it
        holds more than :data:`INDEX_LIMIT` rows, or a hash with two live rows."""
        batches = [b for b in out_history if len(b)]
        if sum(len(b) for b in batches) > INDEX_LIMIT:
            return None
        if not batches:
            return {}
        hashes = np.concatenate([b.hashes for b in batches])
        counts = np.concatenate([b.numpy("count") for b in batches])
        grouped = live_counts(hashes, counts, np.concatenate([b.diffs for b in batches]))
        if grouped is None:
            return None                     # not one count per key: let numpy sort it out
        order, first, live = grouped
        key = batches[0].key
        data = pa.concat_tables([b.data.select(key) for b in batches]).take(order)
        group_start = np.flatnonzero(first)[np.cumsum(first) - 1]   # each row's group's first
        if not hash_is_key(data, key, data, key) and \
                not keys_equal(data, key, data.take(group_start), key).all():
            return None                     # two keys share a hash: numpy's path compares keys
        return dict(zip(row_keys(data.take(live), key), counts[order][live].tolist()))


def _indexable(kind: pa.DataType) -> bool:
    """Whether the count index may hold keys of a column of type ``kind`` by their Python
    values: equal exactly when the keys are (not floats: a NaN is not equal to itself),
    read without pandas (not nanosecond times), and of a type the hashed paths take too,
    so that a type they refuse is refused at any size and number of workers.

    >>> [_indexable(t) for t in (pa.int32(), pa.string(), pa.timestamp("ms"),
    ...                          pa.timestamp("ns"), pa.float64(), pa.decimal128(5, 2))]
    [True, True, True, False, False, False]
    """
    if pa.types.is_dictionary(kind):
        return _indexable(kind.value_type)
    if pa.types.is_temporal(kind):
        return kind.bit_width <= 64 and getattr(kind, "unit", None) != "ns"
    return (pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind))


def counts_as_input(out_history: list, key: list) -> list:
    """A count's output batches (key columns, ``count``, ``diff``) as input batches of the
    key columns whose diffs accumulate, key by key, to the same counts (``count`` times
    ``diff``): what a count reads instead of an input trace it does not keep."""
    return [ArrowBatch(b.data.select(key).append_column(DIFF, pa.array(b.numpy("count")
                                                                       * b.diffs)),
                       b.times, b.hashes, key, b.kind, b.lower, b.upper, b.since)
            for b in out_history if len(b)]


def count_table(keys: Sequence[Any], counts: Sequence[int], diffs: Sequence[int],
                schema: pa.Schema) -> pa.RecordBatch:
    """The count output (``schema``: key columns, ``count``, ``diff``) of its columns: keys
    (as :func:`row_keys` gives them), counts and diffs."""
    key_columns = [keys] if len(schema) == 3 else zip(*keys)
    return pa.RecordBatch.from_arrays(
        [int64_array(c) if f.type == INT64 else pa.array(list(c), f.type)
         for c, f in zip(key_columns, schema)]
        + [int64_array(counts), int64_array(diffs)], schema=schema)


def _deltas(batches: list, key: list) -> dict:
    """``{time: (hash, key, summed diff) rows}`` of a count's new ``batches``, each key
    once per time, in hash order (a list, or an iterator for one batch at one time with no
    key twice, which is sorted by hash already)."""
    if len(batches) == 1:
        batch = batches[0]
        lower = batch.lower[0] if len(batch.lower) == 1 else None
        # one time, ``lower``, unless the batch was advanced past it (an import's replay)
        if lower.__class__ is int and batch.upper == [lower + 1] and \
                len(batch.since) == 1 and batch.since[0] <= lower:
            hashes = batch.hashes.tolist()
            if len(set(hashes)) == len(hashes):
                return {lower: zip(hashes, row_keys(batch.data, key), batch.diffs.tolist())}
    by_time: dict = {}                  # time -> {key: [hash, summed diff]}
    for batch in batches:
        for t, h, k, d in zip(batch.times[0].tolist(), batch.hashes.tolist(),
                              row_keys(batch.data, key), batch.diffs.tolist()):
            deltas = by_time.setdefault(t, {})
            present = deltas.get(k)
            if present is None:
                deltas[k] = [h, d]
            else:
                present[1] += d
    return {t: sorted(((h, k, d) for k, (h, d) in deltas.items()), key=itemgetter(0))
            for t, deltas in by_time.items()}


def _row_deltas(parts: list, key: list) -> dict:
    """:func:`_deltas` of ``(time, RecordBatch)`` entries that no arrangement sealed, for
    the index that keeps the output alone (no output batch: its rows need no hashes, which
    are None here; keys in the order they came), the diffs of a key at a time summed."""
    by_time: dict = {}
    for time, batch in parts:
        deltas = by_time.setdefault(time, {})
        get = deltas.get
        for k, d in zip(row_keys(batch, key), batch.column(DIFF).to_pylist()):
            deltas[k] = get(k, 0) + d
    return {t: [(None, k, d) for k, d in deltas.items()] for t, deltas in by_time.items()}


def row_keys(table: pa.Table, key: list) -> Any:
    """The key of each row of ``table``, as the count index holds it: the value of the key
    column when there is one, else a tuple of the key columns' values.

    >>> row_keys(pa.table({"w": ["a", "b"]}), ["w"])
    ['a', 'b']
    >>> list(row_keys(pa.table({"w": ["a", "b"], "n": [1, 2]}), ["w", "n"]))
    [('a', 1), ('b', 2)]
    """
    if len(key) == 1:
        return table.column(key[0]).to_pylist()
    return zip(*(table.column(n).to_pylist() for n in key))


def live_counts(ids: np.ndarray, counts: np.ndarray, signs: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The current count of each id among a count's output rows ``(id, count, diff)`` (each
    key's current count with diff 1, earlier ones cancelled by -1): ``(order, first,
    live)``, where ``order`` sorts the rows by id then count, ``first`` marks the first row of
    each (id, count) group in that order and ``live`` the sorted positions of the groups
    whose diffs do not cancel. None unless each id has one such group, with net diff 1.

    >>> order, first, live = live_counts(np.array([7, 5, 7, 7]), np.array([1, 2, 1, 2]),
    ...                                  np.array([1, 1, -1, 1]))
    >>> [(int(i), int(c)) for i, c in zip(np.array([7, 5, 7, 7])[order][live],
    ...                                   np.array([1, 2, 1, 2])[order][live])]
    [(5, 2), (7, 2)]
    >>> live_counts(np.array([7, 7]), np.array([1, 2]), np.array([1, 1])) is None
    True
    """
    order = np.lexsort((counts, ids))
    ids, counts = ids[order], counts[order]
    first = np.empty(len(order), bool)
    first[0] = True
    first[1:] = (ids[1:] != ids[:-1]) | (counts[1:] != counts[:-1])
    starts = np.flatnonzero(first)
    net = np.add.reduceat(signs[order], starts)
    live = starts[net != 0]
    if (net[net != 0] != 1).any() or (ids[live][1:] == ids[live][:-1]).any():
        return None
    return order, first, live


def _deltas_by_time(times: np.ndarray, diffs: np.ndarray, first: np.ndarray,
                    starts: np.ndarray) -> list:
    """``(time, keys, deltas)`` for each distinct time of updates sorted by key hash (``first``
    marks each key's first update, ``starts`` their positions): the indexes of the keys whose
    updates at that time sum to ``deltas``, in time order and, within a time, by key.

    >>> first = np.array([True, False, True])
    >>> [(t, k.tolist(), d.tolist()) for t, k, d in _deltas_by_time(
    ...     np.array([3, 1, 3]), np.array([1, 2, 5]), first, np.flatnonzero(first))]
    [(1, [0], [2]), (3, [0, 1], [1, 5])]
    """
    if (times == times[0]).all():
        return [(int(times[0]), np.arange(len(starts)), np.add.reduceat(diffs, starts))]
    keys = np.cumsum(first) - 1
    order = np.lexsort((keys, times))
    times, keys, diffs = times[order], keys[order], diffs[order]
    group = np.empty(len(order), bool)
    group[0] = True
    group[1:] = (keys[1:] != keys[:-1]) | (times[1:] != times[:-1])
    groups = np.flatnonzero(group)
    keys, times, deltas = keys[groups], times[groups], np.add.reduceat(diffs, groups)
    cuts = (np.flatnonzero(times[1:] != times[:-1]) + 1).tolist()
    return [(int(times[a]), keys[a:b], deltas[a:b])
            for a, b in zip([0] + cuts, cuts + [len(times)])]


def _matches(batches: list, keys: np.ndarray, whole: list) -> list:
    """``(batch, rows)``: the rows of each of ``batches`` whose key hash is in ``keys``
    (:func:`~.batch.lookup_all`, batches without any left out), then every row of each of
    ``whole`` (``rows`` a slice of them all)."""
    return ([(batch, rows) for batch, _, rows in lookup_all(batches, keys)]
            + [(batch, slice(None)) for batch in whole])


def _gather(batches: list, keys: np.ndarray, whole: list) -> tuple[Any, Any]:
    """The rows of ``batches`` whose key hash is in ``keys``, plus every row of ``whole``,
    with their key hashes as a column: ``(data, times)``, or ``(None, None)`` if none."""
    tables, times, hashes = [], [], []
    for batch, rows in _matches(batches, keys, whole):
        tables.append(batch.data if isinstance(rows, slice) else batch.data.take(rows))
        times.append(batch.times[:, rows])
        hashes.append(batch.hashes[rows])
    if not tables:
        return None, None
    data = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return _with_hash(data, np.concatenate(hashes)), np.concatenate(times, axis=1)


def _gather_int64(matches: list, names: list) -> tuple[Any, Any] | None:
    """The rows of ``matches`` (:func:`_matches`) as :func:`_gather` gives them, for integer
    columns: ``(rows, times)`` with ``rows`` an int64 matrix (the key hash, the columns
    ``names``, the diff), ``(None, None)`` if there are none; None if a column to read is
    not an integer column without nulls."""
    names = names + [DIFF]
    parts, times = [], []
    for batch, rows in matches:
        columns = batch.integer_columns(names)
        if columns is None:
            return None
        # uint64 reinterpreted; narrower integers are widened to int64 by column_stack
        columns = [c.view(np.int64) if c.dtype == np.uint64 else c for c in columns]
        parts.append(np.column_stack([batch.hashes.view(np.int64)[rows],
                                      *(c[rows] for c in columns)]))
        times.append(batch.times[:, rows])
    if not parts:
        return None, None
    if len(parts) == 1:
        return parts[0], times[0]
    return np.vstack(parts), np.concatenate(times, axis=1)


def _gather_int_rows(matches: list, names: list) -> tuple[list, list] | None:
    """:func:`_gather_int64` for a few rows, as Python values: ``(rows, times)`` with each
    row a tuple of ints (the key hash and uint64 columns reinterpreted as int64, as there)
    and each time a tuple of its coordinates; ``([], [])`` if there are none.

    >>> import pyarrow as pa
    >>> batch = ArrowBatch.build(pa.table({"k": [4, 7], "v": [1, 2], "diff": [1, -1]}),
    ...                          np.array([[0, 1]]), ["k"], [0], [2])
    >>> rows, times = _gather_int_rows([(batch, slice(None))], ["k", "v"])
    >>> sorted((row[1:], time) for row, time in zip(rows, times))
    [((4, 1, 1), (0,)), ((7, 2, -1), (1,))]
    """
    names = names + [DIFF]
    rows: list = []
    times: list = []
    for batch, index in matches:
        columns = batch.integer_columns(names)
        if columns is None:
            return None
        columns = [batch.hashes.view(np.int64)] + [c.view(np.int64) if c.dtype == np.uint64
                                                    else c for c in columns]
        coords = batch.times
        depth = range(coords.shape[0])
        for i in range(len(batch)) if isinstance(index, slice) else index.tolist():
            rows.append(tuple([column.item(i) for column in columns]))
            times.append(tuple([coords.item(d, i) for d in depth]))
    return rows, times


def _with_hash(data: pa.Table, hashes: np.ndarray) -> pa.Table:
    """``data`` with the key hash as its first column (then the others, ``diff`` last)."""
    columns = [n for n in data.column_names if n != DIFF]
    return pa.Table.from_arrays([pa.array(hashes)] + [data.column(n) for n in columns]
                                + [data.column(DIFF)], [HASH] + columns + [DIFF])


def _accumulated(out_data: pa.Table | None, out_times: Any, made: list,
                 made_times: list, time: Any, kind: TimeKind) -> pa.Table | None:
    """The output rows (with ``diff``) accumulated to ``time``: history and what this
    retirement produced so far."""
    tables = []
    if out_data is not None:
        tables.append(out_data.filter(times_le(out_times, time, kind)))
    for table, times in zip(made, made_times):
        tables.append(table.filter(times_le(times, time, kind)))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return table


def _difference(wanted: pa.Table | None, have: pa.Table | None,
                schema: pa.Schema | None) -> pa.Table | None:
    """``wanted`` (rows, each once) minus ``have`` (rows with diffs), consolidated."""
    parts = []
    if wanted is not None and wanted.num_rows:
        parts.append(wanted.append_column(DIFF, pa.array(np.ones(wanted.num_rows, np.int64))))
    if have is not None and have.num_rows:
        negated = have.set_column(have.schema.get_field_index(DIFF), DIFF,
                                  pc.negate(have.column(DIFF)))
        parts.append(negated)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0] if wanted is not None and wanted.num_rows else _consolidated(parts[0])
    target = schema or parts[0].schema
    table = pa.concat_tables([p.cast(target) if p.schema != target else p for p in parts])
    return _consolidated(table)


def _consolidated(table: pa.Table) -> pa.Table:
    return nonzero_sums(table, [n for n in table.column_names if n != DIFF])
