"""PageRank side by side in one run, at three graph sizes: sparktimely inside one Spark barrier
stage, PySpark's RDD PageRank (Spark's own example), and numpy on one thread; then what
sparktimely's start-up costs on top of Spark's own barrier stage (reported separately: the
per-iteration figures exclude it, the end-to-end rows include it).

    python -m benchmarks.bench_pagerank [--quick] [--sizes 10000:100000,100000:1000000]
                                        [--iterations 10] [--repeat 3] [--skip-rdd]

The graph and the numpy and RDD code are those of ``shared/anchors/pr_anchor.py``.
sparktimely runs on ``local[2]`` with 2 workers in two ways: ``run`` (each worker reads its
row groups of a Parquet file) and ``map_in_arrow`` over ``spark.read.parquet``. Its time per
iteration is measured by worker 0 from the first iteration's start to the last one's end,
inside the barrier stage; the whole stage's wall time is the end-to-end figure. The Spark
session is started once, before anything is timed, and warmed with one barrier stage.
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
from benchmarks._util import Goal, Row, Section, median_seconds  # noqa: E402
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


SIZES = ((10_000, 100_000), (50_000, 500_000), (100_000, 1_000_000))
GOAL_SIZE = (100_000, 1_000_000)


def _size(nodes: int, edges: int) -> str:
    return f"{nodes // 1000}k nodes / {edges // 1000:,}k edges"


def start_spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master("local[2]").appName("bench_pagerank")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "6g").config("spark.pyspark.python", sys.executable)
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
            .getOrCreate())


def measure_size(spark, nodes, edges, iterations, repeat, skip_rdd) -> dict:
    """Every engine's figures on one graph: ms per iteration and end-to-end seconds."""
    from pyspark.sql import functions as F
    import sparktimely.barrier as stb
    sc = spark.sparkContext
    src, dst = generate_graph(nodes, edges)
    out: dict = {}
    anchor = [numpy_anchor(src, dst, nodes, iterations) for _ in range(repeat)]
    reference = anchor[0][1]
    out["numpy (pr_anchor loop)"] = statistics.median(seconds for seconds, _ in anchor)
    out["numpy (gather)"] = median_seconds(lambda: numpy_pagerank(src, dst, nodes, iterations), repeat)
    with tempfile.TemporaryDirectory(prefix="sparktimely-bench-") as directory:
        path = os.path.join(directory, "edges.parquet")
        pq.write_table(pa.table({"src": src, "dst": dst}), path, row_group_size=-(-edges // 8))
        runs = []
        for _ in range(repeat):
            started = time.perf_counter()
            summary = stb.run(spark, partial(run_job, path, iterations), 2)[0]
            summary["stage_seconds"] = time.perf_counter() - started
            runs.append(summary)
            node = summary["top"][0][1]
            assert abs(summary["top"][0][0] - reference[node]) < 1e-9, "ranks differ from numpy"
        out["run"] = statistics.median(s["seconds"] for s in runs)
        out["run stage"] = statistics.median(s["stage_seconds"] for s in runs)
        out["parquet read"] = statistics.median(s["load_seconds"] for s in runs)
        frame = spark.read.parquet(path)
        present = np.union1d(src, dst)
        loops, stages = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            result = stb.map_in_arrow(frame, timed_build(iterations),
                                      "node long, rank double, loop_seconds double", num_workers=2)
            loop, total, count = result.agg(F.max("loop_seconds"), F.sum("rank"),
                                            F.count("*")).collect()[0]
            stages.append(time.perf_counter() - started)
            loops.append(loop)
            assert count == len(present) and abs(total - reference[present].sum()) < 1e-6 * total
        out["map_in_arrow"], out["map_in_arrow job"] = statistics.median(loops), statistics.median(stages)
    if skip_rdd:
        out["PySpark RDD"] = "not run (--skip-rdd)"
    else:
        out["PySpark RDD"] = statistics.median(rdd_pagerank(sc, src, dst, iterations)[0]
                                               for _ in range(repeat))
    return out


def startup_section(spark, repeat: int, session_seconds: float) -> "Section":
    import sparktimely.barrier as stb
    sc = spark.sparkContext
    bare = median_seconds(barrier_stage(sc, []), repeat)
    gather = median_seconds(barrier_stage(sc, ["gather"]), repeat)
    both = median_seconds(barrier_stage(sc, ["gather", "barrier"]), repeat)
    job = median_seconds(lambda: sc.parallelize(range(2), 2).count(), repeat)
    ours = median_seconds(lambda: stb.run(spark, lambda worker: worker.index, 2), repeat)
    phases = setup_phases(sc, repeat)
    peers = {"Spark smallest job": 1000 * job, "Spark barrier stage, no calls": 1000 * bare,
             "Spark barrier stage, allGather + barrier": 1000 * both}
    rows = [Row("sparktimely run(spark, lambda w: w.index, 2)", "2 tasks", "ms", 1000 * ours,
                peers=peers, limits={"barrier stage + one allGather": 1000 * gather})]
    return Section("Spark-side start-up, local[2], warm Python workers (ms; excluded above)", rows,
                   notes=[f"median of {repeat}; sparktimely needs one allGather (the address "
                          "exchange), so a barrier stage with one allGather is its limit.",
                          "per-task phases inside BarrierWorker (median): " + ", ".join(
                              f"{name} {1000 * s:.1f} ms" for name, s in phases.items()),
                          f"Spark session start (local[2]), once per run, excluded from every "
                          f"figure: {session_seconds:.1f} s"], key="startup")


def main(argv=None, quick: bool = False) -> list["Section"]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=None, help="nodes:edges,... (default: three sizes)")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-rdd", action="store_true")
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args([] if argv is None and __name__ != "__main__" else argv)
    quick = quick or options.quick
    sizes = ([tuple(int(x) for x in size.split(":")) for size in options.sizes.split(",")]
             if options.sizes else SIZES[:1] if quick else SIZES)
    iterations, repeat = options.iterations, options.repeat

    started = time.perf_counter()
    spark = start_spark()
    spark.sparkContext.setLogLevel("ERROR")
    session_seconds = time.perf_counter() - started
    import sparktimely.barrier as stb
    stb.run(spark, lambda worker: worker.index, 2)            # warm the Python workers

    per_iteration: dict[str, list] = {"run": [], "map_in_arrow": []}
    end_to_end = []
    notes = []
    for nodes, edges in sizes:
        out = measure_size(spark, nodes, edges, iterations, repeat, options.skip_rdd)
        size = _size(nodes, edges)
        ms = lambda v: 1000 * v / iterations if isinstance(v, float) else v  # noqa: E731
        peers = {name: ms(out[name]) for name in
                 ("PySpark RDD", "numpy (pr_anchor loop)", "numpy (gather)")}
        goals = [Goal("<=", 40)] if (nodes, edges) == GOAL_SIZE else []
        per_iteration["run"].append(Row("sparktimely run(), 2 workers in one barrier stage", size,
                                        "ms/iter", ms(out["run"]), peers=peers, goals=goals))
        per_iteration["map_in_arrow"].append(Row(
            "sparktimely map_in_arrow(spark.read.parquet), 2 workers", size, "ms/iter",
            ms(out["map_in_arrow"]), peers=peers, goals=goals))
        end_to_end.append(Row("end to end: sparktimely run() whole barrier stage", size, "s",
                              out["run stage"],
                              peers={"PySpark RDD": out["PySpark RDD"],
                                     "numpy (pr_anchor loop)": out["numpy (pr_anchor loop)"],
                                     "numpy (gather)": out["numpy (gather)"]}))
        notes.append(f"{size}: Parquet read by the workers {out['parquet read']:.2f} s; "
                     f"map_in_arrow whole job (incl. repartition) {out['map_in_arrow job']:.2f} s")
    rows = per_iteration["run"] + per_iteration["map_in_arrow"] + end_to_end
    section = Section(f"PageRank, {iterations} iterations, local[2] (ms per iteration; end to end in s)",
                      rows, notes=[
                          f"median of {repeat} runs each; sparktimely per iteration: worker 0's loop "
                          "time inside the barrier stage; end to end: the whole stage (start-up, "
                          "Parquet read, loop) against PySpark RDD's timed loop (graph cached "
                          "first) and numpy's loop.",
                          "numpy (pr_anchor loop): shared/anchors/pr_anchor.py verbatim; numpy "
                          "(gather): the same update as rank*inv_degree gathered per edge, the "
                          "formulation sparktimely's workers use (the stronger single-thread "
                          "baseline). PySpark RDD: Spark's example.", *notes],
                      key="pagerank").print()
    startup = startup_section(spark, 5, session_seconds).print()
    spark.stop()
    return [section, startup]


if __name__ == "__main__":
    main(sys.argv[1:])
