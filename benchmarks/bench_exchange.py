"""Exchange throughput between 2 worker processes, Python objects and Arrow batches, each at three
batch sizes, against the copy limits measured in the same run.

    python -m benchmarks.bench_exchange [--quick]

- Objects: 2M ints given in batches of 1k, 10k and 100k records (1M per worker) and routed by
  ``exchange(lambda x: x)``, so half of every batch crosses to the other worker; the figure is
  all records through the exchange per second (slower worker's time, median of 3 runs).
  Limits, in records/s of the same batch: ``pickle`` (protocol 5 dumps + loads of the batch,
  one thread: the serialization every object batch pays), and the pickled bytes moved by numpy
  memcpy and by a one-way shared-memory copy between two processes (bench_shm's figure).
- Arrow: batches of 8 int64/float64 columns (64 KiB, 1 MiB, 8 MiB), 512 MiB per worker,
  exchanged by key column ``k`` between the 2 workers (all-to-all), and sent whole to the
  other worker (the transport alone); GB/s of payload (slower worker, median of 5), against
  numpy memcpy and the shared-memory one-way copy of the same batch size.
"""
from __future__ import annotations

import pickle
import statistics
import sys
import time

import psutil

import sparktimely as st

from ._util import Goal, Row, Section, median_seconds
from .bench_arrow import COLUMNS, exchange as arrow_exchange, payload
from .bench_shm import memcpy_limit, shm_copy

OBJECT_RECORDS, OBJECT_BATCHES = 2_000_000, (1_000, 10_000, 100_000)
ARROW_ROWS = (1 << 10, 1 << 14, 1 << 17)             # 64 KiB, 1 MiB, 8 MiB batches
ARROW_BYTES_PER_WORKER = 512 << 20


def object_exchange(batch: int, records: int = OBJECT_RECORDS) -> tuple[float, float]:
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


def pickle_rate(batch: int) -> tuple[float, int]:
    """(M records/s of pickle dumps + loads of a ``batch``-int list, its pickled bytes)."""
    data = list(range(batch))
    blob = pickle.dumps(data, protocol=5)
    loops = max(1, 200_000 // batch)

    def run():
        for _ in range(loops):
            pickle.loads(pickle.dumps(data, protocol=5))
    return loops * batch / median_seconds(run, 5) / 1e6, len(blob)


def main(quick: bool = False) -> list[Section]:
    rows = []
    rss_row = None
    for batch in OBJECT_BATCHES[1:2] if quick else OBJECT_BATCHES:
        rate, rss = object_exchange(batch)
        serialize, nbytes = pickle_rate(batch)
        per_second = 1e9 / (nbytes / batch) / 1e6        # GB/s -> M records/s of this batch
        rows.append(Row("object exchange, 2 workers (ints)", f"{batch:,}-record batches",
                        "M rec/s", rate,
                        limits={"pickle": serialize,
                                "memcpy": memcpy_limit(nbytes) * per_second,
                                "shm copy": shm_copy(nbytes) * per_second},
                        goals=[Goal(">=", 2)] if batch >= 10_000 else []))
        if batch == 10_000:
            rss_row = Row("object exchange: largest worker RSS", f"{batch:,}-record batches", "MB",
                          rss, goals=[Goal("<=", 150)])
    for keyed in (True, False):
        for row_count in ARROW_ROWS[-1:] if quick else ARROW_ROWS:
            nbytes = payload(0, row_count).nbytes
            batches = ARROW_BYTES_PER_WORKER // nbytes
            seconds, moved = arrow_exchange(keyed, rows=row_count, batches=batches)
            size = f"{nbytes >> 10:,} KiB batches" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB batches"
            rows.append(Row("Arrow exchange(key='k'), 2 workers, all-to-all" if keyed else
                            "Arrow exchange to the other worker (transport only)",
                            size, "GB/s", moved / seconds / 1e9,
                            limits={"memcpy": memcpy_limit(nbytes), "shm copy": shm_copy(nbytes)},
                            goals=[Goal(">=", 2)] if nbytes >= 8 << 20 else []))
    if rss_row:
        rows.append(rss_row)
    return [Section("Exchange throughput, 2 worker processes (shared memory)", rows, notes=[
        f"objects: {OBJECT_RECORDS:,} ints in all, exchange(lambda x: x) (half of each batch "
        "crosses); limits in records/s of the same batch: pickle dumps+loads (one thread), and "
        "its pickled bytes through numpy memcpy / a one-way shared-memory copy; median of 3.",
        f"Arrow: {COLUMNS} int64/float64 columns, {ARROW_BYTES_PER_WORKER >> 20} MiB per worker; "
        "limits: numpy memcpy and the one-way shared-memory copy (bench_shm) of the same batch "
        "size; median of 5, slower worker.",
        "goals are set at the headline sizes (>= 10k-record batches, 8 MiB batches)."],
        key="exchange").print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
