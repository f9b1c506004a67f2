"""One local Spark session (``local[2]``) for the test modules that need Spark: started by the
first test that asks, shared with any module that runs while it is active, and stopped with
its JVM by the module that started it."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.pyspark.python": sys.executable,
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "2g",
}


def spark_session() -> Iterator:
    """The body of a module-scoped ``spark`` fixture (skips without Java)."""
    from sparktimely.barrier.submit import JavaMissing, require_java
    try:
        require_java()
    except JavaMissing as error:
        pytest.skip(str(error))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    existing = SparkSession.getActiveSession()          # another module's: use it, keep it
    builder = SparkSession.builder.master("local[2]").appName("sparktimely tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = existing or builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        stop_spark(session)


def stop_spark(session) -> None:
    """Stop the session and its JVM too (pyspark keeps the JVM until Python exits, which
    later tests would see as a leftover child process)."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    session.stop()
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        return
    gateway.shutdown()
    process.stdin.close()                         # the JVM exits at EOF on its stdin
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
    SparkContext._gateway = SparkContext._jvm = None
