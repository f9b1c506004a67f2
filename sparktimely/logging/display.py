"""A live progress display for long jobs: epochs completed per probe, records/s, and each
worker's CPU and memory.

Two halves, because workers are processes (and, on Spark, on other hosts):

- in each worker, a :class:`StatusReporter` (:func:`report_status`) reads the worker's
  ``"timely"`` log and its probes and, every ``interval`` seconds, sends the worker's status
  to a display's address (one JSON line over TCP), writes it as ``status-{index}.json`` in a
  directory (atomically) or as a plain line to a stream;
- in the process that started them, a :class:`ProgressDisplay` gathers those statuses (its
  :class:`StatusListener`, or the files of a directory) and redraws a few lines in place on
  a terminal, or prints a plain line every ``plain_every`` seconds when its stream is not a
  terminal (a log file, CI).

The display is off unless asked for: ``st.execute(..., progress=True)`` (``--progress``),
``sparktimely.barrier.run(..., progress=True)`` and the ``sparktimely-submit`` entry point
turn it on. Logging costs a little (see ``benchmarks/bench_logging.py``), so library use
stays free of it.

>>> status = {"worker": 0, "wall": 10.0, "records": 5_000, "cpu": 4.0, "rss": 50 << 20,
...           "probes": [["wordcount", 4, "[17]"]], "done": False}
>>> print("\\n".join(render_lines([status], {0: {**status, "wall": 9.0, "records": 3_000,
...                                                 "cpu": 3.1}}, elapsed=10.0)))
sparktimely  10.0 s  1 worker  2,000 records/s
  probe wordcount/4: frontier [17]
  worker 0: cpu  90%  rss    50 MB  5,000 records
"""
from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import threading
import time as _time
from typing import IO, TYPE_CHECKING, Any

import psutil

from .events import ChannelsEvent, MessagesEvent, OperatesEvent

if TYPE_CHECKING:
    from ..dataflow.worker import Worker


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
        times = self._process.cpu_times()
        self._started = [_time.time(), times.user + times.system]
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
        ``started`` (``wall`` and ``cpu`` when reporting began)."""
        probes = []
        for index in sorted(self._worker._built):
            dataflow = self._worker._built[index]
            for operator in dataflow.operators:
                if operator.name == "Probe" and operator.inputs:
                    frontier = operator.inputs[0].frontier
                    probes.append([dataflow.name, operator.index,
                                   repr(frontier.frontier() if frontier is not None else [])])
        times = self._process.cpu_times()
        return {"worker": self._worker.index, "pid": os.getpid(), "wall": _time.time(),
                "records": self.records, "cpu": times.user + times.system,
                "rss": self._process.memory_info().rss, "probes": probes, "done": done,
                "started": self._started}

    def publish(self, done: bool = False) -> None:
        """Publish the status now (to the display, the directory, the stream)."""
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
        """The log is removed: publish a last status, marked done (and hang up)."""
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
    worker.log_register().add("timely", reporter)
    return reporter


def _megabytes(rss: float) -> str:
    return f"{rss / 2**20:5.0f} MB"


def _rates(statuses: list[dict], before: dict[int, dict]) -> tuple[float | None, dict]:
    """Records/s over all workers and CPU share per worker, against earlier statuses (or,
    for a worker not seen before, or begun again since, as in a retried Spark stage, since
    it began reporting)."""
    records, seconds, cpu = 0.0, 0.0, {}
    for status in statuses:
        old = before.get(status["worker"])
        if old is not None and old.get("started") != status.get("started"):
            old = None                                   # another run of this worker index
        if old is None and status.get("started"):
            wall, used = status["started"]
            old = {"wall": wall, "records": 0, "cpu": used}
        if old is None or status["wall"] <= old["wall"]:
            continue
        elapsed = status["wall"] - old["wall"]
        records += status["records"] - old["records"]
        seconds = max(seconds, elapsed)
        cpu[status["worker"]] = (status["cpu"] - old["cpu"]) / elapsed
    return (records / seconds if seconds else None), cpu


def _probes(statuses: list[dict]) -> list[str]:
    """One line per probe: its frontier as the first worker reports it (every worker's probe
    sees the same frontier, give or take a step)."""
    seen: dict[tuple, str] = {}
    for status in sorted(statuses, key=lambda s: s["worker"]):
        for dataflow, operator, frontier in status["probes"]:
            seen.setdefault((dataflow, operator), frontier)
    return [f"probe {dataflow}/{operator}: "
            + ("done" if frontier == "[]" else f"frontier {frontier}")
            for (dataflow, operator), frontier in seen.items()]


def render_lines(statuses: list[dict], before: dict[int, dict],
                 elapsed: float | None) -> list[str]:
    """The display's lines for the latest ``statuses`` (rates against ``before``).

    >>> render_lines([], {}, 1.5)
    ['sparktimely  1.5 s  waiting for workers']
    """
    head = "sparktimely" + (f"  {elapsed:.1f} s" if elapsed is not None else "")
    if not statuses:
        return [head + "  waiting for workers"]
    rate, cpu = _rates(statuses, before)
    count = len(statuses)
    head += f"  {count} worker{'s' * (count != 1)}"
    if rate is not None:
        head += f"  {rate:,.0f} records/s"
    if all(status["done"] for status in statuses):
        head += "  done"
    lines = [head] + ["  " + line for line in _probes(statuses)]
    for status in sorted(statuses, key=lambda s: s["worker"]):
        share = cpu.get(status["worker"])
        lines.append(f"  worker {status['worker']}: cpu "
                     + (f"{100 * share:3.0f}%" if share is not None else "   -")
                     + f"  rss {_megabytes(status['rss'])}  {status['records']:,} records"
                     + ("  done" if status["done"] else ""))
    return lines


def plain_line(statuses: list[dict], before: dict[int, dict], elapsed: float | None) -> str:
    """The display as one log line (for streams that are not terminals).

    >>> plain_line([], {}, 2.0)
    'sparktimely: 2.0 s, waiting for workers'
    """
    lines = render_lines(statuses, before, elapsed)
    head = lines[0].removeprefix("sparktimely").strip().replace("  ", ", ")
    return "sparktimely: " + "; ".join([head] + [" ".join(line.split()) for line in lines[1:]])


class StatusListener:
    """Where workers, on this host or others, send their statuses: a TCP listener on
    ``host`` (any free port; all interfaces if ``host`` cannot be bound) at ``address``,
    keeping the latest status of each worker (one JSON object per line, as
    :func:`report_status` with ``address`` sends them). :meth:`poll` reads what has
    arrived; a :class:`ProgressDisplay` polls it from its thread.

    >>> listener = StatusListener()
    >>> with socket.create_connection(listener.address) as connection:
    ...     connection.sendall(b'{"worker": 3, "done": true}\\n')
    >>> listener.drain(5.0)
    >>> listener.statuses()
    [{'worker': 3, 'done': True}]
    >>> listener.close()
    """

    MAX_LINE = 1 << 20
    """A connection sending a longer line than this is not a worker's: it is dropped."""

    def __init__(self, host: str = "localhost") -> None:
        try:
            self._server = socket.create_server((host, 0))
        except OSError:
            self._server = socket.create_server(("", 0))
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])
        self._server.setblocking(False)
        self._wake_in, self._wake_out = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        self._buffers: dict[socket.socket, bytearray] = {}
        self._statuses: dict[int, dict] = {}

    def statuses(self) -> list[dict]:
        """The latest status of every worker heard from, by worker index."""
        return [self._statuses[index] for index in sorted(self._statuses)]

    def poll(self, timeout: float | None) -> int:
        """Wait up to ``timeout`` seconds for connections, statuses or :meth:`wake`; take
        in what arrived. Returns how many sockets were ready."""
        ready = self._selector.select(timeout)
        for key, _ in ready:
            sock = key.fileobj
            if sock is self._server:
                self._accept()
            elif sock is self._wake_in:
                self._wake_in.recv(4096)
            else:
                assert isinstance(sock, socket.socket)
                self._read(sock)
        return len(ready)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            connection.setblocking(False)
            self._buffers[connection] = bytearray()
            self._selector.register(connection, selectors.EVENT_READ)

    def _read(self, connection: socket.socket) -> None:
        try:
            data = connection.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(connection)
            return
        buffer = self._buffers[connection]
        buffer += data
        *lines, rest = buffer.split(b"\n")
        if len(rest) > self.MAX_LINE:
            self._drop(connection)
            return
        self._buffers[connection] = bytearray(rest)
        for line in lines:
            try:
                status = json.loads(line)
                self._statuses[int(status["worker"])] = status
            except (ValueError, KeyError, TypeError):
                continue                                  # not a status: ignore the line

    def _drop(self, connection: socket.socket) -> None:
        self._selector.unregister(connection)
        del self._buffers[connection]
        connection.close()

    def drain(self, seconds: float) -> None:
        """Take in everything sent so far, then wait up to ``seconds`` for the workers
        still connected to hang up (they do after their last status)."""
        while self.poll(0):
            pass
        deadline = _time.monotonic() + seconds
        while self._buffers and (left := deadline - _time.monotonic()) > 0:
            self.poll(left)

    def wake(self) -> None:
        """Make a :meth:`poll` under way return (from another thread)."""
        try:
            self._wake_out.send(b"!")
        except OSError:
            pass

    def close(self) -> None:
        for connection in list(self._buffers):
            self._drop(connection)
        self._selector.close()
        for sock in (self._server, self._wake_in, self._wake_out):
            sock.close()


_WRITING = threading.Lock()
"""Held while a display writes. A process forked while another thread is inside a write
would inherit the stream's lock taken, and hang at its first write to it: so forking waits
for the write to end (``os.register_at_fork`` below)."""
os.register_at_fork(before=_WRITING.acquire, after_in_parent=_WRITING.release,
                    after_in_child=_WRITING.release)


class ProgressDisplay:
    """Shows the statuses the workers publish: redrawn in place every ``interval`` seconds
    on a terminal, or as a plain line every ``plain_every`` seconds otherwise (on
    ``stream``, default stderr). Use it as a context manager around the run; on exit it
    shows the final state once more, with rates over the whole run.

    Without ``directory``, it listens on ``host`` (a :class:`StatusListener`) while the
    block runs: have each worker ``report_status(worker, address=display.address)``. With a
    ``directory``, it reads the ``status-N.json`` files workers write there instead.

    >>> import io, sparktimely as st
    >>> out = io.StringIO()
    >>> def reporting_to(address):
    ...     def job(worker):
    ...         report_status(worker, address=address, interval=0)
    ...         worker.dataflow(lambda scope: scope.to_stream(range(100)).probe())
    ...         worker.run()
    ...         worker.log_register().close()         # a last status, marked done
    ...     return job
    >>> with ProgressDisplay(stream=out) as display:
    ...     _ = st.execute(reporting_to(display.address), workers=2)
    >>> print(out.getvalue().splitlines()[-1].replace("; ", "\\n"))  # doctest: +ELLIPSIS
    sparktimely: ... s, 2 workers, ... records/s, done
    probe dataflow-0/1: done
    worker 0: cpu ... 100 records done
    worker 1: cpu ... 100 records done
    """

    DRAIN = 2.0
    """Seconds the display waits, at the end of a run, for workers' last statuses."""

    def __init__(self, directory: str | os.PathLike | None = None,
                 stream: IO[str] | None = None, interval: float = 0.5,
                 plain_every: float = 10.0, host: str = "localhost") -> None:
        self._directory = None if directory is None else os.fspath(directory)
        self._host = host
        self._listener: StatusListener | None = None
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = interval if self._terminal else plain_every
        self._started = _time.monotonic()
        self._drawn = 0
        self._previous: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where workers send their statuses (``(host, port)``; inside the ``with`` block
        of a display without a directory)."""
        if self._listener is None:
            raise RuntimeError("a ProgressDisplay has an address only inside its with block, "
                               "and only without a directory")
        return self._listener.address

    def read(self) -> list[dict]:
        """The statuses published so far (unreadable or half-written files are skipped)."""
        if self._listener is not None:
            return self._listener.statuses()
        if self._directory is None:
            return []
        statuses = []
        try:
            names = os.listdir(self._directory)
        except FileNotFoundError:
            return []
        for name in sorted(names):
            if name.startswith("status-") and name.endswith(".json"):
                try:
                    with open(os.path.join(self._directory, name)) as file:
                        statuses.append(json.load(file))
                except (OSError, ValueError):
                    continue
        return statuses

    def show(self, whole_run: bool = False) -> None:
        """Draw the current state once: rates since the last drawing, or with
        ``whole_run`` since each worker began reporting (the last drawing's)."""
        statuses = self.read()
        elapsed = _time.monotonic() - self._started
        before = {} if whole_run else self._previous
        if self._terminal:
            lines = render_lines(statuses, before, elapsed)
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            text = up + "".join(f"\x1b[2K{line}\n" for line in lines)
            self._drawn = len(lines)
        else:
            text = plain_line(statuses, before, elapsed) + "\n"
        with _WRITING:
            self._stream.write(text)
            self._stream.flush()
        self._previous = {status["worker"]: status for status in statuses}

    def _run(self) -> None:
        listener = self._listener
        while not self._stop.is_set():
            due = _time.monotonic() + self._interval
            while not self._stop.is_set() and (left := due - _time.monotonic()) > 0:
                if listener is not None:
                    listener.poll(left)
                else:
                    self._stop.wait(left)
            if not self._stop.is_set():
                self.show()

    def __enter__(self) -> "ProgressDisplay":
        if self._directory is not None:
            os.makedirs(self._directory, exist_ok=True)
        else:
            self._listener = StatusListener(self._host)
        self._started = _time.monotonic()
        self._thread = threading.Thread(target=self._run, name="sparktimely-progress",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self._stop.set()
        listener = self._listener
        if listener is not None:
            listener.wake()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            if listener is not None:
                listener.drain(self.DRAIN if kind is None else 0.0)
            self.show(whole_run=True)
        finally:
            if listener is not None:
                listener.close()
                self._listener = None


__all__ = ["ProgressDisplay", "StatusListener", "StatusReporter", "plain_line", "render_lines",
           "report_status"]
