"""Differential jobs for the recovery tests, and their oracles.

Every job reads files with a ``FileSource`` (line ``i`` of each file in epoch ``i // 3``),
computes a collection incrementally and writes its updates ``(data, time, diff)`` with a
``DirectorySink``; :func:`updates` reads back what is visible. The oracles recompute each
epoch's collection from scratch in plain Python (``Counter``, a deque BFS).

- :func:`wordcount`: running word counts (``count``, Python updates) with ``threshold``
  and ``distinct`` downstream; :func:`arrow_wordcount` the same on the Arrow path
  (``count(key="word")`` over CSV files with a ``diff`` column).
- :func:`join_count`: edges joined with query keys (``join_map``), then the number of
  edges of each queried source (``count``).
- :func:`reachability`: nodes reachable from node 0 by ``iterate`` (``join``, ``concat``,
  ``distinct``) over edge files whose lines insert or delete an edge.
- :func:`temporal`: records ``key start end`` present between their start and end
  (``active_between``), and the number present per key (``count``): a sliding window whose
  held retractions span checkpoints; :func:`arrow_temporal` counts the same on the Arrow path
  (``active_between("start", "end").count(key="key")`` over CSV files).
- :func:`shared_queries`: one dataflow arranges the edges, another imports the trace (seed
  003's shape; not supported with checkpoints yet).
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter, deque
from typing import Any, Callable

import pyarrow.parquet as pq

import sparktimely as st
import sparktimely.differential as dd
from sparktimely.io import DirectorySink, FileSource

from recovery_jobs import BATCH_ROWS, lines_by_epoch, sink_files, write_texts

NODES = 24


def write_edge_files(folder: str, files: int = 3, lines: int = 24, seed: int = 0) -> None:
    """Edge files: each line ``src dst diff``; a deletion removes an edge inserted earlier in
    the same file (so no edge is ever present twice or negatively)."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for f in range(files):
        present: list = []
        with open(os.path.join(folder, f"edges-{seed}-{f}.txt"), "w") as out:
            for i in range(lines):
                if present and rng.random() < 0.3:
                    edge = present.pop(rng.randrange(len(present)))
                    out.write(f"{edge[0]} {edge[1]} -1\n")
                else:
                    src = 0 if i == 0 else rng.randrange(NODES)
                    edge = (src, rng.randrange(NODES), f)
                    present.append(edge)
                    out.write(f"{edge[0]} {edge[1]} 1\n")


def write_word_csvs(folder: str, files: int = 3, lines: int = 24, seed: int = 0) -> None:
    """CSV files of ``word,diff`` rows (words of 11 kinds, some rows removing a word)."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for f in range(files):
        with open(os.path.join(folder, f"words-{seed}-{f}.csv"), "w") as out:
            out.write("word,diff\n")
            for _ in range(lines):
                out.write(f"w{rng.randrange(11)},{1 if rng.random() < 0.8 else -1}\n")


def write_span_files(folder: str, files: int = 3, lines: int = 24, seed: int = 0,
                     csv: bool = False) -> None:
    """Files of records ``key start end diff`` (CSV: ``key,start,end,diff`` rows) around the
    epoch of their line (``i // BATCH_ROWS``): starts from 3 before to 3 after it, spans of
    -1 to 6 (so some end at or before their start, or before they arrive); a line with diff
    -1 takes back a record inserted earlier in the same file."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for f in range(files):
        present: list = []
        rows = []
        for i in range(lines):
            if present and rng.random() < 0.25:
                rows.append((*present.pop(rng.randrange(len(present))), -1))
            else:
                start = i // BATCH_ROWS + rng.randint(-3, 3)
                record = (rng.randrange(4), start, start + rng.randint(-1, 6))
                present.append(record)
                rows.append((*record, 1))
        name = f"spans-{seed}-{f}.{'csv' if csv else 'txt'}"
        with open(os.path.join(folder, name), "w") as out:
            if csv:
                out.write("key,start,end,diff\n")
            out.writelines((",".join if csv else " ".join)(map(str, row)) + "\n" for row in rows)


def source(folder: str, name: str, format: str = "text") -> Callable:
    return lambda scope: scope.input_from_source(
        FileSource(folder, format=format, batch_rows=BATCH_ROWS), name)


def _hooked(collection: dd.Collection, worker: st.Worker, hook: Callable | None) -> dd.Collection:
    """``collection``, calling ``hook(worker, time)`` for each distinct time of the updates of
    each batch (an Arrow batch's rows are at its timely time)."""
    if hook is None:
        return collection

    def inspect(time, batch):
        for t in sorted({u[1] for u in batch}) if batch.__class__ is list else [time]:
            hook(worker, t)
    return dd.as_collection(collection.inner.inspect_batch(inspect))


def changing_epochs(oracle: dict[int, Counter]) -> list[int]:
    """The epochs at which the oracle's collection changes (so some update is output)."""
    return [e for e in sorted(oracle) if oracle[e] != oracle.get(e - 1, Counter())]


def wordcount(worker: st.Worker, texts: str, out: str, hook: Callable | None = None) -> None:
    """Counts of the words of ``texts`` (``count``), the words seen at least twice
    (``threshold``) and the distinct words (``distinct``), tagged, as updates in ``out``."""
    def build(scope):
        words = dd.from_stream(source(texts, "lines")(scope)).flat_map(str.split)
        counts = words.count().map(lambda wn: ("count", wn))
        twice = words.threshold(lambda w, n: 1 if n >= 2 else 0).map(lambda w: ("twice", w))
        distinct = words.distinct().map(lambda w: ("distinct", w))
        result = _hooked(counts.concat(twice).concat(distinct), worker, hook)
        result.inner.output_to(DirectorySink(out, format="jsonl"), "updates")
    worker.dataflow(build, name="dd-wordcount")


def wordcount_oracle(texts: str) -> dict[int, Counter]:
    """Per epoch, the collection :func:`wordcount` should hold (recomputed from scratch)."""
    words: Counter = Counter()
    return replay(lines_by_epoch(texts), lambda line: words.update(line.split()),
                  lambda: Counter({("count", (w, n)): 1 for w, n in words.items() if n} |
                                  {("twice", w): 1 for w, n in words.items() if n >= 2} |
                                  {("distinct", w): 1 for w, n in words.items() if n > 0}))


def replay(by_epoch: dict[int, list[str]], apply: Callable[[str], None],
           collection: Callable[[], Counter]) -> dict[int, Counter]:
    """An oracle: for each epoch, ``collection()`` once ``apply(line)`` has seen the lines of
    that epoch and all earlier ones, in order."""
    result = {}
    for epoch in range(max(by_epoch) + 1):
        for line in by_epoch.get(epoch, []):
            apply(line)
        result[epoch] = collection()
    return result


def arrow_wordcount(worker: st.Worker, csvs: str, out: str, hook: Callable | None = None) -> None:
    """``count(key="word")`` of the ``word,diff`` rows of ``csvs`` (Arrow updates), as
    Parquet files of ``word, count, diff`` in ``out``."""
    def build(scope):
        rows = dd.as_collection(source(csvs, "rows", "csv")(scope))
        counts = _hooked(rows.count(key="word"), worker, hook)
        counts.inner.output_to(DirectorySink(out, format="parquet"), "counts")
    worker.dataflow(build, name="dd-arrow-wordcount")


def arrow_wordcount_oracle(csvs: str) -> dict[int, Counter]:
    words: Counter = Counter()

    def apply(line: str) -> None:
        word, diff = line.split(",")
        words[word] += int(diff)
    return replay(lines_by_epoch(csvs), apply,
                  lambda: Counter({(w, n): 1 for w, n in words.items() if n}))


def _edges(lines: st.Stream) -> dd.Collection:
    def parse(line: str) -> list:
        src, dst, diff = line.split()
        return [((int(src), int(dst)), int(diff))]
    return dd.from_stream(lines).explode(parse)


def reachability(worker: st.Worker, edge_files: str, out: str,
                 hook: Callable | None = None) -> None:
    """The nodes reachable from node 0 over the edges of ``edge_files`` (``iterate`` with
    ``join`` and ``distinct``), as updates in ``out``."""
    def build(scope):
        edges = _edges(source(edge_files, "edges")(scope))
        roots = edges.filter(lambda e: e[0] == 0).map(lambda e: 0).distinct()

        def step(reached):
            inner = edges.enter(reached.scope)
            return (reached.map(lambda n: (n, ())).join_map(inner, lambda n, _, m: m)
                    .concat(roots.enter(reached.scope)).distinct())
        result = _hooked(roots.iterate(step), worker, hook)
        result.inner.output_to(DirectorySink(out, format="jsonl"), "reached")
    worker.dataflow(build, name="dd-reachability")


def reachability_oracle(edge_files: str) -> dict[int, Counter]:
    edges: Counter = Counter()
    return replay(lines_by_epoch(edge_files), lambda line: add_edge(edges, line),
                  lambda: Counter({node: 1 for node in bfs({e for e, n in edges.items()
                                                            if n > 0})}))


def add_edge(edges: Counter, line: str) -> None:
    """Apply an edge file's line ``src dst diff`` to ``edges``."""
    src, dst, diff = map(int, line.split())
    edges[(src, dst)] += diff


def bfs(edges: set) -> set:
    if not any(src == 0 for src, _ in edges):
        return set()
    adjacent: dict = {}
    for src, dst in edges:
        adjacent.setdefault(src, []).append(dst)
    seen, queue = {0}, deque([0])
    while queue:
        for node in adjacent.get(queue.popleft(), []):
            if node not in seen:
                seen.add(node)
                queue.append(node)
    return seen


def join_count(worker: st.Worker, edge_files: str, query_files: str, out: str,
               hook: Callable | None = None) -> None:
    """The edges whose source is among the query keys read from ``query_files`` (one key per
    line, each line inserting it; ``join_map``), counted per source (``count``), as
    updates in ``out``."""
    def build(scope):
        edges = _edges(source(edge_files, "edges")(scope))
        keys = dd.from_stream(source(query_files, "keys")(scope)).map(int).distinct()
        queried = edges.join_map(keys.map(lambda key: (key, ())), lambda src, dst, _: src)
        result = _hooked(queried.count(), worker, hook)
        result.inner.output_to(DirectorySink(out, format="jsonl"), "counts")
    worker.dataflow(build, name="dd-join-count")


def join_count_oracle(edge_files: str, query_files: str) -> dict[int, Counter]:
    edges: Counter = Counter()
    keys: set = set()
    edge_lines, query_lines = lines_by_epoch(edge_files), lines_by_epoch(query_files)
    lines = {epoch: edge_lines.get(epoch, []) + query_lines.get(epoch, [])
             for epoch in edge_lines.keys() | query_lines.keys()}

    def apply(line: str) -> None:           # an edge (three numbers) or a query key (one)
        if " " in line:
            add_edge(edges, line)
        else:
            keys.add(int(line))

    def collection() -> Counter:
        per_source: Counter = Counter()
        for (src, _), n in edges.items():
            if src in keys:
                per_source[src] += n
        return Counter({(src, n): 1 for src, n in per_source.items() if n})
    return replay(lines, apply, collection)


def temporal(worker: st.Worker, span_files: str, out: str, hook: Callable | None = None) -> None:
    """The records of ``span_files`` present between their start and end
    (``active_between``), tagged ``live``, and how many of them each key has (``count``),
    tagged ``count``, as updates in ``out``."""
    def build(scope):
        def parse(line: str) -> list:
            key, start, end, diff = map(int, line.split())
            return [((key, start, end), diff)]
        records = dd.from_stream(source(span_files, "spans")(scope)).explode(parse)
        live = records.active_between(lambda r: r[1], lambda r: r[2])
        counts = live.map(lambda r: r[0]).count()
        result = _hooked(live.map(lambda r: ("live", r))
                         .concat(counts.map(lambda kn: ("count", kn))), worker, hook)
        result.inner.output_to(DirectorySink(out, format="jsonl"), "window")
    worker.dataflow(build, name="dd-temporal")


def arrow_temporal(worker: st.Worker, span_csvs: str, out: str,
                   hook: Callable | None = None) -> None:
    """``active_between("start", "end").count(key="key")`` of the rows of ``span_csvs``, as
    Parquet files of ``key, count, diff`` in ``out``."""
    def build(scope):
        rows = dd.as_collection(source(span_csvs, "spans", "csv")(scope))
        counts = _hooked(rows.active_between("start", "end").count(key="key"), worker, hook)
        counts.inner.output_to(DirectorySink(out, format="parquet"), "counts")
    worker.dataflow(build, name="dd-arrow-temporal")


def temporal_oracle(span_files: str, live: bool = True) -> dict[int, Counter]:
    """Per time, up to the last end, what :func:`temporal` (``live`` records and counts) or
    :func:`arrow_temporal` (counts alone) should hold: each record of epoch ``e`` present at
    the times from ``max(start, e)`` until ``end``."""
    updates = [(epoch, tuple(map(int, line.replace(",", " ").split())))
               for epoch, lines in lines_by_epoch(span_files).items() for line in lines]
    last = max(max(epoch, row[2]) for epoch, row in updates)
    result = {}
    for time in range(last + 1):
        present: Counter = Counter()
        for epoch, (key, start, end, diff) in updates:
            if max(start, epoch) <= time < end:
                present[(key, start, end)] += diff
        per_key: Counter = Counter()
        for (key, _, _), n in present.items():
            per_key[key] += n
        counts = Counter({(key, n): 1 for key, n in per_key.items() if n})
        if live:
            counts = Counter({("count", kn): 1 for kn in counts})
            counts.update({("live", r): n for r, n in present.items() if n})
        result[time] = counts
    return result


def write_query_files(folder: str, files: int = 2, lines: int = 18, seed: int = 1) -> None:
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for f in range(files):
        with open(os.path.join(folder, f"keys-{seed}-{f}.txt"), "w") as out:
            out.writelines(f"{rng.randrange(NODES)}\n" for _ in range(lines))


def shared_queries(worker: st.Worker, edge_files: str, query_files: str, out: str) -> None:
    """Dataflow ``edges`` arranges the edges by source; dataflow ``queries`` imports that
    trace and writes the edges whose source is among the query keys (``semijoin``)."""
    trace = worker.dataflow(lambda scope: _edges(source(edge_files, "edges")(scope))
                            .arrange_by_key().trace, name="edges")

    def build(scope):
        keys = dd.from_stream(source(query_files, "keys")(scope)).map(int).distinct()
        found = trace.import_(scope).semijoin(keys)
        found.inner.output_to(DirectorySink(out, format="jsonl"), "found")
    worker.dataflow(build, name="queries")
    trace.close()


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def updates(out: str) -> list[tuple]:
    """Every visible update ``(file epoch, data, time, diff)`` written to ``out``, sorted
    (Parquet rows as ``(epoch, (column values but diff), epoch, diff)``)."""
    rows = []
    for epoch, path in sink_files(out):
        if path.endswith(".jsonl"):
            with open(path) as lines:
                rows += [(epoch, *_tuples(json.loads(line))) for line in lines]
        else:
            for row in pq.read_table(path).to_pylist():
                data = tuple(v for name, v in row.items() if name != "diff")
                rows.append((epoch, data, epoch, row["diff"]))
    return sorted(rows, key=repr)


def accumulated(rows: list[tuple]) -> dict[int, Counter]:
    """The collection the updates add up to at each time: ``{time: Counter(data)}`` from
    time 0 to the latest time of an update (an update's time is at or after the epoch of the
    file holding it)."""
    assert all(time >= epoch for epoch, _, time, _ in rows), "an update before its file's epoch"
    last = max((time for _, _, time, _ in rows), default=-1)
    total: Counter = Counter()
    result = {}
    for time in range(last + 1):
        for _, data, t, diff in rows:
            if t == time:
                total[data] += diff
        result[time] = Counter({d: n for d, n in total.items() if n})
    return result


def agrees(rows: list[tuple], oracle: dict[int, Counter]) -> None:
    """Assert that ``rows`` add up to ``oracle``'s collection at every epoch."""
    got = accumulated(rows)
    for epoch, expected in oracle.items():
        assert got.get(epoch, got[max(got)] if got else Counter()) == expected, f"epoch {epoch}"


def consolidated(rows: list[tuple]) -> Counter:
    """``{(data, time): diff}`` of the visible updates, zero sums dropped: the collection's
    updates (which epoch's file carries an update at a later time may differ between runs,
    as the timely time of the batch carrying it may)."""
    total: Counter = Counter()
    for _, data, time, diff in rows:
        total[(data, time)] += diff
    return Counter({k: n for k, n in total.items() if n})


KINDS = ["wordcount", "arrow", "reachability", "join_count", "temporal", "arrow_temporal"]
DATAFLOWS = {"wordcount": "dd-wordcount", "arrow": "dd-arrow-wordcount",
             "reachability": "dd-reachability", "join_count": "dd-join-count",
             "temporal": "dd-temporal", "arrow_temporal": "dd-arrow-temporal"}
"""The name of each kind's dataflow (its folder in a checkpoint directory)."""


class Job:
    """One of the jobs of this module (a kind of :data:`KINDS`) with its inputs written under
    ``tmp_path``: ``run(worker, out, hook=None)`` builds it, ``oracle()`` recomputes it."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        inputs = str(tmp_path / "inputs")
        if kind == "wordcount":
            write_texts(inputs, files=3, lines=12)
            self.run = lambda w, out, hook=None: wordcount(w, inputs, out, hook)
            self.oracle = lambda: wordcount_oracle(inputs)
        elif kind == "arrow":
            write_word_csvs(inputs)
            self.run = lambda w, out, hook=None: arrow_wordcount(w, inputs, out, hook)
            self.oracle = lambda: arrow_wordcount_oracle(inputs)
        elif kind == "temporal":
            write_span_files(inputs)
            self.run = lambda w, out, hook=None: temporal(w, inputs, out, hook)
            self.oracle = lambda: temporal_oracle(inputs)
        elif kind == "arrow_temporal":
            write_span_files(inputs, csv=True)
            self.run = lambda w, out, hook=None: arrow_temporal(w, inputs, out, hook)
            self.oracle = lambda: temporal_oracle(inputs, live=False)
        elif kind == "reachability":
            write_edge_files(inputs)
            self.run = lambda w, out, hook=None: reachability(w, inputs, out, hook)
            self.oracle = lambda: reachability_oracle(inputs)
        else:
            queries = str(tmp_path / "queries")
            write_edge_files(inputs)
            write_query_files(queries)
            self.run = lambda w, out, hook=None: join_count(w, inputs, queries, out, hook)
            self.oracle = lambda: join_count_oracle(inputs, queries)
        self.inputs = inputs

    def at(self, position: str) -> int:
        """The first, middle or last epoch at which the output changes."""
        changing = changing_epochs(self.oracle())
        return {"first": changing[0], "middle": changing[len(changing) // 2],
                "last": changing[-1]}[position]

