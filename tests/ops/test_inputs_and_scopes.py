"""Unordered inputs, user-timestamped nested scopes (scope.scoped) and per-input frontier
interest, at 1, 2 and 3 workers."""
from __future__ import annotations

from functools import total_ordering

import pytest

import sparktimely as st
from sparktimely import Product

from matrix_helpers import collatz_steps
from ops_matrix import WORKERS, merged


@pytest.mark.parametrize("workers", WORKERS)
def test_unordered_input_sends_at_several_times_at_once(workers):
    times = [7, 2, 5, 2, 9, 0]

    def job(worker):
        (handle, cap), (counts, probe) = worker.dataflow(lambda scope: (
            lambda hc_s: (hc_s[0], (hc_s[1].count().capture(), hc_s[1].probe())))(
                scope.new_unordered_input()))
        for i, time in enumerate(times):
            with handle.session(cap.delayed(time)) as session:
                session.give_iterator(iter(range(i + worker.index)))
        cap.downgrade(3)                      # times below 3 can now complete
        worker.step_while(lambda: probe.less_than(3))
        early = counts.extract()
        cap.drop()
        worker.run()
        return early, counts
    results = st.execute(job, workers=workers)
    expected: dict = {}
    for w in range(workers):
        for i, time in enumerate(times):
            expected[time] = expected.get(time, 0) + i + w
    assert {t: sum(c) for t, c in merged(c for _, c in results)} == {
        t: n for t, n in expected.items() if n}
    for early, _ in results:                  # only times below 3 were complete
        assert all(t < 3 for t, _ in early)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("kept", [False, True], ids=["never-kept", "let-go"])
def test_an_unordered_inputs_capability_goes_when_no_longer_referenced(workers, kept):
    """As any capability (API.md): the operator's builder kept the first one alive, and a
    dataflow whose program let go of it, or never kept it, never completed."""
    def job(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            with handle.session(cap.delayed(2)) as session:
                session.give(worker.index)
            return handle, (cap if kept else None), stream.exchange(lambda x: 0).capture()
        handle, cap, captured = worker.dataflow(build)
        del cap
        worker.run()
        return captured
    assert merged(st.execute(job, workers=workers)) == [(2, list(range(workers)))]


@pytest.mark.parametrize("workers", WORKERS)
def test_an_unordered_session_holds_its_time_while_it_buffers(workers):
    """timely's session owns its capability: records a session still buffers after the
    capability it was opened with is downgraded must not arrive after the frontier passed
    their time (a per-time count after an exchange fired twice for one time). A flush lets
    the time go; a later give holds it again through the opener, if that still allows it."""
    def job(worker):
        def build(scope):
            (handle, cap), stream = scope.new_unordered_input()
            counts: dict = {}

            def count(input, output, notificator):
                for c, batch in input:
                    counts[c.time] = counts.get(c.time, 0) + len(batch)
                    notificator.notify_at(c.retain())
                for c, _ in notificator:
                    output.session(c).give(counts.pop(c.time))
            out = stream.unary_notify(st.Exchange(lambda x: 0), "CountPerTime", [], count)
            return handle, cap, out.capture(), stream.probe()
        handle, cap, captured, probe = worker.dataflow(build)
        session = handle.session(cap.delayed(5))
        session.give("a")                          # buffered
        cap.downgrade(10)
        worker.step_while(lambda: probe.less_than(5))
        for _ in range(20):
            worker.step()
        held_at = probe.frontier()                 # the session holds 5 for "a"
        session.give("b")
        session.flush()                            # "a", "b" sent; 5 can complete
        with pytest.raises(st.CapabilityError, match="was flushed"):
            session.give("c")                      # its opener, cap.delayed(5), is gone
        opener = cap.delayed(11)
        again = handle.session(opener)
        again.flush()
        again.give("d")                            # held again through opener
        opener.drop()
        with again:                                # its end sends "d" and lets 11 go
            pass
        with pytest.raises(st.CapabilityError, match="has ended"):
            again.give("e")
        worker.step_while(lambda: probe.less_than(10))
        cap.drop()
        worker.run()
        return held_at, captured.extract()
    results = st.execute(job, workers=workers)
    assert [held for held, _ in results] == [[5]] * workers
    assert [(t, n) for _, c in results for t, ns in c for n in ns] == [
        (5, 2 * workers), (11, workers)]


@pytest.mark.parametrize("workers", WORKERS)
def test_records_sent_while_the_dataflow_is_built_reach_every_consumer(workers):
    """An input handle (and an unordered input) given records inside the build function,
    before any consumer is connected, and a source whose constructor sends: every
    consumer, connected later in the build, sees them at their times, here and on other
    workers through an exchange."""
    def job(worker):
        def build(scope):
            handle, stream = scope.new_input()
            (unordered, cap), late = scope.new_unordered_input()
            handle.send(f"a{worker.index}")
            handle.advance_to(1)
            handle.send(f"b{worker.index}")
            with unordered.session(cap.delayed(2)) as session:
                session.give(f"u{worker.index}")
            cap.drop()
            both = stream.concat(late)
            exchanged = both.exchange(lambda r: int(r[1:]) + 1).map(str.upper)
            return handle, both.capture(), exchanged.capture()
        handle, kept, exchanged = worker.dataflow(build, name="sent-in-build")
        handle.close()
        worker.run()
        return kept, exchanged
    results = st.execute(job, workers=workers)
    expected = {0: [f"a{w}" for w in range(workers)], 1: [f"b{w}" for w in range(workers)],
                2: [f"u{w}" for w in range(workers)]}
    assert {t: sorted(r) for t, r in merged(kept for kept, _ in results)} == expected
    assert {t: sorted(r) for t, r in merged(ex for _, ex in results)} == {
        t: [r.upper() for r in records] for t, records in expected.items()}


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("send", ["send", "send_batch"])
def test_a_dataflow_connected_later_sees_only_what_is_sent_after(workers, send):
    """One handle feeding two dataflows: records sent (buffered or not) before the second
    was connected reach only the first, as timely's register flushes first; the same for a
    differential InputSession's buffered updates."""
    from sparktimely import differential as dd

    def job(worker):
        handle, session = st.InputHandle(), dd.InputSession()
        first = worker.dataflow(lambda scope: (scope.input_from(handle).capture(),
                                               session.to_collection(scope).inner.capture()))
        getattr(handle, send)(*([f"before{worker.index}"] if send == "send"
                                else [[f"before{worker.index}"]]))
        session.insert(f"before{worker.index}")
        second = worker.dataflow(lambda scope: (scope.input_from(handle).capture(),
                                                session.to_collection(scope).inner.capture()))
        handle.send(f"after{worker.index}")
        session.insert(f"after{worker.index}")
        handle.close()
        session.close()
        worker.run()
        return [[c.extract() for c in flow] for flow in (first, second)]
    results = st.execute(job, workers=workers)
    both = sorted(f"{when}{w}" for w in range(workers) for when in ("before", "after"))
    after = sorted(f"after{w}" for w in range(workers))
    for flow, expected in ((0, both), (1, after)):
        records = sorted(r for result in results for _, rs in result[flow][0] for r in rs)
        updates = sorted(d for result in results for _, us in result[flow][1]
                         for d, _, _ in us)
        assert (records, updates) == (expected, expected)


def test_an_unordered_capability_cannot_send_before_its_time():
    def job(worker):
        (handle, cap), _ = worker.dataflow(lambda scope: (
            lambda hc_s: (hc_s[0], hc_s[1].probe()))(scope.new_unordered_input()))
        cap.downgrade(4)
        with pytest.raises(st.CapabilityError, match="2 is earlier than 4; a capability moves only to times at or after its own"):
            cap.delayed(2)
        cap.drop()
        return True
    assert st.execute_directly(job)


@total_ordering
class Round:
    """A user timestamp: rounds counted down from 100 (so ``less_equal`` is ``>=``)."""

    def __init__(self, left: int) -> None:
        self.left = left

    @classmethod
    def minimum(cls) -> "Round":
        return cls(100)

    def less_equal(self, other: "Round") -> bool:
        return self.left >= other.left

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Round):
            return NotImplemented
        return self.left > other.left

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Round) and other.left == self.left

    def __hash__(self) -> int:
        return hash(self.left)

    def __repr__(self) -> str:
        return f"Round({self.left})"


class Step:
    """A path summary for Round: one round less to go."""

    def results_in(self, time: Round) -> Round:
        return Round(time.left - 1)

    def __repr__(self) -> str:          # names the feedback operator alike on every worker
        return "Step()"


@pytest.mark.parametrize("workers", WORKERS)
def test_scoped_with_a_user_timestamp_iterates_like_iterative(workers):
    def collatz(scope, inner_kind):
        def loop(inner):
            summary = Product(0, Step()) if inner_kind is Round else 1
            handle, looped = inner.loop_variable(summary)
            numbers = scope.to_stream(range(1 + scope.index, 30, scope.peers)).enter(inner)
            stepped = numbers.concat(looped).map(
                lambda x: (x[0], x[1] // 2 if x[1] % 2 == 0 else 3 * x[1] + 1, x[2] + 1)
                if isinstance(x, tuple) else (x, x, 0))
            stepped.filter(lambda x: x[1] != 1).exchange(lambda x: x[0]).connect_loop(handle)
            return stepped.filter(lambda x: x[1] == 1).map(lambda x: (x[0], x[2])).leave()
        return scope.scoped("Collatz", inner_kind, loop).capture()

    oracle = [(0, sorted((n, collatz_steps(n)) for n in range(1, 30)))]
    for kind in (int, Round):
        got = merged(st.execute(lambda w: w.dataflow(lambda s: collatz(s, kind)), workers=workers))
        assert got == oracle


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("root, start", [(int, 0), (Product, Product(0, 0))])
def test_scoped_with_product_times_inside_counts_each_round(workers, root, start):
    """``scoped(name, Product, build)``: inner times that are Products themselves, in an int
    or a Product dataflow (building it failed: the progress tracker compared a Product inner
    time with the padding that orders outer times after inner ones)."""
    def build(scope):
        def rounds(inner):
            handle, looped = inner.loop_variable(Product(0, Product(0, 1)))
            numbers = scope.to_stream(range(scope.index, 12, scope.peers)).enter(inner)
            stepped = numbers.concat(looped)
            stepped.filter(lambda x: x % 4 != 3).map(lambda x: x + 1).exchange(
                lambda x: x).connect_loop(handle)
            return stepped.map(lambda x: (x // 4, x)).leave()
        return scope.scoped("Rounds", Product, rounds).capture()

    got = merged(st.execute(lambda w: w.dataflow(build, timestamp=root), workers=workers))
    oracle = sorted((n // 4, y) for n in range(12) for y in range(n, 4 * (n // 4) + 4))
    assert got == [(start, oracle)]


def test_scoped_rejects_a_timestamp_type_without_an_order():
    class Plain:
        @classmethod
        def minimum(cls):
            return cls()

        def less_equal(self, other):
            return True

    with pytest.raises(TypeError, match="needs __lt__"):
        st.example(lambda scope: scope.scoped("Bad", Plain, lambda inner: None))


@pytest.mark.parametrize("timestamp, told", [
    (str, "timestamp type str has no less_equal"), (5, "timestamp 5 is not a type")])
def test_a_dataflow_of_a_type_that_is_no_timestamp_is_refused_naming_the_type(timestamp, told):
    """It failed with an AttributeError ('str' has no attribute 'minimum')."""
    def job(worker):
        with pytest.raises(TypeError, match=f"worker.dataflow: {told}"):
            worker.dataflow(lambda scope: None, timestamp=timestamp)
        captured = worker.dataflow(lambda scope: scope.to_stream([1]).capture())
        worker.run()
        return captured.extract()
    assert st.execute_directly(job) == [(0, [1])]   # the refused call built nothing


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("interest", list(st.FrontierInterest))
@pytest.mark.parametrize("by", ["index", "handle"])
def test_frontier_interest_decides_which_frontier_changes_schedule(workers, interest, by):
    """An operator that only counts its schedulings: with NEVER, the frontier moving (ten
    rounds without data) does not schedule it; with IF_CAPABILITY only while it holds its
    capability (dropped at its second scheduling); with ALWAYS at every change."""
    def job(worker):
        handle = st.InputHandle()
        runs = [0]

        def build(scope):
            stream = scope.input_from(handle)
            builder = st.OperatorBuilder("Counter", scope)
            input = builder.new_input(stream, st.Pipeline)
            builder.set_notify_for(0 if by == "index" else input, interest)
            builder.new_output()

            def ctor(capabilities):
                held = list(capabilities)

                def logic(frontiers):
                    runs[0] += 1
                    for _ in input:
                        pass
                    keep = 1 if interest is st.FrontierInterest.IF_CAPABILITY else 0
                    if held and runs[0] > keep:
                        held.pop().drop()
                return logic
            builder.build(ctor)
            return stream.probe()
        probe = worker.dataflow(build)
        for r in range(1, 11):
            handle.advance_to(r)
            worker.step_while(lambda: probe.less_than(r))
        handle.close()
        worker.run()
        return runs[0]
    runs = st.execute(job, workers=workers)
    if interest is st.FrontierInterest.NEVER:
        assert runs == [1] * workers                 # once, at start
    elif interest is st.FrontierInterest.IF_CAPABILITY:
        assert runs == [2] * workers                 # start, then the first change (drops)
    else:
        assert all(r >= 11 for r in runs)            # start and each of the ten changes
