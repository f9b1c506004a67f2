"""``active_between`` against its definition, at 1, 2 and 3 workers (the ``run`` fixture), on
generated rounds of inserts and removals whose records carry random starts and ends (ends at
or before starts, starts and ends before the record's own time): the output accumulated to
every time, up to the last end, equals the definition computed from scratch, and so do a
sliding count and a join with another changing collection over it. Bad input is named."""
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sparktimely as st
import sparktimely.differential as dd
from dd_harness import accumulate, accumulate_rounds, join_pairs, run_rounds

SETTINGS = settings(max_examples=10, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

START_OF, END_OF = (lambda r: r[1]), (lambda r: r[2])
records = hs.tuples(hs.integers(0, 2), hs.integers(0, 7), hs.integers(0, 9))
"""``(key, start, end)``: rounds are times 0 to 4, so some records start before they arrive,
some end before they arrive, and some end at or before their start."""


@hs.composite
def histories(draw, data=records, rounds=(1, 5), updates=5):
    """Per round, inserts of new records (diff 1 or 2) and removals (diff -1) of records
    inserted in this round or before."""
    inserted: list = []
    result = []
    for _ in range(draw(hs.integers(*rounds))):
        round = []
        for _ in range(draw(hs.integers(0, updates))):
            if inserted and draw(hs.booleans()):
                round.append((draw(hs.sampled_from(inserted)), -1))
            else:
                record = draw(data)
                inserted.append(record)
                round.append((record, draw(hs.sampled_from([1, 1, 2]))))
        result.append(round)
    return result


def active(rounds, time):
    """The definition: ``{record: multiplicity}`` of the records present at ``time``, an
    update of round ``r`` counting from ``max(start, r)`` until ``end``."""
    out = Counter()
    for r, updates in enumerate(rounds):
        for record, diff in updates:
            if max(START_OF(record), r) <= time < END_OF(record):
                out[record] += diff
    return {x: n for x, n in out.items() if n}


def horizon(windowed, *others):
    """A time after every round (of ``windowed`` and of the ``others`` inputs) and every end
    (of ``windowed``'s records): the output is final from there on."""
    return max([len(rounds) for rounds in (windowed, *others)] +
               [END_OF(x) for updates in windowed for x, _ in updates]) + 1


def at_own_times(time, batch):
    """The updates of a captured batch, each checked to travel at its own time (the
    operator holds updates for later times until the frontier reaches them)."""
    assert all(t == time for _, t, _ in batch), f"updates {batch} sent at time {time}"
    return batch


def check(build, oracle, inputs, run, output=at_own_times):
    """``build``'s output accumulated to every time up to :func:`horizon` equals ``oracle``
    of that time."""
    got = run_rounds(build, inputs, run, output=output)
    for time in range(horizon(*inputs) + 1):
        expected = {x: n for x, n in oracle(time).items() if n}
        assert accumulate(got, time) == expected, \
            f"time {time} on {run.workers} worker(s): got {accumulate(got, time)}, " \
            f"expected {expected}"


@pytest.mark.timeout(120)
@SETTINGS
@given(rounds=histories())
def test_the_output_at_every_time_is_the_definition(run, rounds):
    check(lambda scope, c: c.active_between(START_OF, END_OF),
          lambda time: active(rounds, time), [rounds], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(rounds=histories())
def test_a_sliding_count_equals_the_count_of_the_definition(run, rounds):
    def oracle(time):
        per_key = Counter()
        for (key, _, _), n in active(rounds, time).items():
            per_key[key] += n
        return {(key, n): 1 for key, n in per_key.items() if n}
    check(lambda scope, c: c.active_between(START_OF, END_OF).map(lambda r: r[0]).count(),
          oracle, [rounds], run, output=lambda time, batch: batch)


pairs = hs.lists(hs.lists(hs.tuples(hs.tuples(hs.integers(0, 2), hs.sampled_from("ab")),
                                    hs.sampled_from([1, 1, -1])), max_size=4),
                 min_size=1, max_size=5)


@pytest.mark.timeout(120)
@SETTINGS
@given(rounds=histories(), other=pairs)
def test_a_join_with_a_changing_collection_equals_the_join_of_the_definition(run, rounds,
                                                                             other):
    def build(scope, c, d):
        return c.active_between(START_OF, END_OF).map(lambda r: (r[0], r[1:])).join(d)

    def oracle(time):
        window = {(k, (s, e)): n for (k, s, e), n in active(rounds, time).items()}
        return join_pairs(window, accumulate_rounds(other, time))
    check(build, oracle, [rounds, other], run, output=lambda time, batch: batch)


@pytest.mark.timeout(60)
def test_a_record_removed_before_its_end_sends_nothing_at_its_end(run):
    """The updates held for later times are summed per record and time: the removal's
    insertion at the end cancels the insertion's removal there."""
    def build(scope, c):
        return c.active_between(START_OF, END_OF)
    got = run_rounds(build, [[[(("a", 0, 9), 1)], [], [(("a", 0, 9), -1)]]], run)
    assert sorted(got) == [(("a", 0, 9), 0, 1), (("a", 0, 9), 2, -1)]


# -- Arrow collections: start and end are columns ---------------------------------------------

def to_batch(updates):
    keys, starts, ends = (zip(*[x for x, _ in updates]) if updates else ([], [], []))
    return pa.RecordBatch.from_arrays(
        [pa.array(list(keys), pa.int64()), pa.array(list(starts), pa.int64()),
         pa.array(list(ends), pa.int64()), pa.array([d for _, d in updates], pa.int64())],
        ["k", "start", "end", "diff"])


def run_arrow(build, rounds, run):
    def send(session, input, updates):
        session.update_batch(to_batch(updates))

    def output(time, table):
        return [(tuple(v for name, v in row.items() if name != "diff"), time, row["diff"])
                for row in table.to_pylist()]
    return run_rounds(build, [rounds], run, send, output)


@pytest.mark.timeout(120)
@SETTINGS
@given(rounds=histories())
def test_arrow_rows_are_present_between_their_start_and_end_columns(run, rounds):
    got = run_arrow(lambda scope, c: c.active_between("start", "end"), rounds, run)
    for time in range(horizon(rounds) + 1):
        assert accumulate(got, time) == active(rounds, time), f"time {time}"


@pytest.mark.timeout(120)
@SETTINGS
@given(rounds=histories(updates=12))
def test_an_arrow_sliding_count_equals_the_count_of_the_definition(run, rounds):
    got = run_arrow(lambda scope, c: c.active_between("start", "end").count(key="k"),
                    rounds, run)
    for time in range(horizon(rounds) + 1):
        per_key = Counter()
        for (key, _, _), n in active(rounds, time).items():
            per_key[key] += n
        assert accumulate(got, time) == {(k, n): 1 for k, n in per_key.items() if n}, \
            f"time {time}"


# -- bad input ---------------------------------------------------------------------------------

def run_records(run, records, build):
    """``build(collection)`` over ``records`` inserted at time 0 (spread over the workers)."""
    def job(worker):
        session = dd.InputSession()
        probe = worker.dataflow(lambda scope: build(session.to_collection(scope)).probe())
        for record in records[worker.index::worker.peers]:
            session.insert(record)
        session.close()
        worker.step_while(lambda: not probe.done())
    run(job)


@pytest.mark.timeout(60)
def test_a_start_that_is_not_an_int_is_named_with_its_record(run):
    with pytest.raises(st.WorkerError, match=r"active_between: start_of\(\('b', '3'\)\) "
                                             r"returned '3' \(str\); start and end times "
                                             r"are ints"):
        run_records(run, [("b", "3")] * 3,
                    lambda c: c.active_between(lambda r: r[1], lambda r: 5))


@pytest.mark.timeout(60)
def test_an_end_that_is_not_an_int_is_named_with_its_record(run):
    with pytest.raises(st.WorkerError, match=r"active_between: end_of\(\('a', 1\)\) returned "
                                             r"None \(NoneType\)"):
        run_records(run, [("a", 1)] * 3, lambda c: c.active_between(lambda r: r[1],
                                                                     lambda r: None))


@pytest.mark.timeout(60)
def test_an_unhashable_record_held_for_later_is_named(run):
    with pytest.raises(st.WorkerError, match=r"active_between: the record \[1, 2\] is not "
                                             r"hashable"):
        run_records(run, [[1, 2]] * 3, lambda c: c.active_between(lambda r: 0, lambda r: 9))


@pytest.mark.timeout(60)
def test_an_update_before_the_time_of_its_batch_is_named(run):
    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: dd.as_collection(scope.input_from(handle))
                                .active_between(lambda r: 0, lambda r: 9).probe())
        handle.advance_to(5)
        handle.send_batch([("x", 5, 1), ("y", 3, 1)])
        handle.close()
        worker.step_while(lambda: not probe.done())
    with pytest.raises(st.WorkerError, match=r"active_between: update \('y', 3, 1\) has time 3, "
                                             r"which is not at or after the time of the batch "
                                             r"carrying it \(5\)"):
        run(job)


@pytest.mark.timeout(60)
def test_a_held_record_that_a_checkpoint_cannot_route_is_named(run, tmp_path):
    def job(worker):
        coordinator = st.io.enable_checkpoints(worker, str(tmp_path / "checkpoints"))
        try:
            session = dd.InputSession()
            worker.dataflow(lambda scope: session.to_collection(scope)
                            .active_between(lambda r: 0, lambda r: 9).probe(), name="window")
            session.insert(frozenset([0]))
            session.close()
            worker.run()
        finally:
            coordinator.close()
    with pytest.raises(st.WorkerError, match=r"ActiveBetween: a checkpoint routes each held "
                                             r"record by stable_hash, which cannot hash "
                                             r"frozenset\(\{0\}\)"):
        run(job)


def arrow_records(run, batch, start, end):
    def job(worker):
        session = dd.InputSession()
        probe = worker.dataflow(lambda scope: session.to_collection(scope)
                                .active_between(start, end).probe())
        session.update_batch(batch)
        session.close()
        worker.step_while(lambda: not probe.done())
    run(job)


@pytest.mark.timeout(60)
def test_arrow_start_and_end_columns_must_be_integers_without_nulls(run):
    rows = pa.record_batch({"id": [1, 2], "from": [0, None], "until": [1.5, 2.0],
                            "diff": [1, 1]})
    with pytest.raises(st.WorkerError, match=r"active_between: the end column 'until' is "
                                             r"double, not an integer type"):
        arrow_records(run, rows, "id", "until")
    with pytest.raises(st.WorkerError, match=r"the start column 'from' is null in row "
                                             r"\{'id': 2, 'from': None"):
        arrow_records(run, rows, "from", "id")
    with pytest.raises(st.WorkerError, match=r"the end column 'to' is not in the batch"):
        arrow_records(run, rows, "id", "to")


@pytest.mark.timeout(60)
def test_arrow_uint64_times_beyond_int64_are_refused_naming_the_row(run):
    """They were cast to int64 and wrapped round: a start beyond int64 became a negative
    time (a row present that never should be), an end one made its row vanish."""
    rows = pa.record_batch({"id": [1, 2], "from": pa.array([2, 2**63 + 1], pa.uint64()),
                            "until": pa.array([2**63 - 1, 5], pa.uint64()), "diff": [1, 1]})
    with pytest.raises(st.WorkerError, match=r"the start column 'from' holds "
                                             r"9223372036854775809 in row \{'id': 2, "
                                             r".*beyond int64's range"):
        arrow_records(run, rows, "from", "until")


@pytest.mark.timeout(60)
def test_functions_on_arrow_and_column_names_on_python_updates_are_refused(run):
    rows = pa.record_batch({"id": [1], "diff": [1]})
    with pytest.raises(st.WorkerError, match=r"this collection carries Arrow batches: use "
                                             r"active_between\('start column', 'end column'\)"):
        arrow_records(run, rows, lambda r: 0, lambda r: 1)
    with pytest.raises(st.WorkerError, match=r"active_between with column names works on "
                                             r"Arrow collections"):
        run_records(run, [1], lambda c: c.active_between("start", "end"))


def test_times_other_than_ints_are_refused_when_the_dataflow_is_built():
    def build(scope):
        dd.InputSession().to_collection(scope).active_between(lambda r: 0, lambda r: 1)
    with pytest.raises(TypeError, match=r"active_between needs int times; this collection's "
                                        r"times are like Product\(0, 0\)"):
        st.execute_directly(lambda worker: worker.dataflow(build, timestamp=st.Product))


@settings(max_examples=200, deadline=None, database=None)
@given(times=hs.lists(hs.integers(0, 30), max_size=80), data=hs.data())
def test_due_slices_cut_held_runs_at_each_time_up_to_the_bound(times, data):
    """The cut of a held run (Python for a few rows, numpy for more) against a scan: each
    distinct time up to the bound with the rows due then."""
    import numpy as np
    from sparktimely.differential.arrow.batch import SMALL_ROWS
    from sparktimely.differential.arrow.temporal import due_slices
    times = sorted(times)
    position = data.draw(hs.integers(0, len(times)))
    bound = data.draw(hs.sampled_from([-1, 5, 15, 29, float("inf")]))
    expected: dict = {}
    for index in range(position, len(times)):
        if times[index] <= bound:
            expected.setdefault(times[index], []).append(index)
    assert due_slices(np.array(times, np.int64), position, bound) == \
        [(t, rows[0], rows[-1] + 1) for t, rows in expected.items()]
    assert SMALL_ROWS < 80                          # both paths
