"""PageRank side by side in one run: sparktimely inside one Spark barrier stage, PySpark's RDD
PageRank (Spark's own example), and numpy on one thread; then what sparktimely's start-up
costs on top of Spark's own barrier stage.

    python benchmarks/bench_pagerank.py                       # 100k nodes, 1M edges, 10 iterations
    python benchmarks/bench_pagerank.py --skip-rdd --repeat 5

The graph and the numpy and RDD code are those of ``shared/anchors/pr_anchor.py``.
sparktimely runs on ``local[2]`` with 2 workers in two ways: ``run`` (each worker reads its
row groups of a Parquet file) and ``map_in_arrow`` over ``spark.read.parquet``. Its time per
iteration is measured by worker 0 from the first iteration's start to the last one's end,
inside the barrier stage; the whole stage's wall time is reported too.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import sparktimely as st  # noqa: E402
from examples.pagerank import (SCHEMA, generate_graph, numpy_pagerank, pagerank,  # noqa: E402
                               pagerank_worker, read_edges)


def numpy_anchor(src, dst, nodes, iterations):
    """pr_anchor.py's numpy loop, verbatim."""
    deg = np.bincount(src, minlength=nodes).astype(np.float64)
    started = time.perf_counter()
    rank = np.ones(nodes)
    for _ in range(iterations):
        contrib = np.where(deg[src] > 0, rank[src] / deg[src], 0.0)
        rank = 0.15 + 0.85 * np.bincount(dst, weights=contrib, minlength=nodes)
    return time.perf_counter() - started, rank


def rdd_pagerank(sc, src, dst, iterations):
    """pr_anchor.py's PySpark RDD loop (Spark's example), verbatim; returns seconds, sum."""
    links = sc.parallelize(list(zip(src.tolist(), dst.tolist())), 4).groupByKey().mapValues(list).cache()
    ranks = links.mapValues(lambda _: 1.0)
    links.count()
    started = time.perf_counter()
    for _ in range(iterations):
        contribs = links.join(ranks).flatMap(lambda kv: [(d, kv[1][1] / len(kv[1][0])) for d in kv[1][0]])
        ranks = contribs.reduceByKey(lambda a, b: a + b).mapValues(lambda r: 0.15 + 0.85 * r)
    total = ranks.values().sum()
    seconds = time.perf_counter() - started
    links.unpersist()
    return seconds, total


def run_job(path, iterations, worker):
    """The ``run`` form: read this worker's row groups, then PageRank."""
    started = time.perf_counter()
    edges = read_edges(path, worker.index, worker.peers)
    loaded = time.perf_counter() - started
    summary = pagerank_worker(worker, edges, iterations, top=5)
    if summary is not None:
        summary["load_seconds"] = loaded
    return summary


def timed_build(iterations):
    """The ``map_in_arrow`` form, with the loop's seconds added as a column."""
    def build(scope, edges):
        timings: list = []
        ranks = pagerank(scope, edges, iterations, timings)

        def add_seconds(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batch in input:
                    seconds = timings[0][1] if timings else float("nan")
                    output.give_at(cap, batch.append_column(
                        "loop_seconds", pa.array(np.full(batch.num_rows, seconds))))
            return logic
        return ranks.unary(st.Pipeline, "LoopSeconds", add_seconds)
    return build


def median_seconds(action, repeat):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def barrier_stage(sc, calls):
    """A bare 2-task barrier stage making ``calls`` (a list of 'gather'/'barrier')."""
    def task(_):
        from pyspark import BarrierTaskContext
        context = BarrierTaskContext.get()
        for call in calls:
            context.allGather("x") if call == "gather" else context.barrier()
        yield 1
    return lambda: sc.parallelize(range(2), 2).barrier().mapPartitions(task).collect()


def setup_phases(sc, repeat):
    """Per-task phases of ``BarrierWorker`` (median over tasks and repeats)."""
    def task(_):
        from sparktimely.barrier import BarrierWorker
        barrier = BarrierWorker()
        with barrier as worker:
            worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x).probe())
            worker.run()
        yield dict(barrier.timings)
    phases: dict = {}
    for _ in range(repeat):
        for timings in sc.parallelize(range(2), 2).barrier().mapPartitions(task).collect():
            for name, seconds in timings.items():
                phases.setdefault(name, []).append(seconds)
    return {name: statistics.median(values) for name, values in phases.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-rdd", action="store_true")
    options = parser.parse_args(argv)
    nodes, iterations = options.nodes, options.iterations
    src, dst = generate_graph(nodes, options.edges)
    rows = []

    def row(name, ms, note=""):
        rows.append((name, ms, note))
        print(f"  {name}: {ms:.1f} ms/iteration {note}", flush=True)

    print(f"PageRank: {nodes:,} nodes, {options.edges:,} edges, {iterations} iterations", flush=True)
    seconds, reference = min((numpy_anchor(src, dst, nodes, iterations) for _ in range(options.repeat)),
                             key=lambda result: result[0])
    row("numpy, one thread (pr_anchor.py loop)", 1000 * seconds / iterations,
        f"checksum {reference.sum():.3f}")
    started = time.perf_counter()
    for _ in range(options.repeat):
        lean = numpy_pagerank(src, dst, nodes, iterations)
    row("numpy, one thread (gather of rank/degree, as sparktimely's workers)",
        1000 * (time.perf_counter() - started) / options.repeat / iterations)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparktimely.barrier as stb
    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("bench_pagerank")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "6g").config("spark.pyspark.python", sys.executable)
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
             .getOrCreate())
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    session_seconds = time.perf_counter() - started
    print(f"Spark session (local[2]) started in {session_seconds:.1f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="sparktimely-bench-") as directory:
        path = os.path.join(directory, "edges.parquet")
        pq.write_table(pa.table({"src": src, "dst": dst}), path,
                       row_group_size=-(-options.edges // 8))
        stb.run(spark, lambda worker: worker.index, 2)            # warm the Python workers
        runs = []
        for _ in range(options.repeat):
            started = time.perf_counter()
            summary = stb.run(spark, partial(run_job, path, iterations), 2)[0]
            summary["stage_seconds"] = time.perf_counter() - started
            runs.append(summary)
        best = min(runs, key=lambda s: s["ms_per_iteration"])
        row("sparktimely, 2 workers in one barrier stage (run; Parquet read by the workers)",
            best["ms_per_iteration"],
            f"(runs: {', '.join(format(s['ms_per_iteration'], '.1f') for s in runs)}; "
            f"whole stage {statistics.median(s['stage_seconds'] for s in runs):.2f} s, "
            f"Parquet read {best['load_seconds']:.2f} s)")
        top_node = best["top"][0][1]
        assert abs(best["top"][0][0] - reference[top_node]) < 1e-9, "ranks differ from numpy"

        frame = spark.read.parquet(path)
        frame_runs = []
        for _ in range(options.repeat):
            started = time.perf_counter()
            out = stb.map_in_arrow(frame, timed_build(iterations),
                                   "node long, rank double, loop_seconds double", num_workers=2)
            loop, total, count = out.agg(F.max("loop_seconds"), F.sum("rank"), F.count("*")).collect()[0]
            frame_runs.append((loop, time.perf_counter() - started, total, count))
        loop, stage, total, count = min(frame_runs)
        present = np.union1d(src, dst)
        assert count == len(present) and abs(total - reference[present].sum()) < 1e-6 * total
        row("sparktimely, 2 workers in one barrier stage (map_in_arrow over spark.read.parquet)",
            1000 * loop / iterations,
            f"(whole job incl. repartition {statistics.median(r[1] for r in frame_runs):.2f} s)")

        if not options.skip_rdd:
            seconds, total = rdd_pagerank(sc, src, dst, iterations)
            row("PySpark RDD PageRank (Spark's example), local[2]", 1000 * seconds / iterations,
                f"sum {total:.3f} (nodes without in-edges dropped)")

    print("Start-up (2 tasks, warm Python workers, median of 5):", flush=True)
    bare, _ = median_seconds(barrier_stage(sc, []), 5)
    gather, _ = median_seconds(barrier_stage(sc, ["gather"]), 5)
    both, _ = median_seconds(barrier_stage(sc, ["gather", "barrier"]), 5)
    ours, _ = median_seconds(lambda: stb.run(spark, lambda worker: worker.index, 2), 5)
    phases = setup_phases(sc, 5)
    startup = [
        ("Spark: barrier stage, no barrier calls", bare),
        ("Spark: barrier stage with one allGather (the address exchange)", gather),
        ("Spark: barrier stage with allGather + barrier", both),
        ("sparktimely: run(spark, lambda w: w.index, 2)", ours),
        ("sparktimely beyond Spark's own stage with one allGather", ours - gather),
    ]
    for name, seconds in startup:
        print(f"  {name}: {1000 * seconds:.0f} ms", flush=True)
    print("  per-task phases inside BarrierWorker (median): "
          + ", ".join(f"{name} {1000 * s:.1f} ms" for name, s in phases.items()), flush=True)
    spark.stop()

    print("\n| PageRank, 100k nodes / 1M edges | ms per iteration | notes |\n|---|---:|---|")
    for name, ms, note in rows:
        print(f"| {name} | {ms:.1f} | {note} |")
    print("\n| start-up | ms |\n|---|---:|")
    print(f"| Spark session start (local[2]) | {1000 * session_seconds:.0f} |")
    for name, seconds in startup:
        print(f"| {name} | {1000 * seconds:.0f} |")
    for name, seconds in phases.items():
        print(f"| sparktimely task phase: {name} | {1000 * seconds:.1f} |")


if __name__ == "__main__":
    main()
