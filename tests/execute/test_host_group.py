"""How the processes of one host group meet without a common parent: the group record (ready,
leaving, first failure) and the janitor that sweeps a killed member's segments."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sparktimely._group import GroupRecord, Janitor
from sparktimely.shm import job_prefix


def segments(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))


def test_janitor_sweeps_when_its_parent_is_killed():
    prefix = job_prefix()
    code = (f"import os, time\n"
            f"from sparktimely._group import Janitor\n"
            f"from sparktimely.shm import Segment\n"
            f"j = Janitor({prefix!r})\n"
            f"Segment.create({prefix!r} + '-x', 4096)\n"
            f"print(j.pid, flush=True)\n"
            f"time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        janitor = int(child.stdout.readline())
        assert segments(prefix) == [prefix + "-x"]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        while segments(prefix) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert segments(prefix) == []
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{janitor}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{janitor}")
    finally:
        child.kill()
        child.wait()


def test_janitor_leaves_alone_after_a_clean_finish():
    from sparktimely.shm import Segment, sweep
    prefix = job_prefix()
    janitor = Janitor(prefix)
    Segment.create(prefix + "-x", 4096).close()
    pid = janitor.pid
    janitor.finish(clean=True)
    assert segments(prefix) == [prefix + "-x"]
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)                              # already reaped
    sweep(prefix)


def test_a_job_whose_janitor_is_killed_finishes_as_if_nothing_happened():
    """The janitor is a child of the job beside its workers: a fault that kills it (a test
    killing the job's children at random, an OOM killer) takes away the safety net, not
    the job's results."""
    import sparktimely as st

    def job(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: x)
                                .probe())
        if worker.index == 0:                  # the janitor is the job's first child
            janitor = min(p.pid for p in psutil.Process(os.getppid()).children())
            assert janitor != os.getpid()
            os.kill(janitor, signal.SIGKILL)
        for epoch in range(5):
            handle.send(epoch)
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        return worker.index
    assert st.execute(job, workers=2) == [0, 1]


def test_group_record_counts_members_out_and_keeps_the_first_failure():
    prefix = job_prefix()
    creator = GroupRecord.create(prefix, 2)
    try:
        creator.set_ready()
        member = GroupRecord.attach(prefix, 2, time.monotonic() + 5, "worker 0")
        assert member.failure() is None
        assert member.fail(1, "ValueError: first", "tb1" * 20000) [0:2] == (1, "ValueError: first")
        assert creator.fail(0, "ValueError: second", "tb2")[:2] == (1, "ValueError: first")
        assert len(creator.failure()[2]) < 1 << 16
        assert not creator.leave() and member.leave()
        member.close()
    finally:
        creator.close()
        from sparktimely.shm import sweep
        sweep(prefix)


def test_group_record_tells_members_the_first_failure_was_only_a_lost_remote_peer():
    """A member that lost a remote peer records that, so the other members' reports say so too
    and their process waits for the remote process's own account (test_comm_cluster's
    failure tests); a real failure recorded first keeps its flag off."""
    for first, then, lost in [(True, False, True), (False, True, False)]:
        prefix = job_prefix()
        record = GroupRecord.create(prefix, 2)
        try:
            record.fail(0, "PeerLost: gone" if first else "ValueError: boom", "", lost_peer=first)
            record.fail(1, "PeerLost: gone" if then else "ValueError: boom", "", lost_peer=then)
            assert record.lost_peer() is lost
        finally:
            record.close()
            from sparktimely.shm import sweep
            sweep(prefix)


def test_attach_gives_up_when_the_creator_never_comes():
    with pytest.raises(TimeoutError, match="worker 0, the first of this host's workers"):
        GroupRecord.attach(job_prefix(), 2, time.monotonic() + 0.2, "worker 0")


def test_a_janitor_released_without_clean_sweeps_every_segment_directory(tmp_path, monkeypatch):
    from sparktimely.shm import Segment
    monkeypatch.setenv("SPARKTIMELY_SHM_DIR", str(tmp_path))
    prefix = job_prefix()
    janitor = Janitor(prefix)
    Segment.create(prefix + "-here", 4096).close()               # in $SPARKTIMELY_SHM_DIR
    Segment.create(prefix + "-there", 4096, directory="/dev/shm").close()
    other = job_prefix()
    Segment.create(other + "-x", 4096).close()                   # another job's: kept
    janitor.finish(clean=False)
    assert sorted(os.listdir(tmp_path)) == [other + "-x"]
    assert segments(prefix) == []
    os.remove(tmp_path / (other + "-x"))


def test_the_janitor_is_a_small_process_that_outlasts_the_group_signals():
    """A shell, not a copy of the program (whose exit every job waited for); the terminal's
    and a job stop's signals to the process group are its parent's to handle."""
    from sparktimely.shm import Segment, sweep
    prefix = job_prefix()
    janitor = Janitor(prefix)
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):    # at once: before
            os.kill(janitor.pid, sig)                                  # its trap runs too
        Segment.create(prefix + "-x", 4096).close()
        process = psutil.Process(janitor.pid)
        assert process.memory_info().rss < psutil.Process().memory_info().rss / 4
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(janitor.pid, sig)
        time.sleep(0.2)
        assert process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        janitor.finish(clean=True)
        assert segments(prefix) == [prefix + "-x"]
    finally:
        janitor.finish(clean=True)
        sweep(prefix)
