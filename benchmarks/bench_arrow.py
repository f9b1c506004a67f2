"""Benchmark of columnar (Arrow) streams on 2 worker processes, with baselines from the same run.

Run: .venv/bin/python benchmarks/bench_arrow.py [--profile]
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
``--profile`` prints (to stderr) worker 0's cProfile of its second wordcount run (2 workers,
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


def words_table() -> pa.Table:
    keys = pa.array([f"w{i}" for i in range(KEYS)])
    picks = np.random.default_rng(0).integers(0, KEYS, WORDS)
    return pa.table({"word": keys.take(picks)}).combine_chunks()


def wordcount(table: pa.Table, workers: int, combine: bool, profile: bool = False) -> float:
    share = WORDS // workers

    def job(worker):
        mine = table.slice(worker.index * share, share).to_batches(max_chunksize=WORD_BATCH)
        counted = []

        def build(scope):
            return (scope.to_stream(mine)
                    .aggregate_batches("word", {"n": ("count", None)}, combine=combine)
                    .inspect_batch(lambda t, b: counted.append(b.column("n")))
                    .probe())
        runs = [timed(worker, build, profile and i == 1) for i in range(REPEATS)]
        total = sum(sum(c.to_numpy().tolist()) for c in counted)
        return runs, total
    results = st.execute(job, workers=workers)
    assert sum(total for _, total in results) == REPEATS * WORDS
    return slowest([runs for runs, _ in results])


def counter_baseline(table: pa.Table) -> float:
    words = table.column("word").to_pylist()
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        counts = collections.Counter(words)
        runs.append(time.perf_counter() - start)
    assert len(counts) == KEYS
    return statistics.median(runs)


def payload(seed: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    columns = {"k": rng.integers(0, 1 << 40, ROWS)}
    for c in range(1, COLUMNS):
        columns[f"c{c}"] = rng.random(ROWS) if c % 2 else rng.integers(0, 1 << 30, ROWS)
    return pa.record_batch(columns)


def exchange(keyed: bool, profile: bool = False) -> tuple[float, int]:
    """(seconds, payload bytes) of BATCHES batches per worker crossing an exchange."""
    def job(worker):
        batch = payload(worker.index)
        other = 1 - worker.index

        def build(scope):
            def ctor(cap, info):                    # one batch per scheduling, as a live source
                again = scope.activator_for(info.address).activate
                sent = 0

                def logic(output):
                    nonlocal sent
                    output.give_at(cap, batch)
                    sent += 1
                    if sent < BATCHES:
                        again()
                    else:
                        cap.drop()
                return logic
            stream = st.source(scope, "Batches", ctor)
            moved = (stream.exchange(key="k") if keyed
                     else stream.exchange(lambda b: np.full(b.num_rows, other)))
            return moved.probe()
        return [timed(worker, build, profile and i == 1) for i in range(REPEATS)], batch.nbytes
    results = st.execute(job, workers=2)
    return slowest([runs for runs, _ in results]), BATCHES * sum(n for _, n in results)


def memcpy(nbytes: int) -> float:
    """Seconds numpy takes to copy ``nbytes`` in pieces of one batch's size, on one thread."""
    source = np.ones(ROWS * COLUMNS, np.int64)
    target = np.empty_like(source)
    pieces = nbytes // source.nbytes
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(pieces):
            np.copyto(target, source)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    profile = "--profile" in sys.argv
    table = words_table()
    rows = []
    counter = counter_baseline(table)
    rows.append(("wordcount: collections.Counter, 1 thread", WORDS / counter / 1e6, "M rec/s", ""))
    for workers, combine in [(2, True), (2, False), (1, True)]:
        seconds = wordcount(table, workers, combine, profile and workers == 2 and combine)
        rows.append((f"wordcount: aggregate_batches, {workers} worker{'s' * (workers > 1)}, "
                     f"combine={combine}",
                     WORDS / seconds / 1e6, "M rec/s", f"{counter / seconds:.1f}x Counter"))
    seconds, nbytes = exchange(keyed=True, profile=profile)
    copy = memcpy(nbytes)
    rows.append(("exchange(key='k'), 2 workers, all-to-all", nbytes / seconds / 1e9, "GB/s",
                 f"{copy / seconds:.2f}x memcpy"))
    seconds, nbytes = exchange(keyed=False)
    rows.append(("exchange to the other worker (transport only)", nbytes / seconds / 1e9, "GB/s",
                 f"{copy / seconds:.2f}x memcpy"))
    rows.append(("numpy memcpy, 1 thread, same bytes", nbytes / copy / 1e9, "GB/s", ""))
    print(f"{'benchmark':<58} {'figure':>8}  {'unit':<8} comparison")
    for name, figure, unit, note in rows:
        print(f"{name:<58} {figure:8.2f}  {unit:<8} {note}")
    print(f"(wordcount: {WORDS:,} words, {KEYS:,} keys, batches of {WORD_BATCH:,} rows; exchange: "
          f"{BATCHES} batches of {ROWS:,} rows x {COLUMNS} columns per worker, "
          f"{nbytes / 2**30:.1f} GiB in all; median of {REPEATS})")


if __name__ == "__main__":
    main()
