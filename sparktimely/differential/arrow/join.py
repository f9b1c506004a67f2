"""Joining Arrow arrangements: hash lookups with ``searchsorted``, then one ``take`` per side.

For a new batch of one side and each batch of the other side's trace, the rows whose key
hashes match are paired (:func:`~.batch.match_sorted`), pairs whose key columns differ (hash
collisions) are dropped, and the output is assembled column by column: the key columns, the
first side's other columns, the second side's (a name already used gets ``_right``), the
product of the diffs, and the component-wise maximum of the times. Output rows are grouped
by time, one RecordBatch per distinct time.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...progress.timestamp import TimeKind
from ..updates import DIFF
from .batch import (ArrowBatch, constant_times, coordinate_kind, coordinates_le, keys_equal,
                    lookup_all, split_by_time, time_from)

class ArrowJoiner:
    """Joins an ArrowBatch of one input with the trace batches of the other."""

    def __init__(self, name: str, semijoin: bool, kind: TimeKind) -> None:
        self.name = name
        self.semijoin = semijoin
        self.kind = coordinate_kind(kind)
        self.schema: pa.Schema | None = None

    def join(self, batch: ArrowBatch, others: list, swapped: bool, cap_time: Any) -> list:
        """``[(time, RecordBatch)]`` of every match of ``batch`` with ``others``. When every
        row of ``batch`` is at one time that no row of a matched trace batch is later than
        (the usual case: a new update meets older ones), each of those matches is at that
        time, and no per-row time is computed."""
        tables: list[pa.RecordBatch] = []
        times: list[np.ndarray | None] = []       # None: every row at ``at``
        lowest, highest = batch.time_range()
        at = lowest if lowest == highest else None
        for other, probe, rows in lookup_all(others, batch.hashes):
            first, second = (other, batch) if swapped else (batch, other)
            i1, i2 = (rows, probe) if swapped else (probe, rows)
            if len(first.key) != len(second.key):
                raise ValueError(f"{self.name}: the sides have {len(first.key)} and "
                                 f"{len(second.key)} key columns ({first.key}, {second.key})")
            integer_key = first.integer_key()
            if integer_key is None or integer_key != second.integer_key():
                equal = keys_equal(first.data.select(first.key).take(i1), first.key,
                                   second.data.select(second.key).take(i2), second.key)
                if not equal.all():
                    i1, i2 = i1[equal], i2[equal]
            diffs = first.diffs[i1] * second.diffs[i2]
            tables.append(self._assemble(first, i1, second, i2, diffs))
            if at is not None and coordinates_le(other.time_range()[1], at):
                times.append(None)
            else:
                times.append(np.maximum(first.times[:, i1], second.times[:, i2]))
        if not tables:
            return []
        table = pa.concat_batches(tables) if len(tables) > 1 else tables[0]
        time = time_from(self.kind, at) if at is not None else None
        if time is not None and all(t is None for t in times):
            return [(time, table)] if table.num_rows else []
        return split_by_time(table, np.concatenate(
            [constant_times(self.kind, time, len(part)) if each is None else each
             for part, each in zip(tables, times)], axis=1), self.kind)

    def _assemble(self, left: ArrowBatch, i1: np.ndarray, right: ArrowBatch, i2: np.ndarray,
                  diffs: np.ndarray) -> pa.RecordBatch:
        """The matched rows: ``left``'s columns at ``i1`` (for a join its key columns first,
        in ``on``'s order; a semijoin keeps its input's columns as they are), then (not for
        a semijoin) ``right``'s value columns at ``i2``, then the diffs; one gather per side
        (:meth:`~.batch.ArrowBatch.take_columns`), none for a side with nothing to
        contribute."""
        names = [n for n in left.schema.names if n != DIFF]
        if not self.semijoin and names[:len(left.key)] != left.key:
            names = left.key + [n for n in names if n not in left.key]
        columns = left.take_columns(names, i1)
        if not self.semijoin:
            values = [n for n in right.schema.names if n != DIFF and n not in right.key]
            if values:
                columns.extend(right.take_columns(values, i2))
                for name in values:
                    while name in names:        # a name already used: "_right" until unique
                        name += "_right"
                    names.append(name)
        columns.append(pa.array(diffs))                # int64, as the diffs it multiplies
        names.append(DIFF)
        return pa.RecordBatch.from_arrays(columns, names)
