"""``active_between`` on Arrow collections: the updates it holds for later times, as runs of
rows sorted by time.

Each input batch (all its rows at the batch's time ``t``) is split with numpy: the rows
present from ``t`` on are sent at once; the insertions of rows that start later and the
retractions (``diff`` negated) of every row that is present at all become one *run*: those
rows sorted by the time they are due, with the sorted times beside them. The runs wait in a
heap by their next due time; releasing up to a time cuts each due run's prefix into one
zero-copy slice per distinct time, so the work is per run and per distinct time, never per
row in Python.

>>> import pyarrow as pa
>>> held = ArrowHeld("start", "end")
>>> batch = pa.record_batch({"x": ["a", "b"], "start": [0, 2], "end": [3, 5], "diff": [1, 1]})
>>> now = held.add(0, batch)
>>> now.to_pydict()
{'x': ['a'], 'start': [0], 'end': [3], 'diff': [1]}
>>> held.next_time()
2
>>> released = []
>>> held.release(3, lambda time, rows: released.append((time, rows.to_pydict()["diff"])))
>>> released, held.next_time()
([(2, [1]), (3, [-1])], 5)
"""
from __future__ import annotations

import heapq
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ...hashing import hash_rows
from ...ops.arrow import integer_column
from ..updates import DIFF, arrow_only, negated
from ..recovery import ROUTE
from .batch import SMALL_ROWS, column_numpy, consolidated_rows, table_batch

INT64_MAX = np.iinfo(np.int64).max

TIME = "__time"
"""The column of a snapshot holding the time each held row is due at."""


class Run:
    """Held rows sorted by the times they are due at; ``position`` is the first not yet
    released."""

    __slots__ = ("rows", "times", "position")

    def __init__(self, rows: pa.RecordBatch, times: np.ndarray) -> None:
        self.rows = rows
        self.times = times
        self.position = 0


class ArrowHeld:
    """The updates ``active_between(start, end)`` (column names) holds for later times."""

    def __init__(self, start: str, end: str) -> None:
        self.start = start
        self.end = end
        self.heap: list[tuple[int, int, Run]] = []   # (next due time, sequence, run)
        self.sequence = 0

    def add(self, time: int, batch: Any) -> pa.RecordBatch | None:
        """Take a batch of updates at ``time``: hold what is due later, and return the rows
        present from ``time`` on (None if none)."""
        batch = arrow_only("active_between with column names", batch)
        start = self._times(batch, self.start, "start")
        end = self._times(batch, self.end, "end")
        if len(end) <= SMALL_ROWS and all(s <= time < e for s, e in zip(start.tolist(),
                                                                         end.tolist())):
            self._hold(negated(batch), end)     # the usual: every row present from now on
            return batch
        begin = np.maximum(start, time)
        live = end > begin
        now = live & (begin == time)
        later = live & ~now
        parts, times = [], []
        if later.any():
            parts.append(batch.filter(pa.array(later)))
            times.append(begin[later])
        if live.any():
            parts.append(negated(batch if live.all() else batch.filter(pa.array(live))))
            times.append(end[live])
        if parts:
            self._hold(parts[0] if len(parts) == 1 else pa.Table.from_batches(parts),
                       times[0] if len(times) == 1 else np.concatenate(times))
        if not now.any():
            return None
        return batch if now.all() else batch.filter(pa.array(now))

    def _times(self, batch: pa.RecordBatch, name: str, role: str) -> np.ndarray:
        values = integer_column(batch, name, "active_between", f"the {role}")
        if values.dtype == np.uint64 and len(values) and values.max() > INT64_MAX:
            row = int(np.flatnonzero(values > INT64_MAX)[0])
            raise ValueError(f"active_between: the {role} column {name!r} holds "
                             f"{int(values[row])} in row {batch.slice(row, 1).to_pylist()[0]!r}, "
                             f"beyond int64's range (Arrow start and end times are int64)")
        return values.astype(np.int64, copy=False)

    def _hold(self, rows: pa.Table | pa.RecordBatch, times: np.ndarray) -> None:
        if len(times) > 1 and (times[1:] < times[:-1]).any():
            order = np.argsort(times, kind="stable")
            rows, times = rows.take(order), times[order]
        run = Run(table_batch(rows), times)
        heapq.heappush(self.heap, (int(run.times[0]), self.sequence, run))
        self.sequence += 1

    def next_time(self) -> int | None:
        """The earliest time an update is held for (None if none)."""
        return self.heap[0][0] if self.heap else None

    def release(self, bound: float, emit: Callable[[int, pa.RecordBatch], None]) -> None:
        """``emit(time, rows)`` for every held time ``<= bound``, in time order."""
        heap = self.heap
        due: dict[int, list[pa.RecordBatch]] = {}
        while heap and heap[0][0] <= bound:
            _, sequence, run = heapq.heappop(heap)
            times = run.times
            slices = due_slices(times, run.position, bound)   # one at least: heap[0] was due
            for time, start, stop in slices:
                due.setdefault(time, []).append(run.rows.slice(start, stop - start))
            stop = slices[-1][2]
            if stop < len(times):
                run.position = stop
                heapq.heappush(heap, (int(times[stop]), sequence, run))
        for time in sorted(due):
            parts = due[time]
            emit(time, parts[0] if len(parts) == 1
                 else consolidated_rows(table_batch(pa.Table.from_batches(parts))))

    def snapshot(self) -> pa.Table:
        """The held rows with their due times (column :data:`TIME`) and a route column
        (the hash of the data columns), or an empty table with only the route column."""
        parts = [pa.Table.from_batches([run.rows.slice(run.position)])
                 .append_column(TIME, pa.array(run.times[run.position:]))
                 for _, _, run in self.heap]
        if not parts:
            return pa.table({ROUTE: pa.array([], pa.uint64())})
        table = pa.concat_tables(parts, promote_options="default")
        data = [n for n in table.column_names if n not in (DIFF, TIME)]
        routes = hash_rows(table, data) if data else np.zeros(table.num_rows, np.uint64)
        return table.append_column(ROUTE, pa.array(routes))

    def restore(self, table: pa.Table) -> None:
        """Hold again the rows of snapshots (of any workers) that this worker owns."""
        if not table.num_rows or TIME not in table.column_names:
            return
        times = column_numpy(table, TIME).astype(np.int64, copy=False)
        self._hold(table.drop_columns([TIME, ROUTE]), times)


def due_slices(times: np.ndarray, position: int, bound: float) -> list[tuple[int, int, int]]:
    """``(time, start, stop)`` for each distinct time ``<= bound`` among the sorted
    ``times`` from ``position`` on: the rows ``start:stop`` are due then. A few times are
    cut in Python, more with numpy (a one-row run would pay five numpy calls).

    >>> due_slices(np.array([1, 2, 2, 4, 7]), 1, 4)
    [(2, 1, 3), (4, 3, 4)]
    """
    if len(times) - position <= SMALL_ROWS:
        slices: list[tuple[int, int, int]] = []
        for index, time in enumerate(times[position:].tolist(), position):
            if time > bound:
                break
            if slices and slices[-1][0] == time:
                slices[-1] = (time, slices[-1][1], index + 1)
            else:
                slices.append((time, index, index + 1))
        return slices
    stop = int(np.searchsorted(times, bound, side="right"))
    segment = times[position:stop]
    cuts = (np.flatnonzero(segment[1:] != segment[:-1]) + 1).tolist()
    return [(int(segment[a]), position + a, position + b)
            for a, b in zip([0] + cuts, cuts + [len(segment)])]
