"""SIGTERM and SIGINT to the process that called ``st.execute`` stop every
worker and leave nothing behind; handlers are installed only around a run; the start-up sweep
removes what a crashed earlier run left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from segment_leaks import segments_of

import sparktimely as st

pytestmark = pytest.mark.timeout(90)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STUCK_JOB = """
import sys, time, sparktimely as st
def job(worker):
    probe = worker.dataflow(lambda scope: scope.to_stream(range(100)).exchange(lambda x: x).probe())
    worker.run()
    sys.stdout.write("ready\\n")       # one write: the workers' lines do not interleave
    sys.stdout.flush()
    time.sleep(600)
"""


def start(body: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", STUCK_JOB + textwrap.dedent(body), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_for_workers(process: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The supervisor's worker processes, once ``count`` of them have printed "ready"."""
    for _ in range(count):
        line = process.stdout.readline()
        if line != "ready\n":
            process.kill()
            pytest.fail(f"expected 'ready', got {line!r}; stderr: {process.stderr.read()}")
    return psutil.Process(process.pid).children()


def stop_and_time(process: subprocess.Popen, sig: int) -> float:
    started = time.monotonic()
    process.send_signal(sig)
    process.wait(30)
    return time.monotonic() - started


def assert_stopped_clean(supervisors: list, children: list, elapsed: float) -> None:
    """Every worker gone, every segment removed, and within 5 s."""
    assert psutil.wait_procs(children, timeout=5)[1] == []
    assert segments_of(p.pid for p in supervisors) == []
    assert elapsed < 5, f"stopping took {elapsed:.1f} s"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_sigterm_stops_every_worker_and_removes_every_segment(workers):
    supervisor = start("st.execute(job, workers=int(sys.argv[1]))", str(workers))
    try:
        children = wait_for_workers(supervisor, workers)
        # the control segment, the group record and a ring per pair of workers that talked
        assert len(segments_of([supervisor.pid])) == (0 if workers == 1 else
                                                      2 + workers * (workers - 1))
        elapsed = stop_and_time(supervisor, signal.SIGTERM)
        assert supervisor.returncode == -signal.SIGTERM       # it still dies of the signal
        assert_stopped_clean([supervisor], children, elapsed)
    finally:
        supervisor.kill()
        supervisor.wait()


def test_sigint_stops_the_workers_and_raises_keyboard_interrupt_in_the_caller():
    supervisor = start("""
        try:
            st.execute(job, workers=2)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", flush=True)
        """)
    try:
        children = wait_for_workers(supervisor, 2)
        elapsed = stop_and_time(supervisor, signal.SIGINT)
        assert supervisor.stdout.read() == "KeyboardInterrupt\n"
        assert supervisor.returncode == 0
        assert_stopped_clean([supervisor], children, elapsed)
    finally:
        supervisor.kill()
        supervisor.wait()


def test_an_uncaught_sigint_is_told_as_one_keyboard_interrupt():
    """As Python tells Ctrl-C: one short traceback ending in KeyboardInterrupt, not the
    supervision's internal exceptions chained before it."""
    supervisor = start("st.execute(job, workers=2)")
    try:
        children = wait_for_workers(supervisor, 2)
        elapsed = stop_and_time(supervisor, signal.SIGINT)
        err = supervisor.stderr.read()
        assert err.count("Traceback") == 1 and err.splitlines()[-1] == "KeyboardInterrupt", err
        assert "_Stopped" not in err and "_supervisor.py" not in err, err
        assert_stopped_clean([supervisor], children, elapsed)
    finally:
        supervisor.kill()
        supervisor.wait()


def test_sigterm_to_one_process_of_a_hostfile_job_stops_the_other_with_a_clear_error(tmp_path):
    from socket import socket
    with socket() as a, socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        hostfile = [f"127.0.0.1:{a.getsockname()[1]}", f"127.0.0.1:{b.getsockname()[1]}"]
    (tmp_path / "hosts").write_text("\n".join(hostfile))
    body = """
        try:
            st.execute_from_args(sys.argv[1:], job)
        except st.WorkerError as error:
            print("WorkerError:", error, flush=True)
        """
    processes = [start(body, "-w", "2", "-n", "2", "-p", str(p), "-h", str(tmp_path / "hosts"))
                 for p in range(2)]
    try:
        children = [c for p in processes for c in wait_for_workers(p, 2)]
        started = time.monotonic()
        processes[1].send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)
        elapsed = time.monotonic() - started
        assert processes[1].returncode == -signal.SIGTERM
        report = processes[0].stdout.read()
        assert report.startswith("WorkerError: worker 2 failed: process 1 (workers 2..3) was "
                                 "stopped by SIGTERM"), report + processes[0].stderr.read()
        assert processes[0].returncode == 0
        assert_stopped_clean(processes, children, elapsed)
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_handlers_are_installed_only_around_a_run():
    seen = []
    mine = lambda signum, frame: seen.append(signum)      # noqa: E731
    previous = signal.signal(signal.SIGTERM, mine)
    interrupt = signal.getsignal(signal.SIGINT)           # Python's, or a SparkContext's
    try:
        during = st.execute(lambda worker: None, workers=2)
        assert during == [None, None]
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is interrupt
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_during_a_run_reaches_the_callers_own_handler_after_cleanup():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))

    def job(worker):
        if worker.index == 0:
            os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(30)
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="stopped by SIGTERM"):
            st.execute(job, workers=2)
        assert seen == [signal.SIGTERM] and time.monotonic() - started < 5
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert psutil.Process().children(recursive=True) == []


def test_a_killed_supervisors_janitor_removes_its_segments():
    supervisor = start("st.execute(job, workers=2)")
    try:
        children = wait_for_workers(supervisor, 2)
        assert len(children) == 3                          # two workers and the janitor
        started = time.monotonic()
        supervisor.kill()                                  # no finally of it runs
        supervisor.wait(10)
        assert psutil.wait_procs(children, timeout=5)[1] == []
        deadline = time.monotonic() + 5
        while segments_of([supervisor.pid]) and time.monotonic() < deadline:
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        assert segments_of([supervisor.pid]) == [] and elapsed < 5
    finally:
        supervisor.kill()
        supervisor.wait()


def test_the_next_run_sweeps_what_a_killed_run_left():
    supervisor = start("st.execute(job, workers=2)")
    try:
        children = wait_for_workers(supervisor, 2)
        everyone = [*children, psutil.Process(supervisor.pid)]   # janitor included
        for process in everyone:        # frozen first: a supervisor that saw a worker die
            process.suspend()           # before its own SIGKILL came would sweep on its way out
        for process in everyone:
            process.kill()
        supervisor.wait(10)
        psutil.wait_procs(children, timeout=5)
        left = segments_of([supervisor.pid])
        assert len(left) == 4
    finally:
        supervisor.kill()
        supervisor.wait()
    alive = start("st.execute(job, workers=2)")            # a live run must keep its segments
    try:
        wait_for_workers(alive, 2)
        assert st.execute(lambda worker: worker.index, workers=2) == [0, 1]
        assert segments_of([supervisor.pid]) == []
        assert len(segments_of([alive.pid])) == 4
    finally:
        alive.terminate()
        alive.wait(10)
    assert segments_of([alive.pid]) == []
