"""One worker of a job, in this process: from a peer list to a connected ``Worker`` and back.

``execute``'s forked workers and Spark's barrier tasks both go through :class:`WorkerSession`:

1. A :class:`Seat` is bound first: the worker's listening socket (kept open), its host group
   and the name it proposes for its group's shared memory; ``seat.address()`` is what the
   others must learn.
2. Everyone learns the same plan (one ``WorkerAddress`` per worker, ``comm.cluster``). The
   session joins the worker's host group (``_group.HostGroup``: the mesh, made by the group's
   first process) unless its supervisor did, and connects the worker to the others.
3. The ``Worker`` runs the job. A plan given as a function is asked for at the worker's first
   step (Spark's ``allGather``), so the dataflows are built, and a mistake in building them
   fails, before anyone waits for anyone.
4. Leaving normally tells every peer how many dataflows the worker built (``Worker.finish``)
   and says goodbye; leaving with an error records the failure for
   the host group (its other workers stop at their next park with it), drops every link and
   raises :class:`sparktimely.WorkerError` carrying the first failure.

An optional stall limit (:class:`StallWatch`) stops a worker that runs user code, or waits
outside the scheduler, for longer than the limit, naming where it is (faulthandler's stack).
"""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import socket
import tempfile
import threading
import time
import traceback as tb
from contextlib import contextmanager
from typing import Any, Callable, NoReturn, Sequence

from . import _warm
from ._group import GroupFailed, HostGroup
from .errors import PeerLostError, WorkerError, describe
from .comm import (PeerLost, WorkerAddress, build_allocator, connect_timeout, host_identity,
                   listen, sockets_forced)
from .comm.net import require_seconds
from .worker import Worker
from .shm import job_prefix

MEMORY_RESERVE = 16 << 20
"""Bytes of address space a worker sets aside and gives back when it fails, so that telling a
MemoryError (formatting its traceback, sending it to the supervisor) has room when the
memory the job filled is still held, as under an address-space limit."""


def check_stall_limit(stall_limit: object) -> None:
    """A ValueError naming the option unless ``stall_limit`` is None or a positive number
    of seconds (at most ``LONGEST_WAIT``).

    >>> check_stall_limit("5")
    Traceback (most recent call last):
    ValueError: stall_limit must be a positive number of seconds, got '5'
    """
    if stall_limit is not None:
        require_seconds(stall_limit, "stall_limit")


class Seat:
    """Where one worker is reached, known before its job is: a listening socket bound at
    once on ``host`` (any free port; all interfaces if ``host`` cannot be bound) and kept
    open, the worker's host group (``comm.host_identity()``, or one of its own when sockets
    are forced) and the shared-memory name it proposes should it be its group's first.
    Until the plan is known (the others have their seats too), this process warms up for
    the job (``_warm.start``: modules Arrow jobs load on first use, first calls into
    pyarrow), which ends before it connects or forks a worker.

    >>> seat = Seat("127.0.0.1", label="test")
    >>> address = seat.address()
    >>> (address.host, address.port > 0, address.label, address.mesh.startswith("sparktimely-"))
    ('127.0.0.1', True, 'test', True)
    >>> seat.close()
    """

    def __init__(self, host: str = "localhost", *, label: str = "",
                 force_sockets: bool | None = None) -> None:
        try:
            self.listener: socket.socket | None = listen(host)
        except OSError:
            self.listener = listen("0.0.0.0")
        self.host, self.label = host, label
        self.port = self.listener.getsockname()[1]
        self.group = host_identity()
        if sockets_forced(force_sockets):
            self.group += f"/{label or self.port}"          # a host of its own
        self.mesh = job_prefix()
        _warm.start()

    def address(self) -> WorkerAddress:
        return WorkerAddress(self.host, self.port, self.group, self.label, self.mesh)

    def release_listener(self) -> socket.socket | None:
        """The listener, now the caller's (a WorkerSession's or run_workers') to close."""
        listener, self.listener = self.listener, None
        return listener

    def close(self) -> None:
        _warm.stop()
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def group_of(plan: Sequence[WorkerAddress], index: int) -> list[int]:
    """The workers sharing memory with worker ``index`` (itself included), in index order.

    >>> plan = [WorkerAddress("a", 1, "x"), WorkerAddress("b", 2, "y"), WorkerAddress("a", 3, "x")]
    >>> group_of(plan, 2)
    [0, 2]
    """
    return [w for w, address in enumerate(plan) if address.group == plan[index].group]


def join_group(plan: Sequence[WorkerAddress], first_local: int, deadline: float,
               interrupt: Callable[[], None] | None = None) -> HostGroup | None:
    """This process's membership of the host group of worker ``first_local`` (its lowest
    worker), or None when the group is that worker alone."""
    members = group_of(plan, first_local)
    if len(members) == 1:
        return None
    first = plan[members[0]]
    creator = first_local == members[0]
    return HostGroup.join(first.mesh, len(members), creator, deadline,
                          f"worker {members[0]} ({first.label or first.address})", interrupt)


class _SessionAllocator:
    """The worker's allocator as the session sees it: connects when the plan is known (at
    once, or at the first step for a plan still to come), stops the worker once another
    worker of its host group failed, and tells the stall watch when it waits for others."""

    def __init__(self, session: WorkerSession) -> None:
        self._session = session
        self._inner: Any = None
        self._queued: list[tuple[int | None, tuple]] = []
        self.index, self.peers = session.index, session.peers
        self.waiting = False
        # the worker's hot calls; once connected they go straight to the transport
        self.send: Callable[[int, tuple], None] = self._send_queued
        self.broadcast: Callable[[tuple], None] = self._broadcast_queued
        self.receive: Callable[[], list[tuple[int, tuple]]] = self._receive_connecting
        self.flush: Callable[[], bool] = self._flush_connecting
        self.oversubscribed: Callable[[], bool] = lambda: False

    @property
    def transport(self) -> Any:
        """The comm allocator underneath (None until connected)."""
        return self._inner

    def connect(self) -> None:
        if self._inner is None:
            with self.waiting_for_others():
                inner = self._inner = self._session.connect()
            for target, message in self._queued:
                if target is None:
                    inner.broadcast(message)
                else:
                    inner.send(target, message)
            self._queued = []
            self.send, self.broadcast, self.receive = inner.send, inner.broadcast, inner.receive
            self.flush = inner.flush
            self.oversubscribed = inner.oversubscribed

    @contextmanager
    def waiting_for_others(self):
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False

    def _send_queued(self, target: int, message: tuple) -> None:
        self._queued.append((target, message))          # built before the plan was known

    def _broadcast_queued(self, message: tuple) -> None:
        self._queued.append((None, message))            # for every peer

    def _receive_connecting(self) -> list[tuple[int, tuple]]:
        self.connect()
        return self._inner.receive()

    def _flush_connecting(self) -> bool:
        self.connect()
        return self._inner.flush()

    def park(self, timeout: float | None) -> None:
        self.connect()
        with self.waiting_for_others():
            self._inner.park(timeout)
        self._session.check_group()

    def wake(self) -> None:
        """Make the current or next ``park`` return (from any thread)."""
        if self._inner is not None:
            self._inner.wake()

    def close(self) -> None:
        if self._inner is not None:
            with self.waiting_for_others():
                self._inner.close()

    def abort(self) -> None:
        if self._inner is not None:
            self._inner.abort()

    def wake_group(self) -> None:
        """Ring every other group member's doorbell, so a parked one sees a failure now."""
        endpoint = getattr(self._inner, "endpoint", None)
        if endpoint is not None:
            for other in range(endpoint.num_workers):
                if other != endpoint.index:
                    endpoint.wake(other)


class WorkerSession:
    """Worker ``index`` of the job laid out by ``plan``, in this process (see the module doc).

    ``plan`` is the peer list, or a function returning it (called at the worker's first
    step; ``peers`` then says how many workers there are). ``listener`` is this worker's
    listening socket (a seat's; needed when it has peers on other hosts), now the session's
    to close. ``group`` is the host group when a
    supervisor joined it for its workers; otherwise the session joins it itself. ``args``
    becomes ``worker.args``; ``timeout`` bounds connecting (default
    ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60 s); ``stall_limit`` (seconds) stops a worker that
    makes no progress for that long; ``peer_lost_grace`` is how long a worker that lost a
    remote peer waits for that peer's own account of its failure. ``supervised`` says that a
    supervisor process tells this worker's failure onwards and then kills it: a failing
    worker then keeps its connections open (``held``), so that remote workers hear of
    the failure itself before they see their connections to it drop.

    >>> with WorkerSession(0, [WorkerAddress("localhost", 0, "here")]) as worker:
    ...     captured = worker.dataflow(lambda scope: scope.to_stream([1, 2]).capture())
    ...     worker.run()
    >>> captured.extract()
    [(0, [1, 2])]
    """

    def __init__(self, index: int, plan: Sequence[WorkerAddress] | Callable[[], Sequence[WorkerAddress]],
                 listener: socket.socket | None = None, *, peers: int | None = None,
                 group: HostGroup | None = None, args: Sequence[str] = (),
                 timeout: float | None = None, stall_limit: float | None = None,
                 peer_lost_grace: float = 0.0, stall_dump: str | None = None,
                 supervised: bool = False) -> None:
        self.index = index
        self._plan_source = plan if callable(plan) else None
        self.plan: list[WorkerAddress] | None = None if callable(plan) else list(plan)
        if self.plan is not None:
            peers = len(self.plan)
        elif peers is None:
            raise ValueError("a plan still to come needs the number of peers")
        self.peers: int = peers
        if not 0 <= index < peers:
            raise ValueError(f"worker index {index} is not in 0..{peers - 1}")
        check_stall_limit(stall_limit)
        self.listener, self.args = listener, list(args)
        self.timeout = connect_timeout(timeout)
        self.stall_limit, self.peer_lost_grace = stall_limit, peer_lost_grace
        self.stall_dump, self.supervised = stall_dump, supervised
        self.held: _SessionAllocator | None = None
        """A supervised worker's connections after it failed: open until its process ends."""
        self.group, self._owns_group = group, False
        self.worker: Worker | None = None
        self.timings: dict[str, float] = {}
        """Seconds spent in ``plan`` (learning the peer list) and ``connect`` (shared memory
        and sockets), once connected."""
        self._allocator: _SessionAllocator | None = None
        self._watch: StallWatch | None = None
        self._reserve = bytes(MEMORY_RESERVE)      # mapped, not touched: no resident pages

    # -- entering ----------------------------------------------------------------------------

    def __enter__(self) -> Worker:
        try:
            if self.peers > 1:
                self._allocator = _SessionAllocator(self)
            self.worker = worker = Worker(self.index, self.peers, self.args, self._allocator)
            if self.stall_limit is not None:
                self._watch = StallWatch(worker, self, self.stall_limit, self.stall_dump)
            if self._allocator is not None and self.plan is not None:
                self._allocator.connect()
        except BaseException as error:
            self.fail(error)
        return worker

    def connect(self) -> Any:
        """The comm allocator: the plan, the host group's shared memory, the sockets."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.timeout
        if self.plan is None:
            assert self._plan_source is not None
            self.plan = list(self._plan_source())
            if len(self.plan) != self.peers:
                raise ValueError(f"the plan has {len(self.plan)} workers, not {self.peers}")
        planned = time.perf_counter()
        _warm.stop()                        # the wait is over: nothing may load behind it
        if self.group is None and len(group_of(self.plan, self.index)) > 1:
            self.group = join_group(self.plan, self.index, deadline)
            self._owns_group = True
        remote = len(group_of(self.plan, self.index)) < self.peers
        listener, self.listener = self.listener, None
        if not remote and listener is not None:
            listener.close()                           # no one will connect: no need to listen
            listener = None
        allocator = build_allocator(self.index, self.plan, listener,
                                    self.group.mesh if self.group else None,
                                    max(deadline - time.monotonic(), 1.0))
        self.timings = {"plan": planned - started, "connect": time.perf_counter() - planned}
        return allocator

    def check_group(self) -> None:
        """Raise :class:`GroupFailed` once a worker of this host group has failed."""
        failure = self.group.record.failure() if self.group is not None else None
        if failure is not None:
            assert self.group is not None
            raise GroupFailed(*failure, lost_peer=self.group.record.lost_peer())

    # -- leaving -----------------------------------------------------------------------------

    def __exit__(self, kind, error, trace) -> None:
        if self._watch is not None:
            self._watch.stop()
        if error is None:
            try:
                if self._allocator is not None:
                    assert self.worker is not None
                    self.worker.finish()               # peers learn what it built
                    self._allocator.close()            # flush, remote goodbyes
                self._release(failed=False)
            except BaseException as failure:
                self.fail(failure)
        elif not isinstance(error, (Exception, Stalled)):   # GeneratorExit, KeyboardInterrupt
            self._abandon(self.index, describe(error), "".join(tb.format_exception(error)))
        else:
            self.fail(error)

    def fail(self, error: BaseException) -> NoReturn:
        """Record ``error`` for the host group, let go of everything, raise WorkerError
        (what leaving with an error does; a Spark task's worker calls it for ``sys.exit()``
        in user code, which leaving treats as an interruption)."""
        self._reserve = b""                 # room to tell a MemoryError that left none
        if self._watch is not None:
            self._watch.stop()
        if isinstance(error, (GroupFailed, WorkerError)):
            failure = (error.index, error.message, error.traceback)
        elif isinstance(error, Stalled):
            failure = (self.index, *error.args)
        elif isinstance(error, PeerLost):      # told without the transport's traceback
            failure = (error.index, error.noticed_by(f"worker {self.index}"), "")
            if self.peer_lost_grace:
                failure = self._wait_for_account(failure)
        else:
            failure = (self.index, describe(error),
                       "".join(tb.format_exception(error)))
        told, lost_peer = self._abandon(*failure, lost_peer=isinstance(error, PeerLost))
        if isinstance(error, PeerLost) and not lost_peer:
            # a group member's own failure came first: tell it as that, not as a lost peer
            # (the peer's process may be waiting for this process's account of it)
            error = GroupFailed(*told)
        raise (PeerLostError if lost_peer else WorkerError)(*told) from error

    def _wait_for_account(self, failure: tuple[int, str, str]) -> tuple[int, str, str]:
        """A remote peer was lost: give its own failure a moment to be recorded here."""
        end = time.monotonic() + self.peer_lost_grace
        while time.monotonic() < end:
            recorded = self.group.record.failure() if self.group is not None else None
            if recorded is not None:
                return recorded
            time.sleep(0.05)
        return failure

    def _abandon(self, index: int, message: str, traceback: str,
                 lost_peer: bool = False) -> tuple[tuple[int, str, str], bool]:
        """Record a failure for the host group and let go of everything; returns the failure
        to tell (the group's first) and whether that one is a lost remote peer."""
        failure = (index, message, traceback)
        if self.group is not None:
            failure = self.group.record.fail(index, message, traceback, lost_peer)
            lost_peer = self.group.record.lost_peer()
            if self._allocator is not None:
                self._allocator.wake_group()
        if self._allocator is not None:
            if self.supervised:
                self.held = self._allocator
            else:
                self._allocator.abort()
        self._release(failed=True)
        return failure, lost_peer

    def _release(self, failed: bool) -> None:
        """Give back everything held in this process (it may be reused, as pyspark does)."""
        self._allocator = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.group is not None and self._owns_group:
            if failed:
                self.group.abandon()
            else:
                self.group.leave(1)
        self.group = None
        self.worker = None

    @property
    def waiting(self) -> bool:
        """Whether the worker is waiting for other workers (parked, connecting, leaving)."""
        return self._allocator is not None and self._allocator.waiting

    @contextmanager
    def waiting_outside(self):
        """Mark time the worker spends waiting on something outside the job (Spark feeding
        input or taking output), which the stall limit does not count."""
        allocator = self._allocator
        if allocator is None:
            yield
            return
        with allocator.waiting_for_others():
            yield


class Stalled(BaseException):
    """Raised in a worker's main thread by its :class:`StallWatch` (a BaseException, so that
    user code catching Exception does not swallow it)."""


class StallWatch:
    """A thread that watches one worker: if it takes no step for ``limit`` seconds while not
    waiting for other workers (stuck in user code, or blocked on I/O), it takes the Python
    stack of every thread with faulthandler and raises :class:`Stalled` in the main thread
    (by a signal, which also interrupts a blocking call). The failure then names the worker
    and where it is.

    A call that keeps Python's interpreter lock (a C extension's long loop, a regex that
    backtracks for minutes) keeps this thread from running as well. For that, given a
    ``dump`` path, the thread keeps faulthandler's own watchdog (a thread of C, which needs no
    lock) armed for :meth:`grace` seconds beyond the limit: if the thread could not push it
    back, it writes every thread's stack to ``dump`` and ends the process with status 1, and
    the supervisor tells the stall from that file (:func:`stall_report`)."""

    SIGNAL = signal.SIGUSR2

    def __init__(self, worker: Worker, session: WorkerSession, limit: float,
                 dump: str | None = None) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("a stall limit needs the worker in the main thread")
        self.worker, self.session, self.limit = worker, session, limit
        self.report: tuple[str, str] | None = None
        self._dump_path = dump
        self._dump = None
        if dump is not None:
            self._dump = open(dump, "w")
            self._dump.write(f"main thread {threading.get_ident():#018x}\n")  # then the stacks
            self._dump.flush()
        self._arm()
        self._previous = signal.signal(self.SIGNAL, self._raise)
        self._main = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sparktimely-stall-watch",
                                        daemon=True)
        self._thread.start()

    @staticmethod
    def grace(limit: float) -> float:
        """Seconds beyond ``limit`` before faulthandler's watchdog ends a worker whose
        interpreter lock a call keeps.

        >>> StallWatch.grace(2), StallWatch.grace(60)
        (1.0, 30.0)
        """
        return max(1.0, limit / 2)

    def _arm(self) -> None:
        if self._dump is not None:
            faulthandler.dump_traceback_later(self.limit + self.grace(self.limit), exit=True,
                                              file=self._dump)

    def _watch(self) -> None:
        worker = self.worker
        seen, since = worker.steps, time.monotonic()
        while not self._stop.wait(min(self.limit / 4, 0.25)):
            self._arm()                      # this thread runs: no call keeps the lock
            now = time.monotonic()
            if worker.steps != seen or self.session.waiting:
                seen, since = worker.steps, now
                continue
            if now - since >= self.limit:
                self.report = self._where(now - since)
                signal.pthread_kill(self._main, self.SIGNAL)
                return

    def _where(self, seconds: float) -> tuple[str, str]:
        """The failure message (naming the main thread's innermost frame) and every thread's
        stack, the main thread's first."""
        with tempfile.TemporaryFile(mode="w+") as dump:
            faulthandler.dump_traceback(dump, all_threads=True)
            dump.seek(0)
            blocks = [block for block in dump.read().split("\n\n") if block.strip()]
        main = [block for block in blocks if _thread_of(block) == self._main]
        others = [block for block in blocks if _thread_of(block) != self._main
                  and not block.lstrip().startswith("Current thread")]      # not this watch
        frames = [line.strip() for line in (main or [""])[0].splitlines()
                  if line.strip().startswith("File ")]
        at = frames[0] if frames else "an unknown place"
        return (f"stalled: no step for {seconds:.1f} s (stall limit {self.limit:g} s), "
                f"at {at}", "\n\n".join(main + others) + "\n")

    def _raise(self, signum, frame) -> None:
        if self.report is not None and not self._stop.is_set():
            raise Stalled(*self.report)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            signal.signal(self.SIGNAL, self._previous)
            if self._dump is not None and self._dump_path is not None:
                faulthandler.cancel_dump_traceback_later()
                self._dump.close()
                os.remove(self._dump_path)


def stall_dump_path(supervisor: int, index: int) -> str:
    """Where worker ``index`` of the supervising process ``supervisor`` (a pid) has
    faulthandler write its stacks if a call keeping the interpreter lock stalls it."""
    return os.path.join(tempfile.gettempdir(), f"sparktimely-stall-{supervisor}-{index}.txt")


def stall_report(path: str, limit: float | None) -> tuple[str, str] | None:
    """``(message, stacks)`` for a worker that faulthandler's watchdog ended after it
    stalled in a call that kept the interpreter lock (its dump at ``path``, which is then
    removed), or None if it left no dump.

    >>> stall_report("/nonexistent", 2.0) is None
    True
    """
    try:
        with open(path) as file:
            text = file.read()
        os.remove(path)
    except OSError:
        return None
    header, _, stacks = text.partition("\n")
    if not stacks.strip():                   # the worker ended otherwise: not a stall
        return None
    main = int(header.split()[-1], 16)
    blocks = [block for block in stacks.split("\n\n") if block.strip()]
    held = [block for block in blocks if _thread_of(block.split("\n", 1)[-1]) == main
            or _thread_of(block) == main] or blocks
    frames = [line.strip() for line in held[0].splitlines() if line.strip().startswith("File ")]
    at = frames[0] if frames else "an unknown place"
    return (f"stalled: no step for {limit:g} s and more (stall limit {limit:g} s), in a call "
            f"that kept Python's interpreter lock, at {at}", stacks)


def _thread_of(block: str) -> int | None:
    """The thread id a faulthandler stack block is about."""
    match = re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", block.strip())
    return int(match[1], 16) if match else None
