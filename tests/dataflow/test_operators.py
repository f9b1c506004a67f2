"""The stream operators of API.md, with exact outputs, at 1, 2 and 3 workers.

Every test runs through the ``run`` fixture (tests/conftest.py). Input handles feed each
worker its share of the records (or all of them from worker 0, where the order within a time
matters); ``scope.to_stream`` produces its items on every worker, so those tests expect one
copy per worker. Results are merged over the workers and compared with values worked out by
hand or recomputed in plain Python.
"""
import time

import numpy as np
import pytest

import sparktimely as st
from sparktimely import Product
from matrix_helpers import copies, example, merged, per_worker


def share(worker, records, from_first=False):
    """The records ``worker`` sends: every ``peers``-th one from its index on, or all of
    them on worker 0 when ``from_first``."""
    if from_first:
        return list(records) if worker.index == 0 else []
    return list(records)[worker.index::worker.peers]


def run_rounds(run, build, rounds, from_first=False):
    """Feeds ``rounds[r]`` at time ``r`` through an InputHandle into ``build(stream)`` (each
    worker its share) and returns what ``build`` returned on each worker, once the dataflow
    has completed."""
    def job(worker):
        handle = st.InputHandle()
        result = worker.dataflow(lambda scope: build(scope.input_from(handle)))
        for r, records in enumerate(rounds):
            for x in share(worker, records, from_first):
                handle.send(x)
            handle.advance_to(r + 1)
        handle.close()
        return result
    return run(job)


ROUNDS = [[3, 1, 2], [5], [], [4, 4, 0]]


def per_round(rounds, f=lambda x: x):
    """Oracle: ``f`` of each record at its round's time, for the rounds that have records."""
    return [(r, sorted(f(x) for x in records)) for r, records in enumerate(rounds) if records]


# -- record-at-a-time operators ------------------------------------------------------------

def test_map(run):
    assert merged(example(run, lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture())
                  ) == copies([(0, [0, 1, 4, 9])], run.workers)
    assert merged(run_rounds(run, lambda s: s.map(lambda x: -x).capture(), ROUNDS)) == [
        (0, [-3, -2, -1]), (1, [-5]), (3, [-4, -4, 0])]


class Records(list):
    """A list subclass, as a program's own batch type may be."""


def test_give_batch_takes_any_iterable_of_records(run):
    """``session.give_batch`` takes a list subclass, a tuple or a generator as
    ``InputHandle.send_batch`` does (a list subclass was taken for an Arrow batch), each as
    one batch of its own copy of the records."""
    def build(scope):
        def ctor(cap, info):
            def logic(output):
                mine = Records([1, 2])
                with output.session(cap) as session:
                    session.give_batch(mine)
                    session.give_batch((3,))
                    session.give_batch(x for x in [4, 5])
                mine.append(99)             # the batch given is a copy
                cap.drop()
            return logic
        return st.source(scope, "Gives", ctor).capture()
    assert merged(example(run, build)) == copies([(0, [1, 2, 3, 4, 5])], run.workers)


def test_map_to_other_types(run):
    got = example(run, lambda s: s.to_stream([1, 2]).map(lambda x: (x, str(x))).capture())
    assert merged(got) == copies([(0, [(1, "1"), (2, "2")])], run.workers)


def test_flat_map(run):
    got = example(run, lambda s: s.to_stream(["a b", "c", ""]).flat_map(str.split).capture())
    assert merged(got) == copies([(0, ["a", "b", "c"])], run.workers)
    got = run_rounds(run, lambda s: s.flat_map(lambda x: range(x)).capture(), [[2], [0], [3]])
    assert merged(got) == [(0, [0, 1]), (2, [0, 1, 2])]


def test_filter(run):
    got = example(run, lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture())
    assert merged(got) == copies([(0, [1, 3, 5])], run.workers)
    got = run_rounds(run, lambda s: s.filter(lambda x: x >= 3).capture(), ROUNDS)
    assert merged(got) == [(0, [3]), (1, [5]), (3, [4, 4])]


def test_inspect_sees_every_record_and_passes_them_on(run):
    seen = per_worker(run.workers)
    got = run_rounds(run, lambda s: s.inspect(seen[s.scope.index].append).capture(), ROUNDS)
    assert sorted(x for part in seen for x in part) == [0, 1, 2, 3, 4, 4, 5]
    for index, part in enumerate(seen):          # each worker sees its records in send order
        assert part == [x for records in ROUNDS for x in records[index::run.workers]]
    assert merged(got) == per_round(ROUNDS)


def test_inspect_time(run):
    seen = []
    got = run_rounds(run, lambda s: s.inspect_time(lambda t, x: seen.append((t, x))).capture(),
                     ROUNDS)
    assert sorted(seen) == [(0, 1), (0, 2), (0, 3), (1, 5), (3, 0), (3, 4), (3, 4)]
    assert merged(got) == per_round(ROUNDS)


def test_inspect_batch(run):
    seen = []
    got = run_rounds(run, lambda s: s.inspect_batch(lambda t, b: seen.append((t, list(b))))
                     .capture(), ROUNDS)
    assert all(b for _, b in seen)        # no empty batches
    by_time = {}
    for t, b in seen:
        by_time.setdefault(t, []).extend(b)
    assert sorted((t, sorted(b)) for t, b in by_time.items()) == per_round(ROUNDS)
    assert merged(got) == per_round(ROUNDS)


# -- combining and splitting ---------------------------------------------------------------

def test_concat(run):
    def build(scope):
        a = scope.to_stream([1, 2])
        b = scope.to_stream([10])
        return a.concat(b).capture()
    assert merged(example(run, build)) == copies([(0, [1, 2, 10])], run.workers)


def test_concat_with_rounds_and_concatenate(run):
    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()

        def build(scope):
            a, b = scope.input_from(h1), scope.input_from(h2)
            c = scope.to_stream([100])
            return a.concat(b).capture(), scope.concatenate(iter([a, b, c])).capture()  # any iterable
        both, three = worker.dataflow(build)
        for r in range(3):
            if worker.index == 0:
                h1.send(r)
            if worker.index == worker.peers - 1:
                h2.send(10 + r)
            h1.advance_to(r + 1)
            h2.advance_to(r + 1)
        h1.close()
        h2.close()
        return both, three
    both, three = merged(run(job))
    assert both == [(0, [0, 10]), (1, [1, 11]), (2, [2, 12])]
    assert three == [(0, [0, 10] + [100] * run.workers), (1, [1, 11]), (2, [2, 12])]


def test_exchange_sends_each_record_to_its_routes_worker(run):
    # On one worker this is "keeps everything"; on more, each record lands exactly once, on
    # worker route(x) % peers.
    def tagged(stream, route):
        index = stream.scope.index
        return stream.exchange(route).map(lambda x: (x, index)).capture()
    got = merged(run_rounds(run, lambda s: tagged(s, lambda x: x), ROUNDS))
    assert got == per_round(ROUNDS, lambda x: (x, x % run.workers))
    got = merged(example(run, lambda s: tagged(s.to_stream(["b", "a"]), st.stable_hash)))
    assert got == copies([(0, [(w, st.stable_hash(w) % run.workers) for w in "ab"])],
                         run.workers)


def test_broadcast_gives_every_worker_each_record_once(run):
    results = run_rounds(run, lambda s: s.broadcast().capture(), ROUNDS)
    for captured in results:
        assert captured.extract() == per_round(ROUNDS)


def test_partition(run):
    def build(stream):
        parts = stream.partition(3, lambda x: (x % 3, x * 10))
        assert len(parts) == 3
        return [p.capture() for p in parts]
    assert merged(run_rounds(run, build, ROUNDS)) == [
        [(0, [30]), (3, [0])],
        [(0, [10]), (3, [40, 40])],
        [(0, [20]), (1, [50])],
    ]


def test_partition_example(run):
    def build(scope):
        evens, odds = scope.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
        return evens.capture(), odds.capture()
    assert list(merged(example(run, build))) == [copies([(0, [0, 2, 4])], run.workers),
                                                 copies([(0, [1, 3])], run.workers)]


def test_branch_by_time_and_value(run):
    def build(stream):
        false, true = stream.branch(lambda t, x: t % 2 == 1 or x == 0)
        return false.capture(), true.capture()
    false, true = merged(run_rounds(run, build, ROUNDS))
    assert false == [(0, [1, 2, 3])]
    assert true == [(1, [5]), (3, [0, 4, 4])]


def test_ok_err(run):
    def build(scope):
        oks, errs = scope.to_stream(["1", "x", "22", ""]).ok_err(
            lambda s: st.Ok(int(s)) if s.isdigit() else st.Err(s))
        return oks.capture(), errs.capture()
    oks, errs = merged(example(run, build))
    assert oks == copies([(0, [1, 22])], run.workers)
    assert errs == copies([(0, ["", "x"])], run.workers)


def test_ok_err_per_round(run):
    def build(stream):
        return [c.capture() for c in stream.ok_err(
            lambda x: st.Ok(x) if x % 2 == 0 else st.Err(-x))]
    oks, errs = merged(run_rounds(run, build, ROUNDS))
    assert oks == [(0, [2]), (3, [0, 4, 4])]
    assert errs == [(0, [-3, -1]), (1, [-5])]


# -- moving records in time -----------------------------------------------------------------

def test_delay_to_record_value(run):
    got = example(run, lambda s: s.to_stream([1, 5, 3, 5]).delay(lambda x, t: x).capture())
    assert merged(got) == copies([(1, [1]), (3, [3]), (5, [5, 5])], run.workers)


def test_delay_per_round(run):
    got = run_rounds(run, lambda s: s.delay(lambda x, t: t + x).capture(), ROUNDS)
    # (time, x) -> time + x
    assert merged(got) == [(1, [1]), (2, [2]), (3, [0, 3]), (6, [5]), (7, [4, 4])]


def test_delay_keeps_time_when_asked(run):
    got = run_rounds(run, lambda s: s.delay(lambda x, t: t).capture(), ROUNDS)
    assert merged(got) == per_round(ROUNDS)


def test_delay_total(run):
    got = run_rounds(run, lambda s: s.delay_total(lambda x, t: max(t, 2)).capture(), ROUNDS)
    assert merged(got) == [(2, [1, 2, 3, 5]), (3, [0, 4, 4])]


def test_delay_outputs_in_time_order(run):
    records = [1, 9, 5, 3, 8, 2, 7, 4]
    order = per_worker(run.workers)
    run_rounds(run, lambda s: s.exchange(lambda x: x // 2).delay(lambda x, t: 10 - x)
               .inspect_time(lambda t, x: order[s.scope.index].append(t)).probe(), [records])
    for index, times in enumerate(order):
        assert times == sorted(10 - x for x in records if x // 2 % run.workers == index)


def test_reclock_like_timely(run):
    # timely's reclock example: data x at time x, clock ticks at times 3, 5 and 8;
    # each record is re-stamped to the first tick at or after its time. Round r's record
    # comes from worker r % peers; every worker's clock ticks.
    def job(worker):
        data_in, clock_in = st.InputHandle(), st.InputHandle()

        def build(scope):
            data = scope.input_from(data_in)
            clock = scope.input_from(clock_in)
            return data.reclock(clock).capture()
        captured = worker.dataflow(build)
        for round in range(10):
            if round % worker.peers == worker.index:
                data_in.send(round)
            if round in (3, 5, 8):
                clock_in.send(())
            data_in.advance_to(round + 1)
            clock_in.advance_to(round + 1)
        data_in.close()
        clock_in.close()
        return captured
    assert merged(run(job)) == [(3, [0, 1, 2, 3]), (5, [4, 5]), (8, [6, 7, 8])]


def test_reclock_several_records_per_time_and_duplicate_ticks(run):
    def build(scope):
        data = scope.to_stream([(0, "a"), (0, "b"), (2, "c"), (4, "d"), (7, "e")]).delay(
            lambda x, t: x[0]).map(lambda x: x[1])
        ticks = scope.to_stream([1, 1, 4, 6]).delay(lambda x, t: x)
        return data.reclock(ticks).capture()
    assert merged(example(run, build)) == copies([(1, ["a", "b"]), (4, ["c", "d"])],
                                                 run.workers)


# -- per-time aggregation ---------------------------------------------------------------------

def per_worker_rounds(rounds, workers, f):
    """Oracle for per-worker aggregates: for each worker, ``f(its share of round r)`` at each
    time ``r`` where it had records."""
    return [[(r, [f(records[w::workers])]) for r, records in enumerate(rounds)
             if records[w::workers]] for w in range(workers)]


def test_count_per_round(run):
    results = run_rounds(run, lambda s: s.count().capture(), ROUNDS)
    assert [c.extract() for c in results] == per_worker_rounds(ROUNDS, run.workers, len)
    results = example(run, lambda s: s.to_stream("hello").count().capture())
    assert [c.extract() for c in results] == [[(0, [5])]] * run.workers


def test_accumulate_per_round(run):
    results = run_rounds(run, lambda s: s.accumulate(0, lambda acc, batch: acc + sum(batch))
                         .capture(), ROUNDS)
    assert [c.extract() for c in results] == per_worker_rounds(ROUNDS, run.workers, sum)


def test_accumulate_copies_its_initial_value(run):
    got = run_rounds(run, lambda s: s.accumulate([], lambda acc, batch: acc + sorted(batch))
                     .capture(), [[2, 1], [3]], from_first=True)
    assert merged(got) == [(0, [[1, 2]]), (1, [[3]])]
    init = []                          # one object for every worker: each time copies it

    def append(acc, batch):
        acc.extend(batch)
        return acc
    rounds = [[1, 1, 1], [2, 2, 2]]
    results = run_rounds(run, lambda s: s.accumulate(init, append).capture(), rounds)
    assert [c.extract() for c in results] == per_worker_rounds(rounds, run.workers, list)
    assert init == []


def test_aggregate_word_count_per_round(run):
    rounds = [["a", "b", "a"], ["b"], ["c", "c", "a"]]

    def build(stream):
        return stream.map(lambda w: (w, 1)).aggregate(
            lambda key, val, agg: (agg or 0) + val,
            lambda key, agg: (key, agg),
            st.stable_hash).capture()
    assert merged(run_rounds(run, build, rounds)) == [
        (0, [("a", 2), ("b", 1)]), (1, [("b", 1)]), (2, [("a", 1), ("c", 2)])]


def test_aggregate_agg_starts_as_none_each_time(run):
    starts = []

    def fold(key, val, agg):
        if agg is None:
            starts.append(key)
            agg = []
        return agg + [val]
    got = run_rounds(run, lambda s: s.aggregate(fold, lambda k, agg: (k, sorted(agg)),
                                                lambda k: k).capture(),
                     [[(1, "x"), (2, "y"), (1, "z")], [(1, "w")]])
    assert merged(got) == [(0, [(1, ["x", "z"]), (2, ["y"])]), (1, [(1, ["w"])])]
    assert sorted(starts) == [1, 1, 2]


def test_state_machine_state_persists_across_times(run):
    def running_sum(key, val, total):
        total = (total or 0) + val
        return False, [(key, total)], total
    rounds = [[("x", 1), ("x", 2), ("y", 5)], [("x", 10)], [], [("y", 1), ("z", 0)]]
    # from one worker: within a time, a key's records are folded in the order sent
    got = run_rounds(run, lambda s: s.state_machine(running_sum, st.stable_hash).capture(),
                     rounds, from_first=True)
    assert merged(got) == [
        (0, [("x", 1), ("x", 3), ("y", 5)]), (1, [("x", 13)]), (3, [("y", 6), ("z", 0)])]


def test_state_machine_remove_discards_state(run):
    seen_states = []

    def fold(key, val, state):
        seen_states.append((key, val, state))
        if val == "reset":
            return True, [(key, "reset")]
        state = (state or 0) + 1
        return False, [(key, state)], state
    rounds = [[("k", "a"), ("k", "b")], [("k", "reset")], [("k", "c")]]
    got = run_rounds(run, lambda s: s.state_machine(fold, st.stable_hash).capture(), rounds,
                     from_first=True)
    assert merged(got) == [(0, [("k", 1), ("k", 2)]), (1, [("k", "reset")]), (2, [("k", 1)])]
    assert seen_states == [("k", "a", None), ("k", "b", 1), ("k", "reset", 2), ("k", "c", None)]


@pytest.mark.parametrize("nan", [lambda: float("nan"), lambda: ("a", float("nan")),
                                 lambda: np.float32("nan"), lambda: ("a", np.float16("nan"))],
                         ids=["float", "tuple", "float32", "float16-in-tuple"])
def test_nan_keys_are_one_key_of_aggregate_and_state_machine(run, nan):
    """A dict told NaN keys apart by identity: records with NaNs of their own (and those that
    crossed workers, unpickled) made a group each, so NaN keys were one group at 1 worker (of
    one NaN object) and several at 2 or 3; numpy's float32 and float16 NaNs made a group each
    at any worker count. A NaN key is told as Python's float NaN."""
    shared = nan()
    rounds = [[(nan(), 1), (shared, 2), ("b", 4), (shared, 16)], [(nan(), 8), (shared, 32)]]

    def build(stream):
        sums = stream.aggregate(lambda k, v, agg: (agg or 0) + v, lambda k, agg: (repr(k), agg))
        seen = stream.state_machine(lambda k, v, n: (False, [(repr(k), n or 0)], (n or 0) + 1))
        return sums.capture(), seen.capture()
    sums, seen = merged(run_rounds(run, build, rounds))
    key = repr(("a", float("nan")) if isinstance(shared, tuple) else float("nan"))
    assert sums == [(0, sorted([(key, 19), ("'b'", 4)])), (1, [(key, 40)])]
    assert seen == [(0, sorted([(key, 0), (key, 1), (key, 2), ("'b'", 0)])),
                    (1, [(key, 3), (key, 4)])]


# -- observing streams --------------------------------------------------------------------

def test_probe_done_after_example(run):
    for probe in example(run, lambda scope: scope.to_stream([1]).probe()):
        assert probe.done()
        assert probe.frontier() == []
        assert not probe.less_than(0) and not probe.less_equal(0)


def test_probe_with_watches_several_streams(run):
    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()
        probe = st.ProbeHandle()

        def build(scope):
            a = scope.input_from(h1).probe_with(probe)
            b = scope.input_from(h2)
            returned = b.probe_with(probe)
            assert isinstance(returned, st.Stream)
            return a.capture()
        captured = worker.dataflow(build)
        h1.advance_to(5)
        h2.advance_to(3)
        worker.step_while(lambda: probe.less_than(3))
        frontier_both = probe.frontier()
        less = (probe.less_than(4), probe.less_equal(3), probe.less_equal(2))
        h2.advance_to(7)
        worker.step_while(lambda: probe.less_than(5))
        frontier_later = probe.frontier()
        h1.close()
        h2.close()
        worker.step_while(lambda: not probe.done())
        return frontier_both, less, frontier_later, probe.done(), captured.extract()
    assert run(job) == [([3], (True, True, False), [5], True, [])] * run.workers


def test_capture_extract_sorted_per_time(run):
    def build(scope):
        return scope.to_stream([5, 3, 9, 1]).delay(lambda x, t: x % 2 + (x > 4)).capture()
    for captured in example(run, build):
        assert captured.extract() == [(1, [1, 3]), (2, [5, 9])]


def test_capture_unorderable_records_sort_in_one_order(run):
    for captured in example(run, lambda s: s.to_stream([{"b": 1}, {"a": 2}]).capture()):
        assert captured.extract() == [(0, [{"a": 2}, {"b": 1}])]       # by repr


def test_capture_empty_stream(run):
    assert [c.extract() for c in example(run, lambda s: s.to_stream([]).capture())] == [
        []] * run.workers


# -- nested scopes and loops --------------------------------------------------------------

def test_enter_leave_keeps_outer_times(run):
    def build(stream):
        scope = stream.scope

        def inner(sub):
            entered = stream.enter(sub)
            inside = entered.map(lambda x: x + 100)
            return inside.capture(), inside.leave().capture()
        return scope.iterative(inner)
    inside, outside = merged(run_rounds(run, build, [[1], [2, 3]]))
    assert inside == [(Product(0, 0), [101]), (Product(1, 0), [102, 103])]
    assert outside == [(0, [101]), (1, [102, 103])]


def test_region_enter_leave_is_transparent(run):
    def build(stream):
        def inner(region):
            return stream.enter(region).map(lambda x: x * 2).leave()
        return stream.scope.region(inner).capture()
    assert merged(run_rounds(run, build, ROUNDS)) == per_round(ROUNDS, lambda x: 2 * x)


def test_connect_loop_doubling(run):
    # The loop body moves every record to another worker at each iteration.
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            doubled = scope.to_stream([1, 3]).enter(inner).concat(looped).map(lambda x: 2 * x)
            doubled.filter(lambda x: x < 100).exchange(lambda x: x // 2).connect_loop(handle)
            return doubled.filter(lambda x: x >= 100).leave()
        return scope.iterative(loop).capture()
    assert merged(example(run, build)) == copies([(0, [128, 192])], run.workers)


def test_connect_loop_iteration_times_visible_inside(run):
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            stream = scope.to_stream([1]).enter(inner).concat(looped).map(lambda x: 2 * x)
            stream.filter(lambda x: x < 16).connect_loop(handle)
            return stream.capture()
        return scope.iterative(loop)
    assert merged(example(run, build)) == copies([
        (Product(0, 0), [2]), (Product(0, 1), [4]), (Product(0, 2), [8]), (Product(0, 3), [16])],
        run.workers)


def test_feedback_in_plain_scope_advances_time(run):
    def build(scope):
        handle, looped = scope.feedback(2)
        stream = scope.to_stream([0]).concat(looped)
        stream.map(lambda x: x + 1).filter(lambda x: x < 4).exchange(lambda x: x) \
            .connect_loop(handle)
        return stream.capture()
    assert merged(example(run, build)) == copies([(0, [0]), (2, [1]), (4, [2]), (6, [3])],
                                                 run.workers)


def test_operators_method_names_exist():
    for name in ["map", "flat_map", "filter", "inspect", "inspect_time", "inspect_batch",
                 "concat", "exchange", "broadcast", "partition", "branch", "ok_err", "delay",
                 "delay_total", "accumulate", "count", "aggregate", "state_machine",
                 "reclock", "probe", "probe_with", "capture", "enter", "leave",
                 "connect_loop"]:
        assert callable(getattr(st.Stream, name)), name


def test_accumulate_starts_each_time_from_its_own_copy_of_a_mutable_init(run):
    results = run_rounds(run, lambda s: s.accumulate({"seen": []}, lambda acc, batch: (
        acc["seen"].extend(batch), acc)[1]).capture(), [[1, 2], [3], [4, 5, 6]])
    merged_seen = {}
    for captured in results:
        for time, accs in captured.extract():
            for acc in accs:
                merged_seen.setdefault(time, []).extend(acc["seen"])
    assert {t: sorted(v) for t, v in merged_seen.items()} == {0: [1, 2], 1: [3], 2: [4, 5, 6]}


class _Pending:
    def __init__(self, capability):
        self.capability, self.me = capability, self


def _held_by_a_cycle(scope):
    """A source whose capability for time 3 ends up referenced only by a cycle."""
    def ctor(capability, info):
        def logic(output):
            later = capability.delayed(3)
            output.session(later).give("x")
            _Pending(later)
            capability.drop()
        return logic
    return st.source(scope, "Source", ctor).capture()


def test_a_capability_held_only_by_a_reference_cycle_is_released_once_idle(run):
    """The last references to a capability sit in a cycle: the collector an idle worker
    runs releases it, and the dataflow completes (it waited forever before)."""
    captures = example(run, _held_by_a_cycle)
    assert [c.extract() for c in captures] == [[(3, ["x"])]] * run.workers


def test_a_loop_of_steps_releases_a_capability_held_by_a_cycle_too(run):
    """``while worker.step(): pass`` never waits, where the idle worker's collector ran:
    the loop stepped forever."""
    def job(worker):
        captured = worker.dataflow(_held_by_a_cycle)
        deadline = time.monotonic() + 10
        while worker.step():
            if time.monotonic() > deadline:
                return "still stepping"
        return captured.extract()
    assert run(job) == [[(3, ["x"])]] * run.workers
