"""Epoch checkpoints: aligned snapshots, one atomic commit record per checkpoint, and resume.

:func:`enable_checkpoints` gives a worker a coordinator (an observer) before it
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
   epoch (and discard what was staged after it), sources continue from their positions, and
   the dataflow's other inputs (input handles, ``to_stream``) send nothing at the epochs
   each had sent at, and send what a longer run sends at the epochs between those and the
   resumed one at the next (:class:`~sparktimely.ops.recovery.InputEpochs`).
2. **Checkpoints.** Stateful operators and sinks see inputs only up to the next checkpoint
   epoch (``EpochGate``). When worker 0 sees every epoch up to that one complete, it asks
   for a checkpoint of the latest complete epoch ``e`` that is a multiple of
   ``checkpoint_every``; each worker, once it too sees ``e`` complete, writes its
   components' snapshots (Arrow IPC files, fsynced), lets its operators see the next
   epochs and reports the files' sizes and XXH3-128 digests. With every report in, worker 0
   writes the commit record (JSON, with its own digest) to a temporary name, fsyncs and
   renames it: the checkpoint exists from that instant. Then sinks commit ``e``.
   If nothing moves for :data:`STALL_SECONDS` while every worker is idle and the operators
   wait at that epoch (one holds an early epoch open until it sees later input), every
   operator is let through and only the last checkpoint comes.
3. **Completion.** When the dataflow has completed, a last checkpoint holds everything, so
   every epoch's output becomes visible; the companion dataflow then completes.

Who tells whom what, and when, is a pure state machine without I/O,
:mod:`sparktimely.io._checkpoint_protocol` (one per worker and dataflow, tested alone with
simulated workers); the commit record's format, digests and checks are
:mod:`sparktimely.io._commit_record`. This module is the I/O around them: the coordinator,
the companion dataflow, the storage, the clock, and the components' snapshots, restores and
commits.

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

import logging
import math
import posixpath
import time
from collections import Counter, deque
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar
from urllib.parse import quote, unquote

from ..dataflow import Pipeline, WorkerObserver, source
from ..dataflow.builder import OperatorError
from ..errors import describe, require_positive_int
from ..ops.recovery import (Component, InputEpochs, KeyedState, frontier_epoch, recovery_of,
                            root_epoch)
from ..ops.sinks import handed_over
from ..progress.timestamp import Product
from . import _commit_record as records
from ._checkpoint_protocol import ALL, Action, CheckpointProtocol, CommitComponents, Fail, \
    Finish, Message, Phase, Release, Send, Stalled, Start, WriteCommit, WriteSnapshot
from ._state import decode_partitions, encode_keyed, encode_partitions, from_ipc, select_keyed, \
    to_ipc, unpicklable_entry
from ._storage import TEMPORARY_PREFIX, DirectoryLock, Location, Storage, \
    check_location

if TYPE_CHECKING:
    from ..dataflow.subgraph import Dataflow
    from ..dataflow.worker import WorkerCore as Worker

W = TypeVar("W", bound="Worker")

__all__ = ["Checkpoints", "RecoveryError", "checkpointing", "committed_epochs",
           "enable_checkpoints", "reraise_recovery_error"]

KEEP = 2
"""Commit records (and their state files) kept: the newest and the one before it."""

STALL_SECONDS = 10.0
"""How long nothing may move in a dataflow whose stateful operators and sinks wait at the next
checkpoint epoch before they are let through for the rest of the run (see "Stalls" in
:mod:`sparktimely.io._checkpoint_protocol`)."""

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


def check_checkpoint_dir(checkpoint_dir: object) -> None:
    """A TypeError naming the option unless ``checkpoint_dir`` is None (no checkpoints) or
    a directory's :data:`~sparktimely.io._storage.Location`.

    >>> check_checkpoint_dir(["ck"])
    Traceback (most recent call last):
    ...
    TypeError: checkpoint_dir: expected a directory (a path, a URI such as s3://bucket/dir, or a (pyarrow.fs.FileSystem, path) pair), got ['ck'] (list)
    """
    if checkpoint_dir is not None:
        check_location("checkpoint_dir", checkpoint_dir)


def check_checkpoint_every(checkpoint_every: object) -> None:
    """A ValueError naming the option unless ``checkpoint_every`` is a positive integer.

    >>> check_checkpoint_every(0)
    Traceback (most recent call last):
    ValueError: checkpoint_every must be a positive integer, got 0
    """
    require_positive_int(checkpoint_every, "checkpoint_every")


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
    ...     coordinator = enable_checkpoints(worker, directory, checkpoint_every=10)
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="one")
    ...     return coordinator.every
    >>> st.execute_directly(job)
    10
    """
    check_checkpoint_every(checkpoint_every)
    if recovery_of(worker) is not None:
        raise ValueError(f"worker {worker.index} already checkpoints")
    if worker.installed_dataflows():
        raise ValueError(f"worker {worker.index}: enable checkpoints before building dataflows")
    coordinator = Checkpoints(worker, Storage(checkpoint_dir), checkpoint_every)
    worker.add_observer(coordinator)
    return coordinator


def checkpointing(func: Callable[[W], Any], checkpoint_dir: Location,
                  checkpoint_every: int = 1) -> Callable[[W], Any]:
    """``func`` for a worker that checkpoints: it enables checkpoints, then runs ``func``
    (what ``execute`` and ``barrier.run`` do with their ``checkpoint_dir``). A worker that
    fails gives the directory's lock up at once (its process may live on, as Spark's do).

    >>> import tempfile, sparktimely as st
    >>> st.execute_directly(checkpointing(lambda worker: recovery_of(worker).every,
    ...                                   tempfile.mkdtemp(), 5))
    5
    """
    def run(worker: W) -> Any:
        coordinator = enable_checkpoints(worker, checkpoint_dir, checkpoint_every)
        try:
            return func(worker)
        except BaseException:
            coordinator.close()
            raise
    return run


def create_directory(checkpoint_dir: Location) -> None:
    """Create ``checkpoint_dir`` (and its parents) if it is missing, before any worker starts:
    a :class:`RecoveryError` naming it if it cannot be a directory.

    >>> import tempfile, os
    >>> file = tempfile.mkstemp()[1]
    >>> try:
    ...     create_directory(os.path.join(file, "ck"))
    ... except RecoveryError as error:
    ...     print("cannot" in str(error))
    True
    """
    check_checkpoint_dir(checkpoint_dir)
    storage = Storage(checkpoint_dir)
    try:
        storage.makedirs(storage.root)
    except OSError as error:
        if storage.is_file(storage.root):
            raise RecoveryError(f"checkpoint directory {storage.where} is a file, not a "
                                f"directory") from None
        raise RecoveryError(f"checkpoint directory {storage.where}: cannot create it: "
                            f"{error.strerror or error}") from None


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
            raise RecoveryError(message[len(_RECOVERY_ERROR):]) from None   # told in full
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
        record = newest_commit(storage, storage.path(name, "commits"))
        if record is not None:
            epochs[unquote(name)] = None if record["complete"] else record["epoch"]
    return epochs


def checkpointed_workers(checkpoint_dir: Location, name: str) -> int | None:
    """How many workers wrote the newest checkpoint of the dataflow ``name`` in
    ``checkpoint_dir`` (None when there is none). Reads only.

    >>> import tempfile, sparktimely as st
    >>> directory = tempfile.mkdtemp()
    >>> def job(worker):
    ...     enable_checkpoints(worker, directory)
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="ones")
    >>> checkpointed_workers(directory, "ones"), st.execute(job, workers=2)
    (None, [None, None])
    >>> checkpointed_workers(directory, "ones")
    2
    """
    storage = Storage(checkpoint_dir)
    record = newest_commit(storage, storage.path(quote(name, safe=""), "commits"))
    return None if record is None else record["workers"]


def newest_commit(storage: Storage, commits: str) -> dict | None:
    """The newest commit record in the folder ``commits`` (None if it holds none)."""
    sequences = [s for s in map(records.sequence_of, storage.names(commits)) if s is not None]
    if not sequences:
        return None
    path = posixpath.join(commits, records.name(max(sequences)))
    return records.parse(bytes(storage.read(path)), path, max(sequences))


class Checkpoints(WorkerObserver):
    """One worker's checkpoint coordinator, watching the worker; see the module doc.

    The worker calls :meth:`dataflow_started` once each dataflow runs and
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
        """Take ``component`` (made while its dataflow is built) into the checkpoints.

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     def register(component):          # the operators' calls, watched
        ...         print(component.kind, component.name)
        ...         st.io.Checkpoints.register(coordinator, component)
        ...     coordinator.register = register
        ...     worker.dataflow(lambda scope: scope.to_stream([("k", 1)])
        ...                     .state_machine(lambda k, v, s: (False, [v])).probe(), name="n")
        >>> st.execute_directly(job)
        keyed StateMachine#1
        """
        self._components.setdefault(component.dataflow.index, []).append(component)

    def dataflow_started(self, dataflow: "Dataflow") -> None:
        """Resume ``dataflow`` from its newest checkpoint, or start it afresh (see the module
        doc); raises :class:`RecoveryError` if any worker finds the checkpoint unusable.

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="n")
        ...     return coordinator.started, [flow.name for flow in coordinator.flows]
        >>> st.execute_directly(job)
        (1, ['n'])
        """
        if self._building_companion:
            return
        components = self._components.pop(dataflow.index, [])
        if not dataflow.named:
            raise ValueError(f"worker.dataflow: with a checkpoint directory every dataflow "
                             f"needs a name (dataflow {dataflow.index} has none): "
                             f"worker.dataflow(build, name=...)")
        if any(flow.name == dataflow.name for flow in self.flows):
            raise ValueError(f"worker.dataflow: a dataflow named {dataflow.name!r} was built "
                             f"already; with a checkpoint directory every dataflow needs a "
                             f"name of its own (its checkpoints are kept under it)")
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
        """Build ``flow``'s companion dataflow, which carries the coordinators' messages.

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="n")
        ...     return coordinator.flows[0].companion.name
        >>> st.execute_directly(job)
        'n checkpoints'
        """
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
             .flat_map(lambda m: [(w, m[1]) for w in range(peers)] if m[0] == ALL else [m])
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
        or not); True if anything happened.

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="n")
        ...     worker.run()                  # each step ends with after_step
        ...     return coordinator.after_step(False), coordinator.flows, coordinator.locked
        >>> st.execute_directly(job)
        (False, [], False)
        """
        now = time.monotonic()
        if worked and not any(flow.inbox for flow in self.flows):   # not just our messages
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        idle = 0.0 if self.idle_since is None else now - self.idle_since
        busy = False
        for flow in self.flows:
            busy = flow.step(now, idle) or busy
            if flow.outbox and flow.companion is not None:
                flow.companion.step()       # send now, not after the next step's operators
        running = [flow for flow in self.flows if not flow.finished()]
        if len(running) < len(self.flows):
            self.flows = running
            if not running:
                self.release_lock()
        return busy

    def acquire_lock(self) -> str | None:
        """Worker 0: hold the directory's lock (once per run); None, or why not.

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     other = st.io.Checkpoints(worker, coordinator.storage, 1)   # another run's
        ...     print(coordinator.acquire_lock(), coordinator.acquire_lock(), coordinator.locked)
        ...     print("held by another" in other.acquire_lock(), other.locked)
        ...     coordinator.release_lock()
        >>> st.execute_directly(job)
        None None True
        True False
        """
        if self.lock is None or self.locked:
            return None
        reason = self.lock.acquire()
        self.locked = reason is None
        return reason

    def release_lock(self) -> None:
        """Worker 0: give the directory's lock up, if it holds it (another run may take it).

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     other = st.io.Checkpoints(worker, coordinator.storage, 1)   # another run's
        ...     coordinator.acquire_lock()
        ...     coordinator.release_lock()
        ...     print(coordinator.locked, other.acquire_lock(), other.locked)
        ...     other.release_lock()
        >>> st.execute_directly(job)
        False None True
        """
        if self.lock is not None and self.locked:
            self.lock.release()
            self.locked = False

    def close(self) -> None:
        """Give up checkpointing on this worker and release the directory's lock (a worker
        that fails mid-run in this process, as in tests; a dead process releases it anyway).

        >>> import tempfile, sparktimely as st
        >>> def job(worker):
        ...     coordinator = st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     coordinator.acquire_lock()
        ...     coordinator.close()
        ...     return coordinator.locked, coordinator.flows
        >>> st.execute_directly(job)
        (False, [])
        """
        self.release_lock()
        self.flows = []


class _Flow:
    """The checkpoints of one dataflow on one worker: the I/O around its
    :class:`~sparktimely.io._checkpoint_protocol.CheckpointProtocol`, which decides what
    happens when. This driver carries the protocol's messages through the companion dataflow,
    shows it the dataflow (the cut, the pointstamps) and the clock, and does what it asks:
    reads, snapshots, restores, releases and commits the components, writes the commit
    records."""

    def __init__(self, checkpoints: Checkpoints, dataflow: "Dataflow",
                 components: list[Component]) -> None:
        self.checkpoints = checkpoints
        self.storage = checkpoints.storage
        self.every = checkpoints.every
        self.worker = checkpoints.worker
        self.dataflow = dataflow
        self.components = components
        self.name = dataflow.name
        self.position = checkpoints.started + 1     # among the checkpointed dataflows
        self.inputs = InputEpochs(dataflow, {c.operator for c in components if c.kind == "source"},
                                  self.told_of_input)
        self.directory = self.storage.path(quote(self.name, safe=""))
        self.core = CheckpointProtocol(self.worker.index, self.worker.peers, self.every,
                                       STALL_SECONDS, self.name, self.storage.where)
        self.outbox: deque[tuple[int, Message]] = deque()     # (worker or ALL, message)
        self.inbox: deque[Message] = deque()
        self.capability: Any = None       # the companion's source: its capability, activator
        self.activate: Any = None
        self.closing = False
        self.companion: "Dataflow | None" = None
        self.restored: dict[str, Any] = {}            # the resumed states, decoded
        # the resumed checkpoint's inputs had sent up to (per input; for inputs not named)
        self.resumed_sent: tuple[dict[int, int], int] = ({}, -1)
        self.decision: Start | Fail | None = None     # worker 0's, until begin() acts on it
        # warnings about inputs resumed, held until every worker agreed to resume (None after)
        self.untold: list[tuple] | None = []

    def finished(self) -> bool:
        assert self.companion is not None
        return (self.core.phase is Phase.DONE and
                self.companion.index not in self.worker.installed_dataflows())

    # -- the protocol's actions -------------------------------------------------------------

    def perform(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Send(to, message):
                    self.outbox.append((to, message))
                    self.activate()
                case Start() | Fail():
                    self.decision = action
                case WriteSnapshot(sequence, epoch):
                    with self.writing(f"checkpoint {sequence} (of "
                                      + ("everything" if epoch is None else f"epoch {epoch}")
                                      + ")"):
                        files, latest = self.write_snapshot(sequence, epoch)
                    self.perform(self.core.snapshot_written(sequence, files, latest,
                                                            dict(self.inputs.sent)))
                case Release(limit):
                    for component in self.components:
                        component.release(limit)
                case WriteCommit():
                    with self.writing(f"the commit record of checkpoint {action.sequence}"):
                        self.write_commit(action)
                    self.perform(self.core.commit_written(action.sequence))
                case CommitComponents(epoch):
                    for component in self.components:
                        try:
                            component.commit(epoch)
                        except Exception as error:
                            raise self.failed(component, f"commit of epoch {epoch}",
                                              error) from error
                case Stalled(epoch, held):
                    self.warn_stalled(epoch, held)
                case Finish():
                    self.close_companion()

    @contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """Tell a failed write (a full disk, a directory turned read-only) as this
        dataflow's, naming ``what`` it wrote and the checkpoint directory."""
        try:
            yield
        except OSError as error:
            raise OSError(f"dataflow {self.name!r}, worker {self.worker.index}: writing "
                          f"{what} into checkpoint directory {self.storage.where} failed: "
                          f"{describe(error)}") from error

    def close_companion(self) -> None:
        self.closing = True
        self.activate()

    # -- resume -----------------------------------------------------------------------------

    def begin(self) -> None:
        """Build the companion, agree with the other workers on how to start, and start."""
        self.companion = self.checkpoints.build_companion(self)
        self.dataflow.on_drop(self.abandon)
        self.perform(self.examine())
        resumed = self.core.found[1]          # every worker found it, or all of them fail
        if resumed >= 0:
            self.inputs.resume_after(resumed, *self.resumed_sent)
        self.worker.step_while(lambda: self.decision is None)
        decision, self.decision = self.decision, None
        untold, self.untold = self.untold or [], None
        if isinstance(decision, Fail):
            self.close_companion()
            self.checkpoints.release_lock()
            raise RecoveryError(decision.reason)        # (no resume: nothing was dropped)
        assert decision is not None
        for warning in untold:
            logger.warning(*warning)
        self.start(decision)

    def told_of_input(self, input: str, epoch: int, moved: bool, last: int) -> None:
        resumed = self.inputs.resume_at - 1
        if moved:
            warning: tuple = (
                "dataflow %r, worker %d: %r sent records at epoch %d, later than it had "
                "sent when the checkpoint this run resumed from was taken, but not later "
                "than that checkpoint's epoch %d (another input or an operator's output had "
                "reached it); they are sent at epoch %d", self.name, self.worker.index,
                input, epoch, resumed, resumed + 1)
        else:
            warning = (
                "dataflow %r, worker %d: %r sent records at epoch %d, which the checkpoint "
                "this run resumed from (of epoch %d) already holds; they are dropped, as is "
                "what it sends at any epoch up to %d, the last it had sent records at (a "
                "resumed run continues after that: send new records at later epochs)",
                self.name, self.worker.index, input, epoch, resumed, last)
        if self.untold is None:
            logger.warning(*warning)
        else:
            self.untold.append(warning)

    def examine(self) -> list[Action]:
        """Read and check what this worker needs to resume (reads only); tell the protocol."""
        where = self.storage.where
        try:
            reason = self.checkpoints.acquire_lock()
        except OSError as error:
            return self.core.examined(error=f"checkpoint directory {where} cannot be written "
                                            f"(this run's lock file): {error}")
        try:
            if reason is not None:
                raise RecoveryError(f"checkpoint directory {where} is in use by another run: "
                                    f"{reason}; two runs cannot write one directory at once")
            record = self.newest_record()
            if record is None:
                return self.core.examined()
            self.check_program(record)
            self.restored = self.read_states(record)
            self.resumed_sent = records.inputs_sent(record, self.worker.index,
                                                    self.worker.peers)
            return self.core.examined(record["sequence"], record["epoch"])
        except (RecoveryError, records.RecordError) as error:
            return self.core.examined(error=str(error))
        except OSError as error:           # a file unreadable, a directory in its place
            return self.core.examined(error=f"checkpoint directory {where} cannot be read "
                                            f"to resume from: {error}")

    def newest_record(self) -> dict | None:
        record = newest_commit(self.storage, posixpath.join(self.directory, "commits"))
        if record is None:
            self.check_not_replaced()
        return record

    def check_not_replaced(self) -> None:
        """A dataflow with no checkpoint of its own starts afresh, unless the directory
        holds checkpoints of another dataflow in its place in the program (any, for the
        first; one whose records say it was the program's dataflow number ``position``,
        for a later one): then this program renamed or replaced it, and starting afresh
        would repeat the output it had given (RecoveryError)."""
        for quoted in self.storage.names(self.storage.root):
            other = unquote(quoted)
            if quoted.startswith(("_", ".")) or other == self.name:
                continue
            record = newest_commit(self.storage, self.storage.path(quoted, "commits"))
            if record is None:
                continue
            if self.position == 1:
                raise RecoveryError(
                    f"checkpoint directory {self.storage.where}: it holds checkpoints of "
                    f"dataflow {other!r}, not of this program's first dataflow {self.name!r}")
            if record.get("position") == self.position:
                raise RecoveryError(
                    f"checkpoint directory {self.storage.where}: it holds checkpoints of "
                    f"dataflow {other!r}, the program's dataflow number {self.position}, "
                    f"which is {self.name!r} in this program: a renamed or replaced dataflow "
                    f"would start afresh and repeat its output (keep its name, or use "
                    f"another checkpoint directory)")

    def check_program(self, record: dict) -> None:
        """Raise :class:`RecoveryError` naming the first difference between the checkpointed
        program and this one."""
        records.check_program(record, f"checkpoint of dataflow {self.name!r} in "
                                      f"{self.storage.where}", self.name,
                              [op.name for op in self.dataflow.operators],
                              [[c.name, c.kind] for c in self.components])

    def read_states(self, record: dict) -> dict[str, Any]:
        """The decoded state of each component, as this worker resumes it."""
        old, peers, index = record["workers"], self.worker.peers, self.worker.index
        files = records.files_by_component(record)
        states: dict[str, Any] = {}
        for component in self.components:
            if component.kind == "keyed":
                # At another worker count every file is read: an operator's state need not
                # live where its routes point (active_between holds updates wherever they
                # arrived), so no file can be skipped by its writer's index.
                writers = [index] if old == peers else list(range(old))
            elif component.kind == "sink":
                writers = [w for w in range(old) if w == index or handed_over(w, peers, index)]
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
        records.check_file(data, meta, full)
        return from_ipc(data)

    def start(self, start: Start) -> None:
        """Restore the components (when resuming) and start them after the resumed epoch."""
        for component in self.components:
            state = self.restored.get(component.name)
            try:
                if state is not None:
                    component.restore(state)
            except Exception as error:
                raise self.failed(component, f"restore of epoch {start.first - 1}",
                                  error) from error
        self.restored = {}
        for component in self.components:
            try:
                component.start(start.first, start.limit)
            except Exception as error:
                raise self.failed(component, f"start at epoch {start.first}", error) from error
        if self.worker.index == 0:
            self.clean(start.sequence)

    def clean(self, sequence: int) -> None:
        """Worker 0, at the start and after each commit (of checkpoint ``sequence``): remove
        what crashed runs left (temporary files, checkpoints never committed) and checkpoints
        older than the :data:`KEEP` newest."""
        storage = self.storage
        commits = posixpath.join(self.directory, "commits")
        checkpoints = posixpath.join(self.directory, "checkpoints")
        storage.makedirs(commits)
        storage.makedirs(checkpoints)
        for name in storage.names(commits):
            number = records.sequence_of(name)
            if name.startswith(TEMPORARY_PREFIX) or (
                    number is not None and number <= sequence - KEEP):
                storage.delete(posixpath.join(commits, name))
        for name in storage.names(checkpoints):
            if name.isdigit() and not sequence - KEEP < int(name) <= sequence:
                storage.delete_dir(posixpath.join(checkpoints, name))

    def abandon(self) -> None:
        """The dataflow was dropped: stop checkpointing it (no final checkpoint), unless
        it had completed: then its last checkpoint, which makes its last epochs' output
        visible, still comes."""
        if self.dataflow.running:
            self.perform(self.core.dropped())

    # -- running ----------------------------------------------------------------------------

    def step(self, now: float, idle: float) -> bool:
        """Take the messages in, then let the protocol see the dataflow; True if anything
        happened. ``idle``: how long this worker has had nothing else to do."""
        busy = bool(self.inbox)
        while self.inbox:
            self.perform(self.core.receive(self.inbox.popleft()))
        if self.decision is None:             # begin() has started the components
            self.perform(self.core.tick(now, idle, self))
            if self.core.phase is Phase.RUNNING and self.checkpoints.lock is not None:
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

    def warn_stalled(self, epoch: int, held: Any) -> None:
        """Say that the gates open for good: nothing moved while they held ``epoch``, with the
        pointstamps ``held``; name the operators holding earlier times."""
        names = {port.location: op.name for op in self.dataflow.operators
                 for port in op.inputs + op.outputs}
        holders = sorted({f"{names.get(location, location)!s} at {list(times)}"
                          for location, times in enumerate(held)
                          if any(root_epoch(t) <= epoch for t in times)})
        logger.warning(
            "dataflow %r: nothing moved for %.0f s while its stateful operators and sinks "
            "waited at checkpoint epoch %d; %s hold%s earlier times, waiting for later input "
            "maybe. Letting every operator through: no more checkpoints until the dataflow "
            "completes.", self.name, self.core.stall_seconds, epoch,
            ", ".join(holders) or "none", "s" if len(holders) == 1 else "")

    def failed(self, component: Component, what: str, error: Exception,
               where: str = "") -> OperatorError:
        """The error telling that ``component``'s part in ``what`` raised ``error``."""
        kind = "operator" if component.kind == "keyed" else component.kind
        return OperatorError(f"dataflow {self.name!r}: the {what} of {kind} "
                             f"{component.name!r}{where} raised {describe(error)}")

    def write_snapshot(self, sequence: int, epoch: int | None) -> tuple[dict, int]:
        """Write this worker's part of checkpoint ``sequence`` (of ``epoch``; None: of
        everything); its files' entries for the commit record, and the latest epoch its
        components saw."""
        storage, index = self.storage, self.worker.index
        relative = f"checkpoints/{sequence:012d}"
        directory = posixpath.join(self.directory, relative)
        storage.makedirs(directory)
        files = {}
        for component in self.components:
            state = None
            try:
                state = component.snapshot(epoch)
                if isinstance(component, KeyedState):
                    table = encode_keyed(state, component.route)
                else:
                    table = encode_partitions(state)
            except Exception as error:
                where = unpicklable_entry(state, "key" if component.kind == "keyed"
                                          else "partition")
                raise self.failed(component, f"checkpoint of epoch {epoch}", error,
                                  where) from error
            data = to_ipc(table)
            name = f"{quote(component.name, safe='')}.w{index:05d}.arrow"
            storage.write(posixpath.join(directory, name), data)
            files[f"{relative}/{name}"] = records.file_entry(data, index, component.name)
        storage.sync(directory)
        storage.sync(posixpath.dirname(directory))
        return files, max([self.inputs.latest()] + [c.max_epoch for c in self.components])

    def write_commit(self, commit: WriteCommit) -> None:
        """Worker 0: every worker's files are durable; write the commit record."""
        record = records.build(self.name, commit.sequence, commit.epoch, commit.sent,
                               commit.final,
                               self.worker.peers, self.every,
                               [op.name for op in self.dataflow.operators],
                               [[c.name, c.kind] for c in self.components],
                               [report.files for report in commit.reports], self.position)
        commits = posixpath.join(self.directory, "commits")
        self.storage.write_atomic(posixpath.join(commits, records.name(commit.sequence)),
                                  records.serialize(record))
        self.clean(commit.sequence)
