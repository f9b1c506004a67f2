"""branch_when, delay_batch, inspect_core, map_in_place and empty at 1, 2 and 3 workers."""
from __future__ import annotations

import pytest

import sparktimely as st

from ops_matrix import WORKERS, merged, oracle, run_rounds

ROUNDS = [[3, 1, 2, 8], [5, 9], [], [4, 4, 0, 7, 6]]


@pytest.mark.parametrize("workers", WORKERS)
def test_branch_when_routes_whole_batches_by_time(workers):
    def build(stream):
        early, late = stream.branch_when(lambda t: t >= 2)
        return early.map(lambda x: ("early", x)).concat(late.map(lambda x: ("late", x))).capture()
    expected = oracle(ROUNDS, lambda t, x: [(t, ("late" if t >= 2 else "early", x))])
    assert run_rounds(build, ROUNDS, workers) == expected


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_batch_moves_batches_to_later_times(workers):
    got = run_rounds(lambda s: s.delay_batch(lambda t: t * 10 + 5).capture(), ROUNDS, workers)
    assert got == oracle(ROUNDS, lambda t, x: [(t * 10 + 5, x)])


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_batch_rejects_an_earlier_time(workers):
    with pytest.raises(st.WorkerError, match="delay_batch: new time -1 is earlier than the "
                                             "batch's time 0"):
        run_rounds(lambda s: s.delay_batch(lambda t: t - 1).capture(), ROUNDS, workers)


@pytest.mark.parametrize("workers", WORKERS)
def test_delay_names_the_record_and_how_its_new_time_stands(workers):
    """A new time incomparable with the record's was told as "earlier", naming no record."""
    for call in ("delay", "delay_total"):
        with pytest.raises(st.WorkerError, match=rf"{call}: new time -1 is earlier than record "
                                                 rf"\d's time 0"):
            run_rounds(lambda s: getattr(s, call)(lambda x, t: t - 1).capture(), ROUNDS,
                       workers)

    def moved_sideways(stream):
        return stream.scope.iterative(lambda inner: (
            stream.enter(inner).delay(lambda x, t: st.Product(t.outer, t.inner + 2))
            .delay(lambda x, t: st.Product(t.outer + 1, 0)).leave())).capture()
    with pytest.raises(st.WorkerError, match=r"delay: new time Product\(1, 0\) is incomparable "
                                             r"with record \d's time Product\(0, 2\)"):
        run_rounds(moved_sideways, ROUNDS, workers)


@pytest.mark.parametrize("workers", WORKERS)
def test_inspect_core_sees_batches_and_every_frontier_change(workers):
    def job(worker):
        handle = st.InputHandle()
        events = []
        probe = worker.dataflow(lambda scope: scope.input_from(handle)
                                .inspect_core(events.append).probe())
        for r, records in enumerate(ROUNDS):
            handle.send_batch(records[worker.index::worker.peers])
            handle.advance_to(r + 1)
            worker.step_while(lambda: st.Err([r + 1]) not in events)
        handle.close()
        worker.run()
        return events
    results = st.execute(job, workers=workers)
    for events in results:
        assert [e.error for e in events if isinstance(e, st.Err)] == [[1], [2], [3], [4], []]
        frontier = [0]
        for event in events:              # a batch is seen before the frontier passes it
            if isinstance(event, st.Err):
                frontier = event.error
            else:
                assert frontier[0] <= event.value[0]
    seen = sorted((e.value[0], x) for events in results
                  for e in events if isinstance(e, st.Ok) for x in e.value[1])
    assert seen == sorted((t, x) for t, xs in enumerate(ROUNDS) for x in xs)


@pytest.mark.parametrize("workers", WORKERS)
def test_map_in_place_changes_records(workers):
    got = run_rounds(lambda s: s.map(lambda x: [x]).map_in_place(lambda r: r.append(r[0] * 2))
                     .map(tuple).capture(), ROUNDS, workers)
    assert got == oracle(ROUNDS, lambda t, x: [(t, (x, 2 * x))])


@pytest.mark.parametrize("workers", WORKERS)
def test_empty_completes_and_carries_nothing(workers):
    def job(worker):
        return worker.dataflow(lambda scope: scope.empty().concat(scope.to_stream([worker.index]))
                               .capture())
    assert merged(st.execute(job, workers=workers)) == [(0, list(range(workers)))]


@pytest.mark.parametrize("workers", WORKERS)
def test_lazy_to_stream_of_an_iterator(workers):
    def job(worker):
        return worker.dataflow(lambda scope: scope.to_stream(
            x for x in range(10_000) if x % worker.peers == worker.index).count().capture())
    assert merged(st.execute(job, workers=workers)) == [
        (0, sorted(len(range(i, 10_000, workers)) for i in range(workers)))]
