"""Inside a barrier task: turn the task into timely worker ``partitionId`` of ``numTasks``.

``with BarrierWorker() as worker:`` does, in order:

1. bind a listening socket (any free port) on the task's host, *before* telling anyone;
2. one ``allGather`` of a JSON :class:`TaskAddress` (partition, host, port, host identity, a
   proposed shared-memory prefix); the answers give the plan, ordered by partition. This is
   the only barrier call, so every task makes the same number of them whatever happens;
3. the tasks of one host identity form a group: the lowest partition creates the mesh (and a
   one-page group record), the others attach once the record says the mesh is ready. Each
   member forks a :class:`Janitor` that removes the segments if the task is killed;
4. ``sparktimely.comm.build_allocator`` connects the worker to its group through shared
   memory and to every other worker through a socket.

On leaving the block normally the allocator is closed (remote goodbyes) and the last group
member to leave removes the segments. If the block raises, the failure is written into the
group record (so local peers stop at their next park with the same message), the segments
are removed at once, and :class:`TaskFailed` is raised: its message names the worker and
carries its traceback, which is what Spark reports for the failed stage. Nothing is kept in
the (reused) pyspark worker process: no thread, no segment, no child, no module state.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
import traceback as tb
from typing import Any, Sequence

from .._supervisor import WorkerError
from ..comm import PeerLost, build_allocator, host_identity, listen
from ..comm.net import connect_timeout
from ..comm.rendezvous import FORCE_SOCKETS_ENV
from ..dataflow import Worker
from ..shm import Mesh, Segment, job_prefix, sweep
from ._janitor import Janitor
from ._plan import TaskAddress, TaskPlan

__all__ = ["BarrierWorker", "TaskFailed", "parse_failure"]

PEER_LOST_GRACE = 3.0
"""Seconds a worker that lost a remote peer waits before failing its own task, so that the
peer's own (more telling) failure reaches Spark first."""

_READY, _DONE, _FAILED, _LENGTH = 0, 1, 2, 3      # u64 slots of the group record
_TEXT = 64                                        # byte offset of the failure text
_RECORD_BYTES = 1 << 16


def format_failure(index: int, message: str, traceback: str) -> str:
    """The text a failed task raises with; :func:`parse_failure` reads it back from Spark's
    error message."""
    return (f"sparktimely worker {index} failed: {message}\n"
            f"--- traceback of sparktimely worker {index} ---\n{traceback.rstrip()}\n"
            f"--- end of traceback of sparktimely worker {index} ---")


_FAILURE = re.compile(r"sparktimely worker (\d+) failed: ([^\n]*)\n"
                      r"--- traceback of sparktimely worker \1 ---\n(.*?)\n"
                      r"--- end of traceback of sparktimely worker \1 ---", re.S)


def parse_failure(text: str) -> WorkerError | None:
    """The :class:`sparktimely.WorkerError` described in ``text`` (say, a Spark exception
    message), or None.

    >>> error = parse_failure("Job aborted ... " + format_failure(1, "ValueError: boom",
    ...                       "Traceback (most recent call last):\\nValueError: boom"))
    >>> error.index, str(error)
    (1, 'worker 1 failed: ValueError: boom')
    """
    match = _FAILURE.search(text)
    if match is None:
        return None
    return WorkerError(int(match[1]), match[2], match[3])


class TaskFailed(RuntimeError):
    """Raised by a barrier task when its worker, or a worker it depends on, failed. The
    message is :func:`format_failure`'s: the failing worker's index, error and traceback."""

    def __init__(self, index: int, message: str, traceback: str) -> None:
        super().__init__(format_failure(index, message, traceback))
        self.index, self.message, self.traceback = index, message, traceback

    def __reduce__(self):
        return (TaskFailed, (self.index, self.message, self.traceback))


class _GroupRecord:
    """One page shared by the tasks of a host: mesh ready, how many left, the first failure.

    Counters change under ``flock`` on the segment's file, so no atomics are needed.
    """

    def __init__(self, segment: Segment, size: int) -> None:
        self.segment, self.size = segment, size
        self._words = segment.u64

    @classmethod
    def create(cls, prefix: str, size: int) -> _GroupRecord:
        return cls(Segment.create(prefix + "-task", _RECORD_BYTES), size)

    @classmethod
    def attach(cls, prefix: str, size: int, deadline: float, creator: int) -> _GroupRecord:
        """Wait until the creator has made the mesh, then the record."""
        while True:
            try:
                segment = Segment.attach(prefix + "-task")
            except (OSError, ValueError):       # not there yet, or not sized yet
                segment = None
            if segment is not None:
                record = cls(segment, size)
                while not record._words[_READY] and time.monotonic() < deadline:
                    time.sleep(0.0005)
                if record._words[_READY]:
                    return record
                segment.close()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"worker {creator}, the first task on this host, did not "
                                   f"create the shared memory {prefix!r} in time")
            time.sleep(0.0005)

    def set_ready(self) -> None:
        self._words[_READY] = 1

    def _locked(self):
        fd = os.open(self.segment.path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def leave(self) -> bool:
        """Count this task out; True for the last one (who removes the segments)."""
        try:
            fd = self._locked()
        except FileNotFoundError:               # already removed after a failure
            return False
        try:
            self._words[_DONE] += 1
            return self._words[_DONE] >= self.size
        finally:
            os.close(fd)

    def fail(self, index: int, message: str, traceback: str) -> tuple[int, str, str]:
        """Record a failure unless one is recorded already; returns the recorded one."""
        try:
            fd = self._locked()
        except FileNotFoundError:
            return self.failure() or (index, message, traceback)
        try:
            if not self._words[_FAILED]:
                text = f"{message}\0{traceback}".encode(errors="replace")
                room = _RECORD_BYTES - _TEXT
                if len(text) > room:
                    text = text[:room // 4] + b"\n[...]\n" + text[-(room - room // 4 - 8):]
                self.segment.buf[_TEXT:_TEXT + len(text)] = text
                self._words[_LENGTH] = len(text)
                self._words[_FAILED] = index + 1
        finally:
            os.close(fd)
        return self.failure()

    def failure(self) -> tuple[int, str, str] | None:
        """``(index, message, traceback)`` of the first failure in the group, or None."""
        failed = self._words[_FAILED]
        if not failed:
            return None
        text = bytes(self.segment.buf[_TEXT:_TEXT + self._words[_LENGTH]]).decode(errors="replace")
        message, _, traceback = text.partition("\0")
        return failed - 1, message, traceback

    def close(self) -> None:
        self._words = None
        self.segment.close()


class _TaskAllocator:
    """The comm allocator, plus: ``park`` raises :class:`TaskFailed` once a worker of this
    host has failed (it rings every local peer's doorbell), so nobody waits for the dead."""

    def __init__(self, inner: Any, record: _GroupRecord | None) -> None:
        self._inner = inner
        self.index, self.peers = inner.index, inner.peers
        self.send, self.receive, self.flush = inner.send, inner.receive, inner.flush
        self.wake = inner.wake
        self._record = record

    def park(self, timeout: float | None) -> None:
        self._inner.park(timeout)
        if self._record is not None:
            failure = self._record.failure()
            if failure is not None:
                raise TaskFailed(*failure)

    def wake_group(self, size: int, slot: int) -> None:
        endpoint = self._inner.endpoint
        if endpoint is not None:
            for other in range(size):
                if other != slot:
                    endpoint.wake(other)

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        """Let go after a failure: no goodbyes (remote peers then see the loss). The
        shared memory is unmapped; sockets and their reader threads go when the process
        does (pyspark ends a worker process whose task failed)."""
        self._inner.abort()


def _task_host(context) -> str:
    """The host part of this task's executor address (Spark's RPC address; only the host
    is meaningful to us)."""
    address = context.getTaskInfos()[context.partitionId()].address
    host = address.rpartition(":")[0] if ":" in address else address
    return host.removeprefix("[").removesuffix("]") or "localhost"


def _listen_on(host: str):
    try:
        return listen(host)
    except OSError:
        return listen("0.0.0.0")


class BarrierWorker:
    """Context manager making the current barrier task a timely worker (see the module doc).

    ``context`` is the task's ``BarrierTaskContext`` (by default ``BarrierTaskContext.get()``),
    ``args`` becomes ``worker.args``, ``timeout`` bounds connecting to the other workers
    (default ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60 s).
    """

    def __init__(self, context=None, args: Sequence[str] = (), timeout: float | None = None) -> None:
        if context is None:
            from pyspark import BarrierTaskContext
            context = BarrierTaskContext.get()
            if context is None:
                raise RuntimeError("BarrierWorker runs inside a Spark barrier task "
                                   "(rdd.barrier().mapPartitions or mapInArrow(barrier=True))")
        self.context = context
        self.args = list(args)
        self.timeout = connect_timeout(timeout)
        self.plan: TaskPlan | None = None
        self.worker: Worker | None = None
        self.timings: dict[str, float] = {}
        """Seconds spent in each phase: ``bind`` (listener), ``all_gather`` (Spark's barrier
        call), ``connect`` (mesh and sockets, up to a ready Worker), ``finish`` (leaving)."""
        self._listener = None
        self._mesh: Mesh | None = None
        self._record: _GroupRecord | None = None
        self._janitor: Janitor | None = None
        self._allocator: _TaskAllocator | None = None

    # -- setting up ------------------------------------------------------------------------

    def __enter__(self) -> Worker:
        started = time.perf_counter()
        context = self.context
        index = context.partitionId()
        host = _task_host(context)
        self._listener = _listen_on(host)
        identity = host_identity()
        if os.environ.get(FORCE_SOCKETS_ENV, "") not in ("", "0"):
            identity += f"/partition-{index}"            # every task a host of its own
        me = TaskAddress(index, host, self._listener.getsockname()[1], identity, job_prefix())
        gathering = time.perf_counter()
        gathered = context.allGather(me.to_json())        # the one barrier call
        gathered_at = time.perf_counter()
        try:
            self.plan = plan = TaskPlan.from_gathered(gathered, index)
            self.worker = Worker(index, plan.peers, self.args, self._connect(plan))
        except BaseException as error:
            self._fail(error)
        self.timings = {"bind": gathering - started, "all_gather": gathered_at - gathering,
                        "connect": time.perf_counter() - gathered_at}
        return self.worker

    def _connect(self, plan: TaskPlan) -> _TaskAllocator | None:
        """The one place that builds the allocator: shared memory within a host identity,
        sockets across."""
        if plan.peers == 1:
            return None
        deadline = time.monotonic() + self.timeout
        group = plan.group
        if len(group) > 1:
            prefix = plan.mesh_prefix
            self._janitor = Janitor(prefix)
            if plan.creates_mesh:
                self._record = _GroupRecord.create(prefix, len(group))
                self._mesh = Mesh.create(len(group), prefix=prefix)
                self._record.set_ready()
            else:
                self._record = _GroupRecord.attach(prefix, len(group), deadline, group[0])
                self._mesh = Mesh.attach(prefix)
        remote = len(group) < plan.peers
        if not remote:                             # no one will connect: no need to listen
            self._listener.close()
        inner = build_allocator(plan.index, plan.addresses, self._listener if remote else None,
                                self._mesh, max(deadline - time.monotonic(), 1.0))
        self._listener = None                      # closed by build_allocator once connected
        self._allocator = _TaskAllocator(inner, self._record)
        return self._allocator

    # -- leaving ---------------------------------------------------------------------------

    def __exit__(self, kind, error, trace) -> bool:
        if error is None:
            started = time.perf_counter()
            try:
                self._finish()
            except BaseException as failure:
                self._fail(failure)
            self.timings["finish"] = time.perf_counter() - started
            return False
        if not isinstance(error, Exception):              # GeneratorExit, KeyboardInterrupt
            self._abandon(self.plan.index if self.plan else -1,
                          f"{type(error).__name__} (the task was interrupted)", "")
            return False
        self._fail(error)

    def _finish(self) -> None:
        if self._allocator is not None:
            self._allocator.close()                # flush, remote goodbyes, unmap the mesh
            self._allocator = None
        last = self._record is not None and self._record.leave()
        self._release(sweep_now=last)

    def _fail(self, error: BaseException) -> None:
        """Record ``error`` for the group, clean up, raise :class:`TaskFailed`."""
        index = self.plan.index if self.plan else self.context.partitionId()
        if isinstance(error, TaskFailed):
            failure = (error.index, error.message, error.traceback)
        else:
            failure = (index, f"{type(error).__name__}: {error}",
                       "".join(tb.format_exception(error)))
            if isinstance(error, PeerLost):
                time.sleep(PEER_LOST_GRACE)   # let the peer's own failure reach Spark first
                failure = (self._record and self._record.failure()) or failure
        failure = self._abandon(*failure)
        raise TaskFailed(*failure) from None

    def _abandon(self, index: int, message: str, traceback: str) -> tuple[int, str, str]:
        failure = (index, message, traceback)
        if self._record is not None:
            failure = self._record.fail(index, message, traceback)
            if self._allocator is not None:
                self._allocator.wake_group(len(self.plan.group), self.plan.slot)
        if self._allocator is not None:
            self._allocator.abort()
            self._allocator = None
        self._release(sweep_now=True)
        return failure

    def _release(self, sweep_now: bool) -> None:
        """Give back everything this task holds in the pyspark worker process."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        prefix = self.plan.mesh_prefix if self.plan else None
        if self._record is not None:
            self._record.close()
            self._record = None
        if self._mesh is not None:
            self._mesh.forget()                        # the creator's exit hook: not kept
            self._mesh = None
        if sweep_now and prefix is not None and self._janitor is not None:
            sweep(prefix)
        if self._janitor is not None:
            self._janitor.finish(clean=True)
            self._janitor = None
        self.worker = None
