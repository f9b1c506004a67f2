"""A live progress display for long jobs: epochs completed per probe, records/s, and each
worker's CPU and memory.

Two halves, because workers are processes (and, on Spark, on other hosts):

- in each worker, a :class:`StatusReporter` (:func:`report_status`) reads the worker's
  ``"timely"`` log and its probes and, every ``interval`` seconds, writes the worker's status
  as ``status-{index}.json`` in a directory (atomically) or as a plain line to a stream;
- in the process that started them, a :class:`ProgressDisplay` reads those files and redraws
  a few lines in place on a terminal, or prints a plain line every ``plain_every`` seconds
  when its stream is not a terminal (a log file, CI).

The display is off unless asked for: ``st.execute(..., progress=True)`` and the
``sparktimely-submit`` entry point turn it on. Logging costs a little (see
``benchmarks/bench_logging.py``), so library use stays free of it.

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
    seconds, publishes :meth:`status` to ``directory`` or as a line on ``stream``.

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
                 stream: IO[str] | None = None, interval: float = 1.0) -> None:
        self._worker = worker
        self._directory = None if directory is None else os.fspath(directory)
        self._stream = stream
        self._interval = interval
        self._next = 0.0
        self._process = psutil.Process()
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
        operator: dataflow name, operator index, frontier as text) and ``done``."""
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
                "rss": self._process.memory_info().rss, "probes": probes, "done": done}

    def publish(self, done: bool = False) -> None:
        """Write the status now (to the directory, or as a line on the stream)."""
        status = self.status(done)
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
        """The log is removed: publish a last status, marked done."""
        self.publish(done=True)


def report_status(worker: "Worker", directory: str | os.PathLike | None = None,
                  stream: IO[str] | None = None, interval: float = 1.0) -> StatusReporter:
    """Have ``worker`` publish its status for a :class:`ProgressDisplay` (to ``directory``)
    or as plain lines (to ``stream``), every ``interval`` seconds while it works.

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
    reporter = StatusReporter(worker, directory, stream, interval)
    worker.log_register().add("timely", reporter)
    return reporter


def _megabytes(rss: float) -> str:
    return f"{rss / 2**20:5.0f} MB"


def _rates(statuses: list[dict], before: dict[int, dict]) -> tuple[float | None, dict]:
    """Records/s over all workers and CPU share per worker, against earlier statuses."""
    records, seconds, cpu = 0.0, 0.0, {}
    for status in statuses:
        old = before.get(status["worker"])
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


class ProgressDisplay:
    """Shows the statuses the workers publish in ``directory``: redrawn in place every
    ``interval`` seconds on a terminal, or as a plain line every ``plain_every`` seconds
    otherwise. Use it as a context manager around the run; on exit it shows the final
    state once more.

    >>> import io, tempfile, sparktimely as st
    >>> directory, out = tempfile.mkdtemp(), io.StringIO()
    >>> def job(worker):
    ...     report_status(worker, directory, interval=0)
    ...     worker.dataflow(lambda scope: scope.to_stream(range(100)).probe())
    ...     worker.run()
    ...     worker.log_register().close()
    >>> with ProgressDisplay(directory, out):
    ...     _ = st.execute(job, workers=2)
    >>> print(out.getvalue().splitlines()[-1].replace("; ", "\\n"))  # doctest: +ELLIPSIS
    sparktimely: ... s, 2 workers, done
    probe dataflow-0/1: done
    worker 0: cpu ... 100 records done
    worker 1: cpu ... 100 records done
    """

    def __init__(self, directory: str | os.PathLike, stream: IO[str] | None = None,
                 interval: float = 0.5, plain_every: float = 10.0) -> None:
        self._directory = os.fspath(directory)
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = interval if self._terminal else plain_every
        self._started = _time.monotonic()
        self._drawn = 0
        self._previous: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> list[dict]:
        """The statuses published so far (unreadable or half-written files are skipped)."""
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

    def show(self) -> None:
        """Draw the current state once."""
        statuses = self.read()
        elapsed = _time.monotonic() - self._started
        if self._terminal:
            lines = render_lines(statuses, self._previous, elapsed)
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self._stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._drawn = len(lines)
        else:
            self._stream.write(plain_line(statuses, self._previous, elapsed) + "\n")
        self._stream.flush()
        self._previous = {status["worker"]: status for status in statuses}

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.show()

    def __enter__(self) -> "ProgressDisplay":
        os.makedirs(self._directory, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="sparktimely-progress",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.show()


__all__ = ["ProgressDisplay", "StatusReporter", "plain_line", "render_lines", "report_status"]
