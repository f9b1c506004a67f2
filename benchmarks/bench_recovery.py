"""Epoch checkpoints: what they cost while running, how fast a run resumes, how big they are.

    python -m benchmarks.bench_recovery [--quick]

- Throughput of the columnar running wordcount of examples/recoverable_wordcount (Parquet
  files of ``w{i % 10007}`` words in, ``aggregate_batches`` per epoch, running totals in an
  Arrow table, Parquet files out) on 2 worker processes: without a checkpoint directory, with
  a checkpoint every 10 epochs and every epoch. Epochs are sized so that one is about 0.1 s of
  work without checkpoints: every 10 epochs is one checkpoint per second of work (the goal:
  at most 10% slower), every epoch ten per second. The baseline is measured in the same run.
- Time to resume against state size: a run that built the running totals of N distinct words
  (an Arrow table, ``scope.recoverable`` Table form) or ``state_machine`` totals of N keys (a
  dict; its str keys and int values are stored as Arrow columns), checkpointed at
  completion, is run again on the same directory. The time ``worker.dataflow`` takes to
  resume (building the dataflow, agreeing with the other worker, reading, verifying and
  restoring; the fresh start's time for comparison) gives two rates: the state in memory
  restored per second (the goal: at least 200 MB/s) and the checkpoint bytes read per
  second. Rebuilding a dict costs Python a few hundred ns per key whatever its size on disk,
  so for small keys the second rate is the lower one. The files are in the page cache (just
  written).
- Checkpoint size against state size: bytes of the state files against the state in memory
  (the Arrow table's buffers; for a dict, Python's ``sys.getsizeof`` of the dict, its keys and
  values).
- The same three for a differential job: the Arrow word count ``count(key="word")`` (its
  arrangement and output trace are what a checkpoint holds) instead of the running totals;
  resume against the keys of those traces (their state in memory: the Arrow buffers of the
  traces' batches on every worker).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import sparktimely as st
import sparktimely.differential as dd
from examples.recoverable_wordcount import add_counts, running_totals
from sparktimely.io import DirectorySink, FileSource, enable_checkpoints

from ._util import Goal, Row, Section

KEYS = 10_007
WORKERS = 2
REPEATS = 7
EPOCH_SECONDS = 0.1


def write_words(folder: str, files: int, words_per_file: int) -> None:
    """``files`` Parquet files of ``w{i % KEYS}`` words, named so that each worker reads as
    many (partition p goes to worker ``stable_hash(p) % WORKERS``)."""
    os.makedirs(folder, exist_ok=True)
    table = pa.table({"word": pa.array([f"w{i % KEYS}" for i in range(words_per_file)])})
    per_worker = [0] * WORKERS
    name, n = 0, 0
    while n < files:
        path = os.path.join(folder, f"words-{name}.parquet")
        owner = st.stable_hash(path) % WORKERS
        if per_worker[owner] < files // WORKERS:
            pq.write_table(table, path, row_group_size=1 << 16)
            per_worker[owner] += 1
            n += 1
        name += 1


def differential_counts(words: st.Stream) -> dd.Collection:
    """``count(key="word")`` of the Arrow batches of ``words``, each row inserting its word."""
    def with_diff(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.append_column("diff", pa.array(np.ones(batch.num_rows, np.int64)))
    return dd.as_collection(words.map_batches(with_diff)).count(key="word")


def wordcount_seconds(folder: str, out: str, checkpoint: str | None, every: int,
                      batches_per_epoch: int, differential: bool = False) -> tuple[float, int]:
    """Seconds (slower worker) of the running wordcount over ``folder``'s files (the
    differential one with ``differential``), and how many epochs it had."""
    def job(worker):
        if checkpoint:
            enable_checkpoints(worker, checkpoint, every)
        epochs = []

        def build(scope):
            words = scope.input_from_source(FileSource(folder, batch_rows=1 << 16,
                                                       batches_per_epoch=batches_per_epoch),
                                            "words")
            if differential:
                totals = differential_counts(words).inner
            else:
                counts = words.aggregate_batches("word", {"n": ("count", None)})
                totals = running_totals(counts)
            totals = totals.inspect_batch(lambda t, b: epochs.append(t))
            totals.output_to(DirectorySink(out), "totals")
            return totals.probe()
        start = time.perf_counter()
        probe = worker.dataflow(build, name="wordcount")
        worker.step_while(lambda: not probe.done())
        worker.run()
        return time.perf_counter() - start, len(set(epochs))
    results = st.execute(job, workers=WORKERS)
    return max(seconds for seconds, _ in results), max(n for _, n in results)


def throughput(quick: bool, differential: bool = False) -> list[Row]:
    files, words_per_file = (4, 1 << 20) if quick else (8, 5 << 20)
    words = files * words_per_file
    base = tempfile.mkdtemp(prefix="bench-recovery-")
    try:
        folder = os.path.join(base, "words")
        write_words(folder, files, words_per_file)
        batches = -(-words_per_file // (1 << 16))

        def seconds(every: int | None, per_epoch: int, repeat: int) -> tuple[float, int]:
            out = os.path.join(base, f"out-{every}-{repeat}")
            checkpoint = os.path.join(base, f"ck-{every}-{repeat}") if every else None
            try:
                return wordcount_seconds(folder, out, checkpoint, every or 1, per_epoch,
                                         differential)
            finally:
                shutil.rmtree(out, ignore_errors=True)
        per_epoch = max(1, batches // 40)                       # calibrate the epoch size
        probe, probed_epochs = seconds(None, per_epoch, -1)
        per_epoch = max(1, round(per_epoch * EPOCH_SECONDS * probed_epochs / probe))
        configurations = (None, 10, 1)
        times: dict = {every: [] for every in configurations}
        epochs = 0
        for repeat in range(REPEATS):          # interleaved, so that drift hits all alike
            for every in configurations:
                elapsed, epochs = seconds(every, per_epoch, repeat)
                times[every].append(elapsed)
        plain = min(times[None])
        rows = []
        size = f"{words / 1e6:g}M words, {epochs} epochs"
        for every in configurations:
            best = min(times[every])
            label = ("no checkpoint directory" if every is None else
                     f"checkpoint every {every} epoch{'s' * (every > 1)} "
                     f"({epochs / plain / every:.2g} per second of work)")
            goals = [Goal(">=", 0.9, "without checkpoints")] if every == 10 else []
            job = "differential count(key=...)" if differential else "columnar running wordcount"
            rows.append(Row(f"{job}, {WORKERS} workers: {label}", size,
                            "M rec/s", words / best / 1e6,
                            limits={"without checkpoints": words / plain / 1e6}, goals=goals))
        return rows
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _newest_files(directory: str) -> dict[str, dict]:
    """The state files (path: size, digest, ...) of the newest checkpoint in ``directory``."""
    commits = os.path.join(directory, "resume", "commits")
    with open(os.path.join(commits, max(os.listdir(commits)))) as record:
        return json.load(record)["files"]


def _state_bytes(directory: str) -> int:
    """The bytes of the state files of the newest checkpoint in ``directory``."""
    return sum(meta["size"] for meta in _newest_files(directory).values())


def resume(keys: int, form: str) -> tuple[float, float, int, int]:
    """(seconds to resume, seconds of a fresh start, checkpoint state bytes, state bytes in
    memory) for running totals of ``keys`` distinct words kept as an Arrow table or a dict."""
    base = tempfile.mkdtemp(prefix="bench-resume-")
    try:
        source = os.path.join(base, "words.parquet")
        pq.write_table(pa.table({"word": pc.binary_join_element_wise(
            "w", pc.cast(pa.array(range(keys)), pa.string()), "")}), source)

        def job(worker, directory):
            enable_checkpoints(worker, directory)
            memory = []

            def build(scope):
                words = scope.input_from_source(FileSource([source], batch_rows=1 << 20), "words")
                if form == "trace":
                    differential_counts(words).inner.inspect_batch(lambda t, b: None)
                elif form == "table":
                    counts = words.aggregate_batches("word", {"n": ("count", None)})
                    totals = running_totals(counts)
                    totals.inspect_batch(lambda t, b: memory.append(b.nbytes))
                else:
                    def fold(key, value, total):
                        return False, (), (total or 0) + value
                    pairs = words.unary(st.Pipeline, "Rows", _rows).state_machine(fold)
                    pairs.inspect_batch(lambda t, b: None)
            start = time.perf_counter()
            worker.dataflow(build, name="resume")
            built = time.perf_counter() - start
            worker.run()
            return built, memory
        fresh = os.path.join(base, "fresh")
        runs = st.execute(lambda w: job(w, fresh), workers=WORKERS)
        state = _state_bytes(fresh)
        memory = _trace_memory(fresh) if form == "trace" else _memory(keys, form)
        resumed = []
        for r in range(REPEATS):
            copy = os.path.join(base, f"copy-{r}")
            shutil.copytree(fresh, copy)
            runs = st.execute(lambda w: job(w, copy), workers=WORKERS)
            resumed.append(max(built for built, _ in runs))
        empty = [max(b for b, _ in st.execute(lambda w: job(w, os.path.join(base, f"e{r}")),
                                              workers=WORKERS)) for r in range(REPEATS)]
        return min(resumed), min(empty), state, memory
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _trace_memory(directory: str) -> int:
    """The bytes in memory of the Arrow tables the traces of the newest checkpoint in
    ``directory`` restore from."""
    return sum(pa.ipc.open_file(pa.memory_map(os.path.join(directory, "resume", path)))
               .read_all().nbytes for path in _newest_files(directory)
               if "Arrange" in path or "Count" in path)


def _rows(capability, info):
    capability.drop()

    def logic(input, output):
        for cap, batch in input:
            output.give_at(cap, [(word, 1) for word in batch.column("word").to_pylist()])
    return logic


def _memory(keys: int, form: str) -> int:
    words = [f"w{i}" for i in range(keys)]
    if form == "table":
        totals, _ = add_counts(pa.table({"word": pa.array([], pa.string()),
                                         "total": pa.array([], pa.int64()),
                                         "route": pa.array([], pa.uint64())}),
                               pa.table({"word": words, "n": [1] * keys}))
        return totals.nbytes
    state = dict.fromkeys(words, 1)
    return sys.getsizeof(state) + sum(sys.getsizeof(w) for w in words) + sys.getsizeof(1) * keys


def restore(quick: bool) -> list[Row]:
    rows = []
    cases = [("table", 100_000), ("table", 1_000_000), ("dict", 100_000),
             ("trace", 100_000), ("trace", 1_000_000)] if quick else \
        [("table", 100_000), ("table", 1_000_000), ("table", 10_000_000),
         ("dict", 100_000), ("dict", 1_000_000), ("trace", 100_000), ("trace", 1_000_000)]
    for form, keys in cases:
        resumed, fresh, state, memory = resume(keys, form)
        what = {"table": "running totals as an Arrow table",
                "dict": "state_machine totals as a dict",
                "trace": "differential count(key=...) traces"}[form]
        size = f"{keys:,} keys, {state / 1e6:.3g} MB"
        rows.append(Row(f"resume {what}: state in memory restored per second", size, "MB/s",
                        memory / resumed / 1e6,
                        goals=[Goal(">=", 200)] if keys >= 1_000_000 else []))
        rows.append(Row(f"resume {what}: checkpoint bytes restored per second", size, "MB/s",
                        state / resumed / 1e6))
        rows.append(Row(f"resume {what}: time to resume", size, "s", resumed,
                        limits={"fresh start": fresh}))
        rows.append(Row(f"checkpoint size of {what}", size, "MB", state / 1e6,
                        limits={"state in memory": memory / 1e6}))
    return rows


def main(quick: bool = False) -> list[Section]:
    sections = [
        Section("Epoch checkpoints: throughput of the columnar running wordcount, 2 worker "
                "processes", throughput(quick), notes=[
                    "Parquet in (64K-row batches), aggregate_batches per epoch, running totals "
                    "in an Arrow table, a Parquet file per worker and epoch out; epochs sized "
                    f"to ~{EPOCH_SECONDS} s of work without checkpoints; best of {REPEATS} runs, "
                    "the three modes taken in turn (the machine is shared), "
                    "slower worker, from building the dataflow to its completion (the last "
                    "checkpoint included)."], key="recovery").print(),
        Section("Epoch checkpoints: throughput of the differential word count, 2 worker "
                "processes", throughput(quick, differential=True), notes=[
                    "The same input and epochs; a diff column of ones added per batch, "
                    "count(key=\"word\"), its updates as Parquet files out. With a checkpoint "
                    "directory it is an arrangement and its count (an arrangement and an "
                    "output trace per worker, both in every checkpoint); without one, a single "
                    "operator that arranges nothing (count_total): the limit is the faster "
                    "program."]).print(),
        Section("Epoch checkpoints: resume time and checkpoint size against state size, 2 "
                "worker processes", restore(quick), notes=[
                    "restored per second: the state's bytes (in memory, or in the checkpoint) over "
                    "the time worker.dataflow takes to resume, slower worker (the goal is for "
                    "states of 1M keys and more: below, the ~10 ms of building and agreeing "
                    "dominate), "
                    f"best of {REPEATS}; the XXH3-128 digest of every file is checked on reading."]).print(),
    ]
    return sections


if __name__ == "__main__":
    main("--quick" in sys.argv)
