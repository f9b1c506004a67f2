"""The Spark integration's parts that need no Spark: the plan, failure text, resource checks,
output conversion, the entry point's helpers. (The host group record and the janitor, which
Spark tasks use through sparktimely.execute, are tested in tests/execute.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest

import sparktimely as st
from sparktimely.barrier import (BarrierSetupError, TaskAddress, TaskPlan, check_resources,
                                 parse_failure)
from sparktimely.barrier._task import as_arrow
from sparktimely.barrier._task import TaskFailed, format_failure
from sparktimely.barrier.submit import JavaMissing, load_function, require_java

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- plan ----------------------------------------------------------------------------------

def tasks(*hosts: str) -> list[str]:
    return [TaskAddress(i, host, 5000 + i, f"id-{host}", f"sparktimely-{100 + i}-1-aa").to_json()
            for i, host in enumerate(hosts)]


def test_plan_orders_by_partition_and_groups_by_identity():
    gathered = list(reversed(tasks("a", "b", "a", "b", "a")))
    addresses = TaskPlan.from_gathered(gathered, 4).addresses
    assert [a.address for a in addresses] == ["a:5000", "b:5001", "a:5002", "b:5003", "a:5004"]
    assert [a.group for a in addresses] == ["id-a", "id-b", "id-a", "id-b", "id-a"]
    assert [a.mesh for a in addresses] == ["sparktimely-100-1-aa", "sparktimely-101-1-aa"] * 2 + [
        "sparktimely-100-1-aa"]
    assert [a.label for a in addresses] == [f"Spark partition {i}" for i in range(5)]


def test_plan_rejects_missing_partitions():
    gathered = tasks("a", "a")
    with pytest.raises(ValueError, match="partitions"):
        TaskPlan.from_gathered(gathered[:1] + [gathered[1].replace('"partition": 1', '"partition": 3')], 0)


def test_ipv6_hosts_are_bracketed():
    gathered = [TaskAddress(0, "::1", 7, "x", "sparktimely-1-1-a").to_json()]
    assert [a.address for a in TaskPlan.from_gathered(gathered, 0).addresses] == ["[::1]:7"]


# -- failures --------------------------------------------------------------------------------

def test_failure_text_survives_being_embedded_in_a_spark_message():
    text = format_failure(3, "KeyError: 'x'", "Traceback (most recent call last):\n  File \"job.py\"\nKeyError: 'x'")
    spark_message = ("An error occurred while calling o1.collectAndServe.\n: org.apache.spark.SparkException: "
                     "Job aborted ...\nsparktimely.barrier._task.TaskFailed: " + text + "\n\tat org.apache...")
    error = parse_failure(spark_message)
    assert isinstance(error, st.WorkerError)
    assert error.index == 3 and "KeyError: 'x'" in str(error) and 'File "job.py"' in error.traceback
    assert parse_failure("some other Spark failure") is None
    assert str(TaskFailed(3, "KeyError: 'x'", "tb")) == format_failure(3, "KeyError: 'x'", "tb")


def test_resource_checks():
    check_resources(4, 4, "spark://m:7077", False)
    check_resources(4, None, "yarn", False)
    with pytest.raises(BarrierSetupError, match="3 task slots"):
        check_resources(4, 3, "spark://m:7077", False)
    # the remedy in the cluster manager's own terms
    for master, remedy in [("local[2]", "master local[4] or more"),
                           ("spark://m:7077", "spark.cores.max (--total-executor-cores) of at "
                                              "least 4 x spark.task.cpus"),
                           ("yarn", "spark.executor.instances x spark.executor.cores of at "
                                    "least 4 x spark.task.cpus")]:
        with pytest.raises(BarrierSetupError) as refused:
            check_resources(4, 3, master, False)
        assert remedy in str(refused.value)
        assert ("local[" in str(refused.value).split("):")[1]) == master.startswith("local")
    # no executors at all: fewer workers would not help (another application holds the cores)
    with pytest.raises(BarrierSetupError, match=r"has no executors \(master spark://m:7077\): "
                                                r"the cluster gave it no cores; is another "
                                                r"application holding them all"):
        check_resources(2, 0, "spark://m:7077", False)
    with pytest.raises(BarrierSetupError, match="dynamicAllocation.enabled=false"):
        check_resources(2, 8, "yarn", True)
    check_resources(2, 2, "local[2]", True)            # Spark ignores it in local mode
    with pytest.raises(BarrierSetupError, match="dynamic allocation"):
        check_resources(2, 2, "local-cluster[2,1,1024]", True)   # a real cluster
    with pytest.raises(ValueError):
        check_resources(0, 2, "local[2]", False)


# -- output conversion --------------------------------------------------------------------------

SCHEMA = pa.schema([("word", pa.string()), ("count", pa.int64())])


def test_output_records_become_batches_of_the_schema():
    assert as_arrow([("a", 1), ("b", 2)], SCHEMA).to_pylist() == [
        {"word": "a", "count": 1}, {"word": "b", "count": 2}]
    assert as_arrow([{"count": 3, "word": "c"}], SCHEMA).to_pylist() == [{"word": "c", "count": 3}]
    batch = pa.RecordBatch.from_pydict({"count": pa.array([1], pa.int32()), "word": ["x"], "extra": [0]})
    assert as_arrow(batch, SCHEMA).schema == SCHEMA
    one = pa.schema([("n", pa.int64())])
    assert as_arrow([1, 2], one).column(0).to_pylist() == [1, 2]
    with pytest.raises(ValueError, match="fields"):
        as_arrow([("a", 1, 2)], SCHEMA)


def test_an_output_that_does_not_fit_the_schema_names_its_column():
    with pytest.raises(pa.ArrowInvalid, match="output column 'count' does not fit the "
                                              "schema's int64: Could not convert 'many'"):
        as_arrow([("a", "many")], SCHEMA)
    batch = pa.RecordBatch.from_pydict({"word": ["x"], "count": ["many"]})
    with pytest.raises(pa.ArrowInvalid, match=r"output column 'count' \(string\) does not "
                                              r"fit the schema's int64"):
        as_arrow(batch, SCHEMA)


def test_an_output_that_lacks_a_column_of_the_schema_is_refused_naming_it():
    """Batches naming some of the schema's columns were taken by position (k got v's
    values), dicts without a schema key gave nulls, and a null in a field that is not
    nullable failed in the JVM ("Value at index is null")."""
    swapped = pa.RecordBatch.from_pydict({"count": [1], "words": ["x"]})
    with pytest.raises(ValueError, match=re.escape(
            "an output batch has columns ['count', 'words'], but the schema asks for "
            "['word', 'count'] (it lacks ['word'])")):
        as_arrow(swapped, SCHEMA)
    unnamed = pa.RecordBatch.from_pydict({"f0": ["x"], "f1": [1]})    # no name in common
    assert as_arrow(unnamed, SCHEMA).to_pylist() == [{"word": "x", "count": 1}]
    with pytest.raises(ValueError, match=re.escape(
            "output records have keys ['count', 'w'], but the schema asks for "
            "['word', 'count'] (none has ['word'])")):
        as_arrow([{"w": "x", "count": 1}], SCHEMA)
    strict = pa.schema([pa.field("word", pa.string(), nullable=False), ("count", pa.int64())])
    assert as_arrow([("x", None)], strict).to_pylist() == [{"word": "x", "count": None}]
    with pytest.raises(ValueError, match=re.escape(
            "output column 'word' holds 1 null(s), but the schema's field is not nullable")):
        as_arrow([(None, 1)], strict)


# -- entry point helpers -----------------------------------------------------------------------

def test_load_function():
    assert load_function("examples.pagerank:job").__name__ == "job"
    assert load_function("os.path.join")("a", "b") == "a/b"
    with pytest.raises(ValueError):
        load_function("nomodule")
    # a module reached as an attribute of its package (json imports json.decoder) is still
    # a module: the message says to name the function, however it was found
    for module in ("json.decoder", "os.path"):
        with pytest.raises(ValueError, match=f"{module} is a module: name the function to "
                                             f"run in it, as {module}:FUNCTION"):
            load_function(module)


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissing, match="Java 17 or later"):
        require_java()


@pytest.mark.timeout(60)
def test_demo_without_java_stops_with_a_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "examples.demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=50)
    assert done.returncode == 2
    assert "needs Java" in done.stderr and "Traceback" not in done.stderr
    assert "py4j" not in done.stderr.lower()


@pytest.mark.timeout(60)
def test_submit_path_and_usage():
    done = subprocess.run([sys.executable, "-m", "sparktimely.barrier.submit", "--path"],
                          cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0 and done.stdout.strip().endswith("sparktimely/barrier/submit.py")


# -- slots before submitting ------------------------------------------------------------------

class ScriptedContext:
    """A SparkContext as the slot check sees it: its slots follow ``script`` (seconds since
    the check began -> slots), its application started ``age`` seconds ago."""

    def __init__(self, script: list[tuple[float, int]], age: float,
                 dynamic: bool = False) -> None:
        import time
        self.script, self.began, self.master = script, time.monotonic(), "spark://m:7077"
        self.startTime = int((time.time() - age) * 1000)
        self.dynamic = dynamic
        self._jsc = self

    def parallelize(self):                       # makes it a SparkContext to context_of
        raise AssertionError

    def sc(self):
        return self

    def resourceProfileManager(self):
        return self

    def defaultResourceProfile(self):
        return None

    def maxNumConcurrentTasks(self, profile) -> int:
        import time
        now = time.monotonic() - self.began
        return [slots for at, slots in self.script if at <= now][-1]

    def getConf(self):
        return {"spark.dynamicAllocation.enabled": "true" if self.dynamic else "false"}


@pytest.mark.timeout(60)
def test_a_young_application_is_given_until_its_executors_stop_registering():
    import time

    from sparktimely.barrier._resources import SETTLE, check
    registering = [(0.0, 0), (1.0, 1), (2.0, 2)]         # executors come during 2 s
    started = time.monotonic()
    check(ScriptedContext(registering, age=1.0), 2)      # waits for the second, no longer
    assert 1.5 < time.monotonic() - started < 3.5
    started = time.monotonic()
    with pytest.raises(BarrierSetupError, match="has 2 task slots"):
        check(ScriptedContext(registering, age=1.0), 3)  # none comes for SETTLE s: refused
    assert 2.0 + SETTLE - 0.5 < time.monotonic() - started < 2.0 + SETTLE + 1.5


@pytest.mark.timeout(60)
def test_an_old_application_or_dynamic_allocation_is_refused_at_once():
    import time

    from sparktimely.barrier._resources import check
    started = time.monotonic()
    with pytest.raises(BarrierSetupError, match="has 2 task slots"):
        check(ScriptedContext([(0.0, 2), (0.5, 3)], age=120.0), 3)
    with pytest.raises(BarrierSetupError, match="dynamic allocation"):
        check(ScriptedContext([(0.0, 0)], age=1.0, dynamic=True), 2)
    assert time.monotonic() - started < 1.5                # not SETTLE (2 s) each


@pytest.mark.parametrize("option, message", [
    ({"checkpoint_every": 0}, "checkpoint_every must be a positive integer, got 0"),
    ({"stall_limit": -1}, "stall_limit must be a positive number of seconds, got -1"),
    ({"timeout": -5}, "timeout must be a positive number of seconds, got -5"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
    ({"stall_limit": float("inf")}, "stall_limit must be at most 1000000 seconds (11.6 days), "
                                    "got inf"),
    ({"timeout": 1e10}, "timeout must be at most 1000000 seconds (11.6 days), got "
                        "10000000000.0"),
    ({"log_dir": ""}, "log_dir: an empty path names no directory")])
def test_the_barrier_forms_refuse_bad_options_before_any_stage(option, message):
    """As execute does: before the slot check (which would find the scripted context's 2
    slots too few for 3 workers) and before any barrier stage is launched, in run and in
    the lazy forms (whose RDD and DataFrame here have 3 partitions)."""
    from sparktimely.barrier import map_in_arrow, map_partitions, run
    context = ScriptedContext([(0.0, 2)], age=120.0)

    class Partitioned:                            # an RDD, and a DataFrame's .rdd
        def __init__(self) -> None:
            self.context = self.rdd = self
            self.sparkSession = context

        def getNumPartitions(self) -> int:
            return 3
    with pytest.raises(ValueError, match=re.escape(message)):
        run(context, lambda worker: None, 3, **option)
    with pytest.raises(ValueError, match=re.escape(message)):
        map_partitions(Partitioned(), lambda scope, stream: stream, **option)
    with pytest.raises(ValueError, match=re.escape(message)):
        map_in_arrow(Partitioned(), lambda scope, stream: stream, "x long", **option)


def test_the_barrier_forms_refuse_what_is_not_a_function_before_spark_runs_anything():
    """As execute does: a job or build that cannot be called is a TypeError naming the
    form, not a WorkerError after a Spark job (the scripted context would fail any job)."""
    from sparktimely.barrier import map_in_arrow, map_partitions, run
    with pytest.raises(TypeError, match=r"^sparktimely.barrier.run: the job must be a "
                                        r"function of the worker, got 5 \(int\)$"):
        run(ScriptedContext([(0.0, 2)], age=120.0), 5, 2)
    with pytest.raises(TypeError, match=r"^sparktimely.barrier.map_partitions: build must be "
                                        r"a function build\(scope, stream\), got None "
                                        r"\(NoneType\)$"):
        map_partitions(object(), None)
    with pytest.raises(TypeError, match=r"^sparktimely.barrier.map_in_arrow: build must be "):
        map_in_arrow(object(), None, "x long")
    with pytest.raises(ValueError, match="num_workers must be a positive integer, got True"):
        run(ScriptedContext([(0.0, 2)], age=120.0), lambda worker: None, True)


def test_an_empty_log_directory_is_refused_in_the_words_of_the_one_check():
    """barrier's log_dir and sparktimely-submit's --log-dir name a directory on the executors,
    so they check only what the driver can: that the path is not empty (as execute's check of
    a directory on the driver does first)."""
    import argparse
    from sparktimely.barrier._api import _log_dir
    from sparktimely.barrier.submit import _directory_name
    from sparktimely.errors import empty_path_problem
    from sparktimely.logging.files import directory_problem
    empty = empty_path_problem("")
    assert empty is not None and directory_problem("") == empty
    with pytest.raises(ValueError, match=f"^log_dir: {re.escape(empty)}$"):
        _log_dir("")
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(empty)}$"):
        _directory_name("")
    assert empty_path_problem("logs") is None and _directory_name("logs") == "logs"


@pytest.mark.timeout(60)
def test_a_task_whose_first_worker_of_the_host_never_comes_fails_naming_it():
    """Task 1 of a stage of 2 on one host, whose task 0 (the one that makes the host's
    shared memory) never comes: the task fails with TaskFailed naming worker 1 and the
    timeout (the driver turns it into a WorkerError), not a bare TimeoutError."""
    from types import SimpleNamespace

    from sparktimely.barrier._plan import TaskAddress
    from sparktimely.barrier._task import TaskFailed, run_in_task
    from sparktimely.execute import Seat

    absent = Seat("localhost", label="Spark partition 0")

    class SecondTask:
        def partitionId(self):
            return 1

        def getTaskInfos(self):
            return [SimpleNamespace(address="localhost:1")] * 2

        def allGather(self, mine):
            return [TaskAddress.of(0, absent.address()).to_json(), mine]
    try:
        with pytest.raises(TaskFailed) as failed:
            run_in_task(lambda worker: worker.index, timeout=0.5, context=SecondTask())
    finally:
        absent.close()
    assert failed.value.index == 1
    assert failed.value.message.startswith("TimeoutError: worker 0 (Spark partition 0), the "
                                           "first of this host's workers, did not create")


def test_an_executor_missing_one_module_is_told_to_install_it(monkeypatch):
    pytest.importorskip("pyspark")
    from sparktimely.barrier import _ship
    for required, told in [(("numpy", "no_such_module_st"), "is missing there: install it for "),
                           (("no_such_module_st", "nor_this_one_st"),
                            "are missing there: install them for ")]:
        monkeypatch.setattr(_ship, "REQUIRED", required)
        with pytest.raises(RuntimeError) as refused:
            _ship.on_executor(lambda: 1)()
        assert f"(No module named '{required[-1]}') {told}that Python on every node" in str(
            refused.value)
