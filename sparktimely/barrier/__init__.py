"""sparktimely on Spark: one timely worker per barrier task.

- :func:`run` ``(spark, func, num_workers)``: ``func(worker)`` on every worker; returns the
  results by worker index.
- :func:`map_in_arrow` ``(df, build, schema)``: a DataFrame through
  ``df.mapInArrow(..., barrier=True)``; each task's Arrow batches are its worker's input
  stream and ``build(scope, stream)`` returns the stream whose batches become output rows.
- :func:`map_partitions` ``(rdd, build)``: the same over ``rdd.barrier().mapPartitions``.
- ``python -m sparktimely.barrier.submit`` (console script ``sparktimely-submit``): run a
  ``module:function`` worker function as a Spark application (see :mod:`.submit`).

How a task becomes a worker (:mod:`._task`): it takes a ``sparktimely.execute.Seat`` (a
listener, its host identity, a proposed shared-memory name), makes exactly one ``allGather``
of it, and hands the plan, ordered by partition, to ``sparktimely.execute``, which runs the
worker as it runs any job's: tasks with the same host identity (hostname, boot id, IPC and
network namespaces) share memory, the others are reached through sockets. A failed worker
fails the Spark job with its traceback (``run`` raises :class:`sparktimely.WorkerError`,
naming the signal if one killed the worker); no segment, thread, child process or module
state stays behind in the reused pyspark workers.

Seeing it run: ``run(..., progress=True)`` shows a live display on the driver, ``log_dir=``
(on all three) has the workers write log files for ``python -m sparktimely.profile``, and
``run``'s Spark job is described as ``sparktimely: run module:function on N workers`` (in the
job group ``sparktimely`` unless the caller set one), as the Spark UI shows it.

Spark's rules apply: barrier stages need as many free task slots as workers and refuse
dynamic allocation (both checked up front, :class:`BarrierSetupError`).

The executors need not have sparktimely installed: it travels with the job as a zip of the
package (``addPyFile``, once per application; :mod:`._ship`). Its compiled dependencies
(numpy, pyarrow, xxhash, multiprocess, psutil) cannot: every task checks them before
anything else, and an executor without them fails the job with :class:`EnvironmentMissing`,
naming what is missing, the executor and its Python, and how to ship an environment
(Spark's ``--archives`` with a packed virtualenv).

Environment (on the executors, e.g. through ``spark.executorEnv.NAME``):
``SPARKTIMELY_CONNECT_TIMEOUT`` (seconds allowed for connecting, default 60) and
``SPARKTIMELY_FORCE_SOCKETS=1`` (every task a host of its own: sockets only).

Spark is an extra: ``pip install 'sparktimely[spark]'`` (without pyspark, importing this
package fails with one line saying so).
"""
from .._extras import require

require("pyspark", "spark", "sparktimely.barrier")

from ._api import BarrierSetupError, check_resources, map_in_arrow, map_partitions, run
from ._plan import TaskAddress, TaskPlan
from ._ship import EnvironmentMissing, package_zip, ship
from ._task import BarrierWorker, TaskFailed, parse_failure

for _public in (BarrierSetupError, check_resources, map_in_arrow, map_partitions, run,
                TaskAddress, TaskPlan, BarrierWorker, TaskFailed, parse_failure,
                EnvironmentMissing, package_zip, ship):
    _public.__module__ = __name__       # public here; defined in the private modules

__all__ = ["BarrierSetupError", "BarrierWorker", "EnvironmentMissing", "TaskAddress",
           "TaskFailed", "TaskPlan", "check_resources", "map_in_arrow", "map_partitions",
           "package_zip", "parse_failure", "run", "ship"]
