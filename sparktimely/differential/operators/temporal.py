"""Temporal filters: each record of a collection present between two times computed from it.

``Collection.active_between(start_of, end_of)`` is Materialize's temporal filter: an input
update ``(x, t, d)`` becomes ``(x, max(start_of(x), t), d)`` and ``(x, end_of(x), -d)``, or
nothing when ``end_of(x) <= max(start_of(x), t)``. So ``x`` is in the output from its start
(or from when it arrived, if later) until its end, and a count or a join over "the last five
minutes" is kept up to date as time passes, correcting itself when late or retracted records
arrive.

The updates for times the input frontier has not reached yet are held by the operator, per
time (consolidated, so a record removed before its end costs nothing at its end), in a heap
of times, with one capability at the earliest of them. Once the input frontier reaches a held
time, its updates are sent at that time: every output update travels at its own time, as if
the input had carried it. While nothing is due, a scheduling of the operator costs a look at
the heap's top. Times are ints.

Under epoch checkpoints the held updates are keyed state (routed by ``stable_hash`` of the
record, Arrow rows by the hash of their data columns): a resumed run holds them again, on
whichever worker owns them at its worker count. So that a checkpoint of epoch ``e`` holds
exactly the updates for times after ``e``, nothing held is sent for a time beyond the epoch
the checkpoints let the operator see (its ``EpochGate`` limit).
"""
from __future__ import annotations

import heapq
import numbers
import pickle
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from ...dataflow import CapabilitySet, Pipeline
from ...hashing import stable_hash
from ...ops.recovery import HOLD_ALL, KeyedState
from ..arrow.temporal import ArrowHeld
from ..recovery import ENTRY, ROUTE
from ..updates import python_only

if TYPE_CHECKING:
    from ...ops import Stream

NAME = "ActiveBetween"

TimeOf = Callable[[Any], int] | str
"""How ``active_between`` finds a record's start or end time: a function of the record
(Python updates), or the name of an integer column (Arrow)."""


def active_between_stream(updates: "Stream", start_of: TimeOf, end_of: TimeOf) -> "Stream":
    """The temporal filter on a stream of updates (see ``Collection.active_between``): each
    record present from ``start_of`` until ``end_of`` (two functions of a record, or two
    integer column names on Arrow batches), every output update sent at its own time."""
    scope = updates.scope
    kind = scope.kind
    if kind.base is not int or kind.depth:
        raise TypeError(f"active_between needs int times; this collection's times are like "
                        f"{kind.minimum()!r}")
    if isinstance(start_of, str) and isinstance(end_of, str):
        make_held: Callable[[], Any] = lambda: ArrowHeld(start_of, end_of)
    elif callable(start_of) and callable(end_of):
        make_held = lambda: PythonHeld(start_of, end_of)
    else:
        raise TypeError(f"active_between(start_of, end_of) takes two functions of a record "
                        f"(Python updates) or two column names (Arrow), not {start_of!r} and "
                        f"{end_of!r}")

    def ctor(capability, info):
        caps = CapabilitySet([capability])
        held = make_held()
        gate = KeyedState(scope, f"{info.name}#{info.index}", info.index, held.snapshot,
                          held.restore, ROUTE).gate

        def logic(input, output):
            limit = None if gate is None else gate.limit
            if limit == HOLD_ALL:            # the checkpoints have not restored the state yet
                return
            for cap, batch in input:
                now = held.add(cap.time, batch)
                if now is not None:
                    output.give_at(cap, now)
                first = held.next_time()
                if first is not None and first < held_time(caps):
                    caps.insert(cap.delayed(first))       # a time this batch made held
            frontier = input.frontier.frontier()
            bound: float = frontier[0] if frontier else float("inf")
            if limit is not None and limit < bound:
                bound = limit
            first = held.next_time()
            if first is not None and first <= bound:
                held.release(bound, lambda time, updates:
                             output.give_at(caps.delayed(time), updates))
                first = held.next_time()
            if first is None:
                if not caps.is_empty():
                    caps.drop()
            elif held_time(caps) != first:
                caps.downgrade([first])
        return logic
    return updates.unary_frontier(Pipeline, NAME, ctor)


def held_time(caps: CapabilitySet) -> float:
    """The time of the one capability ``caps`` holds (times are ints), infinity if none."""
    first = caps.first()
    return float("inf") if first is None else first.time


def int_time(role: str, value: Any, data: Any) -> int:
    """``value``, which ``role`` returned for the record ``data``, as an int time, or a
    TypeError naming the record.

    >>> int_time("end_of", 3.5, ("a", 1))
    Traceback (most recent call last):
    TypeError: active_between: end_of(('a', 1)) returned 3.5 (float); start and end times are ints
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"active_between: {role}({data!r}) returned {value!r} "
                    f"({type(value).__name__}); start and end times are ints")


class PythonHeld:
    """The updates ``active_between(start_of, end_of)`` (functions) holds for later times:
    ``{time: {data: diff}}`` and a heap of those times."""

    def __init__(self, start_of: Callable[[Any], int], end_of: Callable[[Any], int]) -> None:
        self.start_of = start_of
        self.end_of = end_of
        self.at: dict[int, dict] = {}
        self.times: list[int] = []

    def hold(self, data: Any, time: int, diff: int) -> None:
        entries = self.at.get(time)
        if entries is None:
            entries = self.at[time] = {}
            heapq.heappush(self.times, time)
        try:
            entries[data] = entries.get(data, 0) + diff
        except TypeError:
            raise TypeError(f"active_between: the record {data!r} is not hashable; the "
                            f"updates held for later times are summed per record") from None

    def add(self, time: int, batch: Any) -> list | None:
        """Take a batch of updates at ``time``: hold what is due later, and return the updates
        present from ``time`` on (None if none)."""
        start_of, end_of, hold = self.start_of, self.end_of, self.hold
        now = []
        for update in python_only("active_between", "active_between('start column', "
                                  "'end column')", batch):
            data, at, diff = update
            start, end = start_of(data), end_of(data)
            if start.__class__ is not int:
                start = int_time("start_of", start, data)
            if end.__class__ is not int:
                end = int_time("end_of", end, data)
            begin = start if start > at else at
            if end <= begin:
                continue
            if begin == time:
                now.append((data, begin, diff))
            elif begin > time:
                hold(data, begin, diff)
            else:
                raise ValueError(f"active_between: update {update!r} has time {at!r}, which is "
                                 f"not at or after the time of the batch carrying it ({time!r})")
            hold(data, end, -diff)
        return now or None

    def next_time(self) -> int | None:
        """The earliest time an update is held for (None if none)."""
        return self.times[0] if self.times else None

    def release(self, bound: float, emit: Callable[[int, list], None]) -> None:
        """``emit(time, updates)`` for every held time ``<= bound``, in time order."""
        times, at = self.times, self.at
        while times and times[0] <= bound:
            time = heapq.heappop(times)
            updates = [(data, time, diff) for data, diff in at.pop(time).items() if diff]
            if updates:
                emit(time, updates)

    def snapshot(self) -> pa.Table:
        """One row per record: its route (``stable_hash``) and its pickled
        ``(data, [(time, diff)])``."""
        per_data: dict = {}
        for time, entries in self.at.items():
            for data, diff in entries.items():
                if diff:
                    per_data.setdefault(data, []).append((time, diff))
        routes = []
        for data in per_data:
            try:
                routes.append(stable_hash(data))
            except TypeError as error:
                raise TypeError(f"{NAME}: a checkpoint routes each held record by "
                                f"stable_hash, which cannot hash {data!r}: {error}") from None
        blobs = [pickle.dumps(item, 5) for item in per_data.items()]
        return pa.table({ROUTE: pa.array(routes, pa.uint64()),
                         ENTRY: pa.array(blobs, pa.binary())})

    def restore(self, table: pa.Table) -> None:
        """Hold again the records of snapshots (of any workers) that this worker owns."""
        if ENTRY not in table.column_names:
            return
        for blob in table.column(ENTRY).to_pylist():
            data, updates = pickle.loads(blob)
            for time, diff in updates:
                self.hold(data, time, diff)
