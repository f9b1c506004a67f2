"""Sealing Arrow updates into :class:`~.batch.ArrowBatch`es for an arrangement.

Every row of an Arrow collection's batch is at the batch's (timely) time, so buffering is
per batch: once the frontier passes a batch's time, it is sealed. The batches sealed
together (per held capability) are consolidated time by time (the rows of one time, when
they are many, with one ``group_by`` of the data columns alone: no time columns; when they
are few, only if at least half of them repeat a key), then become one table with time
columns, hashed by the key columns and sorted. Batches that a
combiner consolidated and hashed before the exchange (the ``HASH`` column, at two or more
workers) are instead consolidated together by their hashes: a sort of the hashes, with no
``group_by`` and no hashing.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...dataflow.containers import check_schema
from ...progress.timestamp import TimeKind
from ..updates import DIFF, arrow_only
from ..lattice import beyond
from ..trace.batch import capability_intervals, split_by_capabilities
from .batch import (COMBINE_FROM, HASH, ArrowBatch, carried_hashes, constant_times,
                    consolidated_rows, coordinate_kind, key_columns, table_batch)


class ArrowArranger:
    """Buffers Arrow batches of one arrangement and seals them, one ArrowBatch per held
    capability."""

    def __init__(self, name: str, key: Any, kind: TimeKind) -> None:
        self.name = name
        self.key_spec = key
        self.kind = coordinate_kind(kind)
        self.key: list | None = None
        self.schema: pa.Schema | None = None
        self.buffered: list[tuple[Any, pa.RecordBatch]] = []

    def push(self, time: Any, batch: Any) -> None:
        if batch.__class__ is list:
            raise TypeError(f"{self.name}: this collection mixes Python updates with Arrow "
                            f"batches")
        schema = batch.schema
        if schema.names[-1] != DIFF and DIFF in schema.names:       # diff last, as we make
            batch = batch.select([n for n in schema.names if n != DIFF] + [DIFF])
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
        return self.seal_ready(self.take_ready(upper), lower, upper, held)

    def take_ready(self, upper: list) -> list:
        """The buffered ``(time, RecordBatch)`` entries at times ``upper`` has passed,
        no longer buffered."""
        ready: list = []
        keep: list = []
        for time, batch in self.buffered:
            (keep if upper and beyond(upper, time) else ready).append((time, batch))
        self.buffered = keep
        return ready

    def seal_ready(self, ready: list, lower: list, upper: list, held: list) -> list:
        """:meth:`seal` of the entries :meth:`take_ready` gave."""
        if not ready:
            return []
        parts = split_by_capabilities(ready, held, lambda entry: entry[0])
        return [(cap_time, self._sealed(part, part_lower, part_upper))
                for (cap_time, part_lower, part_upper), part
                in zip(capability_intervals(lower, upper, held), parts) if part]

    def _sealed(self, part: list, lower: list, upper: list) -> ArrowBatch:
        """One ArrowBatch of the ``(time, batch)`` entries of ``part``."""
        key = list(self.key or [])
        hashes = carried_hashes([batch for _, batch in part])
        if hashes is not None:          # consolidated by a combiner, keys hashed there
            table = pa.Table.from_batches([b for _, b in part]).drop_columns([HASH])
            times = np.concatenate([constant_times(self.kind, t, b.num_rows) for t, b in part],
                                   axis=1)
            first = part[0][0]
            return ArrowBatch.build(table, times, key, lower, upper, self.kind,
                                    consolidated=len(part) == 1 or len(table) < COMBINE_FROM,
                                    hashes=hashes, repeats=len(table) < COMBINE_FROM,
                                    at=first if all(t == first for t, _ in part) else None)
        by_time: dict = {}
        for time, batch in part:
            by_time.setdefault(time, []).append(batch)
        batches: list = []
        times_of: list = []
        short = False                   # a time's rows kept as they came (see build's repeats)
        for time, same in by_time.items():
            rows = sum(b.num_rows for b in same)
            if len(same) > 1 and rows >= COMBINE_FROM:     # else nothing to merge
                same = [table_batch(pa.Table.from_batches(same, schema=self.schema))]
            if len(same) == 1:                             # long ones consolidated
                same = [consolidated_rows(same[0])]
                rows = same[0].num_rows
            short = short or rows < COMBINE_FROM
            batches.extend(same)
            times_of.append(constant_times(self.kind, time, rows))
        table = pa.Table.from_batches(batches, schema=self.schema)
        times = times_of[0] if len(times_of) == 1 else np.concatenate(times_of, axis=1)
        return ArrowBatch.build(table, times, key, lower, upper,
                                self.kind, consolidated=True, repeats=short,
                                at=next(iter(by_time)) if len(by_time) == 1 else None)

    def pending_times(self) -> list:
        return list({time for time, _ in self.buffered})

    def held_back(self, lower: list) -> ArrowBatch | None:
        """None: a checkpoint finds nothing buffered, as an Arrow batch's rows are at its
        capability's time and a checkpoint waits until the times it covers are sealed."""
        if self.buffered:
            raise AssertionError(f"{self.name}: Arrow batches buffered at a checkpoint, at "
                                 f"{sorted(self.pending_times(), key=repr)[:3]}")
        return None
