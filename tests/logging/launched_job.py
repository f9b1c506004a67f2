"""The job the launcher tests run as a program, flags from the command line:

    python launched_job.py -w 2 --log-dir DIR --progress [-n 2 -p 0 -h hostfile] [--pause S]

prints this process's results as one JSON line. Each worker sends its own records in
rounds (``--pause`` seconds apart); they are exchanged by value, so worker ``w`` receives
the records ``x`` with ``x % peers == w``.
"""
from __future__ import annotations

import json
import os
import sys
import time

import sparktimely as st

ROUNDS, PER_ROUND = 4, 500


def records(index: int, round: int) -> range:
    start = (index * ROUNDS + round) * PER_ROUND
    return range(start, start + PER_ROUND)


def rounds(worker: st.Worker) -> dict:
    pause = float(worker.args[worker.args.index("--pause") + 1]) if "--pause" in worker.args else 0
    input = st.InputHandle()
    received: list[int] = []
    probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                            .inspect_batch(lambda time, batch: received.extend(batch)).probe(),
                            name="rounds")
    for round in range(ROUNDS):
        input.send_batch(records(worker.index, round))
        input.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(round + 1))
        time.sleep(pause)
    input.close()
    worker.run()
    return {"worker": worker.index, "pid": os.getpid(), "received": sorted(received)}


def expected_received(worker: int, peers: int) -> list[int]:
    """What worker ``worker`` of ``peers`` receives, recomputed from the records."""
    return sorted(x for source in range(peers) for round in range(ROUNDS)
                  for x in records(source, round) if x % peers == worker)


if __name__ == "__main__":
    print(json.dumps(st.execute_from_args(sys.argv[1:], rounds)), flush=True)
