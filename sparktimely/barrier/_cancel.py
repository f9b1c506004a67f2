"""Failing a barrier stage at once when a task fails in user code.

Spark retries a failed barrier ShuffleMapStage (a ``map_in_arrow`` whose output feeds an
aggregation, say) whole, up to ``spark.stage.maxConsecutiveAttempts`` (4) times, whatever
the task's failure was: its DAGScheduler resubmits the stage for every failure reason of a
barrier task, and the only failures its TaskSetManager gives up on at once are JVM
exceptions a Python task cannot raise. The setting is read once, when the SparkContext
starts. An error in user code fails every attempt the same way, so the retries only delay
the error (11 s for four attempts on ``local[2]``).

So the driver side of ``map_in_arrow``/``map_partitions`` starts a :class:`StageCanceller`:
a daemon thread listening on the driver's host. A task whose worker failed in user code
sends it its stage id and the failure text (with a per-driver token), and the thread calls
``SparkContext.cancelStage`` with that text: the job fails at once, and its error message
carries the worker's failure (which :func:`._task.parse_failure` reads back). Failures that
a retry may cure (a lost peer, a connection or disk problem) are not sent. Under Spark
Connect there is no SparkContext to cancel through (and the executors cannot reach the
client): there the failing task leaves its failure text in a :class:`FailureMemo` on its
host, and the tasks of the stage's next attempts that find it fail with it at once, before
running anything of the job, so Spark's retries cost only their scheduling.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field

_MAX_REQUEST = 1 << 20


def driver_host(sc) -> str:
    """The driver's host as the executors reach it (``spark.driver.host``)."""
    return sc.getConf().get("spark.driver.host", "localhost")


@dataclass(frozen=True)
class CancelAddress:
    """Where a task reaches the driver's canceller, and the token it must show."""

    host: str
    port: int
    token: str

    def cancel(self, stage: int, reason: str) -> None:
        """Ask the driver to cancel ``stage`` with ``reason`` (best effort, a second at most)."""
        request = json.dumps({"token": self.token, "stage": stage, "reason": reason})
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                sock.sendall(request.encode()[:_MAX_REQUEST] + b"\n")
                sock.recv(1)                         # the driver has acted on it
        except OSError:
            pass


class StageCanceller:
    """The driver's listener for cancel requests of one SparkContext (see the module doc)."""

    _current: StageCanceller | None = None
    _lock = threading.Lock()

    def __init__(self, sc) -> None:
        self.sc = sc
        host = driver_host(sc)
        try:
            self._listener = socket.create_server((host, 0))
        except OSError:
            self._listener = socket.create_server(("", 0))
        self.address = CancelAddress(host, self._listener.getsockname()[1],
                                     secrets.token_hex(16))
        threading.Thread(target=self._serve, name="sparktimely-stage-canceller",
                         daemon=True).start()

    @classmethod
    def address_for(cls, sc) -> CancelAddress | None:
        """The canceller address for SparkContext ``sc`` (None without one), started once."""
        if sc is None:
            return None
        with cls._lock:
            if cls._current is None or cls._current.sc is not sc:
                if cls._current is not None:
                    cls._current._listener.close()
                cls._current = cls(sc)
            return cls._current.address

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return                                   # closed: a newer context took over
            with sock:
                try:
                    sock.settimeout(5.0)
                    request = json.loads(sock.makefile("rb").readline(_MAX_REQUEST))
                    if request.get("token") == self.address.token:
                        self.sc._jsc.sc().cancelStage(int(request["stage"]),
                                                      str(request["reason"]))
                    sock.sendall(b"!")
                except Exception:
                    pass                                 # not ours, or Spark has gone


MEMO_LIFETIME = 3600.0
"""Seconds a :class:`FailureMemo` entry is kept on an executor's host."""


@dataclass(frozen=True)
class FailureMemo:
    """Failure texts of one lazy form's stages (``token`` is made once on the driver), kept
    in files in the executor host's temporary directory: what a stage's next attempt fails
    with at once when no canceller can stop the retries.

    >>> memo = FailureMemo.new()
    >>> memo.record(7, "sparktimely worker 1 failed: ...")
    >>> memo.recall(7), memo.recall(8)
    ('sparktimely worker 1 failed: ...', None)
    >>> memo.forget(7)
    """

    token: str = field(default_factory=lambda: secrets.token_hex(8))

    @classmethod
    def new(cls) -> FailureMemo:
        return cls()

    @staticmethod
    def _directory() -> str:
        return os.path.join(tempfile.gettempdir(), f"sparktimely-failures-{os.getuid()}")

    def _path(self, stage: int) -> str:
        return os.path.join(self._directory(), f"{self.token}-{stage}")

    def record(self, stage: int, text: str) -> None:
        """Keep ``text`` for ``stage`` (best effort), and drop entries past their lifetime."""
        try:
            os.makedirs(self._directory(), exist_ok=True)
            partial = f"{self._path(stage)}.{os.getpid()}"
            with open(partial, "w") as file:
                file.write(text)
            os.replace(partial, self._path(stage))
            for entry in os.scandir(self._directory()):
                if entry.stat().st_mtime < time.time() - MEMO_LIFETIME:
                    os.unlink(entry.path)
        except OSError:
            pass

    def recall(self, stage: int) -> str | None:
        """The text kept for ``stage`` on this host, or None."""
        try:
            with open(self._path(stage)) as file:
                return file.read()
        except OSError:
            return None

    def forget(self, stage: int) -> None:
        try:
            os.unlink(self._path(stage))
        except OSError:
            pass
