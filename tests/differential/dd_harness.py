"""Running differential programs at several worker counts, and the brute-force oracle.

A test describes its inputs as rounds: ``rounds[i][r]`` lists the ``(data, diff)`` updates of
input ``i`` at time ``r``. Every worker feeds its share of each round (update ``j`` goes to
worker ``j % peers``), the output updates of all workers are merged, and the output
accumulated to each time is compared with the oracle applied to the inputs accumulated to
that time (recomputed from scratch, in plain Python).

``run`` is how the job runs: the ``run`` fixture of tests/conftest.py (in-process workers in a
seeded interleaving, at 1, 2 and 3 workers) or :func:`processes` (``st.execute``).
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Any, Callable, Sequence

import pyarrow as pa

import sparktimely as st
import sparktimely.differential as dd
from sparktimely.progress.timestamp import less_equal


def accumulate(updates: Sequence[tuple], time: Any) -> dict:
    """``{data: multiplicity}`` of ``(data, time, diff)`` updates at times ``<= time``."""
    counts: Counter = Counter()
    for data, t, diff in updates:
        if not less_equal(t, time):
            continue
        counts[data] += diff
    return {data: n for data, n in counts.items() if n}


def accumulate_rounds(rounds: Sequence[Sequence[tuple]], through: int) -> dict:
    """``{data: multiplicity}`` of rounds ``0..through`` of one input."""
    counts: Counter = Counter()
    for updates in rounds[:through + 1]:
        for data, diff in updates:
            counts[data] += diff
    return {data: n for data, n in counts.items() if n}


def send_updates(session: dd.InputSession, input: int, updates: list) -> None:
    """How :func:`run_rounds` feeds a worker's share of a round: one ``update`` each."""
    for data, diff in updates:
        session.update(data, diff)


def captured_updates(time: Any, batch: list) -> list:
    """How :func:`run_rounds` reads a captured batch: it is a list of updates already."""
    return batch


def run_rounds(build: Callable[..., dd.Collection], inputs: Sequence[Sequence[Sequence[tuple]]],
               run: Callable, send: Callable = send_updates,
               output: Callable = captured_updates,
               between: Callable | None = None) -> list:
    """Run ``build(scope, *collections)`` fed by ``inputs`` (per input, per round, the
    ``(data, diff)`` updates; worker ``w`` sends those at positions ``j % peers == w`` with
    ``send(session, input index, updates)``) with ``run``; the output updates of all
    workers (``output(time, batch)`` of each captured batch). ``between(worker)``, if given,
    runs after each round is complete."""
    rounds = max(len(i) for i in inputs)

    def job(worker):
        sessions = [dd.InputSession() for _ in inputs]

        def dataflow(scope):
            output = build(scope, *[s.to_collection(scope) for s in sessions])
            return output.inner.capture(), output.probe()
        captured, probe = worker.dataflow(dataflow)
        for r in range(rounds):
            for i, (session, per_round) in enumerate(zip(sessions, inputs)):
                updates = per_round[r] if r < len(per_round) else []
                send(session, i, [u for j, u in enumerate(updates)
                                  if j % worker.peers == worker.index])
                session.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1))
            if between is not None:
                between(worker)
        for session in sessions:
            session.close()
        worker.step_while(lambda: not probe.done())
        return [u for time, batch in captured.extract() for u in output(time, batch)]
    return [u for part in run(job) for u in part]


def check_rounds(build: Callable[..., dd.Collection], oracle: Callable[..., dict],
                 inputs: Sequence[Sequence[Sequence[tuple]]], run: Callable) -> None:
    """Assert that ``build``'s output accumulated to every round equals ``oracle`` of the
    inputs accumulated to that round (``oracle`` takes one ``{data: count}`` per input)."""
    output = run_rounds(build, inputs, run)
    workers = getattr(run, "workers", "?")
    rounds = max(len(i) for i in inputs)
    for r in range(rounds):
        expected = oracle(*[accumulate_rounds(i, r) for i in inputs])
        expected = {k: v for k, v in expected.items() if v}
        got = accumulate(output, r)
        assert got == expected, f"round {r} on {workers} worker(s): got {got}, expected {expected}"
    assert all(t < rounds for _, t, _ in output), "an output update after the last round"


def run_product_times(build: Callable[..., dd.Collection],
                      inputs: Sequence[Sequence[tuple]], run: Callable) -> list:
    """Run ``build`` in a dataflow with ``Product`` times, each input given as
    ``(data, Product time, diff)`` updates (sent with ``update_at``); all output updates."""
    def job(worker):
        sessions = [dd.InputSession() for _ in inputs]

        def dataflow(scope):
            output = build(scope, *[s.to_collection(scope) for s in sessions])
            return output.inner.capture(), output.probe()
        captured, probe = worker.dataflow(dataflow, timestamp=st.Product)
        for session, updates in zip(sessions, inputs):
            for j, (data, time, diff) in enumerate(updates):
                if j % worker.peers == worker.index:
                    session.update_at(data, time, diff)
            session.close()
        worker.step_while(lambda: not probe.done())
        return [u for _, batch in captured.extract() for u in batch]
    return [u for part in run(job) for u in part]


def arrow_reachability(edges: dd.Collection, roots: dd.Collection) -> dd.Collection:
    """The nodes (Arrow rows ``node``) reachable from ``roots`` over ``edges`` (rows ``src``,
    ``dst``), by ``iterate``: each round joins the nodes reached with the edges from them."""
    def step(reach):
        sources = reach.map_batches(lambda b: b.rename_columns(["src", "diff"]))
        targets = sources.join(edges.enter(reach.scope), on="src").map_batches(
            lambda b: pa.RecordBatch.from_arrays([b.column("dst"), b.column("diff")],
                                                 ["node", "diff"]))
        return targets.concat(roots.enter(reach.scope)).distinct()
    return roots.iterate(step)


def processes(workers: int) -> Callable:
    """A ``run`` that starts ``workers`` worker processes (``st.execute``)."""
    def run(job):
        return st.execute(job, workers=workers)
    run.workers = workers
    return run


def join_pairs(a: dict, b: dict) -> dict:
    """Oracle of ``join``: ``{(key, (v1, v2)): n1 * n2}`` over ``{(key, v): n}`` inputs."""
    out: Counter = Counter()
    for (k1, v1), n1 in a.items():
        for (k2, v2), n2 in b.items():
            if k1 == k2:
                out[(k1, (v1, v2))] += n1 * n2
    return dict(out)


def arranged_input(worker, session: dd.InputSession, **arrange) -> tuple:
    """A dataflow arranging ``session``'s pairs by key: ``(trace, probe on its stream)``."""
    def build(scope):
        arranged = session.to_collection(scope).arrange_by_key(**arrange)
        return arranged.trace, arranged.stream.probe()
    return worker.dataflow(build)


def counts_and_distinct(c: dict) -> Counter:
    """Oracle of ``count()`` and ``distinct()`` tagged ``"count"`` and ``"distinct"``."""
    out: Counter = Counter()
    for x, n in c.items():
        out[("count", (x, n))] += 1
        if n > 0:
            out[("distinct", x)] += 1
    return out


def tagged_counts_and_distinct(c: dd.Collection) -> dd.Collection:
    """``count()`` and ``distinct()`` of ``c`` in one collection, tagged as the oracle is."""
    return c.count().map(lambda xn: ("count", xn)).concat(
        c.distinct().map(lambda x: ("distinct", x)))


# -- graph inputs and oracles ---------------------------------------------------------------

def toggled(rounds_of_edges: list) -> list:
    """Rounds of edges to toggle as rounds of (edge, +1 | -1): an edge is inserted if
    absent, deleted if present."""
    present, rounds = set(), []
    for edges in rounds_of_edges:
        updates = []
        for e in dict.fromkeys(edges):
            updates.append((e, -1 if e in present else 1))
            present ^= {e}
        rounds.append(updates)
    return rounds


def adjacency(edges: dict) -> dict:
    """``{node: [successor, ...]}`` of ``{(u, v): 1}`` edges (each present once)."""
    adj: dict = {}
    for (u, v), n in edges.items():
        assert n == 1
        adj.setdefault(u, []).append(v)
    return adj


def bfs(edges: dict, roots: list) -> dict:
    """``{node: distance}`` of the nodes reachable from ``roots`` over ``edges``."""
    adj, dist = adjacency(edges), {r: 0 for r in roots}
    queue = deque(roots)
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist
