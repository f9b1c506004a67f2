"""Event time as timely time: ``win.EventTimeInput`` moves its time to the watermark, the
frontier (the minimum over workers' inputs) closes windows exactly when it passes
``end - 1 + lateness``, records out of order within ``out_of_order`` are never late, and the
session rules on a worked example."""
from __future__ import annotations

import random

import pytest

import sparktimely as st
import sparktimely.windows as win
from sparktimely.testing import consolidate
from window_oracle import aggregation, key_of, model, model_value, time_of, watermarked

pytestmark = pytest.mark.timeout(120)


def test_the_input_time_follows_the_event_times_minus_out_of_order_and_never_goes_back():
    def job(worker):
        events = win.EventTimeInput(out_of_order=3)
        captured = worker.dataflow(lambda scope: scope.input_from(events).capture())
        seen = []
        for e in (5, 9, 4, 20, 18):
            events.send(e, e)
            seen.append(events.time())
        events.advance_to(30)
        events.send("after advance_to", 31)
        events.close()
        worker.run()
        return seen, captured.extract()
    seen, captured = st.execute_directly(job)
    assert seen == [2, 6, 6, 17, 17]
    assert captured == [(0, [5]), (2, [9]), (6, [4, 20]), (17, [18]), (30, ["after advance_to"])]


def test_bad_out_of_order_and_event_times_are_refused():
    with pytest.raises(ValueError, match="out_of_order must be a non-negative int, got -1"):
        win.EventTimeInput(out_of_order=-1)

    def job(worker):
        events = win.EventTimeInput()
        worker.dataflow(lambda scope: scope.input_from(events).capture())
        try:
            events.send({"id": 7}, 3.5)
        finally:
            events.close()
    with pytest.raises(TypeError, match=r"^input.send\(\{'id': 7\}\): event_time 3.5 is not an int"):
        st.execute_directly(job)

    def named(worker):
        clicks = win.EventTimeInput(name="clicks")
        worker.dataflow(lambda scope: scope.input_from(clicks).capture())
        try:
            clicks.send("c", "noon")
        finally:
            clicks.close()
    with pytest.raises(TypeError, match=r"^clicks.send\('c'\): event_time 'noon' is not an int"):
        st.execute_directly(named)


def arrivals(count: int, disorder: int, seed: int) -> list:
    """Records in arrival order: event times rising by one from 100, each behind by up to
    ``disorder``."""
    rng = random.Random(seed)
    return [(i, rng.choice("xy"), 100 + i - rng.randint(0, disorder), rng.randrange(10))
            for i in range(count)]


@pytest.mark.parametrize("disorder, late", [(4, False), (20, True)], ids=["within", "beyond"])
@pytest.mark.parametrize("kind", [win.Tumbling(6), win.Sliding(8, 4), win.Session(2)], ids=repr)
def test_disorder_within_out_of_order_is_never_late_and_beyond_it_is(run, kind, disorder, late):
    records = arrivals(80, disorder, seed=disorder)
    shares = [records[i::run.workers] for i in range(run.workers)]

    def job(worker):
        events = win.EventTimeInput(out_of_order=4)

        def build(scope):
            out = scope.input_from(events).window(kind, time_of=time_of, key=key_of,
                                                  aggregate=aggregation("sum"))
            return out.results.capture(), out.late.capture()
        results, too_late = worker.dataflow(build)
        for i, record in enumerate(shares[worker.index]):
            events.send(record, time_of(record))
            if i % 7 == 0:
                worker.step()
        events.close()
        worker.run()
        return results.extract(), too_late.extract()
    outputs = run(job)
    entries = [entry for share in shares for entry in watermarked(share, 4)]
    expected = model(kind, entries, 0, lambda rs: model_value("sum", rs))
    assert (consolidate([r for r, _ in outputs]), consolidate([l for _, l in outputs])) == expected
    assert bool(expected[1]) == late


def test_a_window_reports_exactly_when_the_frontier_passes_its_end_minus_one_plus_lateness(run):
    """A window [0, 10) with lateness 2 closes at 11: nothing while every input is at 11,
    its result at time 11 as soon as they all pass it."""
    seen = [[] for _ in range(run.workers)]

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            out = scope.input_from(handle).window(
                win.Tumbling(10), time_of=lambda r: r, aggregate=win.count(), lateness=2)
            return out.results.inspect_batch(
                lambda t, batch: seen[worker.index].append((t, batch))).probe()
        probe = worker.dataflow(build)
        handle.send_batch([worker.index, 9])
        handle.advance_to(11)
        worker.step_while(lambda: probe.less_than(11))
        before = list(seen[worker.index])
        handle.advance_to(12)
        worker.step_while(lambda: probe.less_than(12))
        handle.close()
        worker.run()
        return before
    assert run(job) == [[] for _ in range(run.workers)]
    assert consolidate(seen) == [(11, [(None, win.Window(0, 10), 2 * run.workers)])]


def test_sessions_merge_as_a_set_and_closed_sessions_never_reopen(run):
    """Gap 5, one key. Time 0: events 0 and 20; time 2: event 10; time 3: events 4 and 6
    bridge [0, 5) and [10, 15) into [0, 15), and 15 (exactly a gap after 10) starts
    [15, 20); time 16: [0, 15) closed at 14, so 13 joins [15, 20) only, and 1 (near no
    open session, its own close time 5 past) is late."""
    entries = [(0, 0), (0, 20), (2, 10), (3, 4), (3, 6), (3, 15), (16, 13), (16, 1)]

    def job(worker):
        handle = st.InputHandle()

        def build(scope):
            out = scope.input_from(handle).window(win.Session(5), time_of=lambda r: r,
                                                  aggregate=win.collect())
            return out.results.capture(), out.late.capture()
        results, late = worker.dataflow(build)
        for t, e in entries[worker.index::worker.peers]:
            handle.advance_to(max(t, handle.time()))
            handle.send(e)
        handle.close()
        worker.run()
        return results.extract(), late.extract()
    outputs = run(job)
    assert consolidate([r for r, _ in outputs]) == [
        (14, [(None, win.Window(0, 15), [0, 4, 6, 10])]),
        (19, [(None, win.Window(13, 20), [13, 15])]),
        (24, [(None, win.Window(20, 25), [20])])]
    assert consolidate([l for _, l in outputs]) == [(16, [1])]
