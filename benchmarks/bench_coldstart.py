"""Cold start: a job's first exchange in freshly forked workers against the same exchange
warm, in the same workers. Every figure is a ratio of two timings taken in one job.

    python -m benchmarks.bench_coldstart [--quick] [--runs N]

- The job: 2 workers (``execute``); each first passes a barrier dataflow (every worker forked,
  connected and through its first messages, as a Spark stage's tasks are after their
  ``allGather``), then runs the same dataflow ``RUNS`` times, each behind a barrier: the
  natural keyed aggregation ``to_stream(half).exchange(key="word").map_batches(group_by)``
  over 400k words (10,007 keys, 65,536-row batches, each worker feeding half), and the
  ``exchange`` alone. A run's time is the slowest worker's, from building the dataflow to
  its probe being done.
- first / warm: the first run (ms, medians over jobs) against the median of the later ones
  in the same job ("warm"); the notes give the ratio per job (median and spread).
- Three kinds of job: "a later job of the program" runs in this process after a job before
  it (what a long-lived driver, or a Spark executor's reused Python worker, forks from), its
  words made in this process before the fork; "... reading its input" makes its words in
  each worker, as a job that reads its input does (a Spark stage gets its batches from
  Spark), so its workers have used memory before their first exchange; "a program's first
  job" is a new interpreter's first ``execute`` (every module the job uses, e.g. pyarrow's
  group_by engine, is loaded in its workers).
- Each figure is the median over ``--runs`` jobs (default 7); the notes give the spread, and
  the same ratio in CPU time (the slower worker's ``thread_time``), which the other load on a
  shared machine disturbs less.
- A small job, whole: ``execute`` of a dataflow that exchanges ten records, from the call to
  its result, at 1, 2 and 3 workers (median of ``SMALL_JOBS`` jobs, the worker counts taking
  turns); beside it the floor of as many processes: forking them from this process and
  joining them, each doing nothing.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import multiprocess
import psutil

import sparktimely as st

from ._util import Goal, Row, Section
from .bench_arrow import KEYS, WORD_BATCH, barrier, words_table
from .bench_scaling import group_count

WORDS = 400_000
RUNS = 4                 # the dataflow's runs in one job: the first, then the warm ones
VARIANTS = ("natural", "exchange")


def timed(worker, build) -> tuple[float, float]:
    """Seconds and CPU seconds this worker takes to run the dataflow ``build`` to completion,
    after a barrier."""
    barrier(worker)
    started, cpu = time.perf_counter(), time.thread_time()
    probe = worker.dataflow(build)
    worker.step_while(lambda: not probe.done())
    return time.perf_counter() - started, time.thread_time() - cpu


def job_times(words: int, variant: str, workers: int = 2,
              reading: bool = False) -> list[float]:
    """[first, warm] seconds of ``variant`` in one new job of ``workers`` workers, then the
    same in CPU seconds (the slower worker's in each run). The words are made here, or by
    each worker (``reading``)."""
    words_here = None if reading else words_table(words)

    def job(worker):
        table = words_table(words) if words_here is None else words_here
        share = -(-table.num_rows // worker.peers)
        mine = table.slice(worker.index * share, share).to_batches(max_chunksize=WORD_BATCH)

        def build(scope):
            stream = scope.to_stream(mine).exchange(key="word")
            if variant == "natural":
                stream = stream.map_batches(group_count)
            return stream.probe()
        return [timed(worker, build) for _ in range(RUNS)]
    runs = list(zip(*st.execute(job, workers=workers)))
    wall, cpu = ([max(t[i] for t in run) for run in runs] for i in (0, 1))
    return [wall[0], statistics.median(wall[1:]), cpu[0], statistics.median(cpu[1:])]


def reading_job(words: int, variant: str) -> list[float]:
    """``job_times`` of a job whose workers make their input."""
    return job_times(words, variant, reading=True)


def first_job(words: int, variant: str) -> list[float]:
    """``job_times`` in a new interpreter, as its first job."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_coldstart", "--child",
                          variant, str(words)], capture_output=True, text=True, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if out.returncode != 0:
        raise RuntimeError(f"the first-job child failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


SMALL_JOBS = 30


def small_job(worker) -> None:
    probe = worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x)
                            .probe())
    worker.step_while(lambda: not probe.done())


def bare_processes(count: int) -> None:
    """Fork ``count`` processes that do nothing, as ``execute`` forks its workers, and join
    them."""
    context = multiprocess.get_context("fork")
    processes = [context.Process(target=int, daemon=True) for _ in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()


def small_jobs(jobs: int) -> dict[str, list[float]]:
    """Seconds of ``jobs`` small jobs (``execute`` from call to result) and of as many bare
    processes, per worker count, the counts taking turns."""
    times: dict[str, list[float]] = {}
    for _ in range(jobs):
        for workers in (1, 2, 3):
            started = time.perf_counter()
            st.execute(small_job, workers=workers)
            forked = time.perf_counter()
            bare_processes(workers)
            times.setdefault(f"job {workers}", []).append(forked - started)
            times.setdefault(f"bare {workers}", []).append(time.perf_counter() - forked)
    return times


def small_job_section(quick: bool) -> Section:
    times = small_jobs(SMALL_JOBS // 3 if quick else SMALL_JOBS)
    ms = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    rows = [Row("a small job (10 records exchanged), execute() to its result",
                f"{workers} worker" + ("s" if workers > 1 else ""), "ms", ms[f"job {workers}"],
                limits={"as many bare processes": ms[f"bare {workers}"], "1 worker": ms["job 1"]})
            for workers in (1, 2, 3)]
    return Section("A small job from execute() to its result", rows, notes=[
        f"median of {len(times['job 1'])} jobs per worker count, the counts taking turns; "
        "limit: forking as many processes from this one (multiprocess's fork context, as "
        "execute forks its workers) and joining them, each doing nothing: the floor of a job "
        "whose workers are processes forked from a program of this size "
        f"({psutil.Process().memory_info().rss >> 20} MB resident)."], key="smalljob").print()


def main(quick: bool = False, runs: int = 7) -> list[Section]:
    runs = 2 if quick else runs
    words = WORDS // 4 if quick else WORDS
    figures: dict[str, list[list[float]]] = {}
    job_times(words // 10, "natural")                # this program's modules: loaded once
    for run in range(runs):
        print(f"run {run + 1} of {runs} (load average {os.getloadavg()[0]:.2f})", flush=True)
        for variant in VARIANTS:
            for kind, measure in KINDS.items():
                first, warm, first_cpu, warm_cpu = times = measure(words, variant)
                figures.setdefault(f"{variant} {kind}", []).append(times)
                print(f"  {variant}, {kind} job: first {first * 1e3:.1f} ms, warm "
                      f"{warm * 1e3:.1f} ms, {first / warm:.2f}x; CPU {first_cpu * 1e3:.1f} "
                      f"and {warm_cpu * 1e3:.1f} ms, {first_cpu / warm_cpu:.2f}x", flush=True)
    size = f"{words / 1e3:g}k words, {KEYS:,} keys, 2 workers"
    rows, spread = [], []
    names = {"natural": "exchange(key).map_batches(group_by)", "exchange": "exchange(key) alone"}
    kinds = {"later": "a later job of the program",
             "reading": "a later job of the program reading its input",
             "first": "a program's first job"}
    for variant in VARIANTS:
        for kind in KINDS:
            jobs = figures[f"{variant} {kind}"]
            ratios = [t[0] / t[1] for t in jobs]
            cpu = [t[2] / t[3] for t in jobs]
            first = statistics.median(t[0] for t in jobs) * 1e3
            warm = statistics.median(t[1] for t in jobs) * 1e3
            rows.append(Row(f"first exchange in fresh workers, {names[variant]}, "
                            f"{kinds[kind]}", size, "ms", first, limits={"warm": warm},
                            goals=[Goal("<=", 1.5, "warm")] if kind == "later" else []))
            spread.append(f"{names[variant]}, {kinds[kind]}: first / warm per job "
                          f"{statistics.median(ratios):.2f}x (median), "
                          f"{min(ratios):.2f}-{max(ratios):.2f}; in CPU time "
                          f"{statistics.median(cpu):.2f}x, {min(cpu):.2f}-{max(cpu):.2f}")
    return [Section("Cold start: the first exchange in fresh workers against the same "
                    "exchange warm", rows, notes=[
                        f"median of {runs} jobs each; in each job a barrier, then {RUNS} runs "
                        "of the dataflow (each behind a barrier): the first against the "
                        "median of the others, slowest worker. Load average (1 min) at the "
                        f"end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores.",
                        "per figure: " + "; ".join(spread)], key="coldstart").print(),
            small_job_section(quick)]


KINDS = {"later": job_times, "reading": reading_job, "first": first_job}


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--child" in args:
        at = args.index("--child")
        print(json.dumps(job_times(int(args[at + 2]), args[at + 1])))
    else:
        main(quick="--quick" in args,
             runs=int(args[args.index("--runs") + 1]) if "--runs" in args else 7)
