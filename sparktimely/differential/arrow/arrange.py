"""Sealing Arrow updates into :class:`~.batch.ArrowBatch`es for an arrangement.

Every row of an Arrow collection's batch is at the batch's (timely) time, so buffering is
per batch: once the frontier passes a batch's time, it is sealed. The batches sealed
together (per held capability) are consolidated time by time (the rows of one time, when
they are many, with one ``group_by`` of the data columns alone: no time columns), then
become one table with time columns, hashed by the key columns and sorted.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...dataflow.containers import check_schema
from ...progress.timestamp import TimeKind
from ..collection import DIFF, arrow_only
from ..lattice import beyond
from ..trace.batch import capability_intervals, split_by_capabilities
from .batch import (COMBINE_FROM, ArrowBatch, constant_times, consolidated_rows, key_columns,
                    table_batch)


class ArrowArranger:
    """Buffers Arrow batches of one arrangement and seals them, one ArrowBatch per held
    capability."""

    def __init__(self, name: str, key: Any, kind: TimeKind) -> None:
        self.name = name
        self.key_spec = key
        self.kind = kind
        self.key: list | None = None
        self.schema: pa.Schema | None = None
        self.buffered: list[tuple[Any, pa.RecordBatch]] = []

    def push(self, time: Any, batch: Any) -> None:
        if batch.__class__ is list:
            raise TypeError(f"{self.name}: this collection mixes Python updates with Arrow "
                            f"batches")
        schema = batch.schema
        if self.schema is None or not schema.equals(self.schema):   # else checked before
            arrow_only(self.name, batch)
            if schema.field(DIFF).type != pa.int64():
                raise TypeError(f"{self.name}: the '{DIFF}' column must be int64, not "
                                f"{schema.field(DIFF).type}")
            self.schema = check_schema(self.schema, schema, self.name)
            if self.key is None:
                self.key = key_columns(self.name, schema, self.key_spec)
        if batch.num_rows:
            self.buffered.append((time, batch))

    def seal(self, lower: list, upper: list, held: list) -> list:
        """``(capability time, ArrowBatch)`` for each held capability with sealed rows."""
        ready: list = []
        keep: list = []
        for time, batch in self.buffered:
            (keep if upper and beyond(upper, time) else ready).append((time, batch))
        self.buffered = keep
        if not ready:
            return []
        parts = split_by_capabilities(ready, held, lambda entry: entry[0])
        result = []
        for (cap_time, part_lower, part_upper), part in zip(
                capability_intervals(lower, upper, held), parts):
            if part:
                at: dict = {}
                for time, batch in part:
                    at.setdefault(time, []).append(batch)
                batches: list = []
                times_of: list = []
                for time, same in at.items():
                    rows = sum(b.num_rows for b in same)
                    if len(same) > 1 and rows >= COMBINE_FROM:     # else nothing to merge
                        same = [table_batch(pa.Table.from_batches(same, schema=self.schema))]
                    if len(same) == 1:                             # long ones consolidated
                        same = [consolidated_rows(same[0])]
                        rows = same[0].num_rows
                    batches.extend(same)
                    times_of.append(constant_times(self.kind, time, rows))
                table = pa.Table.from_batches(batches, schema=self.schema)
                times = np.concatenate(times_of, axis=1)
                result.append((cap_time, ArrowBatch.build(
                    table, times, list(self.key or []), part_lower, part_upper, self.kind,
                    consolidated=True)))
        return result

    def pending_times(self) -> list:
        return list({time for time, _ in self.buffered})
