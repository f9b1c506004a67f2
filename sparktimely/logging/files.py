"""Logs in a directory: a file per worker and log, written as the worker steps, read back
by the profile report (``python -m sparktimely.profile LOGDIR``) or replayed as a stream.

:func:`log_to_directory` makes a worker write its ``"timely"`` events (and, if asked, its
``"timely/progress"`` events) to ``worker-{index}.timely`` (``.progress``) in ``directory``,
in the format of ``EventWriter`` (so ``EventReader(path).replay_into(scope)`` replays one as
a stream), flushed at the end of every step, and a ``worker-{index}.json`` saying who wrote
them. A worker that fails hands its last events to the file before the error travels on; a
process killed outright loses at most its last step.

>>> import tempfile, sparktimely as st
>>> from sparktimely.logging import log_to_directory, read_log_directory
>>> directory = tempfile.mkdtemp()
>>> def job(worker):
...     log_to_directory(worker, directory)
...     worker.dataflow(lambda scope: scope.to_stream(range(3)).map(str).probe())
>>> _ = st.execute(job, workers=2)
>>> logs = read_log_directory(directory)
>>> sorted(logs.workers), sorted({e.name for e in logs.operators()})
([0, 1], ['Map', 'Probe', 'ToStream'])
"""
from __future__ import annotations

import glob
import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import describe, empty_path_problem, short_repr
from ..ops.capture import EventReader, EventWriter
from .events import ChannelsEvent, OperatesEvent, ProgressEvent
from .registry import BatchLogger, registry_of

if TYPE_CHECKING:
    from ..dataflow.worker import WorkerCore as Worker

SUFFIXES = {"timely": "timely", "timely/progress": "progress"}


def directory_problem(directory: str | os.PathLike) -> str | None:
    """Why ``directory`` cannot be (made) a directory to write logs in, or None if it can:
    checked before any worker starts, leaving nothing behind. Beside the permissions, an
    empty directory is made and removed where the first missing part would go: root passes
    every permission check, yet cannot write to a read-only file system or under /proc.

    >>> import tempfile
    >>> file = tempfile.mkstemp()[1]
    >>> directory_problem(tempfile.mkdtemp()) is None
    True
    >>> directory_problem(os.path.join(file, "logs")) == f"{file} is not a directory"
    True
    >>> directory_problem("")
    'an empty path names no directory'
    """
    empty = empty_path_problem(directory)
    if empty is not None:
        return empty
    path = os.path.abspath(directory)
    while not os.path.exists(path):
        path = os.path.dirname(path)                  # the root exists: this ends
    if not os.path.isdir(path):
        return f"{path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".sparktimely-probe-", dir=path))
    except OSError as error:
        return f"{path} is not writable ({error.strerror or error})"
    return None


def log_to_directory(worker: "Worker", directory: str | os.PathLike,
                     progress: bool = False) -> None:
    """Have ``worker`` write its ``"timely"`` log (and with ``progress`` its
    ``"timely/progress"`` log) to files in ``directory`` (created if missing); see the
    module doc. Logging stops, and the files are completed, with
    ``worker.log_register().close()`` (the program's own ``insert`` and ``remove`` leave
    them in place); files of a worker that stopped otherwise are read all the same. Each worker replaces its own files, and worker 0
    removes those of workers beyond this run's, so a directory holds one run. (With
    several processes, each writes its workers' files where it runs: gather them in one
    directory for the profile.)

    >>> import os, tempfile, sparktimely as st
    >>> directory = tempfile.mkdtemp()
    >>> st.execute_directly(lambda worker: log_to_directory(worker, directory))
    >>> sorted(os.listdir(directory))
    ['worker-0.json', 'worker-0.timely']
    """
    os.makedirs(directory, exist_ok=True)
    if worker.index == 0:
        for path in glob.glob(os.path.join(directory, "worker-*.*")):
            number = os.path.basename(path).split(".")[0].removeprefix("worker-")
            if number.isdigit() and int(number) >= worker.peers:
                os.remove(path)
    registry = registry_of(worker)
    stem = os.path.join(directory, f"worker-{worker.index}")
    with open(stem + ".json", "w") as meta:
        json.dump({"worker": worker.index, "peers": worker.peers, "pid": os.getpid(),
                   "host": socket.gethostname(), "epoch_ns": registry.epoch_ns}, meta)
    earlier_progress = f"{stem}.{SUFFIXES['timely/progress']}"
    if not progress and os.path.exists(earlier_progress):
        os.remove(earlier_progress)
    for name in ("timely", "timely/progress") if progress else ("timely",):
        registry.add(name, BatchLogger(EventWriter(f"{stem}.{SUFFIXES[name]}")), kept=True)


def of_lowest_worker(events: list) -> list:
    """The events of the lowest-numbered worker among ``events`` (every worker builds the
    same dataflows, so its operators and channels describe them all).

    >>> of_lowest_worker([OperatesEvent(0, 1, 0, (0, 0), "A", "d"),
    ...                   OperatesEvent(0, 2, 0, (0, 0), "A", "d")])
    [OperatesEvent(time=0, worker=1, id=0, addr=(0, 0), name='A', scope='d')]
    """
    if not events:
        return []
    first = min(e.worker for e in events)
    return [e for e in events if e.worker == first]


class DamagedLog(ValueError):
    """A log directory's file that cannot be read as a sparktimely worker's log.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "worker-0.json"), "w") as file:
    ...     _ = file.write("{")
    >>> read_log_directory(folder)
    Traceback (most recent call last):
    sparktimely.logging.files.DamagedLog: .../worker-0.json is not a worker's log description ...
    """


@dataclass
class LogDirectory:
    """The logs read from a directory: ``workers`` (index to what its ``.json`` says:
    ``peers``, ``pid``, ``host``, ``epoch_ns``), ``events`` (every worker's ``"timely"``
    events, by worker then time) and ``progress`` (the ``"timely/progress"`` events).

    >>> LogDirectory().operators()
    []
    """

    workers: dict[int, dict] = field(default_factory=dict)
    events: list = field(default_factory=list)
    progress: list[ProgressEvent] = field(default_factory=list)

    def operators(self) -> list[OperatesEvent]:
        """The operators, as the lowest-numbered worker logged them.

        >>> logs = LogDirectory(events=[OperatesEvent(0, 1, 0, (0, 0), "Map", "d"),
        ...                             OperatesEvent(0, 2, 0, (0, 0), "Map", "d")])
        >>> [(e.worker, e.name) for e in logs.operators()]
        [(1, 'Map')]
        """
        return [e for e in of_lowest_worker(self.events) if type(e) is OperatesEvent]

    def channels(self) -> list[ChannelsEvent]:
        """The channels, as the lowest-numbered worker logged them.

        >>> channel = ChannelsEvent(0, 0, 0, (0,), (0, 0), (1, 0), "Pipeline")
        >>> logs = LogDirectory(events=[OperatesEvent(0, 0, 0, (0, 0), "A", "d"), channel])
        >>> [(e.id, e.source, e.target) for e in logs.channels()]
        [(0, (0, 0), (1, 0))]
        """
        return [e for e in of_lowest_worker(self.events) if type(e) is ChannelsEvent]

    def wall_offset(self, worker: int) -> int:
        """Nanoseconds to add to ``worker``'s event times to put them on one clock with the
        other workers' (from the wall clocks at their registries' creation).

        >>> logs = LogDirectory(workers={0: {"epoch_ns": 1_000}, 1: {"epoch_ns": 1_500}})
        >>> logs.wall_offset(0), logs.wall_offset(1)
        (0, 500)
        """
        epochs = [meta.get("epoch_ns", 0) for meta in self.workers.values()]
        return self.workers.get(worker, {}).get("epoch_ns", 0) - min(epochs, default=0)


def read_events(path: str | os.PathLike) -> list:
    """The events logged in one file written by a ``BatchLogger(EventWriter(path))``, up to
    its last whole batch.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "log")
    >>> logger = BatchLogger(EventWriter(path))
    >>> logger(10, ["a", "b"]); logger(20, ["c"]); logger.close()
    >>> read_events(path)
    ['a', 'b', 'c']
    """
    reader = EventReader(path)
    events: list = []
    try:
        while (event := reader.next()) is not None:
            if event[0] == "messages":
                events += event[2]
    except OSError:
        raise
    except Exception as error:     # a damaged pickle may fail in any way as it is loaded
        raise _damaged_events(path, describe(error)) from None
    finally:
        reader.close()
    return events


def _damaged_events(path: str | os.PathLike, why: str) -> DamagedLog:
    return DamagedLog(f"{os.fspath(path)} is not a worker's event log (damaged, or written "
                      f"by something else): {why}")


def _logged_events(path: str) -> list:
    """:func:`read_events` of a log directory's file, each a logged event (a time and a
    worker, both ints), as the profile sorts and reads them."""
    events = read_events(path)
    for event in events:
        if not (isinstance(getattr(event, "time", None), int)
                and isinstance(getattr(event, "worker", None), int)):
            raise _damaged_events(path, f"it holds {short_repr(event)}, not a logged event")
    return events


def read_log_directory(directory: str | os.PathLike) -> LogDirectory:
    """Read the files :func:`log_to_directory` wrote in ``directory`` (raises
    FileNotFoundError naming the directory if it holds no logs).

    >>> import tempfile
    >>> read_log_directory(tempfile.mkdtemp())
    Traceback (most recent call last):
    FileNotFoundError: no sparktimely logs (worker-N.json) in ...
    """
    metas = sorted(glob.glob(os.path.join(directory, "worker-*.json")))
    if not metas:
        raise FileNotFoundError(f"no sparktimely logs (worker-N.json) in {os.fspath(directory)}")
    logs = LogDirectory()
    for path in metas:
        with open(path) as file:
            try:
                meta: dict[str, Any] = json.load(file)
                index = int(meta["worker"])
                if not isinstance(meta.get("epoch_ns", 0), int):
                    raise TypeError(f"its epoch_ns is {meta['epoch_ns']!r}, not an int")
            except (ValueError, KeyError, TypeError) as error:
                raise DamagedLog(f"{path} is not a worker's log description (damaged, or "
                                 f"written by something else): {describe(error)}") from None
        logs.workers[index] = meta
        stem = path[:-len(".json")]
        if os.path.exists(stem + ".timely"):
            logs.events += _logged_events(stem + ".timely")
        if os.path.exists(stem + ".progress"):
            logs.progress += _logged_events(stem + ".progress")
    logs.events.sort(key=lambda e: (e.worker, e.time))
    logs.progress.sort(key=lambda e: (e.worker, e.time))
    return logs


__all__ = ["DamagedLog", "LogDirectory", "directory_problem", "log_to_directory", "read_events",
           "read_log_directory"]
