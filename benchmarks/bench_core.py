"""Core engine figures: round latency, map throughput, exchange throughput and memory.

    python -m benchmarks.bench_core

Each figure is the median of several runs, printed beside its limit measured in the same
run: a multiprocess Pipe round trip for round latency, a list comprehension for map.
"""
from __future__ import annotations

import statistics
import time

import multiprocess
import psutil

import sparktimely as st

from ._util import median_seconds, print_table

ROUNDS = 3000


def round_latency(worker: st.Worker, rounds: int = ROUNDS) -> float:
    """Median microseconds of an empty round: advance_to, then step until the probe passes."""
    input = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
    latencies = []
    for round in range(1, rounds + 1):
        start = time.perf_counter()
        input.advance_to(round)
        while probe.less_than(round):
            worker.step_or_park(None)
        latencies.append(time.perf_counter() - start)
    input.close()
    worker.run()
    return statistics.median(latencies) * 1e6


def pipe_round_trip(count: int = ROUNDS) -> float:
    """Median microseconds of a multiprocess Pipe ping-pong between two processes."""
    here, there = multiprocess.Pipe()

    def echo(conn):
        while (message := conn.recv()) is not None:
            conn.send(message)
    child = multiprocess.Process(target=echo, args=(there,), daemon=True)
    child.start()
    latencies = []
    for i in range(count):
        start = time.perf_counter()
        here.send(i)
        here.recv()
        latencies.append(time.perf_counter() - start)
    here.send(None)
    child.join(5)
    return statistics.median(latencies) * 1e6


def map_throughput(records: int = 2_000_000, batch: int = 10_000) -> tuple[float, float]:
    """Million records/s through ``map`` in ``batch``-sized batches, and a list comprehension."""
    data = list(range(batch))

    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).map(lambda x: x + 1).probe())
        for round in range(records // batch):
            input.send_batch(data)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
    engine = records / median_seconds(lambda: st.execute_directly(job), 3) / 1e6
    def comprehension_only():
        f = lambda x: x + 1  # noqa: E731  (the same function call per record as map)
        for _ in range(records // batch):
            [f(x) for x in data]
    comprehension = records / median_seconds(comprehension_only, 3) / 1e6
    return engine, comprehension


def exchange_throughput(records: int = 2_000_000, batch: int = 10_000) -> tuple[float, float]:
    """Million records/s exchanged between 2 workers, and the largest worker RSS in MB."""
    def job(worker):
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x).probe())
        data = list(range(batch))          # half of each batch goes to the other worker
        start = time.perf_counter()
        for round in range(records // batch // worker.peers):
            input.send_batch(data)
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round))   # keep one round in flight
        input.close()
        worker.run()
        return time.perf_counter() - start, psutil.Process().memory_info().rss / 1e6
    runs = [st.execute(job, workers=2) for _ in range(3)]
    seconds = statistics.median(max(t for t, _ in run) for run in runs)
    rss = max(r for run in runs for _, r in run)
    return records / seconds / 1e6, rss


def main() -> list[tuple]:
    one = statistics.median(st.execute_directly(round_latency) for _ in range(3))
    one_process = statistics.median(st.execute(round_latency)[0] for _ in range(3))
    two = statistics.median(max(st.execute(round_latency, workers=2)) for _ in range(3))
    pipe = pipe_round_trip()
    engine_map, comprehension = map_throughput()
    exchange, rss = exchange_throughput()
    rows = [
        ("empty round, 1 worker (in process)", one, "us", "<= 20", f"Pipe round trip {pipe:.1f} us"),
        ("empty round, 1 worker process", one_process, "us", "<= 20", ""),
        ("empty round, 2 worker processes", two, "us", "<= 50", f"Pipe round trip {pipe:.1f} us"),
        ("map, 10k-record batches", engine_map, "M rec/s", ">= 5", f"list comprehension {comprehension:.1f} M/s"),
        ("exchange 2M ints, 2 workers", exchange, "M rec/s", ">= 2", "bytewax wordcount 0.2 M/s"),
        ("exchange: largest worker RSS", rss, "MB", "< 150", ""),
    ]
    print_table("Core engine (medians)", rows, ("figure", "sparktimely", "unit", "goal", "limit / peer, same run"))
    return rows


if __name__ == "__main__":
    main()
