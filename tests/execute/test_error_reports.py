"""How a failed run is told to the person who started it: once, with the line of their own
program that raised, without the frames of sparktimely's supervision."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

import sparktimely as st

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(tmp_path, name: str, source: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=50, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_failing_operator_shows_the_programs_own_line(tmp_path, workers):
    ran = run_script(tmp_path, "job.py", """\
        import sys, sparktimely as st
        def job(worker):
            worker.dataflow(lambda scope: scope.to_stream([1, 0]).map(lambda x: 1 // x).probe())
            worker.run()
        st.execute_from_args(sys.argv[1:], job)
        """, "-w", str(workers))
    assert ran.returncode == 1
    err = ran.stderr
    assert "failed: OperatorError: operator 'Map'" in err and "ZeroDivisionError" in err, err
    assert f'File "{tmp_path / "job.py"}", line 3, in <lambda>' in err, err
    assert "'s traceback:" in err and "frames inside sparktimely" in err, err
    assert "_supervisor.py" not in err and "worker.py" not in err, err
    # told as a command line tells an error: the program's name, the message, then the
    # worker's own traceback; not the frames of the execute_from_args call that raised it
    assert re.match(r"job\.py: worker \d failed: OperatorError: operator 'Map'", err), err
    assert "execute.py" not in err and "in <module>" not in err, err


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_error_with_a_huge_message_keeps_the_programs_own_frames(tmp_path, workers):
    """A message of a whole batch (100k characters): at 2 or more workers the failure record
    (64 KiB) kept its head and tail, which lost the traceback and the program's frames."""
    ran = run_script(tmp_path, "job.py", """\
        import sys, sparktimely as st
        def check(batch):
            raise ValueError(f"bad readings {batch}")
        def job(worker):
            worker.dataflow(lambda scope: scope.to_stream(range(20_000))
                            .inspect_batch(lambda t, b: check(b)).probe())
            worker.run()
        st.execute_from_args(sys.argv[1:], job)
        """, "-w", str(workers))
    assert ran.returncode == 1
    err = ran.stderr
    assert re.match(r"job\.py: worker \d failed: OperatorError: operator 'InspectBatch' "
                    r"\(address \(0, 1\)\) raised ValueError: bad readings \[0, 1, 2, ", err), err
    assert f'File "{tmp_path / "job.py"}", line 3, in check' in err, err
    assert "frames inside sparktimely" in err and "_supervisor.py" not in err, err
    assert len(err) < (250_000 if workers == 1 else 20_000), len(err)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_execute_inside_a_worker_says_what_to_do_instead(workers):
    """It failed in multiprocessing's words: daemonic processes are not allowed to have
    children."""
    with pytest.raises(st.WorkerError, match=re.escape(
            "RuntimeError: execute was called inside a worker (or another daemonic process), "
            "which may not start processes: build the inner job's dataflows on this worker "
            "(worker.dataflow), or run it in this process with st.execute_directly")):
        st.execute(lambda worker: st.execute(lambda inner: inner.index, workers=2),
                   workers=workers)


def test_a_hostfile_that_cannot_be_read_is_named_by_the_library_call(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"cannot read hostfile {tmp_path / 'hosts.txt'}: No such file or directory")):
        st.execute(lambda worker: worker.index, processes=2, process=0,
                   hostfile=tmp_path / "hosts.txt")


def test_a_checkpoint_of_another_program_is_told_once(tmp_path):
    source = """\
        import sys, sparktimely as st
        def job(worker):
            worker.dataflow(lambda scope: scope.to_stream(range(3)).probe(), name=sys.argv[1])
            worker.run()
        st.execute_from_args(sys.argv[2:], job)
        """
    assert run_script(tmp_path, "a.py", source, "first", "-w2", "--checkpoint-dir",
                      "ck").returncode == 0
    ran = run_script(tmp_path, "b.py", source, "second", "-w2", "--checkpoint-dir", "ck")
    assert ran.returncode == 1
    assert ran.stderr.count("it holds checkpoints of dataflow 'first'") == 1, ran.stderr
    assert "direct cause" not in ran.stderr and "WorkerError" not in ran.stderr, ran.stderr


def test_a_checkpoint_directory_that_cannot_be_one_is_named_before_workers_start(tmp_path):
    file = tmp_path / "file"
    file.write_text("")
    for where, told in ((file, "is a file, not a directory"),    # (pyarrow's words, before)
                        (file / "ck", ": cannot create it")):
        with pytest.raises(st.RecoveryError, match=f"checkpoint directory {where} ?{told}"):
            st.execute(lambda worker: (tmp_path / f"ran-{worker.index}").touch(), workers=2,
                       checkpoint_dir=where)
    assert sorted(os.listdir(tmp_path)) == ["file"]           # no worker ran


def test_a_log_directory_that_cannot_be_one_is_named_before_workers_start(tmp_path):
    """--log-dir under a file is a usage error naming the flag and why; execute(log_dir=...)
    raises ValueError saying the same; no worker runs."""
    (tmp_path / "file").write_text("")
    ran = run_script(tmp_path, "job.py", """\
        import sys, sparktimely as st
        st.execute_from_args(sys.argv[1:], lambda worker: open(f"ran-{worker.index}", "w"))
        """, "-w2", "--log-dir", "file/logs")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.splitlines()[-1] == (
        f"job.py: error: argument --log-dir: cannot write logs to file/logs: "
        f"{tmp_path / 'file'} is not a directory")
    with pytest.raises(ValueError, match=f"log_dir: cannot write logs to {tmp_path}/file/x: "
                                         f"{tmp_path}/file is not a directory"):
        st.execute(lambda worker: (tmp_path / f"ran-{worker.index}").touch(), workers=2,
                   log_dir=tmp_path / "file" / "x")
    assert sorted(os.listdir(tmp_path)) == ["file", "job.py"]       # no worker ran


def test_an_empty_log_directory_is_refused_before_workers_start(tmp_path):
    """It passed the check as the working directory, then every worker failed to make it
    (FileNotFoundError: ''); sparktimely-submit wrote the logs into the working directory."""
    ran = run_script(tmp_path, "job.py", """\
        import sys, sparktimely as st
        st.execute_from_args(sys.argv[1:], lambda worker: open(f"ran-{worker.index}", "w"))
        """, "-w2", "--log-dir=")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.splitlines()[-1] == (
        "job.py: error: argument --log-dir: cannot write logs to '': an empty path names no "
        "directory")
    with pytest.raises(ValueError, match="^log_dir: cannot write logs to '': an empty path "
                                         "names no directory$"):
        st.execute(lambda worker: (tmp_path / f"ran-{worker.index}").touch(), workers=2,
                   log_dir="")
    submitted = subprocess.run([sys.executable, "-m", "sparktimely.barrier.submit",
                                "--log-dir=", "job:main"], capture_output=True, text=True,
                               timeout=60, cwd=tmp_path)
    assert submitted.returncode == 2 and submitted.stderr.splitlines()[-1] == (
        "sparktimely-submit: error: argument --log-dir: an empty path names no directory")
    assert sorted(os.listdir(tmp_path)) == ["job.py"]               # no worker ran


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_log_directory_where_nothing_can_be_made_is_named_even_for_root(tmp_path):
    """/proc passes every permission check for root, yet nothing can be made in it: told
    before any worker starts, and the check leaves nothing behind where it succeeds."""
    with pytest.raises(ValueError, match=r"log_dir: cannot write logs to /proc/nope: /proc "
                                         r"is not writable"):
        st.execute(lambda worker: (tmp_path / f"ran-{worker.index}").touch(), workers=2,
                   log_dir="/proc/nope")
    assert os.listdir(tmp_path) == []                               # no worker ran
    st.execute(lambda worker: None, workers=1, log_dir=tmp_path / "logs")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".sparktimely")]


def test_execute_from_args_takes_a_list_not_one_string():
    with pytest.raises(TypeError, match="argv is the list of arguments"):
        st.execute_from_args("-w2", lambda worker: None)


FILTER = """\
    import sys, sparktimely as st
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(range(200_000))
                        .inspect(lambda x: print("line", x) if sys.argv[1] == "print" else None)
                        .inspect(lambda x: 1 / (x - 150_000) if x > 100_000 else None)
                        .probe())
        worker.run()
    st.execute_from_args(sys.argv[2:], job)
    """


@contextlib.contextmanager
def filter_job(tmp_path, *args: str) -> Iterator[subprocess.Popen]:
    """The filter program running with ``args``; killed with its workers if the test fails."""
    (tmp_path / "filter.py").write_text(textwrap.dedent(FILTER))
    job = subprocess.Popen([sys.executable, str(tmp_path / "filter.py"), *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, env=dict(os.environ, PYTHONPATH=ROOT),
                           start_new_session=True)
    try:
        yield job
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        for stream in (job.stdout, job.stderr):
            assert stream is not None
            stream.close()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_filter_whose_reader_goes_away_ends_quietly(tmp_path, workers):
    with filter_job(tmp_path, "print", "-w", str(workers)) as job:
        # Workers write to the pipe in blocks of their own: only the first bytes are sure.
        assert job.stdout.read(4) == "line"
        job.stdout.close()                              # as `prog | head -1` does
        err = job.stderr.read()
        assert job.wait(50) == 1
        assert err == "", err


def test_a_bug_is_told_though_no_one_reads_the_output_any_more(tmp_path):
    with filter_job(tmp_path, "quiet", "-w", "2") as job:
        job.stdout.close()
        err = job.stderr.read()
        assert job.wait(50) == 1
        assert "failed: OperatorError: operator 'Inspect'" in err and "ZeroDivisionError" in err, err


class Abort(BaseException):
    """A program's own way out that is not an Exception."""


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("raised", [SystemExit("config file missing"),
                                    KeyboardInterrupt("stopped by the job"),
                                    Abort("bad row 17")], ids=["SystemExit", "Interrupt", "own"])
def test_a_worker_leaving_by_a_base_exception_is_told_with_its_message(workers, raised):
    def job(worker):
        worker.dataflow(lambda scope: scope.to_stream(range(3)).exchange(lambda x: x).probe())
        worker.step()
        if worker.index == worker.peers - 1:
            raise raised
        worker.run()
    with pytest.raises(st.WorkerError) as info:
        st.execute(job, workers=workers)
    assert str(info.value) == f"worker {workers - 1} failed: {type(raised).__name__}: {raised}"
    assert "raise raised" in info.value.traceback, info.value.traceback


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("no text")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_exception_whose_str_fails_is_told_under_its_own_type(workers):
    def fail(x):
        raise BadStr()
    with pytest.raises(st.WorkerError) as info:
        st.execute(lambda worker: worker.dataflow(
            lambda scope: scope.to_stream([1]).map(fail).probe()), workers=workers)
    assert str(info.value).endswith("raised BadStr on the record 1: <exception str() failed>"), \
        str(info.value)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_operator_error_the_function_catches_still_fails_the_run(tmp_path, workers):
    """A dataflow whose operator raised cannot go on: catching the error in the worker
    function and returning fails the run all the same, at every worker count (at two it
    used to step forever beside a peer waiting for this worker)."""
    result = run_script(tmp_path, "swallow.py", """\
        import sys
        import sparktimely as st

        def job(worker):
            def bad(x):
                raise ValueError("bad record")
            worker.dataflow(lambda s: s.to_stream([1]).exchange(lambda x: x).map(bad).probe())
            try:
                worker.run()
            except st.OperatorError:
                return "caught"

        st.execute(job, workers=int(sys.argv[1]))
        """, str(workers))
    assert result.returncode == 1
    assert "OperatorError: operator 'Map'" in result.stderr
    assert "ValueError: bad record" in result.stderr


def test_results_of_a_class_of_the_program_are_of_that_very_class(tmp_path):
    result = run_script(tmp_path, "classes.py", """\
        import sparktimely as st

        class Key:
            def __init__(self, k):
                self.k = k

        results = st.execute(lambda worker: (Key(worker.index), lambda: 1), workers=2)
        print([type(key) is Key for key, _ in results], [f() for _, f in results])
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[True, True] [1, 1]"


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_memory_error_that_leaves_no_memory_is_still_named(tmp_path, workers):
    """An operator fills its worker's address space (an RLIMIT_AS set in that worker) and
    keeps what it filled: telling the MemoryError needs memory too, which the worker set
    aside for it, so the program's error names the worker, the operator and MemoryError.
    (A fresh interpreter: a worker forked from pytest inherits free memory it could use.)"""
    ran = run_script(tmp_path, "fill.py", """\
        import os, resource, sys, sparktimely as st
        def job(worker):
            kept = []
            def fill(x):
                if x == worker.peers - 1:
                    with open("/proc/self/statm") as statm:
                        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
                    resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20),) * 2)
                    chunk = 1 << 20
                    while True:
                        try:
                            kept.append(bytearray(chunk))
                        except MemoryError:
                            if chunk <= 16:
                                raise
                            chunk //= 4
                return x
            worker.dataflow(lambda scope: scope.to_stream(range(worker.peers))
                            .exchange(lambda x: x).map(fill).probe())
        st.execute_from_args(sys.argv[1:], job)
        """, "-w", str(workers))
    assert ran.returncode == 1, ran.stderr
    assert re.search(rf"^fill.py: worker {workers - 1} failed: OperatorError: operator "
                     rf"'Map' .*raised MemoryError", ran.stderr), ran.stderr
    assert "died (exit code" not in ran.stderr, ran.stderr


def test_a_worker_that_loses_a_peer_tells_what_it_lost_where_and_that_it_noticed():
    """Worker 1 fails and drops its connections (an unsupervised session, as a Spark task
    runs one): worker 0 tells the loss in the wording every lost peer has (``lost WHAT at
    WHERE, noticed by WHO: HOW``), as a PeerLostError, not as ``worker 0 failed: PeerLost:``
    with the transport's frames for a traceback."""
    import threading
    from sparktimely.errors import PeerLostError
    from sparktimely.session import Seat, WorkerSession
    seats = [Seat("127.0.0.1", label=f"test {index}", force_sockets=True) for index in (0, 1)]
    plan = [seat.address() for seat in seats]
    errors: dict[int, st.WorkerError] = {}

    def work(index: int) -> None:
        try:
            with WorkerSession(index, plan, seats[index].release_listener(),
                               timeout=20) as worker:
                handle = st.InputHandle()
                probe = worker.dataflow(lambda scope: scope.input_from(handle)
                                        .exchange(lambda x: x).probe())
                for epoch in range(1, 100):
                    handle.send_batch(range(10))
                    handle.advance_to(epoch)
                    worker.step_while(lambda: probe.less_than(epoch))
                    if index == 1:
                        raise ValueError("boom")
        except st.WorkerError as error:
            errors[index] = error
    threads = [threading.Thread(target=work, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    assert str(errors[1]) == "worker 1 failed: ValueError: boom"
    lost = errors[0]
    assert type(lost) is PeerLostError and lost.index == 1 and lost.traceback == ""
    assert re.fullmatch(rf"lost worker 1 at 127\.0\.0\.1:{plan[1].port} \(test 1\), noticed by "
                        rf"worker 0: .+", str(lost)), str(lost)
