"""Programs the multi-process tests run, one OS process each:

    python comm_jobs.py JOB -w 2 -n 3 -p 1 -h hostfile

prints this process's results as one JSON line. Jobs: ``exchange`` (rounds of records
exchanged twice, and Arrow batches broadcast), ``bfs`` (examples/bfs.py), ``forever`` (rounds
until killed; prints ``ready`` after the first), ``fail`` (worker 3 raises after a round),
``fail_when_told`` (worker 0 raises once the file ``$COMM_JOBS_TRIGGER`` exists),
``fail_in_operator``, ``unrebuildable`` (worker 0 sends the last worker a record that does
not unpickle), ``diverge`` (the last worker never builds the dataflow the others build) and
``named`` (a dataflow named ``$COMM_JOBS_NAME``).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pyarrow as pa

import sparktimely as st
from examples.bfs import bfs, random_graph

ROUNDS, RECORDS, ROWS = 4, 5000, 200_000


def first_route(x: int) -> int:
    return x * 7 + 3


def second_route(x: int) -> int:
    return x // 5


def round_records(index: int, round: int) -> range:
    start = (index * ROUNDS + round) * RECORDS
    return range(start, start + RECORDS)


def exchange(worker: st.Worker) -> dict:
    records, batches = st.InputHandle(), st.InputHandle()

    def build(scope):
        moved = (scope.input_from(records).exchange(first_route).map(lambda x: x + 1)
                 .exchange(second_route))
        arrow = scope.input_from(batches).broadcast()
        return moved.capture(), arrow.capture(), moved.concat(arrow).probe()
    captured, arrow, probe = worker.dataflow(build)
    for round in range(ROUNDS):
        records.send_batch(round_records(worker.index, round))
        values = np.arange(ROWS, dtype=np.int64) + worker.index * ROWS + round
        batches.send_batch(pa.record_batch({"x": values}))
        records.advance_to(round + 1)
        batches.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(round + 1))
    records.close()
    batches.close()
    worker.run()
    return {"records": captured.extract(),
            "arrow": [(t, table.num_rows, int(table.column("x").to_numpy().sum()))
                      for t, table in arrow.extract()],
            "allocator": type(worker._allocator.transport).__name__,
            "remote": getattr(worker._allocator.transport, "remote", [])}


def bfs_job(worker: st.Worker) -> list:
    return sorted(bfs(worker, random_graph(2000, 6000, seed=5)).items())


def forever(worker: st.Worker, fail_at: int | None = None, when: str | None = None) -> None:
    """Rounds for two minutes; worker ``fail_at`` raises after its first round, or once the
    file ``when`` exists."""
    handle = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: x)
                            .probe())
    deadline = time.monotonic() + 120
    round = 0
    while time.monotonic() < deadline:
        handle.send_batch(range(100))
        round += 1
        handle.advance_to(round)
        worker.step_while(lambda: probe.less_than(round))
        if round == 1:
            print(f"ready {worker.index}", flush=True)
        if worker.index == fail_at and (when is None or os.path.exists(when)):
            raise ValueError(f"boom from worker {worker.index}")
        time.sleep(0.01)


def fail_in_operator(worker: st.Worker) -> None:
    """Worker 3's map raises at round 5, mid-run: word of it reaches the other process's
    workers through the data connections, often before its own process tells them."""
    def checked(x: tuple) -> tuple:
        if worker.index == 3 and x[1] == 5:
            raise ValueError("boom in worker 3")
        return x
    handle = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(handle).map(checked)
                            .exchange(lambda x: x[0]).probe())
    for round in range(10):
        handle.send_batch([(i, round) for i in range(20)])
        handle.advance_to(round + 1)
        worker.step()
    handle.close()
    worker.step_while(lambda: not probe.done())


class Unrebuildable:
    """A record that pickles but does not unpickle (as a class the receiving process
    cannot import)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self):
        return (rebuild, (self.value,))


def rebuild(value: int) -> None:
    raise RuntimeError(f"cannot rebuild {value}")


def unrebuildable(worker: st.Worker) -> None:
    """Worker 0 sends worker 3 (in process 1, or the last worker) a record that does not
    unpickle there."""
    handle = st.InputHandle()
    probe = worker.dataflow(lambda scope: scope.input_from(handle)
                            .exchange(lambda x: worker.peers - 1).probe(), name="records")
    handle.advance_to(2)
    if worker.index == 0:
        handle.send(Unrebuildable(7))
    handle.close()
    worker.step_while(lambda: not probe.done())


def diverge(worker: st.Worker) -> None:
    """Every worker but the last builds a dataflow exchanging records; the last returns at
    once (a program mistake its peers must report, not wait on)."""
    if worker.index < worker.peers - 1:
        worker.dataflow(lambda scope: scope.to_stream(range(100)).exchange(lambda x: x).probe(),
                        name="numbers")


def named(worker: st.Worker) -> None:
    """The records of ``diverge``'s dataflow, in a dataflow named ``$COMM_JOBS_NAME``."""
    worker.dataflow(lambda scope: scope.to_stream(range(100)).exchange(lambda x: x).probe(),
                    name=os.environ["COMM_JOBS_NAME"])


JOBS = {"exchange": exchange, "bfs": bfs_job, "forever": forever, "named": named,
        "fail": lambda worker: forever(worker, fail_at=3), "diverge": diverge,
        "fail_in_operator": fail_in_operator, "unrebuildable": unrebuildable,
        "fail_when_told": lambda worker: forever(worker, fail_at=0,
                                                 when=os.environ["COMM_JOBS_TRIGGER"])}

if __name__ == "__main__":
    # COMM_JOBS_HOLD_FDS: open this many descriptors first, as a program with many files or
    # connections open has (numbers past select()'s limit of 1024)
    held = [os.open(os.devnull, os.O_RDONLY)
            for _ in range(int(os.environ.get("COMM_JOBS_HOLD_FDS", "0")))]
    results = st.execute_from_args(sys.argv[2:], JOBS[sys.argv[1]])
    print(json.dumps(results), flush=True)
