"""capture_into / replay_into through event logs in files, in shared memory and in-process,
replayed by the same or another number of workers."""
from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import weakref

import numpy as np
import pyarrow as pa
import pytest

import sparktimely as st

from matrix_helpers import example
from ops_matrix import WORKERS, merged, oracle

ROUNDS = [[3, 1, 2, 8], [5, 9], [], [4, 4, 0, 7, 6], [11]]


def capture_job(paths):
    def job(worker):
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).map(lambda x: x * 10)
                        .capture_into(st.EventWriter(paths[worker.index])))
        for r, records in enumerate(ROUNDS):
            handle.send_batch(records[worker.index::worker.peers])
            handle.advance_to(r + 1)
        handle.close()
    return job


def replay_job(paths):
    def job(worker):
        mine = [st.EventReader(p) for i, p in enumerate(paths) if i % worker.peers == worker.index]
        return worker.dataflow(lambda scope: st.replay_into(mine, scope).capture())
    return job


EXPECTED = oracle(ROUNDS, lambda t, x: [(t, x * 10)])


@pytest.fixture(params=["file", "shm"])
def log_dir(request):
    if request.param == "shm" and os.path.isdir("/dev/shm"):
        directory = tempfile.mkdtemp(prefix="sparktimely-test-", dir="/dev/shm")
    else:
        directory = tempfile.mkdtemp()
    yield directory
    shutil.rmtree(directory)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("capture_workers, replay_workers",
                         [(w, w) for w in WORKERS] + [(3, 2), (2, 3), (3, 1)])
def test_replay_at_any_worker_count_gives_the_captured_stream(log_dir, capture_workers,
                                                              replay_workers):
    paths = [os.path.join(log_dir, f"log-{i}") for i in range(capture_workers)]
    st.execute(capture_job(paths), workers=capture_workers)
    assert merged(st.execute(replay_job(paths), workers=replay_workers)) == EXPECTED


@pytest.mark.parametrize("workers", WORKERS)
def test_replay_follows_the_logged_frontier(workers):
    """Replayed data can be aggregated per time: the replayed frontier passes a time only
    once the original stream's did."""
    def job(worker):
        link = st.EventLink()
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).capture_into(link))
        counts = worker.dataflow(lambda scope: link.replay_into(scope).count().capture())
        for r, records in enumerate(ROUNDS):
            handle.send_batch(records[worker.index::worker.peers])
            handle.advance_to(r + 1)
        handle.close()
        worker.run()
        return counts
    got = merged(st.execute(job, workers=workers))
    per_time = {t: sum(c) for t, c in got}
    assert per_time == {t: len(xs) for t, xs in enumerate(ROUNDS) if xs}


class Token:
    """A record whose release a test can see."""
    __slots__ = ("__weakref__",)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", WORKERS)
def test_an_event_link_lets_go_of_the_events_it_replayed(workers):
    """A link replayed round after round holds what is not read yet, not every event it
    was given (a log_stream's memory grew with every step)."""
    def job(worker):
        link, handle, alive, counts = st.EventLink(), st.InputHandle(), weakref.WeakSet(), {}
        worker.dataflow(lambda scope: scope.input_from(handle).capture_into(link))
        probe = worker.dataflow(lambda scope: link.replay_into(scope).count()
                                .inspect_time(lambda t, n: counts.__setitem__(t, n)).probe())
        for r in range(200):
            tokens = [Token() for _ in range(3)]
            alive.update(tokens)
            handle.send_batch(tokens)
            handle.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(r + 1))
        del tokens
        handle.close()
        worker.run()
        return len(alive), counts
    for left, counts in st.execute(job, workers=workers):
        assert (left, counts) == (0, {t: 3 for t in range(200)})

def test_a_log_read_while_it_is_written_waits_for_whole_events():
    directory = tempfile.mkdtemp()
    try:
        path = os.path.join(directory, "log")
        writer = st.EventWriter(path)
        reader = st.EventReader(path)
        assert reader.next() is None
        writer.push(("messages", 3, list(range(1000))))
        writer.flush()
        with open(path, "rb") as whole:
            data = whole.read()
        with open(path, "wb") as partial:           # half an event: not yet readable
            partial.write(data[:len(data) // 2])
        reader = st.EventReader(path)
        assert reader.next() is None
        with open(path, "ab") as rest:
            rest.write(data[len(data) // 2:])
        assert reader.next() == ("messages", 3, list(range(1000)))
        assert reader.next() is None
        writer.close()
        reader.close()
    finally:
        shutil.rmtree(directory)


def test_an_event_longer_than_one_read_is_read_whole(tmp_path):
    """A finished log whose events are several megabytes each (a step's batch of many
    events) reads whole: next() gives each, not None after the first read's megabyte."""
    path = str(tmp_path / "log")
    writer = st.EventWriter(path)
    big = [("messages", t, [bytes(1 << 20)] * 3) for t in range(2)]
    for event in big:
        writer.push(event)
    writer.close()
    reader = st.EventReader(path)
    assert [reader.next(), reader.next(), reader.next()] == big + [None]
    reader.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("blocking", [True, False])
def test_a_log_over_a_socket_is_read_without_waiting_for_more(blocking):
    """timely's capture_send / capture_recv over TCP: the reader returns what has arrived
    and None when nothing has, never waiting (the worker replaying must go on stepping)."""
    sending, receiving = socket.socketpair()
    receiving.setblocking(blocking)
    writer, reader = st.EventWriter(sending), st.EventReader(receiving)
    assert reader.next() is None
    writer.push(("messages", 0, [1, 2]))
    writer.flush()
    assert reader.next() == ("messages", 0, [1, 2]) and reader.next() is None
    writer.push(("progress", [(0, -1)]))
    writer.close()
    sending.close()
    assert reader.next() == ("progress", [(0, -1)]) and reader.next() is None   # then EOF
    reader.close()
    receiving.close()


@pytest.mark.timeout(60)
def test_a_dataflow_replays_a_socket_log_while_another_writes_it(run):
    """One dataflow captures into a socket, another of the same workers replays it from
    the other end: replaying never blocks the worker, so both complete."""
    def job(worker):
        sending, receiving = socket.socketpair()
        worker.dataflow(lambda scope: scope.to_stream(range(5)).delay(lambda x, t: x)
                        .capture_into(st.EventWriter(sending)))
        replayed = worker.dataflow(lambda scope: st.EventReader(receiving)
                                   .replay_into(scope).capture())
        worker.run()
        return replayed.extract()
    for worker, got in enumerate(run(job)):
        assert got == [(t, [t]) for t in range(5)], (worker, got)


def test_replay_rejects_a_batch_outside_the_logged_frontier():
    link = st.EventLink()
    link.push(("progress", [(0, -1), (5, 1)]))
    link.push(("messages", 2, ["late"]))
    with pytest.raises(st.OperatorError, match="time 2 is not in the future"):
        st.example(lambda scope: link.replay_into(scope).capture())


def test_extract_sorts_records_that_do_not_compare_in_one_order(run):
    # numpy scalars beside tuples: their comparison is an array, and sorting raises
    # ValueError, not TypeError; the records come from every worker, in any order
    records = [np.int64(5), (1, 2), np.float64(0.5), [3]]
    captures = example(run, lambda scope: scope.to_stream(
        records[scope.index::run.workers]).exchange(lambda x: 0).capture())
    assert captures[0].extract() == [(0, [np.float64(0.5), np.int64(5), (1, 2), [3]])]


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("parts, told", [
    ([[pa.record_batch({"k": [1]})], [pa.record_batch({"j": ["x"]})]],
     r"ValueError: Capture.extract at time 0: the batch's schema \(j: string\) differs from "
     r"the stream's schema \(k: int64\)"),
    ([[pa.record_batch({"k": [1]})], [2]],
     r"TypeError: .*both Python records and Arrow batches at time 0"),
])
@pytest.mark.timeout(60)
def test_extract_of_two_kinds_of_container_at_one_time_names_the_time(workers, parts, told):
    """Batches of two schemas at one time failed in Arrow's words from concat_tables."""
    def job(worker):
        captured = worker.dataflow(lambda scope: scope.concatenate(
            [scope.to_stream(part if worker.index == 0 else []) for part in parts]
        ).capture())
        worker.run()
        try:
            captured.extract()
        except (ValueError, TypeError) as error:
            return f"{type(error).__name__}: {error}"
        return "no error"
    told_by = st.execute(job, workers=workers)
    assert re.search(told, told_by[0]), told_by[0]


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("event, told", [
    ("x", r"log 0 gave 'x', which is no event: \('messages', time, batch\) or \('progress'"),
    (("messages", 0), r"log 0 gave \('messages', 0\), which is no event"),
    (("progress", [(0, "a")]), r"log 0 gave progress \[\(0, 'a'\)\], which is not a list of "
                               r"\(time, delta\) pairs with int deltas"),
])
@pytest.mark.timeout(60)
def test_a_malformed_event_in_a_replayed_log_is_named_with_its_log(workers, event, told):
    """It failed with Python's words (an IndexError, a TypeError) from inside the replay."""
    def job(worker):
        link = st.EventLink()
        link.push(("messages", 0, [1]))
        link.push(event)
        probe = worker.dataflow(lambda scope: st.replay_into([link], scope).probe())
        worker.step_while(lambda: not probe.done())
    with pytest.raises(st.WorkerError, match=rf"'Replay'.*replay: {told}"):
        st.execute(job, workers=workers)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("data, why", [
    (b"\x05\0\0\0\0\0\0\0hello", ""),
    (b"\x03\0\0\0\0\0\0\0\x80\x05K", ": UnpicklingError: pickle data was truncated"),
    (b"\x02\0\0\0\0\0\0\0\x80\x05", ": EOFError: Ran out of input"),
], ids=["no-pickle", "truncated", "empty"])
@pytest.mark.timeout(60)
def test_bytes_that_are_no_log_are_a_value_error_naming_the_replayed_log(tmp_path, workers,
                                                                         data, why):
    """API.md: bytes that are not an EventWriter's are a ValueError; a length and a broken
    pickle gave pickle's own errors. In a replay, the error names the log by its place."""
    path = tmp_path / "not-a.log"
    path.write_bytes(data)
    told = f"not events written by an EventWriter (each is a length and a pickle; this is " \
           f"not){why}"
    with pytest.raises(ValueError) as raised:
        st.EventReader(path).next()
    assert str(raised.value) == told

    def job(worker):
        link = st.EventLink()
        link.push(("progress", [(0, -1)]))
        probe = worker.dataflow(lambda scope: st.replay_into(
            [link, st.EventReader(path)], scope).probe())
        worker.step_while(lambda: not probe.done())
    with pytest.raises(st.WorkerError) as failed:
        st.execute(job, workers=workers)
    assert f"operator 'Replay' (address (0, 0)) raised ValueError: replay: log 1 cannot be " \
           f"read: {told}" in str(failed.value)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.timeout(60)
def test_a_capture_and_a_log_of_batches_without_columns_keep_their_rows(workers, tmp_path):
    """pyarrow's pickle of a batch without columns has no rows: a Capture returned from a
    worker process extracted tables of 0 rows, and a replayed log lost the batches."""
    batch = pa.record_batch({"a": list(range(10))}).select([])
    paths = [str(tmp_path / f"log-{i}") for i in range(workers)]
    captures = st.execute(lambda w: w.dataflow(lambda scope: scope.to_stream([batch])
                                               .capture_into(st.EventWriter(paths[w.index]))
                                               or scope.to_stream([batch]).capture()),
                          workers=workers)
    assert [(t, table.num_rows) for c in captures for t, table in c.extract()] == \
        [(0, 10)] * workers
    replayed = st.execute_directly(lambda w: w.dataflow(lambda scope: st.replay_into(
        [st.EventReader(path) for path in paths], scope).capture()))
    assert [(t, table.num_rows) for t, table in replayed.extract()] == [(0, 10 * workers)]
