"""(The project's Pathway anchor, shared/anchors/pw_incremental.py, kept here so that
benchmarks/bench_differential.py can run it as the peer of its section: the benchmark calls
``--child MODE`` in the Pathway virtual environment and reads the JSON it prints.)

Incremental-computation anchor: Pathway (Python API on a Rust differential-dataflow engine)
in streaming mode, against plain-Python recompute-from-scratch on the same data.

    python3 -m venv .pwvenv && .pwvenv/bin/pip install "pathway==0.33.*"
    .pwvenv/bin/python pw_incremental.py [--quick] [--only wordcount,join,reach,csv,sliding]

Pathway runs with its documented streaming API only: every input is a
``pw.io.python.ConnectorSubject`` read with ``pw.io.python.read`` (a ``csv`` row reads the bulk
with ``pw.io.csv.read(mode="streaming")`` instead), outputs go to ``pw.io.subscribe`` callbacks,
and the program is one ``pw.run()`` that stays up while the subject's ``run()`` (a thread that
Pathway starts) pushes the bulk, then the updates one batch at a time, each followed by
``commit()``. A batch's latency runs from just before its first ``next()`` to the
``on_time_end`` callback at which every output row the batch changes shows its new value
(checked against counts the driver keeps itself). Each workload runs in a fresh interpreter
(Pathway's graph is global); start-up (``import pathway``, building the graph, ``pw.run()``
until the first one-row commit is visible at the output) is reported apart and left out of
every throughput. Update latencies are taken after warm-up batches that are not counted.

Workloads:
 (i)   word count: 1M words over 10,007 keys, then 1,000 batches of 100 inserted words.
 (ii)  join + groupby: A (1M rows, key in 0..99,999) joined with B (100k rows, one per key) on
       key, count per key; then 1,000 updates of 10 A rows + 1 B row (a second B row for an
       existing key, so both join sides change).
 (iii) reachability from node 0 with ``pw.iterate`` (join + concat + distinct to a fixed point)
       on a random directed graph of 100k nodes and 500k edges, then 100 single-edge
       insertions, each from a reachable node to an unreachable one (so every insertion changes
       the output and its arrival can be seen).
 (iv)  sliding count: ``windowby(t, window=pw.temporal.sliding(hop=20k, duration=100k,
       origin=0), instance=key)`` counting events per key and window; 100k events over 1,000
       keys with times in the first window's span, then 1,000 single events, one per time unit
       after it (each changes its key's count in its 5 windows).
Baselines (same data, this process): recompute from scratch per update with collections.Counter
/ dicts / a deque BFS, timed on a sample of the updates; and the per-update cost of a plain
incremental dict update, for scale.

Prints one markdown table. Runs in about 3-6 minutes on the 2-core machine.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import tempfile
from collections import Counter, deque

QUICK = "--quick" in sys.argv
PACE = float(sys.argv[sys.argv.index("--pace") + 1]) if "--pace" in sys.argv else 0.0
"""``--pace SECONDS``: an update starts that long after the previous one started (0: as soon
as the previous one is answered)."""
SCALE = 10 if QUICK else 1
WC_WORDS, WC_KEYS, WC_UPDATES, WC_BATCH = 1_000_000 // SCALE, 10_007, 1_000 // SCALE, 100
J_A, J_B, J_UPDATES, J_A_PER, J_B_PER = 1_000_000 // SCALE, 100_000 // SCALE, 1_000 // SCALE, 10, 1
G_NODES, G_EDGES, G_UPDATES = 100_000 // SCALE, 500_000 // SCALE, 20 if QUICK else 100
WARMUP = 50 // SCALE or 5         # update batches pushed and not counted, (i) and (ii)
REACH_WARMUP = 5                   # insertions not counted, (iii)
CSV_COMMIT_MS = 100                # autocommit of the csv reader (python subjects commit explicitly)
WAIT = 120.0                       # seconds an output may take before the workload is failed
SL_EVENTS, SL_KEYS, SL_UPDATES = 100_000 // SCALE, 1_000, 1_000 // SCALE
SL_WINDOW, SL_HOP = 100_000 // SCALE, 20_000 // SCALE


def sliding_data(events, keys, window, updates):
    """Events ``(key, time)`` of the sliding count: ``events`` with times in ``[0, window)``
    (sorted), then ``updates`` events one per time unit from ``window`` on."""
    rng = random.Random(6)
    times = sorted(rng.randrange(window) for _ in range(events))
    bulk = [(rng.randrange(keys), t) for t in times]
    return bulk, [(rng.randrange(keys), window + i) for i in range(updates)]


def sliding_starts(t, duration, hop):
    """The starts of the sliding windows (origin 0) that hold time ``t``."""
    return range(max(0, (t - duration) // hop + 1) * hop, t // hop * hop + 1, hop)


def words_data():
    rng = random.Random(1)
    bulk = [f"w{i % WC_KEYS:05d}" for i in range(WC_WORDS)]
    updates = [[f"w{rng.randrange(WC_KEYS):05d}" for _ in range(WC_BATCH)]
               for _ in range(WARMUP + WC_UPDATES)]
    return bulk, updates


def join_data():
    rng = random.Random(2)
    a = [rng.randrange(J_B) for _ in range(J_A)]
    b = list(range(J_B))
    updates = [([rng.randrange(J_B) for _ in range(J_A_PER)], [rng.randrange(J_B) for _ in range(J_B_PER)])
               for _ in range(WARMUP + J_UPDATES)]
    return a, b, updates


def graph_data(nodes: int = G_NODES, count: int = G_EDGES):
    """The random graph's edges, and the generator that made them (the insertions are drawn
    from it next): the same for bench_differential's runs of sparktimely."""
    rng = random.Random(3)
    edges = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(count)]
    return edges, rng


def bfs(adj, n, source=0):
    seen = bytearray(n)
    seen[source] = 1
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if not seen[v]:
                seen[v] = 1
                queue.append(v)
    return seen


def pick_insertions(edges, rng, count, nodes: int = G_NODES):
    """count edges (u, v), u reachable and v not at the time of insertion, and the nodes each
    makes reachable; applied in order to a copy of the graph."""
    adj: list[list[int]] = [[] for _ in range(nodes)]
    for u, v in edges:
        adj[u].append(v)
    seen = bfs(adj, nodes)
    reach, unreach = [i for i in range(nodes) if seen[i]], [i for i in range(nodes) if not seen[i]]
    out = []
    for _ in range(count):
        unreach = [i for i in unreach if not seen[i]]
        if not unreach:
            break
        u, v = rng.choice(reach), rng.choice(unreach)
        adj[u].append(v)
        new, queue = [v], deque([v])
        seen[v] = 1
        while queue:
            x = queue.popleft()
            for y in adj[x]:
                if not seen[y]:
                    seen[y] = 1
                    new.append(y)
                    queue.append(y)
        reach += new
        out.append(((u, v), new))
    return out, int(sum(bfs([[v for v in a] for a in adj], nodes)))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# -- the Pathway side (one workload per interpreter) ------------------------------------------

class Output:
    """Keeps a subscribed table's current rows (key column -> value column, or a set of keys)
    and tells the driver when a condition holds at the end of a time."""

    def __init__(self, key, value=None):
        """``key``: a column name, or a tuple of names (then rows are keyed by tuples)."""
        self.key, self.value = key, value
        self.rows, self.total = {}, 0
        self.check, self.seen_at = None, None
        self.event = threading.Event()
        self.times = 0

    def on_change(self, key, row, time, is_addition):
        k = tuple(row[c] for c in self.key) if isinstance(self.key, tuple) else row[self.key]
        c = row[self.value] if self.value else 1
        if is_addition:
            self.rows[k] = c
            self.total += c
        else:
            if self.rows.get(k) == c:
                del self.rows[k]
            self.total -= c

    def on_time_end(self, time):
        self.times += 1
        check = self.check
        if check is not None and check():
            self.check = None
            self.seen_at = time_now()
            self.event.set()

    def expect(self, check):
        self.event.clear()
        self.seen_at = None
        self.check = check

    def wait(self, what):
        if not self.event.wait(WAIT):
            raise TimeoutError(f"{what}: output not seen within {WAIT:.0f} s")
        return self.seen_at


time_now = time.perf_counter


def run_workload(mode):
    t0 = time_now()
    import pathway as pw
    t_import = time_now() - t0
    res = {"mode": mode, "import_s": t_import, "threads": os.environ.get("PATHWAY_THREADS", "1"),
           "pathway": pw.__version__}
    t_build = time_now()

    class Word(pw.Schema):
        word: str

    class KeyRow(pw.Schema):
        key: int

    class Edge(pw.Schema):
        u: int
        v: int

    class Node(pw.Schema):
        node: int

    def startup(subject, out, first_row, check):
        """From pw.run() to the first committed row visible at the output."""
        out.expect(check)
        subject.next(**first_row)
        subject.commit()
        res["startup_s"] = out.wait("start-up") - t_run[0]

    def measure_updates(out, batches, push, expectation, label, warmup=WARMUP):
        lat = []
        for i, batch in enumerate(batches):
            out.expect(expectation(batch))
            t = time_now()
            push(batch)
            lat.append(out.wait(f"{label} {i}") - t)
            if PACE:
                time.sleep(max(0.0, t + PACE - time_now()))
        lat = lat[warmup:]
        res[label] = {"n": len(lat), "median_ms": statistics.median(lat) * 1e3,
                      "p99_ms": pct(lat, 99) * 1e3, "mean_ms": statistics.mean(lat) * 1e3,
                      "max_ms": max(lat) * 1e3,
                      "latencies_ms": [round(x * 1e3, 4) for x in lat]}

    if mode in ("wordcount", "csv"):
        bulk, updates = words_data()
        t_build = time_now()
        expected: Counter[str] = Counter()
        out = Output("word", "count")

        class Words(pw.io.python.ConnectorSubject):
            def run(self):
                try:
                    startup(self, out, {"word": "__warmup__"}, lambda: out.rows.get("__warmup__") == 1)
                    expected["__warmup__"] = 1
                    if mode == "wordcount":
                        total = len(bulk) + 1
                        out.expect(lambda: out.total == total and len(out.rows) == WC_KEYS + 1)
                        t = time_now()
                        for w in bulk:
                            self.next(word=w)
                        t_pushed = time_now()
                        self.commit()
                        done = out.wait("bulk load")
                        res["bulk_push_s"], res["bulk_s"] = t_pushed - t, done - t
                    else:       # the bulk comes from the csv reader: publish the file now
                        total = len(bulk) + 1
                        out.expect(lambda: out.total == total and len(out.rows) == WC_KEYS + 1)
                        t = time_now()
                        os.rename(os.path.join(CSV_DIR + "_staging", "words.csv"),
                                  os.path.join(CSV_DIR, "words.csv"))
                        done = out.wait("csv bulk load")
                        res["bulk_s"] = done - t
                    expected.update(bulk)

                    def expectation(batch):
                        expected.update(batch)
                        want = {w: expected[w] for w in set(batch)}
                        return lambda: all(out.rows.get(w) == c for w, c in want.items())

                    def push(batch):
                        for w in batch:
                            self.next(word=w)
                        self.commit()
                    measure_updates(out, updates, push, expectation, "update")
                except BaseException as e:      # report, then close the source
                    res["error"] = f"{type(e).__name__}: {e}"
                if mode == "csv":   # a streaming file reader never ends, nor does pw.run()
                    finish("csv")

        words = pw.io.python.read(Words(), schema=Word)
        if mode == "csv":
            # the file is written aside and renamed into the watched (empty) directory after
            # start-up, so the bulk is timed from its appearance
            os.makedirs(CSV_DIR, exist_ok=True)
            os.makedirs(CSV_DIR + "_staging", exist_ok=True)
            t_write = time_now()
            with open(os.path.join(CSV_DIR + "_staging", "words.csv"), "w") as f:
                f.write("word\n" + "\n".join(bulk) + "\n")
            t_build += time_now() - t_write
            bulk_table = pw.io.csv.read(CSV_DIR, schema=Word, mode="streaming",
                                        autocommit_duration_ms=CSV_COMMIT_MS)
            words = pw.Table.concat_reindex(bulk_table, words)
        counts = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
        pw.io.subscribe(counts, on_change=out.on_change, on_time_end=out.on_time_end)

    elif mode == "join":
        a_bulk, b_bulk, updates = join_data()
        t_build = time_now()
        n_a: Counter[int] = Counter()
        n_b: Counter[int] = Counter()
        out = Output("key", "count")
        b_queue = __import__("queue").Queue()

        class SideB(pw.io.python.ConnectorSubject):
            def run(self):
                while True:
                    rows = b_queue.get()
                    if rows is None:
                        return
                    for k in rows:
                        self.next(key=k)
                    self.commit()

        class SideA(pw.io.python.ConnectorSubject):
            def run(self):
                try:
                    # start-up: one B row for key -1 and one A row for it
                    b_queue.put([-1])
                    startup(self, out, {"key": -1}, lambda: out.rows.get(-1) == 1)
                    n_a.update(a_bulk)
                    n_b.update(b_bulk)
                    keys = sum(1 for k in n_a if n_b[k]) + 1
                    total = sum(c * n_b[k] for k, c in n_a.items()) + 1
                    out.expect(lambda: out.total == total and len(out.rows) == keys)
                    t = time_now()
                    b_queue.put(b_bulk)
                    for k in a_bulk:
                        self.next(key=k)
                    t_pushed = time_now()
                    self.commit()
                    done = out.wait("bulk load")
                    res["bulk_push_s"], res["bulk_s"] = t_pushed - t, done - t

                    def expectation(batch):
                        a_keys, b_keys = batch
                        n_a.update(a_keys)
                        n_b.update(b_keys)
                        want = {k: n_a[k] * n_b[k] for k in set(a_keys) | set(b_keys)}
                        return lambda: all(out.rows.get(k, 0) == c for k, c in want.items())

                    def push(batch):
                        b_queue.put(batch[1])
                        for k in batch[0]:
                            self.next(key=k)
                        self.commit()
                    measure_updates(out, updates, push, expectation, "update")
                except BaseException as e:
                    res["error"] = f"{type(e).__name__}: {e}"
                finally:
                    b_queue.put(None)

        a = pw.io.python.read(SideA(), schema=KeyRow)
        b = pw.io.python.read(SideB(), schema=KeyRow)
        joined = a.join(b, a.key == b.key).select(key=a.key)
        counts = joined.groupby(pw.this.key).reduce(pw.this.key, count=pw.reducers.count())
        pw.io.subscribe(counts, on_change=out.on_change, on_time_end=out.on_time_end)

    elif mode == "reach":
        edges_bulk, rng = graph_data()
        inserts, final_reach = pick_insertions(edges_bulk, rng, REACH_WARMUP + G_UPDATES)
        adj: list[list[int]] = [[] for _ in range(G_NODES)]
        for u, v in edges_bulk:
            adj[u].append(v)
        bulk_reach = int(sum(bfs(adj, G_NODES)))
        out = Output("node")
        res["reachable_before"], res["reachable_after"] = bulk_reach, final_reach
        res["new_per_insert"] = statistics.mean(len(n) for _, n in inserts) if inserts else 0
        t_build = time_now()

        class Edges(pw.io.python.ConnectorSubject):
            def run(self):
                try:
                    # start-up: the edge 0 -> -1 makes node -1 reachable
                    startup(self, out, {"u": 0, "v": -1}, lambda: -1 in out.rows)
                    out.expect(lambda: len(out.rows) == bulk_reach + 1)
                    t = time_now()
                    for u, v in edges_bulk:
                        self.next(u=u, v=v)
                    t_pushed = time_now()
                    self.commit()
                    done = out.wait("bulk load")
                    res["bulk_push_s"], res["bulk_s"] = t_pushed - t, done - t

                    def expectation(batch):
                        _, new = batch
                        return lambda: all(n in out.rows for n in new)

                    def push(batch):
                        (u, v), _ = batch
                        self.next(u=u, v=v)
                        self.commit()
                    measure_updates(out, inserts, push, expectation, "update", REACH_WARMUP)
                except BaseException as e:
                    res["error"] = f"{type(e).__name__}: {e}"

        edges = pw.io.python.read(Edges(), schema=Edge)
        roots = pw.debug.table_from_rows(Node, [(0,)])

        def step(reach, edges):
            nxt = reach.join(edges, reach.node == edges.u).select(node=edges.v)
            both = pw.Table.concat_reindex(reach, nxt)
            return dict(reach=both.groupby(both.node).reduce(both.node))

        reach = pw.iterate(step, reach=pw.iterate_universe(roots), edges=edges)["reach"]
        pw.io.subscribe(reach, on_change=out.on_change, on_time_end=out.on_time_end)

    elif mode == "sliding":
        bulk, updates = sliding_data(SL_EVENTS, SL_KEYS, SL_WINDOW, WARMUP + SL_UPDATES)
        t_build = time_now()
        out = Output(("key", "start"), "count")
        expected_windows: Counter[tuple[int, int]] = Counter()

        class Event(pw.Schema):
            key: int
            t: int

        def add(key, t):
            for start in sliding_starts(t, SL_WINDOW, SL_HOP):
                expected_windows[(key, start)] += 1

        class Events(pw.io.python.ConnectorSubject):
            def run(self):
                try:
                    # start-up: one event of key -1 at time 0
                    startup(self, out, {"key": -1, "t": 0}, lambda: out.rows.get((-1, 0)) == 1)
                    add(-1, 0)
                    for key, t in bulk:
                        add(key, t)
                    want, windows = sum(expected_windows.values()), len(expected_windows)
                    out.expect(lambda: out.total == want and len(out.rows) == windows)
                    t = time_now()
                    for key, at in bulk:
                        self.next(key=key, t=at)
                    t_pushed = time_now()
                    self.commit()
                    done = out.wait("bulk load")
                    res["bulk_push_s"], res["bulk_s"] = t_pushed - t, done - t

                    def expectation(event):
                        add(*event)
                        want = {(event[0], s): expected_windows[(event[0], s)]
                                for s in sliding_starts(event[1], SL_WINDOW, SL_HOP)}
                        return lambda: all(out.rows.get(w) == c for w, c in want.items())

                    def push(event):
                        self.next(key=event[0], t=event[1])
                        self.commit()
                    measure_updates(out, updates, push, expectation, "update")
                except BaseException as e:
                    res["error"] = f"{type(e).__name__}: {e}"

        events = pw.io.python.read(Events(), schema=Event)
        counts = events.windowby(
            events.t, window=pw.temporal.sliding(hop=SL_HOP, duration=SL_WINDOW, origin=0),
            instance=events.key,
        ).reduce(key=pw.this._pw_instance, start=pw.this._pw_window_start,
                 count=pw.reducers.count())
        pw.io.subscribe(counts, on_change=out.on_change, on_time_end=out.on_time_end)

    def finish(mode):
        import shutil
        shutil.rmtree(CSV_DIR, ignore_errors=True)
        shutil.rmtree(CSV_DIR + "_staging", ignore_errors=True)
        print(json.dumps(res), flush=True)
        sys.stderr.flush()
        os._exit(0)

    res["build_s"] = time_now() - t_build
    t_run = [time_now()]
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    res["run_s"] = time_now() - t_run[0]
    print(json.dumps(res), flush=True)


CSV_DIR = os.path.join(tempfile.gettempdir(), f"pw_incremental_csv_{os.getpid()}")


# -- plain Python baselines -------------------------------------------------------------------

def baselines():
    b: dict[str, float | list[float]] = {}
    bulk, updates = words_data()
    t = time_now(); c = Counter(bulk); b["wc_bulk_s"] = time_now() - t
    words = list(bulk)
    rec, inc = [], []
    for i, batch in enumerate(updates[:WARMUP + 20]):
        words += batch
        t = time_now(); Counter(words); dt = time_now() - t
        t = time_now(); c.update(batch); di = time_now() - t
        if i >= WARMUP:
            rec.append(dt)
            inc.append(di)
    b["wc_recompute"], b["wc_incremental"] = rec, inc

    a_bulk, b_bulk, updates = join_data()

    def join_count(a, bb):          # count per key of A join B = n_A(k) * n_B(k), Counter in C
        na, nb = Counter(a), Counter(bb)
        return {k: c * nb[k] for k, c in na.items() if k in nb}
    t = time_now(); join_count(a_bulk, b_bulk); b["join_bulk_s"] = time_now() - t
    a, bb = list(a_bulk), list(b_bulk)
    rec = []
    for batch in updates[:10]:
        a += batch[0]
        bb += batch[1]
        t = time_now(); join_count(a, bb); rec.append(time_now() - t)
    b["join_recompute"] = rec
    na, nb, inc = Counter(a), Counter(bb), []
    for ak, bk in updates[10:10 + 200]:
        t = time_now()
        for k in ak:
            na[k] += 1
        for k in bk:
            nb[k] += 1
        {k: na[k] * nb[k] for k in set(ak) | set(bk)}
        inc.append(time_now() - t)
    b["join_incremental"] = inc

    edges, rng = graph_data()
    t = time_now()
    adj: list[list[int]] = [[] for _ in range(G_NODES)]
    for u, v in edges:
        adj[u].append(v)
    bfs(adj, G_NODES)
    b["reach_bulk_s"] = time_now() - t
    inserts, _ = pick_insertions(edges, rng, 10)
    rec = []
    for (u, v), _ in inserts:
        adj[u].append(v)
        t = time_now(); bfs(adj, G_NODES); rec.append(time_now() - t)
    b["reach_recompute"] = rec

    bulk, updates = sliding_data(SL_EVENTS, SL_KEYS, SL_WINDOW, 3)

    def window_counts(events):
        return Counter((k, s) for k, t in events for s in sliding_starts(t, SL_WINDOW, SL_HOP))
    rec = []
    for event in updates:
        bulk.append(event)
        t = time_now(); window_counts(bulk); rec.append(time_now() - t)
    b["sliding_recompute"] = rec
    return b


# -- driver -----------------------------------------------------------------------------------

def child_run(mode, log):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode] + (["--quick"] if QUICK else [])
    t = time_now()
    with open(log, "w") as err:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=420)
        except subprocess.TimeoutExpired:
            return {"mode": mode, "error": "timed out after 420 s"}, time_now() - t
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode or not lines:
        tail = open(log).read().strip().splitlines()[-3:]
        return {"mode": mode, "error": f"exit {p.returncode}: {' | '.join(tail)[-300:]}"}, time_now() - t
    return json.loads(lines[-1]), time_now() - t


def fmt(x, unit=""):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if x >= 100:
        s = f"{x:,.0f}"
    elif x >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.3g}"
    return s + unit


def main():
    only = None
    if "--only" in sys.argv:
        only = sys.argv[sys.argv.index("--only") + 1].split(",")
    modes = [m for m in ("wordcount", "csv", "join", "reach", "sliding")
             if only is None or m in only]
    started = time_now()
    results: dict[str, dict] = {}
    for mode in modes:
        log = os.path.join(tempfile.gettempdir(), f"pw_incremental_{mode}.log")
        r, wall = child_run(mode, log)
        r["wall_s"] = wall
        results[mode] = r
        print(f"# {mode}: {wall:.1f} s wall; {json.dumps(r)[:600]}", file=sys.stderr, flush=True)
    t = time_now()
    base = baselines()
    print(f"# baselines: {time_now() - t:.1f} s", file=sys.stderr)

    ms = lambda xs: statistics.median(xs) * 1e3
    p99 = lambda xs: pct(xs, 99) * 1e3
    rows = []

    def upd(r):
        u = r.get("update")
        return (u["median_ms"], u["p99_ms"]) if u else (None, None)

    def speedup(pathway_time, python_time):
        """Python time / Pathway time: above 1, Pathway is faster."""
        ok = all(isinstance(x, (int, float)) and x > 0 for x in (pathway_time, python_time))
        return f"{python_time / pathway_time:.3g}x" if ok else "-"

    any_r = next((r for r in results.values() if "import_s" in r), {})
    rows.append(("start-up", "`import pathway`", fmt(any_r.get("import_s"), " s"), "-", "-"))
    for mode, r in results.items():
        if "error" in r and "startup_s" not in r:
            rows.append((mode, "FAILED", r["error"], "-", "-"))
            continue
        rows.append((mode, "start-up: graph build + `pw.run()` to first committed row seen",
                     fmt(r.get("build_s", 0) + r.get("startup_s", 0), " s"), "-", "-"))
        if "error" in r:
            rows.append((mode, "FAILED after start-up", r["error"], "-", "-"))
    if "wordcount" in results and "bulk_s" in results["wordcount"]:
        r = results["wordcount"]
        pw_rate = WC_WORDS / r["bulk_s"]
        py_rate = WC_WORDS / base["wc_bulk_s"]
        rows.append(("(i) word count", f"bulk load {WC_WORDS:,} words ({WC_KEYS:,} keys), words/s "
                     "(ConnectorSubject.next per word, then commit)",
                     fmt(pw_rate), fmt(py_rate) + " (Counter)", speedup(1 / pw_rate, 1 / py_rate)))
        rows.append(("(i) word count", "  of which pushing through next(), words/s",
                     fmt(WC_WORDS / r["bulk_push_s"]), "-", "-"))
    if "csv" in results and "bulk_s" in results["csv"]:
        r = results["csv"]
        pw_rate = WC_WORDS / r["bulk_s"]
        py_rate = WC_WORDS / base["wc_bulk_s"]
        rows.append(("(i) word count", "bulk load from a csv file, pw.io.csv.read(mode='streaming'), words/s",
                     fmt(pw_rate), fmt(py_rate) + " (Counter)", speedup(1 / pw_rate, 1 / py_rate)))
    for mode, label in (("wordcount", "(i) word count"), ("csv", "(i) word count, csv bulk")):
        if mode in results and "update" in results[mode]:
            m, p = upd(results[mode])
            rows.append((label, f"update of {WC_BATCH} words: push to changed counts seen, median ms",
                         fmt(m), fmt(ms(base["wc_recompute"])) + " (Counter from scratch)",
                         speedup(m, ms(base["wc_recompute"]))))
            rows.append((label, "  same, p99 ms", fmt(p), fmt(p99(base["wc_recompute"])),
                         speedup(p, p99(base["wc_recompute"]))))
    if "wordcount" in results:
        rows.append(("(i) word count", "  plain incremental Counter.update(batch), median ms", "-",
                     fmt(ms(base["wc_incremental"])), "-"))
    if "join" in results and "bulk_s" in results["join"]:
        r = results["join"]
        n = J_A + J_B
        pw_rate, py_rate = n / r["bulk_s"], n / base["join_bulk_s"]
        rows.append(("(ii) join + groupby", f"bulk load {J_A:,} + {J_B:,} rows, joined on key, count per key, rows/s",
                     fmt(pw_rate), fmt(py_rate) + " (dict join)", speedup(1 / pw_rate, 1 / py_rate)))
        rows.append(("(ii) join + groupby", "  of which pushing through next(), rows/s",
                     fmt(n / r["bulk_push_s"]), "-", "-"))
        if "update" in r:
            m, p = upd(r)
            rows.append(("(ii) join + groupby", f"update of {J_A_PER} A rows + {J_B_PER} B row, median ms",
                         fmt(m), fmt(ms(base["join_recompute"])) + " (recompute)", speedup(m, ms(base["join_recompute"]))))
            rows.append(("(ii) join + groupby", "  same, p99 ms", fmt(p), fmt(p99(base["join_recompute"])),
                         speedup(p, p99(base["join_recompute"]))))
        rows.append(("(ii) join + groupby", "  plain incremental dict update, median ms", "-",
                     fmt(ms(base["join_incremental"])), "-"))
    if "reach" in results and "bulk_s" in results["reach"]:
        r = results["reach"]
        rows.append(("(iii) reachability, pw.iterate",
                     f"bulk: {G_NODES:,} nodes, {G_EDGES:,} edges to fixed point "
                     f"({r['reachable_before']:,} reachable), s",
                     fmt(r["bulk_s"]), fmt(base["reach_bulk_s"]) + " (BFS)", speedup(r["bulk_s"], base["reach_bulk_s"])))
        rows.append(("(iii) reachability, pw.iterate", "  of which pushing edges through next(), s",
                     fmt(r["bulk_push_s"]), "-", "-"))
        if "update" in r:
            m, p = upd(r)
            rows.append(("(iii) reachability, pw.iterate",
                         f"single-edge insertion (reachable -> unreachable, {r['new_per_insert']:.2g} "
                         "new nodes each), median ms",
                         fmt(m), fmt(ms(base["reach_recompute"])) + " (BFS from scratch)",
                         speedup(m, ms(base["reach_recompute"]))))
            rows.append(("(iii) reachability, pw.iterate", "  same, p99 ms", fmt(p),
                         fmt(p99(base["reach_recompute"])), speedup(p, p99(base["reach_recompute"]))))

    if "sliding" in results and "bulk_s" in results["sliding"]:
        r = results["sliding"]
        label = "(iv) sliding count, windowby"
        rows.append((label, f"bulk load {SL_EVENTS:,} events ({SL_KEYS:,} keys, windows of "
                     f"{SL_WINDOW:,} every {SL_HOP:,}), events/s", fmt(SL_EVENTS / r["bulk_s"]),
                     "-", "-"))
        if "update" in r:
            m, p = upd(r)
            rows.append((label, "single event, median ms", fmt(m),
                         fmt(ms(base["sliding_recompute"])) + " (Counter from scratch)",
                         speedup(m, ms(base["sliding_recompute"]))))
            rows.append((label, "  same, p99 ms", fmt(p), fmt(p99(base["sliding_recompute"])),
                         speedup(p, p99(base["sliding_recompute"]))))

    threads = any_r.get("threads", "?")
    print(f"\nPathway {any_r.get('pathway', '?')} streaming (PATHWAY_THREADS={threads}) vs plain "
          f"Python recompute; {os.cpu_count()} cores; {'QUICK (1/10 sizes); ' if QUICK else ''}"
          f"total {time_now() - started:.0f} s")
    print("| workload | figure | Pathway | plain Python | Python time ÷ Pathway time |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nlatency samples: (i)/(ii) {WC_UPDATES:,} batches after {WARMUP} warm-up; (iii) "
          f"{G_UPDATES} insertions after {REACH_WARMUP} warm-up. Python recompute: median/p99 over "
          f"{len(base['wc_recompute'])}, {len(base['join_recompute'])}, {len(base['reach_recompute'])} "
          "updates (a full recompute per update would take minutes).")
    for mode, r in results.items():
        if "update" in r:
            u = r["update"]
            print(f"- {mode}: update latency n={u['n']} median {u['median_ms']:.3g} ms, p99 "
                  f"{u['p99_ms']:.3g} ms, mean {u['mean_ms']:.3g} ms, max {u['max_ms']:.3g} ms; "
                  f"child wall {r['wall_s']:.0f} s")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    if "--child" in sys.argv:
        run_workload(sys.argv[sys.argv.index("--child") + 1])
    else:
        sys.exit(main())
