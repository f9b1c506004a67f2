"""Core engine figures: round latency and map throughput, each at three sizes.

    python -m benchmarks.bench_core [--quick]

- Round latency: one empty round is ``advance_to`` and then stepping until the probe passes.
  The size axis is the number of ``exchange`` operators chained between the input and the
  probe (1, 4, 16): each one is a progress-tracked operator with a channel between the
  workers, so the growth shows what every extra operator costs a round. The limit is a
  ``multiprocess.Pipe`` round trip between two processes, measured in the same run: a round
  on 2 workers needs at least one message each way.
- Map: a ``map(lambda x: x + 1)`` over 2M ints given in batches of 1k, 10k and 100k records;
  the limit is a list comprehension calling the same kind of function per record.

Each figure is the median of several runs.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time

import multiprocess

import sparktimely as st

from ._util import Goal, Row, Section, median_seconds, timed_rounds

ROUNDS = 3000
CHAINS = (1, 4, 16)
MAP_RECORDS, MAP_BATCHES = 2_000_000, (1_000, 10_000, 100_000)


def round_latency(worker: st.Worker, operators: int = 1, rounds: int = ROUNDS) -> float:
    """Median microseconds of an empty round through ``operators`` chained exchanges."""
    input = st.InputHandle()

    def build(scope):
        stream = scope.input_from(input)
        for _ in range(operators):
            stream = stream.exchange(lambda x: x)
        return stream.probe()
    probe = worker.dataflow(build)
    latencies = timed_rounds(worker, input, probe, rounds)
    input.close()
    worker.run()
    return statistics.median(latencies[rounds // 10:]) * 1e6


@contextlib.contextmanager
def pipe_echo():
    """A Pipe end whose other end, in a child process, sends back whatever it receives."""
    here, there = multiprocess.Pipe()

    def echo(conn):
        while (message := conn.recv()) is not None:
            conn.send(message)
    child = multiprocess.Process(target=echo, args=(there,), daemon=True)
    child.start()
    try:
        yield here
    finally:
        here.send(None)
        child.join(5)


def pipe_round_trip(count: int = ROUNDS) -> float:
    """Median microseconds of a multiprocess Pipe ping-pong between two processes."""
    latencies = []
    with pipe_echo() as here:
        for i in range(count):
            start = time.perf_counter()
            here.send(i)
            here.recv()
            latencies.append(time.perf_counter() - start)
    return statistics.median(latencies[count // 10:]) * 1e6


def map_throughput(batch: int, records: int = MAP_RECORDS) -> tuple[float, float]:
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


def latency_section(quick: bool = False) -> Section:
    pipe = statistics.median(pipe_round_trip() for _ in range(3))
    ones, twos = [], []
    for operators in CHAINS[:1] if quick else CHAINS:
        one = statistics.median(st.execute_directly(lambda w: round_latency(w, operators))
                                for _ in range(3))
        two = statistics.median(max(st.execute(lambda w: round_latency(w, operators), workers=2))
                                for _ in range(3))
        size = f"{operators} op{'s' * (operators > 1)}"
        ones.append(Row("empty round, 1 worker (in process)", size, "us", one,
                        limits={"Pipe round trip": pipe},
                        goals=[Goal("<=", 20)] if operators == 1 else []))
        twos.append(Row("empty round, 2 worker processes", size, "us", two,
                        limits={"Pipe round trip": pipe},
                        goals=[Goal("<=", 50)] if operators == 1 else []))
    return Section("Round latency (median us per empty round)", ones + twos, notes=[
        "size = exchange operators chained between input and probe; "
        f"median of {ROUNDS} rounds (first 10% dropped), median of 3 runs; "
        "2 workers: the slower worker's median.",
        "limit: multiprocess.Pipe round trip between two processes (one message each way), "
        "same run."], key="latency")


def map_section(quick: bool = False) -> Section:
    rows = []
    for batch in MAP_BATCHES[1:2] if quick else MAP_BATCHES:
        engine, comprehension = map_throughput(batch)
        rows.append(Row("map(lambda x: x + 1), 1 worker", f"{batch:,}-record batches", "M rec/s",
                        engine, limits={"list comprehension": comprehension},
                        goals=[Goal(">=", 5)] if batch >= 10_000 else []))
    return Section("Map throughput (M records/s)", rows, notes=[
        f"{MAP_RECORDS:,} ints in all, one batch per round; median of 3 runs. "
        "limit: [f(x) for x in batch] with the same f, one thread, same run."], key="map")


def main(quick: bool = False) -> list[Section]:
    return [latency_section(quick).print(), map_section(quick).print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
