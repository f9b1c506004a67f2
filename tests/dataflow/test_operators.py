"""The stream operators of API.md, on one worker, with exact outputs."""
import pytest

import sparktimely as st
from sparktimely import Product


def run_rounds(build, rounds):
    """Feeds ``rounds[r]`` at time ``r`` through an InputHandle into ``build(stream)``;
    returns what ``build`` returned once the dataflow has completed."""
    def job(worker):
        handle = st.InputHandle()
        result = worker.dataflow(lambda scope: build(scope.input_from(handle)))
        for r, records in enumerate(rounds):
            for x in records:
                handle.send(x)
            handle.advance_to(r + 1)
        handle.close()
        return result
    return st.execute_directly(job)


ROUNDS = [[3, 1, 2], [5], [], [4, 4, 0]]


# -- record-at-a-time operators ------------------------------------------------------------

def test_map():
    assert st.example(lambda s: s.to_stream(range(4)).map(lambda x: x * x).capture()
                      ).extract() == [(0, [0, 1, 4, 9])]
    assert run_rounds(lambda s: s.map(lambda x: -x).capture(), ROUNDS).extract() == [
        (0, [-3, -2, -1]), (1, [-5]), (3, [-4, -4, 0])]


def test_map_to_other_types():
    got = st.example(lambda s: s.to_stream([1, 2]).map(lambda x: (x, str(x))).capture())
    assert got.extract() == [(0, [(1, "1"), (2, "2")])]


def test_flat_map():
    got = st.example(lambda s: s.to_stream(["a b", "c", ""]).flat_map(str.split).capture())
    assert got.extract() == [(0, ["a", "b", "c"])]
    got = run_rounds(lambda s: s.flat_map(lambda x: range(x)).capture(), [[2], [0], [3]])
    assert got.extract() == [(0, [0, 1]), (2, [0, 1, 2])]


def test_filter():
    got = st.example(lambda s: s.to_stream(range(6)).filter(lambda x: x % 2).capture())
    assert got.extract() == [(0, [1, 3, 5])]
    got = run_rounds(lambda s: s.filter(lambda x: x >= 3).capture(), ROUNDS)
    assert got.extract() == [(0, [3]), (1, [5]), (3, [4, 4])]


def test_inspect_sees_every_record_and_passes_them_on():
    seen = []
    got = run_rounds(lambda s: s.inspect(seen.append).capture(), ROUNDS)
    assert sorted(seen) == [0, 1, 2, 3, 4, 4, 5]
    assert seen[:3] == [3, 1, 2]          # in the order sent
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]


def test_inspect_time():
    seen = []
    got = run_rounds(lambda s: s.inspect_time(lambda t, x: seen.append((t, x))).capture(),
                     ROUNDS)
    assert sorted(seen) == [(0, 1), (0, 2), (0, 3), (1, 5), (3, 0), (3, 4), (3, 4)]
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]


def test_inspect_batch():
    seen = []
    got = run_rounds(lambda s: s.inspect_batch(lambda t, b: seen.append((t, list(b)))).capture(),
                     ROUNDS)
    assert sorted((t, sorted(b)) for t, b in seen) == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]
    assert all(b for _, b in seen)        # no empty batches
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]


# -- combining and splitting ---------------------------------------------------------------

def test_concat():
    def build(scope):
        a = scope.to_stream([1, 2])
        b = scope.to_stream([10])
        return a.concat(b).capture()
    assert st.example(build).extract() == [(0, [1, 2, 10])]


def test_concat_with_rounds_and_concatenate():
    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()

        def build(scope):
            a, b = scope.input_from(h1), scope.input_from(h2)
            c = scope.to_stream([100])
            return a.concat(b).capture(), scope.concatenate([a, b, c]).capture()
        both, three = worker.dataflow(build)
        for r in range(3):
            h1.send(r)
            h2.send(10 + r)
            h1.advance_to(r + 1)
            h2.advance_to(r + 1)
        h1.close()
        h2.close()
        return both, three
    both, three = st.execute_directly(job)
    assert both.extract() == [(0, [0, 10]), (1, [1, 11]), (2, [2, 12])]
    assert three.extract() == [(0, [0, 10, 100]), (1, [1, 11]), (2, [2, 12])]


def test_exchange_on_one_worker_keeps_everything():
    got = run_rounds(lambda s: s.exchange(lambda x: x).capture(), ROUNDS)
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]
    got = st.example(lambda s: s.to_stream(["b", "a"]).exchange(st.stable_hash).capture())
    assert got.extract() == [(0, ["a", "b"])]


def test_broadcast_on_one_worker_keeps_everything_once():
    got = run_rounds(lambda s: s.broadcast().capture(), ROUNDS)
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]


def test_partition():
    def build(stream):
        parts = stream.partition(3, lambda x: (x % 3, x * 10))
        assert len(parts) == 3
        return [p.capture() for p in parts]
    got = [c.extract() for c in run_rounds(build, ROUNDS)]
    assert got == [
        [(0, [30]), (3, [0])],
        [(0, [10]), (3, [40, 40])],
        [(0, [20]), (1, [50])],
    ]


def test_partition_example():
    def build(scope):
        evens, odds = scope.to_stream(range(5)).partition(2, lambda x: (x % 2, x))
        return evens.capture(), odds.capture()
    assert [c.extract() for c in st.example(build)] == [[(0, [0, 2, 4])], [(0, [1, 3])]]


def test_branch_by_time_and_value():
    def build(stream):
        false, true = stream.branch(lambda t, x: t % 2 == 1 or x == 0)
        return false.capture(), true.capture()
    false, true = run_rounds(build, ROUNDS)
    assert false.extract() == [(0, [1, 2, 3])]
    assert true.extract() == [(1, [5]), (3, [0, 4, 4])]


def test_ok_err():
    def build(scope):
        oks, errs = scope.to_stream(["1", "x", "22", ""]).ok_err(
            lambda s: st.Ok(int(s)) if s.isdigit() else st.Err(s))
        return oks.capture(), errs.capture()
    oks, errs = st.example(build)
    assert oks.extract() == [(0, [1, 22])]
    assert errs.extract() == [(0, ["", "x"])]


def test_ok_err_per_round():
    def build(stream):
        return [c.capture() for c in stream.ok_err(
            lambda x: st.Ok(x) if x % 2 == 0 else st.Err(-x))]
    oks, errs = run_rounds(build, ROUNDS)
    assert oks.extract() == [(0, [2]), (3, [0, 4, 4])]
    assert errs.extract() == [(0, [-3, -1]), (1, [-5])]


# -- moving records in time -----------------------------------------------------------------

def test_delay_to_record_value():
    got = st.example(lambda s: s.to_stream([1, 5, 3, 5]).delay(lambda x, t: x).capture())
    assert got.extract() == [(1, [1]), (3, [3]), (5, [5, 5])]


def test_delay_per_round():
    got = run_rounds(lambda s: s.delay(lambda x, t: t + x).capture(), ROUNDS)
    # (time, x) -> time + x
    assert got.extract() == [(1, [1]), (2, [2]), (3, [0, 3]), (6, [5]), (7, [4, 4])]


def test_delay_keeps_time_when_asked():
    got = run_rounds(lambda s: s.delay(lambda x, t: t).capture(), ROUNDS)
    assert got.extract() == [(0, [1, 2, 3]), (1, [5]), (3, [0, 4, 4])]


def test_delay_total():
    got = run_rounds(lambda s: s.delay_total(lambda x, t: max(t, 2)).capture(), ROUNDS)
    assert got.extract() == [(2, [1, 2, 3, 5]), (3, [0, 4, 4])]


def test_delay_outputs_in_time_order():
    order = []
    run_rounds(lambda s: s.delay(lambda x, t: 10 - x).inspect_time(
        lambda t, x: order.append(t)).probe(), [[1, 9, 5, 3]])
    assert order == [1, 5, 7, 9]


def test_reclock_like_timely():
    # timely's reclock example: data x at time x, clock ticks at times 3, 5 and 8;
    # each record is re-stamped to the first tick at or after its time.
    def job(worker):
        data_in, clock_in = st.InputHandle(), st.InputHandle()

        def build(scope):
            data = scope.input_from(data_in)
            clock = scope.input_from(clock_in)
            return data.reclock(clock).capture()
        captured = worker.dataflow(build)
        for round in range(10):
            data_in.send(round)
            if round in (3, 5, 8):
                clock_in.send(())
            data_in.advance_to(round + 1)
            clock_in.advance_to(round + 1)
        data_in.close()
        clock_in.close()
        return captured
    captured = st.execute_directly(job)
    assert captured.extract() == [(3, [0, 1, 2, 3]), (5, [4, 5]), (8, [6, 7, 8])]


def test_reclock_several_records_per_time_and_duplicate_ticks():
    def build(scope):
        data = scope.to_stream([(0, "a"), (0, "b"), (2, "c"), (4, "d"), (7, "e")]).delay(
            lambda x, t: x[0]).map(lambda x: x[1])
        ticks = scope.to_stream([1, 1, 4, 6]).delay(lambda x, t: x)
        return data.reclock(ticks).capture()
    assert st.example(build).extract() == [(1, ["a", "b"]), (4, ["c", "d"])]


# -- per-time aggregation ---------------------------------------------------------------------

def test_count_per_round():
    got = run_rounds(lambda s: s.count().capture(), ROUNDS)
    assert got.extract() == [(0, [3]), (1, [1]), (3, [3])]
    assert st.example(lambda s: s.to_stream("hello").count().capture()).extract() == [(0, [5])]


def test_accumulate_per_round():
    got = run_rounds(lambda s: s.accumulate(0, lambda acc, batch: acc + sum(batch)).capture(),
                     ROUNDS)
    assert got.extract() == [(0, [6]), (1, [5]), (3, [8])]


def test_accumulate_copies_its_initial_value():
    got = run_rounds(lambda s: s.accumulate([], lambda acc, batch: acc + sorted(batch))
                     .capture(), [[2, 1], [3]])
    assert got.extract() == [(0, [[1, 2]]), (1, [[3]])]
    init = []

    def append(acc, batch):
        acc.extend(batch)
        return acc
    got = run_rounds(lambda s: s.accumulate(init, append).capture(), [[1], [2]])
    assert got.extract() == [(0, [[1]]), (1, [[2]])]
    assert init == []


def test_aggregate_word_count_per_round():
    rounds = [["a", "b", "a"], ["b"], ["c", "c", "a"]]

    def build(stream):
        return stream.map(lambda w: (w, 1)).aggregate(
            lambda key, val, agg: (agg or 0) + val,
            lambda key, agg: (key, agg),
            st.stable_hash).capture()
    assert run_rounds(build, rounds).extract() == [
        (0, [("a", 2), ("b", 1)]), (1, [("b", 1)]), (2, [("a", 1), ("c", 2)])]


def test_aggregate_agg_starts_as_none_each_time():
    starts = []

    def fold(key, val, agg):
        if agg is None:
            starts.append(key)
            agg = []
        return agg + [val]
    got = run_rounds(lambda s: s.aggregate(fold, lambda k, agg: (k, sorted(agg)),
                                           lambda k: k).capture(),
                     [[(1, "x"), (2, "y"), (1, "z")], [(1, "w")]])
    assert got.extract() == [(0, [(1, ["x", "z"]), (2, ["y"])]), (1, [(1, ["w"])])]
    assert sorted(starts) == [1, 1, 2]


def test_state_machine_state_persists_across_times():
    def running_sum(key, val, total):
        total = (total or 0) + val
        return False, [(key, total)], total
    rounds = [[("x", 1), ("x", 2), ("y", 5)], [("x", 10)], [], [("y", 1), ("z", 0)]]
    got = run_rounds(lambda s: s.state_machine(running_sum, st.stable_hash).capture(), rounds)
    assert got.extract() == [
        (0, [("x", 1), ("x", 3), ("y", 5)]), (1, [("x", 13)]), (3, [("y", 6), ("z", 0)])]


def test_state_machine_remove_discards_state():
    seen_states = []

    def fold(key, val, state):
        seen_states.append((key, val, state))
        if val == "reset":
            return True, [(key, "reset")]
        state = (state or 0) + 1
        return False, [(key, state)], state
    rounds = [[("k", "a"), ("k", "b")], [("k", "reset")], [("k", "c")]]
    got = run_rounds(lambda s: s.state_machine(fold, st.stable_hash).capture(), rounds)
    assert got.extract() == [(0, [("k", 1), ("k", 2)]), (1, [("k", "reset")]), (2, [("k", 1)])]
    assert seen_states == [("k", "a", None), ("k", "b", 1), ("k", "reset", 2), ("k", "c", None)]


# -- observing streams --------------------------------------------------------------------

def test_probe_done_after_example():
    probe = st.example(lambda scope: scope.to_stream([1]).probe())
    assert probe.done()
    assert probe.frontier() == []
    assert not probe.less_than(0) and not probe.less_equal(0)


def test_probe_with_watches_several_streams():
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
        return frontier_both, less, frontier_later, probe.done(), captured
    both, less, later, done, captured = st.execute_directly(job)
    assert both == [3]
    assert less == (True, True, False)
    assert later == [5]
    assert done
    assert captured.extract() == []


def test_capture_extract_sorted_per_time():
    def build(scope):
        return scope.to_stream([5, 3, 9, 1]).delay(lambda x, t: x % 2 + (x > 4)).capture()
    assert st.example(build).extract() == [(1, [1, 3]), (2, [5, 9])]


def test_capture_unorderable_records_keep_order():
    got = st.example(lambda s: s.to_stream([{"b": 1}, {"a": 2}]).capture())
    assert got.extract() == [(0, [{"b": 1}, {"a": 2}])]


def test_capture_empty_stream():
    assert st.example(lambda s: s.to_stream([]).capture()).extract() == []


# -- nested scopes and loops --------------------------------------------------------------

def test_enter_leave_keeps_outer_times():
    def build(stream):
        scope = stream.scope

        def inner(sub):
            entered = stream.enter(sub)
            inside = entered.map(lambda x: x + 100)
            return inside.capture(), inside.leave().capture()
        return scope.iterative(inner)
    inside, outside = run_rounds(build, [[1], [2, 3]])
    assert inside.extract() == [(Product(0, 0), [101]), (Product(1, 0), [102, 103])]
    assert outside.extract() == [(0, [101]), (1, [102, 103])]


def test_region_enter_leave_is_transparent():
    def build(stream):
        def inner(region):
            return stream.enter(region).map(lambda x: x * 2).leave()
        return stream.scope.region(inner).capture()
    assert run_rounds(build, ROUNDS).extract() == [(0, [2, 4, 6]), (1, [10]), (3, [0, 8, 8])]


def test_connect_loop_doubling():
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            doubled = scope.to_stream([1, 3]).enter(inner).concat(looped).map(lambda x: 2 * x)
            doubled.filter(lambda x: x < 100).connect_loop(handle)
            return doubled.filter(lambda x: x >= 100).leave()
        return scope.iterative(loop).capture()
    assert st.example(build).extract() == [(0, [128, 192])]


def test_connect_loop_iteration_times_visible_inside():
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            stream = scope.to_stream([1]).enter(inner).concat(looped).map(lambda x: 2 * x)
            stream.filter(lambda x: x < 16).connect_loop(handle)
            return stream.capture()
        return scope.iterative(loop)
    assert st.example(build).extract() == [
        (Product(0, 0), [2]), (Product(0, 1), [4]), (Product(0, 2), [8]), (Product(0, 3), [16])]


def test_feedback_in_plain_scope_advances_time():
    def build(scope):
        handle, looped = scope.feedback(2)
        stream = scope.to_stream([0]).concat(looped)
        stream.map(lambda x: x + 1).filter(lambda x: x < 4).connect_loop(handle)
        return stream.capture()
    assert st.example(build).extract() == [(0, [0]), (2, [1]), (4, [2]), (6, [3])]


def test_operators_method_names_exist():
    for name in ["map", "flat_map", "filter", "inspect", "inspect_time", "inspect_batch",
                 "concat", "exchange", "broadcast", "partition", "branch", "ok_err", "delay",
                 "delay_total", "accumulate", "count", "aggregate", "state_machine",
                 "reclock", "probe", "probe_with", "capture", "enter", "leave",
                 "connect_loop"]:
        assert callable(getattr(st.Stream, name)), name
