"""What a worker tells its user when a job cannot be right or cannot finish: peers whose
``hash()`` is salted differently, and input handles that were never closed."""
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest
from ports import free_ports

import sparktimely as st
import sparktimely.differential as dd

JOB = textwrap.dedent("""
    import sys
    import sparktimely as st

    ROUTES = {"stable": st.stable_hash, "hash": lambda word: hash(word)}

    def job(worker):
        words = ["apple", "pear", "fig"] if worker.index == 0 else []
        captured = [worker.dataflow(lambda scope: scope.to_stream(words)
                                    .exchange(ROUTES[sys.argv[2]]).capture())
                    for _ in range(2)]                     # two dataflows, one warning
        worker.run()
        return sorted(x for _, batch in captured[1].extract() for x in batch)

    process, route, hosts = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    print(st.execute(job, workers=2, processes=2, process=process, hostfile=hosts), flush=True)
""")

WARNING = ("sparktimely: Python's hash() of strings differs between the processes of this job "
           "(worker 0's and worker {peer}'s, another PYTHONHASHSEED), and a route calls hash(): it "
           "sends one key to different workers in different processes. Route with "
           "sparktimely.stable_hash instead; or give every process the same PYTHONHASHSEED "
           "(e.g. PYTHONHASHSEED=0), which also silences this warning.")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("salts, route, warned", [(("1", "2"), "hash", True),
                                                  (("1", "2"), "stable", False),
                                                  (("7", "7"), "hash", False)])
def test_a_route_by_hash_in_processes_salted_differently_is_warned_about_once(
        tmp_path, salts, route, warned):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    runs = [subprocess.Popen([sys.executable, str(script), str(process), route, *hosts],
                             env=dict(os.environ, PYTHONHASHSEED=salt),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for process, salt in enumerate(salts)]
    outputs = [run.communicate(timeout=50) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    words = sorted(sum((sum(eval(out.strip()), []) for out, _ in outputs), []))
    assert words == ["apple", "fig", "pear"]          # each word sent once, routed once
    said = [[line for line in err.splitlines() if "hash() of strings differs" in line]
            for _, err in outputs]
    # worker 0 names the first worker of the other process whose salt it hears of: 2 or 3
    assert said in ([[WARNING.format(peer=2)], []], [[WARNING.format(peer=3)], []]) if warned \
        else said == [[], []], outputs


@pytest.mark.parametrize("waiting, hint, advice", [
    ("run", "cannot complete: only input handle 'lines'", "Call close() on an input handle"),
    ("step_while", "has not moved while step_while waits: only input handle 'lines'",
     "Advance an input handle (advance_to) past the time waited for"),
])
def test_an_input_that_alone_holds_a_dataflow_is_named_when_nothing_moves(
        run, monkeypatch, caplog, waiting, hint, advice):
    """run() names handles never closed; step_while names them too (waiting for a time no
    input handle was advanced past said nothing: a forgotten advance_to hung in silence)."""
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        lines = st.InputHandle("lines")
        kept.append(lines)                      # referenced, so it never closes itself
        probe = worker.dataflow(lambda scope: scope.input_from(lines).exchange(len).probe(),
                                name="wordcount")
        lines.send("x")
        if waiting == "step_while":
            worker.step_while(lambda: probe.less_than(1))       # lines is still at time 0
    kept = []
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        with pytest.raises(st.WorkerError, match="Stalled"):
            run(job, stall_seconds=1.0)
    hints = [r.getMessage() for r in caplog.records if hint in r.getMessage()]
    assert hints, caplog.text
    assert f"dataflow 'wordcount' (index 0) {hint}" in hints[0] and advice in hints[0]


def test_a_query_input_left_behind_is_named_though_its_import_holds_a_later_time(
        run, monkeypatch, caplog):
    """Seed 003's pattern with a forgotten ``query.advance_to``: the imported trace holds
    the query dataflow at the shared arrangement's later time, and step_while named only
    the arranging dataflow's input (kept open on purpose), never the query's own."""
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        knows, query = dd.InputSession("knows"), dd.InputSession("query")
        kept.extend([knows, query])

        def arrange(scope):
            arranged = knows.to_collection(scope).arrange_by_key()
            return arranged.trace, arranged.stream.probe()
        trace, probe = worker.dataflow(arrange, name="knows")
        knows.insert((worker.index, 1))
        knows.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        done = worker.dataflow(lambda scope: trace.import_(scope)
                               .semijoin(query.to_collection(scope)).probe(), name="ask")
        query.insert(0)
        knows.advance_to(2)
        worker.step_while(lambda: done.less_than(1))      # query is still at time 0
    kept = []
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        with pytest.raises(st.WorkerError, match="Stalled"):
            run(job, stall_seconds=1.0)
    asked = [r.getMessage() for r in caplog.records if "dataflow 'ask'" in r.getMessage()]
    assert asked and "only input handle 'query' (operator 'Input' at address (1, 1)) holds " \
        "it back" in asked[0], caplog.text


def test_no_hint_for_a_handle_advanced_past_what_a_busy_peer_still_holds(run, monkeypatch,
                                                                          caplog):
    """Worker 0 had advanced its handle and waited for a peer busy for longer than the
    hint's delay: it was told to advance the handle it had advanced."""
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        lines = st.InputHandle("lines")
        probe = worker.dataflow(lambda scope: scope.input_from(lines).exchange(len).probe())
        if worker.index == worker.peers - 1:
            time.sleep(0.5)                     # busy before its part of the round
        lines.send("x")
        lines.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        lines.close()
        return probe.less_than(1)
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        assert run(job) == [False] * run.workers
    assert "Advance an input handle" not in caplog.text, caplog.text


def test_no_hint_while_something_else_holds_the_dataflow(run, monkeypatch, caplog):
    # The input is closed; a source operator keeps its capability: not an input's fault.
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        def ctor(cap, info):
            held.append(cap)
            return lambda output: None
        held = []
        worker.dataflow(lambda scope: st.source(scope, "Forever", ctor).probe())
        kept.append(held)
    kept = []
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        with pytest.raises(st.WorkerError, match="Stalled"):
            run(job, stall_seconds=1.0)
    assert "cannot complete" not in caplog.text


@pytest.mark.parametrize("held_by", ["capability", "session"])
def test_an_unordered_input_that_alone_holds_a_dataflow_is_named(run, monkeypatch, caplog,
                                                                 held_by):
    """A capability never dropped, or a session never ended (it holds its time, as
    timely's does), hung in silence."""
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        (handle, cap), probe = worker.dataflow(lambda scope: (lambda hs: (
            hs[0], hs[1].probe()))(scope.new_unordered_input()), name="events")
        session = handle.session(cap.delayed(3))
        session.give("x")                       # buffered: the session holds time 3
        kept.append(session if held_by == "session" else cap)
        if held_by == "session":
            cap.drop()
        else:
            session.flush()
        worker.run()
    kept = []
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        with pytest.raises(st.WorkerError, match="Stalled"):
            run(job, stall_seconds=1.0)
    assert ("dataflow 'events' (index 0) cannot complete: only an unordered input, by a "
            "capability not dropped or a session not ended, (operator 'UnorderedInput'"
            ) in caplog.text
    # the advice is for unordered inputs (it told to close() an input handle: there is none)
    assert "it open. Drop an unordered input's capabilities (drop()) and end its sessions " \
           "once its input is done." in caplog.text
    assert "input handle" not in caplog.text


def test_an_input_handle_and_an_unordered_input_are_told_apart_by_kind(run, monkeypatch,
                                                                        caplog):
    """open_inputs gives each input's kind beside its description, and the hint takes its
    advice from the kinds (not from how a description begins): both remedies for both."""
    monkeypatch.setattr(st.Worker, "idle_hint_after", 0.05)

    def job(worker):
        lines = st.InputHandle("lines")

        def build(scope):
            (_, capability), events = scope.new_unordered_input()
            events.concat(scope.input_from(lines)).probe()
            return capability
        capability = worker.dataflow(build, name="both")
        deadline = time.monotonic() + 0.3
        worker.step_while(lambda: time.monotonic() < deadline)
        kinds = sorted(held.kind for held in worker.dataflows()[0].open_inputs())
        lines.close()
        capability.drop()
        worker.run()
        return kinds
    with caplog.at_level(logging.WARNING, logger="sparktimely"):
        assert run(job) == [["handle", "unordered"]] * run.workers
    hints = [r.getMessage() for r in caplog.records if "dataflow 'both'" in r.getMessage()]
    assert hints and all("only an unordered input" in hint and "and input handle 'lines'" in hint
                         and "Advance an input handle" in hint
                         and "Drop an unordered input's capabilities" in hint
                         for hint in hints), caplog.text
