"""Every collection operator against a brute-force oracle, on generated insert/remove
sequences, at 1, 2 and 3 workers (the ``run`` fixture: in-process workers in a seeded
interleaving): the output accumulated to each round must equal the operator applied, from
scratch, to the inputs accumulated to that round."""
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sparktimely.differential as dd
from sparktimely.differential.operators.reduce import (CountReduction, PythonReducer,
                                                       ThresholdReduction, TotalsReducer,
                                                       distinct_count)
from sparktimely.differential.trace import Batch
from dd_harness import (accumulate, check_rounds, counts_and_distinct, join_pairs,
                        tagged_counts_and_distinct)

SETTINGS = settings(max_examples=12, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

keys = hs.integers(0, 4)
vals = hs.sampled_from(["a", "b", "c"])
diffs = hs.sampled_from([1, 1, 1, -1, 2])


def rounds_of(data):
    """One input: up to 4 rounds of up to 6 ``(data, diff)`` updates."""
    return hs.lists(hs.lists(hs.tuples(data, diffs), max_size=6), min_size=1, max_size=4)


pairs = rounds_of(hs.tuples(keys, vals))
singles = rounds_of(keys)


def scaled(counts, f):
    out = Counter()
    for x, n in counts.items():
        for y, m in f(x):
            out[y] += n * m
    return dict(out)


@pytest.mark.timeout(120)
@SETTINGS
@given(inputs=pairs)
def test_record_operators(run, inputs):
    def build(scope, c):
        return (c.map(lambda kv: (kv[1], kv[0])).filter(lambda vk: vk[1] != 3)
                .flat_map(lambda vk: [vk, (vk[0], -1)]).explode(lambda x: [(x, 2)])
                .negate().concat(c).consolidate())

    def oracle(c):
        mapped = scaled(c, lambda kv: [((kv[1], kv[0]), 1)] if kv[0] != 3 else [])
        flat = scaled(mapped, lambda vk: [(vk, 1), ((vk[0], -1), 1)])
        out = Counter({x: -2 * n for x, n in flat.items()})
        out.update(c)
        return dict(out)
    check_rounds(build, oracle, [inputs], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(left=pairs, right=pairs)
def test_join(run, left, right):
    check_rounds(lambda scope, a, b: a.join(b), join_pairs, [left, right], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(left=pairs, right=pairs)
def test_join_map_and_join_core(run, left, right):
    def build(scope, a, b):
        mapped = a.join_map(b, lambda k, v1, v2: (k, v1 + v2))
        core = a.arrange_by_key().join_core(b.arrange_by_key(), lambda k, v1, v2: [k, k])
        return mapped.concat(core.map(lambda k: (k, "core")))

    def oracle(a, b):
        out = Counter()
        for (k1, v1), n1 in a.items():
            for (k2, v2), n2 in b.items():
                if k1 == k2:
                    out[(k1, v1 + v2)] += n1 * n2
                    out[(k1, "core")] += 2 * n1 * n2
        return dict(out)
    check_rounds(build, oracle, [left, right], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=pairs, chosen=singles)
def test_semijoin_and_antijoin(run, data, chosen):
    def build(scope, c, k):
        keys_once = k.distinct()
        return c.semijoin(keys_once).map(lambda kv: ("in", kv)).concat(
            c.antijoin(keys_once).map(lambda kv: ("out", kv)))

    def oracle(c, k):
        present = {x for x, n in k.items() if n > 0}
        out = Counter()
        for (key, val), n in c.items():
            out[("in" if key in present else "out", (key, val))] += n
        return dict(out)
    check_rounds(build, oracle, [data, chosen], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(inputs=singles)
def test_count_distinct_threshold(run, inputs):
    def build(scope, c):
        return tagged_counts_and_distinct(c).concat(
            c.threshold(lambda x, n: n * n if n > 1 else 0).map(lambda x: ("threshold", x)))

    def oracle(c):
        out = counts_and_distinct(c)
        for x, n in c.items():
            if n > 1:
                out[("threshold", x)] += n * n
        return dict(out)
    check_rounds(build, oracle, [inputs], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(inputs=pairs)
def test_reduce(run, inputs):
    def top_two(key, values, output):
        for val, count in values[-2:]:
            output.append((val, count))
        output.append((sum(c for _, c in values), 1))

    def oracle(c):
        out = Counter()
        by_key: dict = {}
        for (k, v), n in c.items():
            if n > 0:
                by_key.setdefault(k, []).append((v, n))
        for k, values in by_key.items():
            values.sort()
            for val, count in values[-2:]:
                out[(k, val)] += count
            out[(k, sum(n for _, n in values))] += 1
        return dict(out)
    check_rounds(lambda scope, c: c.reduce(top_two), oracle, [inputs], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(inputs=pairs)
def test_consolidate_and_arranged_reads(run, inputs):
    def build(scope, c):
        arranged = c.arrange_by_key()
        return dd.concatenate(scope, [
            arranged.as_collection(lambda k, v: ("pair", k, v)),
            arranged.count().map(lambda kn: ("count", kn)),
            arranged.reduce(lambda k, vals, out: out.append((len(vals), 1)))
                    .map(lambda kn: ("distinct values", kn)),
        ]).consolidate()

    def oracle(c):
        out = Counter()
        per_key = Counter()
        values: dict = {}
        for (k, v), n in c.items():
            out[("pair", k, v)] += n
            per_key[k] += n
            if n > 0:
                values.setdefault(k, set()).add(v)
        for k, n in per_key.items():
            if n:
                out[("count", (k, n))] += 1
        for k, vs in values.items():
            out[("distinct values", (k, len(vs)))] += 1
        return dict(out)
    check_rounds(build, oracle, [inputs], run)


@settings(max_examples=300, deadline=None, database=None)
@given(rounds=hs.lists(hs.lists(hs.tuples(keys, hs.integers(0, 1), hs.integers(0, 1), diffs),
                                max_size=6), min_size=1, max_size=6),
       distinct=hs.booleans(), start=hs.integers(0, 3))
def test_count_and_distinct_from_key_totals_match_reading_their_output_trace(rounds, distinct,
                                                                             start):
    """``count`` and ``distinct`` at totally ordered times keep each key's summed diff
    instead of traces: round by round (two times each), they give what the reducer reading
    its output trace gives, and what the output should be from scratch at every time. One
    made after ``start`` rounds (as after a resume) takes the totals from the input trace."""
    reduction = ThresholdReduction(distinct_count) if distinct else CountReduction()
    assert reduction.of_total
    traced = PythonReducer(reduction, True)
    totals = TotalsReducer(reduction)
    history: list = []
    out_history: list = []
    given_so_far: list = []
    out_so_far: list = []
    for i, part in enumerate(rounds):
        lower, upper = [2 * i], [2 * i + 2]
        updates = [((key, val), 2 * i + late, diff) for key, val, late, diff in part]
        batch = Batch.from_updates(updates, lower, upper)
        expected, out_batches = traced.retire([batch], history, out_history, lower, upper)
        if i >= start:
            produced, no_batches = totals.retire([batch], history, [], lower, upper)
            assert no_batches == []
            assert sorted(u for _, us in produced for u in us) == \
                sorted(u for _, us in expected for u in us)
        history.append(batch)
        out_history += out_batches
        given_so_far += updates
        out_so_far += [u for _, us in expected for u in us]
        for time in (2 * i, 2 * i + 1):
            counts: Counter = Counter()
            for (key, _), t, diff in given_so_far:
                counts[key] += diff if t <= time else 0
            scratch = {(k if distinct else (k, n)): 1 for k, n in counts.items()
                       if (n > 0 if distinct else n)}
            assert accumulate(out_so_far, time) == scratch


@pytest.mark.timeout(120)
@pytest.mark.parametrize("records", ["arrow count", "python count", "python distinct"])
@pytest.mark.parametrize("shared", [False, True])
def test_count_lets_go_of_an_input_trace_no_other_operator_reads(run, monkeypatch, records,
                                                                 shared):
    """``count`` (and ``distinct`` of Python records) at totally ordered times read no input
    trace after their first interval, so they let go of their handle on it: over a
    collection, whose arrangement no other operator reads, that trace keeps nothing (a
    collection's ``count()`` at int times makes no input trace at all). An arrangement the
    program holds as well keeps its trace for it, whole. The output is exact round by round
    either way, with removals that take keys to zero and below."""
    import random

    import pyarrow as pa

    from sparktimely.differential.trace.handle import TraceBox
    arrow, distinct = records == "arrow count", records == "python distinct"
    boxes: list = []
    init = TraceBox.__init__
    monkeypatch.setattr(TraceBox, "__init__",
                        lambda box, *args, **kwargs: (init(box, *args, **kwargs),
                                                      boxes.append(box))[0])
    output: Counter = Counter()             # every worker's (in-process workers)

    def seen(time, batch):
        if arrow:
            output.update({(r["w"], r["count"]): r["diff"] for r in batch.to_pylist()})
        else:
            output.update({data: diff for data, _, diff in batch})

    def job(worker):
        words = dd.InputSession()

        def build(scope):
            collection = words.to_collection(scope)
            if not shared:
                counted = collection.count(key="w") if arrow else (
                    collection.distinct() if distinct else collection.count())
                return counted.inspect_batch(seen).probe(), None
            arranged = collection.arrange_by_key(key="w") if arrow else \
                collection.arrange_by_self()
            counted = arranged.distinct() if distinct else arranged.count()
            return counted.inspect_batch(seen).probe(), arranged.trace
        probe, trace = worker.dataflow(build)
        rng = random.Random(5)
        sent: Counter = Counter()
        for round in range(1, 8):
            updates = [(f"w{rng.randrange(6)}", rng.choice([1, 1, -1, 2])) for _ in range(9)]
            if worker.index == 0:
                sent.update(dict.fromkeys([w for w, _ in updates], 0))
                for w, diff in updates:
                    sent[w] += diff
                if arrow:
                    words.update_batch(pa.record_batch({
                        "w": pa.array([w for w, _ in updates]),
                        "diff": pa.array([d for _, d in updates], pa.int64())}))
                else:
                    for w, diff in updates:
                        words.update(w, diff)
            words.advance_to(round)
            worker.step_while(lambda: probe.less_than(round))
            if worker.index == 0:           # the others may see the next round's words sent
                expected = {w: 1 for w, n in sent.items() if n > 0} if distinct else \
                    {(w, n): 1 for w, n in sent.items() if n}
                assert +output == Counter(expected), round
        kept = None
        if trace is not None:
            totals: Counter = Counter()
            for batch in trace.batches_through(trace.read_upper()):
                if arrow:
                    for w, diff in zip(batch.data.column("w").to_pylist(), batch.diffs.tolist()):
                        totals[w] += diff
                else:
                    for w, updates in batch.items():
                        totals[w] += sum(diff for _, _, diff in updates)
            kept = totals
        inputs = [b for b in boxes if b.worker is worker and "output" not in b.name]
        held = [len(b.spine) for b in inputs]       # updates, while the dataflow runs
        words.close()
        worker.run()
        return held, kept, sent if worker.index == 0 else None
    results = run(job)
    sent = results[0][2]
    if not shared:
        assert [held for held, _, _ in results] == [[0] if distinct else []] * run.workers
    else:                                   # the arrangement's trace: every worker's keys
        kept = sum((kept for _, kept, _ in results), Counter())
        assert {w: n for w, n in kept.items() if n} == {w: n for w, n in sent.items() if n}
