"""Progress as operators and drivers observe it: probes, notifications, frontiers,
capabilities, activation, and nested scopes with loops."""
import pytest

import sparktimely as st
from sparktimely import Product


# -- probes -----------------------------------------------------------------------------------

def test_probe_per_round_sees_exact_results():
    def job(worker):
        handle = st.InputHandle()
        seen = []

        def build(scope):
            stream = scope.input_from(handle).map(lambda x: x * 10)
            captured = stream.capture()
            return captured, stream.probe()
        captured, probe = worker.dataflow(build)
        assert probe.less_equal(0) and not probe.done()
        for round in range(5):
            for i in range(round + 1):
                handle.send(round + i)
            handle.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
            assert probe.frontier() == [round + 1]
            assert not probe.less_than(round + 1)
            assert probe.less_equal(round + 1)
            seen.append(captured.extract())
        handle.close()
        worker.step_while(lambda: not probe.done())
        assert probe.done()
        assert probe.frontier() == []
        return seen
    seen = st.execute_directly(job)
    expected = []
    for round in range(5):
        expected.append((round, sorted((round + i) * 10 for i in range(round + 1))))
        assert seen[round] == expected


def test_probe_not_done_until_close():
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).probe())
        handle.advance_to(3)
        for _ in range(5):
            worker.step()
        frontier = probe.frontier()
        running = worker.step()
        handle.close()
        worker.step_while(lambda: not probe.done())
        finished = not worker.step()
        return frontier, running, probe.done(), finished
    assert st.execute_directly(job) == ([3], True, True, True)


def test_input_handle_time_and_skipped_rounds():
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        times = [handle.time()]
        handle.send("a")
        handle.advance_to(4)
        times.append(handle.time())
        handle.send("b")
        handle.advance_to(4)            # same time again is allowed
        handle.send_batch(["c", "d"])
        handle.advance_to(10)
        handle.close()
        return times, captured
    times, captured = st.execute_directly(job)
    assert times == [0, 4]
    assert captured.extract() == [(0, ["a"]), (4, ["b", "c", "d"])]


def test_one_input_handle_feeds_two_dataflows():
    def job(worker):
        handle = st.InputHandle()
        a = worker.dataflow(lambda scope: scope.input_from(handle).map(lambda x: x + 1).capture())
        b = worker.dataflow(lambda scope: scope.input_from(handle).count().capture())
        for r in range(3):
            handle.send_batch(range(r))
            handle.advance_to(r + 1)
        handle.close()
        return a, b
    a, b = st.execute_directly(job)
    assert a.extract() == [(1, [1]), (2, [1, 2])]
    assert b.extract() == [(1, [1]), (2, [2])]


# -- notifications ----------------------------------------------------------------------------

def notify_recorder(name, seen):
    """A unary_notify logic: forwards data, asks for a notification at each data time and
    records the notification times."""
    def logic(input, output, notificator):
        for cap, batch in input:
            output.session(cap).give_batch(batch)
            notificator.notify_at(cap.retain())
        for cap, count in notificator:
            seen.append(cap.time)
    return logic


def test_notifications_in_time_order_for_product_times():
    seen = []
    times = [Product(0, 3), Product(2, 0), Product(1, 1), Product(0, 0), Product(1, 0),
             Product(0, 1), Product(2, 2)]

    def build(scope):
        def inner(sub):
            stream = scope.to_stream(range(len(times))).enter(sub).delay(
                lambda i, t: times[i])
            return stream.unary_notify(st.Pipeline, "Recorder", [],
                                       notify_recorder("Recorder", seen)).leave()
        return scope.iterative(inner).capture()
    captured = st.example(build)
    assert seen == sorted(times)
    for i, a in enumerate(seen):
        for b in seen[i + 1:]:
            assert not b.less_than(a)
    assert captured.extract() == [(0, [0, 3, 5]), (1, [2, 4]), (2, [1, 6])]


def test_notifications_in_loop_respect_partial_order():
    seen = []

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            def inner(sub):
                looped_handle, looped = sub.loop_variable(1)
                stream = scope.input_from(handle).enter(sub).concat(looped)
                recorded = stream.unary_notify(st.Pipeline, "Recorder", [],
                                               notify_recorder("Recorder", seen))
                recorded.map(lambda x: x - 1).filter(lambda x: x > 0).connect_loop(looped_handle)
                return recorded.capture()
            return scope.iterative(inner)
        captured = worker.dataflow(build)
        for r, x in enumerate([3, 1, 2]):
            handle.send(x)
            handle.advance_to(r + 1)
        handle.close()
        return captured
    captured = st.execute_directly(job)
    expected_times = [Product(0, 0), Product(0, 1), Product(0, 2), Product(1, 0),
                      Product(2, 0), Product(2, 1)]
    assert sorted(seen) == expected_times
    assert len(seen) == len(set(seen))
    for i, a in enumerate(seen):
        for b in seen[i + 1:]:
            assert not b.less_than(a), (a, b, seen)
    assert captured.extract() == [
        (Product(0, 0), [3]), (Product(0, 1), [2]), (Product(0, 2), [1]),
        (Product(1, 0), [1]), (Product(2, 0), [2]), (Product(2, 1), [1])]


def test_unary_notify_delivers_requests_for_complete_times_in_the_same_iteration():
    # As timely's Notificator: a request made while iterating, for a time that is already
    # complete, is delivered by the same iteration, after the earlier times.
    seen = []
    per_schedule = []

    def logic(input, output, notificator):
        for _ in input:
            pass
        delivered = 0
        for cap, count in notificator:
            delivered += 1
            seen.append(cap.time)
            if cap.time < 100:
                notificator.notify_at(cap.delayed(cap.time + 1))
        per_schedule.append(delivered)

    def build(scope):
        return scope.to_stream([]).unary_notify(st.Pipeline, "Ticker", [0], logic).probe()
    probe = st.example(build)
    assert probe.done()
    assert seen == list(range(101))
    assert max(per_schedule) == 101 == sum(per_schedule)


def test_unary_notify_init_times_and_counts():
    seen = []

    def logic(input, output, notificator):
        for cap, batch in input:
            notificator.notify_at(cap.retain())
            notificator.notify_at(cap.retain())
        for cap, count in notificator:
            seen.append((cap.time, count))
            output.session(cap).give(cap.time)

    def build(scope):
        data = scope.to_stream([1, 2, 2]).delay(lambda x, t: x)
        return data.unary_notify(st.Pipeline, "Counts", [0, 5], logic).capture()
    captured = st.example(build)
    assert seen == [(0, 1), (1, 2), (2, 2), (5, 1)]
    assert captured.extract() == [(0, [0]), (1, [1]), (2, [2]), (5, [5])]


def test_binary_notify_waits_for_both_inputs():
    seen = []

    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()

        def logic(in1, in2, output, notificator):
            for cap, batch in in1:
                notificator.notify_at(cap.retain())
            for cap, batch in in2:
                notificator.notify_at(cap.retain())
            for cap, count in notificator:
                seen.append(cap.time)
                output.session(cap).give(cap.time)

        def build(scope):
            a, b = scope.input_from(h1), scope.input_from(h2)
            out = a.binary_notify(b, st.Pipeline, st.Pipeline, "Both", [], logic)
            return out.probe(), out.capture()
        probe, captured = worker.dataflow(build)
        h1.send("x")
        h1.advance_to(2)
        for _ in range(5):
            worker.step()
        before = list(seen)
        h2.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        after = list(seen)
        h1.close()
        h2.close()
        return before, after, captured
    before, after, captured = st.execute_directly(job)
    assert before == []
    assert after == [0]
    assert captured.extract() == [(0, [0])]


# -- OperatorBuilder --------------------------------------------------------------------------

def test_operator_builder_two_inputs_two_outputs_with_connection():
    def job(worker):
        h0, h1 = st.InputHandle(), st.InputHandle()

        def build(scope):
            builder = st.OperatorBuilder("TwoByTwo", scope)
            out0, stream0 = builder.new_output()
            out1, stream1 = builder.new_output()
            # input 0 reaches only output 1; input 1 reaches both
            in0 = builder.new_input(scope.input_from(h0), st.Pipeline, connection=[None, 0])
            in1 = builder.new_input(scope.input_from(h1), st.Pipeline, connection=[0, 0])

            def ctor(capabilities):
                assert len(capabilities) == 2
                for cap in capabilities:
                    cap.drop()

                def logic(frontiers):
                    assert len(frontiers) == 2
                    for cap, batch in in0:
                        out1.session(cap).give_batch([("from0", x) for x in batch])
                    for cap, batch in in1:
                        out0.session(cap).give_batch([("from1", x) for x in batch])
                        out1.session(cap).give_batch([("from1", x) for x in batch])
                return logic
            builder.build(ctor)
            return stream0.probe(), stream1.probe(), stream0.capture(), stream1.capture()
        p0, p1, c0, c1 = worker.dataflow(build)
        h0.send(1)
        h1.send(2)
        # input 0 stays at time 0, input 1 moves on to 5
        h1.advance_to(5)
        worker.step_while(lambda: p0.less_than(5))
        frontiers = (p0.frontier(), p1.frontier())
        h0.close()
        h1.close()
        return frontiers, c0, c1
    frontiers, c0, c1 = st.execute_directly(job)
    assert frontiers == ([5], [0])      # output 0 is not held back by input 0
    assert c0.extract() == [(0, [("from1", 2)])]
    assert c1.extract() == [(0, [("from0", 1), ("from1", 2)])]


def test_operator_builder_input_capability_for_unconnected_output_rejected():
    errors = []

    def build(scope):
        builder = st.OperatorBuilder("Disconnected", scope)
        builder.new_output()
        builder.new_output()
        input = builder.new_input(scope.to_stream([1]), st.Pipeline, connection=[None, 0])

        def ctor(capabilities):
            for cap in capabilities:
                cap.drop()

            def logic(frontiers):
                for cap, batch in input:
                    try:
                        cap.retain()            # output 0: not connected
                    except st.CapabilityError as error:
                        errors.append(str(error))
                    kept = cap.retain_for_output(1)
                    assert kept.time == 0
                    kept.drop()
            return logic
        builder.build(ctor)
    st.example(build)
    assert len(errors) == 1 and "output 0" in errors[0]


def test_operator_builder_session_on_unconnected_output_rejected():
    def build(scope):
        builder = st.OperatorBuilder("Disconnected", scope)
        out0, _ = builder.new_output()
        builder.new_output()
        input = builder.new_input(scope.to_stream([1]), st.Pipeline, connection=[None, 0])

        def ctor(capabilities):
            for cap in capabilities:
                cap.drop()

            def logic(frontiers):
                for cap, batch in input:
                    out0.session(cap).give_batch(batch)   # input 0 does not reach output 0
            return logic
        builder.build(ctor)
    with pytest.raises(st.OperatorError, match="CapabilityError"):
        st.example(build)


def test_operator_builder_build_reschedule_true_then_false():
    schedules = []

    def build(scope):
        builder = st.OperatorBuilder("Counter", scope)
        output, stream = builder.new_output()

        def ctor(capabilities):
            cap = capabilities[0]

            def logic(frontiers):
                n = len(schedules)
                schedules.append(n)
                output.session(cap).give(n)
                if n < 4:
                    cap.downgrade(n + 1)
                    return True
                cap.drop()
                return False
            return logic
        builder.build_reschedule(ctor)
        return stream.capture()
    captured = st.example(build)
    assert schedules == [0, 1, 2, 3, 4]
    assert captured.extract() == [(0, [0]), (1, [1]), (2, [2]), (3, [3]), (4, [4])]


def test_operator_builder_multiple_summaries_in_connection():
    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            builder = st.OperatorBuilder("Shift", scope)
            output, stream = builder.new_output()
            input = builder.new_input(scope.input_from(handle), st.Pipeline, connection=[3])

            def ctor(capabilities):
                capabilities[0].drop()

                def logic(frontiers):
                    for cap, batch in input:
                        with output.session(cap.delayed(cap.time + 3)) as session:
                            session.give_iterator(batch)
                return logic
            builder.build(ctor)
            return stream.probe(), stream.capture()
        probe, captured = worker.dataflow(build)
        handle.send("x")
        handle.advance_to(2)
        worker.step_while(lambda: probe.less_than(5))
        frontier = probe.frontier()
        handle.close()
        return frontier, captured
    frontier, captured = st.execute_directly(job)
    assert frontier == [5]             # the input frontier 2 plus the summary 3
    assert captured.extract() == [(3, ["x"])]


# -- frontiers, notificators and capability sets ---------------------------------------------

def step_rounds(worker, handle, probe, rounds):
    for r, records in enumerate(rounds):
        for x in records:
            handle.send(x)
        handle.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(r + 1))
    handle.close()


def test_unary_frontier_sees_frontier_changes():
    frontiers = []

    def ctor(cap, info):
        cap.drop()

        def logic(input, output):
            for cap, batch in input:
                output.session(cap).give_batch(batch)
            f = input.frontier.frontier()
            if not frontiers or frontiers[-1] != f:
                frontiers.append(f)
        return logic

    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(
            lambda scope: scope.input_from(handle).unary_frontier(st.Pipeline, "Watch", ctor)
            .probe())
        worker.step()
        for r, records in enumerate([[1], [], [2], []]):
            handle.send_batch(records)
            handle.advance_to(r + 1)
            for _ in range(100):             # the operator is eventually scheduled
                if frontiers[-1] == [r + 1]:
                    break
                worker.step()
        handle.close()
        return probe
    st.execute_directly(job)
    assert frontiers == [[0], [1], [2], [3], [4], []]


def test_frontier_notificator_in_unary_frontier():
    delivered = []

    def ctor(cap, info):
        cap.drop()
        notificator = st.FrontierNotificator()
        stash = {}

        def logic(input, output):
            for cap, batch in input:
                if cap.time not in stash:
                    stash[cap.time] = []
                    notificator.notify_at(cap.retain())
                stash[cap.time].extend(batch)

            def deliver(cap, notif):
                assert notif is notificator
                delivered.append(cap.time)
                output.session(cap).give(sorted(stash.pop(cap.time)))
            notificator.for_each([input.frontier], deliver)
        return logic

    def build(scope):
        data = scope.to_stream([(3, "c"), (1, "a"), (3, "b"), (2, "z")]).delay(
            lambda x, t: x[0]).map(lambda x: x[1])
        return data.unary_frontier(st.Pipeline, "Buffer", ctor).capture()
    captured = st.example(build)
    assert delivered == [1, 2, 3]
    assert captured.extract() == [(1, [["a"]]), (2, [["z"]]), (3, [["b", "c"]])]


def test_frontier_notificator_waits_for_frontier():
    def job(worker):
        handle = st.InputHandle()
        delivered = []

        def ctor(cap, info):
            cap.drop()
            notificator = st.FrontierNotificator()

            def logic(input, output):
                for cap, batch in input:
                    notificator.notify_at(cap.retain())
                notificator.for_each([input.frontier],
                                     lambda cap, n: delivered.append(cap.time))
            return logic
        probe = worker.dataflow(lambda scope: scope.input_from(handle)
                                .unary_frontier(st.Pipeline, "N", ctor).probe())
        history = []
        for r in range(3):
            handle.send(r)
            handle.send(r)
            handle.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1))
            history.append(list(delivered))
        handle.close()
        return history, delivered
    history, delivered = st.execute_directly(job)
    assert history == [[0], [0, 1], [0, 1, 2]]
    assert delivered == [0, 1, 2]


def test_capability_set_downgraded_to_frontier():
    def ctor(cap, info):
        caps = st.CapabilitySet([cap])
        emitted = set()

        def logic(input, output):
            for _ in input:
                pass
            frontier = input.frontier.frontier()
            for t in frontier:
                if t not in emitted:
                    emitted.add(t)
                    output.session(caps.delayed(t)).give(("frontier", t))
            caps.downgrade(frontier)
        return logic

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            stream = scope.input_from(handle).unary_frontier(st.Pipeline, "Marks", ctor)
            return stream.probe(), stream.capture()
        probe, captured = worker.dataflow(build)
        step_rounds(worker, handle, probe, [[None], [], [None]])
        return captured
    captured = st.execute_directly(job)
    assert captured.extract() == [(0, [("frontier", 0)]), (1, [("frontier", 1)]),
                                  (2, [("frontier", 2)]), (3, [("frontier", 3)])]


def test_capability_set_insert_first_and_errors():
    results = {}

    def build(scope):
        def ctor(cap, info):
            caps = st.CapabilitySet()
            results["empty"] = caps.is_empty()
            caps.insert(cap.delayed(4))
            caps.insert(cap.delayed(2))          # replaces 4
            caps.insert(cap.delayed(3))          # dominated by 2
            results["times"] = [c.time for c in caps]
            results["first"] = caps.first().time
            try:
                caps.delayed(1)
            except st.CapabilityError as error:
                results["error"] = str(error)
            cap.drop()
            later = caps.delayed(6)
            caps.drop()

            def logic(output):
                output.session(later).give("late")
                later.drop()
            return logic
        return st.source(scope, "Caps", ctor).capture()
    captured = st.example(build)
    assert results["empty"] is True
    assert results["times"] == [2]
    assert results["first"] == 2
    assert "1" in results["error"]
    assert captured.extract() == [(6, ["late"])]


# -- sources and activation ---------------------------------------------------------------

def test_source_with_activator_emits_over_several_schedules():
    schedules = []

    def build(scope):
        def ctor(cap, info):
            activator = scope.activator_for(info.address)
            assert info.name == "Ticks"

            def logic(output):
                n = len(schedules)
                schedules.append(n)
                with output.session(cap) as session:
                    session.give(n * n)
                if n < 5:
                    cap.downgrade(n + 1)
                    activator.activate()
                else:
                    cap.drop()
            return logic
        stream = st.source(scope, "Ticks", ctor)
        return stream.capture()
    captured = st.example(build)
    assert schedules == [0, 1, 2, 3, 4, 5]
    assert captured.extract() == [(0, [0]), (1, [1]), (2, [4]), (3, [9]), (4, [16]), (5, [25])]


def test_source_activated_from_outside_the_dataflow():
    def job(worker):
        pending = []
        state = {}

        def build(scope):
            def ctor(cap, info):
                state["activator"] = scope.activator_for(info.address)

                def logic(output):
                    while pending:
                        t, x = pending.pop(0)
                        if x is None:
                            cap.drop()
                            return
                        cap.downgrade(t)
                        output.session(cap).give(x)
                return logic
            stream = st.source(scope, "External", ctor)
            return stream.probe(), stream.capture()
        probe, captured = worker.dataflow(build)
        for t in range(3):
            pending.append((t, f"v{t}"))
            state["activator"].activate()
            worker.step()
            worker.step()
        pending.append((0, None))
        state["activator"].activate()
        return captured
    captured = st.execute_directly(job)
    assert captured.extract() == [(0, ["v0"]), (1, ["v1"]), (2, ["v2"])]


# -- regions and iteration ---------------------------------------------------------------------

def test_region_scope():
    def build(scope):
        def region(inner):
            assert inner.peers == 1 and inner.index == 0
            numbers = scope.to_stream(range(5)).enter(inner)
            return numbers.map(lambda x: x + 1).filter(lambda x: x % 2).leave()
        return scope.region(region).capture()
    assert st.example(build).extract() == [(0, [1, 3, 5])]


def test_nested_regions_with_rounds():
    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            def outer(r1):
                def inner(r2):
                    return scope.input_from(handle).enter(r1).enter(r2).count().leave()
                return r1.region(inner).leave()
            return scope.region(outer).capture()
        captured = worker.dataflow(build)
        for r in range(3):
            handle.send_batch(range(r + 1))
            handle.advance_to(r + 1)
        handle.close()
        return captured
    assert st.execute_directly(job).extract() == [(0, [1]), (1, [2]), (2, [3])]


def test_iterative_doubling_per_round():
    def job(worker):
        handle = st.InputHandle()
        iterations = []

        def build(scope):
            def loop(inner):
                loop_handle, looped = inner.loop_variable(1)
                doubled = scope.input_from(handle).enter(inner).concat(looped).map(
                    lambda x: 2 * x)
                doubled.inspect_time(lambda t, x: iterations.append((t, x)))
                doubled.filter(lambda x: x < 100).connect_loop(loop_handle)
                return doubled.filter(lambda x: x >= 100).leave()
            return scope.iterative(loop).capture()
        captured = worker.dataflow(build)
        for r, values in enumerate([[1], [30, 50], [], [200]]):
            handle.send_batch(values)
            handle.advance_to(r + 1)
        handle.close()
        return captured, iterations
    captured, iterations = st.execute_directly(job)
    assert captured.extract() == [(0, [128]), (1, [100, 120]), (3, [400])]
    assert sorted(t for t, x in iterations if t.outer == 0) == [Product(0, i) for i in range(7)]
    assert sorted(iterations)[-1] == (Product(3, 0), 400)
    assert (Product(1, 1), 120) in iterations and (Product(1, 0), 100) in iterations


def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def test_collatz_loopdemo_with_feedback_in_plain_scope():
    seeds = [1, 2, 3, 6, 7, 9, 27, 97]

    def build(scope):
        handle, looped = scope.feedback(1)
        stream = scope.to_stream([(s, s) for s in seeds]).concat(looped)
        finished = stream.filter(lambda p: p[1] == 1)
        stream.filter(lambda p: p[1] != 1).map(
            lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1)).connect_loop(handle)
        return finished.map(lambda p: p[0]).capture()
    captured = st.example(build)
    got = {seed: t for t, batch in captured.extract() for seed in batch}
    assert got == {seed: collatz_steps(seed) for seed in seeds}
    assert got[27] == 111 and got[97] == 118


def test_collatz_loop_many_seeds_counts_per_time():
    seeds = list(range(1, 60))

    def build(scope):
        handle, looped = scope.feedback(1)
        stream = scope.to_stream(seeds).concat(looped)
        live = stream.filter(lambda x: x != 1)
        live.map(lambda x: x // 2 if x % 2 == 0 else 3 * x + 1).connect_loop(handle)
        return live.count().capture()
    captured = st.example(build)
    expected = {}
    for s in seeds:
        for t in range(collatz_steps(s)):
            expected[t] = expected.get(t, 0) + 1
    assert captured.extract() == sorted((t, [c]) for t, c in expected.items())


# -- binary operators and sinks ---------------------------------------------------------------

def test_binary_frontier_emits_when_both_inputs_complete():
    def ctor(cap, info):
        cap.drop()
        left, right, notificator = {}, {}, st.FrontierNotificator()

        def logic(in1, in2, output):
            for input, stash in ((in1, left), (in2, right)):
                for cap, batch in input:
                    if cap.time not in left and cap.time not in right:
                        notificator.notify_at(cap.retain())
                    stash.setdefault(cap.time, []).extend(batch)

            def emit(cap, _):
                t = cap.time
                output.session(cap).give((sorted(left.pop(t, [])), sorted(right.pop(t, []))))
            notificator.for_each([in1.frontier, in2.frontier], emit)
        return logic

    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()

        def build(scope):
            joined = scope.input_from(h1).binary_frontier(
                scope.input_from(h2), st.Pipeline, st.Pipeline, "Pair", ctor)
            return joined.probe(), joined.capture()
        probe, captured = worker.dataflow(build)
        h1.send("a")
        h2.send("x")
        h1.advance_to(1)
        h1.send("b")
        h1.advance_to(2)
        for _ in range(5):
            worker.step()
        early = captured.extract()            # h2 still at 0: nothing complete
        h2.advance_to(1)
        h2.send("y")
        h2.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        h1.close()
        h2.close()
        return early, captured
    early, captured = st.execute_directly(job)
    assert early == []
    assert captured.extract() == [(0, [(["a"], ["x"])]), (1, [(["b"], ["y"])])]


def test_binary_without_frontier():
    def ctor(cap, info):
        cap.drop()

        def logic(in1, in2, output):
            for cap, batch in in1:
                output.session(cap).give_batch([("L", x) for x in batch])
            for cap, batch in in2:
                output.session(cap).give_batch([("R", x) for x in batch])
        return logic

    def build(scope):
        a = scope.to_stream([1, 2])
        b = scope.to_stream([3]).delay(lambda x, t: 4)
        return a.binary(b, st.Pipeline, st.Exchange(lambda x: x), "Tag", ctor).capture()
    assert st.example(build).extract() == [(0, [("L", 1), ("L", 2)]), (4, [("R", 3)])]


def test_sink_sees_data_and_frontier():
    seen = []

    def logic(input):
        for cap, batch in input:
            seen.append(("data", cap.time, list(batch)))
        seen.append(("frontier", input.frontier.frontier()))

    def job(worker):
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).sink(st.Pipeline, "Sink", logic))
        handle.send(7)
        handle.advance_to(1)
        handle.close()
    st.execute_directly(job)
    assert ("data", 0, [7]) in seen
    assert seen[-1] == ("frontier", [])
    assert [s for s in seen if s[0] == "data"] == [("data", 0, [7])]


# -- user timestamp types ---------------------------------------------------------------------

class LexTime:
    """A user timestamp: a totally ordered pair with ``less_equal`` and ``minimum``."""

    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b

    @classmethod
    def minimum(cls):
        return cls(0, 0)

    def less_equal(self, other):
        return (self.a, self.b) <= (other.a, other.b)

    def __eq__(self, other):
        return isinstance(other, LexTime) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self):
        return hash((self.a, self.b))

    def __reduce__(self):
        return (type(self), (self.a, self.b))

    def __repr__(self):
        return f"LexTime({self.a}, {self.b})"


class SortableLexTime(LexTime):
    def __lt__(self, other):
        return (self.a, self.b) < (other.a, other.b)


def run_user_time(kind):
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(
            lambda scope: scope.input_from(handle).map(lambda x: x + 1).count().capture(),
            timestamp=kind)
        assert handle.time() == kind(0, 0)
        handle.send(1)
        handle.advance_to(kind(0, 1))
        handle.send(2)
        handle.send(3)
        handle.advance_to(kind(1, 0))
        handle.send(4)
        handle.close()
        return captured
    return [(t.a, t.b, counts) for t, counts in st.execute_directly(job).extract()]


def test_user_timestamp_type_with_lt():
    assert run_user_time(SortableLexTime) == [(0, 0, [1]), (0, 1, [2]), (1, 0, [1])]


def test_user_timestamp_type_without_lt():
    assert run_user_time(LexTime) == [(0, 0, [1]), (0, 1, [2]), (1, 0, [1])]


# -- batch ownership ----------------------------------------------------------------------------

def test_give_batch_then_reuse_buffer():
    from sparktimely.dataflow import Worker
    worker = Worker()

    def ctor(cap, info):
        cap.drop()
        buffer = []

        def logic(input, output):
            for cap, batch in input:
                buffer.extend(batch)
                output.session(cap).give_batch(buffer)
                buffer.clear()
        return logic

    def build(scope):
        stream = scope.to_stream([1, 2, 3]).unary(st.Pipeline, "Reuse", ctor)
        return stream.probe(), stream.capture()
    probe, captured = worker.dataflow(build)
    running = True
    for _ in range(50):                 # bounded: a leaked count would spin forever
        running = worker.step()
        if not running:
            break
    assert captured.extract() == [(0, [1, 2, 3])]
    assert probe.done()
    assert not running
