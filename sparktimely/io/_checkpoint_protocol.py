"""The checkpoint protocol between workers, as a pure state machine.

One :class:`CheckpointProtocol` per worker and checkpointed dataflow decides what the worker
tells the others and what its driver (:mod:`sparktimely.io.checkpoints`) must do. It does no
I/O and reads no clock, like :mod:`sparktimely.progress.exchange`: events go in, actions come
out; the driver carries the messages (through the dataflow's companion dataflow, FIFO per
sender and receiver), reads and writes the files and drives the components.

Events in:

- :meth:`~CheckpointProtocol.examined`: what this worker found when it examined the newest
  checkpoint (the one it would resume from, or why it cannot).
- :meth:`~CheckpointProtocol.receive`: a message from a worker (this one included).
- :meth:`~CheckpointProtocol.tick`: the end of a step: the clock, how long this worker has
  had nothing to do, and a :class:`View` of its dataflow, asked only what the protocol needs.
- :meth:`~CheckpointProtocol.snapshot_written`, :meth:`~CheckpointProtocol.commit_written`:
  a write asked for is durable.
- :meth:`~CheckpointProtocol.dropped`: the dataflow was dropped.

Actions out: :class:`Send`, :class:`Start`, :class:`Fail`, :class:`WriteSnapshot`,
:class:`Release`, :class:`WriteCommit`, :class:`CommitComponents`, :class:`Stalled`,
:class:`Finish`.

The rules:

1. **Resume.** Every worker sends its :class:`Verdict` to worker 0, which decides for all
   (:class:`Decision`): the first refusal in worker order, a refusal if the workers found
   different newest checkpoints, or the checkpoint to resume from. Each worker then starts
   after that checkpoint's epoch, its gates at the next multiple of ``every`` (the *hold*),
   or fails.
2. **Checkpoints.** When worker 0 sees every epoch up to the hold complete (its view of the
   *cut*), it asks for checkpoint ``sequence + 1`` of the latest complete multiple ``e`` of
   ``every``. A worker writes its snapshot once its own view of the cut reaches ``e`` (every
   epoch ``<= e`` complete everywhere, and its gates showed nothing later), then releases its
   gates to ``e + every`` and reports. With every report in, worker 0 writes the commit
   record and then tells everyone, who commit their components at ``e``. One checkpoint is
   under way at a time.
3. **Completion.** Once worker 0's cut is infinite (the dataflow completed), the last
   checkpoint (epoch None, taken when each worker's cut is infinite too) holds the latest
   epoch any component saw; its commit finishes every worker.
4. **Stalls.** An operator may hold an early epoch open until it sees later input, which the
   gates withhold. If worker 0's pointstamps stay unchanged for ``stall_seconds`` while it
   waits for the hold, it asks every worker how long it has been idle; if all were idle that
   long and nothing moved meanwhile, every gate opens for good (:class:`Ungate`) and only the
   last checkpoint comes. (No checkpoint is under way then: asking for one needs a cut that
   moved, so pointstamps that moved.)

>>> from types import SimpleNamespace
>>> view = SimpleNamespace(cut=lambda: 0, pointstamps=lambda: ())
>>> core = CheckpointProtocol(index=0, peers=1, every=1, stall_seconds=10.0)
>>> core.examined(sequence=0, epoch=-1)
[Send(to=0, message=Verdict(worker=0, sequence=0, error=None))]
>>> core.receive(Verdict(worker=0, sequence=0))
[Send(to=-1, message=Decision(sequence=0, error=None))]
>>> core.receive(Decision(sequence=0))
[Start(sequence=0, first=0, limit=0)]
>>> core.tick(now=0.0, idle=0.0, view=view)
[Send(to=-1, message=Checkpoint(sequence=1, epoch=0))]
>>> core.receive(Checkpoint(sequence=1, epoch=0)), core.tick(now=0.1, idle=0.0, view=view)
([], [WriteSnapshot(sequence=1, epoch=0)])
>>> core.snapshot_written(1, files={}, latest=0, sent={3: 0})
[Release(limit=1), Send(to=0, message=Report(sequence=1, worker=0, files={}, latest=0, sent={3: 0}))]
>>> [commit] = core.receive(Report(sequence=1, worker=0, files={}, latest=0, sent={3: 0}))
>>> commit.sequence, commit.epoch, commit.final, commit.sent, len(commit.reports)
(1, 0, False, ({3: 0},), 1)
>>> core.commit_written(1)
[Send(to=-1, message=Committed(sequence=1, epoch=0, final=False))]
>>> core.receive(Committed(sequence=1, epoch=0, final=False))
[CommitComponents(epoch=0)]
"""
from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, Union

ALL = -1
"""The target of a message to every worker."""

STALL_CHECK_SECONDS = 1.0
"""How often worker 0 looks at its pointstamps while it waits for the hold."""


# -- messages between workers (small and picklable: they travel between processes) ----------

@dataclass(frozen=True, slots=True)
class Verdict:
    """To worker 0: what ``worker`` found, the checkpoint it can resume (``sequence``, 0 for
    none) or why it cannot (``error``)."""
    worker: int
    sequence: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """From worker 0: resume from checkpoint ``sequence`` (0: start afresh), or fail with
    ``error``."""
    sequence: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """From worker 0: take checkpoint ``sequence`` of root epoch ``epoch`` (None: the last,
    of the completed dataflow)."""
    sequence: int
    epoch: int | None


@dataclass(frozen=True, slots=True)
class Report:
    """To worker 0: ``worker`` wrote its part of checkpoint ``sequence``: ``files`` (path ->
    the commit record's entry); ``latest`` is the latest epoch its components saw and
    ``sent`` the latest each of its inputs (by operator index) sent records at, over every
    run (an input not named: none)."""
    sequence: int
    worker: int
    files: dict
    latest: int
    sent: dict


@dataclass(frozen=True, slots=True)
class Committed:
    """From worker 0: the commit record of checkpoint ``sequence`` (of ``epoch``; ``final``:
    the last) is durable."""
    sequence: int
    epoch: int
    final: bool


@dataclass(frozen=True, slots=True)
class IdleQuery:
    """From worker 0: how long have you had nothing to do?"""


@dataclass(frozen=True, slots=True)
class IdleAnswer:
    """To worker 0: ``worker`` has had nothing to do for ``idle`` seconds."""
    worker: int
    idle: float


@dataclass(frozen=True, slots=True)
class Ungate:
    """From worker 0: open every gate for the rest of the run (see the module doc)."""


Message = Union[Verdict, Decision, Checkpoint, Report, Committed, IdleQuery, IdleAnswer, Ungate]


# -- actions for the driver ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to worker ``to`` (:data:`ALL`: to every worker, this one included)."""
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class Start:
    """Restore the components from checkpoint ``sequence`` (if not 0) and start them at root
    epoch ``first``, their gates at ``limit``."""
    sequence: int
    first: int
    limit: int


@dataclass(frozen=True, slots=True)
class Fail:
    """The checkpoint cannot be used: stop, raising ``reason``."""
    reason: str


@dataclass(frozen=True, slots=True)
class WriteSnapshot:
    """Write this worker's snapshot of ``epoch`` (None: of everything) for checkpoint
    ``sequence``; then call :meth:`CheckpointProtocol.snapshot_written`."""
    sequence: int
    epoch: int | None


@dataclass(frozen=True, slots=True)
class Release:
    """Let the gated components see inputs up to root epoch ``limit`` (None: all)."""
    limit: int | None


@dataclass(frozen=True, slots=True)
class WriteCommit:
    """Worker 0: write the commit record of checkpoint ``sequence`` of ``epoch`` from
    ``reports`` (in worker order), whose inputs had sent records up to the epochs ``sent``
    says (per worker, as its report, but none later than ``epoch``); then
    call :meth:`CheckpointProtocol.commit_written`."""
    sequence: int
    epoch: int
    final: bool
    reports: tuple[Report, ...]
    sent: tuple[dict, ...]


@dataclass(frozen=True, slots=True)
class CommitComponents:
    """The checkpoint of ``epoch`` is durable: commit the components (sinks publish)."""
    epoch: int


@dataclass(frozen=True, slots=True)
class Stalled:
    """Worker 0: nothing moved while the gates held ``epoch``; ``held`` is what the
    :class:`View` showed of the pointstamps (every gate opens now: say so)."""
    epoch: int
    held: Hashable


@dataclass(frozen=True, slots=True)
class Finish:
    """No more checkpoints of this dataflow: close the messages' dataflow."""


Action = Union[Send, Start, Fail, WriteSnapshot, Release, WriteCommit, CommitComponents,
               Stalled, Finish]


class View(Protocol):
    """What a worker sees of its dataflow, asked at a :meth:`~CheckpointProtocol.tick` only
    when needed."""

    def cut(self) -> float:
        """The latest root epoch complete on every worker, as far as this worker knows
        (infinity once the dataflow has completed)."""

    def pointstamps(self) -> Hashable:
        """Something that changes whenever any pointstamp moves (to see that nothing does)."""


class Phase(Enum):
    """Where a worker is in the protocol."""
    STARTING = "starting"       # examining, waiting for worker 0's decision
    RUNNING = "running"
    DONE = "done"               # finished, failed or dropped


@dataclass(slots=True)
class _Stall:
    """Worker 0: the pointstamps it saw unchanged ``since`` then, last looked at ``checked``."""
    held: Hashable
    since: float
    checked: float


@dataclass(slots=True)
class _Query:
    """Worker 0: the idle answers to its question, asked when the pointstamps were ``held``."""
    held: Hashable
    answers: dict[int, float] = field(default_factory=dict)


class CheckpointProtocol:
    """One worker's side of the checkpoint protocol for one dataflow (see the module doc).

    ``dataflow`` and ``where`` (the checkpoint directory) only name things in messages.
    """

    def __init__(self, index: int, peers: int, every: int, stall_seconds: float,
                 dataflow: str = "", where: str = "") -> None:
        self.index = index
        self.peers = peers
        self.every = every
        self.stall_seconds = stall_seconds
        self.dataflow = dataflow
        self.where = where
        self.phase = Phase.STARTING
        self.found: tuple[int, int] = (0, -1)   # the checkpoint examined: (sequence, epoch)
        self.sequence = 0                       # the last commit this worker knows of (0: none)
        self.epoch = -1                         # its epoch
        self.hold = 0                           # the gates' limit until the next checkpoint
        self.request: Checkpoint | None = None  # the checkpoint to take part in
        self.writing = False                    # its snapshot is being written
        self.ungated = False                    # every gate is open for good
        self.asked = False                      # worker 0 asked how long this one was idle
        # worker 0 only:
        self.verdicts: dict[int, Verdict] = {}
        self.in_flight: Checkpoint | None = None    # the checkpoint under way
        self.reports: dict[int, Report] = {}
        self.committing: WriteCommit | None = None  # its record, being written
        self.stall: _Stall | None = None
        self.query: _Query | None = None

    # -- events in ---------------------------------------------------------------------------

    def examined(self, sequence: int = 0, epoch: int = -1,
                 error: str | None = None) -> list[Action]:
        """This worker examined the newest checkpoint: it can resume checkpoint ``sequence``
        of ``epoch`` (0, -1: there is none), or not, because of ``error``."""
        self.found = (sequence, epoch)
        return [Send(0, Verdict(self.index, sequence, error))]

    def receive(self, message: Message) -> list[Action]:
        """Take in a message from a worker (FIFO per sender)."""
        match message:
            case Verdict():
                return self._verdict(message)
            case Decision():
                return self._decision(message)
            case Checkpoint():
                self.request = message
            case IdleQuery():
                self.asked = True               # answered at the next tick, with its idle time
            case IdleAnswer(worker, idle):
                assert self.query is not None, "worker 0 asked"
                self.query.answers[worker] = idle
            case Ungate():
                self.ungated = True
                return [Release(None)]
            case Report():
                return self._report(message)
            case Committed(sequence, epoch, final):
                if sequence > self.sequence:
                    self.sequence, self.epoch = sequence, epoch
                actions: list[Action] = [CommitComponents(epoch)]
                if final and self.phase is not Phase.DONE:
                    self.phase = Phase.DONE
                    actions.append(Finish())
                return actions
        return []

    def tick(self, now: float, idle: float, view: View) -> list[Action]:
        """The end of a step, at time ``now`` (seconds, monotonic); this worker has had nothing
        to do but checkpoint messages for ``idle`` seconds."""
        actions: list[Action] = []
        if self.asked:
            self.asked = False
            actions.append(Send(0, IdleAnswer(self.index, idle)))
        if self.phase is not Phase.RUNNING:
            return actions
        cut: float | None = None
        if self.index == 0:
            if self.query is not None and len(self.query.answers) == self.peers:
                actions += self._idle_answered(self.query, view)
            if self.in_flight is None:
                cut = view.cut()
                if cut == math.inf:
                    actions += self._ask(None)
                elif self.ungated:
                    pass
                elif cut >= self.hold:
                    actions += self._ask(int(cut) // self.every * self.every)
                else:
                    actions += self._watch_stall(now, view)
        request = self.request
        if request is not None and not self.writing:
            cut = view.cut() if cut is None else cut
            if cut == math.inf or (request.epoch is not None and cut >= request.epoch):
                self.writing = True
                actions.append(WriteSnapshot(request.sequence, request.epoch))
        return actions

    def snapshot_written(self, sequence: int, files: dict, latest: int,
                         sent: dict) -> list[Action]:
        """This worker's snapshot for checkpoint ``sequence`` is durable: ``files``,
        ``latest`` and ``sent`` as :class:`Report` has them."""
        request = self.request
        assert request is not None and self.writing and request.sequence == sequence
        self.request, self.writing = None, False
        limit = None if request.epoch is None or self.ungated else request.epoch + self.every
        return [Release(limit), Send(0, Report(sequence, self.index, files, latest, sent))]

    def commit_written(self, sequence: int) -> list[Action]:
        """Worker 0: the commit record of checkpoint ``sequence`` is durable."""
        commit = self.committing
        assert commit is not None and commit.sequence == sequence
        self.committing, self.in_flight = None, None
        self.sequence, self.epoch = commit.sequence, commit.epoch
        if not commit.final:
            self.hold = commit.epoch + self.every
        return [Send(ALL, Committed(commit.sequence, commit.epoch, commit.final))]

    def dropped(self) -> list[Action]:
        """The dataflow was dropped: no more checkpoints (not even the last)."""
        if self.phase is Phase.DONE:
            return []
        self.phase = Phase.DONE
        return [Finish()]

    # -- resume ------------------------------------------------------------------------------

    def _verdict(self, verdict: Verdict) -> list[Action]:
        self.verdicts[verdict.worker] = verdict
        if len(self.verdicts) < self.peers:
            return []
        return [Send(ALL, self._decide())]

    def _decide(self) -> Decision:
        """Worker 0: how every worker starts, from all the verdicts."""
        for worker, verdict in sorted(self.verdicts.items()):
            if verdict.error is not None:
                found = "" if worker == 0 else f" (found by worker {worker})"
                return Decision(error=verdict.error + found)
        sequences = sorted({verdict.sequence for verdict in self.verdicts.values()})
        if len(sequences) > 1:
            return Decision(error=f"checkpoint directory {self.where}: workers found different "
                                  f"newest checkpoints of dataflow {self.dataflow!r} "
                                  f"({sequences}); is another run writing it?")
        return Decision(sequences[0])

    def _decision(self, decision: Decision) -> list[Action]:
        if decision.error is not None:
            self.phase = Phase.DONE
            return [Fail(decision.error)]
        sequence, epoch = self.found
        assert sequence == decision.sequence, "every worker found this checkpoint"
        self.sequence, self.epoch = sequence, epoch
        first = epoch + 1
        self.hold = -(-first // self.every) * self.every
        self.phase = Phase.RUNNING
        return [Start(sequence, first, self.hold)]

    # -- checkpoints (worker 0) --------------------------------------------------------------

    def _ask(self, epoch: int | None) -> list[Action]:
        """Ask every worker for a checkpoint of ``epoch`` (None: the last)."""
        self.in_flight = Checkpoint(self.sequence + 1, epoch)
        self.stall = None
        return [Send(ALL, self.in_flight)]

    def _report(self, report: Report) -> list[Action]:
        self.reports[report.worker] = report
        if len(self.reports) < self.peers:
            return []
        request = self.in_flight
        assert request is not None, "reports answer a checkpoint under way"
        reports = tuple(self.reports[worker] for worker in range(self.peers))
        self.reports = {}
        assert all(r.sequence == request.sequence for r in reports)
        if request.epoch is None:
            epoch = max([self.epoch] + [report.latest for report in reports])
        else:
            epoch = request.epoch
        # What the inputs sent after epoch (before the snapshot) is not in it.
        sent = tuple({input: min(epoch, had) for input, had in report.sent.items()}
                     for report in reports)
        self.committing = WriteCommit(request.sequence, epoch, request.epoch is None, reports,
                                      sent)
        return [self.committing]

    # -- stalls (worker 0) -------------------------------------------------------------------

    def _watch_stall(self, now: float, view: View) -> list[Action]:
        """While the operators wait at the hold: if no pointstamp has moved for
        ``stall_seconds``, ask every worker how long it has been idle (a worker busy in one
        long operator call answers only afterwards, and not idle)."""
        stall = self.stall
        if self.query is not None or (stall is not None and
                                      now - stall.checked < STALL_CHECK_SECONDS):
            return []
        held = view.pointstamps()
        if stall is None or held != stall.held:
            self.stall = _Stall(held, now, now)
            return []
        stall.checked = now
        if now - stall.since < self.stall_seconds:
            return []
        self.query = _Query(held)
        return [Send(ALL, IdleQuery())]

    def _idle_answered(self, query: _Query, view: View) -> list[Action]:
        """Every worker answered: with every worker idle as long as nothing has moved, some
        operator holds a time up to the hold until it sees later input, which the gates
        withhold: let everything through and go on without periodic checkpoints."""
        self.query = None
        if min(query.answers.values()) < self.stall_seconds or query.held != view.pointstamps():
            self.stall = None                   # something is going on: watch again
            return []
        self.ungated = True
        return [Stalled(self.hold, query.held), Send(ALL, Ungate())]
