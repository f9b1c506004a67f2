"""Operator-level figures: memory of an exploding flat_map, and what idle operators cost.

    python -m benchmarks.bench_operators [--quick]

- Rate-controlled output: ``flat_map`` turns 1,000 records into 1M, 10M and 100M records
  (each record into ``repeat(x, n)``), counted downstream. sparktimely's ``flat_map`` gives
  its results lazily (``give_iterator``): it sends a batch while the consumer's queue holds
  fewer than ``QUEUE_LIMIT`` batches and otherwise yields to the scheduler. The peer is the
  same operator built eagerly, one list per input batch (what ``flat_map`` did before); the
  limit is the peak RSS of the same interpreter after importing sparktimely and running an
  empty dataflow. Each case runs in a fresh interpreter; peak RSS is ``ru_maxrss``.
- Idle operators: a dataflow whose input feeds N idle ``map`` operators (N = 10, 100,
  1000), plus a probe. Two figures per N: a step with nothing to do, and a round
  (``advance_to`` and stepping until the probe passes), in which the input's frontier moves
  past all N operators. The ratios against N = 10 show what idle operators cost.
"""
from __future__ import annotations

import statistics
import sys
import time

import sparktimely as st

from ._util import Goal, Row, Section, run_script, timed_rounds

RECORDS = 1_000
OUTPUTS = (1_000_000, 10_000_000, 100_000_000)
IDLE = (10, 100, 1_000)

_EXPLODE = """
import itertools, json, resource, time
import sparktimely as st
per_record = {per_record}
def eager(stream):
    def ctor(cap, info):
        cap.drop()
        def logic(input, output):
            for cap, batch in input:
                output.give_at(cap, [y for x in batch for y in itertools.repeat(x, per_record)])
        return logic
    return stream.unary(st.Pipeline, "EagerFlatMap", ctor)
def lazy(stream):
    return stream.flat_map(lambda x: itertools.repeat(x, per_record))
build = {{"lazy": lazy, "eager": eager, "none": None}}["{mode}"]
start = time.perf_counter()
def dataflow(scope):
    stream = scope.to_stream(list(range({records})))
    return (build(stream) if build else stream).count().capture()
counts = st.example(dataflow)
seconds = time.perf_counter() - start
total = sum(c for _, cs in counts.extract() for c in cs)
assert build is None or total == {records} * per_record, total
print(json.dumps([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, seconds]))
"""


def explode(mode: str, outputs: int) -> tuple[float, float] | str:
    """(peak RSS in MB, seconds) of a fresh interpreter running the flat_map in ``mode``."""
    result = run_script(_EXPLODE.format(per_record=outputs // RECORDS, records=RECORDS,
                                        mode=mode), timeout=1800)
    if isinstance(result, str):
        return result
    if not isinstance(result, list):
        raise TypeError(f"explode({mode!r}) printed {result!r}, not [peak RSS, seconds]")
    return float(result[0]), float(result[1])


def rate_section(quick: bool = False) -> Section:
    baseline = explode("none", 0)
    base_rss = baseline[0] if isinstance(baseline, tuple) else baseline
    rows = []
    for outputs in OUTPUTS[:1] if quick else OUTPUTS:
        size = f"1k → {outputs // 1_000_000}M records"
        lazy, eager = explode("lazy", outputs), explode("eager", outputs)
        rss = {name: r[0] if isinstance(r, tuple) else r for name, r in (("lazy", lazy),
                                                                        ("eager", eager))}
        secs = {name: r[1] if isinstance(r, tuple) else r for name, r in (("lazy", lazy),
                                                                          ("eager", eager))}
        rows.append(Row("flat_map peak RSS", size, "MB", rss["lazy"],
                        peers={"eager flat_map": rss["eager"]},
                        limits={"empty dataflow": base_rss},
                        goals=[Goal("<=", 1.5, "empty dataflow")]))
        rows.append(Row("flat_map time", size, "s", secs["lazy"],
                        peers={"eager flat_map": secs["eager"]}))
    return Section("Rate-controlled output (peak RSS of an exploding flat_map)", rows, notes=[
        f"{RECORDS:,} records, each becomes itertools.repeat(x, n); downstream count(); "
        "1 worker, fresh interpreter per case, peak RSS = ru_maxrss.",
        "peer: the same flat_map giving one list per input batch (the eager behaviour); "
        "limit: the same interpreter running an empty to_stream().count() dataflow."],
        key="rate")


def idle_costs(operators: int, steps: int = 2000, rounds: int = 500) -> tuple[float, float]:
    """(us per step with nothing to do, us per round) with ``operators`` idle maps."""
    def job(worker: st.Worker) -> tuple[float, float]:
        input = st.InputHandle()

        def build(scope: st.Scope) -> st.ProbeHandle:
            stream = scope.input_from(input)
            for _ in range(operators):
                stream.map(lambda x: x)
            return stream.probe()
        probe = worker.dataflow(build)
        worker.step()
        chunks = []
        for _ in range(10):                       # median of 10 runs of steps / 10 steps
            start = time.perf_counter()
            for _ in range(steps // 10):
                worker.step()
            chunks.append((time.perf_counter() - start) / (steps // 10) * 1e6)
        idle = statistics.median(chunks)
        latencies = timed_rounds(worker, input, probe, rounds)
        input.close()
        return idle, statistics.median(latencies) * 1e6
    return st.execute_directly(job)


def idle_section(quick: bool = False) -> Section:
    costs = {n: idle_costs(n) for n in (IDLE[:2] if quick else IDLE)}
    rows = []
    for n, (step, round) in costs.items():
        rows.append(Row("step, nothing to do", f"{n:,} idle ops", "us", step,
                        limits={"10 idle ops": costs[IDLE[0]][0]},
                        goals=[Goal("<=", 1.5, "10 idle ops")]))
    for n, (step, round) in costs.items():
        rows.append(Row("round (frontier passes every op)", f"{n:,} idle ops", "us", round,
                        limits={"10 idle ops": costs[IDLE[0]][1]}))
    return Section("Idle operators (us per step and per round, 1 worker)", rows, notes=[
        "N map operators fed by one input and never given data, plus a probe on the input; "
        "2,000 empty steps (median of 10 runs of 200); 500 rounds of advance_to + step until "
        "the probe passes (median).",
        "A round propagates the input's frontier change to every operator's input in the "
        "progress tracker (work proportional to N); no idle operator is scheduled, since "
        "only activated operators are (a heap of operator indexes)."], key="idle")


def main(quick: bool = False) -> list[Section]:
    return [rate_section(quick).print(), idle_section(quick).print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
