"""Wordcount: sparktimely (Python objects and Arrow) beside bytewax, PySpark RDD, PySpark DataFrame
and collections.Counter, on the same words at three sizes.

    python -m benchmarks.bench_wordcount [--quick] [--sizes 500000,2000000,8000000] [--no-spark]

The input is ``w{i % 10007}`` for i below N (the anchors' data set), for every engine. Each
figure is the median of REPEATS timed runs, after the data is in place and the engine warm:

- sparktimely objects: each worker process builds its share of the words (every other word),
  then ``unary_notify`` counts them with a Counter per time behind ``Exchange(hash)``; timed
  from dataflow construction to completion on each worker (after a barrier), the slower
  worker counts; one untimed warm-up run first, in the same processes (the cold run is
  reported in the notes);
- sparktimely Arrow: the words as one Arrow string column, split between the workers in
  batches of 65,536 rows, counted by ``aggregate_batches("word", {"n": ("count", None)})``
  with per-batch pre-aggregation (``combine``) on or off (see bench_arrow);
- bytewax (one worker, ``run_main``): ``count_final`` over a TestingSource (batches of 4096);
- PySpark RDD (local[2]): ``map((w, 1)).reduceByKey(add).collect()`` over a cached RDD of the
  words built in the executors; PySpark DataFrame (local[2]): ``groupBy("word").count()`` over a
  cached DataFrame built in the JVM; one Spark session for all sizes, session start-up and an
  untimed first job excluded;
- Counter: ``collections.Counter(words)`` on one thread.

Peers run in their own subprocess (data built there). A peer that cannot be imported is
reported as missing, never skipped silently.
"""
from __future__ import annotations

import collections
import statistics
import sys
import textwrap
import time

import sparktimely as st

from ._util import Goal, Row, Section, median_seconds, run_script
from .bench_arrow import WORD_BATCH, timed, words_table, wordcount as arrow_wordcount

KEYS = 10_007
SIZES = (500_000, 2_000_000, 8_000_000)
REPEATS = 3
GOAL_SIZE = 2_000_000                 # the goals (and the anchors) are stated for 2M words


def words(n: int, start: int = 0, step: int = 1) -> list[str]:
    return [f"w{i % KEYS}" for i in range(start, n, step)]


def sparktimely_objects(n: int, workers: int, cold: list | None = None) -> float:
    """Median seconds (slowest worker) of a keyed count of n words on ``workers`` processes
    (Python objects), over REPEATS runs after one untimed warm-up run in the same processes;
    the warm-up's seconds are appended to ``cold`` if given."""
    def job(worker):
        mine = words(n, worker.index, worker.peers)
        times, counted = [], []
        for _ in range(REPEATS + 1):
            totals: dict = {}

            def count(input, output, notificator, totals=totals):
                for cap, batch in input:
                    if cap.time not in totals:
                        notificator.notify_at(cap.retain())
                    totals.setdefault(cap.time, collections.Counter()).update(batch)
                for cap, _ in notificator:
                    output.give_at(cap, list(totals.pop(cap.time).items()))

            def build(scope, count=count):
                return (scope.to_stream(mine).unary_notify(st.Exchange(hash), "Count", [], count)
                        .inspect_batch(lambda t, pairs: counted.append(sum(c for _, c in pairs)))
                        .probe())
            times.append(timed(worker, build))
        return times, sum(counted)
    results = st.execute(job, workers=workers)
    assert sum(total for _, total in results) == (REPEATS + 1) * n
    if cold is not None:
        cold.append(max(times[0] for times, _ in results))
    return statistics.median(max(run) for run in zip(*(times[1:] for times, _ in results)))


def counter(n: int) -> float:
    data = words(n)
    return median_seconds(lambda: collections.Counter(data), REPEATS)


_BYTEWAX = """
import json, statistics, time
from bytewax.dataflow import Dataflow
import bytewax.operators as op
from bytewax.testing import TestingSource, TestingSink, run_main
result = {{}}
for n in {sizes}:
    data = [f"w{{i % {keys}}}" for i in range(n)]
    times = []
    for _ in range({repeats}):
        flow = Dataflow("wc")
        counted = op.count_final("count", op.input("in", flow, TestingSource(data, batch_size=4096)),
                                 lambda w: w)
        out = []
        op.output("out", counted, TestingSink(out))
        start = time.perf_counter(); run_main(flow); times.append(time.perf_counter() - start)
        assert sum(v for _, v in out) == n
    result[n] = statistics.median(times)
print(json.dumps({{"bytewax": result}}))
"""

_SPARK = """
import json, os, statistics, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "6g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
sc = spark.sparkContext
rdd_times, df_times = {{}}, {{}}

def median(run, n, check):
    run()                                         # warm: first job of this shape, untimed
    times = []
    for _ in range({repeats}):
        start = time.perf_counter(); out = run(); times.append(time.perf_counter() - start)
        assert check(out) == n
    return statistics.median(times)

for n in {sizes}:
    words = sc.range(n, numSlices=4).map(lambda i: f"w{{i % {keys}}}").cache()
    words.count()
    rdd_times[n] = median(lambda: words.map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect(),
                          n, lambda out: sum(v for _, v in out))
    words.unpersist()
    df = spark.range(n).selectExpr("concat('w', cast(id % {keys} as string)) as word").cache()
    df.count()
    df_times[n] = median(lambda: df.groupBy("word").count().collect(), n,
                         lambda out: sum(r["count"] for r in out))
    df.unpersist()
spark.stop()
print(json.dumps({{"PySpark RDD": rdd_times, "PySpark DataFrame": df_times}}))
"""


def peers(sizes: list[int], spark: bool) -> dict[str, dict[int, float] | str]:
    """Seconds per size for each peer, or why it could not run."""
    out: dict = {}
    scripts = [("bytewax", _BYTEWAX)] + ([("PySpark", _SPARK)] if spark else [])
    for name, script in scripts:
        result = run_script(textwrap.dedent(script).format(sizes=list(sizes), keys=KEYS,
                                                           repeats=REPEATS))
        if isinstance(result, str):
            keys = ["PySpark RDD", "PySpark DataFrame"] if name == "PySpark" else [name]
            out.update({key: result for key in keys})
        elif isinstance(result, dict):
            out.update({key: {int(n): s for n, s in times.items()} for key, times in result.items()})
        else:
            raise TypeError(f"{name} printed {result!r}, not seconds per size for each key")
    if not spark:
        out.update({"PySpark RDD": "not run (--no-spark)", "PySpark DataFrame": "not run (--no-spark)"})
    return out


def main(quick: bool = False, sizes: list[int] | None = None, spark: bool = True) -> list[Section]:
    sizes = list(sizes or (SIZES[:1] if quick else SIZES))
    peer_seconds = peers(sizes, spark)
    variants: dict[str, list[Row]] = {}
    cold: dict[int, list] = {n: [] for n in sizes}
    for n in sizes:
        size = f"{n / 1e6:g}M words"
        rates = {name: (n / times[n] / 1e6 if isinstance(times, dict) else times)
                 for name, times in peer_seconds.items()}
        rates["Counter"] = n / counter(n) / 1e6
        figures = {"sparktimely objects, 1 worker": n / sparktimely_objects(n, 1, cold[n]) / 1e6,
                   "sparktimely objects, 2 workers": n / sparktimely_objects(n, 2, cold[n]) / 1e6}
        table = words_table(n)
        for workers, combine in [(1, True), (2, True), (2, False)]:
            seconds = arrow_wordcount(table, workers, combine, repeats=REPEATS, cold=cold[n])
            figures[f"sparktimely Arrow, {workers} worker{'s' * (workers > 1)}, "
                    f"combine={'on' if combine else 'off'}"] = n / seconds / 1e6
        del table
        for name, rate in figures.items():
            goals = ([Goal(">=", 20), Goal(">=", 2, "Counter")]
                     if name.startswith("sparktimely Arrow, 2 workers, combine=on") and n == GOAL_SIZE
                     else [])
            variants.setdefault(name, []).append(Row(name, size, "M rec/s", rate, peers=rates,
                                                     goals=goals))
    rows = [row for group in variants.values() for row in group]
    return [Section(f"Wordcount, {KEYS:,} distinct words (M records/s)", rows, notes=[
        f"input w{{i % {KEYS}}} for i < N, the same for every engine; median of {REPEATS} warm "
        "runs; peers in their own subprocess, Spark session start-up excluded.",
        "bytewax: one worker (run_main), count_final; PySpark: local[2], RDD map+reduceByKey over "
        "a cached RDD, DataFrame groupBy().count() over a cached DataFrame; Counter: one thread.",
        f"sparktimely Arrow: aggregate_batches over one string column in {WORD_BATCH:,}-row "
        "batches; objects: unary_notify + Counter behind Exchange(hash). Peer columns repeat per "
        "size: each row compares one sparktimely variant with the same peer figures.",
        f"goals (Arrow, 2 workers, combine on) are stated for {GOAL_SIZE / 1e6:g}M words.",
        f"sparktimely runs {REPEATS} times in the same worker processes after one untimed warm-up "
        "(as Spark's untimed first job; Python strings cache their hash, so warm runs of Counter "
        "and of sparktimely objects both skip it); the cold first run, slowest worker, M rec/s per "
        "variant in row order: " + "; ".join(
            f"{n / 1e6:g}M: " + ", ".join(f"{n / s / 1e6:.3g}" for s in cold[n]) for n in sizes)],
        key="wordcount").print()]


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = [int(s) for s in args[args.index("--sizes") + 1].split(",")] if "--sizes" in args else None
    main(quick="--quick" in args, sizes=chosen, spark="--no-spark" not in args)
