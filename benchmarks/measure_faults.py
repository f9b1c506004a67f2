"""Faults injected into real jobs: how long each takes to stop, what it says,
and what it leaves behind. Prints the Markdown table of docs/faults.md.

    python -m benchmarks.measure_faults [--spark]

Each fault runs a small job (2 workers unless said otherwise); "stop" is the time from the
fault (the signal sent, the job started, the stall begun) until the caller has the error or
the process has exited. "Left" counts the job's processes still alive and this run's
shared-memory segments (``$SPARKTIMELY_SHM_TAG``) still present 5 s after the stop at most.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Callable

os.environ["SPARKTIMELY_SHM_TAG"] = f"f{secrets.token_hex(4)}"   # before sparktimely starts

import psutil  # noqa: E402

import sparktimely as st  # noqa: E402
from sparktimely.shm import run_prefix, segments  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUCK = """
import sys, time, sparktimely as st
def job(worker):
    worker.dataflow(lambda scope: scope.to_stream(range(100)).exchange(lambda x: x).probe())
    worker.run()
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    time.sleep(600)
"""


def leftovers(pids: set[int]) -> tuple[int, int]:
    """(processes of ``pids`` still alive, this run's segments) after up to 5 s."""
    deadline = time.monotonic() + 5
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and
                 psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        left = segments(run_prefix())
        if (not alive and not left) or time.monotonic() > deadline:
            return len(alive), len(left)
        time.sleep(0.05)


def first_line(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 150 else line[:147] + "..."


def ours(process: psutil.Process) -> bool:
    """Whether a process below this one is sparktimely's: anything but a Spark JVM and the
    pyspark daemon's pool of Python workers (those belong to Spark and stay)."""
    try:
        chain = [process, *process.parents()]
        pyspark = ["pyspark.daemon" in " ".join(p.cmdline()) for p in chain[:3]]
    except psutil.Error:
        return False
    java = process.name().startswith("java")
    return not java and not (pyspark[0] and (not pyspark[1] or not pyspark[2]))


def in_process(call: Callable[[], object]) -> tuple[float, str, int, int]:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    try:
        call()
        outcome = "(no error)"
    except BaseException as error:                      # noqa: BLE001 - reported
        outcome = first_line(error)
    seconds = time.monotonic() - started
    after = {p.pid for p in psutil.Process().children(recursive=True) if ours(p)} - before
    return (seconds, outcome, *leftovers(after))


def signalled(sig: int, body: str, workers: int = 2) -> tuple[float, str, int, int]:
    process = subprocess.Popen([sys.executable, "-c", STUCK + textwrap.dedent(body)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT)
    assert process.stdout is not None                  # stdout=PIPE
    for _ in range(workers):
        process.stdout.readline()
    family = {p.pid for p in psutil.Process(process.pid).children(recursive=True)}
    started = time.monotonic()
    process.send_signal(sig)
    process.wait(60)
    seconds = time.monotonic() - started
    said = process.stdout.read().strip() or f"exit status {process.returncode}"
    return (seconds, first_line(said), *leftovers(family | {process.pid}))


class Service:
    """A TCP service on a free port answering every connection with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.kept: list[socket.socket] = []

        def serve():
            while True:
                try:
                    sock, _ = self.listener.accept()
                except OSError:
                    return
                self.kept.append(sock)
                if answer:
                    sock.sendall(answer)
        threading.Thread(target=serve, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for sock in self.kept:
            sock.close()


def free_address() -> str:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return f"127.0.0.1:{sock.getsockname()[1]}"


def at_service(answer: bytes) -> tuple[float, str, int, int]:
    service = Service(answer)
    try:
        return in_process(lambda: st.execute(lambda w: None, workers=2, processes=2, process=1,
                                             hostfile=[service.address, free_address()]))
    finally:
        service.close()


def another_job() -> tuple[float, str, int, int]:
    """Process 1 of one job meets process 0 of another (their hostfiles differ)."""
    shared, mine, theirs = free_address(), free_address(), free_address()
    other = subprocess.Popen([sys.executable, "-c", STUCK + "st.execute(job, workers=2, "
                              f"processes=2, process=0, hostfile=[{shared!r}, {theirs!r}])"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)                                   # it listens at ``shared``
        return in_process(lambda: st.execute(lambda w: None, workers=2, processes=2, process=1,
                                             hostfile=[shared, mine], ))
    finally:
        other.kill()
        other.wait()


def stalled(stuck: str) -> tuple[float, str, int, int]:
    def job(worker):
        def maybe(x):
            if worker.index == 1 and x == 3:
                if stuck == "loop":
                    while True:
                        x += 1
                pair = socket.socketpair()
                pair[0].recv(1)                           # nobody writes to pair[1]
            return x
        worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x)
                        .map(maybe).probe())
        worker.run()
    return in_process(lambda: st.execute(job, workers=2, stall_limit=1.0))


def raising(worker):
    worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
    if worker.index == 1:
        raise ValueError("boom")
    worker.run()


def forgotten_thread() -> tuple[float, str, int, int]:
    import warnings

    def job(worker):
        threading.Thread(target=time.sleep, args=(30,), name=f"forgotten-{worker.index}").start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seconds, _, processes, left = in_process(lambda: st.execute(job, workers=2))
    return seconds, first_line(str(caught[0].message)) if caught else "(no warning)", \
        processes, left


def schema_mismatch() -> tuple[float, str, int, int]:
    import pyarrow as pa

    def job(worker):
        n = pa.array(["x"] * 4) if worker.index == 1 else pa.array(range(4))
        batch = pa.record_batch({"key": pa.array(range(4)), "n": n})
        worker.dataflow(lambda scope: scope.to_stream([batch]).exchange(key="key").probe())
        worker.run()
    return in_process(lambda: st.execute(job, workers=2))


def full_shm(tmp: str) -> tuple[float, str, int, int] | None:
    if shutil.which("unshare") is None:
        return None
    script = os.path.join(tmp, "full.py")
    with open(script, "w") as file:
        file.write("import time, sparktimely as st\nstarted = time.monotonic()\n"
                   "try:\n    st.execute(lambda w: None, workers=3)\n"
                   "except Exception as e:\n"
                   "    print(f'{time.monotonic() - started:.3f}', type(e).__name__, e)\n")
    where = os.path.join(tmp, "shm")
    os.mkdir(where)
    flags = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    done = subprocess.run(["unshare", *flags, "sh", "-c",
                           f"mount -t tmpfs -o size=20m tmpfs {where} || exit 77; "
                           f"SPARKTIMELY_SHM_DIR={where} {sys.executable} {script}; "
                           f"echo $(ls {where} | wc -l)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    if done.returncode == 77 or not done.stdout.strip():
        return None
    lines = done.stdout.strip().splitlines()
    seconds, _, text = lines[0].partition(" ")
    return float(seconds), first_line(text), 0, int(lines[-1])


def spark_faults() -> list[tuple[str, tuple[float, str, int, int]]]:
    from pyspark.sql import SparkSession

    import sparktimely.barrier as stb
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("OFF")

    def killed(worker):
        worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
        if worker.index == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)

    def stuck(worker):
        worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
        while worker.index == 1:
            pass
        worker.run()

    def bad_build(scope, stream):
        raise ValueError("bad build")
    def named(call):
        """Spark's error of a lazy form, as the worker failure its message carries."""
        try:
            call()
        except Exception as error:
            failure = stb.parse_failure(str(error))
            if failure is None:
                raise
            cancelled = "SPARK_JOB_CANCELLED" in str(error)
            raise RuntimeError(f"{type(error).__name__}{' (job cancelled)' if cancelled else ''}"
                               f" carrying: {failure}") from error

    def settled(call):
        """Measure ``call`` once Spark has two free slots again (the previous fault's
        surviving task is killed by Spark, which takes it a few seconds) and warm stages."""
        stb.run(spark, lambda worker: None, 2)
        stb.map_in_arrow(spark.range(0, 100, 1, 2), lambda scope, s: s, "id long",
                         num_workers=2).count()
        return in_process(call)
    rows = [("Spark run(): worker 1 raises (for comparison)",
             settled(lambda: stb.run(spark, raising, 2))),
            ("Spark run(): worker 1 killed by SIGKILL",
             settled(lambda: stb.run(spark, killed, 2))),
            ("Spark run(): worker 1 in an endless loop, stall_limit=1",
             settled(lambda: stb.run(spark, stuck, 2, stall_limit=1))),
            ("Spark run(): 3 workers on 2 task slots (was a 60 s wait)",
             settled(lambda: stb.run(spark, raising, 3))),
            ("Spark map_in_arrow(...).count(): error in build (was 11 s: 4 attempts)",
             settled(lambda: named(lambda: stb.map_in_arrow(
                 spark.range(0, 100, 1, 2), bad_build, "id long", num_workers=2).count())))]
    spark.stop()
    return rows


def main(with_spark: bool) -> list[tuple[str, tuple[float, str, int, int]]]:
    interrupted = "try:\n    st.execute(job, workers=2)\nexcept KeyboardInterrupt:\n" \
                  "    print('KeyboardInterrupt raised in the caller')\n"
    rows = [
        ("SIGTERM to the process that called execute", signalled(signal.SIGTERM,
                                                                  "st.execute(job, workers=2)")),
        ("SIGINT (Ctrl-C) to it", signalled(signal.SIGINT, interrupted)),
        ("SIGKILL to it (its janitor cleans up)", signalled(signal.SIGKILL,
                                                            "st.execute(job, workers=2)")),
        ("hostfile address held by a service with a banner",
         at_service(b"SSH-2.0-OpenSSH_9.6p1\r\n")),
        ("hostfile address held by a silent service", at_service(b"")),
        ("hostfile address held by a service sending 0xff bytes (was a MemoryError)",
         at_service(b"\xff" * 4096)),
        ("hostfile address held by a process of another job", another_job()),
        ("hostfile naming one address twice",
         in_process(lambda: st.execute(lambda w: None, processes=2, process=0,
                                       hostfile=["localhost:7000", "localhost:7000"]))),
        ("non-daemon thread left running in each worker", forgotten_thread()),
        ("a worker raises (for comparison)", in_process(lambda: st.execute(raising, workers=2))),
        ("worker in an endless loop, stall_limit=1", stalled("loop")),
        ("worker blocked on I/O, stall_limit=1", stalled("io")),
        ("Arrow batches of two schemas in one exchange", schema_mismatch()),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        full = full_shm(tmp)
    if full is not None:
        rows.append(("shared-memory directory full (20 MiB tmpfs, 3 workers)", full))
    if with_spark:
        rows += spark_faults()
    return rows


if __name__ == "__main__":
    table = main("--spark" in sys.argv)
    print("| fault | stop (s) | what the caller gets | processes left | segments left |")
    print("|---|---:|---|---:|---:|")
    for fault, (seconds, said, processes, left) in table:
        said = said.replace("|", "\\|")
        print(f"| {fault} | {seconds:.2f} | {said} | {processes} | {left} |")
