"""Recovery on a real local Spark (``local[2]``): ``barrier.run`` with ``checkpoint_dir`` and
``max_attempts`` reruns a stage whose worker was SIGKILLed at the first, a middle or the last
epoch, resuming from its checkpoint (also a differential join+count and reachability, from
their restored traces); ``map_in_arrow`` and ``map_partitions`` resume a failed
action mid-partition and give the undisturbed output; RecoveryError is raised itself."""
from __future__ import annotations

import os
import signal
import sys

import pytest
from spark_session import spark_session

import dd_recovery_jobs
import recovery_jobs
import sparktimely as st
import sparktimely.barrier as stb
from sparktimely.barrier._task import RECORDS_PER_BATCH
from recovery_jobs import FailOnce, epochs_of, running_counts, visible, wordcount, write_texts

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

LINES = 30                                    # 10 epochs of 3 lines


@pytest.fixture(scope="module")
def spark():
    yield from spark_session()


@pytest.fixture(scope="module", autouse=True)
def pickle_test_code_by_value():
    """Executors cannot import test modules: ship their functions by value."""
    from pyspark import cloudpickle
    modules = [sys.modules[__name__], recovery_jobs, dd_recovery_jobs]
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    yield
    for module in modules:
        cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture
def texts(tmp_path):
    folder = str(tmp_path / "texts")
    write_texts(folder, files=4, lines=LINES)
    return folder


@pytest.mark.parametrize("epoch", [0, 4, 9], ids=["first", "middle", "last"])
def test_run_reruns_a_killed_stage_from_its_checkpoint(spark, texts, tmp_path, epoch):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), epoch, worker=1, kill=True)
    stb.run(spark, lambda w: wordcount(w, texts, out, hook=kill), 2, checkpoint_dir=directory,
            max_attempts=2)
    assert os.path.exists(tmp_path / "killed")               # the first attempt did fail
    assert visible(out) == running_counts(epochs_of(texts))
    assert not [name for name in os.listdir(out) if name.startswith("_")]


@pytest.mark.parametrize("kind", ["join_count", "reachability"])
def test_run_reruns_a_killed_differential_stage_from_its_traces(spark, tmp_path, kind):
    job = dd_recovery_jobs.Job(kind, tmp_path)
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    kill = FailOnce(str(tmp_path / "killed"), job.at("middle"), worker=None, kill=True)
    stb.run(spark, lambda w: job.run(w, out, kill), 2, checkpoint_dir=directory,
            max_attempts=2)
    assert os.path.exists(tmp_path / "killed")
    dd_recovery_jobs.agrees(dd_recovery_jobs.updates(out), job.oracle())


def test_run_raises_recovery_error_itself_and_does_not_retry_it(spark, texts, tmp_path):
    out, directory = str(tmp_path / "out"), str(tmp_path / "ck")
    stb.run(spark, lambda w: wordcount(w, texts, out), 2, checkpoint_dir=directory)

    def other(worker):
        worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="other")
    with pytest.raises(st.RecoveryError, match="holds checkpoints of dataflow 'wordcount'"):
        stb.run(spark, other, 2, checkpoint_dir=directory, max_attempts=3)
    with pytest.raises(ValueError, match="max_attempts"):
        stb.run(spark, other, 2, max_attempts=0)


def counts_build(marker: str, kill_at: int, arrow: bool):
    """Running counts of the words of each input batch (a task's batch ``i`` is epoch ``i``),
    as Arrow batches of (word, total); the worker of partition 1 kills its own process once,
    at epoch ``kill_at``."""
    def fold(key, value, total):
        total = (total or 0) + value
        return False, [(key, total)], total

    def build(scope, batches):
        def maybe_kill(time, batch):
            if time == kill_at and scope.index == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        words = batches.from_arrow(tuples=True).map(lambda row: row[0]) if arrow else batches
        return words.map(lambda w: (w, 1)).state_machine(fold).inspect_batch(maybe_kill)
    return build


def expected_counts(parts: list[list[list[str]]]) -> list[tuple[str, int]]:
    """What the running counts send, over every partition's batches in time order."""
    by_epoch: dict = {}
    for batches in parts:
        for i, words in enumerate(batches):
            by_epoch.setdefault(i, []).extend(words)
    return sorted((w, n) for _, w, n in running_counts(by_epoch))


def test_map_in_arrow_resumes_a_failed_action_mid_partition(spark, tmp_path):
    words = [f"w{(i * 7) % 13}" for i in range(400)]
    df = spark.createDataFrame([(w,) for w in words], "word string").repartition(2)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")    # 10 batches each
    try:
        build = counts_build(str(tmp_path / "killed"), 5, arrow=True)

        def counts():                   # Spark runs a failed barrier stage's plan no more
            return stb.map_in_arrow(df, build, "word string, total long",
                                    checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2)
        with pytest.raises(Exception):
            counts().collect()
        assert os.path.exists(tmp_path / "killed")
        got = sorted((row["word"], row["total"]) for row in counts().collect())
        again = sorted((row["word"], row["total"]) for row in counts().collect())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    parts = [[row.word for row in rows] for rows in df.rdd.glom().collect()]
    assert got == expected_counts([[part[i:i + 20] for i in range(0, len(part), 20)]
                                   for part in parts])
    assert again == got                 # a run after completion gives everything again


def test_map_partitions_resumes_a_failed_action_mid_partition(spark, tmp_path):
    words = [f"w{(i * 5) % 11}" for i in range(20_000)]
    rdd = spark.sparkContext.parallelize(words, 2)
    build = counts_build(str(tmp_path / "killed"), 2, arrow=False)
    with pytest.raises(Exception):
        stb.map_partitions(rdd, build, checkpoint_dir=str(tmp_path)).collect()
    assert os.path.exists(tmp_path / "killed")
    out = stb.map_partitions(rdd, build, checkpoint_dir=str(tmp_path))
    parts = rdd.glom().collect()
    chunks = [[part[i:i + RECORDS_PER_BATCH] for i in range(0, len(part),
                                                                RECORDS_PER_BATCH)]
              for part in parts]
    assert sorted(out.collect()) == expected_counts(chunks)


def test_the_lazy_forms_refuse_a_checkpoint_of_another_worker_count(spark, tmp_path):
    """A task's input is its own Spark partition, which another worker count splits
    otherwise: resuming 1 worker's checkpoint with 2 workers sent the kept output again
    and the second partition's rows besides (30 rows became 45, silently). It is a
    RecoveryError on the driver, and the same worker count still resumes."""
    df = spark.createDataFrame([(i,) for i in range(30)], "id long")
    directory = str(tmp_path / "ck")

    def ids(workers):
        out = stb.map_in_arrow(df, lambda scope, s: s, "id long", num_workers=workers,
                               checkpoint_dir=directory)
        return sorted(row.id for row in out.collect())
    assert ids(1) == list(range(30))
    with pytest.raises(st.RecoveryError, match=r"written by 1 worker, not 2: .*another "
                       r"checkpoint directory"):
        ids(2)
    assert ids(1) == list(range(30))
    rdd = spark.sparkContext.parallelize(range(30), 2)
    with pytest.raises(st.RecoveryError, match=r"written by 1 worker, not 2"):
        stb.map_partitions(rdd, lambda scope, s: s, checkpoint_dir=directory)
