"""Logs as streams processed by a dataflow, and registering and removing logs while
dataflows run: nothing is missed, and removing the last log leaves no hook behind."""
from __future__ import annotations

from collections import Counter

import pytest

import sparktimely as st
from sparktimely.logging import MessagesEvent, OperatesEvent, ScheduleEvent, log_stream
from sparktimely.testing import consolidate

RECORDS = 40


def test_a_dataflow_adds_up_the_records_its_workers_logged(run):
    def job(worker):
        data = range(RECORDS) if worker.index == 0 else []
        worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda x: x)
                        .map(str).probe())                           # channels 0, 1, 2
        totals = worker.dataflow(lambda scope: log_stream(scope)
                                 .filter(lambda e: type(e) is MessagesEvent and e.is_send
                                         and e.channel < 3)
                                 .map(lambda e: (e.channel, e.length))
                                 .exchange(lambda pair: pair[0])
                                 .aggregate(lambda channel, length, total: (total or 0) + length,
                                            lambda channel, total: (channel, total),
                                            lambda channel: channel)
                                 .capture())
        worker.step_while(lambda: worker.installed_dataflows() != [1])
        worker.log_register().remove("timely")                      # the log stream ends
        worker.run()
        return totals.extract()
    totals = Counter()
    for _, batch in consolidate(run(job)):
        for channel, total in batch:
            totals[channel] += total
    # every record crosses each of the three channels once, whatever the worker count
    assert totals == {0: RECORDS, 1: RECORDS, 2: RECORDS}


def test_a_log_registered_after_building_sees_the_dataflow_and_its_messages(run):
    def job(worker):
        input = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        events = []
        worker.log_register().insert("timely", lambda time, batch: events.extend(batch))
        if worker.index == 0:
            input.send_batch(range(RECORDS))
        input.close()
        worker.run()
        return events
    logs = run(job)
    for events in logs:
        assert [e.name for e in events if type(e) is OperatesEvent] == [
            "Input", "Exchange", "Probe"]
    sent = sum(e.length for events in logs for e in events
               if type(e) is MessagesEvent and e.is_send and e.channel == 0)
    assert sent == RECORDS


def test_removing_the_last_log_stops_logging_and_detaches_the_observer(run):
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).map(str).probe())
        registry = worker.log_register()
        events = []
        registry.insert("timely", lambda time, batch: events.extend(batch))
        watched = len(worker.observers)
        input.send(1)
        input.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        local = sum(1 for e in events if type(e) is MessagesEvent and e.source == e.target)
        registry.remove("timely")
        logged = len(events)
        input.send(2)
        input.close()
        worker.run()
        return watched, local, worker.observers, len(events) == logged
    for watched, local, observers, quiet in run(job):
        assert watched == 1 and local >= 2      # Input -> Map and Map -> Probe, on its worker
        assert observers == () and quiet


def test_schedule_events_of_a_log_stream_name_its_own_operators():
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream([1]).probe())
        runs = worker.dataflow(lambda scope: log_stream(scope).filter(
            lambda e: type(e) is ScheduleEvent and e.is_start).map(lambda e: e.id).capture())
        for _ in range(5):
            worker.step()
        worker.log_register().remove("timely")
        worker.run()
        return Counter(id for _, batch in runs.extract() for id in batch)
    runs = st.execute_directly(job)
    assert runs[0] == 1 and runs[1] >= 1                 # ToStream once, and Probe
    assert runs[2] >= 5                                  # the replay polls its log each step


@pytest.mark.timeout(60)
def test_two_log_streams_of_one_log_both_complete_when_it_is_removed(run):
    """Each log_stream is one more consumer of the log: both see the operators built, and
    removing the log completes both (a second used to replace the first, which never
    completed: the job stepped forever)."""
    def job(worker):
        first, second = (worker.dataflow(lambda scope: log_stream(scope)
                                         .filter(lambda e: type(e) is OperatesEvent)
                                         .map(lambda e: e.name).capture())
                         for _ in range(2))
        worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
        for _ in range(3):
            worker.step()
        worker.log_register().remove("timely")
        worker.run()
        return [sorted(name for _, batch in c.extract() for name in batch) for c in
                (first, second)]
    for first, second in run(job):
        assert "Map" in first and "ToStream" in first and first == second


@pytest.mark.timeout(60)
def test_dropping_a_log_streams_dataflow_ends_its_feed(run):
    """A log_stream whose dataflow was dropped is fed no more; the last one dropped ends
    the worker's logging (it kept filling a link nobody read: about 1.3 MB per 1,000
    rounds of a small job, and every step went on logging)."""
    def job(worker):
        dropped = worker.next_dataflow_index()
        worker.dataflow(lambda scope: log_stream(scope).probe())
        kept = worker.dataflow(lambda scope: log_stream(scope)
                               .filter(lambda e: type(e) is OperatesEvent)
                               .map(lambda e: e.name).capture())
        worker.step()
        worker.drop_dataflow(dropped)
        worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe())
        worker.step()
        names = worker.log_register().names()
        worker.log_register().remove("timely")
        worker.run()
        last = worker.next_dataflow_index()
        worker.dataflow(lambda scope: log_stream(scope).probe())
        worker.drop_dataflow(last)
        return names, worker.log_register().names(), sorted(
            {name for _, batch in kept.extract() for name in batch})
    for names, after, seen in run(job):
        assert names == ["timely"] and after == []
        assert {"Map", "ToStream", "Capture"} <= set(seen)


@pytest.mark.timeout(120)
def test_a_programs_own_logging_leaves_the_log_files_whole(tmp_path):
    """Under execute(log_dir=...), the program's own insert (README's example) and a
    log_stream removed again do not end the log files: the profile sees the whole run."""
    def job(worker):
        seen = []
        worker.log_register().insert("timely", lambda time, batch: seen.extend(batch))
        worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x)
                        .probe(), name="first")
        worker.dataflow(lambda scope: log_stream(scope).probe(), name="logs")
        worker.step()
        worker.log_register().remove("timely")
        worker.dataflow(lambda scope: scope.to_stream(range(10)).map(str).probe(),
                        name="later")
        worker.run()
        return len(seen) > 0
    for workers in (1, 2, 3):
        assert st.execute(job, workers=workers, log_dir=tmp_path) == [True] * workers
        logs = st.logging.read_log_directory(tmp_path)
        names = [e.name for e in logs.operators()]
        assert names == ["ToStream", "Exchange", "Probe", "Replay", "Probe", "ToStream", "Map",
                         "Probe"], names
        sent = sum(e.length for e in logs.events if type(e) is MessagesEvent and e.is_send
                   and e.channel < 2)
        assert sent == 2 * 10 * workers, sent         # both of the first dataflow's channels


@pytest.mark.timeout(120)
def test_under_log_dir_logs_come_and_go_as_they_do_without_it(tmp_path):
    """With the kept log-file callbacks in place: a program's insert after a dataflow was
    built does not write that dataflow's operators into the files again, a log_stream made
    after a remove completes at the next remove (it used to join the kept callbacks, and the
    job never finished), and a callback added after a remove stops at the next one."""
    def job(worker):
        registry, late = worker.log_register(), []
        worker.dataflow(lambda scope: scope.to_stream(range(10)).map(str).probe(), name="a")
        registry.insert("timely", lambda time, batch: None)
        streams = []
        for round in range(2):
            streams.append(worker.dataflow(lambda scope: log_stream(scope).probe(),
                                           name=f"logs{round}"))
            if round:
                registry.add("timely", lambda time, batch: late.extend(batch))
            worker.step()
            registry.remove("timely")
            worker.step_while(lambda: not streams[-1].done())
        seen = len(late)
        worker.dataflow(lambda scope: scope.to_stream(range(10)).probe(), name="b")
        worker.run()
        return seen == len(late)
    for workers in (1, 2, 3):
        assert st.execute(job, workers=workers, log_dir=tmp_path) == [True] * workers
        names = [e.name for e in st.logging.read_log_directory(tmp_path).operators()]
        assert names == ["ToStream", "Map", "Probe", "Replay", "Probe", "Replay", "Probe",
                         "ToStream", "Probe"], names
