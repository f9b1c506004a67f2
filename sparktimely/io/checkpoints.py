"""Epoch checkpoints: aligned snapshots, one atomic commit record per checkpoint, and resume.

:func:`enable_checkpoints` gives a worker a coordinator (``worker.recovery``) before it
builds its dataflows; ``st.execute(..., checkpoint_dir=...)`` does it for every worker. Every
dataflow then gets a small companion dataflow that carries the coordinators' messages, and
goes through three stages (the model is Flink's aligned checkpoints and two-phase-commit
sinks; bytewax's partitioned sources):

1. **Resume.** Once the dataflow is built, worker 0 takes the directory's lock and every
   worker reads the newest commit record of the dataflow, checks that it describes the same
   program (dataflow and operator names) and reads and verifies the state files it needs.
   Worker 0 gathers the verdicts: if any worker found the checkpoint unusable, every worker
   raises :class:`RecoveryError` with that worker's reason and nothing on disk has changed.
   Otherwise the components restore their state, sinks finish the commit of the resumed
   epoch (and discard what was staged after it), and sources continue from their positions.
2. **Checkpoints.** Stateful operators and sinks see inputs only up to the next checkpoint
   epoch (``EpochGate``). When worker 0 sees every epoch up to that one complete, it asks
   for a checkpoint of the latest complete epoch ``e`` that is a multiple of
   ``checkpoint_every``; each worker, once it too sees ``e`` complete, writes its
   components' snapshots (Arrow IPC files, fsynced), lets its operators see the next
   epochs and reports the files' sizes and XXH3-128 digests. With every report in, worker 0
   writes the commit record (JSON, with its own digest) to a temporary name, fsyncs and
   renames it: the checkpoint exists from that instant. Then sinks commit ``e``.
3. **Completion.** When the dataflow has completed, a last checkpoint holds everything, so
   every epoch's output becomes visible; the companion dataflow then completes.

Layout of ``checkpoint_dir`` (every path component URL-quoted)::

    _lock                                   flock (local) or lease (elsewhere)
    <dataflow>/commits/<sequence>.json      commit records; the newest counts
    <dataflow>/checkpoints/<sequence>/<component>.w<worker>.arrow

>>> import os, tempfile, sparktimely as st
>>> from sparktimely.io import enable_checkpoints
>>> directory = tempfile.mkdtemp()
>>> def job(worker):
...     enable_checkpoints(worker, directory)
...     def fold(key, value, total):
...         return False, [(key, (total or 0) + value)], (total or 0) + value
...     return worker.dataflow(lambda scope: scope.to_stream([("a", 1), ("a", 2)])
...                            .state_machine(fold).capture(), name="totals")
>>> st.execute_directly(job).extract()
[(0, [('a', 1), ('a', 3)])]
>>> sorted(name for name in os.listdir(directory))
['_lock', 'totals']
"""
from __future__ import annotations

import json
import logging
import math
import posixpath
import re
import time
from collections import Counter, deque
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import quote, unquote

from ..dataflow import Pipeline, source
from ..hashing import xxh3_128_hexdigest
from ..ops.recovery import Component, KeyedState, frontier_epoch, root_epoch
from ..progress.timestamp import Product
from ._state import decode_partitions, encode_keyed, encode_partitions, from_ipc, select_keyed, \
    to_ipc
from ._storage import TEMPORARY_PREFIX, DirectoryLock, Location, Storage

if TYPE_CHECKING:
    from ..dataflow.worker import Dataflow, Worker

__all__ = ["Checkpoints", "RecoveryError", "checkpointing", "committed_epochs",
           "enable_checkpoints", "reraise_recovery_error"]

FORMAT = "sparktimely-checkpoint/1"
KEEP = 2
"""Commit records (and their state files) kept: the newest and the one before it."""

STALL_SECONDS = 10.0
"""How long nothing may move in a dataflow whose stateful operators and sinks wait at the next
checkpoint epoch before they are let through for the rest of the run (see
:meth:`_Flow.watch_stall`)."""

_RECORD = re.compile(r"^(\d{12})\.json$")
_ALL = -1
logger = logging.getLogger("sparktimely")


class RecoveryError(RuntimeError):
    """A checkpoint cannot be used (another program's, corrupted, or its directory is in use
    by another run); the message names what differs. Nothing on disk was changed.

    >>> import tempfile, sparktimely as st
    >>> from sparktimely.io import enable_checkpoints
    >>> directory = tempfile.mkdtemp()
    >>> def job(worker, name):
    ...     enable_checkpoints(worker, directory)
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name=name)
    >>> st.execute_directly(lambda worker: job(worker, "first"))
    >>> try:
    ...     st.execute_directly(lambda worker: job(worker, "second"))
    ... except st.RecoveryError as error:
    ...     print(str(error).split(":")[1].strip())
    it holds checkpoints of dataflow 'first', not of this program's first dataflow 'second'
    """


def enable_checkpoints(worker: "Worker", checkpoint_dir: Location,
                       checkpoint_every: int = 1) -> "Checkpoints":
    """Make ``worker`` checkpoint every dataflow it builds from now on into
    ``checkpoint_dir`` (a path, a URI such as ``s3://bucket/dir`` or ``hdfs://host/dir``, or
    a ``(pyarrow.fs.FileSystem, path)`` pair; created when missing), each time a root epoch
    that is a multiple of ``checkpoint_every`` is complete on every worker, and resume each
    from its last checkpoint there. Every worker of a job must call it alike, before building
    its dataflows; every dataflow then needs a ``name``.

    >>> import tempfile, sparktimely as st
    >>> directory = tempfile.mkdtemp()
    >>> def job(worker):
    ...     enable_checkpoints(worker, directory, checkpoint_every=10)
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="one")
    ...     return worker.recovery.every
    >>> st.execute_directly(job)
    10
    """
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be a positive integer, got {checkpoint_every!r}")
    if getattr(worker, "recovery", None) is not None:
        raise ValueError(f"worker {worker.index} already checkpoints")
    if worker.installed_dataflows():
        raise ValueError(f"worker {worker.index}: enable checkpoints before building dataflows")
    coordinator = Checkpoints(worker, Storage(checkpoint_dir), checkpoint_every)
    worker.recovery = coordinator
    return coordinator


def checkpointing(func: Callable[["Worker"], Any], checkpoint_dir: Location,
                  checkpoint_every: int = 1) -> Callable[["Worker"], Any]:
    """``func`` for a worker that checkpoints: it enables checkpoints, then runs ``func``
    (what ``execute`` and ``barrier.run`` do with their ``checkpoint_dir``). A worker that
    fails gives the directory's lock up at once (its process may live on, as Spark's do).

    >>> import tempfile, sparktimely as st
    >>> st.execute_directly(checkpointing(lambda worker: worker.recovery.every,
    ...                                   tempfile.mkdtemp(), 5))
    5
    """
    def run(worker: "Worker") -> Any:
        coordinator = enable_checkpoints(worker, checkpoint_dir, checkpoint_every)
        try:
            return func(worker)
        except BaseException:
            coordinator.close()
            raise
    return run


@contextmanager
def reraise_recovery_error() -> Iterator[None]:
    """Turn a worker's failure that was a :class:`RecoveryError` (a ``WorkerError`` whose
    message says so) into that RecoveryError.

    >>> import sparktimely as st
    >>> try:
    ...     with reraise_recovery_error():
    ...         raise st.WorkerError(1, "RecoveryError: commit record x is corrupt")
    ... except st.RecoveryError as error:
    ...     print(error)
    commit record x is corrupt
    """
    try:
        yield
    except Exception as error:
        message = getattr(error, "message", "")
        if isinstance(message, str) and message.startswith(_RECOVERY_ERROR):
            raise RecoveryError(message[len(_RECOVERY_ERROR):]) from error
        raise


_RECOVERY_ERROR = "RecoveryError: "


def committed_epochs(checkpoint_dir: Location) -> dict[str, int | None]:
    """The epoch of the newest commit record of each dataflow checkpointed in
    ``checkpoint_dir`` (empty when there is none, or no such directory): what a run with
    this directory would resume after; None for a dataflow whose run completed. Reads only;
    does not check the files.

    >>> import tempfile, sparktimely as st
    >>> directory = tempfile.mkdtemp()
    >>> def job(worker):
    ...     enable_checkpoints(worker, directory)
    ...     worker.dataflow(lambda scope: scope.to_stream([("a", 1)]).state_machine(
    ...         lambda key, value, total: (False, [value])).probe(), name="totals")
    >>> committed_epochs(directory), st.execute_directly(job), committed_epochs(directory)
    ({}, None, {'totals': None})
    """
    storage = Storage(checkpoint_dir)
    epochs: dict[str, int | None] = {}
    for name in storage.names(storage.root):
        commits = storage.path(name, "commits")
        sequences = [m.group(1) for m in map(_RECORD.match, storage.names(commits)) if m]
        if sequences:
            record = json.loads(bytes(storage.read(posixpath.join(commits, f"{max(sequences)}.json"))))
            epochs[unquote(name)] = None if record["complete"] else record["epoch"]
    return epochs


class Checkpoints:
    """One worker's checkpoint coordinator (``worker.recovery``); see the module doc.

    The worker calls :meth:`dataflow_built` after building each dataflow and
    :meth:`after_step` after each step; operators :meth:`register` their components while
    the dataflow is built.

    >>> import tempfile, sparktimely as st
    >>> def job(worker):
    ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
    ...     worker.dataflow(lambda scope: scope.to_stream([("k", 1)])
    ...                     .state_machine(lambda k, v, s: (False, [v])).probe(), name="n")
    ...     return [c.kind for flow in coordinator.flows for c in flow.components]
    >>> st.execute_directly(job)
    ['keyed']
    """

    def __init__(self, worker: "Worker", storage: Storage, every: int) -> None:
        self.worker = worker
        self.storage = storage
        self.every = every
        self.lock = DirectoryLock(storage) if worker.index == 0 else None
        self.locked = False
        self.flows: list[_Flow] = []
        self.started = 0
        self.idle_since: float | None = None
        self._components: dict[int, list[Component]] = {}
        self._building_companion = False

    def register(self, component: Component) -> None:
        """Take ``component`` (made while its dataflow is built) into the checkpoints."""
        self._components.setdefault(component.dataflow.index, []).append(component)

    def dataflow_built(self, dataflow: "Dataflow", named: bool) -> None:
        """Resume ``dataflow`` from its newest checkpoint, or start it afresh (see the module
        doc); raises :class:`RecoveryError` if any worker finds the checkpoint unusable."""
        if self._building_companion:
            return
        components = self._components.pop(dataflow.index, [])
        if not named:
            raise ValueError(f"worker.dataflow: with a checkpoint directory every dataflow "
                             f"needs a name (dataflow {dataflow.index} has none): "
                             f"worker.dataflow(build, name=...)")
        for operator in dataflow.operators:
            for port in operator.outputs:
                if port.kind.base not in (int, Product):
                    raise ValueError(f"dataflow {dataflow.name!r}: checkpoints need int or "
                                     f"Product root times, not {port.kind.base.__name__}")
        twice = [name for name, n in Counter(c.name for c in components).items() if n > 1]
        if twice:
            raise ValueError(f"dataflow {dataflow.name!r}: two sources, sinks or stateful "
                             f"operators are named {twice[0]!r}; checkpoints need unique names")
        for component in components:
            component.install()
        flow = _Flow(self, dataflow, components)
        self.flows.append(flow)
        self.started += 1
        flow.begin()

    def build_companion(self, flow: "_Flow") -> "Dataflow":
        """Build ``flow``'s companion dataflow, which carries the coordinators' messages."""
        peers = self.worker.peers

        def build(scope: Any) -> "Dataflow":
            def ctor(capability: Any, info: Any) -> Any:
                flow.capability = capability
                flow.activate = scope.activator_for(info.address).activate

                def logic(output: Any) -> None:
                    if flow.outbox:
                        messages = list(flow.outbox)
                        flow.outbox.clear()
                        with output.session(capability) as session:
                            session.give_batch(messages)
                    if flow.closing and flow.capability is not None:
                        flow.capability = None
                        capability.drop()
                return logic

            def deliver(input: Any) -> None:
                for _, batch in input:
                    flow.inbox.extend(message for _, message in batch)
            (source(scope, "CheckpointMessages", ctor)
             .flat_map(lambda m: [(w, m[1]) for w in range(peers)] if m[0] == _ALL else [m])
             .exchange(lambda m: m[0])
             .sink(Pipeline, "CheckpointInbox", deliver))
            return scope.dataflow
        self._building_companion = True
        try:
            companion: "Dataflow" = self.worker.dataflow(build, name=f"{flow.name} checkpoints")
        finally:
            self._building_companion = False
        return companion

    def after_step(self, worked: bool) -> bool:
        """Advance every dataflow's checkpoints after a step (in which the worker ``worked``
        or not); True if anything happened."""
        if worked and not any(flow.inbox for flow in self.flows):   # not just our messages
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = time.monotonic()
        busy = False
        for flow in self.flows:
            busy = flow.step() or busy
            if flow.outbox and flow.companion is not None:
                flow.companion.step()       # send now, not after the next step's operators
        running = [flow for flow in self.flows if not flow.finished()]
        if len(running) < len(self.flows):
            self.flows = running
            if not running:
                self.release_lock()
        return busy

    def idle_seconds(self) -> float:
        """How long this worker has had nothing to do but checkpoint messages."""
        return 0.0 if self.idle_since is None else time.monotonic() - self.idle_since

    def acquire_lock(self) -> str | None:
        """Worker 0: hold the directory's lock (once per run); None, or why not."""
        if self.lock is None or self.locked:
            return None
        reason = self.lock.acquire()
        self.locked = reason is None
        return reason

    def release_lock(self) -> None:
        if self.lock is not None and self.locked:
            self.lock.release()
            self.locked = False

    def close(self) -> None:
        """Give up checkpointing on this worker and release the directory's lock (a worker
        that fails mid-run in this process, as in tests; a dead process releases it anyway)."""
        self.release_lock()
        self.flows = []


def _serialize(record: dict) -> bytes:
    """A commit record's bytes: one canonical layout, so that any change to them shows."""
    return json.dumps(record, indent=1, sort_keys=True).encode()


def _digest(record: dict) -> str:
    return xxh3_128_hexdigest(json.dumps(record, sort_keys=True).encode())


class _Flow:
    """The checkpoints of one dataflow on one worker."""

    def __init__(self, checkpoints: Checkpoints, dataflow: "Dataflow",
                 components: list[Component]) -> None:
        self.checkpoints = checkpoints
        self.storage = checkpoints.storage
        self.every = checkpoints.every
        self.worker = checkpoints.worker
        self.leader = self.worker.index == 0
        self.dataflow = dataflow
        self.components = components
        self.name = dataflow.name
        self.directory = self.storage.path(quote(self.name, safe=""))
        self.outbox: deque = deque()
        self.inbox: deque = deque()
        self.capability: Any = None
        self.activate: Any = None
        self.closing = False
        self.companion: "Dataflow | None" = None
        self.phase = "starting"
        self.decision: tuple | None = None
        self.verdicts: dict[int, tuple] = {}
        self.record: dict | None = None
        self.restored: dict[str, Any] = {}
        self.sequence = 0                 # the last committed checkpoint (0: none)
        self.epoch = -1                   # its epoch
        self.hold = 0                     # operators see epochs up to this one
        self.request: tuple[int, int | None] | None = None
        self.ungated = False              # no more periodic checkpoints (see watch_stall)
        self.stall: tuple | None = None   # worker 0: (pointstamps, unchanged since, checked)
        self.query: tuple | None = None   # worker 0: (pointstamps, idle seconds per worker)
        self.in_flight = False
        self.requested: int | None = None       # worker 0: the epoch of the checkpoint in flight
        self.reports: dict[int, tuple] = {}

    # -- messages ---------------------------------------------------------------------------

    def send(self, target: int, message: tuple) -> None:
        self.outbox.append((target, message))
        self.activate()

    def close_companion(self) -> None:
        self.closing = True
        self.activate()

    def finished(self) -> bool:
        assert self.companion is not None
        return (self.phase == "done" and
                self.companion.index not in self.worker.installed_dataflows())

    # -- resume -----------------------------------------------------------------------------

    def begin(self) -> None:
        """Build the companion, agree with the other workers on how to start, and start."""
        self.companion = self.checkpoints.build_companion(self)
        self.dataflow.on_drop(self.abandon)
        self.send(0, ("verdict", self.worker.index, self.examine()))
        self.worker.step_while(lambda: self.decision is None)
        assert self.decision is not None
        outcome, value = self.decision
        if outcome == "fail":
            self.phase = "done"
            self.close_companion()
            self.checkpoints.release_lock()
            raise RecoveryError(value)
        self.start()

    def examine(self) -> tuple:
        """Read and check what this worker needs to resume; ``("ok", sequence)`` or
        ``("error", reason)``. Reads only."""
        where = self.storage.where
        try:
            reason = self.checkpoints.acquire_lock()
            if reason is not None:
                raise RecoveryError(f"checkpoint directory {where} is in use by another run: "
                                    f"{reason}; two runs cannot write one directory at once")
            record = self.newest_record()
            if record is None:
                return ("ok", 0)
            self.check_program(record)
            self.restored = self.read_states(record)
            self.record = record
            return ("ok", record["sequence"])
        except RecoveryError as error:
            return ("error", str(error))

    def newest_record(self) -> dict | None:
        commits = posixpath.join(self.directory, "commits")
        sequences = [int(m.group(1)) for m in map(_RECORD.match, self.storage.names(commits)) if m]
        if not sequences:
            if self.checkpoints.started == 1:
                others = [unquote(name) for name in self.storage.names(self.storage.root)
                          if not name.startswith(("_", ".")) and
                          any(map(_RECORD.match, self.storage.names(
                              self.storage.path(name, "commits"))))]
                if others:
                    held = ", ".join(repr(name) for name in others)
                    raise RecoveryError(
                        f"checkpoint directory {self.storage.where}: it holds checkpoints of "
                        f"dataflow {held}, not of this program's first dataflow {self.name!r}")
            return None
        sequence = max(sequences)
        path = posixpath.join(commits, f"{sequence:012d}.json")
        data = bytes(self.storage.read(path))
        try:
            record = json.loads(data)
        except ValueError as error:
            raise RecoveryError(f"commit record {path} is corrupt: it is not JSON ({error})")
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise RecoveryError(f"commit record {path} is corrupt: it is not a {FORMAT} record")
        if data != _serialize(record):
            raise RecoveryError(f"commit record {path} is corrupt: its bytes are not those "
                                f"written (whitespace or layout changed)")
        checksum = record.pop("checksum", None)
        if checksum != _digest(record):
            raise RecoveryError(f"commit record {path} is corrupt: its contents do not match "
                                f"its XXH3-128 digest {checksum}")
        if record.get("sequence") != sequence:
            raise RecoveryError(f"commit record {path} is corrupt: it says it is number "
                                f"{record.get('sequence')}")
        return record

    def check_program(self, record: dict) -> None:
        """Raise :class:`RecoveryError` naming the first difference between the checkpointed
        program and this one."""
        where = f"checkpoint of dataflow {self.name!r} in {self.storage.where}"
        if record["dataflow"] != self.name:
            raise RecoveryError(f"{where} is of dataflow {record['dataflow']!r}")
        theirs, ours = record["operators"], [op.name for op in self.dataflow.operators]
        if theirs != ours:
            for i, (a, b) in enumerate(zip(theirs, ours)):
                if a != b:
                    raise RecoveryError(f"{where} is of another program: its operator {i} is "
                                        f"{a!r}, this program's is {b!r}")
            raise RecoveryError(f"{where} is of another program: it has {len(theirs)} "
                                f"operators ({', '.join(theirs)}), this program has "
                                f"{len(ours)} ({', '.join(ours)})")
        mine = [[c.name, c.kind] for c in self.components]
        if record["components"] != mine:
            raise RecoveryError(f"{where} is of another program: its checkpointed parts are "
                                f"{record['components']}, this program's are {mine}")

    def read_states(self, record: dict) -> dict[str, Any]:
        """The decoded state of each component, as this worker resumes it."""
        old, peers, index = record["workers"], self.worker.peers, self.worker.index
        files: dict[str, dict] = {}
        for path, meta in record["files"].items():
            files.setdefault(meta["component"], {})[meta["worker"]] = (path, meta)
        states: dict[str, Any] = {}
        for component in self.components:
            if component.kind == "keyed":
                shared = math.gcd(old, peers)
                writers = [w for w in range(old) if w % shared == index % shared]
            elif component.kind == "sink":
                writers = [w for w in range(old) if w == index or (w >= peers and w % peers == index)]
            else:
                writers = list(range(old))
            written = files.get(component.name, {})
            tables = [self.read_file(*written[w]) for w in writers if w in written]
            if component.kind == "keyed":
                states[component.name] = select_keyed(tables, peers, index,
                                                      everything=old == peers)
            else:
                states[component.name] = decode_partitions(tables)
        return states

    def read_file(self, path: str, meta: dict) -> Any:
        full = posixpath.join(self.directory, path)
        try:
            data = self.storage.read(full)
        except FileNotFoundError:
            raise RecoveryError(f"checkpoint file {full} (of {meta['component']!r}, worker "
                                f"{meta['worker']}) named by the commit record is missing")
        digest = xxh3_128_hexdigest(data)
        if data.size != meta["size"] or digest != meta["xxh3_128"]:
            raise RecoveryError(f"checkpoint file {full} (of {meta['component']!r}, worker "
                                f"{meta['worker']}) is corrupt: {data.size} bytes, XXH3-128 "
                                f"{digest}; the commit record says {meta['size']} bytes, "
                                f"{meta['xxh3_128']}")
        return from_ipc(data)

    def start(self) -> None:
        """Restore the components (when resuming) and start them after the resumed epoch."""
        record = self.record
        if record is not None:
            self.sequence, self.epoch = record["sequence"], record["epoch"]
            for component in self.components:
                state = self.restored.get(component.name)
                if state is not None:
                    component.restore(state)
        self.restored = {}
        first = self.epoch + 1
        self.hold = -(-first // self.every) * self.every
        for component in self.components:
            component.start(first, self.hold)
        if self.leader:
            self.clean()
        self.phase = "running"

    def clean(self) -> None:
        """Worker 0, at the start and after each commit: remove what crashed runs left
        (temporary files, checkpoints never committed) and checkpoints older than the
        :data:`KEEP` newest."""
        storage = self.storage
        commits = posixpath.join(self.directory, "commits")
        checkpoints = posixpath.join(self.directory, "checkpoints")
        storage.makedirs(commits)
        storage.makedirs(checkpoints)
        for name in storage.names(commits):
            match = _RECORD.match(name)
            if name.startswith(TEMPORARY_PREFIX) or (
                    match and int(match.group(1)) <= self.sequence - KEEP):
                storage.delete(posixpath.join(commits, name))
        for name in storage.names(checkpoints):
            if name.isdigit() and not self.sequence - KEEP < int(name) <= self.sequence:
                storage.delete_dir(posixpath.join(checkpoints, name))

    def abandon(self) -> None:
        """The dataflow was dropped: stop checkpointing it (no final checkpoint)."""
        self.phase = "done"
        self.close_companion()

    # -- running ----------------------------------------------------------------------------

    def step(self) -> bool:
        busy = bool(self.inbox)
        while self.inbox:
            self.handle(self.inbox.popleft())
        if self.phase == "running":
            if self.leader and not self.in_flight:
                cut = self.cut()
                if cut == math.inf:
                    self.request_checkpoint(None)
                elif self.ungated:
                    pass
                elif cut >= self.hold:
                    self.request_checkpoint(int(cut) // self.every * self.every)
                else:
                    self.watch_stall()
            if self.request is not None:
                sequence, epoch = self.request
                cut = self.cut()
                if cut == math.inf or (epoch is not None and cut >= epoch):
                    self.snapshot(sequence, epoch)
            if self.leader and self.checkpoints.lock is not None:
                self.checkpoints.lock.renew()
        return busy or bool(self.outbox)

    def cut(self) -> float:
        """The latest root epoch complete on every worker, as far as this worker knows
        (infinity once the dataflow has completed)."""
        tracker = self.dataflow.tracker
        assert tracker is not None
        return min((frontier_epoch(tracker.pointstamps(location).frontier())
                    for location in range(tracker.locations())), default=math.inf) - 1

    def pointstamps(self) -> tuple:
        """Every location's pointstamp frontier (to see whether anything moves)."""
        tracker = self.dataflow.tracker
        assert tracker is not None
        return tuple(tuple(tracker.pointstamps(location).frontier())
                     for location in range(tracker.locations()))

    def watch_stall(self) -> None:
        """Worker 0, while the operators wait at the next checkpoint epoch: if no pointstamp
        has moved for :data:`STALL_SECONDS`, ask every worker how long it has been idle (a
        worker busy in one long operator call answers only afterwards, and not idle)."""
        now = time.monotonic()
        if self.query is not None or (self.stall is not None and now - self.stall[2] < 1.0):
            return
        held = self.pointstamps()
        if self.stall is None or held != self.stall[0]:
            self.stall = (held, now, now)
        else:
            self.stall = (held, self.stall[1], now)
            if now - self.stall[1] >= STALL_SECONDS:
                self.query = (held, {})
                self.send(_ALL, ("idle?",))

    def idle_answer(self, worker: int, idle: float) -> None:
        """Worker 0: a worker has been idle for ``idle`` seconds. With every worker idle as
        long as nothing has moved, some operator holds a time up to the checkpoint epoch
        until it sees later input, which the wait withholds: let every operator through and
        go on without periodic checkpoints (the last one, at completion, still comes)."""
        assert self.query is not None
        held, answers = self.query
        answers[worker] = idle
        if len(answers) < self.worker.peers:
            return
        self.query = None
        if min(answers.values()) < STALL_SECONDS or held != self.pointstamps():
            self.stall = None                           # something is going on: watch again
            return
        names = {port.location: op.name for op in self.dataflow.operators
                 for port in op.inputs + op.outputs}
        holders = sorted({f"{names.get(location, location)!s} at {list(times)}"
                          for location, times in enumerate(held)
                          if any(root_epoch(t) <= self.hold for t in times)})
        logger.warning(
            "dataflow %r: nothing moved for %.0f s while its stateful operators and sinks "
            "waited at checkpoint epoch %d; %s hold%s earlier times, waiting for later input "
            "maybe. Letting every operator through: no more checkpoints until the dataflow "
            "completes.", self.name, STALL_SECONDS, self.hold, ", ".join(holders) or "none",
            "s" if len(holders) == 1 else "")
        self.ungated = True
        self.send(_ALL, ("ungate",))

    def handle(self, message: tuple) -> None:
        kind = message[0]
        if kind == "verdict":
            self.verdicts[message[1]] = message[2]
            if len(self.verdicts) == self.worker.peers:
                self.send(_ALL, ("decision", self.decide()))
        elif kind == "decision":
            self.decision = message[1]
        elif kind == "checkpoint":
            self.request = (message[1], message[2])
        elif kind == "idle?":
            self.send(0, ("idle", self.worker.index, self.checkpoints.idle_seconds()))
        elif kind == "idle":
            self.idle_answer(message[1], message[2])
        elif kind == "ungate":
            self.ungated = True
            for component in self.components:
                component.release(None)
        elif kind == "done":
            self.reports[message[2]] = message
            if len(self.reports) == self.worker.peers:
                self.commit()
        elif kind == "committed":
            _, sequence, epoch, final = message
            self.sequence, self.epoch = sequence, epoch
            for component in self.components:
                component.commit(epoch)
            if final:
                self.phase = "done"
                self.close_companion()

    def decide(self) -> tuple:
        """Worker 0: how every worker starts, from all the verdicts."""
        for worker, (outcome, value) in sorted(self.verdicts.items()):
            if outcome == "error":
                return ("fail", value if worker == 0 else f"{value} (found by worker {worker})")
        sequences = {value for _, value in self.verdicts.values()}
        if len(sequences) > 1:
            return ("fail", f"checkpoint directory {self.storage.where}: workers found "
                            f"different newest checkpoints of dataflow {self.name!r} "
                            f"({sorted(sequences)}); is another run writing it?")
        return ("go", sequences.pop())

    def request_checkpoint(self, epoch: int | None) -> None:
        """Worker 0: ask every worker for a checkpoint of ``epoch`` (None: the last)."""
        self.in_flight = True
        self.stall = None
        self.requested = epoch
        self.send(_ALL, ("checkpoint", self.sequence + 1, epoch))

    def snapshot(self, sequence: int, epoch: int | None) -> None:
        """Write this worker's part of checkpoint ``sequence`` and report it to worker 0."""
        storage, index = self.storage, self.worker.index
        relative = f"checkpoints/{sequence:012d}"
        directory = posixpath.join(self.directory, relative)
        storage.makedirs(directory)
        files = {}
        for component in self.components:
            state = component.snapshot(epoch)
            if isinstance(component, KeyedState):
                table = encode_keyed(state, component.route)
            else:
                table = encode_partitions(state)
            data = to_ipc(table)
            name = f"{quote(component.name, safe='')}.w{index:05d}.arrow"
            storage.write(posixpath.join(directory, name), data)
            files[f"{relative}/{name}"] = {"size": data.size, "worker": index,
                                           "component": component.name,
                                           "xxh3_128": xxh3_128_hexdigest(data)}
        storage.sync(directory)
        storage.sync(posixpath.dirname(directory))
        limit = None if epoch is None or self.ungated else epoch + self.every
        for component in self.components:
            component.release(limit)
        latest = max((c.max_epoch for c in self.components), default=-1)
        self.request = None
        self.send(0, ("done", sequence, index, files, latest))

    def commit(self) -> None:
        """Worker 0: every worker's files are durable; write the commit record."""
        reports = [self.reports[w] for w in range(self.worker.peers)]
        self.reports = {}
        sequence, requested = reports[0][1], self.requested
        final = requested is None
        epoch = max([self.epoch] + [report[4] for report in reports]) if final else requested
        record = {"format": FORMAT, "dataflow": self.name, "sequence": sequence,
                  "epoch": epoch, "complete": final, "workers": self.worker.peers,
                  "checkpoint_every": self.every,
                  "operators": [op.name for op in self.dataflow.operators],
                  "components": [[c.name, c.kind] for c in self.components],
                  "files": {path: meta for report in reports for path, meta in report[3].items()}}
        record["checksum"] = _digest(record)
        commits = posixpath.join(self.directory, "commits")
        self.storage.write_atomic(posixpath.join(commits, f"{sequence:012d}.json"),
                                  _serialize(record))
        self.sequence = sequence
        self.clean()
        self.in_flight = False
        if requested is not None:
            self.hold = requested + self.every
        self.send(_ALL, ("committed", sequence, epoch, final))
