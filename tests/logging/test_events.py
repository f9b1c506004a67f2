"""Each kind of logged event, field by field, for a known dataflow at 1, 2 and 3 workers.

The dataflow: worker 0 makes the records 0..RECORDS-1 (``to_stream``), an exchange sends
record ``x`` to worker ``x % peers``, a ``map`` and a probe follow; an open input keeps the
worker idle for a while, so that it parks. What each worker must log is recomputed from
that description in plain Python.
"""
from __future__ import annotations

import gc
import tracemalloc
from collections import Counter

import pytest

import sparktimely as st
from sparktimely.logging import (ChannelsEvent, MessagesEvent, OperatesEvent, ParkEvent,
                                 ProgressEvent, ScheduleEvent, ShutdownEvent)

RECORDS = 10
NAMES = ["ToStream", "Exchange", "Map", "Probe", "Input", "Probe"]
# channels: (source operator, target operator, pact)
CHANNELS = [(0, 1, "Exchange"), (1, 2, "Pipeline"), (2, 3, "Pipeline"), (4, 5, "Pipeline")]


def job(worker):
    events, progress = [], []
    registry = worker.log_register()
    registry.insert("timely", lambda time, batch: events.extend(batch))
    registry.insert("timely/progress", lambda time, batch: progress.extend(batch))
    data = range(RECORDS) if worker.index == 0 else []
    worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda x: x)
                    .map(lambda x: -x).probe())
    input = st.InputHandle()
    worker.dataflow(lambda scope: scope.input_from(input).probe())
    while not any(type(e) is ParkEvent for e in events):   # once the first dataflow is
        worker.step_or_park(0.001)                       # done, the open input idles
    input.close()
    worker.run()
    registry.close()
    return events, progress


def of(kind, events):
    return [e for e in events if type(e) is kind]


@pytest.fixture
def logs(run):
    return run(job)


def routed(peers):
    """Records per target worker (the oracle for the exchange)."""
    return Counter(x % peers for x in range(RECORDS))


def test_every_event_names_its_worker_and_times_only_grow(logs):
    for index, (events, progress) in enumerate(logs):
        assert {e.worker for e in events + progress} == {index}
        timely = [e.time for e in events]
        assert all(t >= 0 for t in timely)
        assert timely == sorted(timely)


def test_operates_events_describe_every_operator_once(logs):
    for index, (events, _) in enumerate(logs):
        operates = of(OperatesEvent, events)
        assert [(e.id, e.addr, e.name, e.scope) for e in operates] == [
            (0, (0, 0), "ToStream", "dataflow-0"), (1, (0, 1), "Exchange", "dataflow-0"),
            (2, (0, 2), "Map", "dataflow-0"), (3, (0, 3), "Probe", "dataflow-0"),
            (4, (1, 0), "Input", "dataflow-1"), (5, (1, 1), "Probe", "dataflow-1")]


def test_channels_events_describe_every_channel_with_its_pact(logs):
    for events, _ in logs:
        channels = of(ChannelsEvent, events)
        assert [(e.id, e.source, e.target, e.pact, e.scope_addr) for e in channels] == [
            (number, (source, 0), (target, 0), pact, (0,) if number < 3 else (1,))
            for number, (source, target, pact) in enumerate(CHANNELS)]


def test_schedule_events_pair_up_and_cover_every_operator(logs):
    for events, _ in logs:
        schedule = of(ScheduleEvent, events)
        assert {e.id for e in schedule} == set(range(len(NAMES)))
        starts = schedule[0::2]
        stops = schedule[1::2]
        assert all(e.is_start for e in starts) and not any(e.is_start for e in stops)
        assert [e.id for e in starts] == [e.id for e in stops]
        assert all(a.time <= b.time for a, b in zip(starts, stops))


def test_messages_events_count_every_record_on_every_channel(logs):
    peers = len(logs)
    expected = routed(peers)
    sent = {}
    for index, (events, _) in enumerate(logs):
        messages = of(MessagesEvent, events)
        sends = [e for e in messages if e.is_send]
        assert all(e.source == index for e in sends)
        # channel 0 (the exchange): worker 0 sends each worker its share, once
        exchange = sorted((e.target, e.length, e.seq_no) for e in sends if e.channel == 0)
        assert exchange == ([(w, expected[w], 0) for w in sorted(expected)]
                            if index == 0 else [])
        # channels 1 and 2 stay on the worker: one batch of its share each
        for channel in (1, 2):
            local = [(e.target, e.length, e.seq_no) for e in sends if e.channel == channel]
            assert local == ([(index, expected[index], 0)] if expected[index] else [])
        assert not [e for e in sends if e.channel == 3]          # the input sent nothing
        for e in sends:
            if e.target != index:
                sent[(e.channel, e.source, e.target, e.seq_no)] = e.length
    received = {}
    for index, (events, _) in enumerate(logs):
        for e in of(MessagesEvent, events):
            if not e.is_send:
                assert e.target == index and e.source != index
                received[(e.channel, e.source, e.target, e.seq_no)] = e.length
    assert received == sent                      # every batch between workers, both ends
    assert set(sent) == {(0, 0, w, 0) for w in expected if w != 0}


def test_shutdown_events_come_once_per_operator_after_its_last_scheduling(logs):
    for events, _ in logs:
        shutdown = of(ShutdownEvent, events)
        assert sorted(e.id for e in shutdown) == list(range(len(NAMES)))
        for e in shutdown:
            last_run = max(s.time for s in of(ScheduleEvent, events) if s.id == e.id)
            assert e.time >= last_run


def test_park_events_alternate_and_carry_the_timeout(logs):
    for events, _ in logs:
        parks = of(ParkEvent, events)
        assert parks, "an idle worker must park"
        assert [e.is_park for e in parks] == [True, False] * (len(parks) // 2)
        assert all(e.timeout is None for e in parks if not e.is_park)
        assert 0.001 in {e.timeout for e in parks if e.is_park}


def test_progress_events_are_shared_whole_and_release_every_initial_capability(logs):
    peers = len(logs)
    if peers == 1:
        assert all(progress == [] for _, progress in logs)   # a lone worker shares nothing
        return
    assert all(type(e) is ProgressEvent and e.dataflow in (0, 1)
               for _, progress in logs for e in progress)
    sends = {}
    for index, (_, progress) in enumerate(logs):
        mine = [e for e in progress if e.is_send]
        assert all(e.source == index for e in mine)
        assert [e.seq_no for e in mine if e.dataflow == 0] == list(
            range(len([e for e in mine if e.dataflow == 0])))
        for e in mine:
            sends[(e.source, e.dataflow, e.seq_no)] = (e.messages, e.internal)
    for index, (_, progress) in enumerate(logs):
        received = {(e.source, e.dataflow, e.seq_no): (e.messages, e.internal)
                    for e in progress if not e.is_send}
        assert received == {key: value for key, value in sends.items() if key[0] != index}
    targets, sources = Counter(), Counter()
    for messages, internal in sends.values():
        for operator, port, time, delta in messages:
            targets[(operator, port, time)] += delta
        for operator, port, time, delta in internal:
            sources[operator] += delta
    # every record counted in flight is counted out again
    assert {key: count for key, count in targets.items() if count} == {}
    # each worker's initial capabilities (ToStream, Exchange, Map, Input) are all released;
    # the input handle's, a worker's own (made at the handle's time), is shared when made
    # and when released
    assert +sources == Counter() and -sources == Counter({0: peers, 1: peers, 2: peers,
                                                          4: peers})


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(120)
def test_a_logging_worker_keeps_nothing_of_the_dataflows_it_dropped(workers):
    """A query dataflow per request, with the "timely" and progress logs on: each worker
    logged every dataflow, and kept each one's operators, channels and their ends (about
    15 KB) for good, after the program or the worker itself had dropped it. A logger
    registered afterwards gets the structure of the dataflows still there only."""
    def job(worker):
        registry = worker.log_register()
        events = []
        registry.insert("timely", lambda time, batch: events.extend(batch))
        registry.insert("timely/progress", lambda time, batch: None)
        tracemalloc.start()
        for i in range(700):
            if i == 200:
                gc.collect()
                start = tracemalloc.get_traced_memory()[0]
            events.clear()                  # (the events themselves are the program's)
            index = worker.next_dataflow_index()
            data = range(10) if worker.index == 0 else []
            probe = worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda x: x)
                                    .map(lambda x: x + 1).probe(), name=f"query {i}")
            worker.step_while(lambda: not probe.done())
            if i % 2:
                worker.drop_dataflow(index)   # the others the worker drops itself
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        later = []
        registry.add("timely", lambda time, batch: later.extend(batch))
        registry.close()
        described = sorted({e.addr[0] for e in later if type(e) is OperatesEvent})
        return grown / 500, described, sorted(worker.dataflows())
    for per_dataflow, described, kept in st.execute(job, workers=workers):
        assert per_dataflow < 500, per_dataflow         # bytes (12-20 KB before)
        assert described == kept and kept
