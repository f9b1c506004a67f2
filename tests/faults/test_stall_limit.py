"""An opt-in stall limit stops a job whose worker makes no progress (user
code in an endless loop, blocked on I/O, or in a call that keeps the interpreter lock) within
the limit plus 5 s (plus a grace for the last), naming the worker and where it is (its Python
stack, from faulthandler)."""
from __future__ import annotations

import glob
import os
import re
import signal
import socket
import time

import pytest

import sparktimely as st
from sparktimely.session import StallWatch, stall_dump_path

pytestmark = pytest.mark.timeout(90)

LIMIT = 1.0


def spin_forever(x):
    while True:                                  # user code in an endless loop
        x += 1


def wait_forever(x):
    a, b = socket.socketpair()
    a.recv(1)                                    # blocked on I/O that never comes


def job_with(stuck, stalled_index):
    def job(worker):
        def maybe_stuck(x):
            mine = worker.index == stalled_index and x == stalled_index + worker.peers
            return stuck(x) if mine else x
        probe = worker.dataflow(lambda scope: scope.to_stream(range(10))
                                .exchange(lambda x: x).map(maybe_stuck).probe())
        worker.run()
        return probe.done()
    return job


def stall(stuck, workers: int) -> tuple[st.WorkerError, float]:
    """The error of a job whose last worker gets ``stuck`` under the stall limit, and the
    seconds the job took; the error names that worker."""
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        st.execute(job_with(stuck, workers - 1), workers=workers, stall_limit=LIMIT)
    assert caught.value.index == workers - 1
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize("stuck, function", [(spin_forever, "spin_forever"),
                                             (wait_forever, "wait_forever")])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_stalled_worker_is_named_with_where_it_is(workers, stuck, function):
    stalled = workers - 1
    error, elapsed = stall(stuck, workers)
    assert str(error).startswith(f"worker {stalled} failed: stalled: no step for ")
    assert f"(stall limit 1 s), at File \"{__file__}\"" in str(error)
    assert str(error).endswith(f" in {function}")
    assert error.traceback.startswith("Thread 0x") and f"in {function}" in error.traceback
    assert "in maybe_stuck" in error.traceback
    # as told (the note), the stack's frames inside sparktimely and the frames of the
    # process that forked the worker are cut
    told = "\n".join(error.__notes__)
    assert "frames inside sparktimely)" in told, told
    assert not [line for line in told.splitlines() if line.startswith('  File "') and (
        "/sparktimely/" in line or "/multiprocess/" in line)], told
    assert elapsed < LIMIT + 5, f"the job took {elapsed:.1f} s to stop"


def hold_the_lock(x):
    return sum(range(10 ** 13))                  # a loop in C that never lets the lock go


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_worker_stalled_in_a_call_that_keeps_the_interpreter_lock_is_named(workers):
    """The stall watch is a Python thread, which such a call keeps from running:
    faulthandler's watchdog, a thread of C that the watch keeps pushing back, ends the
    worker instead, and the supervisor tells the stall from its dump."""
    stalled = workers - 1
    error, elapsed = stall(hold_the_lock, workers)
    assert str(error) == (f"worker {stalled} failed: stalled: no step for 1 s and more (stall "
                          f"limit 1 s), in a call that kept Python's interpreter lock, at "
                          f"File \"{__file__}\", line {hold_the_lock.__code__.co_firstlineno + 1}"
                          f" in hold_the_lock")
    assert "in hold_the_lock" in error.traceback and "in maybe_stuck" in error.traceback
    assert elapsed < LIMIT + StallWatch.grace(LIMIT) + 5, f"the job took {elapsed:.1f} s"
    assert glob.glob(stall_dump_path(os.getpid(), 0).replace("-0.txt", "-*")) == []  # none left


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_workers_waiting_for_a_slow_but_moving_peer_are_not_stalled(workers):
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        for round in range(8):                   # 8 x 0.3 s: longer than the limit in all
            if worker.index == 0:
                time.sleep(0.3)                  # each pause shorter than the limit
                input.send(round)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
        return round
    assert st.execute(job, workers=workers, stall_limit=LIMIT) == [7] * workers


def test_the_stall_limit_flag(capsys):
    with pytest.raises(st.WorkerError, match=r"^worker 1 failed: stalled: no step for "):
        st.execute_from_args(["-w", "2", "--stall-limit", "1"], job_with(spin_forever, 1))
    with pytest.raises(SystemExit, match="^2$"):
        st.execute_from_args(["--stall-limit", "soon"], job_with(spin_forever, 1))
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: argument --stall-limit: expected a positive number of seconds, got 'soon'")
    with pytest.raises(ValueError, match="stall_limit must be a positive number of seconds"):
        st.execute(job_with(spin_forever, 1), stall_limit=0)
    # beyond what the waits' system calls take: every worker failed with an OverflowError
    with pytest.raises(SystemExit, match="^2$"):
        st.execute_from_args(["--stall-limit", "inf"], job_with(spin_forever, 1))
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: argument --stall-limit: expected at most 1000000 seconds (11.6 days), got 'inf'")
    with pytest.raises(ValueError, match=r"stall_limit must be at most 1000000 seconds"):
        st.execute(job_with(spin_forever, 1), stall_limit=1e10)


def stop_itself(x):
    os.kill(os.getpid(), signal.SIGSTOP)         # as SIGSTOP from outside, or a debugger
    return x


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_stopped_worker_is_named_by_its_supervisor(workers):
    """A stopped worker's stall watch is stopped with it: the job waited forever. Its
    supervisor sees it stopped and names it, its process killed (nothing is left)."""
    stalled = workers - 1
    error, elapsed = stall(stop_itself, workers)
    assert re.fullmatch(rf"worker {stalled} failed: worker process \d+ has been stopped \(by "
                        rf"SIGSTOP or a debugger\) for 1\.\d s \(stall limit 1 s\)",
                        str(error)), str(error)
    assert elapsed < LIMIT + 5, f"the job took {elapsed:.1f} s to stop"
