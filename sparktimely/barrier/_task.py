"""Inside a barrier task: turn the task into timely worker ``partitionId`` of ``numTasks``.

A task takes a :class:`sparktimely.execute.Seat` (a listener bound at once on its
executor's host, its host identity, a proposed shared-memory name), makes exactly one
``allGather`` of it as a :class:`TaskAddress`, and gets the plan, ordered by partition
(:class:`TaskPlan`). From there ``sparktimely.execute`` does the rest, as for any job:
``run`` tasks call :func:`sparktimely.execute.run_workers` (the worker runs in a forked
process, so a worker killed by a signal is reported as such); the streaming forms use
:class:`BarrierWorker`, a :class:`sparktimely.execute.WorkerSession` in the task's own
process whose plan is asked for at the worker's first step, so the dataflow is built (and a
mistake in building it fails the task) before the ``allGather``.

A failure raises :class:`TaskFailed`: its message names the failing worker and carries its
traceback, which is what Spark reports for the failed stage, and :func:`parse_failure` reads
it back on the driver. Nothing is kept in the (reused) pyspark worker process: no thread, no
segment, no child, no module state, but the modules its workers loaded, so that the next
stage's workers start with them (``sparktimely._warm``).
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable, Sequence

from .. import Worker
from ..execute import Seat, WorkerError, WorkerSession, run_workers
from ._cancel import CancelAddress
from ._plan import TaskAddress, TaskPlan

__all__ = ["BarrierWorker", "TaskFailed", "parse_crash", "parse_failure", "run_in_task"]

PEER_LOST_GRACE = 3.0
"""Seconds a worker that lost a remote peer waits before failing its own task, so that the
peer's own (more telling) failure reaches Spark first."""


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

    >>> from sparktimely.barrier._task import format_failure
    >>> error = parse_failure("Job aborted ... " + format_failure(1, "ValueError: boom",
    ...                       "Traceback (most recent call last):\\nValueError: boom"))
    >>> error.index, str(error)
    (1, 'worker 1 failed: ValueError: boom')
    """
    match = _FAILURE.search(text)
    if match is None:
        return None
    return WorkerError(int(match[1]), match[2], match[3])


_CRASHED = re.compile(r"Python worker exited unexpectedly \(crashed\)[^\n]*")
_TASK = re.compile(r"barrier task (?:ResultTask|ShuffleMapTask)\(\d+, (\d+)\)|"
                   r"Lost task (\d+)\.\d+ in stage")


def parse_crash(text: str) -> WorkerError | None:
    """A :class:`sparktimely.WorkerError` for a Spark failure in which the Python process of
    a barrier task died (so it could not report anything itself), or None.

    >>> str(parse_crash("Stage failed because barrier task ResultTask(7, 1) finished "
    ...                 "unsuccessfully. ... Python worker exited unexpectedly (crashed)"))
    'worker 1 failed: the Python process of its Spark task died (Python worker exited unexpectedly (crashed)): killed by a signal, or it exited'
    """
    crash, task = _CRASHED.search(text), _TASK.search(text)
    if crash is None or task is None:
        return None
    return WorkerError(int(task[1] or task[2]), f"the Python process of its Spark task died "
                                                f"({crash[0]}): killed by a signal, or it "
                                                f"exited")


class TaskFailed(RuntimeError):
    """Raised by a barrier task when its worker, or a worker it depends on, failed. The
    message is :func:`format_failure`'s: the failing worker's index, error and traceback.

    >>> from sparktimely.barrier import TaskFailed, parse_failure
    >>> failed = TaskFailed(2, "KeyError: 'x'", "Traceback ...")
    >>> parse_failure("Job aborted: " + str(failed)).index
    2
    """

    def __init__(self, index: int, message: str, traceback: str) -> None:
        super().__init__(format_failure(index, message, traceback))
        self.index, self.message, self.traceback = index, message, traceback

    def __reduce__(self):
        return (TaskFailed, (self.index, self.message, self.traceback))


def _task_host(context) -> str:
    """The host part of this task's executor address (Spark's RPC address; only the host
    is meaningful to us)."""
    address = context.getTaskInfos()[context.partitionId()].address
    host = address.rpartition(":")[0] if ":" in address else address
    return host.removeprefix("[").removesuffix("]") or "localhost"


def _barrier_context(context):
    if context is None:
        from pyspark import BarrierTaskContext
        context = BarrierTaskContext.get()
        if context is None:
            raise RuntimeError("a sparktimely worker on Spark runs inside a barrier task "
                               "(rdd.barrier().mapPartitions or mapInArrow(barrier=True))")
    return context


def _seat(context) -> Seat:
    return Seat(_task_host(context), label=f"Spark partition {context.partitionId()}")


def _gather(context, seat: Seat) -> TaskPlan:
    """The one barrier call: every task's address, in partition order."""
    index = context.partitionId()
    gathered = context.allGather(TaskAddress.of(index, seat.address()).to_json())
    return TaskPlan.from_gathered(gathered, index)


def run_in_task(func: Callable[[Worker], Any], args: Sequence[str] = (),
                timeout: float | None = None, stall_limit: float | None = None,
                context=None) -> Any:
    """``func(worker)`` as this barrier task's worker, in a forked process (see the module
    doc); returns its result or raises :class:`TaskFailed`."""
    context = _barrier_context(context)
    seat = _seat(context)
    try:
        plan = _gather(context, seat)
        [result] = run_workers(func, plan.addresses, {plan.index: seat.release_listener()},
                               args=args, timeout=timeout, stall_limit=stall_limit,
                               peer_lost_grace=PEER_LOST_GRACE)
    except WorkerError as error:
        raise TaskFailed(error.index, error.message, error.traceback) from None
    finally:
        seat.close()
    return result


class BarrierWorker:
    """Context manager making the current barrier task a timely worker, in the task's own
    process (see the module doc).

    >>> def task(records):                            # in rdd.barrier().mapPartitions(task)
    ...     with BarrierWorker() as worker:
    ...         probe = worker.dataflow(lambda scope: scope.to_stream(records).probe())
    ...         worker.run()
    ...     yield worker.index                        # doctest: +SKIP

    ``context`` is the task's ``BarrierTaskContext`` (by default ``BarrierTaskContext.get()``),
    ``args`` becomes ``worker.args``, ``timeout`` bounds connecting to the other workers
    (default ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60 s), ``stall_limit`` stops a worker that
    makes no progress for that many seconds (time spent in :meth:`waiting_for_spark` aside).
    The ``allGather`` happens at the worker's first step. With ``canceller`` (the driver's,
    see :mod:`._cancel`), a failure in user code cancels the stage, so Spark does not retry it.
    """

    def __init__(self, context=None, args: Sequence[str] = (), timeout: float | None = None,
                 stall_limit: float | None = None,
                 canceller: CancelAddress | None = None) -> None:
        self.context = _barrier_context(context)
        self.args, self.timeout, self.stall_limit = list(args), timeout, stall_limit
        self.canceller = canceller
        self.plan: TaskPlan | None = None
        self.timings: dict[str, float] = {}
        """Seconds spent in each phase: ``bind`` (listener), ``all_gather`` (Spark's barrier
        call), ``connect`` (mesh and sockets), ``finish`` (leaving)."""
        self._session: WorkerSession | None = None

    def __enter__(self) -> Worker:
        started = time.perf_counter()
        context = self.context
        seat = _seat(context)
        self.timings["bind"] = time.perf_counter() - started

        def plan():
            self.plan = _gather(context, seat)
            return self.plan.addresses
        self._session = WorkerSession(
            context.partitionId(), plan, seat.release_listener(),
            peers=len(context.getTaskInfos()), args=self.args, timeout=self.timeout,
            stall_limit=self.stall_limit, peer_lost_grace=PEER_LOST_GRACE)
        try:
            return self._session.__enter__()
        except WorkerError as error:
            raise TaskFailed(error.index, error.message, error.traceback) from None

    def waiting_for_spark(self):
        """A context for time spent waiting on Spark (input to come, output to be taken),
        which the stall limit does not count."""
        assert self._session is not None, "only inside the with block"
        return self._session.waiting_outside()

    def __exit__(self, kind, error, trace) -> None:
        started = time.perf_counter()
        session, self._session = self._session, None
        assert session is not None
        try:
            session.__exit__(kind, error, trace)
        except WorkerError as failure:
            text = format_failure(failure.index, failure.message, failure.traceback)
            if (self.canceller is not None and failure.index == self.context.partitionId()
                    and isinstance(error, Exception) and not isinstance(error, OSError)):
                self.canceller.cancel(self.context.stageId(), "an error in user code fails "
                                      "every attempt alike, so the stage is not retried: "
                                      + text)
            raise TaskFailed(failure.index, failure.message, failure.traceback) from None
        finally:
            self.timings.update({"all_gather": session.timings.get("plan", 0.0),
                                 "connect": session.timings.get("connect", 0.0),
                                 "finish": time.perf_counter() - started})
