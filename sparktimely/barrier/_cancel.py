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
Connect there is no SparkContext to cancel through; Spark's retries then apply.
"""
from __future__ import annotations

import json
import secrets
import socket
import threading
from dataclasses import dataclass

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
