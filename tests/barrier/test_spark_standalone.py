"""sparktimely on Spark as users deploy it: a standalone cluster (a master and two 1-core
workers started with pyspark's own ``spark-class``) whose executors run a Python that has
only numpy, pyarrow, psutil, multiprocess and pandas (no sparktimely, no xxhash), chosen by
configuration alone; then a Spark Connect server in front of the same cluster.

The module starts the cluster once (and the Connect server once, for the last tests, which
then hold the cluster's cores) and stops both at its end, whatever happened; every driver
runs in a process of its own, without ``PYSPARK_PYTHON`` in its environment."""
from __future__ import annotations

import os
import re
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from spark_cluster import ROOT, connect_server, drive, python_for, run_command, \
    standalone_cluster

import sparktimely as st

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

WORDS = [f"w{i % 37}" for i in range(300)]


@pytest.fixture(scope="module")
def nodes() -> str:
    """The executors' Python."""
    return python_for("nodes")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, nodes) -> str:
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as master:
        yield master


def session(master: str, nodes: str) -> str:
    """A driver's opening lines: a classic session on ``master`` whose executors' Python is
    given by ``spark.pyspark.python`` alone."""
    return textwrap.dedent(f"""
        import os, sys, time
        assert "PYSPARK_PYTHON" not in os.environ
        from pyspark.sql import SparkSession
        import sparktimely as st, sparktimely.barrier as stb
        spark = (SparkSession.builder.master({master!r}).config("spark.ui.enabled", "false")
                 .config("spark.pyspark.python", {nodes!r})
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sc = spark.sparkContext
    """)


def results(done) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("RESULT")]


JOB = '''
import importlib.util, sys

def job(worker):
    import sparktimely as st
    words = {words!r}[worker.index::worker.peers]
    counted = worker.dataflow(lambda scope: scope.to_stream(words).exchange(st.stable_hash)
                              .map(lambda word: (word, 1))
                              .aggregate(lambda word, n, total: (total or 0) + n,
                                         lambda word, total: (word, total), st.stable_hash)
                              .capture())
    worker.run()
    import sparktimely
    return (f"worker {{worker.index}}: {{sys.executable}} "
            f"xxhash={{importlib.util.find_spec('xxhash') is not None}} "
            f"zip={{sparktimely.__file__.rpartition('.zip')[1] == '.zip'}} "
            f"{{sorted(record for _, batch in counted.extract() for record in batch)}}")
'''


def test_submit_gives_executors_the_python_of_spark_pyspark_python_alone(cluster, nodes,
                                                                         tmp_path):
    """Executors run the Python named by ``--conf spark.pyspark.python`` (nothing in the
    driver's environment), without sparktimely or xxhash installed there, and route every
    word by ``st.stable_hash`` exactly as the driver, which has xxhash, computes it."""
    (tmp_path / "jobmod.py").write_text(JOB.format(words=WORDS))
    done = run_command([sys.executable, "-m", "sparktimely.barrier.submit", "--master", cluster,
                        "--conf", f"spark.pyspark.python={nodes}",
                        "--conf", "spark.driver.host=127.0.0.1", "-w", "2", "jobmod:job"],
                       tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = Counter(WORDS)
    expected = [sorted((w, n) for w, n in counts.items() if st.stable_hash(w) % 2 == index)
                for index in range(2)]
    assert done.stdout.splitlines() == [
        f"worker {index}: {nodes} xxhash=False zip=True {expected[index]}" for index in range(2)]
    assert "sparktimely-submit: 2 workers ran jobmod:job" in done.stderr


def test_too_many_workers_are_refused_within_5_s_by_every_entry_point(cluster, nodes,
                                                                      tmp_path):
    done = drive(session(cluster, nodes) + textwrap.dedent("""
        print("RESULT warm", stb.run(spark, lambda worker: worker.peers, 2))
        rdd, one, three = sc.parallelize(range(9), 3), spark.range(9), spark.range(0, 9, 1, 3)
        attempts = {
            "run": lambda: stb.run(spark, lambda worker: None, 3),
            "map_partitions": lambda: stb.map_partitions(rdd, lambda scope, s: s),
            "map_in_arrow num_workers": lambda: stb.map_in_arrow(
                one, lambda scope, s: s, "id long", num_workers=3),
            "map_in_arrow": lambda: stb.map_in_arrow(three, lambda scope, s: s, "id long"),
        }
        for name, attempt in attempts.items():
            started = time.monotonic()
            try:
                attempt()
            except stb.BarrierSetupError as error:
                print(f"RESULT|{name}|{time.monotonic() - started:.1f}|"
                      f"{str(error).split(',')[0]}", flush=True)
        spark.stop()
    """), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = results(done)
    assert lines[0] == "RESULT warm [2, 2]"
    refused = [line.split("|")[1:] for line in lines[1:]]
    assert [name for name, _, _ in refused] == [
        "run", "map_partitions", "map_in_arrow num_workers", "map_in_arrow"]
    for name, seconds, message in refused:
        assert message == "3 sparktimely workers need 3 barrier tasks running at once", name
        assert float(seconds) < 5, f"{name} took {seconds} s to refuse"


def test_a_lost_executor_is_named_and_a_checkpointed_run_resumes_to_the_exact_output(
        cluster, nodes, tmp_path):
    """Worker 1 kills its own executor's JVM at an epoch: without checkpoints ``run`` raises
    ExecutorLost naming the worker and the executor and saying there is no checkpoint; with
    ``checkpoint_dir`` and ``max_attempts=2`` the stage runs again on the executor the
    cluster put in its place and the output is exactly that of an undisturbed run."""
    done = drive(session(cluster, nodes) + textwrap.dedent(f"""
        import psutil
        from pyspark import cloudpickle
        sys.path.insert(0, {str(Path(__file__).parent.parent / "io")!r})
        import recovery_jobs
        cloudpickle.register_pickle_by_value(recovery_jobs)
        from recovery_jobs import epochs_of, running_counts, visible, wordcount, write_texts
        from sparktimely.barrier._resources import wait_for_slots
        here = os.getcwd()
        texts = os.path.join(here, "texts")
        write_texts(texts, files=4, lines=30)

        def kill_executor_once(marker, at):
            def hook(worker, epoch):
                if worker.index == 1 and epoch == at and not os.path.exists(marker):
                    open(marker, "w").close()
                    process = psutil.Process()
                    while process.name() != "java":          # this task's executor
                        process = process.parent()
                    process.kill()
                    time.sleep(60)
            return hook

        started = time.monotonic()
        try:
            stb.run(spark, lambda w: wordcount(w, texts, os.path.join(here, "plain"),
                                               hook=kill_executor_once(os.path.join(here, "k1"), 2)), 2)
        except stb.ExecutorLost as error:
            print("RESULT lost", error.index, error.executor, isinstance(error, st.WorkerError),
                  flush=True)
            print("RESULT message", error, flush=True)
        wait_for_slots(sc, 2)
        out = os.path.join(here, "out")
        stb.run(spark, lambda w: wordcount(w, texts, out,
                                           hook=kill_executor_once(os.path.join(here, "k2"), 4)),
                2, checkpoint_dir=os.path.join(here, "ck"), max_attempts=2)
        print("RESULT resumed", os.path.exists(os.path.join(here, "k2")),
              visible(out) == running_counts(epochs_of(texts)), flush=True)
        spark.stop()
    """), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = results(done)
    lost = re.fullmatch(r"RESULT lost 1 (\d+) True", lines[0])
    assert lost, lines
    assert lines[1] == (f"RESULT message worker 1 failed: its Spark executor {lost[1]} on "
                        f"127.0.0.1 was lost (Command exited with code 137); there is no "
                        f"checkpoint to resume from (give checkpoint_dir, and max_attempts "
                        f"above 1 to resume at once)"), lines[1]
    assert lines[2] == "RESULT resumed True True"
    assert "attempt 1 of 2 failed (worker 1 failed: its Spark executor" in done.stderr


# -- Spark Connect, in front of the same cluster (last: its server holds the cores) ----------

@pytest.fixture(scope="module")
def connect(tmp_path_factory, cluster, nodes) -> str:
    with connect_server(tmp_path_factory.mktemp("connect"), cluster, nodes) as url:
        yield url


CONNECT = textwrap.dedent("""
    import os, sys, time, warnings
    warnings.simplefilter("ignore", FutureWarning)
    from pyspark.sql import SparkSession
    import sparktimely as st, sparktimely.barrier as stb
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
""")


def test_map_in_arrow_under_spark_connect(connect, tmp_path):
    """Through a Connect server (whose executors' Python is the server's ``PYSPARK_PYTHON``):
    map_in_arrow gives the exact word counts; too many workers, or no ``num_workers``, are
    refused before anything is submitted (the server's context stays up: the next job
    runs); an error in user code in a stage that feeds a shuffle fails the job with the
    worker's traceback, and the user code runs in the first attempt only."""
    runs = tmp_path / "runs"
    runs.mkdir()
    done = drive(CONNECT + textwrap.dedent(f"""
        words = spark.createDataFrame([(w,) for w in {WORDS!r}], "word string")
        def count(scope, stream):
            return stream.aggregate_batches("word", {{"n": ("count", None)}})
        out = stb.map_in_arrow(words, count, "word string, n long", num_workers=2)
        print("RESULT counts", sorted((row.word, row.n) for row in out.collect()), flush=True)
        for name, call in [("too many", lambda: stb.map_in_arrow(words, count, "word string, n long",
                                                               num_workers=3)),
                           ("unknown", lambda: stb.map_in_arrow(words, count, "word string, n long"))]:
            started = time.monotonic()
            try:
                call()
            except stb.BarrierSetupError as error:
                print("RESULT", name, round(time.monotonic() - started, 1), str(error)[:60], flush=True)

        def failing(scope, stream):
            def explode(batch):
                open(os.path.join({str(runs)!r}, f"{{os.getpid()}}-{{time.time()}}"), "w").close()
                raise ValueError("user code fails")
            return stream.inspect_batch(lambda t, batch: explode(batch))
        started = time.monotonic()
        try:
            stb.map_in_arrow(words, failing, "word string", num_workers=2).count()
        except Exception as error:
            failure = stb.parse_failure(str(error))
            print("RESULT failed", failure.index if failure else None,
                  failure.message if failure else str(error)[:2000], flush=True)
            print("RESULT traceback", "in explode" in failure.traceback, flush=True)
        print("RESULT seconds", round(time.monotonic() - started, 1), flush=True)
        print("RESULT after", out.count(), flush=True)
    """), tmp_path, python=python_for("connect"), args=(connect,), PYTHONPATH=str(ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = results(done)
    assert lines[0] == f"RESULT counts {sorted(Counter(WORDS).items())}"
    too_many, unknown = lines[1].split(" ", 4), lines[2].split(" ", 3)
    assert too_many[1:3] == ["too", "many"] and float(too_many[3]) < 5, lines[1]
    assert too_many[4].startswith("3 sparktimely workers need 3 barrier tasks"), lines[1]
    assert unknown[1] == "unknown" and float(unknown[2]) < 1, lines[2]
    assert unknown[3].startswith("under Spark Connect, map_in_arrow needs num_workers"), lines[2]
    assert re.fullmatch(r"RESULT failed [01] OperatorError: operator 'InspectBatch' \(address "
                        r"\(0, 1\)\) raised ValueError: user code fails", lines[3]), lines[3]
    assert lines[4] == "RESULT traceback True"
    assert len(os.listdir(runs)) <= 2, "the user code ran again in a retried attempt"
    assert lines[6] == f"RESULT after {len(set(WORDS))}"
