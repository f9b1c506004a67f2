"""What a collection's batches hold: lists of ``(data, time, diff)`` updates, or Arrow
``RecordBatch``es whose int64 ``diff`` column holds each row's diff (every row at the
batch's time); the checks operators make before treating a batch as one or the other; and
the one spelling of an Arrow batch's retraction (:func:`negated`).

>>> import pyarrow as pa
>>> arrow_only("join", pa.record_batch({"k": [1], "diff": [1]})).num_rows
1
>>> python_only("map", "map_batches", [("a", 0, 1)])
[('a', 0, 1)]
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

DIFF = "diff"
"""The name of the int64 column holding the diffs of an Arrow collection."""


def arrow_only(operator: str, batch: Any) -> pa.RecordBatch:
    """``batch`` if it is an Arrow batch with a ``diff`` column, else a TypeError."""
    if batch.__class__ is list:
        raise TypeError(f"{operator} works on Arrow collections (RecordBatches with a "
                        f"'{DIFF}' column); this collection carries Python updates")
    if DIFF not in batch.schema.names:
        raise TypeError(f"{operator}: the Arrow batch has no '{DIFF}' column (columns: "
                        f"{', '.join(batch.schema.names)})")
    return batch


def python_only(operator: str, hint: str, batch: Any) -> list:
    """``batch`` if it is a list of updates, else a TypeError naming the Arrow alternative."""
    if batch.__class__ is not list:
        raise TypeError(f"{operator} runs a Python function per update; this collection "
                        f"carries Arrow batches: use {hint}")
    return batch


def negated(batch: pa.RecordBatch) -> pa.RecordBatch:
    """An Arrow batch of updates with its ``diff`` column negated.

    >>> negated(pa.record_batch({"x": ["a"], DIFF: [2]})).to_pydict()
    {'x': ['a'], 'diff': [-2]}
    """
    index = batch.schema.get_field_index(DIFF)
    return batch.set_column(index, DIFF, pc.negate(batch.column(index)))


def diff_last(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its ``diff`` column (if any) last, the layout every batch an operator
    makes has: a collection's batches share one schema, so a user's layout cannot meet an
    operator's output (in a concat, a loop) otherwise.

    >>> diff_last(pa.record_batch({DIFF: [1], "k": ["a"]})).schema.names
    ['k', 'diff']
    """
    names = batch.schema.names
    if names[-1] == DIFF or DIFF not in names:
        return batch
    return batch.select([name for name in names if name != DIFF] + [DIFF])
