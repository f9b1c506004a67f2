"""Running a job at 1, 2 and 3 worker processes (``st.execute``) and the oracles of
tests/ops; merging what the workers captured is ``matrix_helpers.merged``."""
from __future__ import annotations

from collections import defaultdict

import sparktimely as st
from matrix_helpers import merged

WORKERS = [1, 2, 3]


def share(items: list, worker) -> list:
    """This worker's share of ``items`` (every ``peers``-th item from its index)."""
    return items[worker.index::worker.peers]


def run_rounds(build, rounds: list, workers: int) -> list:
    """Feeds each worker's share of ``rounds[r]`` at time ``r`` through an InputHandle into
    ``build(stream)``, which returns a Capture; returns the merged captures."""
    def job(worker):
        handle = st.InputHandle()
        capture = worker.dataflow(lambda scope: build(scope.input_from(handle)))
        for r, records in enumerate(rounds):
            handle.send_batch(share(records, worker))
            handle.advance_to(r + 1)
        handle.close()
        worker.run()
        return capture
    return merged(st.execute(job, workers=workers))


def oracle(rounds: list, per_record=None) -> list:
    """The rounds as ``(time, sorted records)``, through ``per_record(time, x) -> [(t, y)]``."""
    by_time: dict = defaultdict(list)
    for time, records in enumerate(rounds):
        for x in records:
            for t, y in (per_record(time, x) if per_record else [(time, x)]):
                by_time[t].append(y)
    return sorted((t, sorted(ys)) for t, ys in by_time.items() if ys)
