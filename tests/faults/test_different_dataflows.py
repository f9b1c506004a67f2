"""Workers whose functions build different dataflows (one builds a dataflow another never
builds, or more of them) fail within seconds, every time, naming the dataflow and the worker
that never built it, whoever notices first: the worker that got messages for a dataflow it
never built, or a worker still running a dataflow that a finished peer never built (a
finished worker tells its peers how many dataflows it built). Nothing waits for the missing
worker's part of the dataflow, whatever the interleaving, the transport or the stall limit."""
from __future__ import annotations

import time

import pytest

import sparktimely as st
from sparktimely.testing import execute_in_process

pytestmark = pytest.mark.timeout(120)

# (how many dataflows each worker builds, how many runs of st.execute)
CASES = [
    pytest.param([1, 0], 10, id="only-worker-0-builds"),
    pytest.param([0, 1], 4, id="only-worker-1-builds"),
    pytest.param([2, 1], 4, id="worker-0-builds-one-more"),
    pytest.param([1, 2], 4, id="worker-1-builds-one-more"),
    pytest.param([1, 1, 0], 10, id="worker-2-of-3-builds-none"),
    pytest.param([0, 1, 1], 4, id="worker-0-of-3-builds-none"),
    pytest.param([1, 0, 0], 4, id="only-worker-0-of-3-builds"),
    pytest.param([1, 1, 2], 4, id="worker-2-of-3-builds-one-more"),
]


def job_building(counts: list[int]):
    """A job whose worker ``i`` builds ``counts[i]`` dataflows exchanging records and returns
    (a worker that builds none returns at once)."""
    def job(worker):
        for index in range(counts[worker.index]):
            worker.dataflow(lambda scope: scope.to_stream(range(10)).exchange(lambda x: x)
                            .probe(), name=f"numbers-{index}")
    return job


def expected_error(counts: list[int]) -> str:
    """The error: one of the workers that built fewest dataflows never built the first
    dataflow some other worker built."""
    first = min(counts)
    missing = "|".join(str(w) for w, count in enumerate(counts) if count == first)
    return (rf"RuntimeError: worker ({missing}) never built dataflow {first} "
            rf"\('numbers-{first}'\).*every worker must build the same dataflows")


@pytest.mark.parametrize("counts, runs", CASES)
def test_processes_fail_naming_the_dataflow_a_worker_never_built(counts, runs):
    for run in range(runs):
        started = time.monotonic()
        with pytest.raises(st.WorkerError, match=expected_error(counts)):
            st.execute(job_building(counts), workers=len(counts),
                       stall_limit=30 if run % 2 else None)
        assert time.monotonic() - started < 5, f"run {run} took {time.monotonic() - started:.1f} s"


@pytest.mark.parametrize("counts, runs", CASES)
def test_in_process_workers_fail_naming_the_dataflow_a_worker_never_built(counts, runs):
    for seed in range(3 * runs):
        started = time.monotonic()
        with pytest.raises(st.WorkerError, match=expected_error(counts)):
            execute_in_process(job_building(counts), len(counts), seed, stall_seconds=30)
        assert time.monotonic() - started < 5, f"seed {seed} took {time.monotonic() - started:.1f} s"


def test_messages_for_a_dataflow_not_built_yet_are_no_error_while_a_worker_runs_ahead():
    """A worker that runs its dataflow to completion (``worker.run()`` inside its function)
    gets messages for the next dataflow from peers that built it already, and workers finish
    at different times: none of that is an error when every worker builds the same
    dataflows."""
    def job(worker):
        results = []
        for round in range(3):
            input = st.InputHandle()
            captured = worker.dataflow(lambda scope: scope.input_from(input)
                                       .exchange(lambda x: x).count().capture())
            input.send_batch(range(round * 10 + worker.index))
            input.close()
            if worker.index == 0:
                worker.run()                     # runs ahead: done with this one already
            results.append(captured)
        worker.run()
        return [capture.extract() for capture in results]
    for workers in (2, 3):
        for seed in range(20):
            results = execute_in_process(job, workers, seed)
            counts = [sum(sum(records) for extract in extracts for _, records in extract)
                      for extracts in zip(*results)]
            assert counts == [sum(round * 10 + w for w in range(workers)) for round in range(3)]
