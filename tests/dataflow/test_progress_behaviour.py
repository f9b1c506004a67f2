"""Progress as operators and drivers observe it: probes, notifications, frontiers,
capabilities, activation, and nested scopes with loops, at 1, 2 and 3 workers.

Every test runs through the ``run`` fixture (tests/conftest.py). What an operator observes
is checked on every worker; captured results are merged over the workers and compared with
values worked out by hand or recomputed in plain Python. ``scope.to_stream`` produces its
items on every worker, so those tests expect one copy per worker.
"""
import pytest

import sparktimely as st
from sparktimely import Product
from sparktimely.dataflow.subgraph import GRAPH
from sparktimely.testing import consolidate
from matrix_helpers import collatz_steps, copies, example, merged, per_worker, summed


# -- probes -----------------------------------------------------------------------------------

def test_probe_per_round_sees_exact_results(run):
    # Records go to the worker their value names; once a worker's probe passes a round, its
    # capture holds everything up to that round, so the workers' captures together hold all.
    def job(worker):
        handle = st.InputHandle()
        seen = []

        def build(scope):
            stream = scope.input_from(handle).exchange(lambda x: x).map(lambda x: x * 10)
            captured = stream.capture()
            return captured, stream.probe()
        captured, probe = worker.dataflow(build)
        assert probe.less_equal(0) and not probe.done()
        for round in range(5):
            if worker.index == 0:
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
    seen = run(job)
    expected = []
    for round in range(5):
        expected.append((round, sorted((round + i) * 10 for i in range(round + 1))))
        # later rounds' records may be in already, from workers that are ahead
        so_far = consolidate([mine[round] for mine in seen])
        assert [(t, records) for t, records in so_far if t <= round] == expected


def test_a_dataflow_is_announced_with_its_build_time_drops_in_one_message(run):
    """Building a dataflow sends each other worker one message: its description, carrying
    the capabilities its operators dropped while building (each operator's initial one),
    which the peers apply after checking the shape, before anything else of that dataflow.
    Alone, a worker sends nothing."""
    def job(worker):
        sent = []
        if worker.peers > 1:
            broadcast = worker.broadcast
            worker.broadcast = lambda message: (sent.append(message), broadcast(message))
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle)
                                .exchange(lambda x: x).map(lambda x: x + 1).probe())
        built = [(message[0], message[-1]) for message in sent]
        captured = []
        worker.dataflow(lambda scope: scope.to_stream(range(worker.index, 10, worker.peers))
                        .exchange(lambda x: x).inspect(captured.append))
        handle.advance_to(3)
        worker.step_while(lambda: probe.less_than(3))
        handle.close()
        worker.run()
        return built, captured
    results = run(job)
    for built, _ in results:
        if run.workers == 1:
            assert built == []
        else:
            [(kind, dropped)] = built
            assert kind == GRAPH and dropped and all(delta < 0 for _, delta in dropped)
    assert sorted(x for _, captured in results for x in captured) == list(range(10))


def test_probe_not_done_until_close(run):
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).probe())
        handle.advance_to(3)
        worker.step_while(lambda: probe.less_than(3))
        for _ in range(5):
            worker.step()
        frontier, done = probe.frontier(), probe.done()
        running = worker.step()
        handle.close()
        worker.step_while(lambda: not probe.done())
        finished = not worker.step()
        return frontier, done, running, probe.done(), finished
    assert run(job) == [([3], False, True, True, True)] * run.workers


def test_input_handle_time_and_skipped_rounds(run):
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        first = worker.index == 0
        times = [handle.time()]
        if first:
            handle.send("a")
        handle.advance_to(4)
        times.append(handle.time())
        if first:
            handle.send("b")
        handle.advance_to(4)            # same time again is allowed
        if first:
            handle.send_batch(["c", "d"])
        handle.advance_to(10)
        handle.close()
        return times, captured
    results = run(job)
    assert [times for times, _ in results] == [[0, 4]] * run.workers
    assert merged(c for _, c in results) == [(0, ["a"]), (4, ["b", "c", "d"])]


def test_one_input_handle_feeds_two_dataflows(run):
    def job(worker):
        handle = st.InputHandle()
        a = worker.dataflow(lambda scope: scope.input_from(handle).map(lambda x: x + 1).capture())
        b = worker.dataflow(lambda scope: scope.input_from(handle).count().capture())
        for r in range(4):
            handle.send_batch(range(r)[worker.index::worker.peers])
            handle.advance_to(r + 1)
        handle.close()
        return a, b
    results = run(job)
    assert merged(a for a, _ in results) == [(1, [1]), (2, [1, 2]), (3, [1, 2, 3])]
    assert summed(merged(b for _, b in results)) == [(1, 1), (2, 2), (3, 3)]


# -- notifications ----------------------------------------------------------------------------

def notify_recorder(seen):
    """A unary_notify logic: forwards data, asks for a notification at each data time and
    records the notification times in ``seen``."""
    def logic(input, output, notificator):
        for cap, batch in input:
            output.session(cap).give_batch(batch)
            notificator.notify_at(cap.retain())
        for cap, count in notificator:
            seen.append(cap.time)
    return logic


def test_notifications_in_time_order_for_product_times(run):
    seen = per_worker(run.workers)
    times = [Product(0, 3), Product(2, 0), Product(1, 1), Product(0, 0), Product(1, 0),
             Product(0, 1), Product(2, 2)]

    def build(scope):
        def inner(sub):
            stream = scope.to_stream(range(len(times))).enter(sub).delay(
                lambda i, t: times[i])
            return stream.unary_notify(st.Pipeline, "Recorder", [],
                                       notify_recorder(seen[scope.index])).leave()
        return scope.iterative(inner).capture()
    captured = example(run, build)
    for mine in seen:
        assert mine == sorted(times)
        for i, a in enumerate(mine):
            for b in mine[i + 1:]:
                assert not b.less_than(a)
    assert merged(captured) == copies([(0, [0, 3, 5]), (1, [2, 4]), (2, [1, 6])], run.workers)


def test_notifications_in_loop_respect_partial_order(run):
    # The recorder takes its records by value (Exchange), so each time's record is
    # notified on one worker, whichever it is.
    seen = per_worker(run.workers)

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            def inner(sub):
                looped_handle, looped = sub.loop_variable(1)
                stream = scope.input_from(handle).enter(sub).concat(looped)
                recorded = stream.unary_notify(st.Exchange(lambda x: x), "Recorder", [],
                                               notify_recorder(seen[worker.index]))
                recorded.map(lambda x: x - 1).filter(lambda x: x > 0).connect_loop(looped_handle)
                return recorded.capture()
            return scope.iterative(inner)
        captured = worker.dataflow(build)
        for r, x in enumerate([3, 1, 2]):
            if worker.index == r % worker.peers:
                handle.send(x)
            handle.advance_to(r + 1)
        handle.close()
        return captured
    captured = run(job)
    expected_times = [Product(0, 0), Product(0, 1), Product(0, 2), Product(1, 0),
                      Product(2, 0), Product(2, 1)]
    assert sorted(t for mine in seen for t in mine) == expected_times
    for mine in seen:
        for i, a in enumerate(mine):
            for b in mine[i + 1:]:
                assert not b.less_than(a), (a, b, mine)
    assert merged(captured) == [
        (Product(0, 0), [3]), (Product(0, 1), [2]), (Product(0, 2), [1]),
        (Product(1, 0), [1]), (Product(2, 0), [2]), (Product(2, 1), [1])]


def test_unary_notify_delivers_requests_for_complete_times_in_the_same_iteration(run):
    # As timely's Notificator: a request made while iterating, for a time that is already
    # complete, is delivered by the same iteration, after the earlier times.
    seen = per_worker(run.workers)
    per_schedule = per_worker(run.workers)

    def build(scope):
        def logic(input, output, notificator):
            for _ in input:
                pass
            delivered = 0
            for cap, count in notificator:
                delivered += 1
                seen[scope.index].append(cap.time)
                if cap.time < 100:
                    notificator.notify_at(cap.delayed(cap.time + 1))
            per_schedule[scope.index].append(delivered)
        return scope.to_stream([]).unary_notify(st.Pipeline, "Ticker", [0], logic).probe()
    for probe in example(run, build):
        assert probe.done()
    assert seen == [list(range(101))] * run.workers
    for counts in per_schedule:
        assert max(counts) == 101 == sum(counts)


@pytest.mark.parametrize("init_times", [[0, 5], (0, 5), range(0, 6, 5)],
                         ids=["list", "tuple", "range"])
def test_unary_notify_init_times_and_counts(run, init_times):
    """init_times is a sequence of times (a range was refused, though it is a Sequence)."""
    seen = per_worker(run.workers)

    def build(scope):
        def logic(input, output, notificator):
            for cap, batch in input:
                notificator.notify_at(cap.retain())
                notificator.notify_at(cap.retain())
            for cap, count in notificator:
                seen[scope.index].append((cap.time, count))
                output.session(cap).give(cap.time)
        data = scope.to_stream([1, 2, 2]).delay(lambda x, t: x)
        return data.unary_notify(st.Pipeline, "Counts", init_times, logic).capture()
    captured = example(run, build)
    assert seen == [[(0, 1), (1, 2), (2, 2), (5, 1)]] * run.workers
    assert merged(captured) == copies([(0, [0]), (1, [1]), (2, [2]), (5, [5])], run.workers)


def test_binary_notify_waits_for_both_inputs(run):
    def job(worker):
        h1, h2 = st.InputHandle(), st.InputHandle()
        seen = []

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
        before = list(seen)             # this worker's h2 still holds time 0
        h2.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        after = list(seen)
        h1.close()
        h2.close()
        return before, after, captured
    results = run(job)
    assert [(before, after) for before, after, _ in results] == [([], [0])] * run.workers
    assert merged(c for _, _, c in results) == copies([(0, [0])], run.workers)


# -- OperatorBuilder --------------------------------------------------------------------------

def test_operator_builder_two_inputs_two_outputs_with_connection(run):
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
        if worker.index == 0:
            h0.send(1)
        if worker.index == worker.peers - 1:
            h1.send(2)
        # input 0 stays at time 0, input 1 moves on to 5
        h1.advance_to(5)
        worker.step_while(lambda: p0.less_than(5))
        frontiers = (p0.frontier(), p1.frontier())
        h0.close()
        h1.close()
        return frontiers, c0, c1
    results = run(job)
    # output 0 is not held back by input 0
    assert [frontiers for frontiers, _, _ in results] == [([5], [0])] * run.workers
    assert merged(c0 for _, c0, _ in results) == [(0, [("from1", 2)])]
    assert merged(c1 for _, _, c1 in results) == [(0, [("from0", 1), ("from1", 2)])]


def test_operator_builder_input_capability_for_unconnected_output_rejected(run):
    errors = per_worker(run.workers)

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
                        errors[scope.index].append(str(error))
                    kept = cap.retain_for_output(1)
                    assert kept.time == 0
                    kept.drop()
            return logic
        builder.build(ctor)
    example(run, build)
    for mine in errors:
        assert len(mine) == 1 and "output 0" in mine[0]


def test_operator_builder_session_on_unconnected_output_rejected(run):
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
    with pytest.raises(st.WorkerError, match="OperatorError: operator 'Disconnected'.*"
                                             "CapabilityError"):
        example(run, build)


def test_operator_builder_build_reschedule_true_then_false(run):
    schedules = per_worker(run.workers)

    def build(scope):
        builder = st.OperatorBuilder("Counter", scope)
        output, stream = builder.new_output()

        def ctor(capabilities):
            cap = capabilities[0]
            mine = schedules[scope.index]

            def logic(frontiers):
                n = len(mine)
                mine.append(n)
                output.session(cap).give(n)
                if n < 4:
                    cap.downgrade(n + 1)
                    return True
                cap.drop()
                return False
            return logic
        builder.build_reschedule(ctor)
        return stream.capture()
    captured = example(run, build)
    assert schedules == [[0, 1, 2, 3, 4]] * run.workers
    assert merged(captured) == copies([(t, [t]) for t in range(5)], run.workers)


def test_operator_builder_multiple_summaries_in_connection(run):
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
        if worker.index == worker.peers - 1:
            handle.send("x")
        handle.advance_to(2)
        worker.step_while(lambda: probe.less_than(5))
        frontier = probe.frontier()
        handle.close()
        return frontier, captured
    results = run(job)
    # the input frontier 2 plus the summary 3
    assert [frontier for frontier, _ in results] == [[5]] * run.workers
    assert merged(c for _, c in results) == [(3, ["x"])]


# -- frontiers, notificators and capability sets ---------------------------------------------

def step_rounds(worker, handle, probe, rounds):
    """Worker 0 sends ``rounds[r]`` at time ``r``; every worker advances and waits for its
    probe to pass each round, then closes."""
    for r, records in enumerate(rounds):
        if worker.index == 0:
            for x in records:
                handle.send(x)
        handle.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(r + 1))
    handle.close()


def test_unary_frontier_sees_frontier_changes(run):
    # Each worker waits until its operator has seen round r's frontier before it advances
    # its own input, so every worker's operator sees every frontier.
    def job(worker):
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
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle)
                        .unary_frontier(st.Pipeline, "Watch", ctor).probe())
        worker.step()
        for r, records in enumerate([[1], [], [2], []]):
            if worker.index == 0:
                handle.send_batch(records)
            handle.advance_to(r + 1)
            worker.step_while(lambda: frontiers[-1] != [r + 1])
        handle.close()
        worker.run()
        return frontiers
    assert run(job) == [[[0], [1], [2], [3], [4], []]] * run.workers


def test_frontier_notificator_in_unary_frontier(run):
    delivered = per_worker(run.workers)

    def build(scope):
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
                    delivered[scope.index].append(cap.time)
                    output.session(cap).give(sorted(stash.pop(cap.time)))
                notificator.for_each([input.frontier], deliver)
            return logic
        data = scope.to_stream([(3, "c"), (1, "a"), (3, "b"), (2, "z")]).delay(
            lambda x, t: x[0]).map(lambda x: x[1])
        return data.unary_frontier(st.Pipeline, "Buffer", ctor).capture()
    captured = example(run, build)
    assert delivered == [[1, 2, 3]] * run.workers
    assert merged(captured) == copies([(1, [["a"]]), (2, [["z"]]), (3, [["b", "c"]])],
                                      run.workers)


def test_frontier_notificator_waits_for_frontier(run):
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
        worker.run()
        return history, delivered
    assert run(job) == [([[0], [0, 1], [0, 1, 2]], [0, 1, 2])] * run.workers


def test_capability_set_downgraded_to_frontier(run):
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
        # A step before this worker's first advance: its operator sees frontier [0] (which
        # this worker's input holds), whatever the other workers' progress has reached.
        worker.step()
        step_rounds(worker, handle, probe, [[None], [], [None]])
        return captured
    for captured in run(job):
        assert captured.extract() == [(t, [("frontier", t)]) for t in range(4)]


def test_capability_set_insert_first_and_errors(run):
    results = [{} for _ in range(run.workers)]

    def build(scope):
        mine = results[scope.index]

        def ctor(cap, info):
            caps = st.CapabilitySet()
            mine["empty"] = caps.is_empty()
            caps.insert(cap.delayed(4))
            caps.insert(cap.delayed(2))          # replaces 4
            caps.insert(cap.delayed(3))          # dominated by 2
            mine["times"] = [c.time for c in caps]
            mine["first"] = caps.first().time
            try:
                caps.delayed(1)
            except st.CapabilityError as error:
                mine["error"] = str(error)
            cap.drop()
            later = caps.delayed(6)
            caps.drop()

            def logic(output):
                output.session(later).give("late")
                later.drop()
            return logic
        return st.source(scope, "Caps", ctor).capture()
    captured = example(run, build)
    for mine in results:
        assert mine["empty"] is True
        assert mine["times"] == [2]
        assert mine["first"] == 2
        assert "allows time 1" in mine["error"]
    assert merged(captured) == copies([(6, ["late"])], run.workers)


def test_a_capability_set_refuses_a_capability_of_another_output(run):
    """Timely's set tells outputs apart; a set here holds one output's: a capability of
    another output was silently left out (a set at the same time), and the session that
    used the set's capability for that output failed later, far from the cause."""
    told = per_worker(run.workers)

    def build(scope):
        builder = st.OperatorBuilder("Two", scope)
        input = builder.new_input(scope.to_stream([1]), st.Pipeline)
        first, left = builder.new_output()
        _, right = builder.new_output()

        def ctor(capabilities):
            for make in (lambda: st.CapabilitySet(capabilities),
                         lambda: st.CapabilitySet([capabilities[0]]).insert(capabilities[1])):
                with pytest.raises(st.CapabilityError) as caught:
                    make()
                told[scope.index].append(str(caught.value))
            held = st.CapabilitySet([capabilities[0].delayed(3)])
            for capability in capabilities:
                capability.drop()

            def logic(frontiers):
                for _ in input:
                    pass
                if not held.is_empty():
                    first.session(held.delayed(3)).give("three")
                    held.drop()
            return logic
        builder.build(ctor)
        return left.capture(), right.capture()
    captured = example(run, build)
    assert merged([left for left, _ in captured]) == copies([(3, ["three"])], run.workers)
    assert merged([right for _, right in captured]) == []
    assert told == [["a CapabilitySet holds capabilities of one output: the capability for "
                     "time 0 is for another output than those it holds (keep a set per "
                     "output)"] * 2] * run.workers


def test_a_copied_capability_is_one_more_capability(run):
    """``copy.copy`` (and ``deepcopy``) of a capability is timely's ``clone``: a new one at
    the same time, counted on its own. Dropping the original (and another copy) leaves the
    copy holding time 5: every worker's probe stays at 5 until it gives there and drops it,
    and the record given is never behind a frontier. A capability refuses to be pickled."""
    import copy
    import pickle
    frontiers, given = per_worker(run.workers), per_worker(run.workers)

    def build(scope):
        def ctor(cap, info):
            at_5 = cap.delayed(5)
            kept, spare = copy.copy(at_5), copy.deepcopy(at_5)
            with pytest.raises(TypeError, match="cannot be pickled"):
                pickle.dumps(kept)
            cap.drop()
            at_5.drop()
            spare.drop()
            again = scope.activator_for(info.address)
            runs = [0]

            def logic(output):
                runs[0] += 1
                if runs[0] < 20:
                    again.activate()            # the probe must stay at 5 meanwhile
                elif kept.time == 5:
                    output.session(kept).give("at 5")
                    kept.drop()
            return logic
        stream = st.source(scope, "Copies", ctor)
        probe = stream.probe()
        stream.inspect_time(lambda t, x: given[scope.index].append((t, probe.frontier())))
        return stream.capture(), probe

    def job(worker):
        captured, probe = worker.dataflow(build)
        seen = frontiers[worker.index]
        running = True
        while running:
            running = worker.step()
            if not seen or seen[-1] != probe.frontier():
                seen.append(probe.frontier())
        return captured.extract()
    assert run(job) == [[(5, ["at 5"])]] * run.workers
    for seen, data in zip(frontiers, given):
        assert seen[-2:] == [[5], []], seen
        assert data == [(5, [5])], data


# -- sources and activation ---------------------------------------------------------------

def test_source_with_activator_emits_over_several_schedules(run):
    schedules = per_worker(run.workers)

    def build(scope):
        mine = schedules[scope.index]

        def ctor(cap, info):
            activator = scope.activator_for(info.address)
            assert info.name == "Ticks"

            def logic(output):
                n = len(mine)
                mine.append(n)
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
    captured = example(run, build)
    assert schedules == [[0, 1, 2, 3, 4, 5]] * run.workers
    assert merged(captured) == copies([(n, [n * n]) for n in range(6)], run.workers)


def test_source_activated_from_outside_the_dataflow(run):
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
            pending.append((t, f"v{t}@{worker.index}"))
            state["activator"].activate()
            worker.step()
            worker.step()
        pending.append((0, None))
        state["activator"].activate()
        return captured
    assert merged(run(job)) == [(t, [f"v{t}@{w}" for w in range(run.workers)])
                                for t in range(3)]


# -- regions and iteration ---------------------------------------------------------------------

def test_region_scope(run):
    def build(scope):
        def region(inner):
            assert (inner.peers, inner.index) == (scope.peers, scope.index)
            numbers = scope.to_stream(range(5)).enter(inner)
            return numbers.map(lambda x: x + 1).filter(lambda x: x % 2).leave()
        return scope.region(region).capture()
    assert merged(example(run, build)) == copies([(0, [1, 3, 5])], run.workers)


def test_nested_regions_with_rounds(run):
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
            handle.send_batch(range(r + 1)[worker.index::worker.peers])
            handle.advance_to(r + 1)
        handle.close()
        return captured
    assert summed(merged(run(job))) == [(0, 1), (1, 2), (2, 3)]


def test_iterative_doubling_per_round(run):
    iterations = []

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            def loop(inner):
                loop_handle, looped = inner.loop_variable(1)
                doubled = scope.input_from(handle).enter(inner).concat(looped).map(
                    lambda x: 2 * x)
                doubled.inspect_time(lambda t, x: iterations.append((t, x)))
                doubled.filter(lambda x: x < 100).exchange(lambda x: x // 2) \
                    .connect_loop(loop_handle)
                return doubled.filter(lambda x: x >= 100).leave()
            return scope.iterative(loop).capture()
        captured = worker.dataflow(build)
        for r, values in enumerate([[1], [30, 50], [], [200]]):
            handle.send_batch(values[worker.index::worker.peers])
            handle.advance_to(r + 1)
        handle.close()
        return captured
    assert merged(run(job)) == [(0, [128]), (1, [100, 120]), (3, [400])]
    assert sorted(t for t, x in iterations if t.outer == 0) == [Product(0, i) for i in range(7)]
    assert sorted(iterations)[-1] == (Product(3, 0), 400)
    assert (Product(1, 1), 120) in iterations and (Product(1, 0), 100) in iterations
    assert len(iterations) == 7 + 3 + 1


def test_collatz_loopdemo_with_feedback_in_plain_scope(run):
    seeds = [1, 2, 3, 6, 7, 9, 27, 97]

    def build(scope):
        handle, looped = scope.feedback(1)
        mine = seeds if scope.index == 0 else []
        stream = scope.to_stream([(s, s) for s in mine]).concat(looped)
        finished = stream.filter(lambda p: p[1] == 1)
        stream.filter(lambda p: p[1] != 1).map(
            lambda p: (p[0], p[1] // 2 if p[1] % 2 == 0 else 3 * p[1] + 1)) \
            .exchange(lambda p: p[1]).connect_loop(handle)
        return finished.map(lambda p: p[0]).capture()
    got = {seed: t for t, batch in merged(example(run, build)) for seed in batch}
    assert got == {seed: collatz_steps(seed) for seed in seeds}
    assert got[27] == 111 and got[97] == 118


def test_collatz_loop_many_seeds_counts_per_time(run):
    seeds = list(range(1, 60))

    def build(scope):
        handle, looped = scope.feedback(1)
        stream = scope.to_stream(seeds[scope.index::scope.peers]).concat(looped)
        live = stream.filter(lambda x: x != 1)
        live.map(lambda x: x // 2 if x % 2 == 0 else 3 * x + 1).exchange(lambda x: x) \
            .connect_loop(handle)
        return live.count().capture()
    expected = {}
    for s in seeds:
        for t in range(collatz_steps(s)):
            expected[t] = expected.get(t, 0) + 1
    assert summed(merged(example(run, build))) == sorted(expected.items())


# -- binary operators and sinks ---------------------------------------------------------------

def test_binary_frontier_emits_when_both_inputs_complete(run):
    # Both inputs are exchanged to worker 0; h1's records come from worker 0, h2's from the
    # last worker.
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
        first, last = worker.index == 0, worker.index == worker.peers - 1

        def build(scope):
            to_first = st.Exchange(lambda x: 0)
            joined = scope.input_from(h1).binary_frontier(
                scope.input_from(h2), to_first, to_first, "Pair", ctor)
            return joined.probe(), joined.capture()
        probe, captured = worker.dataflow(build)
        if first:
            h1.send("a")
        if last:
            h2.send("x")
        h1.advance_to(1)
        if first:
            h1.send("b")
        h1.advance_to(2)
        for _ in range(5):
            worker.step()
        early = captured.extract()            # this worker's h2 is still at 0: nothing complete
        h2.advance_to(1)
        if last:
            h2.send("y")
        h2.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        h1.close()
        h2.close()
        return early, captured
    results = run(job)
    assert [early for early, _ in results] == [[]] * run.workers
    assert [c.extract() for _, c in results] == \
        [[(0, [(["a"], ["x"])]), (1, [(["b"], ["y"])])]] + [[]] * (run.workers - 1)


def test_binary_without_frontier(run):
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
    captured = example(run, build)
    assert merged(captured) == copies([(0, [("L", 1), ("L", 2)]), (4, [("R", 3)])],
                                      run.workers)
    assert [c.extract()[-1] for c in captured][3 % run.workers] == (4, [("R", 3)] * run.workers)


def test_sink_sees_data_and_frontier(run):
    def job(worker):
        seen = []

        def logic(input):
            for cap, batch in input:
                seen.append(("data", cap.time, list(batch)))
            seen.append(("frontier", input.frontier.frontier()))
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).sink(st.Pipeline, "Sink", logic))
        handle.send(7 + worker.index)
        handle.advance_to(1)
        handle.close()
        worker.run()
        return seen
    for index, seen in enumerate(run(job)):
        assert seen[-1] == ("frontier", [])
        assert [s for s in seen if s[0] == "data"] == [("data", 0, [7 + index])]


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


def run_user_time(run, kind):
    """Records exchanged between the workers at user times (which travel pickled), counted
    per worker; returns ``(a, b, total count)`` per time."""
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(
            lambda scope: scope.input_from(handle).map(lambda x: x + 1).exchange(lambda x: x)
            .count().capture(), timestamp=kind)
        assert handle.time() == kind(0, 0)
        first = worker.index == 0
        if first:
            handle.send(1)
        handle.advance_to(kind(0, 1))
        if first:
            handle.send_batch([2, 3])
        handle.advance_to(kind(1, 0))
        if first:
            handle.send(4)
        handle.close()
        return captured
    totals = {}
    for captured in run(job):
        times = [(t.a, t.b) for t, _ in captured.extract()]
        assert times == sorted(times), "extract sorts times, __lt__ or not"
        for t, counts in captured.extract():
            totals[(t.a, t.b)] = totals.get((t.a, t.b), 0) + sum(counts)
    return sorted((a, b, n) for (a, b), n in totals.items())


def test_user_timestamp_type_with_lt(run):
    assert run_user_time(run, SortableLexTime) == [(0, 0, 1), (0, 1, 2), (1, 0, 1)]


def test_user_timestamp_type_without_lt(run):
    assert run_user_time(run, LexTime) == [(0, 0, 1), (0, 1, 2), (1, 0, 1)]


# -- batch ownership ----------------------------------------------------------------------------

def test_give_batch_then_reuse_buffer(run):
    # An operator that reuses the list it handed to give_batch: the records sent must stay
    # as they were, and the worker must finish (a leaked count would keep it running).
    def job(worker):
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
            stream = scope.to_stream([1, 2, 3]).exchange(lambda x: x) \
                .unary(st.Pipeline, "Reuse", ctor)
            return stream.probe(), stream.capture()
        probe, captured = worker.dataflow(build)
        running = True
        for _ in range(500):                 # bounded: a leaked count would spin forever
            running = worker.step()
            if not running:
                break
        return running, probe.done(), captured
    results = run(job)
    assert [(running, done) for running, done, _ in results] == [(False, True)] * run.workers
    assert merged(c for _, _, c in results) == copies([(0, [1, 2, 3])], run.workers)
