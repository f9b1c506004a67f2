"""Wordcount: sparktimely beside bytewax, PySpark and collections.Counter on the same words.

    python -m benchmarks.bench_wordcount [--sizes 500000,1000000,2000000] [--no-spark]

The input is ``w{i % 10007}`` for i below N (the anchors' data set). Peers run in their own
subprocess with the data built there; every figure excludes interpreter and Spark start-up
(Spark runs warm: one untimed job first). A peer that cannot be imported is reported as
missing, never skipped silently.
"""
from __future__ import annotations

import collections
import json
import statistics
import subprocess
import sys
import textwrap
import time

import sparktimely as st

from ._util import median_seconds, print_table

KEYS = 10_007


def words(n: int, start: int = 0, step: int = 1) -> list[str]:
    return [f"w{i % KEYS}" for i in range(start, n, step)]


def sparktimely_objects(n: int, workers: int) -> float:
    """Seconds for a keyed count of n words on ``workers`` processes (Python objects)."""
    def job(worker):
        mine = words(n, worker.index, worker.peers)

        def count(input, output, notificator):
            for cap, batch in input:
                if cap.time not in totals:
                    notificator.notify_at(cap.retain())
                totals.setdefault(cap.time, collections.Counter()).update(batch)
            for cap, _ in notificator:
                output.give_at(cap, list(totals.pop(cap.time).items()))
        totals: dict = {}
        start = time.perf_counter()
        result = worker.dataflow(lambda scope: scope.to_stream(mine)
                                 .unary_notify(st.Exchange(hash), "Count", [], count).capture())
        worker.run()
        elapsed = time.perf_counter() - start
        return elapsed, sum(c for _, pairs in result.extract() for _, c in pairs)
    runs = [st.execute(job, workers=workers) for _ in range(3)]
    assert all(sum(total for _, total in run) == n for run in runs)
    return statistics.median(max(seconds for seconds, _ in run) for run in runs)


def counter(n: int) -> float:
    data = words(n)
    return median_seconds(lambda: collections.Counter(data), 3)


_PEER_SCRIPTS = {
    "bytewax": """
        import time
        from bytewax.dataflow import Dataflow
        import bytewax.operators as op
        from bytewax.testing import TestingSource, TestingSink, run_main
        data = [f"w{{i % {keys}}}" for i in range({n})]
        flow = Dataflow("wc")
        counted = op.count_final("count", op.input("in", flow, TestingSource(data, batch_size=4096)),
                                 lambda w: w)
        out = []
        op.output("out", counted, TestingSink(out))
        start = time.perf_counter(); run_main(flow); seconds = time.perf_counter() - start
        assert sum(v for _, v in out) == {n}
    """,
    "pyspark_rdd": """
        import os, sys, time
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        data = [f"w{{i % {keys}}}" for i in range({n})]
        def run():
            rdd = spark.sparkContext.parallelize(data, 4)
            return rdd.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect()
        run()
        start = time.perf_counter(); out = run(); seconds = time.perf_counter() - start
        assert sum(v for _, v in out) == {n}
        spark.stop()
    """,
    "pyspark_dataframe": """
        import os, sys, time
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.range({n}).selectExpr("concat('w', cast(id % {keys} as string)) as word").cache()
        df.count()
        run = lambda: df.groupBy("word").count().collect()
        run()
        start = time.perf_counter(); out = run(); seconds = time.perf_counter() - start
        assert sum(r["count"] for r in out) == {n}
        spark.stop()
    """,
}


def peer(name: str, n: int) -> float | str:
    """Seconds for peer ``name`` on n words, or why it could not run."""
    script = textwrap.dedent(_PEER_SCRIPTS[name]).format(n=n, keys=KEYS) + \
        "\nimport json; print(json.dumps(seconds))\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        if "ModuleNotFoundError" in run.stderr:
            return "missing (pip install -e .[bench])"
        return "failed: " + (run.stderr.strip().splitlines() or ["?"])[-1][:60]
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(sizes: list[int] = (500_000, 1_000_000, 2_000_000), spark: bool = True) -> list[tuple]:
    rows = []
    for n in sizes:
        figures = {
            "sparktimely objects, 1 worker": sparktimely_objects(n, 1),
            "sparktimely objects, 2 workers": sparktimely_objects(n, 2),
            "collections.Counter, 1 thread": counter(n),
            "bytewax 1 worker": peer("bytewax", n),
        }
        if spark:
            figures["PySpark RDD reduceByKey, local[2]"] = peer("pyspark_rdd", n)
            figures["PySpark DataFrame groupBy, local[2]"] = peer("pyspark_dataframe", n)
        for name, seconds in figures.items():
            rate = n / seconds / 1e6 if isinstance(seconds, float) else seconds
            rows.append((f"wordcount {n:,} words", name, rate))
    print_table("Wordcount, 10,007 keys (M records/s; medians)", rows, ("size", "engine", "M rec/s"))
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    sizes = [int(s) for s in args[args.index("--sizes") + 1].split(",")] if "--sizes" in args else None
    main(sizes or (500_000, 1_000_000, 2_000_000), spark="--no-spark" not in args)
