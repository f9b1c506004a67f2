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

import pickle
import re
import time
import traceback
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..comm.rendezvous import PeerFailed
from ..dataflow import InputHandle, Pipeline
from ..dataflow.builder import per_batch
from ..errors import describe, unsendable_result, user_traceback
from ..execute import Seat, WorkerError, WorkerSession, run_workers
from ..io.checkpoints import enable_checkpoints
from ..io.tasks import TaskInput, TaskOutput
from ..logging import log_to_directory
from ..ops import Stream
from ..shm import NoSpaceError
from ..worker import Worker
from ._cancel import CancelAddress, FailureMemo
from ._plan import TaskAddress, TaskPlan

__all__ = ["BarrierWorker", "ExecutorLost", "RECORDS_PER_BATCH", "TaskFailed", "TaskOptions", "arrow_task", "as_arrow",
           "parse_crash", "parse_failure", "parse_lost_executor", "records_task", "run_in_task", "run_task",
           "stream_task"]

PEER_LOST_GRACE = 3.0
"""Seconds a worker that lost a remote peer waits before failing its own task, so that the
peer's own (more telling) failure reaches Spark first."""


def format_failure(index: int, message: str, traceback: str) -> str:
    """The text a failed task raises with; :func:`parse_failure` reads it back from Spark's
    error message. The traceback is told as the user's (frames inside sparktimely cut): it
    reaches users of ``map_in_arrow`` and ``map_partitions`` in Spark's own exception."""
    return (f"sparktimely worker {index} failed: {message}\n"
            f"--- traceback of sparktimely worker {index} ---\n"
            f"{user_traceback(traceback).rstrip()}\n"
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


_LOST = re.compile(r"ExecutorLostFailure \(executor (\S+) exited ([^)]*)\)\s*Reason: ([^\n]*)")
_LOST_HOST = re.compile(r"Lost (?:task|executor) [^\n]*?\(([^\s()]+) executor (\S+?)\)")


class ExecutorLost(WorkerError):
    """The Spark executor running a worker's task was lost (its JVM died, or its host went
    away), so the worker died with it: names the worker, the executor (and its host when
    Spark said) and Spark's reason. A ``WorkerError``, so code catching those catches it.

    >>> from sparktimely.barrier import parse_lost_executor
    >>> lost = parse_lost_executor("Stage failed because barrier task ResultTask(0, 1) "
    ...     "finished unsuccessfully.\\nExecutorLostFailure (executor 3 exited caused by one "
    ...     "of the running tasks) Reason: Command exited with code 137")
    >>> lost.index, lost.executor, str(lost)
    (1, '3', 'worker 1 failed: its Spark executor 3 was lost (Command exited with code 137)')
    """

    def __init__(self, index: int, executor: str, reason: str, host: str | None = None,
                 note: str = "") -> None:
        where = f"executor {executor}" + (f" on {host}" if host else "")
        super().__init__(index, f"its Spark {where} was lost ({reason}){note}")
        self.executor, self.reason, self.host, self.note = executor, reason, host, note

    def with_note(self, note: str, host: str | None = None) -> "ExecutorLost":
        """The same error with ``note`` (say, what a checkpoint offers) after the reason, and
        ``host`` if it did not name one."""
        return ExecutorLost(self.index, self.executor, self.reason, self.host or host, note)

    def __reduce__(self):
        return (ExecutorLost, (self.index, self.executor, self.reason, self.host, self.note))


def parse_lost_executor(text: str) -> ExecutorLost | None:
    """The :class:`ExecutorLost` a Spark job failure describes (the failed barrier task's
    partition is the worker), or None.

    >>> parse_lost_executor("Lost task 0.0 in stage 2.0 (TID 7) (10.0.0.5 executor 4): "
    ...                     "ExecutorLostFailure (executor 4 exited caused by one of the "
    ...                     "running tasks) Reason: Container killed").host
    '10.0.0.5'
    >>> parse_lost_executor("Job aborted: ValueError") is None
    True
    """
    lost, task = _LOST.search(text), _TASK.search(text)
    if lost is None or task is None:
        return None
    executor = lost[1]
    hosts = [m[1] for m in _LOST_HOST.finditer(text) if m[2] == executor]
    return ExecutorLost(int(task[1] or task[2]), executor, lost[3].strip() or lost[2],
                        hosts[0] if hosts else None)


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
    plan = None
    try:
        plan = _gather(context, seat)
        [result] = run_workers(func, plan.addresses, {plan.index: seat.release_listener()},
                               args=args, timeout=timeout, stall_limit=stall_limit,
                               peer_lost_grace=PEER_LOST_GRACE)
    except WorkerError as error:
        raise TaskFailed(error.index, error.message, error.traceback) from None
    except (TimeoutError, ConnectionError) as error:     # meeting the other workers
        if plan is None:
            raise
        raise TaskFailed(plan.index, describe(error), traceback.format_exc()) from None
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
    see :mod:`._cancel`), a failure in user code cancels the stage, so Spark does not retry it;
    with a ``memo`` instead, the failure is left there and a retried attempt of the stage
    that finds it fails with it at once (raising :class:`TaskFailed` on entering).
    """

    def __init__(self, context=None, args: Sequence[str] = (), timeout: float | None = None,
                 stall_limit: float | None = None, canceller: CancelAddress | None = None,
                 memo: FailureMemo | None = None) -> None:
        self.context = _barrier_context(context)
        self.args, self.timeout, self.stall_limit = list(args), timeout, stall_limit
        self.canceller, self.memo = canceller, memo
        self.plan: TaskPlan | None = None
        self.timings: dict[str, float] = {}
        """Seconds spent in each phase: ``bind`` (listener), ``all_gather`` (Spark's barrier
        call), ``connect`` (mesh and sockets), ``finish`` (leaving)."""
        self._session: WorkerSession | None = None

    def __enter__(self) -> Worker:
        started = time.perf_counter()
        context = self.context
        if self.memo is not None:          # an earlier attempt of this stage failed here?
            known = parse_failure(self.memo.recall(context.stageId()) or "")
            if known is not None:
                raise TaskFailed(known.index, known.message, known.traceback)
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
            if isinstance(error, SystemExit):   # sys.exit() in user code: a failure, as in run
                session.fail(error)
            session.__exit__(kind, error, trace)
        except WorkerError as failure:
            text = format_failure(failure.index, failure.message, failure.traceback)
            if failure.index == self.context.partitionId() and _in_user_code(error):
                if self.canceller is not None:
                    self.canceller.cancel(self.context.stageId(), "an error in user code "
                                          "fails every attempt alike, so the stage is not "
                                          "retried: " + text)
                elif self.memo is not None:
                    self.memo.record(self.context.stageId(), text)
            raise TaskFailed(failure.index, failure.message, failure.traceback) from None
        finally:
            self.timings.update({"all_gather": session.timings.get("plan", 0.0),
                                 "connect": session.timings.get("connect", 0.0),
                                 "finish": time.perf_counter() - started})


_LOST_TOUCH = (ConnectionError, EOFError, TimeoutError, PeerFailed, NoSpaceError)
"""What a worker raises when it lost its peers or its transport (a retried attempt may meet
them again), as opposed to an error in user code."""


def _in_user_code(error: BaseException | None) -> bool:
    """Whether the error a task's worker raised comes from user code (a ``build``, an
    operator's logic: its OSErrors too, such as a file it could not open, and sys.exit()),
    which fails every attempt of the stage alike."""
    return (isinstance(error, (Exception, SystemExit))
            and not isinstance(error, _LOST_TOUCH))


# -- the tasks the driver's forms run ---------------------------------------------------------

TASK_DATAFLOW = "barrier-task"
"""The name of the dataflow a task of ``map_in_arrow`` / ``map_partitions`` runs: its
checkpoints are found by it (the driver reads which worker count wrote them)."""

RECORDS_PER_BATCH = 4096
"""How many of a Spark partition's records ``map_partitions`` hands its worker as one batch."""


def run_task(func, args: Sequence[str], timeout: float | None, stall_limit: float | None,
             partition: Iterable[Any]) -> Iterator[tuple[int, bytes]]:
    """The task of ``barrier.run``: ``(partition, func(worker) pickled)`` of this task's
    worker, pickled here (with Spark's cloudpickle), so that a result the worker's process
    could hand over but Spark cannot pickle fails as this worker's failure, not in Spark's
    serializer after the task (the driver unpickles it)."""
    from pyspark import BarrierTaskContext, cloudpickle
    context = BarrierTaskContext.get()
    index = context.partitionId()
    result = run_in_task(func, args, timeout, stall_limit, context)
    try:
        pickled = cloudpickle.dumps(result, pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        raise TaskFailed(index, unsendable_result(index, error),
                         traceback.format_exc()) from None
    yield index, pickled


@dataclass(frozen=True)
class TaskOptions:
    """What the driver tells each task of ``map_partitions`` and ``map_in_arrow``.

    >>> TaskOptions(stall_limit=5.0).checkpoint_dir is None
    True
    """

    timeout: float | None = None
    """Seconds allowed for connecting the workers (None: the default)."""
    stall_limit: float | None = None
    """Seconds without a step (waiting for Spark aside) before the worker is stopped."""
    canceller: CancelAddress | None = None
    """The driver's stage canceller (see :mod:`._cancel`), None without one."""
    memo: FailureMemo | None = None
    """Where a failure in user code is left for the stage's retries, without a canceller."""
    log_dir: str | None = None
    """Where the worker writes its log files, resolved on the driver."""
    checkpoint_dir: Any = None
    """The checkpoint directory, or None for no checkpoints."""
    checkpoint_every: int = 1
    """Checkpoint every this many epochs (input batches)."""


def records_task(build, options: TaskOptions, records: Iterable[Any]) -> Iterator[Any]:
    """The task of ``map_partitions``: the partition's records, in batches, through the
    dataflow ``build`` makes; yields its output records (an Arrow row as a tuple)."""
    records = iter(records)                     # may be a range or list, not an iterator
    chunks = iter(lambda: list(islice(records, RECORDS_PER_BATCH)), [])
    for batch in stream_task(build, chunks, options):
        if batch.__class__ is list:
            yield from batch
        else:
            yield from zip(*(column.to_pylist() for column in batch.columns))


def arrow_task(build, schema, options: TaskOptions, batches: Iterable[Any]) -> Iterator[Any]:
    """The task of ``map_in_arrow``: the partition's Arrow batches through the dataflow
    ``build`` makes; yields its output as RecordBatches of ``schema``."""
    def converted(scope, stream):
        """``build``'s output, as RecordBatches of ``schema`` made inside the dataflow: a
        batch that does not fit is an operator's error, which cancels the stage at once
        naming the worker (converted as Spark reads them, it was retried by Spark)."""
        result = output_of(build, scope, stream)
        if result is None:
            return None
        return per_batch(result, Pipeline, "ToSchema",
                         lambda time, batch: as_arrow(batch, schema))
    yield from stream_task(converted, (b for b in batches if b.num_rows), options)


def output_of(build: Callable, scope: Any, stream: Stream) -> Stream | None:
    """What ``build(scope, stream)`` returns: the stream of output rows, or None for none;
    a TypeError naming what it returned otherwise (a list, a forgotten collection's
    ``.inner``), told where the dataflow is built.

    >>> import sparktimely as st
    >>> st.example(lambda scope: output_of(lambda s, x: [x], scope, scope.to_stream([1])))
    Traceback (most recent call last):
    TypeError: build(scope, stream) returned a list: it must return the stream whose records become the output rows (or None for no output rows)
    """
    result = build(scope, stream)
    if result is None or isinstance(result, Stream):
        return result
    raise TypeError(f"build(scope, stream) returned a {type(result).__name__}: it must return "
                    f"the stream whose records become the output rows (or None for no "
                    f"output rows)")


def stream_task(build, chunks: Iterable[Any], options: TaskOptions) -> Iterator[Any]:
    """Feed ``chunks`` into the worker's input at time 0 and yield the output batches as
    they appear (the worker keeps running between them). The dataflow is built before the
    worker meets the others (at its first step). With a checkpoint directory, see
    :func:`_checkpointed_task`."""
    barrier = BarrierWorker(timeout=options.timeout, stall_limit=options.stall_limit,
                            canceller=options.canceller, memo=options.memo)
    if options.checkpoint_dir is not None:
        yield from _checkpointed_task(build, chunks, barrier, options)
        return
    handle = InputHandle()
    output: deque = deque()

    def dataflow(scope):
        result = output_of(build, scope, scope.input_from(handle))
        if result is not None:
            result.sink(Pipeline, "ToSpark",
                        lambda input: output.extend(batch for _, batch in input))

    with barrier as worker, _logging_to(worker, options.log_dir):
        worker.dataflow(dataflow, name=TASK_DATAFLOW)
        chunks = iter(chunks)
        while True:
            with barrier.waiting_for_spark():
                chunk = next(chunks, None)
            if chunk is None:
                break
            handle.send_batch(chunk)
            worker.step()
            yield from _drain(output, barrier)
        handle.close()
        while worker.step_or_park(1.0):
            yield from _drain(output, barrier)
        worker.run()
        yield from _drain(output, barrier)


def _checkpointed_task(build, chunks: Iterable[Any], barrier: BarrierWorker,
                       options: TaskOptions) -> Iterator[Any]:
    """``stream_task`` with checkpoints: chunk ``i`` is at time ``i``, read as a source
    (``io.tasks.TaskInput``) that a resumed task skips to its position; the output goes
    through a sink that keeps it with the checkpoints and gives the kept epochs again on
    resume (``io.tasks.TaskOutput``)."""
    output: deque = deque()
    directory = options.checkpoint_dir
    with barrier as worker, _logging_to(worker, options.log_dir):
        coordinator = enable_checkpoints(worker, directory, options.checkpoint_every)
        try:
            def dataflow(scope):
                chunked = TaskInput(chunks, worker.index, barrier.waiting_for_spark)
                result = output_of(build, scope,
                                   scope.input_from_source(chunked, "spark-input"))
                if result is not None:
                    result.output_to(TaskOutput(directory, output.append, worker.index,
                                                [TASK_DATAFLOW, "output"]), "spark-output")
            worker.dataflow(dataflow, name=TASK_DATAFLOW)
            while worker.step_or_park(1.0):
                yield from _drain(output, barrier)
            worker.run()
            yield from _drain(output, barrier)
        finally:
            coordinator.close()


def _drain(output: deque, barrier: BarrierWorker) -> Iterator[Any]:
    while output:
        with barrier.waiting_for_spark():
            yield output.popleft()


@contextmanager
def _logging_to(worker: Worker, log_dir: str | None):
    """The worker logs to ``log_dir`` (if any) in the block; its files are completed and
    closed at the end, whatever happens (the task's process is reused)."""
    if log_dir is None:
        yield
        return
    log_to_directory(worker, log_dir)
    try:
        yield
    finally:
        worker.log_register().close()


def as_arrow(batch, schema):
    """One output batch as a RecordBatch of ``schema``: a RecordBatch's columns taken by
    name (by position only if it names none of the schema's), a dict record's values by
    key, a tuple's by position; a ValueError names a column the schema asks for that the
    output lacks, or a null in a field that is not nullable."""
    import pyarrow as pa
    result = _as_batch(batch, schema, pa)
    for field, column in zip(schema, result.columns):
        if not field.nullable and column.null_count:
            raise ValueError(f"output column {field.name!r} holds {column.null_count} null(s), "
                             f"but the schema's field is not nullable")
    return result


def _as_batch(batch, schema, pa):
    if isinstance(batch, pa.RecordBatch):
        if batch.schema.equals(schema):
            return batch
        names = batch.schema.names
        missing = [name for name in schema.names if name not in names]
        if not missing:
            batch = batch.select(schema.names)
        elif len(missing) == len(schema) and len(names) == len(schema):
            batch = batch.rename_columns(schema.names)      # no name in common: by position
        else:
            raise ValueError(f"an output batch has columns {names}, but the schema asks for "
                             f"{schema.names} (it lacks {missing})")
        try:
            return batch.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            for column, field in zip(batch.columns, schema):     # which column, then
                try:
                    column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as cause:
                    raise type(error)(f"output column {field.name!r} ({column.type}) does not "
                                      f"fit the schema's {field.type}: {cause}") from None
            raise
    rows = batch
    if rows and isinstance(rows[0], dict):
        keys = set().union(*rows)
        missing = [name for name in schema.names if name not in keys]
        if missing:
            raise ValueError(f"output records have keys {sorted(keys, key=str)}, but the "
                             f"schema asks for {schema.names} (none has {missing})")
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    if len(schema) == 1 and rows and not isinstance(rows[0], (tuple, list)):
        rows = [(row,) for row in rows]
    columns: list[Sequence[Any]] = list(zip(*rows)) if rows else [[] for _ in schema]
    if len(columns) != len(schema):
        raise ValueError(f"output records have {len(columns)} fields, but the schema has "
                         f"{len(schema)}: {schema.names}")
    arrays = []
    for column, field in zip(columns, schema):
        try:
            arrays.append(pa.array(column, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise type(error)(f"output column {field.name!r} does not fit the schema's "
                              f"{field.type}: {error}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
