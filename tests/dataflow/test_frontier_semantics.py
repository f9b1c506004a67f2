"""Frontier semantics that must not depend on the worker count (timely 0.29 is the reference):
first scheduling, notification order, partially ordered root times, cross-worker identity,
messages that arrive before their dataflow is built. Every test runs at 1, 2 and 3 workers
(the ``run`` fixture) and compares the consolidated result with an oracle."""
import gc
import time
import tracemalloc
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import sparktimely as st
import sparktimely.differential as dd
from sparktimely import Product
from sparktimely.dataflow.worker import IndexRanges
from sparktimely.testing import consolidate


def rounds_of_input(worker, input, rounds, probe, records=lambda r: [r]):
    """Worker 0 sends ``records(r)`` at each round ``r``; everyone advances and waits."""
    for r in range(rounds):
        if worker.index == 0:
            input.send_batch(records(r))
        input.advance_to(r + 1)
        worker.step_while(lambda: probe.less_than(r + 1))
    input.close()


# -- 1. the first frontier anything sees is the minimum ----------------------------------------

def test_first_scheduling_sees_the_initial_capabilities(run):
    def job(worker):
        input = st.InputHandle()
        frontiers = []

        def build(scope):
            def ctor(cap, info):
                cap.drop()

                def logic(input_, output):
                    frontiers.append(input_.frontier.frontier())
                    for _ in input_:
                        pass
                return logic
            stream = scope.input_from(input)
            stream.unary_frontier(st.Pipeline, "Watch", ctor)
            return stream.probe()
        probe = worker.dataflow(build)
        before_any_step = (probe.done(), probe.frontier(), probe.less_equal(0))
        rounds_of_input(worker, input, 2, probe)
        worker.run()
        return before_any_step, frontiers
    for before_any_step, frontiers in run(job):
        assert before_any_step == (False, [0], True)
        assert frontiers[0] == [0]
        assert frontiers[-1] == []
        assert frontiers == sorted(frontiers, key=lambda f: f[0] if f else 99)


def test_first_frontier_when_no_capability_is_dropped_while_building(run):
    # A source and a downstream operator that both keep their initial capabilities: no
    # pointstamp changes while building, yet the initial capabilities must be counted.
    def job(worker):
        seen = []

        def build(scope):
            def source_ctor(cap, info):
                activate = scope.activator_for(info.address).activate
                ticks = []

                def logic(output):
                    ticks.append(1)
                    if len(ticks) == 3:
                        output.session(cap).give(worker.index)
                        cap.drop()
                    elif len(ticks) < 3:
                        activate()
                return logic

            def ctor(cap, info):
                held = st.CapabilitySet([cap])

                def logic(input, output):
                    seen.append(input.frontier.frontier())
                    for in_cap, batch in input:
                        output.session(held.delayed(in_cap.time)).give_batch(batch)
                    held.downgrade(input.frontier.frontier())
                return logic
            out = st.source(scope, "Ticks", source_ctor).unary_frontier(st.Pipeline, "Held", ctor)
            return out.probe(), out.capture()
        probe, captured = worker.dataflow(build)
        done_at_start = probe.done()
        worker.run()
        return done_at_start, seen, captured.extract()
    results = run(job)
    for done_at_start, seen, _ in results:
        assert not done_at_start
        assert seen[0] == [0] and seen[-1] == []
    assert consolidate([c for _, _, c in results]) == [(0, list(range(run.workers)))]


# -- capabilities made while building may differ from worker to worker ------------------------

def test_notification_times_that_differ_per_worker_are_each_delivered(run):
    # Each worker asks, while the dataflow is built, for a notification at its own time: the
    # capabilities behind them are this worker's, not every worker's.
    def job(worker):
        def build(scope):
            def logic(input, output, notificator):
                for _ in input:
                    pass
                for cap, _ in notificator:
                    output.session(cap).give(worker.index)
            return scope.to_stream([]).unary_notify(
                st.Pipeline, "OwnTime", [worker.index + 1], logic).capture()
        captured = worker.dataflow(build)
        worker.run()
        return captured.extract()
    assert consolidate(run(job)) == [(w + 1, [w]) for w in range(run.workers)]


def test_a_capability_one_worker_delays_to_while_building_holds_every_probe(run):
    # Worker 0's constructor delays its capability to 5 and drops the first one; the others
    # drop theirs. Until worker 0 sends at 5, no worker's probe may pass 5.
    def job(worker):
        def build(scope):
            def ctor(cap, info):
                held = [cap.delayed(5)] if worker.index == 0 else []
                cap.drop()
                activate = scope.activator_for(info.address).activate
                steps = []

                def logic(output):
                    steps.append(1)
                    if held and len(steps) < 20:
                        activate()          # hold time 5 for a while
                    elif held:
                        output.session(held[0]).give("x")
                        held.pop().drop()
                return logic
            stream = st.source(scope, "DelayedWhileBuilt", ctor).exchange(lambda x: 0)
            return stream.probe(), stream.capture()
        probe, captured = worker.dataflow(build)
        frontiers = []
        while worker.step():
            frontiers.append(probe.frontier())
        return frontiers, captured.extract()
    results = run(job)
    for frontiers, _ in results:
        before_end = [f for f in frontiers if f]
        assert all(f in ([0], [5]) for f in before_end), before_end
    assert consolidate([c for _, c in results]) == [(5, ["x"])]


def test_an_input_advanced_before_it_is_connected_starts_at_its_time(run):
    # As timely's handle: the time is kept for the dataflow it will feed (it used to raise).
    def job(worker):
        input, session = st.InputHandle(), dd.InputSession()
        if worker.index == 0:
            input.advance_to(3)
            session.advance_to(3)
        records, counts = worker.dataflow(lambda scope: (
            scope.input_from(input).exchange(lambda x: 0).capture(),
            session.to_collection(scope).count().inner.capture()))
        input.send(worker.index)
        session.insert("a")
        for handle in (input, session):
            handle.advance_to(5)
            handle.close()
        worker.run()
        return records.extract(), counts.extract()
    results = run(job)
    early = run.workers - 1
    assert consolidate([r for r, _ in results]) == (
        [(0, list(range(1, run.workers)))] if early else []) + [(3, [0])]
    assert consolidate([c for _, c in results]) == (
        [(0, [(("a", early), 0, 1)])] if early else []) + [
        (3, sorted(([(("a", early), 3, -1)] if early else []) + [(("a", early + 1), 3, 1)]))]


def test_a_later_dataflow_fed_by_inputs_at_different_times_completes(run):
    # One InputHandle feeds two dataflows; worker 0's handle is at 3 when the second one
    # connects it, the others' still at 0: each input starts at its own handle's time.
    def job(worker):
        input = st.InputHandle()
        first = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: 0)
                                .capture())
        if worker.index == 0:
            input.advance_to(3)
        second = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: 0)
                                 .capture())
        input.send(worker.index)
        input.advance_to(4)
        input.close()
        worker.run()
        return first.extract(), second.extract()
    results = run(job)
    expected = [(0, list(range(1, run.workers)))] if run.workers > 1 else []
    expected = expected + [(3, [0])]
    assert consolidate([first for first, _ in results]) == expected
    assert consolidate([second for _, second in results]) == expected


def test_capability_set_downgraded_on_first_scheduling_keeps_open_times(run):
    # The operator re-stamps each batch with a capability from a set it downgrades to the
    # input frontier whenever scheduled: downgrading past open times would make it fail.
    def job(worker):
        input = st.InputHandle()

        def build(scope):
            def ctor(cap, info):
                held = st.CapabilitySet([cap])

                def logic(input_, output):
                    for in_cap, batch in input_:
                        output.session(held.delayed(in_cap.time)).give_batch(
                            [x * 10 for x in batch])
                    held.downgrade(input_.frontier.frontier())
                return logic
            out = scope.input_from(input).unary_frontier(st.Pipeline, "Held", ctor)
            return out.capture(), out.probe()
        captured, probe = worker.dataflow(build)
        rounds_of_input(worker, input, 4, probe, lambda r: [r, r + 100])
        return captured.extract()
    assert consolidate(run(job)) == [(r, [r * 10, (r + 100) * 10]) for r in range(4)]


# -- 2. and 3. notifications respect the order of times --------------------------------------

def test_notify_at_while_delivering_comes_after_earlier_ready_times(run):
    # Times 2 and 5 are ready together; delivering 2 requests 3, which is ready too: the order
    # must be 2, 3, 5 (3 must not wait until after 5, nor come before 2).
    def job(worker):
        order = []

        def logic(input, output, notificator):
            for _ in input:
                pass
            for cap, count in notificator:
                order.append(cap.time)
                if cap.time == 2:
                    notificator.notify_at(cap.delayed(3))
                output.session(cap).give(cap.time)
        captured = worker.dataflow(lambda scope: scope.to_stream([]).unary_notify(
            st.Pipeline, "Order", [5, 2], logic).capture())
        worker.run()
        return order, captured.extract()
    results = run(job)
    for order, _ in results:
        assert order == [2, 3, 5]
    assert consolidate([extract for _, extract in results]) == [
        (t, [t] * run.workers) for t in (2, 3, 5)]


def test_notify_at_frontiered_delivers_by_the_frontiers_it_was_given(run):
    """A request made complete by the frontiers given with it is delivered by the next
    for_each, though the frontiers that call gets still hold its time: ``[]`` (no input)
    says the time is complete, the operator's own input frontier says it is not."""
    def job(worker):
        seen = []

        def ctor(cap, info):
            notificator = st.FrontierNotificator()
            cap.drop()

            def logic(input, output):
                for batch_cap, batch in input:
                    notificator.notify_at_frontiered(batch_cap.retain(), [])
                notificator.for_each([input.frontier], lambda cap, _: seen.append(
                    (cap.time, input.frontier.less_equal(cap.time))))
            return logic
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle)
                        .unary_frontier(st.Pipeline, "Frontiered", ctor))
        handle.send(worker.index)
        worker.step()
        handle.close()
        worker.run()
        return seen
    assert run(job) == [[(0, True)]] * run.workers


def test_notifications_over_product_times_follow_the_partial_order(run):
    requested = [Product(1, 1), Product(0, 2), Product(1, 0), Product(0, 0), Product(2, 0)]

    def job(worker):
        order = []

        def build(scope):
            def logic(input, output, notificator):
                for _ in input:
                    pass
                for cap, count in notificator:
                    order.append((cap.time, count))
                    if cap.time == Product(0, 0):          # ready at once, earlier than 1, 0
                        notificator.notify_at(cap.delayed(Product(0, 1)))
                        notificator.notify_at(cap.delayed(Product(0, 1)))
            scope.to_stream([]).unary_notify(st.Pipeline, "Order", requested, logic)
        worker.dataflow(build, timestamp=Product)
        worker.run()
        return order
    for order in run(job):
        times = [t for t, _ in order]
        assert sorted(times) == sorted(requested + [Product(0, 1)])
        assert len(set(times)) == len(times)                  # each time once
        for i, earlier in enumerate(times):
            assert not any(later.less_than(earlier) for later in times[i + 1:]), times
        assert dict(order)[Product(0, 1)] == 2                # two requests, one delivery


def test_frontier_notificator_for_each_delivers_requests_made_in_its_callback(run):
    def job(worker):
        delivered = []

        def build(scope):
            def ctor(cap, info):
                notificator = st.FrontierNotificator([cap.delayed(1)])
                cap.drop()

                def logic(input, output):
                    for _ in input:
                        pass

                    def deliver(cap, notificator):
                        delivered.append(cap.time)
                        output.session(cap).give(cap.time)
                        if cap.time < 4:                  # complete already: deliver now too
                            notificator.notify_at(cap.delayed(cap.time + 1))
                    notificator.for_each([input.frontier], deliver)
                return logic
            return scope.to_stream([]).unary_frontier(st.Pipeline, "Chain", ctor).capture()
        captured = worker.dataflow(build)
        worker.run()
        return delivered, captured.extract()
    results = run(job)
    for delivered, _ in results:
        assert delivered == [1, 2, 3, 4]
    assert consolidate([c for _, c in results]) == [(t, [t] * run.workers) for t in (1, 2, 3, 4)]


# -- 4. partially ordered root times ---------------------------------------------------------

def test_product_root_times_with_a_feedback_loop(run):
    # Each record goes round the loop, its inner coordinate counting the trips, until it
    # reaches 3; the loop's summary Product(0, 1) strictly advances time.
    def job(worker):
        def build(scope):
            handle, looped = scope.feedback(Product(0, 1))
            seeds = scope.to_stream([10, 20] if worker.index == 0 else [])
            stream = seeds.concat(looped)
            stream.filter(lambda x: x % 10 < 3).map(lambda x: x + 1).connect_loop(handle)
            return stream.exchange(lambda x: x).capture()
        captured = worker.dataflow(build, timestamp=Product)
        worker.run()
        return captured.extract()
    assert consolidate(run(job)) == [(Product(0, i), [10 + i, 20 + i]) for i in range(4)]


def test_product_root_cycle_that_does_not_advance_is_rejected(run):
    def job(worker):
        def build(scope):
            handle, looped = scope.feedback(Product(0, 0))
            scope.to_stream([1]).concat(looped).connect_loop(handle)
        worker.dataflow(build, timestamp=Product)
    with pytest.raises(st.WorkerError, match="CycleError: dataflow cycle does not advance"):
        run(job)


# -- 5. identity across workers comes from structure, not reprs -----------------------------

class Skip:
    """A user path summary with Python's default repr (an address, different per object)."""

    def __init__(self, step):
        self.step = step

    def results_in(self, time):
        return time + self.step


def test_summaries_with_default_reprs_do_not_break_identity(run):
    def job(worker):
        def build(scope):
            handle, looped = scope.feedback(Skip(2))
            start = scope.to_stream([0] if worker.index == 0 else [])
            stream = start.concat(looped)
            stream.filter(lambda x: x < 6).map(lambda x: x + 2).exchange(lambda x: x // 2) \
                .connect_loop(handle)
            return stream.capture()
        captured = worker.dataflow(build)
        worker.run()
        return captured.extract()
    assert consolidate(run(job)) == [(0, [0]), (2, [2]), (4, [4]), (6, [6])]


def test_workers_that_build_different_dataflows_are_told(run):
    if run.workers == 1:
        pytest.skip("one worker has nobody to disagree with")

    def job(worker):
        def build(scope):
            stream = scope.to_stream([1])
            if worker.index == 1:
                stream = stream.map(lambda x: x)
            stream.probe()
        worker.dataflow(build)
    with pytest.raises(st.WorkerError, match="built dataflow 'dataflow-0' differently"):
        run(job)


# -- messages before their dataflow exists, slow builders -----------------------------------

def test_messages_for_a_dataflow_not_built_yet_are_kept(run):
    # The last worker steps a while before building: what the others send it meanwhile
    # (data and progress) must wait for the dataflow, not be lost.
    def job(worker):
        last = worker.peers - 1
        if worker.index == last:
            for _ in range(30):
                worker.step()
        captured = worker.dataflow(lambda scope: scope.to_stream(range(30))
                                   .exchange(lambda x: last).capture())
        worker.run()
        return captured.extract()
    extracts = run(job)
    assert consolidate(extracts) == [(0, sorted(list(range(30)) * run.workers))]
    assert all(extract == [] for extract in extracts[:-1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("processes", [2, 3])
def test_a_slow_builder_in_real_worker_processes(processes):
    def job(worker):
        if worker.index == 0:
            time.sleep(0.5)
        for index in range(3):
            captured = worker.dataflow(lambda scope: scope.to_stream(range(10))
                                       .exchange(lambda x: x).capture())
            if index == 2:
                worker.run()
                return captured.extract()
    extracts = st.execute(job, workers=processes)
    assert consolidate(extracts) == [(0, sorted(list(range(10)) * processes))]


# -- dropping dataflows ----------------------------------------------------------------------

def test_drop_dataflow_releases_it_and_runs_on_drop_callbacks(run):
    def job(worker):
        input = st.InputHandle("never closed")
        dropped = []
        index = worker.next_dataflow_index()

        def build(scope):
            scope.on_drop(lambda: dropped.append(worker.index))
            return scope.input_from(input).exchange(lambda x: x).capture()
        captured = worker.dataflow(build)
        other = worker.dataflow(lambda scope: scope.to_stream([worker.index]).capture())
        installed = worker.installed_dataflows()
        if worker.index == 0:
            input.send_batch(range(6))
        worker.step()
        worker.drop_dataflow(index)
        input.send(99)                       # goes nowhere; nothing waits for it
        worker.run()
        worker.drop_dataflow(index)          # again: nothing, as in timely
        with pytest.raises(KeyError, match="no dataflow 2 to drop"):
            worker.drop_dataflow(worker.next_dataflow_index())      # never built
        return installed, dropped, worker.installed_dataflows(), other.extract()
    for index, (installed, dropped, after, other) in enumerate(run(job)):
        assert installed == [0, 1]
        assert dropped == [index]
        assert after == []
        assert other == [(0, [index])]


def test_a_dropped_dataflow_closes_what_it_holds_after_its_on_drop_callbacks(run):
    """``scope.hold(x)`` closes ``x`` when the dataflow is dropped, once, after the
    ``on_drop`` callbacks, and only for that dataflow; it holds ``x`` weakly."""
    class Lease:
        def __init__(self, name, events):
            self.name, self.events = name, events

        def close(self):
            self.events.append(f"close {self.name}")

    def job(worker):
        events: list = []
        kept = Lease("kept", events)
        other = Lease("other", events)

        def build(scope):
            scope.hold(kept)
            scope.hold(Lease("forgotten", events))      # nobody else references it
            scope.on_drop(lambda: events.append("on_drop"))
            return scope.to_stream([1]).probe()
        index = worker.next_dataflow_index()
        worker.dataflow(build)
        worker.dataflow(lambda scope: scope.hold(other))
        gc.collect()
        worker.drop_dataflow(index)
        worker.run()
        return events
    for events in run(job):
        assert events == ["on_drop", "close kept"]


@pytest.mark.timeout(60)
def test_a_probe_shared_with_a_dropped_dataflow_follows_the_others(run):
    """Seed 003's pattern: one probe watches a long-lived dataflow and a query dataflow per
    round (``probe_with``). A query dropped before it completed kept its last frontier in
    the probe, so ``step_while(probe.less_than(t))`` waited forever for a dataflow that no
    longer runs (timely's probe handles forget a dropped operator's frontier); and each
    query, finished or dropped, stayed in the probe."""
    def job(worker):
        main, probe = st.InputHandle("main"), st.ProbeHandle()
        worker.dataflow(lambda scope: scope.input_from(main).probe_with(probe))
        frontiers, queries = [], []
        for r in range(1, 30):
            query = st.InputHandle(f"query {r}")        # never closed: dropped instead
            queries.append(query)
            index = worker.next_dataflow_index()
            worker.dataflow(lambda scope: scope.input_from(query).exchange(lambda x: x)
                            .probe_with(probe))
            query.advance_to(r)
            main.advance_to(r)
            deadline = time.monotonic() + 10
            worker.step_while(lambda: probe.less_than(r) and time.monotonic() < deadline)
            frontiers.append(probe.frontier())
            worker.drop_dataflow(index)
            if probe.less_than(r):
                break                                   # stuck: fail without waiting more
        main.close()
        worker.run()
        return frontiers, probe.done(), len(probe._frontiers)
    for frontiers, done, watched in run(job):
        assert frontiers == [[r] for r in range(1, 30)]
        assert done and watched == 1

def test_dropped_dataflows_are_freed():
    # Shared arrangements' pattern: many short query dataflows fed by one long-lived input handle.
    def job(worker):
        handle = st.InputHandle()
        tracemalloc.start()
        for i in range(300):
            if i == 100:
                gc.collect()
                start = tracemalloc.get_traced_memory()[0]
            index = worker.next_dataflow_index()
            worker.dataflow(lambda scope: scope.input_from(handle).map(lambda x: x).probe())
            worker.drop_dataflow(index)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        handle.send(1)                       # feeds nothing now, and fails nothing
        handle.close()
        return grown / 200, worker.installed_dataflows()
    per_dataflow, installed = st.execute_directly(job)
    assert installed == []
    assert per_dataflow < 500               # bytes: a dropped dataflow used to keep ~13 kB


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(120)
def test_a_worker_that_dropped_many_dataflows_remembers_them_in_bounded_memory(workers):
    """A service builds a dataflow per request beside a long-lived one, and drops each or
    lets it finish (the worker then drops it): each worker remembers the dropped indexes to
    discard their late messages, in a few runs of indexes, not one entry per dataflow.

    Memory is traced with only the long-lived dataflow built (the program drops the rest),
    not with the last ``finished_kept`` finished ones, whose number varies with timing."""
    def job(worker):
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).probe())

        def traced():
            for index in list(worker.dataflows())[1:]:
                worker.drop_dataflow(index)
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        tracemalloc.start()
        for i in range(3000):
            if i == 500:
                start = traced()
            index = worker.next_dataflow_index()
            records = [i] if worker.index == 0 else []
            probe = worker.dataflow(
                lambda scope: scope.to_stream(records).exchange(lambda x: x).probe())
            worker.step_while(lambda: not probe.done())
            if i % 2 == 0:
                worker.drop_dataflow(index)       # the others the worker drops itself
        handle.close()
        worker.run()
        kept = sorted(worker.dataflows())
        grown = traced() - start
        tracemalloc.stop()
        return grown / 2500, kept
    for per_dataflow, kept in st.execute(job, workers=workers):
        assert per_dataflow < 25            # bytes: a set of the indexes took 71
        assert kept[0] == 0 and kept[-1] == 3000 and len(kept) <= st.Worker.finished_kept
        assert all(index % 2 == 0 for index in kept)    # not those the program dropped


@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.integers(0, 40), max_size=60))
def test_index_ranges_hold_what_a_set_holds(indexes):
    ranges, oracle = IndexRanges(), set()
    for index in indexes:
        ranges.add(index)
        oracle.add(index)
    assert [i for i in range(-1, 42) if i in ranges] == sorted(oracle)
    runs = ranges.runs()
    assert all(end < start for (_, end), (start, _) in zip(runs, runs[1:]))  # disjoint, apart


def test_an_on_drop_callback_that_raises_is_named_and_the_drop_completes(run):
    """The program's drop and the worker's own (of a finished dataflow, once
    ``finished_kept`` more have finished) alike: the error names the dataflow and the
    callback, the other callbacks run, and the dataflow is gone (it was left half dropped
    with a bare ZeroDivisionError, raised from the step of an unrelated dataflow)."""
    def job(worker):
        ran, errors = [], []

        def build(scope, name):
            scope.on_drop(lambda: 1 // 0)
            scope.on_drop(lambda: ran.append(name))
            return scope.to_stream([1]).probe()
        index = worker.next_dataflow_index()
        worker.dataflow(lambda scope: build(scope, "by the program"), name="first")
        try:
            worker.drop_dataflow(index)
        except RuntimeError as error:
            errors.append(str(error))
        worker.dataflow(lambda scope: build(scope, "by the worker"), name="second")
        worker.run()
        for i in range(worker.finished_kept):
            worker.dataflow(lambda scope: scope.to_stream([i]).probe())
            try:
                worker.run()
            except RuntimeError as error:
                errors.append(str(error))
        with pytest.raises(KeyError, match="no dataflow '1' to drop"):
            worker.drop_dataflow("1")
        return ran, errors, 0 in worker.dataflows() or 1 in worker.dataflows()
    for ran, errors, listed in run(job):
        assert ran == ["by the program", "by the worker"]
        assert [error.split(" callback ")[0] for error in errors] == [
            "dataflow 'first' (index 0): its on_drop", "dataflow 'second' (index 1): its on_drop"]
        assert all(error.endswith("raised ZeroDivisionError: integer division or modulo by zero")
                   and "<lambda> at test_frontier_semantics.py:" in error for error in errors)
        assert not listed


class Marker:
    """Something a dataflow's functions capture, to see when nothing keeps it alive."""


def test_a_finished_dataflow_lets_go_of_its_state_and_the_worker_keeps_only_the_last(run):
    """Timely drops each dataflow once it completes. A worker here keeps the last
    ``finished_kept`` finished ones (for ``worker.dataflows()`` and pictures) with their
    operators' logic released, and drops older ones (their ``on_drop`` callbacks run, and
    dropping them again does nothing): a program that builds dataflows in a loop and lets
    each finish holds a bounded number of them, and none of what their functions captured."""
    def job(worker):
        kept = worker.finished_kept
        markers, dropped, results = [], [], []
        for i in range(kept + 3):
            marker = Marker()
            markers.append(weakref.ref(marker))

            def build(scope, i=i, marker=marker):
                scope.on_drop(lambda: dropped.append(i))
                numbers = scope.to_stream([i, i + 1] if worker.index == 0 else [])
                return numbers.exchange(lambda x: x).map(lambda x, m=marker: x * 2).capture()
            results.append(worker.dataflow(build))
            del marker, build
            worker.run()
        captured_alive = [reference() is not None for reference in markers]
        listed = sorted(worker.dataflows())
        for index in range(kept + 3):
            worker.drop_dataflow(index)          # the worker's own drops: nothing; others run on_drop
        worker.drop_dataflow(kept + 2)           # again: nothing
        return (captured_alive, listed, dropped, worker.installed_dataflows(),
                [captured.extract() for captured in results])
    kept = st.Worker.finished_kept
    results = run(job)
    for alive, listed, dropped, installed, _ in results:
        assert alive == [False] * (kept + 3)
        assert listed == list(range(3, kept + 3))
        assert dropped == list(range(kept + 3))
        assert installed == []
    totals = [consolidate([extracts[i] for *_, extracts in results]) for i in range(kept + 3)]
    assert totals == [[(0, [2 * i, 2 * i + 2])] for i in range(kept + 3)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_dropped_dataflow_is_freed_without_the_cycle_collector(workers):
    """Dropping a dataflow breaks the references between its operators and their logic, so
    what it holds goes at once, not at the cycle collector's next run (worker processes:
    each has a collector of its own to turn off)."""
    def job(worker):
        marker = Marker()
        reference = weakref.ref(marker)
        handle = st.InputHandle()
        index = worker.next_dataflow_index()
        worker.dataflow(lambda scope: scope.input_from(handle).map(lambda x, m=marker: x)
                        .exchange(lambda x: x).accumulate(0, lambda s, b: s + len(b)).probe())
        del marker
        gc.disable()
        try:
            worker.step()
            alive_while_built = reference() is not None
            worker.drop_dataflow(index)
            return alive_while_built, reference() is None
        finally:
            gc.enable()
            handle.close()
    assert st.execute(job, workers=workers) == [(True, True)] * workers


def test_loop_variable_two_scopes_deep(run):
    # loop_variable(1) means Product(0, 1): +1 on the innermost counter, 0 on the rest.
    def job(worker):
        def build(scope):
            def middle(mid):
                def inner(deep):
                    handle, looped = deep.loop_variable(1)
                    start = scope.to_stream([1] if worker.index == 0 else []).enter(mid).enter(deep)
                    counted = start.concat(looped).map(lambda x: x * 2)
                    counted.filter(lambda x: x < 16).connect_loop(handle)
                    return counted.filter(lambda x: x >= 16).leave()
                return mid.iterative(inner).leave()
            return scope.iterative(middle).capture()
        captured = worker.dataflow(build)
        worker.run()
        return captured.extract()
    assert consolidate(run(job)) == [(0, [16])]
