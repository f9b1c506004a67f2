"""Logs written by real worker processes (``st.execute``), a file per worker: what a whole
run leaves, and what a failing or killed worker leaves behind."""
from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

import sparktimely as st
from sparktimely.logging import (MessagesEvent, OperatesEvent, ScheduleEvent, ShutdownEvent,
                                 log_to_directory, read_log_directory)

RECORDS = 20


def exchange_job(directory, fail_on=None):
    def job(worker):
        log_to_directory(worker, directory, progress=True)

        def check(x):
            if x == fail_on:
                raise ValueError(f"bad record {x}")
            return x
        data = range(RECORDS) if worker.index == 0 else []
        worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda x: x)
                        .map(check).probe())
        return os.getpid()
    return job


@pytest.mark.timeout(60)
def test_every_worker_process_writes_its_log_and_the_ends_of_each_batch_match(tmp_path):
    pids = st.execute(exchange_job(tmp_path), workers=2)
    logs = read_log_directory(tmp_path)
    assert sorted(logs.workers) == [0, 1]
    assert [logs.workers[w]["pid"] for w in (0, 1)] == pids
    assert all(meta["peers"] == 2 for meta in logs.workers.values())
    assert [(e.id, e.name) for e in logs.operators()] == [
        (0, "ToStream"), (1, "Exchange"), (2, "Map"), (3, "Probe")]
    assert [(e.source, e.target, e.pact) for e in logs.channels()] == [
        ((0, 0), (1, 0), "Exchange"), ((1, 0), (2, 0), "Pipeline"), ((2, 0), (3, 0), "Pipeline")]
    sends = [e for e in logs.events if type(e) is MessagesEvent and e.is_send]
    receives = [e for e in logs.events if type(e) is MessagesEvent and not e.is_send]
    shares = Counter(x % 2 for x in range(RECORDS))
    assert sorted((e.channel, e.source, e.target, e.length) for e in sends) == [
        (0, 0, 0, shares[0]), (0, 0, 1, shares[1]), (1, 0, 0, shares[0]),
        (1, 1, 1, shares[1]), (2, 0, 0, shares[0]), (2, 1, 1, shares[1])]
    assert [(e.channel, e.source, e.target, e.seq_no, e.length) for e in receives] == [
        (0, 0, 1, 0, shares[1])]
    for worker in (0, 1):
        mine = [e for e in logs.events if e.worker == worker]
        assert sorted(e.id for e in mine if type(e) is ShutdownEvent) == [0, 1, 2, 3]
    shared = [e for e in logs.progress if e.is_send]
    assert {e.worker for e in shared} == {0, 1}
    assert {(e.source, e.seq_no) for e in logs.progress if not e.is_send} == {
        (e.source, e.seq_no) for e in shared}


@pytest.mark.timeout(60)
def test_a_failing_worker_keeps_its_last_events_in_its_file_and_its_traceback(tmp_path):
    with pytest.raises(st.WorkerError) as caught:
        st.execute(exchange_job(tmp_path, fail_on=7), workers=2)
    error = caught.value
    assert error.index == 1 and "bad record 7" in str(error)
    # the traceback names what the worker was doing
    assert "the last" in error.traceback and "events worker 1 logged" in error.traceback
    assert "start Map (operator 2)" in error.traceback.split("events worker 1 logged")[1]
    # and the file holds it: Map started on worker 1 and never stopped
    logs = read_log_directory(tmp_path)
    mine = [e for e in logs.events if e.worker == 1]
    schedule = [e for e in mine if type(e) is ScheduleEvent]
    assert schedule[-1] == ScheduleEvent(schedule[-1].time, 1, 2, True)
    received = [e for e in mine if type(e) is MessagesEvent and not e.is_send]
    assert [(e.channel, e.length) for e in received] == [(0, RECORDS // 2)]
    assert not [e for e in mine if type(e) is ShutdownEvent]


@pytest.mark.timeout(60)
def test_a_killed_worker_keeps_every_step_it_finished(tmp_path):
    def job(worker):
        log_to_directory(worker, tmp_path)

        def build(scope):
            def ctor(capability, info):
                activator, runs = scope.activator_for(info.address), []

                def logic(output):
                    runs.append(1)
                    if len(runs) == 1:                     # step 1: give, run again
                        output.session(capability).give_iterator(range(5))
                        activator.activate()
                    elif worker.index == 1:                # step 2: die on worker 1
                        os.kill(os.getpid(), signal.SIGKILL)
                    else:
                        capability.drop()
                return logic
            return st.source(scope, "Doomed", ctor).map(str).probe()
        worker.dataflow(build)
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job, workers=2)
    assert "SIGKILL" in str(caught.value)
    logs = read_log_directory(tmp_path)
    mine = [e for e in logs.events if e.worker == 1]
    assert [e.name for e in mine if type(e) is OperatesEvent] == ["Doomed", "Map", "Probe"]
    # the first step ran the source, which sent its five records on: all kept
    assert (0, True) in [(e.id, e.is_start) for e in mine if type(e) is ScheduleEvent]
    assert [(e.channel, e.length) for e in mine if type(e) is MessagesEvent] == [(0, 5), (1, 5)]


@pytest.mark.timeout(60)
def test_a_directory_holds_the_last_run_only(tmp_path):
    st.execute(exchange_job(tmp_path), workers=3)
    st.execute(exchange_job(tmp_path), workers=2)
    logs = read_log_directory(tmp_path)
    assert sorted(logs.workers) == [0, 1] and {e.worker for e in logs.events} == {0, 1}
    assert sorted(os.listdir(tmp_path)) == [f"worker-{w}.{kind}" for w in (0, 1)
                                            for kind in ("json", "progress", "timely")]
    # a run without progress logs leaves no earlier run's (they were read as this run's)
    st.execute(lambda worker: None, workers=2, log_dir=tmp_path)
    assert read_log_directory(tmp_path).progress == []
    assert sorted(os.listdir(tmp_path)) == [f"worker-{w}.{kind}" for w in (0, 1)
                                            for kind in ("json", "timely")]


def test_a_failing_log_callback_is_named():
    def job(worker):
        def broken(time, batch):
            raise KeyError("oops")
        worker.log_register().insert("timely", broken)
        worker.dataflow(lambda scope: scope.to_stream([1]).probe())
    with pytest.raises(RuntimeError, match=r"worker 0: the callback .*broken.* of log "
                                           r"'timely' raised KeyError: 'oops'"):
        st.execute_directly(job)
