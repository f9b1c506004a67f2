"""The driver side: ``run``, ``map_in_arrow`` and ``map_partitions`` (see the package doc)."""
from __future__ import annotations

import logging
import os
import pickle
import time
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from ..worker import Worker
from ..io.checkpoints import RecoveryError, checkpointed_workers, checkpointing, \
    committed_epochs, reraise_recovery_error
from ..comm.net import connect_timeout
from ..errors import empty_path_problem, require_function, require_positive_int
from ..execute import check_run_options
from ..logging import observing
from ._cancel import FailureMemo, StageCanceller, driver_host
from ._resources import BarrierSetupError, check, check_resources, context_of, wait_for_slots
from ._ship import EnvironmentMissing, on_executor, parse_missing, ship
from ._task import TASK_DATAFLOW, ExecutorLost, TaskOptions, arrow_task, parse_crash, \
    parse_failure, parse_lost_executor, records_task, run_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import RDD
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from ..io.checkpoints import Location
    from ..ops.scope import Scope
    from ..ops.stream import Stream

__all__ = ["BarrierSetupError", "check_resources", "map_in_arrow", "map_partitions", "run"]

JOB_GROUP = "sparktimely"
"""The Spark job group of ``run``'s jobs when the caller has not set one: see them with
``sc.statusTracker().getJobIdsForGroup("sparktimely")``, cancel them with
``sc.cancelJobGroup("sparktimely")``."""
R = TypeVar("R")

logger = logging.getLogger("sparktimely")

@contextmanager
def _worker_errors(sc=None, checkpoint_dir: Any = None):
    """Turn a Spark job failure caused by a worker into :class:`sparktimely.WorkerError` (an
    :class:`ExecutorLost` when the worker's executor died, naming its host as SparkContext
    ``sc`` knew it and saying what ``checkpoint_dir`` offers to resume from)."""
    try:
        yield
    except Exception as error:
        try:
            text = str(error)
        except Exception:
            raise error from None
        failure = (parse_missing(text) or parse_failure(text) or parse_lost_executor(text)
                   or parse_crash(text))
        if failure is None:
            raise
        if isinstance(failure, ExecutorLost):
            failure = failure.with_note(_resume_note(checkpoint_dir),
                                        _executor_host(sc, failure.executor))
        raise failure from error


def _executor_host(sc, executor: str) -> str | None:
    """The host of executor ``executor`` (also a lost one) in Spark's status store."""
    try:
        summary = sc._jsc.sc().statusStore().executorSummary(executor)
        return str(summary.hostPort()).rpartition(":")[0]
    except Exception:
        return None


def _resume_note(checkpoint_dir: Any) -> str:
    """What a later run could resume from, after a lost executor.

    >>> _resume_note(None)
    '; there is no checkpoint to resume from (give checkpoint_dir, and max_attempts above 1 to resume at once)'
    """
    if checkpoint_dir is None:
        return ("; there is no checkpoint to resume from (give checkpoint_dir, and "
                "max_attempts above 1 to resume at once)")
    epochs = {name: epoch for name, epoch in committed_epochs(checkpoint_dir).items()
              if epoch is not None}
    if not epochs:
        return f"; no checkpoint was committed in {checkpoint_dir} yet"
    after = ", ".join(f"dataflow {name!r} after epoch {epoch}" for name, epoch in epochs.items())
    return (f"; a run with checkpoint_dir {checkpoint_dir} resumes from its last checkpoint "
            f"({after})")


# -- run -------------------------------------------------------------------------------------

def run(spark, func: Callable[[Worker], R], num_workers: int, *, args: Sequence[str] = (),
        timeout: float | None = None, stall_limit: float | None = None,
        log_dir: str | os.PathLike | None = None, progress: bool = False,
        checkpoint_dir: Location | None = None, checkpoint_every: int = 1,
        max_attempts: int = 1) -> list[R]:
    """Run ``func(worker)`` on ``num_workers`` timely workers, one Spark barrier task each;
    return the results ordered by worker index.

    ``spark`` is a SparkSession or SparkContext. Like ``sparktimely.execute``, each worker
    keeps stepping after ``func`` returns until its dataflows complete. ``args`` becomes
    ``worker.args``; ``timeout`` bounds connecting the workers (default 60 s);
    ``stall_limit`` (seconds) stops a worker that makes no progress for that long. A failing
    worker fails the job: :class:`sparktimely.WorkerError` is raised with the worker's index
    and traceback (or the signal that killed it), Spark's own error chained. Too few task
    slots or dynamic allocation raise :class:`BarrierSetupError` before anything runs.
    sparktimely itself goes to the executors with the job (a zip of the package, once per
    application); executors whose Python lacks numpy or pyarrow (or multiprocess, psutil)
    raise :class:`sparktimely.barrier.EnvironmentMissing`, naming the executor and how to
    ship an environment.

    ``log_dir``: each worker writes its log files (``worker-N.*``) to this directory on its
    executor's host, made if missing; a relative path is resolved against the driver's
    working directory. On one host (``local[N]``) or a shared filesystem they end up
    together, ready for ``python -m sparktimely.profile log_dir``; otherwise gather each
    host's files into one directory first. ``progress``: the driver shows a live
    display of the workers (sent to it over TCP at ``spark.driver.host``) on stderr. The
    Spark job is described as ``sparktimely: run module:function on N workers`` (what the
    Spark UI shows for the job and its stage; the RDD has that name too) and, unless the
    caller set a job group, is in the group ``"sparktimely"``; the caller's settings are
    restored afterwards; Spark's logs name the job by that description too. With
    ``progress``, Spark's own console progress bar (on by default in a Python driver) is
    stopped for the application, so the two never draw over each other. While the stage
    runs, Spark's driver-side loggers that would repeat a failing task's traceback once per
    task (:data:`QUIETED`) are off: the failure is raised once, here.

    ``checkpoint_dir`` and ``checkpoint_every``: as for ``sparktimely.execute`` (the
    directory must be one every executor reaches, such as ``hdfs://`` or ``s3://`` on a
    cluster); :class:`sparktimely.RecoveryError` is raised itself. Spark never retries a
    barrier stage whose result comes back to the driver: with ``max_attempts`` N, a failed
    stage is run again, up to N times in all, resuming from the last checkpoint (once the
    cluster has replaced a lost executor). A worker whose executor was lost raises
    :class:`ExecutorLost` (a ``WorkerError`` naming the worker, the executor and Spark's
    reason, and saying whether a checkpoint exists to resume from).

    >>> import sparktimely.barrier as stb
    >>> stb.run(spark, lambda worker: (worker.index, worker.peers), 2)   # doctest: +SKIP
    [(0, 2), (1, 2)]
    """
    require_function("sparktimely.barrier.run", func, "the job must be a function of the worker")
    sc = context_of(spark)
    if sc is None:
        raise TypeError("sparktimely.barrier.run needs a classic SparkSession or SparkContext "
                        "(under Spark Connect use map_in_arrow)")
    require_positive_int(max_attempts, "max_attempts")
    _check_options(timeout, stall_limit, checkpoint_every, checkpoint_dir)
    directory = _log_dir(log_dir)
    check(sc, num_workers)
    ship(sc)
    description = f"sparktimely: run {_name_of(func)} on {num_workers} workers"
    if checkpoint_dir is not None:
        func = checkpointing(func, checkpoint_dir, checkpoint_every)
    if progress:
        _stop_spark_progress_bar(sc)
    with observing(func, log_dir=directory, progress=progress,
                   host=driver_host(sc)) as job, _job_described(sc, description), \
            _failures_told_once(sc):
        task = on_executor(partial(run_task, job, list(args), timeout, stall_limit))
        for attempt in range(1, max_attempts + 1):
            rdd = (sc.parallelize(range(num_workers), num_workers).barrier()
                   .mapPartitions(task).setName(description))
            try:
                with reraise_recovery_error(), _worker_errors(sc, checkpoint_dir):
                    pairs = _collect(rdd, description)
                break
            except (RecoveryError, BarrierSetupError, EnvironmentMissing):
                raise
            except Exception as error:
                if attempt == max_attempts:
                    raise
                logger.warning("barrier.run: attempt %d of %d failed (%s); running the stage "
                               "again%s", attempt, max_attempts, error,
                               " from its last checkpoint" if checkpoint_dir is not None else "")
                wait_for_slots(sc, num_workers)       # a lost executor is being replaced
    return [pickle.loads(result) for _, result in sorted(pairs, key=lambda pair: pair[0])]


def _log_dir(log_dir: str | os.PathLike | None) -> str | None:
    """The log directory the workers are given: ``log_dir`` resolved on the driver.

    >>> _log_dir("/tmp/logs"), _log_dir(None)
    ('/tmp/logs', None)
    """
    if log_dir is None:
        return None
    empty = empty_path_problem(log_dir)
    if empty is not None:
        raise ValueError(f"log_dir: {empty}")
    return os.path.abspath(log_dir)


def _name_of(func: Callable) -> str:
    """``module:qualified name`` of a function, for Spark's job description.

    >>> _name_of(_name_of), _name_of(partial(_name_of))
    ('sparktimely.barrier._api:_name_of', 'sparktimely.barrier._api:_name_of')
    """
    while isinstance(func, partial):
        func = func.func
    name = getattr(func, "__qualname__", type(func).__qualname__)
    return f"{getattr(func, '__module__', None) or type(func).__module__}:{name}"


@contextmanager
def _job_described(sc, description: str):
    """Spark jobs started in the block (by this thread) carry ``description`` and, if the
    caller has no job group, :data:`JOB_GROUP`; the caller's settings come back after."""
    keys = ("spark.job.description", "spark.jobGroup.id")
    previous = {key: sc.getLocalProperty(key) for key in keys}
    sc.setLocalProperty("spark.job.description", description)
    if previous["spark.jobGroup.id"] is None:
        sc.setLocalProperty("spark.jobGroup.id", JOB_GROUP)
    try:
        yield
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)


def _collect(rdd, description: str) -> list:
    """``rdd.collect()`` with ``description`` as the Spark job's call site (what Spark's logs
    and UI name the job and its stage by, instead of the line of this file)."""
    from pyspark.traceback_utils import SCCallSiteSync
    site = SCCallSiteSync(rdd.context)
    site._call_site = description                     # pyspark takes the caller's line
    with site:
        return rdd.collect()


QUIETED = ("org.apache.spark.scheduler.TaskSetManager", "org.apache.spark.executor.Executor",
           "org.apache.spark.scheduler.TaskSchedulerImpl", "org.apache.spark.rpc.netty.NettyRpcEnv",
           "org.apache.spark.api.python.PythonRunner",
           "org.apache.spark.scheduler.DAGScheduler")
"""Spark's loggers that repeat a failed task's error (with its Python traceback, once per
task; the DAGScheduler's stage failure too, at the INFO level spark-submit shows) on the
driver's console: off while ``run`` runs, which reports the failure itself."""


@contextmanager
def _failures_told_once(sc):
    """:data:`QUIETED` loggers off in the block; afterwards each is as it was (a logger with
    no configuration of its own gets none again: Spark's shell filter, which keeps INFO
    lines off a Python driver's console, lets through those of configured loggers). The
    failures stay in Spark's UI, event log and executor logs."""
    try:
        jvm = sc._jvm
        level = jvm.org.apache.logging.log4j.Level
        context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        before = {name: config.getLoggerConfig(name).getLevel()
                  if config.getLoggers().containsKey(name) else None for name in QUIETED}
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name in QUIETED:
            configurator.setLevel(name, level.OFF)
    except Exception:                                  # not log4j 2: leave Spark's logs be
        yield
        return
    try:
        yield
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            _cancel_job_group(sc)          # pyspark's own Ctrl-C handler may have failed to
        _wait_for_stages_to_end(sc)        # the failed stage's other tasks, being killed
        raise
    finally:
        for name, previous in before.items():
            if previous is None:
                config.removeLogger(name)
            else:
                configurator.setLevel(name, previous)
        context.updateLoggers()


def _cancel_job_group(sc) -> None:
    """Cancel the jobs of the job group in effect (``run``'s, or the caller's), which an
    interrupted ``run`` leaves running when pyspark's SIGINT handler fails to cancel them
    (its call into the JVM re-enters the one the interrupt broke off)."""
    try:
        sc.cancelJobGroup(sc.getLocalProperty("spark.jobGroup.id") or JOB_GROUP)
    except Exception:
        pass


def _wait_for_stages_to_end(sc, seconds: float = 10.0) -> None:
    """Wait (``seconds`` at most) until no executor of SparkContext ``sc`` runs a task."""
    deadline = time.monotonic() + seconds
    tracker = sc._jsc.sc().statusTracker()
    try:
        while (any(info.numRunningTasks() for info in tracker.getExecutorInfos())
               and time.monotonic() < deadline):
            time.sleep(0.1)
        time.sleep(0.2)                          # the last status update's log lines
    except Exception:
        pass


def _stop_spark_progress_bar(sc) -> None:
    """Stop Spark's console progress bar (``spark.ui.showConsoleProgress``, on by default in
    a Python driver), which would draw over sparktimely's display on the same stderr."""
    try:
        bar = sc._jsc.sc().progressBar()
        if bar.isDefined():
            bar.get().stop()
            logger.info("sparktimely: Spark's console progress bar is stopped for this "
                        "application; the progress display replaces it")
    except Exception:
        pass


# -- map_partitions and map_in_arrow ---------------------------------------------------------

def map_partitions(rdd: RDD[Any], build: Callable[[Scope, Stream], Stream], *,
                   timeout: float | None = None, stall_limit: float | None = None,
                   log_dir: str | os.PathLike | None = None,
                   checkpoint_dir: Location | None = None,
                   checkpoint_every: int = 1) -> RDD[Any]:
    """An RDD computed by timely workers, one per partition of ``rdd`` (a barrier stage).

    Each task's records are its worker's input stream (batches of Python objects at time 0);
    ``build(scope, stream)`` builds the dataflow and returns the stream whose records become
    the task's output (Arrow batches come out as tuples, one per row). Lazy, like
    ``mapPartitions``. The dataflow is built before the tasks meet, and an error in user
    code (``build``, or an operator's logic) cancels the stage with the worker's traceback,
    so Spark does not retry it (see :mod:`._cancel`; a lost peer or connection still lets
    Spark retry a stage that feeds a shuffle). ``stall_limit``: as for :func:`run`; time
    spent waiting for Spark's input or output does not count. ``log_dir``: as for
    :func:`run`. The RDD is named ``sparktimely: map_partitions module:function on N
    workers`` (in the Spark UI's DAG); since the job runs at an action of the caller's, a
    live display does not apply here, and the job description is the caller's to set
    (``sc.setJobDescription``).

    With ``checkpoint_dir`` (see ``sparktimely.execute``), batch ``i`` of a task's input is
    at time ``i`` (not 0), so that its worker checkpoints as it goes; what the dataflow sends
    is kept with the checkpoints, and the task of a failed action built again (Spark does
    not run a failed barrier stage's plan a second time) resumes after the last checkpoint,
    sending again what the checkpointed epochs sent. The input must come again in the same
    order (deterministic, as Spark recomputes it) and in as many partitions: a checkpoint of
    another number of workers raises :class:`sparktimely.RecoveryError`.

    >>> counts = stb.map_partitions(lines, lambda scope, s: s.flat_map(str.split).count())  # doctest: +SKIP
    """
    require_function("sparktimely.barrier.map_partitions", build,
                     "build must be a function build(scope, stream)")
    _check_options(timeout, stall_limit, checkpoint_every, checkpoint_dir)
    directory = _log_dir(log_dir)
    workers = rdd.getNumPartitions()
    if workers == 0:                    # nothing to run (Spark runs no task either)
        return rdd.context.emptyRDD()
    _check_per_partition(rdd.context, workers, "the RDD",
                         "rdd.repartition(N) gives N workers")
    _check_task_checkpoints(checkpoint_dir, workers)
    ship(rdd.context)
    options = _task_options(rdd.context, timeout, stall_limit, directory, checkpoint_dir,
                            checkpoint_every)
    return rdd.barrier().mapPartitions(on_executor(partial(records_task, build, options))
                                       ).setName(f"sparktimely: map_partitions {_name_of(build)} on {workers} workers")


def map_in_arrow(df: DataFrame, build: Callable[[Scope, Stream], Stream],
                 schema: str | StructType | pa.Schema, *, num_workers: int | None = None,
                 timeout: float | None = None, stall_limit: float | None = None,
                 log_dir: str | os.PathLike | None = None,
                 checkpoint_dir: Location | None = None,
                 checkpoint_every: int = 1) -> DataFrame:
    """A DataFrame computed by timely workers through ``df.mapInArrow(..., barrier=True)``.

    Each task's Arrow record batches are its worker's input stream (at time 0);
    ``build(scope, stream)`` returns the stream whose batches become the output rows.
    Output batches may be ``pyarrow.RecordBatch`` (cast to ``schema``) or lists of tuples or
    dicts. ``schema`` is a DDL string, a ``StructType`` or a ``pyarrow.Schema``. One worker
    runs per partition of ``df``; ``num_workers`` repartitions ``df`` to that many first.
    Either way the cluster's slots are checked here, before anything is submitted
    (:class:`BarrierSetupError`). Under Spark Connect ``num_workers`` is required: the client
    cannot know ``df``'s partitions before it runs, and a barrier stage with more tasks than
    slots can shut the server's SparkContext down for every client. Lazy, like
    ``mapInArrow``; errors, ``stall_limit``, ``log_dir``, ``checkpoint_dir`` and
    ``checkpoint_every`` as for :func:`map_partitions`. Spark's plans and its UI's SQL tab
    (also under Spark Connect) call the Python function ``sparktimely: map_in_arrow
    module:function on N workers``.

    >>> out = stb.map_in_arrow(df, build, "word string, count long", num_workers=2)  # doctest: +SKIP
    """
    require_function("sparktimely.barrier.map_in_arrow", build,
                     "build must be a function build(scope, stream)")
    _check_options(timeout, stall_limit, checkpoint_every, checkpoint_dir)
    directory = _log_dir(log_dir)
    spark = df.sparkSession
    if num_workers is not None:
        check(spark, num_workers)
        df = df.repartition(num_workers)
    elif context_of(spark) is None:
        raise BarrierSetupError(
            "under Spark Connect, map_in_arrow needs num_workers=N (the DataFrame is "
            "repartitioned to N): the number of partitions of the DataFrame is not known "
            "before it runs, and a barrier stage with more tasks than free task slots can "
            "shut the Spark Connect server's SparkContext down")
    else:
        partitions = df.rdd.getNumPartitions()
        if partitions == 0:             # nothing to run (Spark runs no task either)
            return spark.createDataFrame([], _schemas(spark, schema)[0])
        _check_per_partition(spark, partitions, "the DataFrame",
                             "give num_workers=N to repartition it")
    _check_task_checkpoints(checkpoint_dir, num_workers or partitions)
    spark_schema, arrow_schema = _schemas(spark, schema)
    ship(spark)
    options = _task_options(context_of(spark), timeout, stall_limit, directory,
                            checkpoint_dir, checkpoint_every)
    workers = f" on {num_workers} workers" if num_workers is not None else ""
    task = on_executor(partial(arrow_task, build, arrow_schema, options),
                       f"sparktimely: map_in_arrow {_name_of(build)}{workers}")
    try:
        return df.mapInArrow(task, spark_schema, barrier=True)
    except ImportError:
        if not hasattr(df, "_jdf"):
            raise
        return _map_in_arrow_without_pandas(df, task, spark_schema)


def _check_per_partition(spark, partitions: int, data: str, remedy: str) -> None:
    """:func:`check` for one worker per partition of ``data``: a BarrierSetupError says that
    the workers are its partitions, and ``remedy``."""
    try:
        check(spark, partitions)
    except BarrierSetupError as error:
        raise BarrierSetupError(f"{error} ({data} has {partitions} partitions, one worker "
                                f"each: {remedy})") from None


def _check_task_checkpoints(checkpoint_dir: Any, workers: int) -> None:
    """Raise :class:`RecoveryError` when ``checkpoint_dir`` holds the lazy forms' checkpoint
    of another number of workers: a task's input is its own Spark partition, which another
    worker count splits otherwise, so resuming would repeat and mix rows."""
    if checkpoint_dir is None:
        return
    written = checkpointed_workers(checkpoint_dir, TASK_DATAFLOW)
    if written is not None and written != workers:
        old = f"{written} worker{'s' if written != 1 else ''}"
        raise RecoveryError(
            f"checkpoint directory {checkpoint_dir} holds a checkpoint written by {old}, not "
            f"{workers}: each worker resumes its own Spark partition, which {workers} workers "
            f"split otherwise (run with {old}, or give another checkpoint directory)")


def _check_options(timeout: float | None, stall_limit: float | None,
                  checkpoint_every: int, checkpoint_dir: Any) -> None:
    """Raise ValueError naming the option, on the driver before any stage, for a
    ``timeout`` that is not None or a positive number of seconds (or, without one, a
    ``$SPARKTIMELY_CONNECT_TIMEOUT`` here that is not), and for what
    ``execute.check_run_options`` refuses."""
    connect_timeout(timeout)
    check_run_options(stall_limit, checkpoint_every, checkpoint_dir)


def _task_options(sc, timeout, stall_limit, log_dir, checkpoint_dir,
                  checkpoint_every) -> TaskOptions:
    """The lazy forms' task options (checked by :func:`_check_options`, ``log_dir`` resolved
    by :func:`_log_dir`): with the driver's stage canceller when there is a SparkContext,
    else (Spark Connect) with a failure memo (see :mod:`._cancel`)."""
    canceller = StageCanceller.address_for(sc)
    return TaskOptions(timeout=timeout, stall_limit=stall_limit, canceller=canceller,
                       memo=None if canceller else FailureMemo.new(), log_dir=log_dir,
                       checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)


def _map_in_arrow_without_pandas(df, task, schema):
    """``df.mapInArrow(task, schema, barrier=True)`` for a classic session without pandas:
    pyspark builds the UDF with ``pandas_udf``, which insists on pandas although an Arrow
    UDF never uses it, so build the same UDF directly."""
    from pyspark.rdd import PythonEvalType
    from pyspark.sql import DataFrame
    from pyspark.sql.udf import UserDefinedFunction
    udf = UserDefinedFunction(task, returnType=schema,
                              evalType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    column = udf(*[df[name] for name in df.columns])
    return DataFrame(df._jdf.mapInArrow(column._jc, True, None), df.sparkSession)


def _schemas(spark, schema):
    """``(StructType, pyarrow.Schema)`` of a DDL string, StructType or pyarrow.Schema."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
    from pyspark.sql.types import StructType
    if isinstance(schema, pa.Schema):
        return from_arrow_schema(schema), schema
    if isinstance(schema, str):
        schema = spark.createDataFrame([], schema).schema
    if not isinstance(schema, StructType):
        raise TypeError(f"schema must be a DDL string, a StructType or a pyarrow.Schema, "
                        f"not {type(schema).__name__}")
    # Timestamps are in the session's time zone, as Spark sends them to mapInArrow.
    return schema, to_arrow_schema(schema, timezone=spark.conf.get("spark.sql.session.timeZone"))


