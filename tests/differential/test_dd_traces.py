"""Traces and their handles: imports into other dataflows (the intent of differential's
tests/import.rs), compaction, merging (tests/trace.rs), freeing, and the handle API of shared
arrangements."""
import gc
import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sparktimely as st
import sparktimely.differential as dd
from dd_harness import accumulate, arranged_input, check_rounds
from sparktimely.differential.arrow.batch import ArrowBatch, constant_times
from sparktimely.differential.trace import Batch, Spine
from sparktimely.differential.trace import batch as batch_module
from sparktimely.differential.trace import spine as spine_module
from sparktimely.differential.trace.handle import TraceAgent, TraceBox
from sparktimely.differential.trace.spine import (IDLE_ADVANCES, MAX_SMALL, MAX_TINY, SMALL_BATCH,
                                                 TINY_ROWS)
from sparktimely.progress.timestamp import TimeKind

EPOCHS = [
    [((2, 0), 1), ((1, 0), 1), ((1, 3), 1), ((4, 2), 1)],
    [((2, 0), -1), ((1, 0), -1)],
    [((2, 0), 1), ((1, 3), -1)],
    [((1, 0), 1), ((1, 3), 1), ((2, 0), -1), ((4, 2), -1)],
    [((2, 0), 1), ((4, 2), 1), ((1, 3), -1)],
    [((1, 3), 1), ((4, 2), -1)],
]


def count_values(pairs):
    """Oracle of the import tests: per key, how many (key, val) records it has."""
    per_key: dict = {}
    for (k, _), n in pairs.items():
        per_key[k] = per_key.get(k, 0) + n
    return {(k, n): 1 for k, n in per_key.items() if n}


def expected_per_epoch():
    state: dict = {}
    result = []
    for updates in EPOCHS:
        for data, diff in updates:
            state[data] = state.get(data, 0) + diff
        result.append(count_values({k: v for k, v in state.items() if v}))
    return result


def feed_epochs(worker, session):
    for t, updates in enumerate(EPOCHS):
        session.advance_to(t) if t else None
        for j, (data, diff) in enumerate(updates):
            if j % worker.peers == worker.index:
                session.update(data, diff)
    session.close()


def check_epochs(updates):
    for t, expected in enumerate(expected_per_epoch()):
        assert accumulate(updates, t) == expected, f"epoch {t}"


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_a_sealed_trace_keeps_no_reference_per_import_after_the_import_is_gone(workers):
    """A finished arrangement read by a short query dataflow per request: each import
    left its (dead) reference in the trace for good, since only a batch or a seal, which a
    sealed trace sends no more, pruned them. The queries' counts are the oracle's."""
    def job(worker):
        data = [(k % 4, k) for k in range(20)]
        trace = worker.dataflow(lambda scope: dd.from_stream(
            scope.to_stream(data if worker.index == 0 else [])).arrange_by_key().trace)
        worker.run()
        answers = []
        for i in range(40):
            index = worker.next_dataflow_index()
            captured = worker.dataflow(lambda scope: trace.import_(scope).count().inner.capture())
            worker.run()
            answers.append(sorted((d, r) for _, batch in captured.extract() for d, _, r in batch))
            if i % 2:
                worker.drop_dataflow(index)
        return answers, len(trace._box._listeners)
    results = st.execute(job, workers=workers)
    for query in range(40):
        assert sorted(u for answers, _ in results for u in answers[query]) == [
            ((k, 5), 1) for k in range(4)]
    for _, listeners in results:
        assert listeners <= 1 + st.Worker.finished_kept     # the last import's, and the kept


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_import_follows_the_trace(workers):
    def job(worker):
        edges = dd.InputSession()
        trace = worker.dataflow(lambda scope: edges.to_collection(scope).arrange_by_key().trace)
        captured = worker.dataflow(lambda scope: trace.import_(scope).count().inner.capture())
        trace.close()
        feed_epochs(worker, edges)
        worker.run()
        return [u for _, batch in captured.extract() for u in batch]
    check_epochs([u for part in st.execute(job, workers=workers) for u in part])


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_import_of_a_completed_arrangement_replays_its_history(workers):
    def job(worker):
        edges = dd.InputSession()

        trace, probe = arranged_input(worker, edges)
        feed_epochs(worker, edges)
        worker.step_while(lambda: not probe.done())
        assert trace.read_upper() == []
        captured = worker.dataflow(lambda scope: trace.import_(scope).count().inner.capture())
        worker.run()
        return [u for _, batch in captured.extract() for u in batch]
    check_epochs([u for part in st.execute(job, workers=workers) for u in part])


@pytest.mark.timeout(60)
def test_import_of_a_stalled_arrangement_reaches_its_frontier(run):
    def job(worker):
        words = dd.InputSession()

        def build(scope):
            arranged = words.to_collection(scope).arrange_by_self()
            return arranged.trace, arranged.stream.probe()
        trace, probe = worker.dataflow(build)
        words.insert("Hello")
        words.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        words.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        probe2 = worker.dataflow(lambda scope: trace.import_(scope).stream.probe())
        # the input stays open at 2: the import must get there from the trace alone
        worker.step_while(lambda: probe2.less_than(2))
        frontier = probe2.frontier()
        words.close()
        worker.run()
        return frontier, trace.read_upper()
    assert run(job) == [([2], [])] * run.workers


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("idle", [False, True])
@pytest.mark.timeout(60)
def test_import_after_compaction_advances_times(workers, idle):
    """Each worker compacts its handle to a different time before importing: the imported
    updates are at the handle's frontier or later and accumulate correctly there. With
    ``idle``, the trace first tidies itself while its input advances with no data, which
    compacts its batches to that frontier, keeping its keys' lone updates' times."""
    def job(worker):
        data = dd.InputSession()

        trace, probe = arranged_input(worker, data)
        for t in range(4):
            if t:
                data.advance_to(t)
            data.insert((worker.index, t))
            data.insert((worker.index + 10, t))
            if t == 1:
                data.insert((worker.index + 20, t))     # a key's lone update
            if t == 2:
                data.remove((worker.index, 0))
        data.advance_to(4)
        worker.step_while(lambda: probe.less_than(4))
        trace.set_logical_compaction([2 + worker.index])
        trace.set_physical_compaction([])
        for t in range(5, 5 + 3 * IDLE_ADVANCES if idle else 0):
            data.advance_to(t)
            worker.step_while(lambda: probe.less_than(t))
        if idle:
            assert all(b.since == [2 + worker.index] for b in trace.batches())
        captured = worker.dataflow(lambda scope: trace.import_(scope).as_collection().inner.capture())
        data.close()
        worker.run()
        return worker.index, [u for _, batch in captured.extract() for u in batch]
    everything = []
    for index, updates in st.execute(job, workers=workers):
        assert all(t >= 2 + index for _, t, _ in updates), updates
        everything += updates
    expected = {}
    for w in range(workers):
        expected.update({(w, t): 1 for t in range(1, 4)})
        expected.update({(w + 10, t): 1 for t in range(4)})
        expected[w + 20, 1] = 1
    assert accumulate(everything, 5) == expected


@pytest.mark.parametrize("arrow", [False, True], ids=["records", "arrow"])
@pytest.mark.timeout(60)
def test_joins_with_an_import_read_its_history_as_of_its_frontier(run, arrow):
    """An import compacted to [3] holds its trace as of time 3: a join with it, whose other
    side starts at time 0, gives its matches with that history at time 3 or later (as the
    import's own replay is), never before, and accumulated there they are the join of the
    accumulations. Both joiners: Python records (semijoin, join_core) and Arrow rows."""
    import pyarrow as pa

    def job(worker):
        knows = dd.InputSession()
        trace = worker.dataflow(lambda scope: (
            knows.to_collection(scope).arrange_by_key(key="k") if arrow
            else knows.to_collection(scope).arrange_by_key()).trace)
        mine = [k for k in range(6) if k % worker.peers == worker.index]
        for t in range(3):
            if t:
                knows.advance_to(t)
            if arrow:
                knows.update_batch(pa.record_batch({"k": pa.array(mine, pa.int64()),
                                                    "v": [f"v{t}"] * len(mine),
                                                    "diff": pa.array([1] * len(mine))}))
            else:
                for k in mine:
                    knows.insert((k, f"v{t}"))
        knows.advance_to(4)
        worker.step_while(lambda: trace.read_upper() != [4])
        trace.set_logical_compaction([3])
        query = dd.InputSession()

        def build(scope):
            imported = trace.import_(scope)
            keys = query.to_collection(scope)
            if arrow:
                return [imported.semijoin(keys).inner.capture()]
            return [imported.semijoin(keys).inner.capture(),
                    imported.join_core(keys.arrange_by_self(),
                                       lambda k, v, _: [(k, v)]).inner.capture()]
        captures = worker.dataflow(build)
        if worker.index == 0:                   # at time 0: behind the import's frontier
            if arrow:
                query.update_batch(pa.record_batch({"k": pa.array([1, 4], pa.int64()),
                                                    "diff": pa.array([1, 1])}))
            else:
                query.insert(1)
                query.insert(4)
        query.close()
        knows.close()
        worker.run()
        if arrow:
            return [[((r["k"], r["v"]), t, r["diff"]) for t, table in captures[0].extract()
                     for r in table.to_pylist()]]
        return [[u for _, batch in c.extract() for u in batch] for c in captures]
    results = run(job)
    for output in zip(*results):
        updates = [u for part in output for u in part]
        assert updates and all(t >= 3 for _, t, _ in updates), updates
        assert accumulate(updates, 3) == {(k, f"v{t}"): 1 for k in (1, 4) for t in range(3)}


AHEAD_ROUNDS = {0: [((1, 10), 1), ((2, 20), 1)], 1: [((1, 11), 1)],
                2: [((2, 20), -1), ((2, 21), 1)], 3: [], 4: [((1, 12), 1)]}


@pytest.mark.parametrize("arrow", [False, True], ids=["records", "arrow"])
@pytest.mark.timeout(60)
def test_an_import_compacted_beyond_the_traces_upper_shows_later_batches_there_too(run, arrow):
    """Compaction set to [3] while the trace's upper is [1], then an import: the batches
    that come after it, at times 1 and 2, are shown as of [3] too (differential's
    import_frontier). They came at their own times, after the replay at 3: an Arrow
    distinct and reduce counted the output they had made at 3 again at 1 and 2."""
    def job(worker):
        data = dd.InputSession()

        def build(scope):
            collection = data.to_collection(scope)
            arranged = collection.arrange_by_key(key="k") if arrow else collection.arrange_by_key()
            return arranged.trace, arranged.stream.probe()
        trace, upstream = worker.dataflow(build)

        def send(r):
            mine = [u for i, u in enumerate(AHEAD_ROUNDS[r]) if i % worker.peers == worker.index]
            if arrow and mine:
                data.update_batch(pa.record_batch({
                    "k": pa.array([k for (k, _), _ in mine], pa.int64()),
                    "v": pa.array([v for (_, v), _ in mine], pa.int64()),
                    "diff": pa.array([d for _, d in mine], pa.int64())}))
            elif mine:
                for pair, diff in mine:
                    data.update(pair, diff)
        send(0)
        data.advance_to(1)
        worker.step_while(lambda: upstream.less_than(1))
        trace.set_logical_compaction([3])                  # beyond the upper, [1]

        def query(scope):
            imported = trace.import_(scope)
            if not arrow:
                return imported.as_collection().inner.capture(), None, None
            return (imported.as_collection().inner.capture(), imported.distinct().inner.capture(),
                    imported.reduce(aggs={"top": ("max", "v")}).inner.capture())
        captures = worker.dataflow(query)
        for r in range(1, 5):
            send(r)
            data.advance_to(r + 1)
            worker.step()
        data.close()
        worker.run()

        def updates(capture):
            if capture is None:
                return []
            if not arrow:
                return [u for _, batch in capture.extract() for u in batch]
            return [(tuple(v for k, v in row.items() if k != "diff"), t, row["diff"])
                    for t, table in capture.extract() for row in table.to_pylist()]
        return [updates(capture) for capture in captures]
    parts = run(job)
    imported, distinct, tops = ([u for part in parts for u in part[i]] for i in range(3))
    assert imported and all(t >= 3 for _, t, _ in imported), imported
    present: Counter = Counter()
    for t in range(5):
        present.update({pair: diff for pair, diff in AHEAD_ROUNDS[t]})
        if t < 3:
            continue
        rows = {pair: n for pair, n in present.items() if n}
        assert accumulate(imported, t) == rows, f"time {t}"
        if arrow:
            assert accumulate(distinct, t) == {pair: 1 for pair in rows}, f"time {t}"
            top = {k: max(v for (k2, v) in rows if k2 == k) for k, _ in rows}
            assert accumulate(tops, t) == {(k, v): 1 for k, v in top.items()}, f"time {t}"


@pytest.mark.timeout(60)
def test_a_count_of_an_arrow_import_counts_at_its_frontier(run):
    """An Arrow trace whose rows sit in a batch of one time ([1, 2)), compacted to [2] and
    imported: the import's count is at time 2 or later (the rows were advanced there; the
    count's shortcut for a batch of one time dated them at its lower bound, 1), and there
    it is the count of the accumulated rows."""
    import pyarrow as pa

    def job(worker):
        data = dd.InputSession()
        trace = worker.dataflow(lambda scope: data.to_collection(scope)
                                .arrange_by_key(key="k").trace)
        data.advance_to(1)
        worker.step_while(lambda: trace.read_upper() != [1])
        keys = [k for k in range(4) if k % worker.peers == worker.index]
        data.update_batch(pa.record_batch({"k": pa.array(keys, pa.int64()),
                                           "v": pa.array(keys, pa.int64()),
                                           "diff": pa.array([1] * len(keys), pa.int64())}))
        data.advance_to(2)
        worker.step_while(lambda: trace.read_upper() != [2])
        trace.set_logical_compaction([2])
        counts = worker.dataflow(lambda scope: trace.import_(scope).count().inner.capture())
        data.close()
        worker.run()
        return [((r["k"], r["count"]), t, r["diff"]) for t, table in counts.extract()
                for r in table.to_pylist()]
    updates = [u for part in run(job) for u in part]
    assert updates and all(t >= 2 for _, t, _ in updates), updates
    assert accumulate(updates, 2) == {(k, 1): 1 for k in range(4)}


@pytest.mark.timeout(60)
def test_imported_batches_are_the_traces_own(run):
    """An import shares the trace's batches: no copy of the data."""
    def job(worker):
        data = dd.InputSession()

        trace, probe = arranged_input(worker, data)
        for i in range(100):
            data.insert((i, i))
        data.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        seen = []
        worker.dataflow(lambda scope: trace.import_(scope).stream.inspect_batch(
            lambda t, batches: seen.extend(batches)))
        worker.step()
        worker.step()
        data.close()
        worker.run()
        return seen, trace.batches()
    for seen, held in run(job):
        assert len(seen) == 1 and seen[0] is held[0]


@pytest.mark.skipif(not hasattr(st.Worker, "drop_dataflow"), reason="needs worker.drop_dataflow")
@pytest.mark.timeout(60)
def test_dropping_a_query_dataflow_releases_its_handles(run):
    def job(worker):
        data = dd.InputSession()
        trace = worker.dataflow(lambda scope: data.to_collection(scope).arrange_by_key().trace)
        box = trace._box
        handles_before = box._handles
        index = worker.next_dataflow_index()
        worker.dataflow(lambda scope: trace.import_(scope).count().probe())
        during = box._handles
        worker.drop_dataflow(index)
        after = box._handles
        data.close()
        worker.run()
        return handles_before, during, after
    for before, during, after in run(job):
        assert during > before and after == before


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_a_dropped_query_dataflow_leaves_nothing_for_the_cycle_collector(workers):
    """A query dataflow per request (import, semijoin, join, count, reduce, iterate) is
    freed when it is dropped, by reference counting alone: its operators' state holds no
    reference cycle that would wait for the cycle collector (compiled closures that call
    each other would). Worker processes: each has a collector of its own to turn off."""
    def job(worker):
        knows = dd.InputSession()
        trace = worker.dataflow(lambda scope: knows.to_collection(scope).arrange_by_key().trace)
        for i in range(worker.index, 40, worker.peers):
            knows.insert((i % 10, i))
        knows.advance_to(1)

        def query(scope, people):
            known = trace.import_(scope).as_collection()
            asked = people.to_collection(scope)
            friends = known.semijoin(asked)
            pairs = known.join(asked.map(lambda person: (person, person)))
            reach = asked.iterate(lambda reached: known.enter(reached.scope).semijoin(reached)
                                  .map(lambda kv: kv[1] % 10).concat(reached).distinct())
            counted = friends.map(lambda kv: kv[0]).count()
            reduced = pairs.reduce(lambda key, values, output: output.append((len(values), 1)))
            return (reach.concat(counted.map(lambda kc: kc[0])).concat(reduced.map(len))
                    .probe())
        collected = []
        for round in range(3):
            people = dd.InputSession()
            index = worker.next_dataflow_index()
            gc.collect()
            gc.disable()
            try:
                done = worker.dataflow(lambda scope: query(scope, people))
                if worker.index == 0:
                    people.insert(round)
                people.advance_to(1)
                worker.step_while(lambda: done.less_than(1))
                people.close()
                worker.drop_dataflow(index)
                collected.append(gc.collect())
            finally:
                gc.enable()
        knows.close()
        return collected
    assert st.execute(job, workers=workers) == [[0, 0, 0]] * workers


@pytest.mark.parametrize("closed_first", [False, True])
@pytest.mark.timeout(30)
def test_dropping_the_arranging_dataflow_completes_its_imports(run, closed_first):
    """Once the arrangement's dataflow is dropped nothing more comes, so the trace is sealed
    at the empty frontier (as differential's TraceWriter when dropped): its imports complete
    with what it had, whether or not a handle on it is still open."""
    def job(worker):
        data = dd.InputSession()
        index = worker.next_dataflow_index()
        trace, _ = arranged_input(worker, data)

        def query(scope):
            imported = trace.import_(scope).as_collection()
            return imported.inner.capture(), imported.probe()
        captured, done = worker.dataflow(query)
        if worker.index == 0:
            data.insert((1, "a"))
        data.advance_to(1)
        worker.step_while(lambda: done.less_than(1))
        upper = None
        if closed_first:
            trace.close()
        worker.drop_dataflow(index)
        if not closed_first:
            upper = trace.read_upper()
        data.insert((2, "b"))
        data.close()
        worker.run()
        return upper, [u for _, batch in captured.extract() for u in batch]
    results = run(job)
    assert [upper for upper, _ in results] == [None if closed_first else []] * run.workers
    assert [u for _, updates in results for u in updates] == [((1, "a"), 0, 1)]


@pytest.mark.timeout(60)
def test_a_trace_no_handle_holds_is_freed(run):
    def job(worker):
        data = dd.InputSession()

        trace, probe = arranged_input(worker, data)
        box = trace._box
        if worker.index == 0:
            data.insert((1, 1))
        data.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        held = len(box.spine)
        trace.close()
        with pytest.raises(RuntimeError, match="closed"):
            trace.import_(None)
        data.insert((2, 2))
        data.close()
        worker.run()
        return held, box.freed, len(box.spine)
    results = run(job)
    assert sum(held for held, _, _ in results) == 1          # the one update, at its key's worker
    assert [(freed, left) for _, freed, left in results] == [(True, 0)] * run.workers


def imported_accumulations_match(imports: list, sent: list, times: int) -> None:
    """Assert that each import's updates (``(since, updates)``, merged over workers)
    accumulate to the input's, recomputed from the ``sent`` updates at ``0 .. times - 1``,
    at every time from its ``since`` on, and change nothing later. (Earlier times are not
    asked about: a batch the arrangement seals after the import arrives with its own
    times, as in differential.)"""
    for i, (since, updates) in enumerate(imports):
        last = max(since, times - 1)
        for t in range(since, last + 1):
            assert accumulate(updates, t) == accumulate(sent, t), f"import {i} at time {t}"
        assert all(t <= last for _, t, _ in updates), f"import {i}: {updates}"


def merged_imports(results: list) -> list:
    """The per-worker ``[(since, updates)]`` of every import, as one list per import."""
    return [(since, [u for worker in results for u in worker[i][1]])
            for i, (since, _) in enumerate(results[0])]


@pytest.mark.parametrize("compact_first", [False, True])
@pytest.mark.timeout(60)
def test_closing_the_arranged_handle_leaves_an_import_whole(run, compact_first):
    """An import made while the arrangement keeps changing follows every later batch after
    the arrangement's own handle is closed (compacted first or not): the close releases
    that handle's hold on the trace, nothing else. The import's own handle is left to the
    garbage collector, so the trace has no handle left at all."""
    times = 8

    def job(worker):
        data = dd.InputSession()
        trace, _ = arranged_input(worker, data)

        def query(scope):
            imported = trace.import_(scope).as_collection()
            return imported.inner.capture(), imported.probe()
        captured, done = worker.dataflow(query)
        sent = []
        for t in range(times):
            if t == 3:
                if compact_first:
                    trace.set_logical_compaction([t])
                trace.close()
                gc.collect()
                assert trace._box.freed
            for j in range(4):
                update = ((j, t % 3), 1 if t % 2 == 0 else -1)
                if (4 * t + j) % worker.peers == worker.index:
                    data.update(*update)
                sent.append((update[0], t, update[1]))
            data.advance_to(t + 1)
            worker.step_while(lambda: done.less_than(t + 1))
        data.close()
        worker.run()
        return sent, [(0, [u for _, batch in captured.extract() for u in batch])]
    results = run(job)
    imported_accumulations_match(merged_imports([imports for _, imports in results]),
                                 results[0][0], times)


handle_op = hs.one_of(
    hs.tuples(hs.just("import"), hs.integers(0, 5)),
    hs.tuples(hs.just("logical"), hs.integers(0, 5), hs.integers(0, 2)),
    hs.tuples(hs.just("physical"), hs.integers(0, 5), hs.none() | hs.integers(0, 2)),
    hs.tuples(hs.just("close"), hs.integers(0, 5)))
"""What to do to a handle (the ``i``-th open one, modulo how many are open) before a time's
updates: import it into a new dataflow, move its logical or physical compaction frontier to
``[time + offset]`` (physical: ``[]`` for None), or close it."""
key_val = hs.tuples(hs.integers(0, 3), hs.integers(0, 1))
time_step = hs.tuples(hs.lists(handle_op, max_size=3),
                      hs.lists(hs.tuples(key_val, hs.sampled_from([1, -1])), max_size=4),
                      hs.booleans())
"""One time: the handle operations, the ``((key, val), diff)`` updates, and whether the
workers wait until every import has seen the time complete before the next one."""


@given(steps=hs.lists(time_step, min_size=1, max_size=10))
@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.timeout(60)
def test_imports_follow_the_trace_whatever_handles_do(run, steps, monkeypatch):
    """Handles on one arrangement (its own, and those of its imports) are imported into new
    dataflows, compacted and closed in any order while the input keeps changing: every
    import's accumulation equals the input's (recomputed from the updates sent) at every
    time at or after the logical compaction frontier of the handle it was imported from.
    The spine's thresholds are tiny, so that these few updates merge and compact its
    batches (and imports replay merged batches) as large traces do."""
    for name, value in [("SMALL_BATCH", 3), ("MAX_SMALL", 2), ("MAX_TINY", 3),
                        ("TINY_ROWS", 1), ("STAGGER", 1), ("IDLE_ADVANCES", 2)]:
        monkeypatch.setattr(spine_module, name, value)
    times = len(steps)

    def job(worker):
        data = dd.InputSession()
        trace, _ = arranged_input(worker, data)
        handles, imports, sent = [trace], [], []

        def importing(handle):
            def query(scope):
                arranged = handle.import_(scope)
                return arranged.trace, arranged.as_collection().inner.capture(), \
                    arranged.stream.probe()
            return query
        for t, (ops, updates, wait) in enumerate(steps):
            for op, index, *offset in ops:
                open_handles = [h for h in handles if not h.closed]
                if not open_handles:
                    break
                handle = open_handles[index % len(open_handles)]
                if op == "import":
                    [since] = handle.get_logical_compaction()
                    imports.append((since, *worker.dataflow(importing(handle))))
                    handles.append(imports[-1][1])
                elif op == "logical":
                    handle.set_logical_compaction([t + offset[0]])
                elif op == "physical":
                    handle.set_physical_compaction([] if offset[0] is None else [t + offset[0]])
                else:
                    handle.close()
            for j, (record, diff) in enumerate(updates):
                if j % worker.peers == worker.index:
                    data.update(record, diff)
                sent.append((record, t, diff))
            data.advance_to(t + 1)
            if wait:
                worker.step_while(lambda: any(probe.less_than(t + 1)
                                              for *_, probe in imports))
        data.close()
        worker.run()
        return sent, [(since, [u for _, batch in captured.extract() for u in batch])
                      for since, _, captured, _ in imports]
    results = run(job)
    imported_accumulations_match(merged_imports([imports for _, imports in results]),
                                 results[0][0], times)


@pytest.mark.timeout(60)
def test_closed_handle_errors_name_the_trace(run):
    def job(worker):
        data = dd.InputSession()
        trace = worker.dataflow(lambda scope: data.to_collection(scope).arrange_by_key(
            name="Knows").trace)
        trace.close()
        errors = []
        for call in (lambda: trace.read_upper(), lambda: trace.set_logical_compaction([1]),
                     lambda: trace.set_physical_compaction([])):
            try:
                call()
            except RuntimeError as error:
                errors.append(str(error))
        try:
            worker.dataflow(lambda scope: trace.import_(scope))
        except RuntimeError as error:
            errors.append(str(error))      # the run fails all the same: see below
        data.close()
        told.extend(errors)
    told: list = []
    with pytest.raises(st.WorkerError, match="RuntimeError: cannot import_: this handle on the "
                                             "trace of 'Knows' is closed"):
        run(job)
    assert len(told) >= 4 and all("'Knows'" in e and "closed" in e for e in told)


def test_read_upper_and_frontiers_only_move_forward(run):
    def job(worker):
        data = dd.InputSession()

        trace, probe = arranged_input(worker, data)
        uppers = [trace.read_upper()]
        data.advance_to(3)
        worker.step_while(lambda: probe.less_than(3))
        uppers.append(trace.read_upper())
        trace.set_logical_compaction([2])
        trace.set_logical_compaction([1])          # not backwards: the join of both
        logical = trace.get_logical_compaction()
        data.close()
        worker.run()
        uppers.append(trace.read_upper())
        return uppers, logical
    assert run(job) == [([[0], [3], []], [2])] * run.workers


def test_trace_frontiers_are_the_meet_as_handles_come_and_go():
    """One handle (the usual case) sets the trace's frontiers alone; a second one is met
    with it, and once it goes the first one's frontiers rule again."""
    box = TraceBox("t", [0])
    first = TraceAgent(box)
    first.set_compaction([3], [2])
    assert (box.logical_frontier(), box.physical_frontier()) == ([3], [2])
    second = first.clone()
    first.set_compaction([5], [4])
    assert (box.logical_frontier(), box.physical_frontier()) == ([3], [2])
    assert (box.spine.logical, box.spine.physical) == ([3], [2])
    second.set_logical_compaction([4])
    assert box.logical_frontier() == [4]
    second.close()
    assert (box.logical_frontier(), box.physical_frontier()) == ([5], [4])
    first.set_compaction([6], [6])
    assert (box.spine.logical, box.spine.physical) == ([6], [6])
    third = first.clone()
    first.close()
    third.set_compaction([7], [8])
    assert (box.logical_frontier(), box.physical_frontier()) == ([7], [8])
    assert not box.freed
    third.close()
    assert box.freed and box.logical_frontier() == []


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(hs.lists(hs.lists(hs.tuples(hs.integers(0, 4), hs.integers(0, 2), hs.integers(-2, 2)),
                         max_size=6), min_size=2, max_size=5),
       hs.integers(0, 12), hs.integers(0, 12), hs.booleans(), hs.integers(0, 3), hs.booleans())
def test_merging_batches_gives_their_updates_advanced_and_consolidated(parts, since, before,
                                                                       again, piece, touched):
    """Adjacent batches (every other one compacted before, to ``before``) merged in one pass,
    in pieces of ``piece`` updates (0: at once), or advancing only the keys the newer
    batches hold (``touched``, a spine's tail merge): at every time at or beyond the
    frontiers involved they accumulate what an oracle sums from scratch, and they are
    compacted to what they claim: a key's updates other than a lone one are at or beyond
    it and stay distinct when advanced by it."""
    since = before if again else since
    batches, lower = [], 0
    for i, part in enumerate(parts):
        updates = [((k, v), lower + v % 2, d) for k, v, d in part]
        batch = Batch.from_updates(updates, [lower], [lower + 2])
        if i % 2 and before:
            batch = batch.compacted([before])
        batches.append(batch)
        lower += 2
    frontier = [since] if since else []
    if touched:
        merged = batches[0].merged_all(batches[1:], frontier)
    elif piece:
        merging = batches[0].merging(batches[1:], frontier, 0)
        pieces = 1
        while not merging.work(piece * Batch.merge_cost):
            pieces += 1
            assert pieces <= 40, "a piece merged nothing"      # 30 updates at most
        merged = merging.result()
    else:
        merged = batch_module.merge_all(batches, frontier)
    expected: dict = {}
    for i, part in enumerate(parts):
        for k, v, d in part:
            time = max(2 * i + v % 2, before if i % 2 else 0, since)
            expected[k, v, time] = expected.get((k, v, time), 0) + d
    held = {(key, v, t): d for key, updates in merged.items() for v, t, d in updates}
    assert len(merged) == len(held) and (merged.lower, merged.upper) == ([0], [lower])
    assert all(updates for _, updates in merged.items()) and all(held.values())
    claimed = merged.since[0] if merged.since else 0
    assert claimed >= since or touched
    for key, updates in merged.items():
        if len(updates) > 1:
            assert all(t >= claimed for _, t, _ in updates), (key, updates, claimed)
            assert len({(v, max(t, claimed)) for v, t, _ in updates}) == len(updates)

    def at_or_beyond(updates: dict, frontier: int) -> dict:
        advanced: dict = {}
        for (key, v, t), d in updates.items():
            advanced[key, v, max(t, frontier)] = advanced.get((key, v, max(t, frontier)), 0) + d
        return {e: d for e, d in advanced.items() if d}
    everything = max(since, before if len(parts) > 1 else 0)
    assert at_or_beyond(held, everything) == at_or_beyond(expected, everything)


def test_merging_tiny_batches_into_a_large_one_visits_only_the_tiny_ones(monkeypatch):
    """A trace's tail merge (a large batch and many one-update batches, the frontier moved
    past all of them) advances the tiny batches' updates only, sharing the large batch's
    lists; a whole merge advances the large batch's updates once, not once per tiny batch."""
    large = Batch.from_updates([((k, v), 0, 1) for k in range(1000) for v in (0, 1)], [0], [1])
    tiny = [Batch.from_updates([((k, 0), t, 1), ((k, 1), t, 1)], [t], [t + 1]) for k, t in
            zip(range(2000, 2016), range(1, 17))]
    calls = []
    advance = batch_module.advance_updates
    monkeypatch.setattr(batch_module, "advance_updates",
                        lambda updates, frontier: calls.append(1) or advance(updates, frontier))
    tail = large.merged_all(tiny, [17])
    assert len(tail) == 2032 and tail.get(2015) == [(0, 17, 1), (1, 17, 1)] and len(calls) == 16
    assert tail.get(0) is large.get(0) and tail.since == [0]
    calls.clear()
    whole = batch_module.merge_all([large, *tiny], [17])
    assert whole.get(0) == [(0, 17, 1), (1, 17, 1)] and whole.since == [17]
    assert len(calls) == 1000 + 16


def keyed_join_counts(a: dict, b: dict) -> dict:
    """Oracle of ``a.join(b).map(key).count()`` over ``{(key, val): n}`` inputs, by key:
    ``(key, count)`` where count is the product of the two sides' multiplicities."""
    per_a: Counter = Counter()
    per_b: Counter = Counter()
    for (k, _), n in a.items():
        per_a[k] += n
    for (k, _), n in b.items():
        per_b[k] += n
    return {(k, per_a[k] * per_b[k]): 1 for k in per_a if per_a[k] * per_b[k]}


def churning_rounds(seed: int) -> tuple[list, list]:
    """A load of 15,000 ``(key, val)`` rows over 500 keys and 500 one-per-key rows, then 60
    rounds of 300 inserts and 100 deletions of earlier rows, and 5 changed keys on the other
    side: enough for every trace to merge tails into large batches and those in pieces."""
    rng = random.Random(seed)
    live = [(rng.randrange(500), i) for i in range(15000)]
    a_rounds = [[(row, 1) for row in live]]
    b_rounds = [[((k, "b"), 1) for k in range(500)]]
    serial = len(live)
    for _ in range(60):
        added = [(rng.randrange(500), serial + i) for i in range(300)]
        serial += 300
        removed = [live.pop(rng.randrange(len(live))) for _ in range(100)]
        live += added
        a_rounds.append([(row, 1) for row in added] + [(row, -1) for row in removed])
        moved = rng.sample(range(500), 5)
        b_rounds.append([((k, "b"), -1) for k in moved] + [((k, "c"), 1) for k in moved])
    return a_rounds, b_rounds


@pytest.mark.timeout(120)
def test_python_traces_merging_in_every_way_keep_a_join_and_count_exact(run):
    """Python-record traces under steady churn (tail merges of touched keys only, large
    merges in pieces with fuel) at 1, 2 and 3 workers: the join + count equals the oracle
    recomputed from scratch at every round."""
    check_rounds(lambda scope, a, b: a.join(b).map(lambda match: match[0]).count(),
                 keyed_join_counts, churning_rounds(5), run)


def test_spine_merges_geometrically_and_compacts():
    """Many one-update batches end up in a logarithmic number of batches; with the logical
    frontier advanced, updates that cancel out disappear when batches merge."""
    spine = Spine([0])
    spine.set_frontiers([0], [])
    for t in range(700):
        spine.insert(Batch.from_updates([(("k", t % 7), t, 1)], [t], [t + 1]))
    sizes = [len(b) for b in spine.batches()]
    assert sum(sizes) == 700 and len(sizes) <= MAX_TINY + 1
    spine.set_frontiers([1400], [])
    for t in range(700, 1400):
        spine.insert(Batch.from_updates([(("k", t % 7), t, -1)], [t], [t + 1]))
    spine.insert(Batch.from_updates([(("k", 0), 1400, 1)], [1400], [1401]))
    for t in range(1401, 1401 + IDLE_ADVANCES):        # an idle trace: its tail merged
        spine.advance_upper([t + 1])
    while spine.idle_work():                            # an idle worker finishes the merging
        pass
    assert [b.data for b in spine.batches()] == [{"k": [(0, 1400, 1)]}]


def test_tails_of_tiny_batches_wait_for_more_of_them():
    """Small batches of one small update each (at most TINY_ROWS rows) merge once there
    are more than MAX_TINY of them; larger small batches once there are more than
    MAX_SMALL."""
    for rows, limit in [(1, MAX_TINY), (TINY_ROWS, MAX_TINY), (TINY_ROWS + 1, MAX_SMALL)]:
        spine = Spine([0])
        spine.set_frontiers([0], [])
        most = 0
        for t in range(3 * (MAX_TINY + 1)):
            spine.insert(Batch.from_updates([(((t, i), ()), t, 1) for i in range(rows)],
                                            [t], [t + 1]))
            most = max(most, len(spine.batches()))
        assert most == limit, rows
        assert len(spine) == rows * 3 * (MAX_TINY + 1)


def test_traces_fed_in_lock_step_merge_in_different_rounds():
    """Four arrangements of one dataflow get a small batch each round: their small-batch
    merges are staggered, never two in the same round (one slow round instead of four)."""
    spines = [Spine([0], phase) for phase in range(4)]   # the traces of one dataflow
    for spine in spines:
        spine.set_frontiers([0], [])
    merges_per_round = []
    for t in range(7 * (MAX_TINY + 1)):       # one-update batches: a tail of MAX_TINY
        before = [len(s.batches()) for s in spines]
        for spine in spines:
            spine.insert(Batch.from_updates([(("k", t), t, 1)], [t], [t + 1]))
        merges_per_round.append(sum(len(s.batches()) < n + 1 for s, n in zip(spines, before)))
    assert sum(merges_per_round) >= 4 * 6 and max(merges_per_round) == 1


def test_large_batches_merge_geometrically():
    spine = Spine([0])
    spine.set_frontiers([0], [])
    size = SMALL_BATCH
    for t in range(64):
        spine.insert(Batch.from_updates([(((t, i), ()), t, 1) for i in range(size)], [t], [t + 1]))
    while spine.idle_work():               # the merge work new data would have paid for
        pass
    sizes = [len(b) for b in spine.batches() if len(b)]
    assert sum(sizes) == 64 * size and len(sizes) <= 7
    assert all(a > 2 * b for a, b in zip(sizes, sizes[1:]))


def arrow_updates(keys: list, time: int) -> ArrowBatch:
    """An Arrow trace batch of one update per key, all at ``time``."""
    return ArrowBatch.build(pa.table({"k": pa.array(keys, pa.int64()),
                                      "diff": np.ones(len(keys), np.int64)}),
                            constant_times(TimeKind(int), time, len(keys)), ["k"], [time],
                            [time + 1])


def python_updates(keys: list, time: int) -> Batch:
    """A Python trace batch of one update per key, all at ``time``."""
    return Batch.from_updates([((k, ()), time, 1) for k in keys], [time], [time + 1])


def diffs_by_key(batch: Any) -> list:
    """``(key, diff)`` of every update of a trace batch of either kind."""
    if isinstance(batch, ArrowBatch):
        return list(zip(batch.data.column("k").to_pylist(), batch.diffs.tolist()))
    return [(k, d) for k, updates in batch.items() for _, _, d in updates]


@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(hs.tuples(hs.sampled_from([0, 1, 10, 100, 5000, 9000]),
                          hs.sampled_from(["insert", "idle", "advance", "compact"])),
                min_size=1, max_size=60))
@pytest.mark.parametrize("make", [arrow_updates, python_updates], ids=["arrow", "python"])
def test_a_spine_driven_at_random_holds_what_was_inserted_and_offers_all_its_work(make, ops):
    """Batches of every size class (empty, tiny, small, large, merged in pieces) with idle
    work, advances without batches and compaction in any order: the spine always holds
    exactly what was inserted, and once its offered idle work is done, nothing is left to
    merge (work is offered again whenever it comes due)."""
    spine = Spine([0])
    offered: list = []                              # the worker's deferred tasks
    spine.on_work = lambda task: offered.append(task) if task not in offered else None
    spine.set_frontiers([0], [])
    expected: dict = {}
    time = 0
    for rows, op in ops:
        keys = [(time * 7919 + i) % 6007 for i in range(rows)]
        spine.insert(make(keys, time))
        time += 1
        for k in keys:
            expected[k] = expected.get(k, 0) + 1
        if op == "idle" and offered:
            task = offered.pop(0)
            if task():
                offered.append(task)
        elif op == "advance":
            for _ in range(IDLE_ADVANCES):
                spine.advance_upper([time])
        elif op == "compact":
            spine.set_frontiers([time], [])
        held: dict = {}
        for batch in spine.batches():
            for k, d in diffs_by_key(batch):
                held[k] = held.get(k, 0) + d
        assert {k: d for k, d in held.items() if d} == expected
    for _ in range(100_000):     # far more units than there is work (three 5,000-row Python
        # batches take ~1,000: each unit merges 256 Python updates, at every level of the spine)
        if not offered:
            break
        task = offered.pop(0)
        if task():
            offered.append(task)
    assert not offered and not spine.idle_work()


def test_spine_keeps_boundaries_beyond_the_physical_frontier():
    spine = Spine([0])
    spine.set_frontiers([0], [2])
    for t in range(4):
        spine.insert(Batch.from_updates([(((t, i), ()), t, 1) for i in range(SMALL_BATCH)],
                                        [t], [t + 1]))
    assert [b.upper for b in spine.batches_through([2])] == [[2]]
    assert [b.upper for b in spine.batches()] == [[2], [3], [4]]
    spine.set_frontiers([0], [4])
    assert [b.upper for b in spine.batches()] == [[3], [4]]      # merged geometrically


@pytest.mark.timeout(60)
def test_operators_share_one_arrangement(run):
    """Two joins and a reduce on one arrangement: one trace, three reader handles."""
    def job(worker):
        data = dd.InputSession()

        def build(scope):
            arranged = data.to_collection(scope).arrange_by_key()
            other = dd.from_stream(scope.to_stream([(1, "x")])).arrange_by_key()
            arranged.join_core(other, lambda k, a, b: [(a, b)])
            arranged.join_core(other, lambda k, a, b: [(b, a)])
            arranged.count()
            return arranged.trace._box
        box = worker.dataflow(build)
        gc.collect()
        handles = box._handles
        data.close()
        return handles
    assert run(job) == [3] * run.workers


def imported_queries(queries: int) -> tuple:
    """An arranged ``knows`` of 20,000 edges and ``queries`` query dataflows importing it, each
    dropped after its answer: (bytes the arrangement holds, tracemalloc snapshots after query
    100 and after the last, every query's number of answers, the trace's handle and listener
    counts and the number of live handles and import feeds after query 100 and at the end)."""
    import tracemalloc

    from sparktimely.differential.operators.arrange import ImportFeed
    from sparktimely.differential.trace import TraceAgent

    def live() -> int:
        return sum(isinstance(o, (TraceAgent, ImportFeed)) for o in gc.get_objects())

    def job(worker):
        knows = dd.InputSession()
        tracemalloc.start()
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        trace, probe = arranged_input(worker, knows)
        for i in range(20_000):
            knows.insert((i % 2_000, i))
        knows.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        trace.set_logical_compaction([1])
        trace.set_physical_compaction([])
        gc.collect()
        arrangement = tracemalloc.get_traced_memory()[0] - start
        answered, snapshots, objects = [], [], []
        for q in range(queries):
            if q == 100:
                gc.collect()
                snapshots.append(tracemalloc.take_snapshot())
                objects.append(live())
            query = dd.InputSession()
            found: list = []
            index = worker.next_dataflow_index()
            done = worker.dataflow(lambda scope: trace.import_(scope).semijoin(
                query.to_collection(scope)).inspect(found.append).probe())
            query.insert(q % 2_000)
            query.advance_to(1)
            worker.step_while(lambda: done.less_than(1))
            worker.drop_dataflow(index)            # while its input is open: on_drop releases
            query.close()
            answered.append(len(found))
        gc.collect()
        snapshots.append(tracemalloc.take_snapshot())
        objects.append(live())
        tracemalloc.stop()
        box = trace._box
        counts = (box._handles, len(box._live_listeners()))
        knows.close()
        return arrangement, snapshots, answered, counts, objects
    return st.execute_directly(job)


def grown(snapshots: list) -> int:
    """Bytes allocated between two snapshots and still held."""
    before, after = snapshots
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


@pytest.mark.timeout(120)
def test_a_thousand_imported_queries_leave_no_handle_or_copy_behind():
    """Shared arrangements: 1,000 query dataflows import one arrangement and are dropped after their
    answer: each got its answer from the shared batches, and afterwards the trace has its one
    handle again, no listener, and no handle or import feed is left alive."""
    arrangement, _, answered, counts, objects = imported_queries(1000)
    assert answered == [10] * 1000
    assert counts == (1, 0)
    assert objects[1] <= objects[0]


@pytest.mark.timeout(120)
def test_memory_stays_flat_across_a_thousand_imported_queries():
    arrangement, snapshots, *_ = imported_queries(1000)
    growth = grown(snapshots)
    assert growth < 0.05 * arrangement, (growth, arrangement)


def pairs_of(t: int, index: int, peers: int) -> list:
    """The (key, value) pairs a worker inserts at time ``t``: its share of ``t + 1`` values
    over three keys."""
    return [(f"k{v % 3}", (t, v)) for v in range(t + 1) if v % peers == index]


def reader_results(captures) -> list:
    return [accumulate([u for c in cs for _, batch in c.extract() for u in batch], 99)
            for cs in zip(*captures)]


def reader_oracle(rounds: int) -> list:
    pairs = [p for t in range(rounds) for p in pairs_of(t, 0, 1)]
    counts = Counter(k for k, _ in pairs)
    return [{(k, n): 1 for k, n in counts.items()},
            {(k, x, y): 1 for k, x in pairs for k2, y in pairs if k == k2}]


@pytest.mark.timeout(60)
def test_readers_of_a_trace_compacted_physically_count_its_batches_once(run):
    """A trace whose handle was compacted physically before new readers came (an import,
    after its batches merged; operators of the same dataflow, after the user's handle said
    it needs no boundaries) is read from each reader's start: every update once."""
    def job(worker):
        data = dd.InputSession()

        def build(scope):
            arranged = data.to_collection(scope).arrange_by_key()
            arranged.trace.set_physical_compaction([])     # this handle needs no boundaries
            return (arranged.trace, arranged.stream.probe(), arranged.count().inner.capture(),
                    arranged.join_core(arranged, lambda k, x, y: [(k, x, y)]).inner.capture())
        trace, probe, *same_dataflow = worker.dataflow(build)
        for t in range(3):
            for pair in pairs_of(t, worker.index, worker.peers):
                data.insert(pair)
            data.advance_to(t + 1)
            worker.step_while(lambda: probe.less_than(t + 1))
        imported = worker.dataflow(lambda scope: (lambda arranged: [
            arranged.count().inner.capture(),
            arranged.join_core(arranged, lambda k, x, y: [(k, x, y)]).inner.capture()])(
                trace.import_(scope)))
        for pair in pairs_of(3, worker.index, worker.peers):
            data.insert(pair)
        data.close()
        worker.run()
        return same_dataflow, imported
    results = run(job)
    expected = reader_oracle(4)
    assert reader_results([same for same, _ in results]) == expected
    assert reader_results([imported for _, imported in results]) == expected


@pytest.mark.parametrize("arrow", [False, True], ids=["records", "arrow"])
@pytest.mark.parametrize("other_arranged", [False, True], ids=["collection", "arranged"])
@pytest.mark.timeout(60)
def test_an_imported_arrangement_joins_without_arranging_again(run, arrow, other_arranged):
    """Arranged.join pairs an import's updates with another side's: an imported Arrow
    arrangement had no join (join_core takes no Arrow rows; its error pointed at
    join(other, on=...), which Arranged lacked)."""
    left = [((k, 10 * k + i), 1) for k in range(4) for i in range(2)]
    right = [((k, 100 + k), 1) for k in range(1, 6)]

    def batch(updates):
        return pa.record_batch({"k": pa.array([k for (k, _), _ in updates], pa.int64()),
                                "v" if updates is left else "w":
                                    pa.array([v for (_, v), _ in updates], pa.int64()),
                                "diff": pa.array([d for _, d in updates], pa.int64())})

    def job(worker):
        a, b = dd.InputSession(), dd.InputSession()
        key = {"key": "k"} if arrow else {}
        trace = worker.dataflow(lambda scope: a.to_collection(scope).arrange_by_key(**key).trace)

        def query(scope):
            other = b.to_collection(scope)
            other = other.arrange_by_key(**key) if other_arranged else other
            return trace.import_(scope).join(other).inner.capture()
        joined = worker.dataflow(query)
        mine = [u for i, u in enumerate(left) if i % worker.peers == worker.index]
        theirs = [u for i, u in enumerate(right) if i % worker.peers == worker.index]
        for session, updates in ((a, mine), (b, theirs)):
            if arrow and updates:
                session.update_batch(batch(updates))
            elif updates:
                for pair, diff in updates:
                    session.update(pair, diff)
        a.close()
        b.close()
        worker.run()
        if arrow:
            return [(tuple(v for k, v in row.items() if k != "diff"), t, row["diff"])
                    for t, table in joined.extract() for row in table.to_pylist()]
        return [((k, v, w), t, d) for _, ups in joined.extract() for (k, (v, w)), t, d in ups]
    updates = [u for part in run(job) for u in part]
    expected = {(k, v, w): 1 for (k, v), _ in left for (k2, w), _ in right if k == k2}
    assert accumulate(updates, 0) == expected
