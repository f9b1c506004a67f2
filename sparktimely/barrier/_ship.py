"""Getting sparktimely to Spark's executors, and saying clearly what they lack.

On a real cluster the executors run a Python of their own, which usually has no sparktimely
(``spark.pyspark.python`` given when the application starts chooses it: :func:`ship` sees to
it that pyspark, which reads only ``PYSPARK_PYTHON``, uses it; set in a running session it
does not reach them). sparktimely is pure
Python: :func:`ship` adds a zip of this very package to the SparkContext (``addPyFile``, once
per application), so every task imports the driver's sparktimely, whatever the executors
have installed. Its dependencies (numpy, pyarrow, multiprocess, psutil) are compiled code and
cannot travel that way (``xxhash`` is optional: without it ``sparktimely._xxh3`` computes
the same hashes). :func:`on_executor` wraps a task function so that, before
anything of sparktimely is imported there, it checks that they import, and otherwise fails
with one error naming what is missing, on which executor host and which Python, and how to
ship an environment; the driver turns that error into :class:`EnvironmentMissing`.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import tempfile
import zipfile
from typing import Any, Callable

__all__ = ["EnvironmentMissing", "REQUIRED", "on_executor", "package_zip", "parse_missing",
           "ship"]

REQUIRED = ("numpy", "pyarrow", "multiprocess", "psutil")
"""What sparktimely imports on an executor besides itself and pyspark."""

REMEDY = ("for that Python on every node, or ship an environment: a virtualenv with "
          "sparktimely's dependencies, packed with its links followed (tar czhf env.tar.gz -C "
          "VENV bin include lib pyvenv.cfg) or with conda-pack, given to the application with "
          "--conf spark.archives=env.tar.gz#env --conf spark.pyspark.python=./env/bin/python (with "
          "spark-submit add --conf spark.pyspark.driver.python=$(which python), so the driver "
          "keeps its own Python; see sparktimely's README, 'On a real cluster')")

_MISSING = re.compile(r"sparktimely cannot run on executor [^\n]*")


class EnvironmentMissing(RuntimeError):
    """The executors' Python lacks what sparktimely needs there (numpy, pyarrow, ...): the
    message names what, on which executor and which Python, and how to ship an environment.

    >>> from sparktimely.barrier._ship import EnvironmentMissing, parse_missing
    >>> error = parse_missing("... sparktimely cannot run on executor node-3 (Python "
    ...                       "/usr/bin/python3): numpy is missing ... ")
    >>> isinstance(error, EnvironmentMissing), str(error)[:45]
    (True, 'sparktimely cannot run on executor node-3 (Py')
    """


_NO_PYTHON = re.compile(r'Cannot run program "([^"]*)"(?: \(in directory "[^"]*"\))?: ([^\n]*)')


def parse_missing(text: str) -> EnvironmentMissing | None:
    """The :class:`EnvironmentMissing` an executor reported in ``text`` (a Spark error
    message), or None; also when Spark could not start the executors' Python at all.

    >>> print(parse_missing('java.io.IOException: Cannot run program "./env/bin/python": '
    ...                     'error=2, No such file or directory'))    # doctest: +ELLIPSIS
    sparktimely cannot run on the executors: their Python ./env/bin/python does not start (error=2, No such file or directory): give spark.pyspark.python a Python ...
    """
    match = _MISSING.search(text)
    if match:
        return EnvironmentMissing(match[0].rstrip())
    match = _NO_PYTHON.search(text)
    if match:
        return EnvironmentMissing(
            f"sparktimely cannot run on the executors: their Python {match[1]} does not start "
            f"({match[2].strip()}): give spark.pyspark.python a Python that every executor's "
            f"host has, or {REMEDY.partition(', or ')[2]}")
    return None


_zip: str | None = None


def package_zip() -> str:
    """The path of a zip of the installed sparktimely package (its ``.py`` files), made once
    per process in the temporary directory and named by a hash of its contents.

    >>> import zipfile
    >>> "sparktimely/__init__.py" in zipfile.ZipFile(package_zip()).namelist()
    True
    """
    global _zip
    if _zip is not None and os.path.exists(_zip):
        return _zip
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the package
    files = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        files += [os.path.join(directory, name) for name in sorted(names) if name.endswith(".py")]
    digest = hashlib.blake2b(digest_size=8)
    for path in files:
        digest.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as source:
            digest.update(source.read())
    directory = os.path.join(tempfile.gettempdir(), f"sparktimely-ship-{os.getuid()}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"sparktimely-{digest.hexdigest()}.zip")
    if not os.path.exists(path):
        partial = f"{path}.{os.getpid()}.part"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in files:
                archive.write(file, os.path.join("sparktimely", os.path.relpath(file, root)))
        os.replace(partial, path)
    _zip = path
    return path


_shipped: dict[str, str] = {}       # application id -> the zip its executors were given


def ship(spark: Any) -> None:
    """Make sparktimely importable on the executors of ``spark`` (a SparkContext, or a
    SparkSession, also under Spark Connect): the package goes to them as a zip, once per
    application. ``run``, ``map_in_arrow`` and ``map_partitions`` call it.

    >>> ship(spark)                                      # doctest: +SKIP
    """
    sc = spark if hasattr(spark, "addPyFile") else _context_of(spark)
    path = package_zip()
    if sc is not None:
        _executors_python(sc)
        application = sc.applicationId
        if _shipped.get(application) != path:
            sc.addPyFile(path)
            _shipped[application] = path
    elif hasattr(spark, "addArtifacts"):                  # Spark Connect
        key = f"connect:{id(spark)}"
        if _shipped.get(key) != path:
            spark.addArtifacts(path, pyfile=True)
            _shipped[key] = path


def _executors_python(sc: Any) -> None:
    """Let ``spark.pyspark.python``, given when the application started, choose the
    executors' Python: pyspark itself takes it only from ``PYSPARK_PYTHON`` in the driver's
    environment (under ``spark-submit``, which sets that from the conf, both agree)."""
    chosen = sc.getConf().get("spark.pyspark.python", None)
    if chosen and "PYSPARK_PYTHON" not in os.environ and sc.pythonExec != chosen:
        sc.pythonExec = chosen


def _context_of(spark: Any) -> Any:
    try:
        return spark.sparkContext
    except Exception:                                    # Spark Connect has no SparkContext
        return None


_OPEN_FILES = (io.FileIO, io.BufferedReader, io.BufferedWriter, io.BufferedRandom,
               io.TextIOWrapper)
"""Files of the driver's own (a descriptor of its process): cloudpickle would send a file
open for reading as a copy of what is left of it, read on the driver, and each worker would
read that copy as if it were the file."""


def _without_open_files(cloudpickle: Any, task: Callable) -> bytes:
    """``task`` pickled with Spark's cloudpickle, refusing an open file it holds (TypeError).

    >>> from pyspark import cloudpickle
    >>> with open(__file__) as source:
    ...     _without_open_files(cloudpickle, lambda: source.read())
    Traceback (most recent call last):
    TypeError: it holds the open file ...
    """
    class Refusing(cloudpickle.CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, _OPEN_FILES) and obj not in (sys.stdout, sys.stderr, sys.stdin):
                raise TypeError(f"it holds the open file {getattr(obj, 'name', obj)!r}")
            return super().reducer_override(obj)
    buffer = io.BytesIO()
    Refusing(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(task)
    return buffer.getvalue()


def on_executor(task: Callable, name: str | None = None) -> Callable:
    """``task`` wrapped for an executor: the wrapper is pickled by value and imports nothing
    of sparktimely until it has checked :data:`REQUIRED` there (the task travels as bytes
    unpickled after the check). An executor that lacks any raises one RuntimeError naming
    them, the host and the Python, and :data:`REMEDY`. ``name`` becomes the wrapper's name
    (what Spark's plans and UI call a Python UDF).

    >>> on_executor(lambda partition: sum(partition))(range(5))
    10
    """
    from pyspark import cloudpickle
    try:
        payload = _without_open_files(cloudpickle, task)
    except Exception as error:
        raise TypeError(f"the job cannot be sent to Spark's executors: pickling its function "
                        f"(and what it refers to) failed with {type(error).__name__}: "
                        f"{error}; a job's function must not hold locks, open files or "
                        f"connections (make them inside it)") from error
    required, remedy = REQUIRED, REMEDY

    def sparktimely_task(*args: Any) -> Any:
        import pickle
        import socket
        import sys
        missing = []
        for name in required:
            try:
                __import__(name)
            except ImportError as error:
                missing.append(f"{name} ({error})")
        where = (f"sparktimely cannot run on executor {socket.gethostname()} (Python "
                 f"{sys.executable}, {sys.version.split()[0]})")
        if missing:
            raise RuntimeError(f"{where}: {', '.join(missing)} "
                               f"{'is' if len(missing) == 1 else 'are'} missing there: install "
                               f"{'it' if len(missing) == 1 else 'them'} {remedy}")
        try:
            function = pickle.loads(payload)
        except ImportError as error:
            raise RuntimeError(f"{where}: importing the job failed there ({error}): the "
                               f"package shipped with addPyFile did not arrive, or the job's "
                               f"own modules are not on the executors (--py-files)") from error
        return function(*args)
    if name is not None:
        sparktimely_task.__name__ = sparktimely_task.__qualname__ = name
    return sparktimely_task
