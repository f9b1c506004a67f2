"""sparktimely on Spark's ``local-cluster[2,1,1024]`` (a master, two workers, executors in JVMs
of their own with their own Python daemons, as on a real cluster) whose executors run a
Python that does not have sparktimely: ``run``, ``map_in_arrow`` and the spark-submit entry
point ship it (and the job's module) themselves. And executors whose Python lacks numpy and
pyarrow fail the job with one error naming them, the executor, and how to ship an
environment.

Each test drives Spark from a fresh interpreter (the executors' Python is fixed when a
SparkContext starts), with no PYTHONPATH, so nothing reaches the executors but what Spark
ships."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

SITE = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
CLUSTER = "local-cluster[2,1,1024]"


@pytest.fixture(scope="module")
def pythons(tmp_path_factory):
    """Two virtual environments for the executors, with this interpreter: ``deps`` sees this
    environment's packages (numpy, pyarrow, pyspark...) through a path in a ``.pth`` file, so
    not sparktimely (its editable install is a ``.pth`` of this environment, which is not
    read from there); ``empty`` has nothing (pyspark comes from Spark's own zips)."""
    from sparktimely.barrier.submit import JavaMissing, require_java
    try:
        require_java()
    except JavaMissing as error:
        pytest.skip(str(error))
    root = tmp_path_factory.mktemp("pythons")
    made = {}
    for name in ("deps", "empty"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / name)],
                       check=True, timeout=120)
        made[name] = str(root / name / "bin" / "python")
    site = next((root / "deps" / "lib").glob("python3*")) / "site-packages"
    (site / "deps.pth").write_text(SITE + "\n")
    probe = subprocess.run([made["deps"], "-c", "import numpy, pyarrow, pyspark, importlib.util;"
                            "print(importlib.util.find_spec('sparktimely'))"],
                           capture_output=True, text=True, env=_environment(), timeout=60,
                           cwd=root)
    assert probe.stdout.strip() == "None", probe.stderr
    return made


def _environment(executors: str | None = None) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if executors is not None:
        environment["PYSPARK_PYTHON"] = executors       # what Spark's Python workers run
        environment["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return environment


def _drive(tmp_path, script: str, executors: str) -> subprocess.CompletedProcess:
    (tmp_path / "driver.py").write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, str(tmp_path / "driver.py"), executors],
                          capture_output=True, text=True, timeout=500, cwd=tmp_path,
                          env=_environment(executors))


def _skip_if_no_cluster(done: subprocess.CompletedProcess) -> None:
    if done.returncode != 0 and "sparktimely" not in done.stderr and "RESULT" not in done.stdout:
        pytest.skip("local-cluster mode does not start here: " + done.stderr[-500:])


SESSION = f"""
    import sys
    from pyspark.sql import SparkSession
    import sparktimely.barrier as stb
    spark = (SparkSession.builder.master({{master!r}}).config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.argv[1])
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
"""


def test_run_and_map_in_arrow_ship_sparktimely_to_executors_without_it(tmp_path, pythons):
    done = _drive(tmp_path, SESSION.format(master=CLUSTER) + """
    def has_sparktimely(_):
        import importlib.util
        return importlib.util.find_spec("sparktimely") is not None
    print("RESULT before", spark.sparkContext.parallelize([0, 1], 2).map(has_sparktimely).collect())

    def job(worker):
        import sparktimely
        counted = worker.dataflow(lambda s: s.to_stream(range(100 * worker.index, 100 * worker.index + 100))
                                  .exchange(lambda x: x % 7).count().capture())
        worker.run()
        return sparktimely.__file__.rpartition(".zip")[1], counted.extract(), sys.executable
    print("RESULT run", stb.run(spark, job, 2))

    words = spark.createDataFrame([(w,) for w in "a b a c b a d".split()], "word string")
    counts = stb.map_in_arrow(words, lambda scope, s: s.aggregate_batches("word", {"n": ("count", None)}),
                              "word string, n long", num_workers=2)
    print("RESULT arrow", sorted((row.word, row.n) for row in counts.collect()))
    spark.stop()
    """, pythons["deps"])
    _skip_if_no_cluster(done)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    counts = [sum(1 for x in range(200) if x % 7 % 2 == w) for w in range(2)]
    assert lines == [
        "RESULT before [False, False]",
        f"RESULT run [('.zip', [(0, [{counts[0]}])], {pythons['deps']!r}), "
        f"('.zip', [(0, [{counts[1]}])], {pythons['deps']!r})]",
        "RESULT arrow [('a', 3), ('b', 2), ('c', 1), ('d', 1)]"]


def test_the_spark_submit_entry_point_ships_sparktimely_and_the_job_module(tmp_path, pythons):
    (tmp_path / "jobmod.py").write_text(textwrap.dedent("""
        import sys

        def job(worker):
            import sparktimely
            counted = worker.dataflow(lambda s: s.to_stream(range(10 * worker.index, 10 * worker.index + 10))
                                      .exchange(lambda x: x).count().capture())
            worker.run()
            return (f"worker {worker.index}: {counted.extract()} {worker.args} "
                    f"{sparktimely.__file__.rpartition('.zip')[1]} {sys.executable}")
    """))
    from sparktimely.barrier.submit import main
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    if not os.path.exists(submit):
        pytest.skip(f"pyspark's spark-submit is not at {submit}")
    done = subprocess.run(
        [submit, "--master", CLUSTER, "--conf", "spark.ui.enabled=false",
         "--conf", "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures=1",
         main.__code__.co_filename, "-w", "2", "jobmod:job", "--greeting", "hi"],
        capture_output=True, text=True, timeout=500, cwd=tmp_path,
        env=_environment(pythons["deps"]))
    if done.returncode != 0 and "sparktimely" not in done.stderr:
        pytest.skip("local-cluster mode does not start here: " + done.stderr[-500:])
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()        # spark-submit merges the driver's stderr here
    assert [line for line in lines if line.startswith("worker ")] == [
        f"worker {w}: [(0, [10])] ['--greeting', 'hi'] .zip {pythons['deps']}" for w in range(2)]
    assert any(line.startswith("sparktimely-submit: 2 workers ran jobmod:job") for line in lines)


def test_executors_without_numpy_or_pyarrow_fail_with_one_error_naming_them(tmp_path, pythons):
    done = _drive(tmp_path, SESSION.format(master="local[2]") + """
    try:
        stb.run(spark, lambda worker: worker.index, 2)
    except stb.EnvironmentMissing as error:
        print("RESULT", error)
    spark.stop()
    """, pythons["empty"])
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    import socket
    assert line.startswith(f"RESULT sparktimely cannot run on executor {socket.gethostname()} "
                           f"(Python {pythons['empty']}, 3."), line
    for name in ("numpy", "pyarrow", "multiprocess", "psutil"):
        assert f"{name} (No module named '{name}')" in line
    assert ("--conf spark.archives=env.tar.gz#env --conf spark.pyspark.python=./env/bin/python "
            "(with spark-submit add --conf spark.pyspark.driver.python=$(which python)") in line
    assert "tar czhf env.tar.gz -C VENV bin include lib pyvenv.cfg" in line
