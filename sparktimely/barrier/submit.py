"""``sparktimely-submit``: run a ``module:function`` worker function as a Spark application.

The executors need neither sparktimely nor the job's module installed: sparktimely travels
as a zip of the package, the module that defines the function by value (with the job). They
need numpy, pyarrow, psutil and multiprocess (ship an environment with ``spark.archives``,
see the README).

The function is a timely worker function, as for ``sparktimely.execute``: it gets a
``Worker`` (``worker.index``, ``worker.peers``, ``worker.args`` = the arguments after
``module:function``, all of them: flags there are the job's, and a ``--`` before
``module:function`` ends this command's flags) and runs on ``-w N`` Spark barrier tasks at
once. Its return values come back to the driver and are printed: strings as they are,
anything else as ``worker I: repr``; ``None`` prints nothing. A failing worker is reported
once: which worker, its error (the operator, for an error in one) and its traceback, with
the frames inside sparktimely left out; the exit status is then 1. A setup error (too many
workers, dynamic allocation, executors without numpy...) is one line and exit status 2, as
is a bad flag (with the usage).

``--checkpoint-dir DIR``, ``--checkpoint-every N`` and ``--max-attempts N`` are
``sparktimely.barrier.run``'s checkpoint options: a stage that fails (say, an executor was
lost) runs again from its last checkpoint, up to N times. ``--stall-limit SECONDS`` stops a
worker that makes no progress for that long. While the job runs, a live display on stderr
shows each probe's frontier (the epochs done), records/s and every worker's CPU and memory:
redrawn in place on a terminal, a plain line every 10 s (and at the end) otherwise;
``--no-progress`` turns it off (``--progress``, the default, turns Spark's own console bar
off, so that they do not draw over each other). ``--log-dir DIR`` has every worker write its
log files to ``DIR`` on its executor's host, for ``python -m sparktimely.profile DIR``. The
Spark UI and logs name the job ``sparktimely: run module:function on N workers``.

On its own, it starts the Spark driver itself (``--master``, default Spark's own, and
``--conf KEY=VALUE``), in this Python. ``--conf spark.pyspark.python=PYTHON`` (a path on the
executors' hosts, or ``./env/bin/python`` with ``--conf spark.archives=env.tar.gz#env``) is
the executors' Python; without it a local master's executors run this Python::

    sparktimely-submit --master 'local[2]' -w 2 examples.pagerank:job --edges edges.parquet
    python -m sparktimely.barrier.submit -w 2 mypkg.jobs:main ...

With ``spark-submit`` (the cluster manager's options then go to spark-submit, and this file is
the application; ``sparktimely-submit --path`` prints its location; spark-submit starts the
driver with ``spark.pyspark.driver.python``, else ``spark.pyspark.python``)::

    spark-submit --master yarn --num-executors 4 --executor-cores 2 \\
        "$(sparktimely-submit --path)" -w 8 mypkg.jobs:main --input hdfs:///data
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import types
from typing import Callable, Sequence

# Absolute: spark-submit runs this module as a file, outside its package, and maybe with the
# executors' Python, which need not have sparktimely.
try:
    from sparktimely.errors import empty_path_problem
except ModuleNotFoundError as missing:
    if __name__ != "__main__" or missing.name != "sparktimely":
        raise
    print(f"sparktimely-submit: this Python ({sys.executable}) has no sparktimely: "
          f"spark-submit starts the driver with spark.pyspark.driver.python, else "
          f"spark.pyspark.python (the executors' Python); give --conf "
          f"spark.pyspark.driver.python=PYTHON, a Python that has sparktimely", file=sys.stderr)
    sys.exit(2)
from sparktimely.execute import at_least, checkpoint_every, positive_seconds

__all__ = ["JavaMissing", "load_function", "main", "require_java"]


class JavaMissing(RuntimeError):
    """No usable Java for a local Spark driver.

    >>> issubclass(JavaMissing, RuntimeError)
    True
    """


def require_java(minimum: int = 17) -> str:
    """The ``java`` a local Spark driver will use (``$JAVA_HOME/bin/java``, else ``java`` on
    the PATH, as pyspark's launcher does); raises :class:`JavaMissing` with a clear message
    if there is none or it is older than ``minimum`` (Spark 4 needs Java 17 or later).

    >>> require_java().endswith("java")          # doctest: +SKIP
    True
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    where = f"JAVA_HOME={home}" if home else "the PATH"
    if not java or not os.access(java, os.X_OK):
        raise JavaMissing(
            f"Spark needs Java {minimum} or later, and none was found on {where}. Install a "
            f"JDK or JRE (for example `apt-get install openjdk-17-jre-headless` or "
            f"`brew install openjdk@17`) and put it on the PATH or set JAVA_HOME.")
    try:
        probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
        text = probe.stderr + probe.stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise JavaMissing(f"{java} does not run ({error}); Spark needs Java {minimum} or "
                          f"later") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match:
        major = int(match[1]) if match[1] != "1" else int(match[2] or 0)
        if major < minimum:
            raise JavaMissing(f"{java} is Java {major}; Spark needs Java {minimum} or later "
                              f"(set JAVA_HOME to a newer one)")
    return java


class _NotAFunction(ValueError):
    """The command line's MODULE:FUNCTION does not name a function (told without a type)."""


def _a_module(target: str) -> _NotAFunction:
    """The error for a target that names a module, not a function in it."""
    return _NotAFunction(f"{target} is a module: name the function to run in it, as "
                         f"{target}:FUNCTION")


def load_function(target: str) -> Callable:
    """The function named by ``module:function`` (``module.function`` also works).

    >>> load_function("os.path:join")("a", "b")
    'a/b'
    >>> load_function("os")
    Traceback (most recent call last):
    ...
    sparktimely.barrier.submit._NotAFunction: os is a module: name the function to run in it, as os:FUNCTION
    """
    module, sep, name = target.partition(":")
    if not sep:
        module, _, name = target.rpartition(".")
    if not module or not name:
        if not sep and importlib.util.find_spec(target) is not None:
            raise _a_module(target)
        raise _NotAFunction(f"expected MODULE:FUNCTION, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    function = importlib.import_module(module)
    try:
        for part in name.split("."):
            function = getattr(function, part)
    except AttributeError:
        if not sep and importlib.util.find_spec(target) is not None:
            raise _a_module(target) from None
        raise
    if isinstance(function, types.ModuleType):
        raise _a_module(target)
    if not callable(function):
        raise TypeError(f"{target} is not callable")
    return function


def _send_by_value(function: Callable) -> None:
    """Let the job's module travel with the job (pickled by value), so executors that do not
    have it can run it; sparktimely itself travels as a zip (``barrier.ship``)."""
    module = sys.modules.get(getattr(function, "__module__", "") or "")
    if module is not None and not module.__name__.startswith("sparktimely") \
            and getattr(module, "__file__", None):
        from pyspark import cloudpickle
        cloudpickle.register_pickle_by_value(module)


def _setting(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _directory_name(text: str) -> str:
    """An argparse type: a directory on the executors' hosts (checked there), not empty."""
    empty = empty_path_problem(text)
    if empty is not None:
        raise argparse.ArgumentTypeError(empty)
    return text


def _parser() -> argparse.ArgumentParser:
    # Imported here: spark-submit runs this module as a file, outside its package.
    from ..execute import SuggestingParser

    class SubmitParser(SuggestingParser):
        where_arguments_go = "arguments for the job go after module:function"

    parser = SubmitParser(
        prog="sparktimely-submit", allow_abbrev=False,   # a job's --c is not our --conf
        usage="%(prog)s [options] module:function [job arguments...]",
        description="Run a sparktimely worker function on Spark, one barrier task per worker. "
                    "Every argument after module:function goes to the job (worker.args).")
    parser.add_argument("-w", "--workers", type=at_least(1), default=None,
                        help="number of workers (barrier tasks); default: all task slots")
    parser.add_argument("--master", help="Spark master when starting the driver here "
                                         "(ignored under spark-submit)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        type=_setting, help="Spark configuration for the driver started here; "
                        "spark.pyspark.python is the executors' Python")
    parser.add_argument("--name", default=None, help="application name")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                        help="seconds allowed for the workers to connect (default 60)")
    parser.add_argument("--stall-limit", type=positive_seconds, default=None,
                        metavar="SECONDS", help="stop a worker that makes no progress for "
                                                "this long")
    parser.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                        help="checkpoint to DIR (one every executor reaches) and resume from "
                             "it")
    parser.add_argument("--checkpoint-every", type=at_least(1), default=None, metavar="N",
                        help="checkpoint every N epochs (default 1; with --checkpoint-dir)")
    parser.add_argument("--max-attempts", type=at_least(1), default=1, metavar="N",
                        help="run a failed stage again, from its last checkpoint, up to N "
                             "times in all (default 1)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="a live progress display on stderr (default: on)")
    parser.add_argument("--log-dir", metavar="DIR", default=None, type=_directory_name,
                        help="each worker writes its log files to DIR on its executor's host "
                             "(for python -m sparktimely.profile DIR)")
    parser.add_argument("--path", action="store_true",
                        help="print the path of this file (the application for spark-submit)")
    parser.add_argument("target", nargs="?", metavar="module:function",
                        help="the worker function to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="job arguments",
                        help=argparse.SUPPRESS)
    return parser


def _connect_url(options) -> str | None:
    """The Spark Connect address a session would go to (``--master sc://...``, the
    ``spark.remote`` conf or ``$SPARK_REMOTE``), None for a classic driver.

    >>> _connect_url(_parser().parse_args(["--master", "sc://h:15002", "m:f"]))
    'sc://h:15002'
    """
    if (options.master or "").startswith("sc://"):
        return options.master
    return dict(options.conf).get("spark.remote") or os.environ.get("SPARK_REMOTE")


def _session(options):
    from pyspark.sql import SparkSession
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ      # spark-submit runs the JVM
    builder = SparkSession.builder.appName(options.name or f"sparktimely {options.target}")
    if options.master and not under_submit:
        builder = builder.master(options.master)
    confs = dict(options.conf)
    master = options.master or confs.get("spark.master") or ""
    if not under_submit:
        require_java()
        executors = confs.get("spark.pyspark.python")
        if executors:           # pyspark takes the executors' Python from here, not the conf
            os.environ["PYSPARK_PYTHON"] = executors
        elif master.startswith("local") or not master:
            confs["spark.pyspark.python"] = os.environ.setdefault("PYSPARK_PYTHON",
                                                                  sys.executable)
    if options.progress:                        # Spark's own bar would draw over ours
        confs["spark.ui.showConsoleProgress"] = "false"
    for key, value in confs.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status.

    >>> main(["--path"])                                # doctest: +ELLIPSIS
    /.../sparktimely/barrier/submit.py
    0
    """
    parser = _parser()
    options = parser.parse_args(argv)
    try:
        options.checkpoint_every = checkpoint_every(options.checkpoint_every,
                                                    options.checkpoint_dir)
    except ValueError as error:
        parser.error(str(error))
    if options.path:
        print(os.path.abspath(__file__))
        return 0
    if not options.target:
        parser.error("a module:function to run is required")
    remote = _connect_url(options)
    if remote:
        print(f"sparktimely-submit: {remote} is Spark Connect, which cannot run a worker "
              f"function (barrier.run needs a classic driver: --master spark://HOST:PORT, "
              f"yarn, k8s://..., local[N]); under Spark Connect use "
              f"sparktimely.barrier.map_in_arrow", file=sys.stderr)
        return 2
    try:
        function = load_function(options.target)
    except _NotAFunction as error:
        parser.error(f"cannot run {options.target}: {error}")
    except Exception as error:      # noqa: BLE001 - the job's module failed as it loaded
        parser.error(f"cannot run {options.target}: {type(error).__name__}: {error}")
    _send_by_value(function)
    from pyspark.sql import SparkSession
    ours = SparkSession.getActiveSession() is None        # else the caller's to stop
    try:
        spark = _session(options)
    except Exception as error:                    # no Java, or Spark refused to start
        print(f"sparktimely-submit: the Spark driver did not start: {_java_said(error)}",
              file=sys.stderr)
        return 2
    try:
        return _run(spark, function, options)
    finally:
        if ours:
            spark.stop()


def _run(spark, function: Callable, options) -> int:
    from ..errors import WorkerError, user_traceback
    from ..io.checkpoints import RecoveryError
    from ._api import BarrierSetupError, run
    from ._resources import slots_of
    from ._ship import EnvironmentMissing
    workers = options.workers or slots_of(spark.sparkContext) or spark.sparkContext.defaultParallelism
    started = time.perf_counter()
    try:
        results = run(spark, function, workers, args=options.args, timeout=options.timeout,
                      stall_limit=options.stall_limit, log_dir=options.log_dir,
                      progress=options.progress, checkpoint_dir=options.checkpoint_dir,
                      checkpoint_every=options.checkpoint_every,
                      max_attempts=options.max_attempts)
    except (BarrierSetupError, EnvironmentMissing) as error:
        print(f"sparktimely-submit: {error}", file=sys.stderr)
        return 2
    except RecoveryError as error:
        print(f"sparktimely-submit: {error}", file=sys.stderr)
        return 1
    except WorkerError as error:
        told = f"sparktimely-submit: {error}"
        if error.traceback:
            told += "\n" + user_traceback(error.traceback)
        print(told, file=sys.stderr)
        return 1
    except Exception as error:                    # Spark's own failure, not a worker's
        print(f"sparktimely-submit: the Spark job failed: {_java_said(error)}", file=sys.stderr)
        return 1
    ran = f"{workers} worker{'s' if workers != 1 else ''} ran"
    print(f"sparktimely-submit: {ran} {options.target} in "
          f"{time.perf_counter() - started:.2f} s (one barrier stage)", file=sys.stderr)
    if options.log_dir is not None:
        print(f"sparktimely-submit: the workers' logs are in {options.log_dir} on their "
              f"hosts (python -m sparktimely.profile {options.log_dir})", file=sys.stderr)
    for index, result in enumerate(results):
        if isinstance(result, str):
            print(result)
        elif result is not None:
            print(f"worker {index}: {result!r}")
    sys.stdout.flush()
    return 0


def _java_said(error: BaseException) -> str:
    """What a failure says, without the Java stack a Py4J error carries.

    >>> _java_said(ValueError("no"))
    'ValueError: no'
    """
    java = getattr(error, "java_exception", None)
    if java is None:
        return f"{type(error).__name__}: {error}"
    lines = [line for line in str(java.toString()).splitlines() if line.strip()]
    return " ".join(line.strip() for line in lines[:3])


if __name__ == "__main__":
    if __package__ in (None, ""):              # run as a file by spark-submit
        from sparktimely.barrier.submit import main as _main
        sys.exit(_main())
    sys.exit(main())
