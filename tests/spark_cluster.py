"""Spark as users deploy it, started and stopped by the tests: a standalone cluster (a master
and workers started with ``spark-class`` from pyspark's own distribution) and a Spark Connect
server (``start-connect-server.sh --wait``), on the loopback address, plus the Pythons the
executors and a Connect client run.

Everything a fixture starts runs in a process group of its own and is killed with it (also
when a test fails), so no JVM or Python process outlives the module that made it. The
Pythons are virtual environments made once and kept next to the test environment
(``<sys.prefix>/sparktimely-test-pythons``): ``nodes`` has only numpy, pyarrow, psutil,
multiprocess and pandas (no sparktimely, no xxhash, no pyspark: Spark brings its own), as an
executor of a real cluster might; ``connect`` is a Spark Connect client (grpc, pandas, and
this environment's pyspark and packages through a path file).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from sparktimely.testing import free_ports

LOOPBACK = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
PYTHONS = Path(sys.prefix) / "sparktimely-test-pythons"
SITE = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))


def _pinned(*names: str) -> list[str]:
    """``name==version`` of this environment's copy (so pip reuses what it has cached)."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


def _requirements(kind: str) -> list[str]:
    if kind == "nodes":
        return _pinned("numpy", "pyarrow", "psutil", "multiprocess") + ["pandas>=2.2,<3"]
    return _pinned("numpy") + ["pandas>=2.2,<3", "grpcio>=1.67", "grpcio-status>=1.67",
                               "googleapis-common-protos>=1.65", "zstandard>=0.25"]


def python_for(kind: str) -> str:
    """The ``bin/python`` of the ``nodes`` or ``connect`` environment, made on first use
    (pip install from the package index; a minute or two) and kept while its requirements
    stay the same."""
    wanted = "\n".join(_requirements(kind)) + "\n"
    home = PYTHONS / kind
    if (home / "requirements.txt").is_file() and (home / "requirements.txt").read_text() == wanted:
        return str(home / "bin" / "python")
    PYTHONS.mkdir(exist_ok=True)
    partial = PYTHONS / f"{kind}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(partial)], check=True, timeout=300)
    done = subprocess.run([str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           *_requirements(kind)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        pytest.fail(f"could not make the {kind} Python: {done.stderr[-2000:]}")
    if kind == "connect":                        # pyspark and the rest from this environment
        site = next((partial / "lib").glob("python3*")) / "site-packages"
        (site / "driver-environment.pth").write_text(SITE + "\n")
    (partial / "requirements.txt").write_text(wanted)
    shutil.rmtree(home, ignore_errors=True)
    os.rename(partial, home)                     # a venv's bin/python works from any folder
    return str(home / "bin" / "python")


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without what would choose Python for Spark behind a
    test's back (``PYSPARK_PYTHON``, which scripts/test exports, ``PYTHONPATH``), Spark on
    the loopback address, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_HOME")}
    env.update(SPARK_LOCAL_IP=LOOPBACK, SPARK_LOCAL_HOSTNAME="localhost", **extra)
    return env


class Daemons:
    """Processes started in process groups of their own, each logging to a file; all killed,
    with everything they started, by :meth:`stop`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> Path:
        log = self.directory / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, cwd=self.directory,
                                       start_new_session=True)
        self.processes.append((name, process))
        return log

    def wait_for(self, log: Path, pattern: str, seconds: float, count: int = 1) -> list[str]:
        """The matches of ``pattern`` in ``log`` once there are ``count``; fails the test
        (showing the log) after ``seconds`` or when the log's process has died."""
        deadline = time.monotonic() + seconds
        while True:
            found = re.findall(pattern, log.read_text(errors="replace"))
            if len(found) >= count:
                return found
            dead = [name for name, p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"waiting for {pattern!r} in {log.name} "
                            f"({'died: ' + ', '.join(dead) if dead else 'timed out'}):\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        for _, process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _, process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)   # and whatever the group still holds
            process.wait(10)
        self.processes.clear()


def _java_or_skip() -> None:
    from sparktimely.barrier.submit import JavaMissing, require_java
    try:
        require_java()
    except JavaMissing as error:
        pytest.skip(str(error))


@contextlib.contextmanager
def standalone_cluster(directory: Path, workers: int = 2, cores: int = 1) -> Iterator[str]:
    """A standalone master and ``workers`` workers of ``cores`` cores each; yields the
    master's URL. Each worker's log is ``worker-N.log`` in ``directory``."""
    _java_or_skip()
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = environment(SPARK_DAEMON_MEMORY="512m")
    daemons = Daemons(directory)
    try:
        log = daemons.start("master", [spark_class, "org.apache.spark.deploy.master.Master",
                                       "--host", LOOPBACK, "--port", "0",
                                       "--webui-port", "0"], env)
        [port] = daemons.wait_for(log, r"Starting Spark master at spark://[^:\s]+:(\d+)", 120)
        master = f"spark://{LOOPBACK}:{port}"
        for index in range(workers):
            work = directory / f"work-{index}"
            work.mkdir()
            daemons.start(f"worker-{index}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                "--cores", str(cores), "--memory", "1g", "--webui-port", "0",
                "--work-dir", str(work), master], env)
        daemons.wait_for(log, r"Registering worker", 120, count=workers)
        yield master
    finally:
        daemons.stop()


@contextlib.contextmanager
def connect_server(directory: Path, master: str, executors_python: str) -> Iterator[str]:
    """A Spark Connect server (pyspark's ``start-connect-server.sh``, in the foreground) on
    ``master`` whose executors run ``executors_python`` (the server's own
    ``PYSPARK_PYTHON``, as Spark Connect takes it); yields its ``sc://`` address."""
    _java_or_skip()
    port = free_ports(1, LOOPBACK)[0]
    env = environment(PYSPARK_PYTHON=executors_python, SPARK_PID_DIR=str(directory),
                      SPARK_LOG_DIR=str(directory), SPARK_DAEMON_MEMORY="512m")
    daemons = Daemons(directory)
    try:
        log = daemons.start("connect", [
            str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait",
            "--master", master, "--driver-memory", "1g",
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.connect.grpc.binding.address={LOOPBACK}",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", f"spark.driver.host={LOOPBACK}",
            "--conf", "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures=1"], env)
        daemons.wait_for(log, r"Spark Connect server started", 180)
        yield f"sc://{LOOPBACK}:{port}"
    finally:
        daemons.stop()


def drive(script: str, directory: Path, python: str = sys.executable, timeout: float = 300,
          args: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
    """Run ``script`` (Python source) as a driver program in ``directory`` with ``python``,
    the environment of :func:`environment` plus ``env``, in a process group of its own
    (killed with its JVM on a timeout, which fails the test)."""
    path = directory / "driver.py"
    path.write_text(script)
    return run_command([python, str(path), *args], directory, timeout, **env)


def run_command(command: list[str], directory: Path, timeout: float = 300,
                **env: str) -> subprocess.CompletedProcess:
    """``command`` as :func:`drive` runs a driver."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=directory, env=environment(**env),
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{command[-1]} did not finish in {timeout} s:\n{err[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)     # whatever it left behind
    return subprocess.CompletedProcess(command, process.returncode, out, err)
