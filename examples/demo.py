"""The sparktimely demo: PageRank as a Spark application, on an embedded local Spark.

1. starts a local Spark driver (``local[2]``; a clear message and status 2 if there is no
   Java, or the driver does not start);
2. has Spark generate a random graph (100,000 nodes, 1,000,000 edges by default) and write
   it as Parquet;
3. runs ``examples.pagerank:job`` through the spark-submit entry point
   (``sparktimely.barrier.submit``), one barrier task per worker: each worker reads its
   share of the Parquet files and the workers run the PageRank iterations together (10
   by default);
4. prints the top ranks and the time per iteration, then numpy's on one thread (reading the
   same Parquet files) for comparison.

    scripts/demo                                 # or: python examples/demo.py
    python examples/demo.py --nodes 20000 --edges 200000 --iterations 20
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from sparktimely.barrier import submit
from sparktimely.execute import at_least

if __package__ in (None, ""):          # run as a file: the job is examples.pagerank:job
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=at_least(1), default=100_000,
                        help="nodes of the random graph (default: %(default)s)")
    parser.add_argument("--edges", type=at_least(1), default=1_000_000,
                        help="edges of the random graph (default: %(default)s)")
    parser.add_argument("--iterations", type=at_least(1), default=10,
                        help="PageRank iterations (default: %(default)s)")
    parser.add_argument("--workers", type=at_least(1), default=2,
                        help="timely workers, one barrier task each (default: %(default)s)")
    parser.add_argument("--master", default="local[2]",
                        help="the Spark master to start (default: %(default)s)")
    options = parser.parse_args(argv)
    try:
        submit.require_java()
    except submit.JavaMissing as error:
        print(f"demo: cannot start Spark: {error}", file=sys.stderr)
        return 2

    import numpy as np
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from examples.pagerank import numpy_pagerank

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    try:
        spark = (SparkSession.builder.master(options.master).appName("sparktimely demo")
                 .config("spark.pyspark.python", sys.executable)
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(options.workers))
                 .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
                 .getOrCreate())
    except Exception as error:                  # e.g. a master Spark cannot start with
        said = (str(error).strip().splitlines() or [""])[0]
        print(f"demo: the Spark driver did not start (--master {options.master}): "
              f"{type(error).__name__}: {said}", file=sys.stderr)
        return 2
    spark.sparkContext.setLogLevel("ERROR")
    print(f"demo: Spark {spark.version} started ({options.master}) in "
          f"{time.perf_counter() - started:.1f} s")
    try:
        with tempfile.TemporaryDirectory(prefix="sparktimely-demo-") as directory:
            path = os.path.join(directory, "edges.parquet")
            started = time.perf_counter()
            nodes = F.lit(options.nodes)
            src = F.pmod(F.xxhash64("id", F.lit(1)), nodes)
            dst = F.pmod(F.col("src") * 2654435761 + F.pmod(F.xxhash64("id", F.lit(2)), nodes), nodes)
            (spark.range(0, options.edges, 1, 2 * options.workers)
             .select("id", src.alias("src")).select("src", dst.alias("dst"))
             .write.parquet(path))
            print(f"demo: Spark generated {options.edges:,} random edges over "
                  f"{options.nodes:,} nodes and wrote them to Parquet in "
                  f"{time.perf_counter() - started:.1f} s")
            print(f"demo: sparktimely-submit -w {options.workers} examples.pagerank:job "
                  f"--edges {path} --iterations {options.iterations}", flush=True)
            status = submit.main(["-w", str(options.workers), "examples.pagerank:job",
                                  "--edges", path, "--iterations", str(options.iterations)])
            if status:
                return status
            edges = pq.read_table(path)
            src, dst = (edges.column(name).to_numpy() for name in ("src", "dst"))
            started = time.perf_counter()
            ranks = numpy_pagerank(src, dst, options.nodes, options.iterations)
            seconds = time.perf_counter() - started
            top = np.lexsort((np.arange(len(ranks)), ranks))[::-1][:3]   # as pagerank orders
            print(f"demo: numpy on one thread: {1000 * seconds / options.iterations:.1f} ms "
                  f"per iteration; its top nodes: "
                  + ", ".join(f"{n} ({ranks[n]:.4f})" for n in top))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
