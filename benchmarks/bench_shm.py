"""Benchmark of the shared-memory transport (sparktimely.shm) between 2 processes.

Run: python -m benchmarks.bench_shm
Prints: ping-pong round trip (median) with park (spin then futex) and with futex only, against a
multiprocess Pipe round trip; one-way throughput of 1 MiB and 16 MiB messages against numpy
memcpy; Arrow record batches encoded into the ring and read zero-copy (and summed) by the peer.
Baselines are measured in the same run.
"""
from __future__ import annotations

import statistics
import sys
import time

import multiprocess
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparktimely.shm import Mesh, decode_arrow, encode_arrow

from ._util import Row, Section

ctx = multiprocess.get_context("fork")


def _start(target, *args):
    proc = ctx.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _finish(proc):
    proc.join(60)
    if proc.is_alive():
        proc.kill()
        raise RuntimeError("benchmark child hung")


def _wait(ep):
    while not (msgs := ep.recv()):
        ep.park()
    return msgs


def _pong(mesh, n, spin_us):
    with mesh.endpoint(1, spin_us=spin_us) as ep:
        for _ in range(n):
            ep.send(0, [_wait(ep)[0][1]])


def shm_round_trip(n: int, spin_us: float) -> float:
    with Mesh.create(2) as mesh:
        proc = _start(_pong, mesh, n, spin_us)
        times = []
        with mesh.endpoint(0, spin_us=spin_us) as ep:
            for _ in range(n):
                t = time.perf_counter()
                ep.send(1, [b"8 bytes!"])
                _wait(ep)
                times.append(time.perf_counter() - t)
        _finish(proc)
    return statistics.median(times[n // 10:]) * 1e6


def _pipe_pong(conn, n):
    for _ in range(n):
        conn.send_bytes(conn.recv_bytes())


def pipe_round_trip(n: int) -> float:
    a, b = ctx.Pipe()
    proc = _start(_pipe_pong, b, n)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        a.send_bytes(b"8 bytes!")
        a.recv_bytes()
        times.append(time.perf_counter() - t)
    _finish(proc)
    return statistics.median(times[n // 10:]) * 1e6


def _sink(mesh, phases, arrow):
    total = 0
    with mesh.endpoint(1) as ep:
        for count in phases:
            got = 0
            while got < count:
                for _, msg in _wait(ep):
                    if arrow:
                        total += pc.sum(decode_arrow(msg).column(0)).as_py()
                    got += 1
                del msg
            ep.send(0, [total.to_bytes(8, "little")])


def one_way(parts: list, nbytes: int, count: int, arrow: bool = False) -> float:
    """GB/s for ``count`` messages after a warm-up of ``count // 4`` (rings grown, pages mapped)."""
    warm = max(count // 4, 2)
    with Mesh.create(2) as mesh:
        proc = _start(_sink, mesh, (warm, count), arrow)
        with mesh.endpoint(0) as ep:
            for phase in (warm, count):
                t = time.perf_counter()
                for _ in range(phase):
                    while not ep.try_send(1, parts):
                        ep.park()
                _wait(ep)
                dt = time.perf_counter() - t
        _finish(proc)
    return count * nbytes / dt / 1e9


def memcpy(nbytes: int, count: int) -> float:
    src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    np.copyto(dst, src)
    t = time.perf_counter()
    for _ in range(count):
        np.copyto(dst, src)
    return count * nbytes / (time.perf_counter() - t) / 1e9


def shm_copy(nbytes: int) -> float:
    """GB/s of ``nbytes`` messages written into the ring by one process and received (zero-copy)
    by another: the shared-memory copy limit of an exchange of that message size."""
    count = min(max(32, (512 << 20) // nbytes), 20_000)
    data = np.ones(nbytes, np.uint8)
    return statistics.median(one_way([data], nbytes, count) for _ in range(3))


def memcpy_limit(nbytes: int) -> float:
    """GB/s of numpy memcpy of ``nbytes`` buffers, one thread (median of 3)."""
    count = min(max(32, (512 << 20) // nbytes), 20_000)
    return statistics.median(memcpy(nbytes, count) for _ in range(3))


SIZES_MIB = (1, 4, 16)


def main(quick: bool = False) -> list[Section]:
    n = 5000 if quick else 20000
    pipe = pipe_round_trip(n)
    rows = [Row("ping-pong round trip, park (spin 50 us, then futex)", "8 B", "us",
                shm_round_trip(n, 50.0), limits={"Pipe round trip": pipe}),
            Row("ping-pong round trip, futex every time (no spin)", "8 B", "us",
                shm_round_trip(n // 4, 0.0), limits={"Pipe round trip": pipe})]
    sizes = SIZES_MIB[:1] if quick else SIZES_MIB
    for mib in sizes:
        rows.append(Row("one-way messages, zero-copy receive", f"{mib} MiB", "GB/s",
                        shm_copy(mib << 20), limits={"memcpy": memcpy_limit(mib << 20)}))
    for mib in sizes:
        rows_per_batch = (mib << 20) // 16
        batch = pa.record_batch({"k": np.arange(rows_per_batch, dtype=np.int64),
                                 "v": np.ones(rows_per_batch)})
        parts = encode_arrow(batch)
        size = sum(memoryview(p).nbytes for p in parts)
        count = max(32, (1536 << 20) // size)
        rows.append(Row("Arrow batches: encode + zero-copy decode + sum", f"{mib} MiB", "GB/s",
                        statistics.median(one_way(parts, size, count, arrow=True) for _ in range(3)),
                        limits={"memcpy": memcpy_limit(size)}))
    return [Section("Shared-memory transport between 2 processes (sparktimely.shm)", rows, notes=[
        "round trips: median over messages (first 10% dropped); one-way figures: median of 3 runs "
        "after a warm-up; limits measured in the same run (memcpy: numpy.copyto, one thread)."],
        key="shm").print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
