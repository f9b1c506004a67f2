"""Every example in examples/ that is a worker job, at 1, 2 and 3 workers (the ``run``
fixture, tests/conftest.py), against an oracle computed here from scratch: plain Python,
and networkx for breadth-first search.

(``examples.simple`` and ``examples.loopdemo`` are in tests/test_examples_simple.py;
``examples.demo`` starts Spark, see tests/barrier.)
"""
from collections import Counter, defaultdict

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktimely as st
from sparktimely.testing import consolidate
from examples import pagerank as pagerank_example
from examples.bfs import bfs, random_graph
from examples.distinct import DATA, distinct
from examples.hello import hello
from examples.wordcount import TEXT, wordcount


def test_hello_each_worker_sees_the_values_routed_to_it(run):
    assert run(hello) == [[x for x in range(10) if x % run.workers == w]
                          for w in range(run.workers)]


def test_distinct_each_value_once_on_its_worker(run):
    # Worker w sends DATA[w] (workers without an entry send nothing).
    values = {x for w in range(run.workers) for x in DATA.get(w, [])}
    assert run(distinct) == [sorted(x for x in values if x % run.workers == w)
                             for w in range(run.workers)]


def test_wordcount_running_counts_per_round(run):
    expected, totals = [], Counter()
    for round, line in enumerate(TEXT):
        changed = Counter(line.split())
        totals.update(changed)
        expected += [(round, word, totals[word]) for word in changed]
    reports = run(wordcount)
    assert sorted(r for mine in reports for r in mine) == sorted(expected)
    for index, mine in enumerate(reports):        # each word is counted by its owner
        assert all(st.stable_hash(word) % run.workers == index for _, word, _ in mine)


def test_bfs_matches_networkx(run):
    edges = random_graph(300, 900, seed=3)
    graph = nx.DiGraph(edges)
    graph.add_node(0)
    expected = nx.single_source_shortest_path_length(graph, 0)
    parts = run(lambda worker: bfs(worker, edges))
    for index, part in enumerate(parts):          # each node reported by its owner
        assert all(node % run.workers == index for node in part)
    assert {node: d for part in parts for node, d in part.items()} == expected


# -- PageRank -----------------------------------------------------------------------------------

def plain_pagerank(src, dst, iterations):
    """PageRank as examples/pagerank.py defines it (rank = 0.15 + 0.85 * contributions,
    everyone starting at 1, no redistribution from nodes without out-edges), in plain Python;
    keyed by node, for every node of some edge."""
    edges = list(zip(src.tolist(), dst.tolist()))
    out_degree = Counter(s for s, _ in edges)
    nodes = {n for edge in edges for n in edge}
    rank = {n: 1.0 for n in nodes}
    for _ in range(iterations):
        incoming = defaultdict(float)
        for s, d in edges:
            incoming[d] += rank[s] / out_degree[s]
        rank = {n: 0.15 + 0.85 * incoming[n] for n in nodes}
    return rank


def my_edges(worker, src, dst):
    """This worker's share of the edges, as one Arrow batch."""
    mine = slice(worker.index, None, worker.peers)
    return [pa.RecordBatch.from_arrays([pa.array(src[mine]), pa.array(dst[mine])],
                                       names=["src", "dst"])]


def test_pagerank_ranks_match_plain_python(run):
    src, dst = pagerank_example.generate_graph(200, 1000)
    expected = plain_pagerank(src, dst, 5)

    def job(worker):
        edges = my_edges(worker, src, dst)
        captured = worker.dataflow(lambda scope: pagerank_example.pagerank(
            scope, scope.to_stream(edges), 5).capture())
        worker.run()
        return captured.extract()
    extracts = run(job)
    for index, extract in enumerate(extracts):    # each node reported by its owner
        for _, table in extract:
            assert (table.column("node").to_numpy() % run.workers == index).all()
    ((time, table),) = consolidate(extracts)
    got = dict(zip(table.column("node").to_pylist(), table.column("rank").to_pylist()))
    assert time == 0
    assert got.keys() >= expected.keys()
    # nodes of no edge, below some owner's highest node, are reported with the base rank
    assert got == pytest.approx({n: expected.get(n, 0.15) for n in got}, rel=1e-9)


def top_of(ranks, k):
    return sorted(((r, n) for n, r in ranks.items()), reverse=True)[:k]


def test_pagerank_worker_top_ranks_on_worker_zero(run):
    src, dst = pagerank_example.generate_graph(300, 2000, seed=5)
    expected = top_of(plain_pagerank(src, dst, 4), 7)
    summaries = run(lambda worker: pagerank_example.pagerank_worker(
        worker, my_edges(worker, src, dst), iterations=4, top=7))
    assert summaries[1:] == [None] * (run.workers - 1)
    summary = summaries[0]
    assert summary["iterations"] == 4
    assert [n for _, n in summary["top"]] == [n for _, n in expected]
    assert [r for r, _ in summary["top"]] == pytest.approx([r for r, _ in expected], rel=1e-9)


def test_pagerank_worker_breaks_ties_at_the_cut_off_as_its_final_order(run):
    """Twenty nodes of one rank, seven places: each worker's candidates are cut in the order
    the merged list is sorted in (rank, then node, highest first), at any worker count."""
    src, dst = np.arange(20), np.arange(100, 120)
    expected = top_of(plain_pagerank(src, dst, 2), 7)
    assert len({r for r, _ in expected}) == 1
    summaries = run(lambda worker: pagerank_example.pagerank_worker(
        worker, my_edges(worker, src, dst), iterations=2, top=7))
    assert summaries[0]["top"] == expected


def test_pagerank_submit_job_reads_its_share_of_the_parquet_row_groups(run, tmp_path):
    src, dst = pagerank_example.generate_graph(150, 1200, seed=11)
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": src, "dst": dst}), path, row_group_size=100)
    expected = top_of(plain_pagerank(src, dst, 3), 5)
    reports = run(pagerank_example.job,
                  args=["--edges", str(path), "--iterations", "3", "--top", "5"])
    assert reports[1:] == [None] * (run.workers - 1)
    report = reports[0].splitlines()
    assert report[0].startswith(f"{run.workers} workers; worker 0 read its share of {path}")
    assert report[1].startswith("PageRank: 3 iterations in ")
    assert report[3:] == [f"  node {n:>8}  rank {r:10.4f}" for r, n in expected]


def test_pagerank_submit_job_without_edges_is_told(run):
    with pytest.raises(st.WorkerError, match="ValueError: examples.pagerank:job needs "
                                             "--edges PATH"):
        run(pagerank_example.job)


def test_the_examples_numpy_reference_agrees_with_plain_python():
    # The two oracles, written apart, agree (so neither hides a shared mistake of the
    # dataflow's definition of the update).
    src, dst = pagerank_example.generate_graph(100, 600, seed=2)
    ranks = pagerank_example.numpy_pagerank(src, dst, 100, 6)
    plain = plain_pagerank(src, dst, 6)
    assert plain == pytest.approx({n: ranks[n] for n in plain}, rel=1e-12)
    untouched = np.setdiff1d(np.arange(100), np.concatenate([src, dst]))
    assert np.allclose(ranks[untouched], 0.15)
