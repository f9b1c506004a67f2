"""A live progress display for long jobs: epochs completed per probe, records/s, and each
worker's CPU and memory.

Two halves, because workers are processes (and, on Spark, on other hosts):

- in each worker, a :class:`~.reporter.StatusReporter` (:mod:`.reporter`) publishes the
  worker's status;
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
from typing import IO, Any


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
    ['sparktimely  1.5 s  no status from the workers yet']
    """
    head = "sparktimely" + (f"  {elapsed:.1f} s" if elapsed is not None else "")
    if not statuses:
        return [head + "  no status from the workers yet"]     # (sent between steps)
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
    'sparktimely: 2.0 s, no status from the workers yet'
    """
    lines = render_lines(statuses, before, elapsed)
    head = lines[0].removeprefix("sparktimely").strip().replace("  ", ", ")
    return "sparktimely: " + "; ".join([head] + [" ".join(line.split()) for line in lines[1:]])


class StatusListener:
    """Where workers, on this host or others, send their statuses: a TCP listener on
    ``host`` (any free port; all interfaces if ``host`` cannot be bound) at ``address``,
    keeping the latest status of each worker (one JSON object per line, as
    :func:`~.reporter.report_status` with ``address`` sends them). :meth:`poll` reads what has
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
        """The latest status of every worker heard from, by worker index.

        >>> listener = StatusListener()
        >>> listener.statuses()
        []
        >>> with socket.create_connection(listener.address) as connection:
        ...     connection.sendall(b'{"worker": 1, "records": 5}\\n{"worker": 0}\\n'
        ...                        b'{"worker": 1, "records": 9}\\n')
        >>> listener.drain(5.0)
        >>> listener.statuses()
        [{'worker': 0}, {'worker': 1, 'records': 9}]
        >>> listener.close()
        """
        return [self._statuses[index] for index in sorted(self._statuses)]

    def poll(self, timeout: float | None) -> int:
        """Wait up to ``timeout`` seconds for connections, statuses or :meth:`wake`; take
        in what arrived. Returns how many sockets were ready.

        >>> listener = StatusListener()
        >>> listener.poll(0)
        0
        >>> connection = socket.create_connection(listener.address)
        >>> listener.poll(5.0)                    # the connection is accepted
        1
        >>> connection.sendall(b'{"worker": 0}\\n')
        >>> listener.poll(5.0), listener.statuses()
        (1, [{'worker': 0}])
        >>> connection.close(); listener.close()
        """
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
        still connected to hang up (they do after their last status).

        >>> listener = StatusListener()
        >>> connection = socket.create_connection(listener.address)
        >>> connection.sendall(b'{"worker": 2, "done": true}\\n')
        >>> threading.Timer(0.1, connection.close).start()      # hangs up a little later
        >>> listener.drain(5.0)
        >>> listener.statuses()
        [{'worker': 2, 'done': True}]
        >>> listener.close()
        """
        while self.poll(0):
            pass
        deadline = _time.monotonic() + seconds
        while self._buffers and (left := deadline - _time.monotonic()) > 0:
            self.poll(left)

    def wake(self) -> None:
        """Make a :meth:`poll` under way return (from another thread).

        >>> listener = StatusListener()
        >>> threading.Timer(0.1, listener.wake).start()
        >>> listener.poll(10.0)                   # returns when woken, long before 10 s
        1
        >>> listener.statuses()
        []
        >>> listener.close()
        """
        try:
            self._wake_out.send(b"!")
        except OSError:
            pass

    def close(self) -> None:
        """Hang up on every worker still connected and stop listening.

        >>> listener = StatusListener()
        >>> connection = socket.create_connection(listener.address, timeout=5.0)
        >>> listener.poll(5.0)
        1
        >>> listener.close()
        >>> connection.recv(1)                    # the listener hung up
        b''
        >>> connection.close()
        """
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
    block runs: have each worker ``report_status(worker, address=display.address)``
    (:mod:`.reporter`). With a
    ``directory``, it reads the ``status-N.json`` files workers write there instead.

    >>> import io, sparktimely as st
    >>> from sparktimely.logging import report_status
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
        self._latest: dict[int, dict] = {}         # each worker's newest status
        self._before: dict[int, dict] = {}         # and the one before it, for rates
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Where workers send their statuses (``(host, port)``; inside the ``with`` block
        of a display without a directory).

        >>> import io
        >>> with ProgressDisplay(stream=io.StringIO()) as display:
        ...     host, port = display.address
        >>> host, port > 0
        ('localhost', True)
        >>> try:
        ...     display.address
        ... except RuntimeError as error:
        ...     print(error)
        a ProgressDisplay has an address only inside its with block, and only without a directory
        """
        if self._listener is None:
            raise RuntimeError("a ProgressDisplay has an address only inside its with block, "
                               "and only without a directory")
        return self._listener.address

    def read(self) -> list[dict]:
        """The statuses published so far (unreadable or half-written files are skipped).

        >>> import tempfile
        >>> directory = tempfile.mkdtemp()
        >>> with open(os.path.join(directory, "status-0.json"), "w") as file:
        ...     _ = file.write('{"worker": 0, "records": 7}')
        >>> with open(os.path.join(directory, "status-1.json"), "w") as file:
        ...     _ = file.write('{"worker": 1, "rec')              # half-written
        >>> ProgressDisplay(directory).read()
        [{'worker': 0, 'records': 7}]
        """
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
        """Draw the current state once: rates over each worker's last two statuses (so a
        drawing between two statuses shows the rates it showed before, never a gap), or
        with ``whole_run`` since each worker began reporting.

        >>> import io, json, tempfile
        >>> directory, out = tempfile.mkdtemp(), io.StringIO()
        >>> with open(os.path.join(directory, "status-0.json"), "w") as file:
        ...     json.dump({"worker": 0, "wall": 1.0, "records": 7, "cpu": 0.5,
        ...                "rss": 3 << 20, "probes": [], "done": True}, file)
        >>> ProgressDisplay(directory, stream=out).show()
        >>> out.getvalue()                                       # doctest: +ELLIPSIS
        'sparktimely: ... s, 1 worker, done; worker 0: cpu - rss 3 MB 7 records done\\n'
        """
        statuses = self.read()
        elapsed = _time.monotonic() - self._started
        for status in statuses:
            latest = self._latest.get(status["worker"])
            if latest is not None and latest.get("wall") != status.get("wall"):
                self._before[status["worker"]] = latest
            self._latest[status["worker"]] = status
        before = {} if whole_run else self._before
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


__all__ = ["ProgressDisplay", "StatusListener", "plain_line", "render_lines"]
