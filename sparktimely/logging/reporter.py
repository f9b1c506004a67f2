"""A worker's side of the live progress display (:mod:`.display`): a
:class:`StatusReporter` (:func:`report_status`) reads the worker's ``"timely"`` log and its
probes and, every ``interval`` seconds, sends the worker's status to a display's address (one
JSON line over TCP), writes it as ``status-{index}.json`` in a directory (atomically) or as a
plain line to a stream (see :func:`report_status` for an example).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time as _time
from typing import IO, TYPE_CHECKING, Any

import psutil

from .display import plain_line
from .events import ChannelsEvent, MessagesEvent, OperatesEvent
from .registry import registry_of

if TYPE_CHECKING:
    from ..dataflow.worker import WorkerCore as Worker


class StatusReporter:
    """A worker's side of the display: a ``"timely"`` log callback that counts the records
    entering the dataflows (sent by operators without inputs) and, every ``interval``
    seconds, publishes :meth:`status` to a display's ``address`` (``(host, port)``), to
    ``directory`` and/or as a line on ``stream``.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     reporter = report_status(worker, interval=3600)
    ...     worker.dataflow(lambda scope: scope.to_stream(range(5)).map(str).probe())
    ...     worker.run()
    ...     return reporter.status()["records"], reporter.status()["probes"]
    >>> st.execute_directly(job)
    (5, [['dataflow-0', 2, '[]']])
    """

    def __init__(self, worker: "Worker", directory: str | os.PathLike | None = None,
                 stream: IO[str] | None = None, interval: float = 1.0,
                 address: tuple[str, int] | None = None) -> None:
        self._worker = worker
        self._directory = None if directory is None else os.fspath(directory)
        self._stream = stream
        self._sender = None if address is None else _StatusSender(address)
        self._interval = interval
        self._next = 0.0
        self._process = psutil.Process()
        # process_time() counts in nanoseconds; psutil's cpu_times() in 10 ms ticks, which
        # a status taken a few milliseconds after the start read as hundreds of percent.
        self._started = [_time.time(), _time.process_time()]
        self._targets: set[int] = set()
        self._sources: set[int] = set()
        self._entry: set[int] = set()
        self._channels: dict[int, int] = {}
        self._previous: dict[int, dict] = {}
        self.records = 0

    def __call__(self, time: int, batch: list) -> None:
        entry = self._entry
        for event in batch:
            kind = type(event)
            if kind is MessagesEvent:
                if event.is_send and event.channel in entry:
                    self.records += event.length
            elif kind is OperatesEvent or kind is ChannelsEvent:
                self._learn(event)
        now = _time.monotonic()
        if now >= self._next:
            self._next = now + self._interval
            self.publish()

    def _learn(self, event: Any) -> None:
        if type(event) is OperatesEvent:
            self._sources.add(event.id)
        else:
            self._channels[event.id] = event.source[0]
            self._targets.add(event.target[0])
        sources = self._sources - self._targets
        self._entry.clear()                      # in place: __call__ holds on to the set
        self._entry.update(channel for channel, source in self._channels.items()
                           if source in sources)

    def status(self, done: bool = False) -> dict:
        """This worker's status: ``worker``, ``pid``, ``wall`` (time.time()), ``records``
        (entered so far), ``cpu`` (seconds used), ``rss`` (bytes), ``probes`` (per probe
        operator: dataflow name, operator index, frontier as text), ``done`` and
        ``started`` (``wall`` and ``cpu`` when reporting began).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     status = StatusReporter(worker).status(done=True)
        ...     return sorted(status), status["worker"], status["records"], status["done"]
        >>> st.execute_directly(job)  # doctest: +NORMALIZE_WHITESPACE
        (['cpu', 'done', 'pid', 'probes', 'records', 'rss', 'started', 'wall', 'worker'],
         0, 0, True)
        """
        probes = []
        dataflows = self._worker.dataflows()
        for index in sorted(dataflows):
            dataflow = dataflows[index]
            for operator in dataflow.operators:
                if operator.name == "Probe" and operator.inputs:
                    frontier = operator.inputs[0].frontier
                    probes.append([dataflow.name, operator.index,
                                   repr(frontier.frontier() if frontier is not None else [])])
        return {"worker": self._worker.index, "pid": os.getpid(), "wall": _time.time(),
                "records": self.records, "cpu": _time.process_time(),
                "rss": self._process.memory_info().rss, "probes": probes, "done": done,
                "started": self._started}

    def publish(self, done: bool = False) -> None:
        """Publish the status now (to the display, the directory, the stream).

        >>> import json, tempfile, sparktimely as st
        >>> directory = tempfile.mkdtemp()
        >>> st.execute_directly(lambda worker: StatusReporter(worker, directory).publish())
        >>> os.listdir(directory)
        ['status-0.json']
        >>> with open(os.path.join(directory, "status-0.json")) as file:
        ...     status = json.load(file)
        >>> status["worker"], status["records"], status["done"]
        (0, 0, False)
        """
        status = self.status(done)
        if self._sender is not None:
            self._sender.send(status)
        if self._directory is not None:
            path = os.path.join(self._directory, f"status-{status['worker']}.json")
            with open(path + ".tmp", "w") as file:
                json.dump(status, file)
            os.replace(path + ".tmp", path)
        if self._stream is not None:
            self._stream.write(plain_line([status], self._previous, None) + "\n")
            self._stream.flush()
        self._previous = {status["worker"]: status}

    def close(self) -> None:
        """The log is removed: publish a last status, marked done (and hang up).

        >>> import sparktimely as st
        >>> from sparktimely.logging import StatusListener
        >>> listener = StatusListener()
        >>> st.execute_directly(lambda worker: StatusReporter(worker,
        ...                                                   address=listener.address).close())
        >>> listener.drain(5.0)
        >>> [(status["worker"], status["done"]) for status in listener.statuses()]
        [(0, True)]
        >>> listener.close()
        """
        self.publish(done=True)
        if self._sender is not None:
            self._sender.close()


class _StatusSender:
    """A worker's connection to a display's :class:`StatusListener`, made at the first
    status. The display is a convenience: if it cannot be reached, or stops taking
    statuses, the worker says so once on stderr (where the display would have been) and
    goes on without it."""

    TIMEOUT = 2.0
    """Seconds allowed for connecting and for sending one status."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = (address[0], int(address[1]))
        self._socket: socket.socket | None = None
        self._failed = False

    def send(self, status: dict) -> None:
        if self._failed:
            return
        try:
            if self._socket is None:
                self._socket = socket.create_connection(self._address, self.TIMEOUT)
            self._socket.sendall(json.dumps(status).encode() + b"\n")
        except OSError as error:
            self._failed = True
            self.close()
            host, port = self._address
            print(f"sparktimely: worker {status['worker']} cannot send its status to the "
                  f"progress display at {host}:{port} ({error}); the job goes on without it",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def report_status(worker: "Worker", directory: str | os.PathLike | None = None,
                  stream: IO[str] | None = None, interval: float = 1.0,
                  address: tuple[str, int] | None = None) -> StatusReporter:
    """Have ``worker`` publish its status for a :class:`ProgressDisplay` (to its
    ``address``, or to ``directory``) or as plain lines (to ``stream``), every ``interval``
    seconds while it works, and once more, marked done, when its log is removed.

    >>> import io, sparktimely as st
    >>> out = io.StringIO()
    >>> def job(worker):
    ...     report_status(worker, stream=out, interval=0)
    ...     worker.dataflow(lambda scope: scope.to_stream([1, 2]).probe())
    ...     worker.run()
    ...     worker.log_register().close()            # a last status, marked done
    >>> st.execute_directly(job)
    >>> print(out.getvalue().splitlines()[-1])                   # doctest: +ELLIPSIS
    sparktimely: 1 worker, ... done; probe dataflow-0/1: done; worker 0: cpu ... 2 records done
    """
    reporter = StatusReporter(worker, directory, stream, interval, address)
    registry_of(worker).add("timely", reporter, kept=True)
    return reporter


__all__ = ["StatusReporter", "report_status"]
