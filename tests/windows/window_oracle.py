"""A brute-force model of event-time windows, written from the contract's rules alone, and
the harness that feeds the same records to ``stream.window`` at any number of workers.

Records are tuples ``(id, key, event_time, value)``; an *entry* is ``(timely_time, record)``.
The model sorts entries by timely time and applies the rules time by time:

- tumbling and sliding: a record at time ``t`` counts in every window containing its event
  time with ``t <= end - 1 + lateness``; a window with records reports at
  ``end - 1 + lateness``;
- sessions: before the records of time ``t``, every open session with
  ``end - 1 + lateness < t`` reports (at that time); then each key's open sessions and its
  records at ``t`` are merged as a set (intervals ``[e, e + gap)`` that overlap are joined,
  with a union-find over every pair); a merged group without an open session whose
  ``end - 1 + lateness < t`` is late;
- a record that counts nowhere goes to ``late`` at its own time.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Callable

import pyarrow as pa

import sparktimely as st
import sparktimely.windows as win
from sparktimely.testing import consolidate

AGGREGATIONS = ["count", "sum", "min", "max", "mean", "collect", "fold"]
ARROW_AGGREGATE = {"n": ("count", None), "total": ("sum", "value"), "low": ("min", "value"),
                   "high": ("max", "value"), "avg": ("mean", "value")}


def key_of(record):
    return record[1]


def time_of(record):
    return record[2]


def value_of(record):
    return record[3]


def aggregation(name: str) -> win.Aggregation:
    """The library's aggregation ``name`` over the records' values."""
    if name == "count":
        return win.count()
    if name == "collect":
        return win.collect()
    if name == "fold":
        return win.fold(list, lambda acc, record: acc + [record])
    return getattr(win, name)(value_of)


def model_value(name: str, records: list) -> Any:
    """What aggregation ``name`` makes of ``records`` (in timely-time order)."""
    values = [value_of(r) for r in records]
    if name == "count":
        return len(records)
    if name == "sum":
        return sum(values)
    if name == "min":
        return min(values)
    if name == "max":
        return max(values)
    if name == "mean":
        return sum(values) / len(values)
    if name == "collect":
        return sorted(records, key=lambda r: (time_of(r), r[0]))
    return list(records)            # fold: the records in timely-time order


def canonical(name: str, value: Any, times: dict) -> Any:
    """An operator's value with the order the contract leaves open fixed: ties of event
    time in ``collect``, records of one timely time in ``fold`` (``times``: id -> timely
    time). Checks the order the contract does fix."""
    if name == "collect":
        stamps = [time_of(r) for r in value]
        assert stamps == sorted(stamps), f"collect not sorted by event time: {value}"
        return sorted(value, key=lambda r: (time_of(r), r[0]))
    if name == "fold":
        stamps = [times[r[0]] for r in value]
        assert stamps == sorted(stamps), f"fold not in timely-time order: {value}"
        return sorted(value, key=lambda r: (times[r[0]], r[0]))
    return value


def _windows(kind, event_time: int) -> list[win.Window]:
    """Every window of a tumbling or sliding kind that contains ``event_time``, found by
    trying window starts one slide apart."""
    size, slide, offset = kind.size, kind.slide, kind.offset
    start = offset + (event_time - offset) // slide * slide
    found = []
    while start + size > event_time:
        if start <= event_time:
            found.append(win.Window(start, start + size))
        start -= slide
    return found


def model(kind, entries: list, lateness: int, value: Callable[[list], Any],
          keyed: bool = True) -> tuple[list, list]:
    """``(results, late)`` as consolidated extracts: results ``(key, Window, value(records))``
    at their close times, late records at their own times."""
    ordered = sorted(entries, key=lambda entry: (entry[0], entry[1][0]))
    key = key_of if keyed else (lambda record: None)
    if isinstance(kind, win.Session):
        windows, late = _sessions(kind.gap, ordered, lateness, key)
    else:
        windows, late = defaultdict(list), []
        for t, record in ordered:
            counted = False
            for w in _windows(kind, time_of(record)):
                if t <= w.end - 1 + lateness:
                    windows[(key(record), w)].append(record)
                    counted = True
            if not counted:
                late.append((t, record))
    results = defaultdict(list)
    for (k, w), records in windows.items():
        results[w.end - 1 + lateness].append((k, w, value(records)))
    late_by_time = defaultdict(list)
    for t, record in late:
        late_by_time[t].append(record)
    return ([(t, sorted(rs)) for t, rs in sorted(results.items())],
            [(t, sorted(rs)) for t, rs in sorted(late_by_time.items())])


def _sessions(gap: int, ordered: list, lateness: int, key) -> tuple[dict, list]:
    closed: dict = {}
    late = []
    open_: dict = defaultdict(list)            # key -> [(start, end, records)]
    arrival = {record[0]: i for i, (_, record) in enumerate(ordered)}   # id -> its turn
    by_time = defaultdict(list)
    for t, record in ordered:
        by_time[t].append(record)
    for t in sorted(by_time):
        for k in list(open_):
            still = []
            for start, end, records in open_[k]:
                if end - 1 + lateness < t:
                    closed[(k, win.Window(start, end))] = records
                else:
                    still.append((start, end, records))
            open_[k] = still
        arrivals = defaultdict(list)
        for record in by_time[t]:
            arrivals[key(record)].append(record)
        for k, records in arrivals.items():
            items = [(s, e, rs, True) for s, e, rs in open_[k]] + \
                    [(time_of(r), time_of(r) + gap, [r], False) for r in records]
            parent = list(range(len(items)))

            def find(i):
                while parent[i] != i:
                    i = parent[i]
                return i
            for a in range(len(items)):
                for b in range(a):
                    if items[a][0] < items[b][1] and items[b][0] < items[a][1]:
                        parent[find(a)] = find(b)
            groups = defaultdict(list)
            for i, item in enumerate(items):
                groups[find(i)].append(item)
            merged = []
            for group in groups.values():
                start = min(item[0] for item in group)
                end = max(item[1] for item in group)
                # records in the order they came, whichever sessions they came through
                held = sorted((r for item in group for r in item[2]), key=lambda r: arrival[r[0]])
                if not any(item[3] for item in group) and end - 1 + lateness < t:
                    late += [(t, r) for r in held]
                else:
                    merged.append((start, end, held))
            open_[k] = merged
    for k, sessions in open_.items():
        for start, end, records in sessions:
            closed[(k, win.Window(start, end))] = records
    return closed, late


def watermarked(records: list, out_of_order: int) -> list:
    """``(timely_time, record)``: the time an EventTimeInput sends each of ``records`` at,
    sent in this order through one input."""
    time, entries = 0, []
    for record in records:
        entries.append((time, record))
        time = max(time, time_of(record) - out_of_order)
    return entries


def share(entries: list, worker, rng: random.Random) -> list:
    """This worker's entries: each entry's worker is drawn from ``rng`` (the same on every
    worker), then sorted by timely time with ties shuffled."""
    mine = [e for e in entries if rng.randrange(worker.peers) == worker.index]
    rng.shuffle(mine)
    return sorted(mine, key=lambda entry: entry[0])


def feed(worker, handle: st.InputHandle, entries: list, rng: random.Random,
         arrow: bool = False) -> None:
    """Send ``entries`` (sorted by timely time) through ``handle`` in batches of random
    sizes, advancing to each entry's time and stepping the worker now and then; then close
    the handle."""
    i = 0
    while i < len(entries):
        t = entries[i][0]
        if t > handle.time():
            handle.advance_to(t)
            if rng.random() < 0.5:
                worker.step()
        j = i
        while j < len(entries) and entries[j][0] == t and j - i < rng.randint(1, 4):
            j += 1
        records = [record for _, record in entries[i:j]]
        handle.send_batch(to_table(records).to_batches()[0] if arrow else records)
        i = j
    handle.close()


def to_table(records: list) -> pa.Table:
    """Records as a table with columns ``id, key, ts, value`` (``key`` a string, or an int64
    when the records' keys are ints)."""
    columns = list(zip(*records)) if records else [[], [], [], []]
    int_keys = any(isinstance(key, int) for key in columns[1])
    types = [pa.int64(), pa.int64() if int_keys else pa.string(), pa.int64(), pa.int64()]
    return pa.table({name: pa.array(column, type) for name, column, type
                     in zip(["id", "key", "ts", "value"], columns, types)})


def run_window(run, entries: list, window: Callable[[Any], Any], seed: int = 0,
               arrow: bool = False) -> tuple[list, list]:
    """``window(stream)`` (returning a WindowOut) over ``entries`` fed on every worker; the
    consolidated ``(results, late)``, Arrow results as ``(key, Window, row tuple)`` and
    late rows as record tuples."""
    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            out = window(scope.input_from(handle))
            return out.results.capture(), out.late.capture()
        results, late = worker.dataflow(build)
        feed(worker, handle, share(entries, worker, random.Random(seed)),
             random.Random(seed + worker.index), arrow)
        worker.run()
        return results.extract(), late.extract()
    outputs = run(job)
    results = consolidate([r for r, _ in outputs])
    late = consolidate([l for _, l in outputs])
    if arrow:
        results = [(t, sorted(result_rows(table))) for t, table in results]
        late = [(t, sorted(tuple(row.values()) for row in table.to_pylist())) for t, table in late]
    return results, late


def result_rows(table: pa.Table) -> list:
    rows = []
    for row in table.to_pylist():
        key = tuple(row[name] for name in table.column_names if name not in ARROW_AGGREGATE
                    and name not in ("window_start", "window_end"))
        rows.append((key[0] if len(key) == 1 else key if key else None,
                     win.Window(row["window_start"], row["window_end"]),
                     tuple(row[name] for name in ARROW_AGGREGATE if name in row)))
    return rows


def arrow_value(records: list) -> tuple:
    """The model's row of ``ARROW_AGGREGATE`` for ``records``."""
    values = [value_of(r) for r in records]
    return (len(values), sum(values), min(values), max(values), sum(values) / len(values))
