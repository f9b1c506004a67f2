"""sparktimely on a real local Spark (``local[2]``, one session shared by the module, started
by the first test that needs it; and ``local-cluster`` in a separate driver): run,
map_in_arrow, map_partitions, failures, reused Python workers, the entry point."""
from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections import Counter
from functools import partial

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from segment_leaks import segments_of
from spark_session import spark_session

import sparktimely as st
import sparktimely.differential as dd
import sparktimely.barrier as stb

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def spark():
    yield from spark_session()


@pytest.fixture(scope="module", autouse=True)
def pickle_this_module_by_value():
    """Executors cannot import test modules: ship this module's functions by value."""
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def descendants() -> set[int]:
    """Every process below this one: the JVM, pyspark daemons and their Python workers."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def wait_until_no_segments(pids: set[int], seconds: float = 15.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while segments_of(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return segments_of(pids)


@pytest.fixture
def sockets(spark):
    """Make every task a host of its own (workers talk through sockets) for one test."""
    environment = spark.sparkContext.environment
    environment["SPARKTIMELY_FORCE_SOCKETS"] = "1"
    yield
    del environment["SPARKTIMELY_FORCE_SOCKETS"]


# -- jobs ------------------------------------------------------------------------------------

def exchange_job(worker):
    """Each worker sends 0..99 round; returns what it received and the pid of its Spark task's
    Python process (the worker runs in a child of it)."""
    def build(scope):
        return (scope.to_stream(range(worker.index * 100, worker.index * 100 + 100))
                .exchange(lambda x: x).capture())
    captured = worker.dataflow(build)
    worker.run()
    return worker.index, worker.peers, os.getppid(), sorted(x for _, b in captured.extract() for x in b)


def python_worker_state(_):
    """pid, threads, child processes, and live sparktimely runtime objects of this process."""
    import gc
    import threading
    gc.collect()
    ours = ("Mesh", "Endpoint", "Segment", "Worker", "BarrierWorker", "ClusterAllocator",
            "ShmAllocator", "Janitor", "GroupRecord", "HostGroup", "WorkerSession", "Seat",
            "Dataflow")
    live = sorted(type(o).__name__ for o in gc.get_objects()
                  if type(o).__name__ in ours and type(o).__module__.startswith("sparktimely"))
    yield (os.getpid(), threading.active_count(),
           [c.pid for c in psutil.Process().children(recursive=True)], live)


def state_of_python_workers(spark) -> dict[int, tuple]:
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(python_worker_state).collect()
    return {pid: rest for pid, *rest in rows}


def wordcount(scope, lines):
    def words(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                output.give_at(cap, [(word, 1) for line in batch.column("line").to_pylist()
                                     for word in line.split()])
        return logic
    return (lines.unary(st.Pipeline, "Words", words)
            .aggregate(lambda word, n, total: (total or 0) + n, lambda word, total: (word, total),
                       lambda word: zlib.crc32(word.encode())))


LINES = [f"w{i % 7} w{i % 11} w{i % 13} common" for i in range(3000)]


# -- tests -----------------------------------------------------------------------------------

def test_run_returns_results_by_worker_index_and_workers_exchange_data(spark):
    results = stb.run(spark, exchange_job, 2)
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert results[0][3] == list(range(0, 200, 2)) and results[1][3] == list(range(1, 200, 2))
    assert results[0][2] != results[1][2]                     # two processes
    assert segments_of({r[2] for r in results}) == []
    assert stb.run(spark, lambda worker: worker.args, 2, args=["--x", "1"]) == [["--x", "1"]] * 2


def test_run_returns_instances_of_the_programs_own_classes_as_those_classes(spark):
    """A class Spark shipped by value (the program's own, here local) comes back as the
    driver's very class, as from Spark's own collect; what no pickler takes is named."""
    class Reading:
        def __init__(self, worker: int) -> None:
            self.worker = worker

    results = stb.run(spark, lambda worker: Reading(worker.index), 2)
    assert [type(r) for r in results] == [Reading, Reading]
    assert [r.worker for r in results] == [0, 1]
    with pytest.raises(st.WorkerError, match=r"^worker \d failed: the result of worker \d cannot "
                                             r"be sent back: TypeError: cannot pickle 'generator'"):
        stb.run(spark, lambda worker: (x for x in "generators do not pickle"), 2)
    # a lock leaves the worker's process (dill takes it) but Spark cannot pickle it
    with pytest.raises(st.WorkerError, match=r"^worker 0 failed: the result of worker 0 cannot "
                                             r"be sent back: TypeError: cannot pickle "
                                             r"'_thread.lock'"):
        stb.run(spark, lambda worker: threading.Lock(), 1)


def test_what_cannot_reach_the_executors_is_named_before_any_stage(spark, monkeypatch):
    """A job function holding a lock, and a bad ``$SPARKTIMELY_CONNECT_TIMEOUT`` here, are
    told on the driver at once (they came back as Spark's errors after a stage)."""
    lock = threading.Lock()
    with pytest.raises(TypeError, match="the job cannot be sent to Spark's executors: pickling "
                                        "its function .* cannot pickle '_thread.lock'"):
        stb.run(spark, lambda worker: lock.locked(), 1)
    with open(__file__) as source:          # cloudpickle sent a copy of it, read here
        with pytest.raises(TypeError, match=r"the job cannot be sent to Spark's executors: "
                                            r"pickling its function .* it holds the open file "
                                            r"'.*test_spark_barrier.py'"):
            stb.map_partitions(spark.sparkContext.parallelize([1], 1),
                               lambda scope, stream: stream.map(lambda x: source.readline()))
    monkeypatch.setenv("SPARKTIMELY_CONNECT_TIMEOUT", "abc")
    for call in (lambda: stb.run(spark, lambda worker: 1, 1),
                 lambda: stb.map_in_arrow(spark.range(0, 10, 1, 1), lambda scope, s: s,
                                          "id long")):
        with pytest.raises(ValueError, match=r"\$SPARKTIMELY_CONNECT_TIMEOUT must be a "
                                             r"positive number of seconds, got 'abc'"):
            call()


def test_map_in_arrow_wordcount(spark):
    df = spark.createDataFrame([(line,) for line in LINES], "line string")
    out = stb.map_in_arrow(df, wordcount, "word string, count long", num_workers=2)
    assert out.schema.simpleString() == "struct<word:string,count:bigint>"
    counts = {row["word"]: row["count"] for row in out.collect()}
    assert counts == Counter(word for line in LINES for word in line.split())


def test_map_in_arrow_keeps_partitions_and_takes_arrow_output(spark):
    df = spark.range(0, 1000, 1, 2)

    def build(scope, stream):
        def double(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batch in input:
                    ids = batch.column("id").to_numpy()
                    output.give_at(cap, pa.RecordBatch.from_pydict(
                        {"id": ids, "twice": ids * 2, "worker": np.full(len(ids), scope.index)}))
            return logic
        return stream.unary(st.Pipeline, "Double", double)
    rows = stb.map_in_arrow(df, build, "id long, twice long, worker int").collect()
    assert sorted((r.id, r.twice) for r in rows) == [(i, 2 * i) for i in range(1000)]
    assert {r.worker for r in rows} == {0, 1}


def test_map_partitions(spark):
    rdd = spark.sparkContext.parallelize(range(1000), 2)

    def build(scope, numbers):
        return (numbers.map(lambda x: (x % 10, x))
                .aggregate(lambda key, x, total: (total or 0) + x, lambda key, total: (key, total),
                           lambda key: key))
    assert sorted(stb.map_partitions(rdd, build).collect()) == [
        (k, sum(range(k, 1000, 10))) for k in range(10)]


def test_map_in_arrow_takes_timestamps_in_the_sessions_time_zone(spark):
    rows = [(i, datetime.datetime(2024, 1, 1, 0, 0, i), datetime.datetime(2024, 1, 1, 0, 0, i))
            for i in range(6)]
    schema = "id long, ts timestamp, ntz timestamp_ntz"
    df = spark.createDataFrame(rows, schema).repartition(2)
    for output_schema in (schema, df.schema):
        out = stb.map_in_arrow(df, lambda scope, stream: stream, output_schema)
        assert sorted(tuple(row) for row in out.collect()) == rows


def test_the_lazy_forms_of_nothing_are_empty(spark):
    """No partitions: no worker to run, as Spark runs no task (not a num_workers error)."""
    empty = spark.sparkContext.emptyRDD()
    assert stb.map_partitions(empty, lambda scope, stream: stream).collect() == []
    df = spark.createDataFrame(empty, "a long")
    out = stb.map_in_arrow(df, lambda scope, stream: stream, "a long")
    assert (out.collect(), out.schema.simpleString()) == ([], "struct<a:bigint>")


def test_pagerank_dataframe_matches_numpy(spark):
    from examples.pagerank import generate_graph, numpy_pagerank, pagerank_dataframe
    src, dst = generate_graph(2000, 20000)
    df = spark.createDataFrame(list(zip(src.tolist(), dst.tolist())), "src long, dst long")
    rows = pagerank_dataframe(df, 10, num_workers=2).collect()
    nodes = np.array([row.node for row in rows])
    reference = numpy_pagerank(src, dst, 2000, 10)
    np.testing.assert_allclose(np.array([row.rank for row in rows]), reference[nodes])
    assert len(nodes) == len(set(nodes.tolist())) and set(nodes.tolist()) <= set(range(2000))


def test_submit_entry_point_runs_a_job(spark, tmp_path, capsys):
    from examples.pagerank import generate_graph, numpy_pagerank
    from sparktimely.barrier import submit
    src, dst = generate_graph(1000, 10000)
    pq.write_table(pa.table({"src": src, "dst": dst}), tmp_path / "edges.parquet", row_group_size=2500)
    status = submit.main(["-w", "2", "examples.pagerank:job", "--edges", str(tmp_path / "edges.parquet"),
                          "--iterations", "5", "--top", "3"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    top = np.argsort(-numpy_pagerank(src, dst, 1000, 5), kind="stable")[:3]
    assert "PageRank: 5 iterations" in captured.out and "ms per iteration" in captured.out
    assert [int(line.split()[1]) for line in captured.out.splitlines()
            if line.strip().startswith("node")] == top.tolist()
    assert "2 workers ran examples.pagerank:job" in captured.err


def test_too_few_slots_fail_at_once(spark):
    started = time.monotonic()
    with pytest.raises(stb.BarrierSetupError, match="2 task slots"):
        stb.run(spark, exchange_job, 3)
    with pytest.raises(stb.BarrierSetupError, match="2 task slots"):
        stb.map_in_arrow(spark.range(10), lambda scope, s: s, "id long", num_workers=3)
    assert time.monotonic() - started < 10


def test_more_partitions_than_slots_are_told_as_partitions(spark):
    """Without num_workers, one worker runs per partition: too many partitions are told as
    such, with how to have fewer (the error said "ask for fewer workers" to a caller who had
    asked for none)."""
    started = time.monotonic()
    with pytest.raises(stb.BarrierSetupError, match=r"has 2 task slots .*\(the DataFrame "
                       r"has 3 partitions, one worker each: give num_workers="):
        stb.map_in_arrow(spark.range(0, 10, 1, 3), lambda scope, s: s, "id long")
    with pytest.raises(stb.BarrierSetupError, match=r"has 2 task slots .*\(the RDD has 3 "
                       r"partitions, one worker each: rdd.repartition"):
        stb.map_partitions(spark.sparkContext.parallelize(range(10), 3), lambda scope, s: s)
    assert time.monotonic() - started < 10


def failing_job(worker):
    """Worker 1 fails while worker 0 waits (parked, no time limit) for its data."""
    handle = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: x).probe())
    if worker.index == 1:
        raise ValueError("boom from worker 1")
    handle.send(1)
    handle.advance_to(1)
    while True:
        worker.step_or_park(None)


def test_a_failing_worker_fails_the_job_promptly_with_its_traceback(spark):
    before = descendants()
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        stb.run(spark, failing_job, 2)
    elapsed = time.monotonic() - started
    error = caught.value
    assert error.index == 1 and "ValueError: boom from worker 1" in str(error)
    assert "in failing_job" in error.traceback and 'raise ValueError("boom from worker 1")' in error.traceback
    assert "boom from worker 1" in str(error.__cause__)       # Spark's own exception, chained
    assert elapsed < 20, f"the failure took {elapsed:.1f} s to surface"
    assert wait_until_no_segments(before | descendants()) == []


def dying_job(directory, how, worker):
    """Worker 1's process dies outright (no cleanup runs) by ``how`` ("exit": os._exit(3), or
    a signal's name); worker 0 sits in user code, so Spark has to kill its task (pyspark
    SIGKILLs the Python worker). Each writes the pids of its worker and its task's process."""
    worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
    with open(os.path.join(directory, f"pid-{worker.index}"), "w") as file:
        file.write(f"{os.getpid()} {os.getppid()}")
    if worker.index == 1:
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), getattr(signal, how))
    time.sleep(600)


@pytest.mark.parametrize("how, cause", [("exit", "exit code 3"),
                                        ("SIGKILL", "killed by signal SIGKILL"),
                                        ("SIGSEGV", "killed by signal SIGSEGV")])
def test_a_worker_that_dies_is_named_with_its_signal_and_leaves_no_segments(spark, tmp_path,
                                                                             how, cause):
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        stb.run(spark, partial(dying_job, str(tmp_path), how), 2)
    elapsed = time.monotonic() - started
    error = caught.value
    assert error.index == 1 and str(error).startswith("worker 1 failed: worker process ")
    assert str(error).endswith(f" died ({cause})")
    assert "Py4J" in type(error.__cause__).__name__ or "sparktimely worker 1 failed" in str(
        error.__cause__)                                      # Spark's own error, chained
    assert elapsed < 10, f"the failure took {elapsed:.1f} s to surface"
    pids = {int(pid) for path in tmp_path.glob("pid-*") for pid in path.read_text().split()}
    assert len(pids) >= 2 and wait_until_no_segments(pids) == []   # worker 0 may not get to it
    assert [r[:2] for r in stb.run(spark, exchange_job, 2)] == [(0, 2), (1, 2)]


def test_a_failure_in_map_in_arrow_carries_the_traceback(spark):
    def build(scope, stream):
        def explode(batch):
            raise KeyError("no such column, worker side")
        return stream.inspect_batch(lambda t, b: explode(b))
    df = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long")
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        df.collect()
    assert "sparktimely worker" in str(caught.value) and "no such column, worker side" in str(caught.value)
    assert "in explode" in str(caught.value)
    assert time.monotonic() - started < 20
    # told as the user's traceback: sparktimely's frames (in the zip executors import it
    # from, or the package) are cut, as where stb.run raises
    told = str(caught.value)
    traceback = told[told.index("--- traceback of sparktimely worker"):]
    assert "frames inside sparktimely)" in traceback
    assert not [line for line in traceback.splitlines() if line.startswith('  File "') and
                re.search(r"sparktimely[^/]*\.zip/|/sparktimely/(?!tests/)", line)], traceback


def test_an_output_that_does_not_fit_the_schema_fails_at_once_naming_worker_and_column(spark):
    def build(scope, stream):
        return stream.map_batches(lambda batch: pa.RecordBatch.from_pydict(
            {"id": batch.column("id"),
             "n": ["many" if scope.index == 1 else "1"] * batch.num_rows}))
    out = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long, n long")
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        out.groupBy("n").count().collect()          # a shuffle-feeding stage Spark would retry
    message = str(caught.value)
    assert "sparktimely worker 1 failed" in message
    assert "operator 'ToSchema'" in message and "output column 'n' (string)" in message
    assert time.monotonic() - started < 20


def test_an_error_in_build_fails_a_shuffle_feeding_stage_at_once_without_retries(spark):
    """The stage feeding count()'s shuffle is not retried four times."""
    def build(scope, stream):
        raise ValueError("no such operator, driver side")
    identity = stb.map_in_arrow(spark.range(0, 100, 1, 2), lambda scope, s: s, "id long",
                                num_workers=2)
    assert identity.count() == 100                    # the same stages, warm
    df = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long", num_workers=2)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        df.count()
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "so the stage is not retried: sparktimely worker " in message
    assert "maximum allowable number of times" not in message
    error = stb.parse_failure(message)
    assert error.message == "ValueError: no such operator, driver side"
    assert 'raise ValueError("no such operator, driver side")' in error.traceback
    assert elapsed < 5, f"the failure took {elapsed:.1f} s to surface"


@pytest.mark.parametrize("where", ["build", "operator"])
def test_sys_exit_in_a_worker_fails_a_shuffle_feeding_stage_at_once_naming_it(spark, where):
    """sys.exit() in one worker's build or operator is a failure in user code, as in
    ``run``: the job fails at once naming the worker and SystemExit (it failed the stage
    through Spark, retried four times, with no worker named)."""
    def build(scope, stream):
        if where == "build" and scope.index == 1:
            sys.exit("no config")

        def exit_on_worker_1(batch):
            if scope.index == 1:
                sys.exit("no config")
            return batch
        return stream.map_batches(exit_on_worker_1)
    df = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long", num_workers=2)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        df.groupBy("id").count().collect()
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "maximum allowable number of times" not in message
    error = stb.parse_failure(message)
    assert error is not None and error.index == 1, message[:2000]
    assert "SystemExit: no config" in error.message, error.message
    assert 'sys.exit("no config")' in error.traceback
    assert elapsed < 5, f"the failure took {elapsed:.1f} s to surface"


@pytest.mark.parametrize("returned, told", [
    (lambda stream: [stream], "list"), (lambda stream: dd.from_stream(stream), "Collection")])
def test_a_build_that_returns_no_stream_is_named_with_what_it_returned(spark, returned, told):
    """It failed in Python's words ('list' object has no attribute 'unary')."""
    df = stb.map_in_arrow(spark.range(0, 10, 1, 1), lambda scope, s: returned(s), "id long",
                          num_workers=1)
    with pytest.raises(Exception) as caught:
        df.collect()
    error = stb.parse_failure(str(caught.value))
    assert error is not None and error.message == (
        f"TypeError: build(scope, stream) returned a {told}: it must return the stream whose "
        f"records become the output rows (or None for no output rows)"), str(caught.value)[:2000]


def stalling_job(worker):
    worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
    if worker.index == 1:
        while True:                                    # user code that never returns
            pass
    worker.run()


def test_an_os_error_in_one_workers_build_is_told_as_its_own(spark):
    """A FileNotFoundError in worker 1's ``build``, in a stage feeding a shuffle: the job
    fails naming worker 1 and its error, not worker 0's loss of its peer (an OSError was
    taken for a transport failure, so worker 1 did not cancel the stage and worker 0 did,
    with its EOFError)."""
    def build(scope, stream):
        if scope.index == 1:
            open("/nonexistent/lookup-table.csv")
        return stream
    df = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long", num_workers=2)
    with pytest.raises(Exception) as caught:
        df.groupBy("id").count().collect()
    error = stb.parse_failure(str(caught.value))
    assert error is not None and error.index == 1, str(caught.value)[:2000]
    assert error.message.startswith("FileNotFoundError"), error.message


def test_a_stall_limit_on_spark_names_the_stalled_worker(spark):
    """On Spark, run() and map_in_arrow take a stall limit."""
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        stb.run(spark, stalling_job, 2, stall_limit=1)
    elapsed = time.monotonic() - started
    assert caught.value.index == 1
    assert str(caught.value).startswith("worker 1 failed: stalled: no step for ")
    assert "in stalling_job" in str(caught.value) and "in stalling_job" in caught.value.traceback
    assert elapsed < 1 + 15, f"the stall took {elapsed:.1f} s to surface"   # Spark under load

    def build(scope, stream):
        stuck = scope.index == 1

        def spin(batch):
            while stuck:
                pass
        return stream.inspect_batch(lambda t, batch: spin(batch))
    df = stb.map_in_arrow(spark.range(0, 100, 1, 2), build, "id long", stall_limit=1)
    started = time.monotonic()
    with pytest.raises(Exception, match=r"sparktimely worker 1 failed: stalled: no step for "
                                        r"[\d.]+ s \(stall limit 1 s\), at File .* in spin"):
        df.collect()
    assert time.monotonic() - started < 1 + 5


def killing_its_task_job(worker):
    worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
    if worker.index == 1:
        os.kill(os.getppid(), signal.SIGKILL)           # the Spark task's own process
    time.sleep(600)


def test_a_task_process_killed_by_a_signal_is_named_as_its_worker(spark):
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        stb.run(spark, killing_its_task_job, 2)
    assert caught.value.index == 1
    assert str(caught.value).startswith("worker 1 failed: the Python process of its Spark task "
                                        "died (Python worker exited unexpectedly (crashed)")
    assert "crashed" in str(caught.value.__cause__)
    assert time.monotonic() - started < 10


def test_workers_talk_through_sockets_across_hosts(spark, sockets):
    results = stb.run(spark, exchange_job, 2)
    assert results[0][3] == list(range(0, 200, 2)) and results[1][3] == list(range(1, 200, 2))
    after = state_of_python_workers(spark)              # same environment: same worker pool
    for pid in {r[2] for r in results} & set(after):
        assert list(after[pid]) == [1, [], []], f"worker {pid}: {after[pid]}"


def test_a_failure_over_sockets_still_fails_promptly(spark, sockets):
    started = time.monotonic()
    with pytest.raises(st.WorkerError) as caught:
        stb.run(spark, failing_job, 2)
    assert caught.value.index == 1 and "boom from worker 1" in caught.value.traceback
    assert time.monotonic() - started < 20


def test_reused_python_workers_keep_nothing_and_run_the_next_job(spark):
    before = state_of_python_workers(spark)
    first = stb.run(spark, exchange_job, 2)
    again = stb.run(spark, exchange_job, 2)
    assert [r[3] for r in again] == [r[3] for r in first]
    pids = {r[2] for r in first} | {r[2] for r in again}
    after = state_of_python_workers(spark)
    reused = set(before) & set(after) & pids
    assert reused, "pyspark did not reuse its Python workers"
    for pid in reused:
        threads, children, live = after[pid]
        assert (threads, children, live) == (before[pid][0], [], []), f"worker {pid}: {after[pid]}"
    assert segments_of(pids) == []


@pytest.mark.timeout(180)
def test_ctrl_c_in_run_cancels_its_stage_at_once(tmp_path):
    """Ctrl-C while run waits: pyspark's own SIGINT handler fails to cancel the jobs (its
    call into the JVM re-enters the one the interrupt broke off), and run waited 10 s for
    tasks nobody cancelled before the KeyboardInterrupt reached the program."""
    started = tmp_path / "started"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {ROOT!r})
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        import sparktimely as st, sparktimely.barrier as stb
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.pyspark.python", sys.executable)
                 .config("spark.executorEnv.PYTHONPATH", {ROOT!r}).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        def job(worker):
            open({str(started)!r} + str(worker.index), "w").close()
            handle = st.InputHandle()
            probe = worker.dataflow(lambda s: s.input_from(handle).exchange(lambda x: x).probe())
            for round in range(600):
                handle.send(round)
                handle.advance_to(round + 1)
                worker.step_while(lambda: probe.less_than(handle.time()))
                time.sleep(0.1)
        try:
            stb.run(spark, job, 2)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
    """))
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{started}{i}") for i in range(2)):
            assert driver.poll() is None and time.monotonic() < deadline, "no task started"
            time.sleep(0.2)
        interrupted = time.monotonic()
        driver.send_signal(signal.SIGINT)
        out, _ = driver.communicate(timeout=60)
        elapsed = time.monotonic() - interrupted
    finally:
        driver.kill()
        driver.wait(10)
    assert "INTERRUPTED" in out
    assert elapsed < 8, f"the interrupt took {elapsed:.1f} s to reach the program"


@pytest.mark.timeout(600)
def test_local_cluster_executors_share_memory(spark, tmp_path):
    """Two executor JVMs on this host (``local-cluster``): tasks of different executors
    still find each other by host identity and use shared memory; a second job works."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, zlib
        sys.path.insert(0, {ROOT!r})
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        import sparktimely as st, sparktimely.barrier as stb
        spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
                 .config("spark.ui.enabled", "false").config("spark.pyspark.python", sys.executable)
                 .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
                 .config("spark.executorEnv.PYTHONPATH", {ROOT!r})
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        def job(worker):
            captured = worker.dataflow(lambda s: s.to_stream(range(100)).exchange(lambda x: x).count().capture())
            worker.run()
            return os.getppid(), captured.extract()
        for attempt in range(2):
            results = stb.run(spark, job, 2)
            print("RESULT", attempt, [r[1] for r in results], len({{r[0] for r in results}}), flush=True)
        spark.stop()
    """))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=400, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the local-cluster job did not finish in 400 s")
    if "RESULT" not in done.stdout and ("local-cluster" in done.stderr or "Executor" in done.stderr) \
            and done.returncode != 0 and "sparktimely" not in done.stderr:
        pytest.skip("local-cluster mode does not start here: " + done.stderr[-500:])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines == [f"RESULT {i} [[(0, [100])], [(0, [100])]] 2" for i in range(2)]


def frontier_semantics_job(worker):
    """Frontier semantics in one job on Spark: the first frontier an operator sees, notification
    order with a request made while delivering, a Product-timed root loop, and a summary
    object with a default (per-process) repr."""
    class Skip:
        def results_in(self, time):
            return time + 2

    first, order = [], []

    def watch(cap, info):
        held = st.CapabilitySet([cap])

        def logic(input, output):
            first.append(input.frontier.frontier())
            for in_cap, batch in input:
                output.session(held.delayed(in_cap.time)).give_batch(batch)
            held.downgrade(input.frontier.frontier())
        return logic

    def notify(input, output, notificator):
        for _ in input:
            pass
        for cap, _ in notificator:
            order.append(cap.time)
            if cap.time == 2:
                notificator.notify_at(cap.delayed(3))

    def build(scope):
        handle, looped = scope.feedback(Skip())
        start = scope.to_stream([0] if worker.index == 0 else [])
        stream = start.concat(looped)
        stream.filter(lambda x: x < 6).map(lambda x: x + 2).exchange(lambda x: x // 2) \
            .connect_loop(handle)
        scope.to_stream([]).unary_notify(st.Pipeline, "Order", [5, 2], notify)
        return stream.unary_frontier(st.Pipeline, "Watch", watch).capture()

    def product_loop(scope):
        handle, looped = scope.feedback(st.Product(0, 1))
        stream = scope.to_stream([10] if worker.index == 0 else []).concat(looped)
        stream.filter(lambda x: x < 12).map(lambda x: x + 1).connect_loop(handle)
        return stream.capture()
    looped = worker.dataflow(build)
    product = worker.dataflow(product_loop, timestamp=st.Product)
    worker.run()
    return first[0], order, looped.extract(), product.extract()


def test_frontier_semantics_hold_under_spark(spark):
    from sparktimely.testing import consolidate
    results = stb.run(spark, frontier_semantics_job, 2)
    for first, order, _, _ in results:
        assert first == [0] and order == [2, 3, 5]
    assert consolidate([r[2] for r in results]) == [(t, [t]) for t in (0, 2, 4, 6)]
    assert consolidate([r[3] for r in results]) == [
        (st.Product(0, i), [10 + i]) for i in range(3)]


# -- logs, the progress display, the job's name in Spark --------------------------------------

def described_job(worker):
    """``exchange_job``, plus the job description and group its Spark task was given."""
    from pyspark import TaskContext
    context = TaskContext.get()
    return (*exchange_job(worker), context.getLocalProperty("spark.job.description"),
            context.getLocalProperty("spark.jobGroup.id"))


def logged_exchanges(directory) -> Counter:
    """Records each worker sent each worker on the first channel, from the log files."""
    from sparktimely.logging import MessagesEvent, read_log_directory
    moved: Counter = Counter()
    for event in read_log_directory(directory).events:
        if type(event) is MessagesEvent and event.is_send and event.channel == 0:
            moved[event.source, event.target] += event.length
    return moved


@pytest.mark.parametrize("workers", [1, 2])
def test_run_logs_shows_progress_and_names_its_spark_job(spark, tmp_path, capfd, workers):
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    before = set(tracker.getJobIdsForGroup("sparktimely"))
    results = stb.run(spark, described_job, workers, log_dir=tmp_path / "logs", progress=True)
    description = f"sparktimely: run {__name__}:described_job on {workers} workers"
    for index, (worker, peers, _, received, seen, group) in enumerate(results):
        assert (worker, peers) == (index, workers)
        assert received == [x for x in range(100 * workers) if x % workers == index]
        assert (seen, group) == (description, "sparktimely")
    [job] = set(tracker.getJobIdsForGroup("sparktimely")) - before
    info, deadline = tracker.getJobInfo(job), time.monotonic() + 10
    while info.status == "RUNNING" and time.monotonic() < deadline:  # Spark's listener bus
        time.sleep(0.05)                                  # records the end a little later
        info = tracker.getJobInfo(job)
    assert info.status == "SUCCEEDED"
    assert [tracker.getStageInfo(stage).numTasks for stage in info.stageIds] == [workers]
    assert sc._jsc.sc().statusStore().job(job).description().get() == description
    assert sc.getLocalProperty("spark.job.description") is None       # the caller's again
    assert sc.getLocalProperty("spark.jobGroup.id") is None
    assert logged_exchanges(tmp_path / "logs") == Counter(
        (source, x % workers) for source in range(workers)
        for x in range(source * 100, source * 100 + 100))
    lines = [line for line in capfd.readouterr().err.splitlines()
             if line.startswith("sparktimely: ")]
    last = lines[-1].split("; ")                      # stderr is no terminal: plain lines
    assert re.fullmatch(rf"sparktimely: \d+\.\d s, {workers} workers?, [\d,]+ records/s, done",
                        last[0]), last
    assert [line.split()[:2] + line.split()[-3:] for line in last[1:]] == [
        ["worker", f"{w}:", "100", "records", "done"] for w in range(workers)]


def test_a_callers_job_group_is_kept(spark):
    sc = spark.sparkContext
    sc.setJobGroup("mine", "my description")
    try:
        [(*_, seen, group)] = stb.run(spark, described_job, 1)
        assert (seen, group) == (f"sparktimely: run {__name__}:described_job on 1 workers",
                                 "mine")
        assert sc.getLocalProperty("spark.job.description") == "my description"
        assert sc.getLocalProperty("spark.jobGroup.id") == "mine"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def test_the_lazy_forms_log_to_a_directory_and_name_their_rdd(spark, tmp_path):
    rdd = spark.sparkContext.parallelize(range(1000), 2)

    def build(scope, numbers):
        return numbers.exchange(lambda x: x)
    out = stb.map_partitions(rdd, build, log_dir=tmp_path / "rdd")
    assert out.name() == (f"sparktimely: map_partitions {__name__}:"
                          f"test_the_lazy_forms_log_to_a_directory_and_name_their_rdd.<locals>"
                          f".build on 2 workers")
    assert sorted(out.collect()) == list(range(1000))
    parts = [list(range(500)), list(range(500, 1000))]           # parallelize's slices
    expected = Counter((source, x % 2) for source in (0, 1) for x in parts[source])
    assert logged_exchanges(tmp_path / "rdd") == expected
    df = spark.createDataFrame([(x,) for x in range(1000)], "x long").repartition(2)

    def build_arrow(scope, batches):
        return batches.exchange(key="x")
    rows = stb.map_in_arrow(df, build_arrow, "x long", log_dir=tmp_path / "arrow").collect()
    assert sorted(row.x for row in rows) == list(range(1000))
    moved = logged_exchanges(tmp_path / "arrow")
    assert sum(moved.values()) == 1000 and {source for source, _ in moved} <= {0, 1}


def test_submit_shows_progress_unless_told_not_to_and_logs(spark, tmp_path, capsys):
    from examples.pagerank import generate_graph
    from sparktimely.barrier import submit
    src, dst = generate_graph(1000, 10000)
    pq.write_table(pa.table({"src": src, "dst": dst}), tmp_path / "edges.parquet")
    job = ["examples.pagerank:job", "--edges", str(tmp_path / "edges.parquet"),
           "--iterations", "3"]
    assert submit.main(["-w", "2", "--log-dir", str(tmp_path / "logs"), *job]) == 0
    err = capsys.readouterr().err
    last = [line for line in err.splitlines() if line.startswith("sparktimely: ")][-1]
    assert ", 2 workers, " in last and last.split("; ")[0].endswith("done"), err
    assert f"logs are in {tmp_path / 'logs'}" in err
    from sparktimely.logging import read_log_directory
    assert sorted(read_log_directory(tmp_path / "logs").workers) == [0, 1]
    assert submit.main(["-w", "2", "--no-progress", *job]) == 0
    err = capsys.readouterr().err
    assert not [line for line in err.splitlines() if line.startswith("sparktimely: ")], err
