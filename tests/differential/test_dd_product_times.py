"""Operators on partially ordered times: a dataflow whose times are ``Product(a, b)``.

Updates come at arbitrary points of a 3x3 grid of times; the output accumulated to each grid
time must equal the operator applied to the inputs accumulated to that time (everything at
times component-wise ``<=``). This exercises join's ``t1.join(t2)`` output times and reduce's
interesting times (an output may change at ``(1, 1)`` with inputs only at ``(0, 1)`` and
``(1, 0)``)."""
import random
from collections import Counter

import networkx as nx
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from dd_harness import (accumulate, arrow_reachability, counts_and_distinct, join_pairs,
                        run_product_times, tagged_counts_and_distinct)
import sparktimely as st
import sparktimely.differential as dd
from sparktimely import Product

SETTINGS = settings(max_examples=15, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
GRID = [Product(a, b) for a in range(3) for b in range(3)]
times = hs.sampled_from(GRID)
diffs = hs.sampled_from([1, 1, -1])


def updates_of(data):
    return hs.lists(hs.tuples(data, times, diffs), max_size=10)


def check(build, oracle, inputs, run):
    output = run_product_times(build, inputs, run)
    for time in GRID:
        expected = {k: v for k, v in oracle(*[accumulate(i, time) for i in inputs]).items() if v}
        got = accumulate(output, time)
        assert got == expected, f"at {time} on {run.workers} worker(s): got {got}, expected {expected}"


@pytest.mark.timeout(120)
@SETTINGS
@given(left=updates_of(hs.tuples(hs.integers(0, 2), hs.sampled_from("xy"))),
       right=updates_of(hs.tuples(hs.integers(0, 2), hs.sampled_from("uv"))))
def test_join_at_product_times(run, left, right):
    check(lambda scope, a, b: a.join(b), join_pairs, [left, right], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=updates_of(hs.integers(0, 3)))
def test_count_and_distinct_at_product_times(run, data):
    check(lambda scope, c: tagged_counts_and_distinct(c), counts_and_distinct, [data], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=updates_of(hs.tuples(hs.integers(0, 2), hs.integers(0, 3))))
def test_reduce_at_product_times(run, data):
    def smallest(key, values, output):
        output.append((values[0][0], 1))

    def oracle(c):
        best: dict = {}
        for (k, v), n in c.items():
            if n > 0:
                best[k] = min(best.get(k, v), v)
        return Counter({(k, v): 1 for k, v in best.items()})
    check(lambda scope, c: c.reduce(smallest), oracle, [data], run)


def test_reduce_output_at_a_join_of_input_times(run):
    """Inputs only at (0, 1) and (1, 0); the count is 2 only from (1, 1) on, so the
    operator must emit there although no input has that time."""
    data = [("a", Product(0, 1), 1), ("a", Product(1, 0), 1)]
    output = run_product_times(lambda scope, c: c.count(), [data], run)
    assert sorted(output) == [(("a", 1), Product(0, 1), 1), (("a", 1), Product(1, 0), 1),
                              (("a", 1), Product(1, 1), -2), (("a", 2), Product(1, 1), 1)]


def arrow_updates(seed: int, workers: int) -> list:
    """Per worker, per round, the ``((k, v), diff)`` rows it sends as one Arrow batch."""
    rng = random.Random(seed)
    return [[[((rng.randint(0, 3), rng.randint(0, 2)), rng.choice([1, 1, 2, -1]))
              for _ in range(rng.randint(0, 6))] for _ in range(ARROW_ROUNDS)]
            for _ in range(workers)]


def arrow_time(round: int, worker: int) -> Product:
    """Worker ``worker``'s time in ``round``: the workers' times are not all comparable."""
    return Product(round, round * worker)


def key_counts(rows: dict) -> dict:
    """Oracle of ``count(key="k")``: ``{(k, its rows' total multiplicity): 1}``."""
    totals: Counter = Counter()
    for (k, _), n in rows.items():
        totals[k] += n
    return {(k, n): 1 for k, n in totals.items() if n}


ARROW_ROUNDS = 3
ARROW_OPERATORS = {
    "consolidate": (lambda a, b: a.consolidate(), lambda a, b: a),
    "count": (lambda a, b: a.count(key="k"), lambda a, b: key_counts(a)),
    "distinct": (lambda a, b: a.distinct(), lambda a, b: {x: 1 for x, n in a.items() if n > 0}),
    "join": (lambda a, b: a.join(b, on="k"),
             lambda a, b: {(k, v, w): n * m for (k, v), n in a.items()
                           for (j, w), m in b.items() if k == j}),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("operator", ARROW_OPERATORS)
def test_arrow_collections_in_a_dataflow_of_product_times(run, operator):
    """Arrow arrangements, joins and reductions at a dataflow's own ``Product`` times (not
    only inside an iterative scope): each worker's input moves along its own chain of
    times, and the output accumulated to every time of the grid is the oracle's."""
    build, oracle = ARROW_OPERATORS[operator]
    left, right = arrow_updates(1, run.workers), arrow_updates(2, run.workers)

    def batch(rows):
        return pa.record_batch({"k": pa.array([k for (k, _), _ in rows], pa.int64()),
                                "v": pa.array([v for (_, v), _ in rows], pa.int64()),
                                "diff": pa.array([d for _, d in rows], pa.int64())})

    def job(worker):
        sessions = dd.InputSession(), dd.InputSession()

        def dataflow(scope):
            a, b = (s.to_collection(scope) for s in sessions)
            return build(a, b).inner.capture()
        captured = worker.dataflow(dataflow, timestamp=st.Product)
        for r in range(ARROW_ROUNDS):
            for session, rounds in zip(sessions, (left, right)):
                session.advance_to(arrow_time(r, worker.index))
                session.update_batch(batch(rounds[worker.index][r]))
        for session in sessions:
            session.close()
        worker.run()
        return [(tuple(row[c] for c in table.column_names if c != "diff"), time, row["diff"])
                for time, table in captured.extract() for row in table.to_pylist()]
    output = [u for part in run(job) for u in part]
    inputs = [[(data, arrow_time(r, w), diff) for w, rounds in enumerate(side)
               for r, rows in enumerate(rounds) for data, diff in rows]
              for side in (left, right)]
    for time in [Product(a, b) for a in range(ARROW_ROUNDS) for b in range(2 * ARROW_ROUNDS)]:
        expected = {k: v for k, v in oracle(*[accumulate(i, time) for i in inputs]).items()
                    if v}
        assert accumulate(output, time) == expected, f"at {time}, {run.workers} worker(s)"


@pytest.mark.timeout(120)
def test_arrow_reachability_iterates_inside_a_dataflow_of_product_times(run):
    """``iterate`` over Arrow batches in a dataflow of ``Product`` root times: times of three
    coordinates, ``Product(Product(a, b), round)``. Each worker adds its share of the edges
    at ``Product(0, worker)``, worker 0 removes one at ``Product(1, 0)``; the reachable
    nodes at every time of a grid are networkx's."""
    rng = random.Random(3)
    edges = [(rng.randrange(30), rng.randrange(30)) for _ in range(60)]

    def rows(pairs, diff):
        return pa.record_batch({"src": pa.array([a for a, _ in pairs], pa.int64()),
                                "dst": pa.array([b for _, b in pairs], pa.int64()),
                                "diff": pa.array([diff] * len(pairs), pa.int64())})

    def job(worker):
        edge_input, roots_input = dd.InputSession(), dd.InputSession()

        captured = worker.dataflow(
            lambda scope: arrow_reachability(edge_input.to_collection(scope),
                                             roots_input.to_collection(scope)).inner.capture(),
            timestamp=st.Product)
        edge_input.advance_to(Product(0, worker.index))
        edge_input.update_batch(rows(edges[worker.index::worker.peers], 1))
        if worker.index == 0:
            roots_input.update_batch(pa.record_batch({"node": pa.array([0], pa.int64()),
                                                      "diff": pa.array([1], pa.int64())}))
        edge_input.advance_to(Product(1, worker.index))
        if worker.index == 0:
            edge_input.update_batch(rows(edges[:1], -1))
        edge_input.close()
        roots_input.close()
        worker.run()
        return [((row["node"],), time, row["diff"])
                for time, table in captured.extract() for row in table.to_pylist()]
    output = [u for part in run(job) for u in part]
    for time in [Product(a, b) for a in range(3) for b in range(4)]:
        present = [e for i, e in enumerate(edges) if Product(0, i % run.workers).less_equal(time)]
        if Product(1, 0).less_equal(time):
            present.remove(edges[0])
        graph = nx.DiGraph(present)
        graph.add_node(0)
        expected = {(n,): 1 for n in nx.descendants(graph, 0) | {0}}
        assert accumulate(output, time) == expected, f"at {time}, {run.workers} worker(s)"
