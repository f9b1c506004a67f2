"""What logging costs: the same workloads with logging off, on (a callback that keeps
nothing) and writing files (``log_to_directory``), as ratios against logging off.

    python -m benchmarks.bench_logging [--quick]

- Round latency: empty rounds through 4 chained exchanges (``bench_core.round_latency``),
  1 worker in process and 2 worker processes. Every round schedules every operator, so this
  is logging's worst case: a few events per microsecond of work.
- Map: ``map(lambda x: x + 1)`` over 1M ints in batches of 1k and 10k records, 1 worker.
- Exchange: 4M ints in 10k-record batches sent to worker ``x % 2`` and counted, 2 workers:
  the rate over the slower worker's rounds after its first (untimed, as the processes'
  start-up and first page faults are alike in every mode).
- The progress display: ``st.execute(..., progress=True)`` against ``progress=False`` (the
  workers report their status every second, the launching process redraws every 0.5 s as
  on a terminal), on the round and exchange workloads, run long enough (seconds) for the
  display to draw several times.

"Off" is the product as shipped: the worker's hooks are one ``is None`` check each, two per
scheduled operator. The last table bounds what those checks cost: the time of the checks
beside the time of one scheduling, both measured in this run.
"""
from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
import time
import timeit
from typing import Callable

import sparktimely as st
from sparktimely.logging import log_to_directory

from ._util import Goal, Row, Section, median_seconds
from .bench_core import round_latency

MODES = ("off", "on", "files")
REPEAT = 5
ROUNDS = 2000
RECORDS = 1_000_000


def attach(worker: st.Worker, mode: str) -> None:
    """Turn logging on for ``worker`` as ``mode`` says (files go to ``LOGS.name``)."""
    if mode == "on":
        worker.log_register().insert("timely", lambda time, batch: None)
    elif mode == "files":
        log_to_directory(worker, LOGS.name)


LOGS = tempfile.TemporaryDirectory(prefix="sparktimely-bench-logs-")


def latency(mode: str, workers: int, rounds: int = ROUNDS, progress: bool = False) -> float:
    def job(worker):
        attach(worker, mode)
        return round_latency(worker, 4, rounds)
    if workers == 1:
        return st.execute_directly(job)
    return max(st.execute(job, workers=workers, progress=progress))


def map_rate(mode: str, batch: int) -> float:
    data = list(range(batch))

    def job(worker):
        attach(worker, mode)
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).map(lambda x: x + 1)
                                .probe())
        for round in range(RECORDS // batch):
            input.send_batch(data)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
    return RECORDS / median_seconds(lambda: st.execute_directly(job), 1) / 1e6


def exchange_rate(mode: str, batch: int = 10_000, records: int = RECORDS,
                  progress: bool = False) -> float:
    """M records/s through exchange + count at 2 worker processes: the records over the
    slower worker's time for its rounds after a first, untimed one (the fork, the start-up
    and the first exchange's page faults in fresh processes are the same in every mode, and
    took most of a whole run's ~0.1 s)."""
    def job(worker):
        attach(worker, mode)
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .count().probe())
        data = list(range(worker.index, worker.index + batch))
        rounds = records // batch // worker.peers
        for round in range(rounds + 1):
            if round == 1:
                started = time.perf_counter()
            input.send_batch(data)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
        return time.perf_counter() - started
    return records / max(st.execute(job, workers=2, progress=progress)) / 1e6


def interleaved(measure: Callable[[str], float], best: Callable[[list[float]], float],
                repeat: int = REPEAT, modes: tuple[str, ...] = MODES) -> dict[str, float]:
    """The best of ``repeat`` measurements per mode, taken in turn (off, on, files, off,
    ...): on a shared machine other work only slows a run down, and taking the modes in
    turn lets a change of load affect each alike."""
    values: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(repeat):
        for mode in modes:
            values[mode].append(measure(mode))
    return {mode: best(figures) for mode, figures in values.items()}


def rows_for(figure: str, size: str, unit: str, measure: Callable[[str], float],
             goal_on: float | None) -> list[Row]:
    values = interleaved(measure, min if unit == "us" else max)
    limit = {"logging off": values["off"]}
    goals: Callable[[float | None], list[Goal]] = lambda bound: (
        [] if bound is None else [Goal("<=" if unit == "us" else ">=", bound, "logging off")])
    return [Row(f"{figure}, logging on", size, unit, values["on"], limits=limit,
                goals=goals(goal_on)),
            Row(f"{figure}, logging to files", size, unit, values["files"], limits=limit)]


def overhead_section(quick: bool = False) -> Section:
    rows = rows_for("empty round, 1 worker", "4 ops", "us", lambda m: latency(m, 1), 2.5)
    if not quick:
        rows += rows_for("empty round, 2 worker processes", "4 ops", "us",
                         lambda m: latency(m, 2), None)
    for batch in (10_000,) if quick else (1_000, 10_000):
        rows += rows_for("map, 1 worker", f"{batch:,}-record batches", "M rec/s",
                         lambda m: map_rate(m, batch), 0.9 if batch >= 10_000 else None)
    if not quick:
        rows += rows_for("exchange + count, 2 worker processes", "10,000-record batches",
                         "M rec/s", lambda m: exchange_rate(m, records=4 * RECORDS), 0.9)
    return Section("Logging overhead (logging on, and to files, against logging off)", rows,
                   notes=[
        f"each figure the best of {REPEAT} runs, the three modes taken in turn; "
        "'on' registers a 'timely' callback that keeps nothing, 'files' is "
        "log_to_directory (a file per worker, flushed every step).",
        "rounds: median of 2,000 empty rounds through 4 chained exchanges (the worst case: "
        "every round schedules every operator); 2 workers: the slower worker's median."],
        key="logging")


class _Terminal(io.StringIO):
    """Where the display draws in this benchmark: a terminal to it (redrawn every 0.5 s)."""

    def isatty(self) -> bool:
        return True


def displayed(measure: Callable[[bool], float]) -> Callable[[str], float]:
    """``measure(progress)`` as a mode's measurement: "display" draws on a terminal."""
    def run(mode: str) -> float:
        if mode == "off":
            return measure(False)
        with contextlib.redirect_stderr(_Terminal()):
            return measure(True)
    return run


def display_section(quick: bool = False) -> Section:
    """The progress display, on against off, same run."""
    scale = 1 if quick else 10
    rows = []
    for figure, size, unit, measure in [
            ("empty round, 2 worker processes, progress display", "4 ops", "us",
             lambda progress: latency("off", 2, ROUNDS * scale, progress)),
            ("exchange + count, 2 worker processes, progress display",
             f"{RECORDS * scale:,} records", "M rec/s",
             lambda progress: exchange_rate("off", 10_000, RECORDS * scale, progress))]:
        values = interleaved(displayed(measure), min if unit == "us" else max,
                             modes=("off", "display"))
        rows.append(Row(figure, size, unit, values["display"],
                        limits={"progress off": values["off"]}))
    return Section("Progress display overhead (st.execute progress=True against off)", rows,
                   notes=[
        f"each figure the best of {REPEAT} runs, the two modes taken in turn; with the "
        "display each worker has a 'timely' log callback that counts records and reports "
        "its status every second over TCP, and the launching process redraws every 0.5 s "
        "(as on a terminal).",
        f"rounds: median of {ROUNDS * scale:,} empty rounds through 4 chained exchanges, the "
        f"slower worker's; exchange: {RECORDS * scale:,} ints in 10,000-record batches."],
        key="display")


def off_path_section() -> Section:
    """The cost of logging off: the checks, against one scheduling."""
    log = None
    checks = min(timeit.repeat("if log is not None: pass\nif log is not None: pass",
                               globals={"log": log}, number=1_000_000, repeat=5))
    scheduling = statistics.median(latency("off", 1) for _ in range(3)) / 5   # 4 ops, probe
    return Section("Logging off: what the hooks cost", [
        Row("two 'is None' checks per scheduled operator", "per scheduling", "us", checks,
            limits={"one scheduling (empty round / 5 operators)": scheduling})], notes=[
        "checks: timeit of the two checks, best of 5; scheduling: an empty round's median "
        "time over the 5 operators it schedules, same run. The other hooks (messages, "
        "progress, parking, steps) run once per batch, message or step, not per record."],
        key="logging-off")


def main(quick: bool = False) -> list[Section]:
    return [overhead_section(quick).print(), off_path_section().print(),
            display_section(quick).print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
