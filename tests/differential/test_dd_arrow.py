"""Arrow collections (RecordBatches with an int64 ``diff`` column) through arrange, join,
the reduce family and consolidate, against the same brute-force oracles as the Python path,
at 1, 2 and 3 workers; and iterate over Arrow batches."""
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as hs

import sparktimely as st
import sparktimely.differential as dd
from dd_harness import (accumulate, accumulate_rounds, arrow_reachability, bfs, processes,
                        run_rounds, toggled)

SETTINGS = settings(max_examples=10, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
diffs = hs.sampled_from([1, 1, -1, 2])


def rows_of(columns, updates=6, rounds=(1, 3)):
    """Per round (``rounds``: the fewest and most), up to ``updates`` ``(row, diff)`` updates
    with values drawn from the strategies in ``columns``."""
    return hs.lists(hs.lists(hs.tuples(hs.tuples(*columns.values()), diffs), max_size=updates),
                    min_size=rounds[0], max_size=rounds[1])


def to_batch(names, types, updates):
    columns = list(zip(*[data for data, _ in updates])) if updates else [[] for _ in names]
    arrays = [pa.array(list(c), t) for c, t in zip(columns, types)]
    arrays.append(pa.array([d for _, d in updates], pa.int64()))
    return pa.RecordBatch.from_arrays(arrays, list(names) + ["diff"])


def run_arrow(build, inputs, schemas, run, between=None):
    """``inputs[i][r]``: ``(row tuple, diff)`` updates of input ``i`` at round ``r``; each
    worker sends its share as one RecordBatch per round. Returns the output as
    ``(row tuple, time, diff)`` updates merged over the workers."""
    def send(session, i, updates):
        session.update_batch(to_batch(*schemas[i], updates))

    def output(time, table):
        return [(tuple(v for k, v in row.items() if k != "diff"), time, row["diff"])
                for row in table.to_pylist()]
    return run_rounds(build, inputs, run, send, output, between)


def check(build, oracle, inputs, schemas, run, between=None):
    output = run_arrow(build, inputs, schemas, run, between)
    for r in range(max(len(i) for i in inputs)):
        expected = {k: v for k, v in oracle(*[accumulate_rounds(i, r) for i in inputs]).items() if v}
        assert accumulate(output, r) == expected, f"round {r}, {run.workers} worker(s)"


KV = (["k", "v"], [pa.int64(), pa.string()])
KX = (["k", "x"], [pa.int64(), pa.int64()])
kv_rows = rows_of({"k": hs.integers(0, 3), "v": hs.sampled_from(["a", "b"])})
kx_rows = rows_of({"k": hs.integers(0, 3), "x": hs.integers(-5, 5)})


def joined(a: dict, b: dict) -> Counter:
    """The oracle of ``a.join(b, on="k")``: ``(k, v, x)`` for each pair of rows of a key."""
    out: Counter = Counter()
    for (k1, v), n1 in a.items():
        for (k2, x), n2 in b.items():
            if k1 == k2:
                out[(k1, v, x)] += n1 * n2
    return out


@pytest.mark.timeout(120)
@SETTINGS
@given(left=kv_rows, right=kx_rows)
def test_arrow_join(run, left, right):
    check(lambda scope, a, b: a.join(b, on="k"), joined, [left, right], [KV, KX], run)


VIEWS_L = (["k", "v"], [pa.string_view(), pa.binary_view()])
VIEWS_R = (["k", "x"], [pa.string_view(), pa.int64()])
view_words = hs.sampled_from(["", "a", "bb", "a-long-string-past-twelve-bytes"])


@pytest.mark.timeout(120)
@SETTINGS
@given(left=rows_of({"k": view_words, "v": hs.sampled_from([b"", b"x", b"y" * 20])}),
       right=rows_of({"k": view_words, "x": hs.integers(-2, 2)}))
def test_arrow_collections_of_view_layout_columns_join_and_count(run, left, right):
    """string_view/binary_view columns (Polars', DuckDB's) enter as large layouts: Arrow
    sorts and takes no views."""
    def build(scope, a, b):
        counted = a.count(key="k").map_batches(lambda t: pa.RecordBatch.from_arrays(
            [t.column("k"), pa.array([None] * t.num_rows, pa.large_binary()), t.column("count"),
             t.column("diff")], ["k", "v", "x", "diff"]))
        return dd.concatenate(scope, [a.join(b, on="k"), counted])

    def oracle(a, b):
        out = joined(a, b)
        per_key: Counter = Counter()
        for (k, _), n in a.items():
            per_key[k] += n
        for k, n in per_key.items():
            if n:
                out[(k, None, n)] += 1
        return out
    check(build, oracle, [left, right], [VIEWS_L, VIEWS_R], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(rows=kx_rows)
def test_arrow_count_consolidate_distinct(run, rows):
    def build(scope, c):
        def tag(label):
            return lambda b: pa.RecordBatch.from_arrays(
                [pa.array([label] * b.num_rows), b.column(0),
                 b.column(1) if b.num_columns > 2 else pa.array([0] * b.num_rows, pa.int64()),
                 b.column(b.num_columns - 1)], ["what", "a", "b", "diff"])
        return dd.concatenate(scope, [
            c.count(key="k").map_batches(tag("count")),
            c.consolidate().map_batches(tag("rows")),
            c.distinct().map_batches(tag("distinct")),
        ])

    def oracle(c):
        out, per_key = Counter(), Counter()
        for (k, x), n in c.items():
            per_key[k] += n
            out[("rows", k, x)] += n
            if n > 0:
                out[("distinct", k, x)] += 1
        for k, n in per_key.items():
            if n:
                out[("count", k, n)] += 1
        return out
    check(build, oracle, [rows], [KX], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(rows=kx_rows)
@example(rows=[[((1, 0), 1), ((1, 0), 1), ((2, 5), 0), ((1, 0), -2), ((3, 1), 0)]])
def test_arrow_consolidate_gives_each_row_once_per_time_and_no_zeros(run, rows):
    """Short batches are sealed into an arrangement as they came (duplicates, zero diffs);
    what ``consolidate`` gives out is consolidated all the same, as on the Python path."""
    output = run_arrow(lambda scope, c: c.consolidate(), [rows], [KX], run)
    seen = Counter((data, time) for data, time, _ in output)
    assert [u for u in output if u[2] == 0] == [], f"{run.workers} worker(s)"
    assert [key for key, n in seen.items() if n > 1] == [], f"{run.workers} worker(s)"
    for r in range(len(rows)):
        assert accumulate(output, r) == accumulate_rounds(rows, r)


@pytest.mark.timeout(120)
def test_arrow_join_of_repeated_rows_gives_their_product_once(run):
    """60 copies of one row joined with 40 copies of another: one output row with diff
    2,400 (as differential's consolidated batches give), not 2,400 rows."""
    left = [[((1, "a"), 1) for _ in range(60)] + [((2, "b"), 1)]]
    right = [[((1, 7), 1) for _ in range(40)] + [((3, 9), 1)]]
    output = run_arrow(lambda scope, a, b: a.join(b, on="k"), [left, right], [KV, KX], run)
    assert sorted(output) == [((1, "a", 7), 0, 2400)], f"{run.workers} worker(s)"


kx_null_rows = rows_of({"k": hs.one_of(hs.none(), hs.integers(0, 3)), "x": hs.integers(-5, 5)})


@pytest.mark.timeout(120)
@SETTINGS
@given(rows=kx_null_rows)
@example(rows=[[((None, 1), 1), ((None, 3), 1), ((0, 2), 1)], [((None, 1), -1)]])
@example(rows=[[((1, 10), 1), ((1, 3), -1), ((2, 5), 2), ((2, 7), -1), ((3, 4), -1),
                ((4, 1), -1), ((4, 9), 2)]])
def test_arrow_aggregations(run, rows):
    """count, sum, min and max per key (a null key is a key, as for ``count(key=...)``) over
    the rows present in the collection, as a Python ``reduce`` is given them: those whose
    diffs sum to more than zero, with that count. A row accumulated below zero (a retraction
    before its insertion) is absent: it counts in no aggregate, and a key with no row present
    has no output."""
    aggs = {"n": ("count", None), "total": ("sum", "x"), "low": ("min", "x"), "high": ("max", "x")}

    def oracle(c):
        out = Counter()
        present = {(k, x): m for (k, x), m in c.items() if m > 0}
        for k in {k for k, _ in present}:
            rows = [(x, m) for (kk, x), m in present.items() if kk == k]
            out[(k, sum(m for _, m in rows), sum(x * m for x, m in rows),
                 min(x for x, _ in rows), max(x for x, _ in rows))] += 1
        return out
    check(lambda scope, c: c.reduce(key="k", aggs=aggs), oracle, [rows], [KX], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=kv_rows, keys=rows_of({"k": hs.integers(0, 3)}))
def test_arrow_semijoin(run, data, keys):
    def oracle(c, k):
        out = Counter()
        for (key, v), n in c.items():
            for (kk,), m in k.items():
                if kk == key:
                    out[(key, v)] += n * m
        return out
    check(lambda scope, c, k: c.semijoin(k, on="k"), oracle, [data, keys],
          [KV, (["k"], [pa.int64()])], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(left=kv_rows, right=rows_of({"k": hs.sampled_from([0.0, 1.0, 2.5, 3.0, -1.0]),
                                    "x": hs.integers(-5, 5)}))
def test_arrow_join_of_an_integer_and_a_float_key_column_matches_equal_values(run, left,
                                                                               right):
    # Equal keys match by value, as Python's 1 == 1.0: an int64 column against a float64.
    check(lambda scope, a, b: a.join(b, on="k"), joined, [left, right],
          [KV, (["k", "x"], [pa.float64(), pa.int64()])], run)


DICT = pa.dictionary(pa.int32(), pa.string())
dict_rows = rows_of({"k": hs.sampled_from(["a", "b", "c"]), "w": hs.sampled_from(["p", "q"])})


@pytest.mark.timeout(120)
@SETTINGS
@given(rows=dict_rows)
def test_arrow_reduce_and_distinct_of_dictionary_encoded_columns_by_their_values(run, rows):
    # Each batch carries a dictionary of its own: group_by refused to mix them ('Unifying
    # differing dictionaries'), and min/max had no kernel for dictionary values.
    aggs = {"n": ("count", None), "low": ("min", "w"), "high": ("max", "w")}

    def build(scope, c):
        def tag(label):
            return lambda b: pa.RecordBatch.from_arrays(
                [pa.array([label] * b.num_rows), b.column("k").cast(pa.string()),
                 pa.array([str(v) for v in b.column(1).to_pylist()]),
                 pa.array([str(v) for v in b.column(2).to_pylist()]) if b.num_columns > 3
                 else pa.array([""] * b.num_rows), b.column("diff")],
                ["what", "k", "a", "b", "diff"])
        return dd.concatenate(scope, [c.reduce(key="k", aggs=aggs).map_batches(tag("reduce")),
                                      c.distinct().map_batches(tag("distinct"))])

    def oracle(c):
        out = Counter()
        for k in {k for (k, _), m in c.items() if m > 0}:       # the rows present (test above)
            present = {w: m for (kk, w), m in c.items() if kk == k and m > 0}
            out[("reduce", k, str(sum(present.values())), str(min(present)))] += 1
        for (k, w), n in c.items():
            if n > 0:
                out[("distinct", k, w, "")] += 1
        return out

    output = run_arrow(build, [rows], [(["k", "w"], [DICT, DICT])], run)
    for r in range(len(rows)):
        got = accumulate(output, r)
        expected = {k: v for k, v in oracle(accumulate_rounds(rows, r)).items() if v}
        reduce_rows = {key[:4]: v for key, v in got.items() if key[0] == "reduce"}
        assert {key: v for key, v in got.items() if key[0] == "distinct"} == {
            key: v for key, v in expected.items() if key[0] == "distinct"}, f"round {r}"
        assert reduce_rows == {key: v for key, v in expected.items() if key[0] == "reduce"}, \
            f"round {r}"


@pytest.mark.timeout(120)
@SETTINGS
@given(left=kv_rows, right=kx_rows)
def test_arrow_collections_whose_diff_column_comes_first_join_and_reduce(run, left, right):
    # Consolidated batches put diff last, batches as they came kept it first: one trace
    # then held two schemas, and joining or reducing over them failed.
    def diff_first(batch):
        names = ["diff"] + [n for n in batch.schema.names if n != "diff"]
        return batch.select(names)

    def build(scope, a, b):
        a, b = a.map_batches(diff_first), b.map_batches(diff_first)
        joined = a.join(b, on="k").map_batches(
            lambda t: t.select(["k", "v", "x", "diff"]))
        totals = b.reduce(key="k", aggs={"t": ("sum", "x")}).map_batches(
            lambda t: pa.RecordBatch.from_arrays(
                [t.column("k"), pa.array(["total"] * t.num_rows), t.column("t"),
                 t.column("diff")], ["k", "v", "x", "diff"]))
        return dd.concatenate(scope, [joined, totals])

    def oracle(a, b):
        out = joined(a, b)
        for k in {k for (k, _), n in b.items() if n > 0}:        # the rows present
            out[(k, "total", sum(x * n for (kk, x), n in b.items() if kk == k and n > 0))] += 1
        return out
    check(build, oracle, [left, right], [KV, KX], run)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(120)
def test_arrow_reachability_by_iterate(workers):
    """(Worker processes: Arrow batches through shared memory.)"""
    """Reachability over Arrow batches in an iterative scope (Product times), with an edge
    deleted in the second round retracting what it made reachable."""
    edges = [[((0, 1), 1), ((1, 2), 1), ((2, 3), 1), ((5, 6), 1)],
             [((1, 2), -1), ((0, 5), 1)],
             [((1, 2), 1)]]
    roots = [[((0,), 1)]]

    def build(scope, e, r):
        return arrow_reachability(e, r)

    def oracle(e, r):
        adj: dict = {}
        for (u, v), n in e.items():
            adj.setdefault(u, []).append(v)
        seen, todo = set(), [x for (x,) in r]
        while todo:
            u = todo.pop()
            if u not in seen:
                seen.add(u)
                todo += adj.get(u, [])
        return {(n,): 1 for n in seen}
    schemas = [(["src", "dst"], [pa.int64(), pa.int64()]), (["node"], [pa.int64()])]
    check(build, oracle, [edges, roots], schemas, processes(workers))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("few_rows", [0, 10**9])
@SETTINGS
@given(rounds=hs.lists(hs.lists(hs.tuples(hs.integers(0, 7), hs.integers(0, 7)), max_size=6),
                       min_size=2, max_size=5))
def test_arrow_count_and_distinct_in_a_loop_on_both_evaluation_paths(run, monkeypatch,
                                                                     few_rows, rounds):
    """Reachability whose loop counts each node's in-edges from reached nodes (``count`` at
    ``Product`` times) and keeps the nodes counted (``distinct``), with edges inserted and
    deleted over rounds, against a BFS: the rows of every update are evaluated as Python
    tuples (``few_rows`` above any update's) or as int64 matrices (0). (Under the default
    limit an update's rows depend on the trace merges done while the worker idled, which
    depend on timing.)"""
    from sparktimely.differential.arrow import reduce as arrow_reduce
    monkeypatch.setattr(arrow_reduce, "FEW_ROWS", few_rows)
    evaluated = Counter()
    for name in ("_evaluate_rows", "_evaluate_integers"):
        method = getattr(arrow_reduce.ArrowReducer, name)
        monkeypatch.setattr(arrow_reduce.ArrowReducer, name,
                            lambda self, *args, _m=method, _n=name: (evaluated.update([_n]),
                                                                     _m(self, *args))[1])

    def build(scope, e, r):
        def step(reach):
            sources = reach.map_batches(lambda b: b.rename_columns(["src", "diff"]))
            targets = sources.join(e.enter(reach.scope), on="src").map_batches(
                lambda b: pa.RecordBatch.from_arrays([b.column("dst"), b.column("diff")],
                                                     ["node", "diff"]))
            counted = targets.concat(r.enter(reach.scope)).count(key="node")
            return counted.map_batches(lambda b: pa.RecordBatch.from_arrays(
                [b.column("node"), b.column("diff")], ["node", "diff"])).distinct()
        return r.iterate(step)

    def oracle(e, r):
        return {(n,): 1 for n in bfs(e, [x for (x,) in r])}
    schemas = [(["src", "dst"], [pa.int64(), pa.int64()]), (["node"], [pa.int64()])]
    check(build, oracle, [toggled(rounds), [[((0,), 1)]]], schemas, run)
    assert evaluated["_evaluate_integers" if few_rows == 0 else "_evaluate_rows"]
    assert not evaluated["_evaluate_rows" if few_rows == 0 else "_evaluate_integers"]


@pytest.mark.timeout(120)
def test_arrow_reachability_over_an_entered_arrangement(run):
    edges = [[((0, 1), 1), ((1, 2), 1), ((2, 3), 1), ((5, 6), 1)], [((1, 2), -1), ((0, 5), 1)]]
    roots = [[((0,), 1)]]

    def build(scope, e, r):
        arranged = e.arrange_by_key(key="src")

        def step(reach):
            sources = reach.map_batches(lambda b: b.rename_columns(["src", "diff"]))
            targets = arranged.enter(reach.scope).semijoin(sources).map_batches(
                lambda b: pa.RecordBatch.from_arrays([b.column("dst"), b.column("diff")],
                                                     ["node", "diff"]))
            return targets.concat(r.enter(reach.scope)).distinct()
        return r.iterate(step)
    reachable = [{(0,), (1,), (2,), (3,)}, {(0,), (1,), (5,), (6,)}]
    output = run_arrow(build, [edges, roots], [(["src", "dst"], [pa.int64(), pa.int64()]),
                                               (["node"], [pa.int64()])], run)
    for r, expected in enumerate(reachable):
        assert accumulate(output, r) == {n: 1 for n in expected}


def test_arrow_and_python_updates_do_not_mix():
    def build(scope):
        rows = dd.as_collection(scope.to_stream(pa.table({"k": [1], "diff": [1]})))
        tuples = dd.from_stream(scope.to_stream([1]))
        return rows.concat(tuples).count().probe()
    with pytest.raises(st.OperatorError, match="mixes Python updates with Arrow batches"):
        st.example(build)


def test_negate_and_filter_batches_keep_diffs(run):
    def job(worker):
        rows = pa.table({"k": [1, 2] if worker.index == 0 else [],
                         "diff": [1, 3] if worker.index == 0 else []},
                        pa.schema([("k", pa.int64()), ("diff", pa.int64())]))
        captured = worker.dataflow(lambda scope: dd.as_collection(scope.to_stream(rows))
                                   .filter_batches(lambda b: pc.greater(b.column("k"), 1))
                                   .negate().inner.capture())
        worker.run()
        return [(t, row["k"], row["diff"]) for t, batch in captured.extract()
                for row in batch.to_pylist()]
    assert [u for part in run(job) for u in part] == [(0, 2, -3)]


def many_rounds(columns):
    """20 to 30 rounds of up to 5 updates: enough for the traces' small batches to merge."""
    return rows_of(columns, updates=5, rounds=(20, 30))


def idle_between_rounds(worker):
    """Let the worker wait a few times after a round, so that it merges ahead."""
    for _ in range(4):
        worker.step_or_park(0)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("tiny, piece_rows, idle", [(2, 10**9, False), (256, 10**9, False),
                                                    (2, 2, False), (2, 2, True),
                                                    (256, 10**9, True)])
@SETTINGS
@given(left=many_rounds({"k": hs.integers(0, 5)}),
       right=many_rounds({"k": hs.integers(0, 5), "x": hs.integers(-2, 2)}))
def test_arrow_join_count_through_many_small_merges(run, monkeypatch, tiny, piece_rows, idle,
                                                    left, right):
    """The benchmark's shape (join, then count) over many rounds, with the spine's
    thresholds lowered so that small batches merge often: merges that keep the batch small
    (sorted, not consolidated), the merge that makes it large (consolidated) and geometric
    merges of large ones all happen, and readers see repeated rows. Readers look up the
    trace's tiny batches together (``lookup_all``): with ``tiny`` 2, batches of up to 2 rows
    are, larger ones one by one, and the batches an arrangement seals together are combined
    and consolidated from 3 rows on (COMBINE_FROM); with 256, every batch is tiny. With
    ``piece_rows`` 2, merges of large batches are done a few rows at a time over the
    following rounds (``PiecewiseMerge``), readers seeing the batches being merged
    meanwhile; else at once. With ``idle``, the workers wait after each round (and at every
    wait for a peer) with no idle time required, so they merge ahead between and inside
    rounds (``Spine.idle_work``), which must change nothing."""
    from sparktimely.differential.arrow import arrange, batch
    from sparktimely.differential.trace import spine
    idle_units = []
    if idle:
        monkeypatch.setattr(st.Worker, "idle_work_after", 0.0)   # the workers' class
        idle_work = spine.Spine.idle_work

        def counted(self):
            idle_units.append(1)
            return idle_work(self)
        monkeypatch.setattr(spine.Spine, "idle_work", counted)
    monkeypatch.setattr(spine, "PIECE_ROWS", piece_rows)
    monkeypatch.setattr(spine, "SMALL_BATCH", 12)
    monkeypatch.setattr(spine, "MAX_SMALL", 3)
    monkeypatch.setattr(spine, "MAX_TINY", 4)
    monkeypatch.setattr(spine, "TINY_ROWS", 2)
    monkeypatch.setattr(batch, "TINY", tiny)
    if tiny == 2:
        monkeypatch.setattr(batch, "COMBINE_FROM", 3)
        monkeypatch.setattr(arrange, "COMBINE_FROM", 3)

    def oracle(a, b):
        counts = Counter()
        for (k1,), n1 in a.items():
            for (k2, _), n2 in b.items():
                if k1 == k2:
                    counts[k1] += n1 * n2
        return Counter({(k, n): 1 for k, n in counts.items() if n})
    check(lambda scope, a, b: a.join(b, on="k").count(key="k"), oracle, [left, right],
          [(["k"], [pa.int64()]), KX], run, idle_between_rounds if idle else None)
    assert idle or not idle_units


@pytest.mark.timeout(120)
@pytest.mark.parametrize("idle", [False, True])
def test_idle_workers_merge_their_traces_ahead(run, monkeypatch, idle):
    """A word count fed a small batch per round: workers that wait after each round merge
    the arrangement's small batches while idle (``Spine.idle_work``, deferred to the
    worker), so its trace holds at most two batches after every round (one merged, one
    new) where, without waiting, small batches pile up (to MAX_TINY); counts equal a
    recount at every round either way."""
    monkeypatch.setattr(st.Worker, "idle_work_after", 0.0)       # the workers' class
    words = [[(f"w{(7 * r + i) % 11}",) for i in range(4)] for r in range(24)]
    most = []

    def job(worker):
        session = dd.InputSession()

        def build(scope):
            arranged = session.to_collection(scope).arrange_by_key(key="w")
            return arranged.trace, arranged.count().inner.capture(), arranged.stream.probe()
        trace, captured, probe = worker.dataflow(build)
        trace.set_physical_compaction([])       # this reader needs no batch boundaries
        batches = 0
        for r, round_words in enumerate(words):
            mine = [w for j, (w,) in enumerate(round_words) if j % worker.peers == worker.index]
            session.update_batch(pa.record_batch({"w": pa.array(mine, pa.string()),
                                                  "diff": pa.array([1] * len(mine), pa.int64())}))
            session.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1))
            if idle:
                idle_between_rounds(worker)
            batches = max(batches, len([b for b in trace._box.spine.batches() if len(b)]))
        most.append(batches)
        session.close()
        worker.run()
        return [(row["w"], t, row["count"], row["diff"]) for t, b in captured.extract()
                for row in b.to_pylist()]
    output = [u for part in run(job) for u in part]
    for r in range(len(words)):
        counts = Counter(w for rnd in words[:r + 1] for (w,) in rnd)
        got = Counter()
        for w, t, n, d in output:
            if t <= r:
                got[(w, n)] += d
        assert +got == Counter({(w, n): 1 for w, n in counts.items()}), f"round {r}"
    assert max(most) <= 2 if idle else max(most) > 2, most


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, values", [(pa.string(), ["a", "b", "c", None]),
                                          (pa.int64(), [1, 2, 3, None])])
@SETTINGS
@given(data=hs.data())
def test_arrow_count_of_keys_with_nulls_or_strings(run, kind, values, data):
    """count's output rows are assembled from numpy for integer keys without nulls, with an
    Arrow take otherwise (strings, nulls): both over several rounds, nulls counted as one
    key."""
    rows = data.draw(many_rounds({"w": hs.sampled_from(values)}))

    def oracle(c):
        counts = Counter()
        for (w,), n in c.items():
            counts[w] += n
        return Counter({(w, n): 1 for w, n in counts.items() if n})
    check(lambda scope, c: c.count(key="w"), oracle, [rows], [(["w"], [kind])], run)


COUNT_PATHS = [(0, 10**9), (10**9, 10**9), (3, 10**9), (10**9, 6)]
"""(SMALL_COUNT, INDEX_LIMIT): numpy only, the Python index only, both by size (batches of up
to 3 rows and of more), the index given up once the output trace exceeds 6 rows."""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("small, limit", COUNT_PATHS)
@pytest.mark.parametrize("colliding", [False, True])
@SETTINGS
@given(data=hs.data())
def test_arrow_count_small_and_vectorised_paths(run, monkeypatch, small, limit, colliding, data):
    """count over totally ordered times has two paths for the same result: small updates
    through a Python index of the current counts (``CountIndex``), larger ones with numpy
    over the output trace (``count_updates``), either giving way to the general reducer
    when two keys share a hash. Each path alone, both chosen by size on either side of the
    threshold, and the index given up for a large output, against the oracle; with
    ``colliding``, key hashes are cut to 2 bits, so that most keys share a hash with
    another. The rows carry a column besides the key (``v``), which the general reducer,
    reading the output's counts as its input, leaves out."""
    from sparktimely.differential.arrow import batch as arrow_batch, reduce as arrow_reduce
    monkeypatch.setattr(arrow_reduce, "SMALL_COUNT", small)
    monkeypatch.setattr(arrow_reduce, "INDEX_LIMIT", limit)
    if colliding:
        hash_rows = arrow_batch.hash_rows
        monkeypatch.setattr(arrow_batch, "hash_rows", lambda *args: hash_rows(*args) & 3)
    rows = data.draw(many_rounds({"w": hs.sampled_from(["a", "b", "c", "d", "e", "f", None]),
                                  "v": hs.integers(0, 2)}))

    def oracle(c):
        counts = Counter()
        for (w, _), n in c.items():
            counts[w] += n
        return Counter({(w, n): 1 for w, n in counts.items() if n})
    check(lambda scope, c: c.count(key="w"), oracle, [rows],
          [(["w", "v"], [pa.string(), pa.int64()])], run)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", [pa.timestamp("ns"), pa.duration("ns"), pa.time64("ns")])
def test_arrow_count_by_nanosecond_time_keys(run, kind):
    """Nanosecond time keys (which Python reads only through pandas) are counted on the
    hashed path at every size: a small update, a large one, retractions, at 1, 2 and 3
    workers (the index path raised 'not safely convertible to microseconds')."""
    rounds = [[((1,), 1), ((2,), 1), ((1,), 1)],
              [((v % 7,), 1) for v in range(600)],
              [((1,), -2), ((3,), 1)]]

    def oracle(c):
        counts = Counter()
        for (k,), n in c.items():
            counts[k] += n
        return Counter({(k, n): 1 for k, n in counts.items() if n})

    def as_ints(batch):                 # read back without pandas
        return batch.set_column(0, "k", batch.column(0).cast(pa.int64()))
    output = run_arrow(lambda scope, c: c.count(key="k").map_batches(as_ints), [rounds],
                       [(["k"], [kind])], run)
    for r in range(len(rounds)):
        assert accumulate(output, r) == oracle(accumulate_rounds(rounds, r)), r


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, name", [(pa.decimal128(5, 2), "decimal128"),
                                        (pa.list_(pa.int64()), "list")])
def test_arrow_count_refuses_a_key_type_it_cannot_hash_at_any_size(run, kind, name):
    """A key column of a type the hash refuses is refused for one small update too, at
    every worker count (the index path counted decimals, or failed with 'unhashable type',
    so a job could run until its first large update)."""
    values = {"decimal128": [1], "list": [[1]]}[name]
    with pytest.raises(st.WorkerError, match=f"cannot hash a key column of type {name}"):
        run_arrow(lambda scope, c: c.count(key="k"),
                  [[[((v,), 1) for v in values] * run.workers]], [(["k"], [kind])], run)


@pytest.mark.timeout(120)
def test_a_value_column_of_a_type_without_a_hash_is_named_where_rows_are_grouped(run):
    """Repeated rows arranged by a key are grouped by every column; a decimal value column
    was told as 'cannot hash a key column of type decimal128(10, 2)', naming no column."""
    import decimal
    value = decimal.Decimal("1.5")
    with pytest.raises(st.WorkerError, match=r"value column 'p' holds decimal128\(10, 2\): a "
                                             r"collection's rows are grouped by all their "
                                             r"columns, and this type cannot be"):
        run_arrow(lambda scope, c: c.join(c, on="k"), [[[((1, value), 1)] * 3 * run.workers]],
                  [(["k", "p"], [pa.int64(), pa.decimal128(10, 2)])], run)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("call", ["threshold(f)", "reduce(logic)"])
def test_a_python_reduction_of_an_arrow_collection_names_the_call_and_the_arrow_ones(run, call):
    """threshold and reduce with a Python function take Python records; on Arrow batches the
    error names the call (it said 'this arrangement' of a collection's threshold)."""
    name = {"threshold(f)": "Threshold", "reduce(logic)": "Reduce"}[call]
    build = {"threshold(f)": lambda scope, c: c.threshold(lambda x, n: min(n, 1)),
             "reduce(logic)": lambda scope, c: c.reduce(lambda k, vals, out: None, key="k")}
    with pytest.raises(st.WorkerError) as raised:
        run_arrow(build[call], [[[((1, 2), 1)] * run.workers]],
                  [(["k", "v"], [pa.int64(), pa.int64()])], run)
    assert (f"{name}: {call} calls a Python function on Python records, and this "
            f"collection holds Arrow batches; use the Arrow aggregations (reduce(aggs=...), "
            f"count(), distinct())") in str(raised.value)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rows", [3, 300], ids=["small", "large"])
def test_arrow_count_of_a_column_of_type_null_is_one_key(run, rows):
    """A key column of Arrow type null (every value missing) is one key, as in the windows,
    on the index path and the hashed one (the hashed one failed: no 'equal' kernel)."""
    rounds = [[((None,), 1)] * rows, [((None,), -1)]]
    output = run_arrow(lambda scope, c: c.count(key="k"), [rounds], [(["k"], [pa.null()])],
                       run)
    assert [accumulate(output, r) for r in range(2)] == [{(None, rows): 1},
                                                         {(None, rows - 1): 1}]


@pytest.mark.timeout(120)
def test_arrow_count_takes_minus_zero_for_zero_on_every_path(run):
    """-0.0 and 0.0 are one key, as their hashes and Python's == say, also on the general
    path a NaN key sends the update to (Arrow's grouping kept them apart there, so the
    result depended on the worker count). NaN keys themselves are not equal to anything
    and are left out of the comparison."""
    rounds = [[((-0.0,), 2), ((None,), 1), ((0.0,), 1), ((float("nan"),), 1)],
              [((0.0,), -1), ((1.5,), 1)]]
    output = run_arrow(lambda scope, c: c.count(key="k"), [rounds], [(["k"], [pa.float64()])],
                       run)
    for r, expected in enumerate([{(0.0, 3): 1, (None, 1): 1},
                                  {(0.0, 2): 1, (None, 1): 1, (1.5, 1): 1}]):
        got = {(k, n): m for (k, n), m in accumulate(output, r).items()
               if k is None or k == k}
        assert got == expected, r


def test_arrow_count_at_int_times_arranges_nothing():
    """``count(key=...)`` of an Arrow collection at int times is one operator that counts
    the rows as they arrived (differential's ``count_total``): its input is neither sealed
    into batches nor kept in a trace. In an iterative scope (``Product`` times) it is an
    arrangement and the count of it; both count alike (the tests above, at 1, 2 and 3
    workers, run the int-time one on every path: the index, numpy, and colliding hashes)."""
    def job(worker):
        rows = pa.record_batch({"w": ["a", "b", "a"], "diff": [1, 1, 1]})

        def build(scope):
            flat = dd.as_collection(scope.to_stream([rows])).count(key="w").inner.capture()
            nested = scope.iterative(lambda inner: dd.as_collection(
                scope.to_stream([rows])).enter(inner).count(key="w").leave()).inner.capture()
            return flat, nested
        flat, nested = worker.dataflow(build)
        worker.run()
        names = [operator.name for operator in worker.dataflows()[0].operators]
        return names, [sorted(table.to_pylist(), key=str) for _, table in flat.extract()], \
            [sorted(table.to_pylist(), key=str) for _, table in nested.extract()]
    names, flat, nested = st.execute_directly(job)
    assert names.count("ArrangeByKey") == 1 and names.count("Count") == 2, names
    assert flat == nested == [[{"w": "a", "count": 2, "diff": 1},
                               {"w": "b", "count": 1, "diff": 1}]]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("key", [["x"], ["w", "v"]], ids=["float", "two columns"])
@SETTINGS
@given(data=hs.data())
def test_arrow_count_small_updates_by_float_and_by_two_key_columns(run, key, data):
    """count's small updates with a float key column (which the index leaves to numpy) and
    with two key columns (which the index holds as tuples of their values), through many
    rounds, against the oracle."""
    rows = data.draw(many_rounds({"w": hs.sampled_from(["a", "b", None]),
                                  "v": hs.integers(0, 2),
                                  "x": hs.sampled_from([0.0, 1.5, -2.5, None])}))
    names = ["w", "v", "x"]
    at = [names.index(n) for n in key]

    def oracle(c):
        counts = Counter()
        for data_row, n in c.items():
            counts[tuple(data_row[i] for i in at)] += n
        return Counter({(*k, n): 1 for k, n in counts.items() if n})
    check(lambda scope, c: c.count(key=key), oracle, [rows],
          [(names, [pa.string(), pa.int64(), pa.float64()])], run)


def output_counts(produced: list) -> dict:
    """``{(time, w, count): diff}`` of a count's ``[(time, RecordBatch)]`` output, zeros
    dropped."""
    out: Counter = Counter()
    for time, batch in produced:
        for row in batch.to_pylist():
            out[time, row["w"], row["count"]] += row["diff"]
    return {entry: diff for entry, diff in out.items() if diff}


def trace_counts(batches: list) -> dict:
    """``{(w, count): diff}`` accumulated over an output trace's batches."""
    return output_counts([(0, b.data) for b in batches if len(b)])


@settings(max_examples=200, deadline=None, database=None)
@given(rounds=hs.lists(hs.lists(hs.lists(hs.tuples(hs.sampled_from("abcdef"), hs.integers(0, 2),
                                                   hs.sampled_from([1, 1, -1, 2])),
                                         max_size=5), min_size=1, max_size=2),
                       min_size=1, max_size=6),
       keep=hs.booleans(), start=hs.integers(0, 3), repeats=hs.booleans())
@example(rounds=[[[("a", 0, 1)]], [[("a", 0, 1), ("a", 2, 1)], [("a", 0, -1), ("a", 2, -1)]]],
         keep=False, start=0, repeats=False)            # updates that cancel: no output
def test_count_index_matches_counting_from_the_output_trace(rounds, keep, start, repeats):
    """Count's index of current counts (Python containers), made from the output trace
    after ``start`` rounds, gives what counting from the output trace with numpy
    (``count_updates``, the path it shortcuts) gives, round by round, for one or two
    batches a round with rows at one or several times, sorted by hash within each time;
    keeping its output (``keep``), the batch it releases at the end brings its output
    trace to the same counts. With ``repeats``, a batch holds a key's rows unconsolidated,
    as an arrangement seals short batches."""
    from sparktimely.differential.arrow.batch import ArrowBatch, times_for
    from sparktimely.differential.arrow.reduce import CountIndex, count_updates
    from sparktimely.hashing import hash_rows
    from sparktimely.progress.timestamp import TimeKind
    kind = TimeKind(int)
    index = CountIndex()
    traced: list = []               # count_updates' output trace
    indexed: list = []              # the index's, when it does not keep its output
    for r, parts in enumerate(rounds):
        lower, upper = [3 * r], [3 * r + 3]
        batches = [ArrowBatch.build(pa.table({"w": [w for w, _, _ in part],
                                              "diff": [d for _, _, d in part]}),
                                    times_for(kind, [3 * r + late for _, late, _ in part]),
                                    ["w"], lower, upper, kind, consolidated=repeats)
                   for part in parts if part]
        batches = [b for b in batches if len(b)]
        if not batches:
            continue
        expected, out = count_updates(batches, traced, lower, upper, kind)
        traced += [out] if out is not None else []
        if r < start:
            indexed = list(traced)
            continue
        got, own = index.updates(batches, indexed, lower, upper, kind, keep)
        assert output_counts(got) == output_counts(expected)
        for _, batch in got:
            hashes = hash_rows(batch, ["w"]).tolist()
            assert hashes == sorted(hashes)
        assert own is None if keep else (own is None) == (not got)   # cancelling keys: neither
        indexed += [own] if own is not None else []
    released = index.release([3 * len(rounds)], kind)
    assert len(released) <= 1 and (keep or not released)
    assert trace_counts(indexed + released) == trace_counts(traced)


@pytest.mark.parametrize("keep", [False, True])
def test_count_index_counts_keys_of_one_hash_apart(keep):
    """The count index holds each key by its values, so two keys that share a hash (here
    given by hand) are counted apart, at one time and at several, against a count of the
    rows in Python (counting from the output trace with numpy gives way to the general
    reducer there); the batch the index releases brings the trace to the same counts."""
    from sparktimely.differential.arrow.batch import ArrowBatch, times_for
    from sparktimely.differential.arrow.reduce import CountIndex
    from sparktimely.progress.timestamp import TimeKind
    kind = TimeKind(int)

    def words(rows: list, lower: int) -> ArrowBatch:
        """A batch of ``(word, its hash, time)`` rows over ``[lower, lower + 2)``."""
        return ArrowBatch.build(pa.table({"w": [w for w, _, _ in rows], "diff": [1] * len(rows)}),
                                times_for(kind, [t for _, _, t in rows]), ["w"], [lower],
                                [lower + 2], kind, hashes=np.array([h for _, h, _ in rows],
                                                                   np.uint64))
    rounds = [[("a", 1, 0), ("b", 2, 0), ("b", 2, 0)],
              [("a", 1, 2), ("z", 2, 2), ("b", 2, 3), ("z", 2, 3)],
              [("z", 2, 4), ("y", 2, 4), ("b", 2, 4)]]
    index = CountIndex()
    indexed: list = []              # the index's output trace
    counts: Counter = Counter()
    for r, rows in enumerate(rounds):
        expected: Counter = Counter()
        for time in sorted({t for _, _, t in rows}):
            for w, n in Counter(w for w, _, t in rows if t == time).items():
                expected.update({(time, w, counts[w]): -1} if counts[w] else {})
                counts[w] += n
                expected[time, w, counts[w]] += 1
        got, own = index.updates([words(rows, 2 * r)], indexed, [2 * r], [2 * r + 2], kind,
                                 keep)
        indexed += [own] if own is not None else []
        assert output_counts(got) == dict(expected)
    assert index.current == counts == {"a": 2, "b": 4, "z": 3, "y": 1}
    released = index.release([2 * len(rounds)], kind)
    assert trace_counts(indexed + released) == {(0, w, n): 1 for w, n in counts.items()}


def test_count_index_leaves_float_keys_to_numpy():
    """Float keys (a NaN is not equal to itself in Python, so a dict would never find its
    key again) are not held by the count index: it says it cannot count them, and the
    caller counts with numpy."""
    from sparktimely.differential.arrow.batch import ArrowBatch, times_for
    from sparktimely.differential.arrow.reduce import CountIndex
    from sparktimely.progress.timestamp import TimeKind
    kind = TimeKind(int)
    batch = ArrowBatch.build(pa.table({"k": [0.0, -0.0, float("nan")], "diff": [1, 1, 1]}),
                             times_for(kind, [0, 0, 0]), ["k"], [0], [1], kind)
    assert CountIndex().updates([batch], [], [0], [1], kind, True) is None


@pytest.mark.timeout(60)
def test_arrow_count_keeps_small_updates_in_its_index_not_its_output_trace(run, monkeypatch):
    """While count's index of current counts answers small updates, the index is the
    output's only record: no worker puts anything in its output trace (no batch built,
    inserted or merged). A large update, counted from the output trace, has each worker
    first bring its trace up to date with one batch: every count stays exact."""
    from sparktimely.differential.trace.handle import TraceBox
    inserted: Counter = Counter()
    insert = TraceBox.insert
    monkeypatch.setattr(TraceBox, "insert", lambda box, batch, time: (
        inserted.update([box.name]), insert(box, batch, time))[1])
    counts: Counter = Counter()             # every worker's output (in-process workers)
    sent: Counter = Counter()

    def job(worker):
        words = dd.InputSession()
        probe = worker.dataflow(lambda scope: words.to_collection(scope).count(key="w")
                                .inspect_batch(lambda t, b: counts.update(
                                    {(r["w"], r["count"]): r["diff"] for r in b.to_pylist()}))
                                .probe())
        seen = []
        for round, size in enumerate([3, 5, 2, 4, 3000, 3, 1], start=1):
            ws = [f"w{(round * 7 + i) % 5000}" for i in range(size)] if worker.index == 0 else []
            sent.update(ws)
            words.update_batch(pa.record_batch({"w": pa.array(ws, pa.string()),
                                                "diff": pa.array([1] * len(ws), pa.int64())}))
            words.advance_to(round)
            worker.step_while(lambda: probe.less_than(round))
            if worker.index == 0:           # the others may see the next round's words sent
                assert +counts == Counter({(w, n): 1 for w, n in sent.items()}), round
            seen.append(inserted["Count output"])
        words.close()
        worker.run()
        return seen
    for seen in run(job):                   # 3,000 keys: over SMALL_COUNT at every worker
        assert seen[:4] == [0, 0, 0, 0]     # small updates: the index alone
        assert run.workers <= seen[4] <= 2 * run.workers   # its own batch, after a catch-up
        assert seen[5:] == [seen[4]] * 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, values", [(pa.int32(), [-1, 0, 2**31 - 1]),
                                          (pa.uint64(), [0, 1, 2**63 + 1, 2**64 - 1])])
@SETTINGS
@given(data=hs.data())
def test_arrow_distinct_of_narrow_and_unsigned_integers(run, kind, values, data):
    """distinct reads integer columns as one int64 matrix (narrow ones widened, uint64 ones
    reinterpreted) and writes them back in their own types, values beyond int64 included."""
    rows = data.draw(many_rounds({"k": hs.sampled_from(values), "x": hs.sampled_from(values)}))

    def oracle(c):
        return Counter({row: 1 for row, n in c.items() if n > 0})
    check(lambda scope, c: c.distinct(), oracle, [rows], [(["k", "x"], [kind, kind])], run)


@pytest.mark.parametrize("many", [False, True])
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.data_too_large])
@given(sizes=hs.lists(hs.sampled_from([0, 1, 3, 40, 300, 600]), min_size=1, max_size=8),
       data=hs.data())
def test_lookup_all_finds_every_row_of_every_probe(many, sizes, data):
    """``lookup_all`` against a scan of every row: large batches searched with numpy, tiny
    ones through their hash sets (few probes) or all at once (``many`` probes)."""
    from sparktimely.differential.arrow.batch import (FEW_PROBES, TINY, ArrowBatch, lookup_all,
                                                      times_for)
    from sparktimely.hashing import hash_rows
    from sparktimely.progress.timestamp import TimeKind
    probes = data.draw(hs.lists(hs.integers(0, 400), min_size=FEW_PROBES + 1 if many else 0,
                                max_size=2 * FEW_PROBES if many else FEW_PROBES))
    batches = []
    for size in sizes:
        keys = data.draw(hs.lists(hs.integers(0, 400), min_size=size, max_size=size))
        batches.append(ArrowBatch.build(pa.table({"k": pa.array(keys, pa.int64()),
                                                  "diff": pa.array([1] * size, pa.int64())}),
                                        times_for(TimeKind(int), [0] * size), ["k"], [0], [1],
                                        consolidated=True))
    wanted = hash_rows(pa.table({"k": pa.array(probes, pa.int64())}), ["k"])
    expected = []
    for batch in batches:
        pairs = sorted((i, j) for i, p in enumerate(wanted.tolist())
                       for j, h in enumerate(batch.hashes.tolist()) if h == p)
        if pairs:
            expected.append((id(batch), pairs))
    found = [(id(b), sorted(zip(p.tolist(), r.tolist())))
             for b, p, r in lookup_all(batches, wanted)]
    assert found == expected
    assert 3 < TINY < 300                           # tiny batches and large ones


@settings(max_examples=80, deadline=None, database=None)
@given(rows=hs.lists(hs.tuples(hs.integers(-2**63, 2**63 - 1), hs.integers(0, 3),
                               hs.integers(0, 3), hs.sampled_from([1, -1, 2])), max_size=70),
       depth=hs.sampled_from([1, 2, 3]))
def test_small_row_paths_equal_the_numpy_paths(rows, depth):
    """The reducer's row grouping and the distinct times of a few rows (Python loops, up to
    ``SMALL_ROWS`` rows) equal what the numpy paths give for the same rows."""
    import numpy as np
    from sparktimely.differential.arrow import batch, reduce
    from sparktimely.progress.timestamp import TimeKind
    matrix = np.array(rows, np.int64).reshape(len(rows), 4)
    kind = TimeKind(int, depth - 1)
    parts = (matrix[:batch.SMALL_ROWS], matrix)          # a small one, and one that may not be

    def results():
        return [(reduce._summed(part, 3).tolist(),
                 batch.distinct_times(part[:, 1:1 + depth].T.copy(), kind)) for part in parts]
    small = results()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "SMALL_ROWS", 0)
        patch.setattr(reduce, "SMALL_ROWS", 0)
        assert results() == small


@settings(max_examples=150, deadline=None, database=None)
@given(counting=hs.booleans(), data=hs.data(),
       times=hs.lists(hs.tuples(hs.integers(0, 2), hs.integers(0, 2)), min_size=1, max_size=4,
                      unique=True))
def test_reducer_evaluates_few_rows_as_its_matrices_do(counting, data, times):
    """``count`` and ``distinct`` over a few gathered rows (Python tuples, their times as
    coordinate tuples) give the corrections the int64-matrix evaluation gives for the same
    rows, at several interesting times of a loop (``Product``), each correction seen by the
    later times."""
    from sparktimely import Product
    from sparktimely.differential.arrow import reduce as arrow_reduce
    from sparktimely.progress.timestamp import TimeKind
    hashes = hs.sampled_from([-2**63, -5, 0, 7, 2**63 - 1])
    coords = hs.tuples(hs.integers(0, 2), hs.integers(0, 2))
    columns = 1 if counting else 2                      # the key; the key and a value
    row = hs.tuples(hashes, *[hs.integers(0, 2)] * columns, hs.sampled_from([1, -1, 2]))
    rows_in = data.draw(hs.lists(hs.tuples(row, coords), max_size=25))
    out_row = hs.tuples(hashes, *[hs.integers(0, 2)] * 2, hs.sampled_from([1, -1]))
    rows_out = data.draw(hs.lists(hs.tuples(out_row, coords), max_size=8))
    names = ["k", "count"] if counting else ["k", "x"]
    schema = pa.schema([pa.field("__hash", pa.uint64())] + [pa.field(n, pa.int64()) for n in names]
                       + [pa.field("diff", pa.int64())])
    spec = arrow_reduce.CountSpec() if counting else arrow_reduce.DistinctSpec()
    reducer = arrow_reduce.ArrowReducer("r", spec, TimeKind(int, 1))
    at = [Product(*t) for t in sorted(times)]

    def matrices(pairs, width):
        if not pairs:
            return None, None
        return (np.array([r for r, _ in pairs], np.int64).reshape(len(pairs), width),
                np.array([c for _, c in pairs], np.int64).T.copy())
    few = reducer._evaluate_rows(schema, [r for r, _ in rows_in], [c for _, c in rows_in],
                                 [r for r, _ in rows_out], [c for _, c in rows_out], at)
    many = reducer._evaluate_integers(schema, *matrices(rows_in, columns + 2),
                                      *matrices(rows_out, 4), at)
    assert [(t, m.tolist()) for t, m in few] == [(t, m.tolist()) for t, m in many]


def test_arranger_consolidates_long_seals_and_short_ones_that_repeat(monkeypatch):
    """An arrangement seals a long batch (or batches of one time that together are long,
    COMBINE_FROM rows or more) consolidated; short ones consolidated only when at least half
    their rows repeat a key, else as they are, without grouping."""
    from sparktimely.differential.arrow import batch as batch_module
    from sparktimely.differential.arrow.arrange import ArrowArranger
    from sparktimely.differential.arrow.batch import COMBINE_FROM
    from sparktimely.progress.timestamp import TimeKind

    def sealed(sizes):
        arranger = ArrowArranger("Arrange", "k", TimeKind(int))
        for size in sizes:
            arranger.push(0, to_batch(["k"], [pa.int64()], [((i % 10,), 1) for i in range(size)]))
        [(_, batch)] = arranger.seal([0], [1], [0])
        return len(batch), sorted(zip(batch.data.column("k").to_pylist(), batch.diffs.tolist()))
    long, half = COMBINE_FROM + 6, COMBINE_FROM // 2 + 3
    assert sealed([long]) == (10, [(k, long // 10 + (k < long % 10)) for k in range(10)])
    assert sealed([half, half])[0] == 10
    assert sealed([6, 6]) == (6, [(k, 2) for k in range(6)])

    def no_grouping(*args, **kwargs):
        raise AssertionError("a short batch without repeats was grouped")
    monkeypatch.setattr(batch_module, "consolidate", no_grouping)
    assert sealed([6]) == (6, [(k, 1) for k in range(6)])


def test_arranger_consolidates_what_combiners_hashed_without_hashing(monkeypatch):
    """At two or more workers a combiner gives each batch the hashes of its keys before the
    exchange; the arrangement then consolidates the batches sealed together (from several
    workers, at several times) by those hashes and never hashes a key itself."""
    from sparktimely.differential.arrow import batch as arrow_batch
    from sparktimely.differential.arrow.arrange import ArrowArranger
    from sparktimely.differential.arrow.batch import COMBINE_FROM, HASH, with_key_hashes
    from sparktimely.progress.timestamp import TimeKind

    keys = COMBINE_FROM // 2 + 7
    sent = [(0, [((f"k{i % keys}", i % 3), 1) for i in range(keys * 2)]),      # worker 0
            (0, [((f"k{i % keys}", i % 3), -1) for i in range(keys)]),         # worker 1
            (1, [((f"k{i}", 0), 2) for i in range(5)])]                         # a later time
    combined = [(time, with_key_hashes("Arrange", to_batch(["w", "v"], [pa.string(), pa.int64()],
                                                           updates), "w"))
                for time, updates in sent]
    assert all(HASH in b.schema.names for _, b in combined)

    def no_hashing(*args):
        raise AssertionError("the arrangement hashed keys a combiner had hashed")
    monkeypatch.setattr(arrow_batch, "hash_rows", no_hashing)
    arranger = ArrowArranger("Arrange", "w", TimeKind(int))
    for time, b in combined:
        arranger.push(time, b)
    [(_, sealed)] = arranger.seal([0], [2], [0])
    expected = Counter()
    for time, updates in sent:
        for (w, v), diff in updates:
            expected[(w, v, time)] += diff
    got = Counter()
    for w, v, time, diff in zip(sealed.data.column("w").to_pylist(),
                                sealed.data.column("v").to_pylist(), sealed.times[0].tolist(),
                                sealed.diffs.tolist()):
        assert (w, v, time) not in got, "the sealed batch is not consolidated"
        got[(w, v, time)] = diff
    assert got == Counter({k: n for k, n in expected.items() if n})
    assert sealed.data.column_names == ["w", "v", "diff"]
    assert (sealed.hashes[1:] >= sealed.hashes[:-1]).all()


def arrow_batch_at(rows, time, key):
    """An ArrowBatch of ``(row tuple, diff)`` updates (columns ``k`` string, ``v`` int) at
    ``time``, not consolidated: merges must consolidate what repeats."""
    from sparktimely.differential.arrow.batch import ArrowBatch, constant_times
    from sparktimely.progress.timestamp import TimeKind
    data = pa.table({"k": pa.array([k for (k, _), _ in rows], pa.string()),
                     "v": pa.array([v for (_, v), _ in rows], pa.int64()),
                     "diff": pa.array([d for _, d in rows], pa.int64())})
    return ArrowBatch.build(data, constant_times(TimeKind(int), time, len(rows)), key,
                            [time], [time + 1], consolidated=True)


def batch_updates(batch):
    """``Counter`` of ``(k, v, time) -> diff`` of an ArrowBatch (equal rows summed)."""
    got = Counter()
    for k, v, t, d in zip(batch.data.column("k").to_pylist(), batch.data.column("v").to_pylist(),
                          batch.times[0].tolist(), batch.diffs.tolist()):
        got[(k, v, t)] += d
    return Counter({u: d for u, d in got.items() if d})


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None, database=None)
@given(parts=hs.lists(hs.lists(hs.tuples(hs.tuples(hs.sampled_from(["a", "b", "c", "dd", "e"]),
                                                   hs.integers(0, 2)), diffs), max_size=12),
                      min_size=2, max_size=4),
       key=hs.sampled_from([["k"], ["k", "v"]]), since=hs.sampled_from([[], [1], [9]]),
       data=hs.data())
def test_piecewise_merge_equals_the_whole_merge(parts, key, since, data):
    """A merge done in pieces (``PiecewiseMerge``: ranges of hashes, each merged as whole
    batches are, with as much work as each call allows) gives the batch the whole merge
    (``merged_all``) gives: the same consolidated updates, the same bounds, sorted by hash,
    at every piece size from one row to more than all of them."""
    batches = [arrow_batch_at(rows, t, key) for t, rows in enumerate(parts)]
    whole = batches[0].merged_all(batches[1:], since)
    total = sum(len(b) for b in batches)
    for piece_rows in sorted({1, 2, max(total - 1, 1), max(total, 1), total + 1}):
        merge = batches[0].merging(batches[1:], since, piece_rows)
        calls = 0
        while not merge.work(data.draw(hs.integers(1, total + 2), label="rows")):
            calls += 1
            assert calls <= total + 1, "the merge does not end"
        merged = merge.result()
        assert batch_updates(merged) == batch_updates(whole), f"pieces of {piece_rows} rows"
        assert len(merged) == len(whole), "the merged pieces are not consolidated"
        assert (merged.hashes[1:] >= merged.hashes[:-1]).all()
        assert (merged.lower, merged.upper, merged.since) == (whole.lower, whole.upper,
                                                              whole.since)
        assert merged.data.schema == whole.data.schema


def test_large_merges_spend_the_fuel_new_batches_earn_and_idle_work_finishes_them(monkeypatch):
    """A merge of large batches proceeds in pieces: a new batch earns FUEL times its rows of
    merge work, spent once it covers a piece (so one small update does not pay for a whole
    piece), and an idle worker's ``idle_work`` does a piece per call, then tidies the small
    batches; what the trace holds never changes."""
    from sparktimely.differential.trace import spine as spine_module
    monkeypatch.setattr(spine_module, "PIECE_ROWS", 40)
    monkeypatch.setattr(spine_module, "FUEL", 1)
    monkeypatch.setattr(spine_module, "SMALL_BATCH", 4)
    spine = spine_module.Spine([0])
    spine.set_frontiers([0], [])
    inserted = Counter()

    def insert(rows, time):
        batch = arrow_batch_at([((f"k{i}", time), 1) for i in rows], time, ["k"])
        inserted.update(batch_updates(batch))
        spine.insert(batch)

    def held():
        total = Counter()
        for batch in spine.batches():
            total.update(batch_updates(batch))
        return +total
    insert(range(30), 0)
    insert(range(30, 60), 1)                  # a pair within a factor of two: merge begun
    merge = spine._merging
    assert merge is not None and merge.next == 0 and len(spine.batches()) == 2
    for time in range(2, 11):                 # 30 + 9 rows of fuel: less than a piece
        insert([time], time)
    assert spine._merging is merge and merge.next == 0
    insert([11], 11)                          # 40: one piece's worth
    assert spine._merging is None or merge.next > 0
    assert held() == inserted
    while spine.idle_work():
        assert held() == inserted
    assert spine._merging is None and held() == inserted
    assert [len(b) for b in spine.batches()][0] == 60 and len(spine.batches()) <= 2
    assert not spine.idle_work()


@settings(max_examples=80, deadline=None, database=None)
@given(new=hs.lists(hs.tuples(hs.integers(0, 5), hs.sampled_from([1, -1, 2])), max_size=6),
       new_time=hs.tuples(hs.integers(0, 3), hs.integers(0, 3)),
       olds=hs.lists(hs.lists(hs.tuples(hs.integers(0, 5), hs.integers(0, 3), hs.integers(0, 3),
                                        hs.sampled_from([1, -1])), min_size=1, max_size=6),
                     max_size=3),
       key_type=hs.sampled_from([pa.int64(), pa.string()]), swapped=hs.booleans())
def test_arrow_join_of_a_batch_at_one_time_matches_every_pair(new, new_time, olds, key_type,
                                                              swapped):
    """The Arrow joiner against every pair of rows: a new batch at one time, and trace
    batches whose rows are all at or before it (each match at the new batch's time, with no
    per-row times) or not (times joined row by row), on integer keys (hashes compared) and
    string keys (key columns compared)."""
    from sparktimely.differential.arrow.batch import ArrowBatch, times_for
    from sparktimely.differential.arrow.join import ArrowJoiner
    from sparktimely.progress import Product
    from sparktimely.progress.timestamp import TimeKind
    kind = TimeKind(int, 1)

    def key(k):
        return k if key_type == pa.int64() else f"key {k}"

    def batch(keys, times, diffs, name):
        table = pa.table({"k": pa.array([key(k) for k in keys], key_type),
                          name: pa.array(range(len(keys)), pa.int64()),
                          "diff": pa.array(diffs, pa.int64())})
        return ArrowBatch.build(table, times_for(kind, times), ["k"], [], [], kind,
                                consolidated=True)
    at = Product(*new_time)
    mine = batch([k for k, _ in new], [at] * len(new), [d for _, d in new], "v")
    others = [batch([k for k, *_ in old], [Product(a, b) for _, a, b, _ in old],
                    [d for *_, d in old], "w") for old in olds]
    output = ArrowJoiner("join", False, kind).join(mine, others, swapped, at)
    got = Counter()
    for time, rows in output:
        for row in rows.to_pylist():
            got[(row["k"], row["v"], row["w"], time)] += row["diff"]
    expected = Counter()
    mine_rows = mine.data.to_pylist()
    for other in others:
        for i, o in enumerate(other.data.to_pylist()):
            ot = Product(*other.times[:, i].tolist())
            for m in mine_rows:
                if m["k"] == o["k"]:
                    expected[(m["k"], m["v"], o["w"], at.join(ot))] += m["diff"] * o["diff"]
    assert +got == +expected and -got == -expected


@settings(max_examples=150, deadline=None, database=None)
@given(hashes=hs.lists(hs.integers(0, 9), max_size=30),
       probes=hs.lists(hs.integers(0, 9), max_size=4))
def test_match_sorted_pairs_every_probe_with_its_rows(hashes, probes):
    """Every ``(probe, row)`` pair of equal hashes, whether one probe is searched (two
    searches) or several (one vectorised search): against a scan of all pairs."""
    import numpy as np
    from sparktimely.differential.arrow.batch import match_sorted
    big = 2 ** 63                   # hashes beyond int64, as uint64 hashes are
    found = match_sorted(np.array(sorted(h + big for h in hashes), np.uint64),
                         np.array([p + big for p in probes], np.uint64))
    expected = sorted((i, j) for i, p in enumerate(probes)
                      for j, h in enumerate(sorted(hashes)) if h == p)
    assert len(found[0]) == len(found[1]) == len(expected)
    assert sorted(zip(*(x.tolist() for x in found))) == expected
    assert all(x.dtype == np.int64 for x in found)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hashes=hs.lists(hs.integers(0, 9), max_size=80), small=hs.sampled_from([0, 32, 100]))
def test_unsorted_order_sorts_hashes_on_both_paths(monkeypatch, hashes, small):
    """The order that sorts a batch's hashes (None when they are sorted), from Python for
    short arrays and from numpy for long ones (``small`` moves the line): against
    Python's sort of the hashes."""
    from sparktimely.differential.arrow import batch as arrow_batch
    monkeypatch.setattr(arrow_batch, "SMALL_ROWS", small)
    values = np.array([h + 2 ** 63 for h in hashes], np.uint64)
    order = arrow_batch.unsorted_order(values)
    if hashes == sorted(hashes):
        assert order is None
    else:
        assert values[order].tolist() == sorted(values.tolist())


def test_arrow_join_of_a_zero_diff_row_gives_no_output(run):
    """An update with diff 0 changes nothing: the join gives nothing for it, not a row with
    diff 0 (an arrangement's batches hold no zero diffs, as differential's)."""
    left = [[((1, "a"), 0), ((2, "b"), 1)]]
    right = [[((1, 7), 1), ((2, 8), 1), ((2, 8), 0)]]
    output = run_arrow(lambda scope, a, b: a.join(b, on="k"), [left, right], [KV, KX], run)
    assert sorted(output) == [((2, "b", 8), 0, 1)], f"{run.workers} worker(s)"


@pytest.mark.parametrize("entry", ["update_batch", "as_collection"])
@pytest.mark.parametrize("operation", ["antijoin", "iterate"])
def test_a_diff_column_anywhere_meets_the_operators_batches(run, entry, operation):
    """Batches whose diff is not last met the operators' diff-last batches in antijoin's
    and iterate's concats: two schemas (at 1 and 2 workers; 3 by luck of the placement)."""
    rows = {"diff": pa.array([1, 1, 2], pa.int64()), "k": [1, 2, 2], "v": [10, 20, 20]}
    keys = pa.record_batch({"k": [1], "diff": pa.array([1], pa.int64())})

    def job(worker):
        data, held = dd.InputSession(), dd.InputSession()
        stream = st.InputHandle()

        def build(scope):
            if entry == "update_batch":
                collection = data.to_collection(scope)
            else:
                collection = dd.as_collection(scope.input_from(stream))
            if operation == "antijoin":
                result = collection.antijoin(held.to_collection(scope), on="k")
            else:
                result = collection.iterate(lambda inner: inner.distinct())
            return result.inner.capture(), result.probe()
        captured, probe = worker.dataflow(build)
        if worker.index == 0:
            if operation == "antijoin":
                held.update_batch(keys)
            if entry == "update_batch":
                data.update_batch(pa.record_batch(rows))
            else:
                stream.send_batch(pa.record_batch(rows))
        data.close(), held.close(), stream.close()
        worker.step_while(lambda: not probe.done())
        return [row for _, table in captured.extract() for row in table.to_pylist()]
    net: Counter = Counter()
    for part in run(job):
        for row in part:
            net[(row["k"], row["v"])] += row["diff"]
    expected = {(2, 20): 3} if operation == "antijoin" else {(1, 10): 1, (2, 20): 1}
    assert +net == expected
