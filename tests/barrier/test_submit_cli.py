"""``sparktimely-submit`` as a user meets it: the command line run in a subprocess, its exit
status and what it prints. Its flags follow argparse's conventions (``--help``, unknown
flags, bad values), arguments after ``module:function`` are the job's, and a failing worker
is reported once."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sparktimely.barrier import submit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sparktimely_submit(*args: str, cwd: str = ROOT, timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "sparktimely.barrier.submit", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout)


@pytest.mark.timeout(60)
def test_help_prints_usage_and_runs_nothing():
    done = sparktimely_submit("--help")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: sparktimely-submit [options] module:function")
    for flag in ("--checkpoint-dir", "--checkpoint-every", "--max-attempts", "--stall-limit",
                 "--log-dir", "--progress, --no-progress", "--conf KEY=VALUE"):
        assert flag in done.stdout, flag


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, error", [
    (["--wrokers", "3", "examples.pagerank:job"], "unrecognized argument --wrokers: did you "
                                                  "mean --workers? (arguments for the job go "
                                                  "after module:function)"),
    (["--name", "x", "--master", "local[1]", "--nonsense", "examples.pagerank:job"],
     "unrecognized arguments: --nonsense"),
    (["examples.pagerank"], "cannot run examples.pagerank: examples.pagerank is a module: name "
                            "the function to run in it, as examples.pagerank:FUNCTION"),
    (["mymodule"], "cannot run mymodule: expected MODULE:FUNCTION, got 'mymodule'"),
    (["json"], "cannot run json: json is a module: name the function to run in it, as "
               "json:FUNCTION"),
    (["-w", "abc", "examples.pagerank:job"],
     "argument -w/--workers: expected a positive integer, got 'abc'"),
    (["-w", "0", "examples.pagerank:job"],
     "argument -w/--workers: expected a positive integer, got '0'"),
    (["--stall-limit", "-1", "examples.pagerank:job"],
     "argument --stall-limit: expected a positive number of seconds, got '-1'"),
    (["--max-attempts", "two", "examples.pagerank:job"],
     "argument --max-attempts: expected a positive integer, got 'two'"),
    (["--conf", "spark.ui.enabled", "examples.pagerank:job"],
     "argument --conf: expected KEY=VALUE, got 'spark.ui.enabled'"),
    (["-w", "2"], "a module:function to run is required"),
    (["nosuch.module:job"], "cannot run nosuch.module:job: ModuleNotFoundError: No module "
                            "named 'nosuch'"),
    (["examples.pagerank:nosuch"], "cannot run examples.pagerank:nosuch: AttributeError: "),
])
def test_a_bad_flag_or_value_is_one_line_with_the_usage_and_status_2(args, error):
    done = sparktimely_submit(*args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    usage, message = done.stderr.strip().split("\n")
    assert usage.startswith("usage: sparktimely-submit [options] module:function")
    assert message.startswith(f"sparktimely-submit: error: {error}"), message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source, error", [
    ("raise RuntimeError('no config here')\n", "RuntimeError: no config here"),
    ("def job(worker)\n", "SyntaxError: expected ':' (broken.py, line 1)"),
])
def test_a_job_module_that_fails_as_it_loads_is_one_line_with_status_2(tmp_path, source,
                                                                        error):
    (tmp_path / "broken.py").write_text(source)
    done = sparktimely_submit("-w", "2", "broken:job", cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    usage, message = done.stderr.strip().split("\n")
    assert message == f"sparktimely-submit: error: cannot run broken:job: {error}"


@pytest.mark.timeout(120)
def test_a_driver_python_without_sparktimely_is_told_how_to_choose_one(tmp_path):
    """spark-submit runs the file with ``spark.pyspark.python`` (the executors' Python, which
    need not have sparktimely) unless ``spark.pyspark.driver.python`` is given: that was a
    ModuleNotFoundError traceback from the file's first import."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True, timeout=100)
    python = str(tmp_path / "bare" / "bin" / "python")
    done = subprocess.run([python, sparktimely_submit("--path").stdout.strip(), "-w", "2",
                           "m:f"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"sparktimely-submit: this Python ({python}) has no sparktimely: spark-submit starts "
        f"the driver with spark.pyspark.driver.python, else spark.pyspark.python (the "
        f"executors' Python); give --conf spark.pyspark.driver.python=PYTHON, a Python that "
        f"has sparktimely\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, environment", [
    (["--master", "sc://127.0.0.1:1"], {}),
    (["--conf", "spark.remote=sc://127.0.0.1:1"], {}),
    ([], {"SPARK_REMOTE": "sc://127.0.0.1:1"}),
])
def test_spark_connect_is_refused_at_once_naming_what_runs_there(tmp_path, args, environment):
    """``--master sc://`` was a Java stack and "the Spark driver did not start"; a Connect
    session (``SPARK_REMOTE``, ``spark.remote``) was "the Spark job failed" or, without
    ``-w``, a traceback from ``spark.sparkContext``."""
    (tmp_path / "m.py").write_text("def f(worker):\n    return 1\n")
    done = subprocess.run([sys.executable, "-m", "sparktimely.barrier.submit", *args,
                           "m:f"], capture_output=True, text=True, cwd=tmp_path, timeout=100,
                          env=dict(os.environ, **environment))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "sparktimely-submit: sc://127.0.0.1:1 is Spark Connect, which cannot run a worker "
        "function (barrier.run needs a classic driver: --master spark://HOST:PORT, yarn, "
        "k8s://..., local[N]); under Spark Connect use sparktimely.barrier.map_in_arrow\n")


def test_checkpoint_every_without_a_checkpoint_dir_is_a_usage_error(capsys):
    """It was taken, and did nothing."""
    with pytest.raises(SystemExit) as exited:
        submit.main(["--checkpoint-every", "3", "m:f"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "sparktimely-submit: error: argument --checkpoint-every: needs --checkpoint-dir DIR "
        "(without a checkpoint directory nothing is checkpointed)")


def test_arguments_after_the_function_or_a_double_dash_go_to_the_job_untouched():
    parse = submit._parser().parse_args
    assert parse(["-w", "2", "m:f", "--edges", "x", "-w", "3"]).args == [
        "--edges", "x", "-w", "3"]
    options = parse(["-w", "2", "--", "m:f", "--help"])
    assert (options.workers, options.target, options.args) == (2, "m:f", ["--help"])
    options = parse(["m:f", "--", "--x"])
    assert (options.target, options.args) == ("m:f", ["--x"])
    for prefix in ("--c", "--check", "--max"):      # not taken for --conf or --checkpoint-*
        assert parse(["m:f", prefix, "1"]).args == [prefix, "1"]
    options = parse(["--no-progress", "--checkpoint-dir", "ck", "--checkpoint-every", "3",
                     "--max-attempts", "2", "--stall-limit", "1.5", "m:f"])
    assert (options.progress, options.checkpoint_dir, options.checkpoint_every,
            options.max_attempts, options.stall_limit) == (False, "ck", 3, 2, 1.5)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_failing_worker_is_told_once_with_its_operator_and_traceback(tmp_path):
    """A ``1/0`` in a ``map`` under ``--master local[2]``: one report (which worker, which
    operator, the worker's traceback with the user's frames), none of Spark's per-task
    copies of it, exit status 1."""
    (tmp_path / "failing.py").write_text(textwrap.dedent("""
        def job(worker):
            worker.dataflow(lambda scope: scope.to_stream(range(10)).map(lambda x: 1 / 0).probe())
            worker.run()
    """))
    done = sparktimely_submit("--master", "local[2]", "-w", "2", "failing:job",
                              cwd=str(tmp_path), timeout=280)
    assert done.returncode == 1, done.stderr[-3000:]
    err = done.stderr
    # once in the report's first line, once as the cause, once in the operator's error
    assert err.count("division by zero") == 3, err
    [report] = [line for line in err.splitlines() if line.startswith("sparktimely-submit:")]
    assert report.endswith("failed: OperatorError: operator 'Map' (address (0, 1)) raised "
                           "ZeroDivisionError on the record 0: division by zero")
    traceback = err[err.index(report):]
    assert 'failing.py", line 3, in <lambda>' in traceback
    assert 'failing.py", line 4, in job' in traceback
    assert "frames inside sparktimely" in traceback
    assert "TaskSetManager" not in err and "ERROR Executor" not in err
    assert "PythonException" not in err and "Py4J" not in err
    assert len(traceback.splitlines()) <= 25, traceback


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_driver_spark_refuses_to_start_is_one_line_and_status_2(tmp_path):
    done = sparktimely_submit("--master", "local[1]", "--conf",
                              f"spark.archives={tmp_path / 'missing.tar.gz'}#env",
                              "examples.pagerank:job", timeout=280)
    assert done.returncode == 2, done.stderr[-3000:]
    [told] = [line for line in done.stderr.splitlines() if line.startswith("sparktimely-submit")]
    assert told.startswith("sparktimely-submit: the Spark driver did not start: "), told
    assert "missing.tar.gz" in told and "Traceback" not in done.stderr


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_submit_runs_the_file_sparktimely_submit_path_names(tmp_path):
    """README's cluster form: ``spark-submit "$(sparktimely-submit --path)" ...`` runs the
    module as a file, outside its package."""
    (tmp_path / "squares.py").write_text(textwrap.dedent("""
        def job(worker):
            seen = []
            worker.dataflow(lambda scope: scope.to_stream(range(6) if worker.index == 0 else [])
                            .exchange(lambda x: x)
                            .map(lambda x: x * x).inspect(seen.append).probe())
            worker.run()
            return f"worker {worker.index}: {sorted(seen)}"
    """))
    path = sparktimely_submit("--path").stdout.strip()
    import pyspark
    spark_submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    done = subprocess.run([spark_submit, "--master", "local[2]", path, "-w", "2",
                           "--no-progress", "squares:job"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=280,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable,
                                   PYSPARK_DRIVER_PYTHON=sys.executable,
                                   PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)])))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == ["worker 0: [0, 4, 16]", "worker 1: [1, 9, 25]"]
