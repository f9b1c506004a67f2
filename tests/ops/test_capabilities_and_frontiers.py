"""Capability.try_delayed/try_downgrade, Antichain.from_elem/extend/clear/hash and
ProbeHandle.with_frontier."""
from __future__ import annotations

import pytest

import sparktimely as st
from sparktimely import Antichain, Product

from ops_matrix import WORKERS, merged


@pytest.mark.parametrize("workers", WORKERS)
def test_try_delayed_and_try_downgrade_refuse_earlier_times(workers):
    def job(worker):
        results = []

        def ctor(cap, info):
            def logic(output):
                cap.downgrade(3)
                results.append(cap.try_delayed(2))
                later = cap.try_delayed(5)
                results.append(later.time)
                results.append(cap.try_downgrade(1))
                results.append(cap.try_downgrade(4))
                output.session(later).give(worker.index)
                output.session(cap).give(-worker.index)
                later.drop()
                cap.drop()
            return logic
        capture = worker.dataflow(lambda scope: st.source(scope, "Try", ctor).capture())
        worker.run()
        return results, capture
    outcomes = st.execute(job, workers=workers)
    assert all(results == [None, 5, False, True] for results, _ in outcomes)
    assert merged(c for _, c in outcomes) == [(4, sorted(-w for w in range(workers))),
                                              (5, list(range(workers)))]


def test_try_delayed_with_a_partial_order_and_after_drop():
    def ctor(cap, info):
        def logic(output):
            assert cap.try_delayed(Product(1, 0)).time == Product(1, 0)
            cap.downgrade(Product(0, 2))
            assert cap.try_delayed(Product(1, 1)) is None       # incomparable: not after
            assert cap.try_downgrade(Product(1, 0)) is False
            cap.drop()
        return logic
    st.execute_directly(lambda worker: worker.dataflow(
        lambda scope: st.source(scope, "Partial", ctor).probe(), timestamp=Product))


def test_try_delayed_on_a_dropped_capability_still_raises():
    def ctor(cap, info):
        def logic(output):
            cap.drop()
            with pytest.raises(st.CapabilityError, match="it was dropped"):
                cap.try_delayed(3)
        return logic
    st.example(lambda scope: st.source(scope, "Dropped", ctor).probe())


def test_antichain_from_elem_extend_clear_and_hash():
    a = Antichain.from_elem(Product(2, 2))
    assert a.extend([Product(3, 3), Product(1, 5)]) is True
    assert a.extend([Product(4, 4)]) is False
    assert sorted(a) == [Product(1, 5), Product(2, 2)]
    b = Antichain([Product(1, 5), Product(2, 2), Product(9, 9)])
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Antichain.from_elem(0)}) == 2
    a.clear()
    assert len(a) == 0 and not a.less_equal(Product(9, 9))
    assert a == Antichain() and hash(a) == hash(Antichain())


@pytest.mark.parametrize("workers", WORKERS)
def test_probe_with_frontier_sees_the_antichain(workers):
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).probe())
        seen = []
        for time in (1, 4):
            handle.advance_to(time)
            worker.step_while(lambda: probe.less_than(time))
            seen.append(probe.with_frontier(lambda frontier: (type(frontier).__name__,
                                                              frontier.elements())))
        handle.close()
        worker.run()
        seen.append(probe.with_frontier(len))
        return seen
    assert st.execute(job, workers=workers) == [[("Antichain", [1]), ("Antichain", [4]), 0]] * workers


def test_a_probe_asked_with_a_time_of_another_type_names_its_times(run):
    """A probe inside a loop compares Product times: asked with an int it failed with an
    AttributeError from the antichain's insides."""
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.iterative(
            lambda inner: scope.input_from(handle).enter(inner).probe()))
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(st.Product(1, 0)))
        told = []
        for ask in (probe.less_than, probe.less_equal):
            with pytest.raises(TypeError) as error:
                ask(1)
            told.append(str(error.value).split(", not ints")[0])
        handle.close()
        worker.run()
        return told
    assert run(job) == [[f"probe.{call}(1): the probe compares times like Product(1, 0)"
                         for call in ("less_than", "less_equal")]] * run.workers
