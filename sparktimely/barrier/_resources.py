"""Whether Spark can run a barrier stage of N tasks, decided before anything is submitted.

Spark runs a barrier stage only with dynamic allocation off and with as many free task slots
as tasks; otherwise its own check retries for minutes, and under Spark Connect a barrier
stage with more tasks than slots can even shut the shared server's SparkContext down. So
every entry point calls :func:`check` first, which answers within seconds:

- dynamic allocation is read from the configuration, at once;
- a classic application counts its slots as Spark's scheduler does (registered executors'
  cores / ``spark.task.cpus``). A young application (started less than
  :data:`YOUNG_APPLICATION` seconds ago) may still be registering executors: the count is
  taken once it has not changed for :data:`SETTLE` seconds (and at most after
  :data:`FIRST_EXECUTOR_WAIT` seconds without any executor);
- under Spark Connect (no SparkContext), ``local[N]`` and ``local-cluster`` masters tell the
  slots; on a cluster manager :func:`probe_slots` runs N ordinary tasks that each hold a slot
  for a moment and counts how many ran at once.
"""
from __future__ import annotations

import re
import time
from typing import Any

from ..errors import require_positive_int

__all__ = ["BarrierSetupError", "check", "check_resources", "context_of", "is_local",
           "probe_slots", "slots_of", "wait_for_slots"]

SETTLE = 2.0
"""Seconds without a new executor after which a young application's slots are taken as all
it has."""

FIRST_EXECUTOR_WAIT = 10.0
"""Seconds a young application without any executor is given for its first one."""

YOUNG_APPLICATION = 30.0
"""An application older than this (seconds) has registered its executors: its slots are
counted at once."""

PROBE_SECONDS = 0.5
"""How long each task of :func:`probe_slots` holds its slot."""


class BarrierSetupError(RuntimeError):
    """Spark cannot run the barrier stage: too few task slots, or dynamic allocation is on.

    >>> import sparktimely.barrier as stb
    >>> try:
    ...     stb.check_resources(4, 2, "local[2]", False)
    ... except stb.BarrierSetupError as error:
    ...     print(str(error).split(",")[0])
    4 sparktimely workers need 4 barrier tasks running at once
    """


def check_resources(num_workers: int, slots: int | None, master: str,
                    dynamic_allocation: bool) -> None:
    """Raise :class:`BarrierSetupError` unless ``num_workers`` barrier tasks can run at once.

    >>> check_resources(2, 2, "local[2]", False)
    >>> check_resources(2, 0, "spark://m:7077", False)
    Traceback (most recent call last):
    ...
    sparktimely.barrier.BarrierSetupError: 2 sparktimely workers need barrier tasks, but this Spark application has no executors (master spark://m:7077): the cluster gave it no cores; is another application holding them all (limit it with spark.cores.max), or do the workers lack the memory or cores its executors ask for?
    >>> check_resources(3, 2, "local[2]", False)
    Traceback (most recent call last):
    ...
    sparktimely.barrier.BarrierSetupError: 3 sparktimely workers need 3 barrier tasks running at once, but this Spark application has 2 task slots (master local[2]): ask for fewer workers or for more cores: master local[3] or more
    """
    require_positive_int(num_workers, "num_workers")
    if dynamic_allocation and not is_local(master):
        raise BarrierSetupError(
            "Spark runs barrier stages only without dynamic allocation, and "
            "spark.dynamicAllocation.enabled is true: start the application with "
            "--conf spark.dynamicAllocation.enabled=false and a fixed number of executors "
            "(spark.executor.instances)")
    if slots == 0 and not is_local(master):
        raise BarrierSetupError(
            f"{num_workers} sparktimely worker{'s' if num_workers != 1 else ''} need "
            f"barrier tasks, but this Spark application has no executors (master {master}): "
            f"the cluster gave it no cores; is another application holding them all (limit "
            f"it with spark.cores.max), or do the workers lack the memory or cores its "
            f"executors ask for?")
    if slots is not None and num_workers > slots:
        raise BarrierSetupError(
            f"{num_workers} sparktimely workers need {num_workers} barrier tasks running at "
            f"once, but this Spark application has {slots} task slot"
            f"{'s' if slots != 1 else ''} (master {master}): ask for fewer workers or for "
            f"{more_slots(master, num_workers)}")


def more_slots(master: str, needed: int) -> str:
    """How to give an application on ``master`` ``needed`` task slots, in the terms of its
    cluster manager.

    >>> more_slots("local[2]", 3)
    'more cores: master local[3] or more'
    >>> more_slots("spark://m:7077", 3)
    'more cores: spark.cores.max (--total-executor-cores) of at least 3 x spark.task.cpus, on workers with cores free'
    """
    if is_local(master):
        return f"more cores: master local[{needed}] or more"
    if master.startswith("spark://"):
        return (f"more cores: spark.cores.max (--total-executor-cores) of at least {needed} x "
                f"spark.task.cpus, on workers with cores free")
    return (f"more executors or cores: spark.executor.instances x spark.executor.cores of at "
            f"least {needed} x spark.task.cpus")


def is_local(master: str) -> bool:
    """Spark's local mode (one JVM, fixed slots); ``local-cluster`` is a real cluster.

    >>> is_local("local[4]"), is_local("local-cluster[2,1,1024]"), is_local("yarn")
    (True, False, False)
    """
    return master == "local" or master.startswith("local[")


def context_of(spark: Any) -> Any:
    """The SparkContext of a SparkSession or SparkContext; None under Spark Connect."""
    if hasattr(spark, "parallelize"):
        return spark
    try:
        return spark.sparkContext
    except Exception:                                  # Spark Connect has no SparkContext
        return None


def slots_of(sc: Any) -> int | None:
    """Task slots the scheduler of SparkContext ``sc`` can run at once (what Spark's own
    barrier check uses), None if Spark does not say."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:
        return None


def _settled_slots(sc: Any, needed: int) -> int | None:
    """:func:`slots_of`, once a young application's executors have stopped registering (or
    at once when there are enough, the application is local or it is not young)."""
    slots = slots_of(sc)
    if slots is None or slots >= needed or is_local(sc.master):
        return slots
    age = time.time() - sc.startTime / 1000
    started = changed = time.monotonic()
    while age + time.monotonic() - started < YOUNG_APPLICATION:
        waited, quiet = time.monotonic() - started, time.monotonic() - changed
        if quiet >= SETTLE and (slots or waited >= FIRST_EXECUTOR_WAIT):
            break
        time.sleep(0.2)
        now = slots_of(sc) or 0
        if now != slots:
            slots, changed = now, time.monotonic()
        if slots >= needed:
            break
    return slots


def wait_for_slots(sc: Any, needed: int, seconds: float = 60.0) -> None:
    """Wait (``seconds`` at most) until SparkContext ``sc`` has ``needed`` task slots again,
    as after a lost executor, which the cluster manager replaces."""
    deadline = time.monotonic() + seconds
    while (slots_of(sc) or 0) < needed and time.monotonic() < deadline:
        time.sleep(0.5)


_LOCAL = re.compile(r"local\[(\d+)(?:,\s*\d+)?\]|local-cluster\[(\d+),\s*(\d+),\s*\d+\]")


def _connect_conf(spark: Any, key: str) -> str | None:
    try:
        return spark.conf.get(key, None)
    except Exception:
        return None


def check(spark: Any, num_workers: int) -> None:
    """Raise :class:`BarrierSetupError` (or ValueError for a bad ``num_workers``) unless
    ``spark`` (a SparkSession, also under Spark Connect, or a SparkContext) can run
    ``num_workers`` barrier tasks at once; see the module doc."""
    sc = context_of(spark)
    if sc is None:
        master = _connect_conf(spark, "spark.master") or "unknown"
        dynamic = (_connect_conf(spark, "spark.dynamicAllocation.enabled") or "").lower()
        check_resources(num_workers, None, master, dynamic == "true")
        check_resources(num_workers, _connect_slots(spark, master, num_workers), master, False)
        return
    dynamic = sc.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true"
    check_resources(num_workers, None, sc.master, dynamic)        # no waiting for this one
    check_resources(num_workers, _settled_slots(sc, num_workers), sc.master, False)


def _connect_slots(spark: Any, master: str, needed: int) -> int:
    """The slots of a Spark Connect server's application: from its master, else probed."""
    cpus = int(_connect_conf(spark, "spark.task.cpus") or 1)
    if master == "local":
        return 1 // cpus
    match = _LOCAL.fullmatch(master.replace(" ", ""))
    if match and match[1]:
        return int(match[1]) // cpus
    if match:
        return int(match[2]) * int(match[3]) // cpus
    return probe_slots(spark, needed)


_probed: dict[str, int] = {}          # Spark Connect session id -> slots seen at once


def probe_slots(spark: Any, tasks: int) -> int:
    """How many of ``tasks`` ordinary (not barrier) tasks ran at once when each held its slot
    for :data:`PROBE_SECONDS`: ``tasks`` if the application has that many free slots, else
    about how many it has. A first round of the same tasks starts the executors' Python
    workers, so that the measured round's tasks start as soon as they get a slot. Works
    under Spark Connect (through ``mapInArrow``); a session's best count is remembered.

    >>> probe_slots(spark, 2)                            # doctest: +SKIP
    2
    """
    key = str(getattr(spark, "session_id", id(spark)))
    if _probed.get(key, 0) >= tasks:
        return _probed[key]

    def rounds(hold: float) -> list:
        def hold_a_slot(batches):                    # runs on the executors, by value
            import time as clock
            start = clock.time()
            import pyarrow as pa
            for _ in batches:
                pass
            clock.sleep(max(0.0, start + hold - clock.time()))
            yield pa.RecordBatch.from_pydict({"start": [start], "end": [clock.time()]})
        return (spark.range(0, tasks, 1, tasks)
                .mapInArrow(hold_a_slot, "start double, end double").collect())
    rounds(0.0)
    rows = rounds(PROBE_SECONDS)
    events = sorted([(row["start"], 1) for row in rows] + [(row["end"], -1) for row in rows])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    _probed[key] = max(most, _probed.get(key, 0))
    return most
