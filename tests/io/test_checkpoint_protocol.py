"""The checkpoint protocol alone: 1 to 4 simulated workers, hypothesis-generated steps and
delivery orders, checked for safety and liveness.

The simulation keeps the truth the workers only see parts of: the true cut (the latest root
epoch complete everywhere), which can pass no worker's gate limit (a gated operator holds the
later epochs back) nor, when ``stuck_at`` is set, epoch ``stuck_at`` while any gate is closed
(an operator holds that epoch open until it sees later input); each worker's view of the cut,
which lags the truth and only advances; and the latest epoch each worker's components saw
(never past its gates). Messages travel FIFO per sender and receiver, in any order between
channels; snapshots and commit records are written at random later points; the clock moves
and workers are idle or not as hypothesis chooses.

Safety, checked at every action:

- a worker snapshots epoch ``e`` only when its view of the cut is ``>= e`` (every epoch up
  to ``e`` is complete everywhere: it has sealed ``e``) and its gates are at ``<= e`` (its
  operators saw nothing later); the last snapshot only once its view is infinite;
- a commit record of ``e`` holds one report per worker, each of a snapshot so taken for
  that checkpoint, and the true cut is ``>= e``; records are numbered one after the other,
  their epochs increase (multiples of ``checkpoint_every``), and after the last one (the
  dataflow complete) there is none;
- gates only open, and a worker's gates are never more than ``checkpoint_every`` epochs past
  its latest snapshot (or the resumed epoch);
- components commit an epoch only once its record is written, in increasing order;
- every gate opens for good only when every worker answered it had been idle for the stall
  limit, worker 0's pointstamps were unchanged that long, and no checkpoint was under way;
  after that, no periodic checkpoint is asked for.

Liveness: once the true cut can reach completion, every message is delivered, every write
completes and the clock moves on, every worker finishes, after exactly one last commit.
"""
from __future__ import annotations

import math
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as strategies

from sparktimely.io._checkpoint_protocol import (
    ALL, Checkpoint, CheckpointProtocol, CommitComponents, Fail, Finish, IdleAnswer, IdleQuery,
    Phase, Release, Send, Stalled, Start, Ungate, WriteCommit, WriteSnapshot)

STALL = 10.0
INF = math.inf
HOLD_ALL = -1                    # the gates before the components start


def above(limit):
    """A gate limit as a number (None: every epoch passes)."""
    return INF if limit is None else limit


class View:
    def __init__(self, cut, pointstamps):
        self._cut, self._pointstamps = cut, pointstamps

    def cut(self):
        return self._cut

    def pointstamps(self):
        return self._pointstamps


class Worker:
    def __init__(self, index, peers, every, examination):
        self.index = index
        self.core = CheckpointProtocol(index, peers, every, STALL, "flow", "directory")
        self.examination = examination      # (sequence, epoch, error) it finds
        self.limit = HOLD_ALL               # its gates (None: open for good)
        self.sealed = examination[1]        # the epoch of its latest snapshot, or resumed
        self.view = -1                      # its view of the cut
        self.latest = -1                    # the latest epoch its components saw
        self.writing: WriteSnapshot | None = None
        self.snapshots = {}                 # sequence -> (epoch, view, limit) when taken
        self.committed = []                 # epochs its components committed
        self.outcome: Start | Fail | None = None
        self.finished = 0


class Simulation:
    def __init__(self, examinations, every, last=0, stuck_at=None):
        self.peers = len(examinations)
        self.every = every
        self.last = last                    # the last epoch with input
        self.stuck_at = stuck_at
        self.workers = [Worker(i, self.peers, every, examination)
                        for i, examination in enumerate(examinations)]
        self.channels = {(a, b): deque() for a in range(self.peers) for b in range(self.peers)}
        self.truth = -1
        self.clock = 0.0
        self.motion = 0                     # pointstamps moved without the cut moving
        self.moved_at = 0.0                 # when worker 0's pointstamps last changed
        self.answers = {}                   # idle answers worker 0 got to its question
        self.in_flight = None               # the checkpoint worker 0 asked for, uncommitted
        self.ungated = False
        self.committing: WriteCommit | None = None
        self.records: list[WriteCommit] = []
        sequence, epoch, _ = examinations[0]
        self.resumed = (sequence, epoch)
        for worker in self.workers:
            sequence, epoch, error = worker.examination
            self.perform(worker, worker.core.examined(sequence, epoch, error))

    # -- the truth ---------------------------------------------------------------------------

    def cap(self):
        """How far the true cut can go now."""
        gates = min(above(worker.limit) for worker in self.workers)
        if self.stuck_at is not None and gates != INF:
            gates = min(gates, self.stuck_at - 1)
        return gates

    def pointstamps(self):
        return (self.workers[0].view, self.motion)

    # -- operations --------------------------------------------------------------------------

    def deliver(self, sender, receiver):
        channel = self.channels[(sender, receiver)]
        if channel:
            message = channel.popleft()
            if receiver == 0 and isinstance(message, IdleAnswer):
                self.answers[message.worker] = message.idle
            worker = self.workers[receiver]
            self.perform(worker, worker.core.receive(message))

    def deliver_one(self, choice):
        """The next message of some channel (FIFO per sender and receiver)."""
        pairs = [pair for pair, channel in self.channels.items() if channel]
        if pairs:
            self.deliver(*pairs[choice % len(pairs)])

    def drain(self):
        """Deliver every message, and those they cause."""
        while any(self.channels.values()):
            for pair, channel in self.channels.items():
                while channel:
                    self.deliver(*pair)

    def tick(self, index, idle):
        worker = self.workers[index]
        view = View(worker.view, self.pointstamps() if index == 0 else None)
        self.perform(worker, worker.core.tick(self.clock, idle, view))

    def observe(self, index, choice):
        """Worker ``index``'s view of the cut advances towards the truth."""
        worker = self.workers[index]
        if worker.view == INF:
            return
        options = [e for e in range(worker.view + 1, self.last + 1) if e <= self.truth]
        options += [INF] if self.truth == INF else []
        if options:
            self.see(worker, options[choice % len(options)])

    def see(self, worker, cut):
        before = self.pointstamps()
        worker.view = cut
        if self.pointstamps() != before:
            self.moved_at = self.clock

    def advance(self, choice):
        """The true cut advances, as far as the gates let it."""
        options = self.reachable()
        if options:
            self.truth = options[choice % len(options)]

    def reachable(self):
        """The true cuts reachable from here."""
        if self.truth == INF:
            return []
        cap = self.cap()
        options = [e for e in range(self.truth + 1, self.last + 1) if e <= cap]
        return options + [INF] if cap >= self.last else options

    def work(self, index, choice):
        """Worker ``index``'s components see later input (up to its gates)."""
        worker = self.workers[index]
        bound = min(above(worker.limit), self.last)
        options = list(range(worker.latest + 1, int(bound) + 1))
        if options:
            worker.latest = options[choice % len(options)]
        self.motion += 1
        self.moved_at = self.clock

    def wait(self, seconds):
        self.clock += seconds

    def write(self, index):
        worker = self.workers[index]
        if worker.writing is not None:
            sequence = worker.writing.sequence
            worker.writing = None
            self.perform(worker, worker.core.snapshot_written(
                sequence, {f"w{index}/{sequence}": index}, worker.latest,
                sent={0: worker.latest - index % 2, index + 1: worker.latest}))

    def write_one(self, choice):
        """Some worker's snapshot becomes durable."""
        writing = [worker.index for worker in self.workers if worker.writing is not None]
        if writing:
            self.write(writing[choice % len(writing)])

    def commit(self):
        commit = self.committing
        if commit is not None:
            self.committing = None
            self.records.append(commit)
            self.in_flight = None
            worker = self.workers[0]
            self.perform(worker, worker.core.commit_written(commit.sequence))

    # -- the actions, checked ----------------------------------------------------------------

    def perform(self, worker, actions):
        for action in actions:
            getattr(self, "do_" + type(action).__name__)(worker, action)

    def do_Send(self, worker, action: Send):
        message = action.message
        if isinstance(message, Checkpoint):
            assert worker.index == 0 and self.in_flight is None, "one checkpoint at a time"
            assert message.epoch is None or not self.ungated, "a periodic checkpoint ungated"
            self.in_flight = message
        elif isinstance(message, IdleQuery):
            self.answers = {}
        elif isinstance(message, Ungate):
            assert len(self.answers) == self.peers and min(self.answers.values()) >= STALL
            assert self.clock - self.moved_at >= STALL, "pointstamps moved meanwhile"
            assert self.in_flight is None, "ungated while a checkpoint is under way"
            self.ungated = True
        targets = range(self.peers) if action.to == ALL else [action.to]
        for target in targets:
            self.channels[(worker.index, target)].append(message)

    def do_Start(self, worker, action: Start):
        sequence, epoch, _ = worker.examination
        assert worker.outcome is None and worker.limit == HOLD_ALL
        first = epoch + 1
        assert action == Start(sequence, first, -(-first // self.every) * self.every)
        worker.outcome = action
        worker.limit = action.limit

    def do_Fail(self, worker, action: Fail):
        assert worker.outcome is None
        worker.outcome = action

    def do_WriteSnapshot(self, worker, action: WriteSnapshot):
        assert worker.writing is None and action.sequence not in worker.snapshots
        epoch = action.epoch
        if epoch is None:
            assert worker.view == INF == self.truth, "the last snapshot before completion"
        else:
            assert worker.view >= epoch, f"worker {worker.index} has not sealed epoch {epoch}"
            assert worker.limit is not None and worker.limit <= epoch, (
                f"worker {worker.index}'s operators saw epochs up to {worker.limit} > {epoch}")
            worker.sealed = epoch
        worker.snapshots[action.sequence] = (epoch, worker.view, worker.limit)
        worker.writing = action

    def do_Release(self, worker, action: Release):
        assert above(action.limit) >= above(worker.limit), "a gate closed again"
        assert action.limit is None or action.limit <= worker.sealed + self.every, (
            f"worker {worker.index}'s gates at {action.limit}, its snapshot at {worker.sealed}")
        worker.limit = action.limit

    def do_WriteCommit(self, worker, action: WriteCommit):
        assert worker.index == 0 and self.committing is None
        previous = self.records[-1] if self.records else None
        sequence, epoch = (previous.sequence, previous.epoch) if previous else self.resumed
        assert previous is None or not previous.final, "a record after the last"
        assert action.sequence == sequence + 1
        assert [report.worker for report in action.reports] == list(range(self.peers))
        for report in action.reports:
            assert report.sequence == action.sequence
            assert report.files == {f"w{report.worker}/{action.sequence}": report.worker}
            taken, view, limit = self.workers[report.worker].snapshots[action.sequence]
            assert taken == (None if action.final else action.epoch)
        if action.final:
            assert self.truth == INF
            assert action.epoch == max([epoch] + [report.latest for report in action.reports])
        else:
            assert action.epoch > epoch and action.epoch % self.every == 0
            assert self.truth >= action.epoch, "a record of an epoch not complete everywhere"
        assert action.sent == tuple({i: min(action.epoch, had) for i, had in r.sent.items()}
                                    for r in action.reports)
        self.committing = action

    def do_CommitComponents(self, worker, action: CommitComponents):
        assert action.epoch in [record.epoch for record in self.records], "committed unwritten"
        assert not worker.committed or worker.committed[-1] <= action.epoch
        worker.committed.append(action.epoch)

    def do_Stalled(self, worker, action: Stalled):
        assert worker.index == 0 and action.held == self.pointstamps()

    def do_Finish(self, worker, action: Finish):
        assert worker.finished == 0 and worker.core.phase is Phase.DONE
        worker.finished += 1

    # -- to the end --------------------------------------------------------------------------

    def busy(self):
        return (any(self.channels.values()) or self.committing is not None
                or any(worker.writing is not None for worker in self.workers))

    def settle(self, rounds=200):
        """Let the truth go as far as it can, every view follow, time pass with every worker
        idle, and every message and write complete, until every worker is done."""
        for _ in range(rounds):
            if all(worker.core.phase is Phase.DONE for worker in self.workers) and not self.busy():
                return
            self.truth = (self.reachable() or [self.truth])[-1]
            for worker in self.workers:
                self.see(worker, self.truth)
            self.wait(STALL + 1)
            for worker in self.workers:
                self.tick(worker.index, 2 * STALL)
            while self.busy():
                self.drain()
                for worker in self.workers:
                    self.write(worker.index)
                self.commit()
        raise AssertionError("the workers did not finish")


# Operations: a kind (the busy ones drawn more often) and a choice (whose worker, which
# channel or write, how far).
OPERATIONS = strategies.tuples(
    strategies.sampled_from(["deliver"] * 5 + ["tick"] * 4 + ["observe"] * 2 + ["advance"] * 2
                            + ["work", "wait", "write", "write", "commit"]),
    strategies.integers(0, 100), strategies.integers(0, 100))
WAITS = [0.5, 1.0, STALL / 2, STALL + 1]
IDLE = [0.0, STALL / 2, 2 * STALL]


@strategies.composite
def runs(draw):
    peers = draw(strategies.integers(1, 4))
    every = draw(strategies.integers(1, 3))
    last = draw(strategies.integers(0, 8))
    stuck_at = draw(strategies.none() | strategies.integers(0, last))
    sequence = draw(strategies.integers(0, 3))
    epoch = -1 if sequence == 0 else draw(strategies.integers(0, last + 2))
    operations = draw(strategies.lists(OPERATIONS, min_size=100, max_size=400))
    return peers, every, last, stuck_at, (sequence, epoch), operations


@settings(max_examples=300, deadline=None)
@given(runs())
def test_commits_hold_only_sealed_epochs_and_every_worker_finishes_after_one_last(run):
    peers, every, last, stuck_at, (sequence, epoch), operations = run
    simulation = Simulation([(sequence, epoch, None)] * peers, every, last, stuck_at)
    for kind, choice, other in operations:
        worker = choice % peers
        if kind == "deliver":
            simulation.deliver_one(choice)
        elif kind == "tick":
            simulation.tick(worker, IDLE[other % len(IDLE)])
        elif kind in ("observe", "work"):
            getattr(simulation, kind)(worker, other)
        elif kind == "advance":
            simulation.advance(choice)
        elif kind == "wait":
            simulation.wait(WAITS[choice % len(WAITS)])
        elif kind == "write":
            simulation.write_one(choice)
        else:
            simulation.commit()
    simulation.settle()
    final = [record for record in simulation.records if record.final]
    assert len(final) == 1 and simulation.records[-1] is final[0]
    for worker in simulation.workers:
        assert worker.finished == 1 and worker.committed[-1] == final[0].epoch
        assert worker.limit is None, "the last snapshot opens every gate"


@settings(max_examples=200, deadline=None)
@given(strategies.lists(strategies.tuples(strategies.sampled_from([1, 2]),
                                          strategies.sampled_from([None, "bad", "worse"])),
                        min_size=1, max_size=4),
       strategies.integers(1, 3), strategies.lists(strategies.integers(0, 15), max_size=40))
def test_resume_starts_every_worker_alike_or_fails_every_one_with_the_first_reason(
        found, every, order):
    """Each worker found checkpoint 1 or 2 (of epoch ``3 * sequence``) or a reason it cannot
    resume; whatever the delivery order, every worker starts from the same checkpoint or
    every worker fails with the reason of the first worker that found one."""
    examinations = [(sequence, 3 * sequence, error) for sequence, error in found]
    simulation = Simulation(examinations, every)
    peers = len(found)
    for choice in order:
        simulation.deliver_one(choice)
    simulation.drain()
    outcomes = [worker.outcome for worker in simulation.workers]
    phases = {worker.core.phase for worker in simulation.workers}
    failing = [(index, error) for index, (_, error) in enumerate(found) if error is not None]
    if failing:
        index, error = failing[0]
        reason = error if index == 0 else f"{error} (found by worker {index})"
        assert outcomes == [Fail(reason)] * peers and phases == {Phase.DONE}
    elif len({sequence for sequence, _ in found}) > 1:
        reasons = {outcome.reason for outcome in outcomes}
        assert len(reasons) == 1 and "different newest checkpoints" in reasons.pop()
        assert phases == {Phase.DONE}
    else:
        assert all(isinstance(outcome, Start) for outcome in outcomes)     # checked in do_Start
        assert phases == {Phase.RUNNING}


def test_a_worker_whose_view_lags_snapshots_only_once_it_sees_the_epoch():
    simulation = Simulation([(0, -1, None)] * 2, every=1, last=3)
    simulation.drain()
    assert all(isinstance(worker.outcome, Start) for worker in simulation.workers)
    simulation.advance(0)                      # the truth reaches epoch 0
    simulation.observe(0, 0)                   # worker 0 sees it, worker 1 not yet
    simulation.tick(0, 0.0)
    assert simulation.in_flight == Checkpoint(1, 0)
    simulation.drain()
    simulation.tick(1, 0.0)
    assert simulation.workers[1].writing is None
    simulation.observe(1, 0)
    simulation.tick(1, 0.0)
    assert simulation.workers[1].writing == WriteSnapshot(1, 0)


def test_after_a_stall_every_gate_opens_and_only_the_last_checkpoint_comes():
    """An operator holds epoch 0 open: the true cut cannot pass -1 while any gate is closed.
    After the stall limit with every worker idle, worker 0 opens every gate for good."""
    simulation = Simulation([(0, -1, None)] * 3, every=1, last=4, stuck_at=0)
    simulation.settle()
    assert [(record.epoch, record.final) for record in simulation.records] == [(-1, True)]
    assert simulation.ungated
