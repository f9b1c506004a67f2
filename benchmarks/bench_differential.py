"""Differential dataflow: incremental word count, join + count, reachability by ``iterate`` and
a shared arrangement queried by many dataflows, beside Pathway 0.33 and a plain-Python
recompute; and a sliding count by ``active_between`` beside Pathway's ``windowby`` (a section
of its own, which ``python -m benchmarks`` runs with bench_windows).

    python -m benchmarks.bench_differential [--quick] [--no-pathway] [--sliding]

``--sliding`` runs the sliding-count section alone.

Workloads (the data and update streams of shared/anchors/pw_incremental.py):

- word count (Arrow path): 1M words over 10,007 keys loaded as one RecordBatch, then 1,000
  batches of 100 words; ``count(key="word")``. Start-up, untimed as in the Pathway anchor: one
  row sent through the built dataflow until the probe passes it. Load: words per second from
  the bulk's ``update_batch`` to the probe passing its time; update latency: from sending a
  batch to the probe passing its time (the changed counts are then final), after 50 warm-up
  batches.
- join + count (Arrow path): A (1M rows, keys in 0..99,999) ``join(on="key")`` B (100k rows,
  one per key), ``count(key="key")``; then 1,000 updates of 10 A rows + 1 B row. The same
  on Python records, 1 worker: ``(key, 0)`` tuples, ``join``, ``map`` to the key, ``count``.
- reachability from node 0 by ``iterate`` (join, concat, distinct) over Arrow batches, on a
  random graph of 100k nodes and 500k edges: time to the first fixed point, then 100
  single-edge updates of two kinds, each kind in a run of its own: the insertions Pathway's
  peer makes (each from a reachable node to an unreachable one, the same edges in the same
  order; after its 5 warm-up insertions), and random edges inserted and deleted taking turns
  (each deletion removes the edge inserted just before; after 6 warm-up updates), which
  Pathway's anchor does not measure.
- shared arrangement (Python path): ``knows`` (1M random edges) arranged once; then 1,000 query
  dataflows, each ``trace.import_(scope).semijoin(query)`` for 3 keys: install + answer
  latency per query (build the dataflow, send the query, step until the probe passes), the
  query dataflow dropped after its answer; then memory growth: 1,000 more queries under
  tracemalloc, what stays allocated after the first tenth, against the RSS the arrangement
  added (RSS itself hides the growth: memory freed while loading is reused).
- query dataflow per round at 1 and 2 workers: ``examples/dd_queries.py`` (100k random edges
  arranged, then 300 rounds each installing a query dataflow that imports the arrangement,
  asks for 3 keys and is dropped, while every worker inserts an edge into ``knows``): the
  median round (the slower worker's), 1 and 2 workers taking turns three times.
- sliding count (its own section): ``active_between(t, t + 100k)`` then ``count`` per key,
  on Python records and on Arrow rows (start and end columns), 1 worker. 100k events over
  1,000 keys with times spread over ``[0, 100k)`` arrive at time 100k (all inside the
  window); then 1,000 single events, one per time unit, after 50 warm-up events: each
  round inserts one event and retracts those whose window ended then (one on average).
  Latency: from sending the event to the probe passing its time. Pathway's peer
  (``pathway_incremental.py --child sliding``, the same events): ``windowby(t,
  sliding(hop=20k, duration=100k, origin=0), instance=key)`` with a count per window, the
  latency from pushing an event to its 5 windows' counts seen at the output.
- paced updates: the word count and join + count updates again, one starting every
  ``PACE`` seconds (5 ms) instead of as soon as the previous one is answered, as a service
  gets them; the worker waits with ``step_or_park``, so it merges its traces' batches while
  idle (``Worker.defer``), and Pathway's peer (``--pace``) sleeps between updates.
- 2 workers / 1 worker: the word count and join loads again with 2 worker processes, each
  sending half of the input. Every load figure is the best of LOAD_RUNS runs (1 and 2 workers
  taking turns; the 1-worker ones include the latency run's load): a load lasts 10-200 ms, and
  on a shared machine one run's figure mostly says what the neighbours were doing. The Arrow
  path's modules (and pyarrow's group_by engine) are imported before the workers fork, so no
  run pays their one-off import (20-50 ms) inside its timing.
- Warm-up: each load is timed after one untimed load of the same data into another dataflow,
  closed and run to completion first, as benchmark harnesses time after warm-up rounds; the
  figures "first in new processes" are the same loads without it. The first load in a
  freshly forked worker pays for first touches of memory: on this kind of machine (a VM
  whose host takes back freed memory) a fresh 2 MB page costs 5-9 ms of kernel time to
  fault in (perf: ``clear_page_erms`` under ``do_huge_pmd_anonymous_page``), and code pages
  are faulted in again after the fork. Each worker pays these at the same moment, so they do not shrink
  with more workers, and they blur what the engine does.

Every latency figure also gets its distribution beside Pathway's from the same run (p50, p90,
p99, p99.9, max and the share of updates per sqrt(2)-wide bin: ``_util.Histogram``), in the
tables and in the harness's plot: a tail shows as what it is (how many updates, how long),
which a median and a p99 alone do not say.

Peers, in the same run: Pathway 0.33 through ``benchmarks/pathway_incremental.py --child MODE``
(its streaming API: a ConnectorSubject in, ``pw.io.subscribe`` out), run only when a Pathway
virtual environment exists (``.pwvenv``: ``python3 -m venv .pwvenv && .pwvenv/bin/pip install
"pathway==0.33.*"``; or ``$SPARKTIMELY_PATHWAY_PYTHON``); and plain Python recomputing from
scratch (``collections.Counter`` / dict join / deque BFS) on the same data. Each figure
beside Pathway's comes from PEER_TURNS runs of each engine taking turns (Pathway, then ours),
pooled: on a shared machine the neighbours' load moves both engines' figures by 2x within
minutes (FINDINGS.md), so runs of the two taken far apart would compare the neighbours.
"""
from __future__ import annotations

import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter, deque
from pathlib import Path
from typing import Callable

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.acero  # noqa: F401  (group_by's engine, loaded on first use: 20-50 ms)

import sparktimely as st
import sparktimely.differential as dd  # with the Arrow path's modules

from examples import dd_queries

from ._util import Goal, Histogram, Row, Section, quantile
from .pathway_incremental import REACH_WARMUP, graph_data, pick_insertions, sliding_data

HERE = Path(__file__).resolve().parent
QUICK = 10                          # --quick divides the sizes by this
WC_WORDS, WC_KEYS, WC_UPDATES, WC_BATCH, WARMUP = 1_000_000, 10_007, 1_000, 100, 50
J_A, J_B, J_UPDATES = 1_000_000, 100_000, 1_000
G_NODES, G_EDGES, G_UPDATES, G_WARMUP = 100_000, 500_000, 100, 6
KNOWS, QUERIES = 1_000_000, 1_000
Q_EDGES, Q_ROUNDS, Q_RUNS = 100_000, 300, 3   # dd_queries at 1 and 2 workers
SL_EVENTS, SL_KEYS, SL_WINDOW, SL_UPDATES = 100_000, 1_000, 100_000, 1_000
PACE = 0.005                        # paced updates: one starting every PACE seconds
LOAD_RUNS = 3                       # loads: the best of this many runs (plus the latency run's)
PEER_TURNS = 3                      # runs against Pathway: each engine this many times, in turn


def latency(seconds: list) -> tuple[float, float]:
    """(median, p99) in milliseconds."""
    return statistics.median(seconds) * 1e3, quantile(seconds, 99) * 1e3


def ms(seconds: list) -> list:
    """Latencies in milliseconds (for the histograms)."""
    return [s * 1e3 for s in seconds]


def diffs(n: int) -> np.ndarray:
    return np.ones(n, np.int64)


# -- sparktimely ---------------------------------------------------------------------------------

def give_arrow(session, batch) -> None:
    session.update_batch(batch)


def give_records(session, records: list) -> None:
    """Python records: ``(data, diff)`` pairs."""
    for data, diff in records:
        session.update(data, diff)


def load_and_update_seconds(worker, build, startup: list, bulk: list, updates: list,
                            warm: bool, pace: float = 0.0, give=give_arrow) -> tuple:
    """In a dataflow ``build(worker)`` makes (returning its input sessions and its probe):
    send ``startup`` (one small batch per session, as the Pathway anchor's start-up row) at
    time 0 and step until the probe passes it, untimed; then time ``bulk`` (one batch per
    session) at time 1 until the probe passes it; then for each entry of ``updates`` (one
    batch per session, worker 0 only) the time to the probe passing its round. With
    ``warm``, the worker first loads ``bulk`` the same way, untimed, into another dataflow
    that it closes and runs to completion (a warm-up round: see the module's docstring).
    With ``pace``, each update starts ``pace`` seconds after the previous one started, the
    worker waiting with ``step_or_park`` meanwhile. ``give(session, batch)`` sends a batch
    (:func:`give_arrow`, or :func:`give_records` for lists of Python records).
    Returns (load seconds, update seconds after WARMUP rounds)."""
    def send(sessions: list, batches: list, time_now: int) -> None:
        for session, batch in zip(sessions, batches):
            give(session, batch)
            session.advance_to(time_now)

    def worker_0s(batches: list) -> list:
        """``batches`` at worker 0, empty slices of them (the same schemas) at the others."""
        return batches if worker.index == 0 else [b[:0] for b in batches]

    def load(sessions: list, probe) -> float:
        send(sessions, worker_0s(startup), 1)
        worker.step_while(lambda: probe.less_than(1))
        started = time.perf_counter()
        send(sessions, bulk, 2)
        worker.step_while(lambda: probe.less_than(2))
        return time.perf_counter() - started
    if warm:
        sessions, probe = build(worker)
        load(sessions, probe)
        for session in sessions:
            session.close()
        worker.step_while(lambda: not probe.done())
    sessions, probe = build(worker)
    loaded = load(sessions, probe)
    seconds = []
    for r, batches in enumerate(map(worker_0s, updates), start=3):
        started = time.perf_counter()
        send(sessions, batches, r)
        worker.step_while(lambda: probe.less_than(r))
        if r >= 3 + WARMUP:
            seconds.append(time.perf_counter() - started)
        while time.perf_counter() < started + pace:
            worker.step_or_park(started + pace - time.perf_counter())
    for session in sessions:
        session.close()
    return loaded, seconds


def figures(results: list, rows: int) -> dict:
    """Load rate (the slowest worker) and worker 0's update latencies."""
    load = max(r[0] for r in results)
    median, p99 = latency(results[0][1]) if results[0][1] else (None, None)
    return {"load": rows / load, "median": median, "p99": p99, "latencies": ms(results[0][1])}


def wordcount(words: int, updates: int, workers: int, warm: bool = True,
              pace: float = 0.0) -> dict:
    """Arrow word count: load rate, then update latencies (worker 0 sends the updates, each
    ``pace`` seconds after the previous one if given)."""
    def build(worker) -> tuple:
        session = dd.InputSession()
        probe = worker.dataflow(lambda scope: session.to_collection(scope).count(key="word")
                                .probe())
        return [session], probe

    def job(worker):
        vocab = np.array([f"w{i:05d}" for i in range(WC_KEYS)])
        mine = vocab[np.arange(worker.index, words, worker.peers) % WC_KEYS]
        rng = random.Random(1)

        def words_batch(words) -> pa.RecordBatch:
            return pa.record_batch({"word": pa.array(words), "diff": diffs(len(words))})
        rounds = [[words_batch([f"w{rng.randrange(WC_KEYS):05d}" for _ in range(WC_BATCH)])]
                  for _ in range(updates + WARMUP if updates else 0)]
        return load_and_update_seconds(worker, build, [words_batch(["__startup__"])],
                                       [words_batch(mine)], rounds, warm, pace)
    return figures(st.execute(job, workers=workers), words)


def join_count(a_rows: int, b_rows: int, updates: int, workers: int, warm: bool = True,
               pace: float = 0.0) -> dict:
    """Arrow join + count: load rate, then latencies of 10 A rows + 1 B row updates (paced as
    :func:`wordcount`'s)."""
    def build(worker) -> tuple:
        a, b = dd.InputSession(), dd.InputSession()
        probe = worker.dataflow(lambda scope: a.to_collection(scope).join(
            b.to_collection(scope), on="key").count(key="key").probe())
        return [a, b], probe

    def job(worker):
        rng = np.random.default_rng(2)
        a_keys = rng.integers(0, b_rows, a_rows)[worker.index::worker.peers]
        b_keys = np.arange(b_rows)[worker.index::worker.peers]
        keys = random.Random(3)

        def rows(values: list[int] | np.ndarray) -> pa.RecordBatch:
            return pa.record_batch({"key": pa.array(values, pa.int64()), "diff": diffs(len(values))})
        rounds = [[rows([keys.randrange(b_rows) for _ in range(10)]),
                   rows([keys.randrange(b_rows)])]
                  for _ in range(updates + WARMUP if updates else 0)]
        return load_and_update_seconds(worker, build, [rows([-1]), rows([-1])],
                                       [rows(a_keys), rows(b_keys)], rounds, warm, pace)
    return figures(st.execute(job, workers=workers), a_rows + b_rows)


def join_count_records(a_rows: int, b_rows: int, updates: int) -> dict:
    """:func:`join_count` on Python records, 1 worker: ``(key, 0)`` tuples joined by key, then
    the matches counted per key."""
    def build(worker) -> tuple:
        a, b = dd.InputSession(), dd.InputSession()
        probe = worker.dataflow(lambda scope: a.to_collection(scope).join(
            b.to_collection(scope)).map(lambda match: match[0]).count().probe())
        return [a, b], probe

    def job(worker):
        rng = np.random.default_rng(2)
        keys = random.Random(3)

        def records(values) -> list:
            return [((int(k), 0), 1) for k in values]
        rounds = [[records([keys.randrange(b_rows) for _ in range(10)]),
                   records([keys.randrange(b_rows)])] for _ in range(updates + WARMUP)]
        return load_and_update_seconds(
            worker, build, [records([-1]), records([-1])],
            [records(rng.integers(0, b_rows, a_rows)), records(range(b_rows))], rounds,
            warm=False, give=give_records)
    return figures(st.execute(job, workers=1), a_rows + b_rows)


def graph(nodes: int, edges: int) -> list:
    """The random graph, as Pathway's peer makes it (:func:`graph_data`)."""
    return graph_data(nodes, edges)[0]


def edge_updates(nodes: int, edges: int, updates: int,
                 like_pathway: bool) -> tuple[list[tuple[tuple[int, int], int]], int]:
    """``((src, dst), diff)`` single-edge updates to the random graph and how many of them
    come first as warm-up: ``updates`` after :data:`G_WARMUP` inserts and deletes taking turns
    (each delete removes the edge inserted just before); or, ``like_pathway``, the
    insertions Pathway's peer makes, in its order (``pick_insertions``: each from a reachable
    node to an unreachable one, so every one makes nodes reachable)."""
    if like_pathway:
        bulk, rng = graph_data(nodes, edges)
        inserts, _ = pick_insertions(bulk, rng, REACH_WARMUP + updates, nodes)
        return [(edge, 1) for edge, _ in inserts], REACH_WARMUP
    rng = random.Random(4)
    out = []
    for _ in range((G_WARMUP + updates) // 2 + 1):
        edge = (rng.randrange(nodes), rng.randrange(nodes))
        out += [(edge, 1), (edge, -1)]
    return out[:G_WARMUP + updates], G_WARMUP


def reachability(nodes: int, edges: int, updates: int, like_pathway: bool = False) -> dict:
    """Arrow reachability by iterate: first fixed point, then the single-edge updates of
    :func:`edge_updates`; the reachable count is checked against a BFS at the end."""
    changes, warmup = edge_updates(nodes, edges, updates, like_pathway)

    def job(worker):
        edge_input, root_input = dd.InputSession(), dd.InputSession()
        reached: Counter = Counter()

        def build(scope):
            edge_rows = edge_input.to_collection(scope)
            roots = root_input.to_collection(scope)

            def step(reach):
                sources = reach.map_batches(lambda b: b.rename_columns(["src", "diff"]))
                targets = sources.join(edge_rows.enter(reach.scope), on="src").map_batches(
                    lambda b: pa.RecordBatch.from_arrays([b.column("dst"), b.column("diff")],
                                                         ["node", "diff"]))
                return targets.concat(roots.enter(reach.scope)).distinct()
            result = roots.iterate(step)
            result.inspect_batch(lambda t, b: reached.update(
                {"n": int(np.asarray(b.column("diff")).sum())}))
            return result.probe()
        probe = worker.dataflow(build)
        # The edges are kept for the BFS check as an array, not as the list of 500k tuples
        # `graph` makes: a list that long makes each full collection of Python's cycle
        # collector during the updates take ~8 ms (it visits every element).
        array = np.array(graph(nodes, edges), np.int64)
        started = time.perf_counter()
        edge_input.update_batch(pa.record_batch({"src": array[:, 0], "dst": array[:, 1],
                                                 "diff": diffs(len(array))}))
        root_input.update_batch(pa.record_batch({"node": pa.array([0], pa.int64()),
                                                 "diff": diffs(1)}))
        edge_input.advance_to(1)
        root_input.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        first = time.perf_counter() - started
        seconds = []
        for r, ((src, dst), diff) in enumerate(changes, start=2):
            batch = pa.record_batch({"src": np.array([src]), "dst": np.array([dst]),
                                     "diff": np.array([diff])})
            started = time.perf_counter()        # from sending the batch, as the other loads
            edge_input.update_batch(batch)
            edge_input.advance_to(r)
            root_input.advance_to(r)
            worker.step_while(lambda: probe.less_than(r))
            if r >= 2 + warmup:
                seconds.append(time.perf_counter() - started)
        edge_input.close()
        root_input.close()
        worker.step_while(lambda: not probe.done())
        final = Counter(map(tuple, array.tolist()))
        for edge, diff in changes:
            final[edge] += diff
        return first, seconds, reached["n"], bfs_count(list(final.elements()), nodes)
    first, seconds, got, want = st.execute(job, workers=1)[0]
    if got != want:
        raise AssertionError(f"reachability: {got} nodes reachable, BFS says {want}")
    median, p99 = latency(seconds)
    return {"first": first, "median": median, "p99": p99, "reachable": got,
            "latencies": ms(seconds)}


def sliding_count(events: int, window: int, updates: int, arrow: bool) -> dict:
    """``active_between`` sliding count per key (Python records, or Arrow rows with start and
    end columns): the bulk (``events`` with times in ``[0, window)``, all inside the window)
    arrives at time ``window``; then one event per time unit, each expiring whatever left the
    window at that time. Load: events per second to the probe passing the bulk's time;
    latency: from sending an event to the probe passing its time (its key's count, and those
    of the keys of expired events, are then final). The counts at the end are checked
    against a count from scratch."""
    bulk, rounds = sliding_data(events, SL_KEYS, window, updates + WARMUP)

    def job(worker):
        session = dd.InputSession()
        changes: Counter = Counter()            # (key, count) -> multiplicity, summed

        def build(scope):
            events = session.to_collection(scope)
            if arrow:
                counts = events.active_between("start", "end").count(key="key")
                counts.inspect_batch(lambda time, b: changes.update(
                    {(k, n): d for k, n, d in zip(*(b.column(c).to_pylist()
                                                    for c in ("key", "count", "diff")))}))
            else:
                counts = events.active_between(lambda e: e[1], lambda e: e[1] + window) \
                    .map(lambda e: e[0]).count()

                def tally(time, batch) -> None:
                    for kn, _, d in batch:
                        changes[kn] += d
                counts.inspect_batch(tally)
            return counts.probe()
        probe = worker.dataflow(build)

        def send(batch: list) -> None:
            if arrow:
                keys, times = (np.array(c, np.int64).reshape(-1) for c in zip(*batch))
                session.update_batch(pa.record_batch({"key": keys, "start": times,
                                                      "end": times + window,
                                                      "diff": diffs(len(batch))}))
            else:
                for event in batch:
                    session.insert(event)
        send([(-1, 0)])                          # start-up, untimed: one event at time 0
        session.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        session.advance_to(window)
        started = time.perf_counter()
        send(bulk)
        session.advance_to(window + 1)
        worker.step_while(lambda: probe.less_than(window + 1))
        load = time.perf_counter() - started
        seconds = []
        for i, event in enumerate(rounds):
            started = time.perf_counter()
            send([event])
            session.advance_to(event[1] + 1)
            worker.step_while(lambda: probe.less_than(event[1] + 1))
            if i >= WARMUP:
                seconds.append(time.perf_counter() - started)
        session.close()
        final = {kn for kn, n in changes.items() if n}
        return load, seconds, final
    load, seconds, final = st.execute(job, workers=1)[0]
    last = rounds[-1][1]
    want = Counter(k for k, t in bulk + rounds if last - window < t <= last)
    if final != set(want.items()):
        raise AssertionError(f"sliding count ({'Arrow' if arrow else 'Python'}): the counts "
                             f"at time {last} differ from a count from scratch")
    median, p99 = latency(seconds)
    return {"load": events / load, "median": median, "p99": p99, "latencies": ms(seconds)}


def shared_arrangement(knows: int, queries: int) -> dict:
    """Shared arrangement: one arranged ``knows``, ``queries`` query dataflows importing it."""
    def job(worker):
        process = psutil.Process()
        gc.collect()
        before = process.memory_info().rss
        session = dd.InputSession()
        trace, probe = worker.dataflow(lambda scope: (lambda a: (a.trace, a.stream.probe()))(
            session.to_collection(scope).arrange_by_key()))
        rng = random.Random(5)
        nodes = knows // 10
        started = time.perf_counter()
        for _ in range(knows):
            session.insert((rng.randrange(nodes), rng.randrange(nodes)))
        session.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        load = time.perf_counter() - started
        trace.set_logical_compaction([1])
        trace.set_physical_compaction([])
        gc.collect()
        arranged = process.memory_info().rss - before
        def ask(q: int) -> None:
            query = dd.InputSession()
            index = worker.next_dataflow_index()
            done = worker.dataflow(lambda scope: trace.import_(scope).semijoin(
                query.to_collection(scope)).probe())
            for key in range(q, q + 3):
                query.insert(key % nodes)
            query.advance_to(1)
            worker.step_while(lambda: done.less_than(1))
            query.close()
            worker.drop_dataflow(index)
        seconds = []
        for q in range(queries):
            started = time.perf_counter()
            ask(q)
            seconds.append(time.perf_counter() - started)
        # memory, in a second pass under tracemalloc (which slows allocation: not timed)
        tracemalloc.start()
        for q in range(queries):
            if q == queries // 10:
                gc.collect()
                growth_at = tracemalloc.get_traced_memory()[0]
            ask(q)
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - growth_at
        tracemalloc.stop()
        session.close()
        return load, arranged, seconds, growth
    if not hasattr(st.Worker, "drop_dataflow"):
        return {"error": "needs worker.drop_dataflow"}
    load, arranged, seconds, growth = st.execute(job, workers=1)[0]
    median, p99 = latency(seconds)
    return {"load": knows / load, "arranged_mb": arranged / 2**20, "median": median, "p99": p99,
            "growth_mb": growth / 2**20}


def query_scaling(edges: int, queries: int, runs: int) -> dict:
    """Seed 003's query program (``examples/dd_queries.py``: a query dataflow per round
    importing one arranged ``knows`` while ``knows`` changes) at 1 and 2 workers, taking
    turns ``runs`` times: the median over the runs of each run's median round (a round's
    latency is its slowest worker's; the first tenth of the rounds is warm-up)."""
    def run(workers: int) -> float:
        parts = st.execute(lambda worker: dd_queries.queries(worker, edges, queries,
                                                             report=lambda *_: None),
                           workers=workers)
        slowest = [max(round_seconds) for round_seconds in zip(*parts)]
        return statistics.median(slowest[queries // 10:]) * 1e3
    medians: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(runs):
        for workers in (1, 2):
            medians[workers].append(run(workers))
    return {workers: statistics.median(values) for workers, values in medians.items()}


# -- plain Python --------------------------------------------------------------------------------

def bfs_count(edges: list, nodes: int) -> int:
    adjacency: list[list[int]] = [[] for _ in range(nodes)]
    for u, v in edges:
        adjacency[u].append(v)
    seen = bytearray(nodes)
    seen[0] = 1
    queue = deque([0])
    while queue:
        for v in adjacency[queue.popleft()]:
            if not seen[v]:
                seen[v] = 1
                queue.append(v)
    return sum(seen)


def python_recompute(words: int, a_rows: int, b_rows: int, nodes: int, edges: int) -> dict:
    """Plain-Python recompute from scratch: the bulk once and the cost of one update."""
    out = {}
    bulk = [f"w{i % WC_KEYS:05d}" for i in range(words)]
    started = time.perf_counter()
    Counter(bulk)
    out["wc_load"] = words / (time.perf_counter() - started)
    out["wc_update"] = min(timed(lambda: Counter(bulk)) for _ in range(3)) * 1e3
    rng = np.random.default_rng(2)
    a_keys, b_keys = rng.integers(0, b_rows, a_rows).tolist(), list(range(b_rows))

    def join_count_from_scratch():
        na, nb = Counter(a_keys), Counter(b_keys)
        return {k: c * nb[k] for k, c in na.items() if k in nb}
    out["join_load"] = (a_rows + b_rows) / timed(join_count_from_scratch)
    out["join_update"] = min(timed(join_count_from_scratch) for _ in range(3)) * 1e3
    all_edges = graph(nodes, edges)
    out["reach_first"] = timed(lambda: bfs_count(all_edges, nodes))
    out["reach_update"] = min(timed(lambda: bfs_count(all_edges, nodes)) for _ in range(3)) * 1e3
    return out


def timed(f) -> float:
    started = time.perf_counter()
    f()
    return time.perf_counter() - started


# -- Pathway ---------------------------------------------------------------------------------------

def pathway_python() -> str | None:
    candidates = [os.environ.get("SPARKTIMELY_PATHWAY_PYTHON"),
                  str(HERE.parent / ".pwvenv" / "bin" / "python")]
    return next((c for c in candidates if c and os.path.exists(c)), None)


def pathway(mode: str, quick: bool, pace: float = 0.0) -> dict | str:
    """Pathway's figures for ``mode`` (wordcount, join, reach, sliding; updates ``pace``
    seconds apart if given), or why there are none."""
    python = pathway_python()
    if python is None:
        return "missing (no .pwvenv: pip install 'pathway==0.33.*' in a separate venv)"
    command = [python, str(HERE / "pathway_incremental.py"), "--child", mode]
    try:
        run = subprocess.run(command + (["--quick"] if quick else [])
                             + (["--pace", str(pace)] if pace else []), capture_output=True,
                             text=True, timeout=600, env={**os.environ, "PATHWAY_THREADS": "1"})
    except subprocess.TimeoutExpired:
        return "failed: timed out"
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return "failed: " + (run.stderr.strip().splitlines() or ["no output"])[-1][:80]
    result = json.loads(lines[-1])
    return result if "error" not in result else f"failed: {result['error'][:80]}"


def taking_turns(peer: Callable[[], dict | str], *ours: Callable[[], dict],
                 turns: int = PEER_TURNS) -> tuple[dict | str, list[dict], list[list[float]]]:
    """Pathway's run (``peer``, its figures or why there are none) and each of ``ours``,
    one after the other, ``turns`` times: on a shared machine both engines then meet the same
    neighbours, where runs minutes apart would compare one moment's neighbours with
    another's. Returns the peer's runs pooled (or why there are none: then ours run once),
    each of ours pooled (:func:`pooled`), and for each of ours its median over the peer's
    median, turn by turn."""
    peers: list = []
    runs: list[list[dict]] = [[] for _ in ours]
    for _ in range(turns):
        peers.append(peer())
        for mine, run in zip(runs, ours):
            mine.append(run())
        if isinstance(peers[0], str):
            break
    measured = [p for p in peers if not isinstance(p, str)]
    ratios = [[r["median"] / p["update"]["median_ms"] for r, p in zip(mine, peers)
               if not isinstance(p, str)] for mine in runs]
    return (pooled_peer(measured) if measured else peers[0]), [pooled(mine) for mine in runs], \
        ratios


def pooled(runs: list[dict]) -> dict:
    """Figures of several runs of one of ours as one: the latencies together (median and p99
    over all of them), the best load and first fixed point."""
    latencies = [x for run in runs for x in run["latencies"]]
    out = dict(runs[0], latencies=latencies)
    if latencies:
        out.update(median=statistics.median(latencies), p99=quantile(latencies, 99))
    for key, best in (("load", max), ("first", min)):
        if key in out:
            out[key] = best(run[key] for run in runs)
    return out


def pooled_peer(results: list[dict]) -> dict:
    """Pathway's results of several runs as one, as :func:`pooled` (``bulk_s`` the fastest)."""
    latencies = [x for r in results for x in r.get("update", {}).get("latencies_ms", [])]
    out = dict(results[0], bulk_s=min(r["bulk_s"] for r in results))
    if latencies:
        out["update"] = {"median_ms": statistics.median(latencies),
                         "p99_ms": quantile(latencies, 99), "latencies_ms": latencies}
    return out


def turns_note(ratios: dict[str, list[float]]) -> str:
    """The note on the runs taken in turn with Pathway."""
    each = "; ".join(f"{name} {', '.join(f'{r:.2f}' for r in values)}"
                     for name, values in ratios.items() if values)
    return (f"against Pathway, each engine ran {PEER_TURNS} times, taking turns (Pathway, then "
            f"ours), and the figures pool the turns (latencies together, the best load); "
            f"ours over Pathway's median, turn by turn: {each or 'no Pathway run'}")


# -- the section -------------------------------------------------------------------------------------

def main(quick: bool = False, with_pathway: bool = True) -> list[Section]:
    scale = QUICK if quick else 1
    words, updates = WC_WORDS // scale, WC_UPDATES // scale
    a_rows, b_rows, j_updates = J_A // scale, J_B // scale, J_UPDATES // scale
    nodes, edges = G_NODES // scale, G_EDGES // scale
    knows, queries = KNOWS // scale, QUERIES // scale

    def peer(mode: str, pace: float = 0.0) -> Callable[[], dict | str]:
        return lambda: (pathway(mode, quick, pace) if with_pathway
                        else "not run (--no-pathway)")
    pw: dict = {}
    ratios: dict = {}
    pw["wordcount"], (wc1,), (ratios["word count"],) = taking_turns(
        peer("wordcount"), lambda: wordcount(words, updates, 1))
    pw["join"], (jc1, jc_records), (ratios["join + count"], ratios["the same on records"]) = \
        taking_turns(peer("join"), lambda: join_count(a_rows, b_rows, j_updates, 1),
                     lambda: join_count_records(a_rows, b_rows, j_updates))
    pw["wordcount paced"], (wc_paced,), (ratios["paced word count"],) = taking_turns(
        peer("wordcount", PACE), lambda: wordcount(words, updates, 1, pace=PACE))
    pw["join paced"], (jc_paced,), (ratios["paced join + count"],) = taking_turns(
        peer("join", PACE), lambda: join_count(a_rows, b_rows, j_updates, 1, pace=PACE))
    pw["reach"], (reach_pw, reach), (ratios["reachability, Pathway's insertions"], _) = \
        taking_turns(peer("reach"), lambda: reachability(nodes, edges, G_UPDATES, True),
                     lambda: reachability(nodes, edges, G_UPDATES))

    def pw_value(mode: str, f) -> float | str:
        result = pw[mode]
        if isinstance(result, str):
            return result
        try:
            return float(f(result))
        except (KeyError, TypeError, ZeroDivisionError):
            return "failed: no figure"

    py = python_recompute(words, a_rows, b_rows, nodes, edges)
    loads: dict = {("wc", 1, True): [wc1["load"]], ("jc", 1, True): [jc1["load"]]}
    for _ in range(LOAD_RUNS):             # 1 and 2 workers in turn: the machine is shared
        for warm in (True, False):
            for workers in (2, 1):
                loads.setdefault(("wc", workers, warm), []).append(
                    wordcount(words, 0, workers, warm)["load"])
                loads.setdefault(("jc", workers, warm), []).append(
                    join_count(a_rows, b_rows, 0, workers, warm)["load"])
    best = {run: max(rates) for run, rates in loads.items()}
    wc1["load"], jc1["load"] = best["wc", 1, True], best["jc", 1, True]
    shared = shared_arrangement(knows, queries)
    q_edges, q_rounds = Q_EDGES // scale, Q_ROUNDS // scale
    query_rounds = query_scaling(q_edges, q_rounds, Q_RUNS)
    pw_words = WC_WORDS // (10 if quick else 1)
    def paced_rows(name: str, size: str, figures: dict, mode: str) -> list[Row]:
        return [Row(f"{name} update, {q}, one every {PACE * 1e3:g} ms", size, "ms",
                    figures[q], {"Pathway 0.33": pw_value(mode, lambda r: r["update"][f"{q}_ms"])})
                for q in ("median", "p99")]
    rows = [
        Row("word count load (Arrow)", f"{words:,} words", "words/s", wc1["load"],
            {"Pathway 0.33": pw_value("wordcount", lambda r: pw_words / r["bulk_s"]),
             "Python Counter": py["wc_load"]}, goals=[Goal(">=", 2e6)]),
        Row("word count update, median", f"{WC_BATCH} words", "ms", wc1["median"],
            {"Pathway 0.33": pw_value("wordcount", lambda r: r["update"]["median_ms"]),
             "Counter from scratch": py["wc_update"]},
            goals=[Goal("<=", 1.0), Goal("<=", 0.5, "Pathway 0.33")]),
        Row("word count update, p99", f"{WC_BATCH} words", "ms", wc1["p99"],
            {"Pathway 0.33": pw_value("wordcount", lambda r: r["update"]["p99_ms"])},
            goals=[Goal("<=", 5.0), Goal("<=", 1.0, "Pathway 0.33")]),
        *paced_rows("word count", f"{WC_BATCH} words", wc_paced, "wordcount paced"),
        Row("join + count load (Arrow)", f"{a_rows:,} x {b_rows:,} rows", "rows/s", jc1["load"],
            {"Pathway 0.33": pw_value("join", lambda r: (J_A + J_B) / (10 if quick else 1)
                                      / r["bulk_s"]),
             "Python dict join": py["join_load"]}, goals=[Goal(">=", 1e6)]),
        Row("join + count update, median", "10 + 1 rows", "ms", jc1["median"],
            {"Pathway 0.33": pw_value("join", lambda r: r["update"]["median_ms"]),
             "recompute from scratch": py["join_update"]},
            goals=[Goal("<=", 1.0), Goal("<=", 0.75, "Pathway 0.33")]),
        Row("join + count update, p99", "10 + 1 rows", "ms", jc1["p99"],
            {"Pathway 0.33": pw_value("join", lambda r: r["update"]["p99_ms"])},
            goals=[Goal("<=", 5.0), Goal("<=", 0.75, "Pathway 0.33")]),
        *paced_rows("join + count", "10 + 1 rows", jc_paced, "join paced"),
        *[Row(f"join + count update, Python records, {q}", "10 + 1 records", "ms",
              jc_records[q], {"Pathway 0.33": pw_value("join", lambda r: r["update"][f"{q}_ms"])},
              goals=[Goal("<=", 0.75, "Pathway 0.33")]) for q in ("median", "p99")],
        Row("reachability, first fixed point", f"{nodes:,} nodes, {edges:,} edges", "s",
            min(reach["first"], reach_pw["first"]),
            {"Pathway 0.33": pw_value("reach", lambda r: r["bulk_s"])},
            {"BFS from scratch": py["reach_first"]}, goals=[Goal("<=", 2.0)]),
        Row("reachability, edge insert making nodes reachable (Pathway's), median", "1 edge",
            "ms", reach_pw["median"],
            {"Pathway 0.33": pw_value("reach", lambda r: r["update"]["median_ms"])},
            {"BFS from scratch": py["reach_update"]},
            goals=[Goal("<=", 0.75, "Pathway 0.33")]),
        Row("reachability, edge insert making nodes reachable (Pathway's), p99", "1 edge", "ms",
            reach_pw["p99"], {"Pathway 0.33": pw_value("reach", lambda r: r["update"]["p99_ms"])},
            goals=[Goal("<=", 1.0, "Pathway 0.33")]),
        Row("reachability, edge insert/delete, median", "1 edge", "ms", reach["median"],
            limits={"BFS from scratch": py["reach_update"]},
            goals=[Goal("<=", 2.0), Goal("<=", 0.01, "BFS from scratch")]),
        Row("reachability, edge insert/delete, p99", "1 edge", "ms", reach["p99"]),
        Row("2 workers / 1 worker, word count load", f"{words:,} words", "x",
            best["wc", 2, True] / best["wc", 1, True], goals=[Goal(">=", 1.5)]),
        Row("2 workers / 1 worker, join + count load", f"{a_rows:,} x {b_rows:,}", "x",
            best["jc", 2, True] / best["jc", 1, True], goals=[Goal(">=", 1.5)]),
        Row("query dataflow per round (dd_queries), median, 1 worker",
            f"{q_edges:,} edges, {q_rounds:,} rounds", "ms", query_rounds[1]),
        Row("query dataflow per round (dd_queries), median, 2 workers",
            f"{q_edges:,} edges, {q_rounds:,} rounds", "ms", query_rounds[2],
            limits={"1 worker": query_rounds[1]}, goals=[Goal("<=", 1.25, "1 worker")]),
        Row("word count load, first in new processes", f"{words:,} words", "words/s",
            best["wc", 1, False]),
        Row("join + count load, first in new processes", f"{a_rows:,} x {b_rows:,} rows",
            "rows/s", best["jc", 1, False]),
        Row("2 / 1 workers, word count load, first in new processes", f"{words:,} words", "x",
            best["wc", 2, False] / best["wc", 1, False]),
        Row("2 / 1 workers, join + count load, first in new processes",
            f"{a_rows:,} x {b_rows:,}", "x", best["jc", 2, False] / best["jc", 1, False]),
    ]
    notes = [f"loads: the best of {LOAD_RUNS + 1} runs at 1 worker and {LOAD_RUNS} at 2 "
             f"(taking turns), each after one untimed warm-up load in the same worker "
             f"processes; 'first in new processes': the best of {LOAD_RUNS} runs without it. "
             f"The Arrow path's modules are imported before the workers fork",
             f"query dataflow per round: examples/dd_queries.py's rounds (install a "
             f"dataflow importing the shared arrangement, answer 3 keys, drop it, while "
             f"knows changes), the median of {Q_RUNS} runs at each worker count taking "
             f"turns; a round's latency is its slowest worker's",
             f"reachability: {reach['reachable']:,} nodes reachable after the inserts and "
             f"deletes, {reach_pw['reachable']:,} after Pathway's insertions (each checked "
             f"against a BFS). Beside Pathway, both engines make the same insertions in the "
             f"same order (each from a reachable node to an unreachable one, the edges of "
             f"pathway_incremental.pick_insertions); Pathway's anchor measures no deletions, "
             f"so the insert/delete rows (random edges, each deleted again by the next "
             f"update: most change no answer but move nodes' distances) have no Pathway "
             f"figure",
             "Pathway: " + ("; ".join(f"{m}: {v}" for m, v in pw.items() if isinstance(v, str))
                            or "0.33 streaming, PATHWAY_THREADS=1, start-up excluded"),
             turns_note(ratios)]
    if "error" in shared:
        notes.append(f"shared arrangement: {shared['error']}")
    else:
        rows += [
            Row("shared arrangement: query install + answer, median", f"{knows:,} edges, {queries:,} queries",
                "ms", shared["median"], {"Pathway 0.33": "cannot share an arrangement"},
                goals=[Goal("<=", 5.0)]),
            Row("shared arrangement: query install + answer, p99", f"{knows:,} edges", "ms", shared["p99"]),
            Row("shared arrangement: memory growth over the queries", f"{queries:,} queries", "MB",
                shared["growth_mb"], limits={"5% of the arrangement": 0.05 * shared["arranged_mb"]},
                goals=[Goal("<=", 1.0, "5% of the arrangement")]),
        ]
        notes.append(f"shared arrangement: the arrangement added {shared['arranged_mb']:.0f} MB (RSS), "
                     f"loaded at {shared['load']:,.0f} edges/s (Python tuples); each query "
                     f"dataflow is dropped after its answer; memory growth: what tracemalloc "
                     f"sees still allocated after queries {queries // 10}..{queries} of a second, "
                     f"untimed pass")
    def pw_latencies(mode: str) -> list:
        result = pw[mode]
        return [] if isinstance(result, str) else result.get("update", {}).get("latencies_ms", [])
    histograms = [
        Histogram(f"word count update ({WC_BATCH} words)",
                  {"sparktimely": wc1["latencies"], "Pathway 0.33": pw_latencies("wordcount")}),
        Histogram("join + count update (10 + 1 rows)",
                  {"sparktimely": jc1["latencies"], "Pathway 0.33": pw_latencies("join")}),
        Histogram("join + count update (10 + 1 Python records)",
                  {"sparktimely": jc_records["latencies"], "Pathway 0.33": pw_latencies("join")}),
        Histogram(f"word count update ({WC_BATCH} words), one every {PACE * 1e3:g} ms",
                  {"sparktimely": wc_paced["latencies"],
                   "Pathway 0.33": pw_latencies("wordcount paced")}),
        Histogram(f"join + count update (10 + 1 rows), one every {PACE * 1e3:g} ms",
                  {"sparktimely": jc_paced["latencies"],
                   "Pathway 0.33": pw_latencies("join paced")}),
        Histogram("reachability edge insert making nodes reachable (Pathway's)",
                  {"sparktimely": reach_pw["latencies"], "Pathway 0.33": pw_latencies("reach")}),
        Histogram("reachability edge insert/delete", {"sparktimely": reach["latencies"]}),
    ]
    section = Section("Differential dataflow: incremental updates beside Pathway 0.33", rows,
                      notes, key="differential", histograms=histograms)
    return [section.print()]            # the sliding section runs with bench_windows


def sliding_section(quick: bool = False, with_pathway: bool = True) -> Section:
    """``active_between`` sliding count per key beside Pathway's ``windowby`` sliding window."""
    scale = QUICK if quick else 1
    events, window, updates = SL_EVENTS // scale, SL_WINDOW // scale, SL_UPDATES // scale
    result, (records, arrow), ratios = taking_turns(
        lambda: pathway("sliding", quick) if with_pathway else "not run (--no-pathway)",
        lambda: sliding_count(events, window, updates, False),
        lambda: sliding_count(events, window, updates, True))

    def pw_value(f) -> float | str:
        if isinstance(result, str):
            return result
        try:
            return float(f(result))
        except (KeyError, TypeError, ZeroDivisionError):
            return "failed: no figure"
    peer = "Pathway 0.33 windowby"
    pw_load = pw_value(lambda r: events / r["bulk_s"])
    pw_median = pw_value(lambda r: r["update"]["median_ms"])
    pw_p99 = pw_value(lambda r: r["update"]["p99_ms"])
    size = f"{events:,} events, {SL_KEYS:,} keys"
    rows = []
    histograms = []
    pw_latencies = [] if isinstance(result, str) else \
        result.get("update", {}).get("latencies_ms", [])
    for figures, label in ((records, "Python records"), (arrow, "Arrow rows")):
        histograms.append(Histogram(f"sliding count, single event ({label})",
                                    {"sparktimely": figures["latencies"], peer: pw_latencies}))
        rows += [
            Row(f"sliding count load ({label})", size, "events/s", figures["load"],
                {peer: pw_load}),
            Row(f"sliding count, single event, median ({label})", size, "ms",
                figures["median"], {peer: pw_median}, goals=[Goal("<=", 1.0, peer)]),
            Row(f"sliding count, single event, p99 ({label})", size, "ms", figures["p99"],
                {peer: pw_p99}),
        ]
    notes = [f"ours: active_between(t, t + {window:,}).count() per key, 1 worker, every "
             f"time unit a time of its own (each round also retracts the events whose window "
             f"ended); Pathway: windows of {window:,} every {window // 5:,} (each event in 5), "
             f"PATHWAY_THREADS=1, start-up excluded; final counts checked against a count from "
             f"scratch",
             "Pathway: " + (result if isinstance(result, str) else "0.33 streaming, same events"),
             turns_note({"records": ratios[0], "Arrow rows": ratios[1]})]
    return Section("Differential temporal filter: a sliding count beside Pathway's windowby",
                   rows, notes, key="differential-sliding", histograms=histograms).print()


if __name__ == "__main__":
    if "--sliding" in sys.argv:
        sliding_section(quick="--quick" in sys.argv, with_pathway="--no-pathway" not in sys.argv)
    else:
        main(quick="--quick" in sys.argv, with_pathway="--no-pathway" not in sys.argv)
