"""Benchmark of columnar (Arrow) streams on 2 worker processes, with baselines from the same run.

Run: python -m benchmarks.bench_arrow [--profile]
Prints one table:
- columnar wordcount: 2M words over 10,007 keys as a string column, half on each worker,
  ``aggregate_batches("word", {"n": ("count", None)})`` (exchange by word, count per time),
  with and without per-batch pre-aggregation (``combine``), against ``collections.Counter``
  over the same 2M Python strings on one thread;
- Arrow exchange: 8 MiB batches of 8 int64/float64 columns exchanged by an int64 key between the
  2 workers (``exchange(key="k")``), and sent whole to the other worker (pure transport),
  against numpy memcpy of the same bytes on one thread.
Worker timings start after a barrier dataflow and stop when the measured dataflow completes;
the slower worker's time counts. Each figure is the median of REPEATS runs.
``--profile`` prints (to stderr) worker 0's cProfile of its second timed wordcount run (2 workers,
combine) and of its second keyed exchange run.
"""
from __future__ import annotations

import collections
import cProfile
import io
import pstats
import statistics
import sys
import time

import numpy as np
import pyarrow as pa

import sparktimely as st

from ._util import Row, Section, batch_source
from .bench_shm import memcpy_limit

REPEATS = 5
WORDS, KEYS, WORD_BATCH = 2_000_000, 10_007, 1 << 16
ROWS, COLUMNS, BATCHES = 1 << 17, 8, 128         # 8 MiB batches, 1 GiB per worker


def barrier(worker) -> None:
    probe = worker.dataflow(lambda s: s.to_stream([worker.index]).broadcast().probe())
    worker.step_while(lambda: not probe.done())


def timed(worker, build, profile: bool = False) -> float:
    """Seconds this worker takes to run the dataflow ``build`` to completion."""
    barrier(worker)
    profiler = cProfile.Profile() if profile and worker.index == 0 else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    probe = worker.dataflow(build)
    worker.step_while(lambda: not probe.done())
    elapsed = time.perf_counter() - start
    if profiler:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
        print(out.getvalue(), file=sys.stderr)
    return elapsed


def slowest(per_worker: list[list[float]]) -> float:
    """Median over runs of the slowest worker's time."""
    return statistics.median(max(run) for run in zip(*per_worker))


def words_table(n: int = WORDS) -> pa.Table:
    """The wordcount input of every engine, ``w{i % 10007}`` for i below n, as a string column."""
    return pa.table({"word": pa.array([f"w{i % KEYS}" for i in range(n)])}).combine_chunks()


def wordcount(table: pa.Table, workers: int, combine: bool, profile: bool = False,
              repeats: int = REPEATS, cold: list | None = None) -> float:
    """Median seconds (slowest worker) of ``aggregate_batches`` counting ``table``'s words,
    over ``repeats`` runs after one untimed warm-up run in the same worker processes (the
    first run grows the shared-memory rings and loads the compute kernels); the warm-up's
    seconds are appended to ``cold`` if given."""
    words = table.num_rows
    share = -(-words // workers)

    def job(worker):
        mine = table.slice(worker.index * share, share).to_batches(max_chunksize=WORD_BATCH)
        counted = []

        def build(scope):
            return (scope.to_stream(mine)
                    .aggregate_batches("word", {"n": ("count", None)}, combine=combine)
                    .inspect_batch(lambda t, b: counted.append(b.column("n")))
                    .probe())
        runs = [timed(worker, build, profile and i == 2) for i in range(repeats + 1)]
        total = sum(sum(c.to_numpy().tolist()) for c in counted)
        return runs, total
    results = st.execute(job, workers=workers)
    assert sum(total for _, total in results) == (repeats + 1) * words
    if cold is not None:
        cold.append(max(runs[0] for runs, _ in results))
    return slowest([runs[1:] for runs, _ in results])


def counter_baseline(table: pa.Table) -> float:
    words = table.column("word").to_pylist()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        counts = collections.Counter(words)
        runs.append(time.perf_counter() - start)
    assert len(counts) == KEYS
    return statistics.median(runs)


def payload(seed: int, rows: int = ROWS) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    columns: dict[str, np.ndarray] = {"k": rng.integers(0, 1 << 40, rows)}
    for c in range(1, COLUMNS):
        columns[f"c{c}"] = rng.random(rows) if c % 2 else rng.integers(0, 1 << 30, rows)
    return pa.record_batch(columns)


def exchange(keyed: bool, profile: bool = False, rows: int = ROWS,
             batches: int = BATCHES, repeats: int = REPEATS) -> tuple[float, int]:
    """(seconds, payload bytes) of ``batches`` batches of ``rows`` rows per worker crossing an
    exchange: keyed (all-to-all by column k) or each batch whole to the other worker."""
    def job(worker):
        batch = payload(worker.index, rows)
        other = 1 - worker.index

        def build(scope):
            stream = batch_source(scope, batch, batches)
            moved = (stream.exchange(key="k") if keyed
                     else stream.exchange(lambda b: np.full(b.num_rows, other)))
            return moved.probe()
        return [timed(worker, build, profile and i == 1) for i in range(repeats)], batch.nbytes
    results = st.execute(job, workers=2)
    return slowest([runs for runs, _ in results]), batches * sum(n for _, n in results)


def main(quick: bool = False) -> list[Section]:
    """Arrow wordcount (2M words) against Counter and Arrow exchange (8 MiB batches) against
    memcpy: the developer's view of this module (``python -m benchmarks`` reports these
    figures at three sizes in its wordcount and exchange tables)."""
    profile = "--profile" in sys.argv
    table = words_table()
    counter = counter_baseline(table)
    rows = []
    for workers, combine in [(2, True), (2, False), (1, True)]:
        seconds = wordcount(table, workers, combine, profile and workers == 2 and combine)
        rows.append(Row(f"wordcount: aggregate_batches, {workers} worker{'s' * (workers > 1)}, "
                        f"combine={combine}", f"{WORDS / 1e6:g}M words", "M rec/s",
                        WORDS / seconds / 1e6, peers={"Counter": WORDS / counter / 1e6}))
    copy = memcpy_limit(payload(0).nbytes)
    for keyed in (True, False):
        seconds, nbytes = exchange(keyed=keyed, profile=profile and keyed)
        rows.append(Row("Arrow exchange(key='k'), 2 workers" if keyed else
                        "Arrow exchange to the other worker (transport only)",
                        f"{payload(0).nbytes >> 20} MiB batches", "GB/s", nbytes / seconds / 1e9,
                        limits={"memcpy": copy}))
    return [Section("Columnar (Arrow) wordcount and exchange, 2 worker processes", rows, notes=[
        f"wordcount: {WORDS:,} words, {KEYS:,} keys, batches of {WORD_BATCH:,} rows; exchange: "
        f"{BATCHES} batches of {ROWS:,} rows x {COLUMNS} columns per worker; median of {REPEATS}."
    ]).print()]


if __name__ == "__main__":
    main()
