"""Bulk Arrow exchange over loopback sockets against raw TCP, measured in the same run.

    python -m benchmarks.bench_sockets [--quick]

Rows (GB/s of payload; each figure the median of several runs):

- raw TCP: ``sendall`` of batch-sized buffers from one process to another, ``recv_into`` a reused
  buffer; one way, and both ways at once (sum of both directions).
- link: ``ClusterAllocator`` between two processes, Arrow batches sent and decoded (the
  transport alone, no dataflow).
- exchange: a dataflow on 2 processes x 1 worker (hostfile on 127.0.0.1, sockets forced):
  a source gives 8 MiB record batches that ``exchange`` routes to the other worker (the
  route returns a uint8 per row); one way (only worker 0 has data), and both ways. This
  includes the dataflow's partitioning (``partition_batch``), framing and progress.

Each is measured at three batch sizes (1, 8 and 32 MiB), raw TCP with buffers of the same
size. The ratio column compares each row with raw TCP in the same direction; the target for
the exchange is at least 40%.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time

import multiprocess
import numpy as np
import pyarrow as pa

import sparktimely as st
from sparktimely.testing import free_ports
from sparktimely.comm import WorkerAddress, build_allocator
from sparktimely.comm.net import listen

from ._util import Goal, Row, Section, batch_source

CHUNK = 16 << 20
ROWS = 512 << 10                  # 2 int64 columns: 8 MiB batches
context = multiprocess.get_context("fork")


def payload(seed: int, rows: int = ROWS) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    return pa.record_batch({"k": rng.integers(0, 1 << 40, rows), "v": rng.integers(0, 9, rows)})


def _spawn(target, *args) -> tuple:
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=lambda: writer.send(target(*args)))
    process.start()
    writer.close()
    return process, reader


def _gather(spawned: list, timeout: float = 120) -> list:
    try:
        deadline = time.monotonic() + timeout
        for process, reader in spawned:
            if not reader.poll(max(deadline - time.monotonic(), 0)):
                raise TimeoutError(f"benchmark process {process.pid} gave no result")
        return [reader.recv() for _, reader in spawned]
    finally:
        for process, _ in spawned:
            process.join(30)
            if process.is_alive():
                process.kill()


# -- raw TCP ---------------------------------------------------------------------------------

def _raw_peer(server: socket.socket, connect: bool, chunks: int, send: bool,
              receive: bool, chunk: int = CHUNK) -> float:
    """Seconds until this side has sent and received ``chunks`` chunks."""
    if connect:
        sock = socket.create_connection(server.getsockname())
    else:
        server.settimeout(60)
        sock, _ = server.accept()
    server.close()
    with sock:
        data, into = np.ones(chunk, np.uint8).tobytes(), memoryview(bytearray(chunk))

        def send_chunks() -> None:
            for _ in range(chunks):
                sock.sendall(data)
        sock.sendall(b"!")                              # both sides ready
        sock.recv(1)
        start = time.perf_counter()
        sender = threading.Thread(target=send_chunks)
        if send:
            sender.start()
        if receive:
            left = chunks * chunk
            while left:
                left -= sock.recv_into(into, min(left, chunk))
            sock.sendall(b"!")                          # got everything
        if send:
            sender.join()
            sock.recv(1)
        return time.perf_counter() - start


def raw_tcp(chunks: int, both: bool, chunk: int = CHUNK) -> float:
    with listen("127.0.0.1") as server:
        spawned = [_spawn(_raw_peer, server, False, chunks, True, both, chunk),
                   _spawn(_raw_peer, server, True, chunks, both, True, chunk)]
    seconds = max(_gather(spawned))
    return (2 if both else 1) * chunks * chunk / seconds / 1e9


# -- allocator link -------------------------------------------------------------------------

def _link_peer(index: int, plan: list, listener, batches: int, rows_per_batch: int) -> float:
    allocator = build_allocator(index, plan, listener, None)
    if allocator is None:
        raise ValueError(f"a link needs two workers, the plan has {len(plan)}")
    batch = payload(index, rows_per_batch)
    start = time.perf_counter()
    if index == 0:
        for _ in range(batches):
            allocator.send(1, ("batch", batch))
        allocator.flush()
        while not allocator.receive():
            allocator.park(None)
    else:
        rows = 0
        while rows < batches * rows_per_batch:
            allocator.park(None)
            for _, message in allocator.receive():
                rows += message[-1].num_rows
        allocator.send(0, ("done",))
        allocator.flush()
    seconds = time.perf_counter() - start
    allocator.close()
    return seconds


def link(batches: int, rows: int = ROWS) -> float:
    listeners = [listen("127.0.0.1") for _ in range(2)]
    plan = [WorkerAddress("127.0.0.1", s.getsockname()[1], f"host {i}")
            for i, s in enumerate(listeners)]
    spawned = [_spawn(_link_peer, i, plan, listeners[i], batches, rows) for i in range(2)]
    for listener in listeners:
        listener.close()
    seconds = _gather(spawned)[0]
    return batches * payload(0, rows).nbytes / seconds / 1e9


# -- dataflow exchange ------------------------------------------------------------------------

def _exchange_job(worker: st.Worker, batches: int, both: bool, repeats: int,
                  rows: int) -> list[float]:
    batch = payload(worker.index, rows)
    other = 1 - worker.index
    sends = batches if both or worker.index == 0 else 0

    def build(scope):
        return batch_source(scope, batch, sends).exchange(
            lambda b: np.full(b.num_rows, other, np.uint8)).probe()
    times = []
    for _ in range(repeats + 1):                # the first run warms up
        barrier = worker.dataflow(lambda s: s.to_stream([0]).broadcast().probe())
        worker.step_while(lambda: not barrier.done())
        start = time.perf_counter()
        probe = worker.dataflow(build)
        worker.step_while(lambda: not probe.done())
        times.append(time.perf_counter() - start)
    return times[1:]


def _exchange_process(process: int, hosts: list[str], batches: int, both: bool,
                      repeats: int, rows: int) -> list[float]:
    os.environ["SPARKTIMELY_FORCE_SOCKETS"] = "1"
    return st.execute(lambda worker: _exchange_job(worker, batches, both, repeats, rows),
                      processes=2, process=process, hostfile=hosts)[0]


def exchange(batches: int, both: bool, repeats: int, rows: int = ROWS) -> float:
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    spawned = [_spawn(_exchange_process, p, hosts, batches, both, repeats, rows) for p in range(2)]
    per_process = _gather(spawned)
    seconds = statistics.median(max(run) for run in zip(*per_process))
    return (2 if both else 1) * batches * payload(0, rows).nbytes / seconds / 1e9


SIZES = (64 << 10, 512 << 10, 2 << 20)          # rows: 1 MiB, 8 MiB, 32 MiB batches
BYTES = 1 << 30                                  # per measurement, one way or both together


def main(quick: bool = False) -> list[Section]:
    repeats = 3

    def median(measure) -> float:
        return statistics.median(measure() for _ in range(repeats))
    one_way, both_ways, links = [], [], []
    for rows in SIZES[1:2] if quick else SIZES:
        nbytes = payload(0, rows).nbytes
        batches = (BYTES >> (1 if quick else 0)) // nbytes
        size = f"{nbytes >> 20} MiB batches"
        raw_one = median(lambda: raw_tcp(batches, both=False, chunk=nbytes))
        raw_two = median(lambda: raw_tcp(batches // 2, both=True, chunk=nbytes))
        goal = [Goal(">=", 0.4, "raw TCP")]
        if rows == ROWS:
            links.append(Row("link: ClusterAllocator, Arrow batches, one way", size, "GB/s",
                               median(lambda: link(batches, rows)), limits={"raw TCP": raw_one}))
        one_way.append(Row("Arrow exchange, 2 processes x 1 worker, sockets, one way", size,
                           "GB/s", exchange(batches, both=False, repeats=repeats, rows=rows),
                           limits={"raw TCP": raw_one}, goals=goal))
        both_ways.append(Row("Arrow exchange, sockets, both ways at once (sum)", size, "GB/s",
                             exchange(batches // 2, both=True, repeats=repeats, rows=rows),
                             limits={"raw TCP": raw_two}, goals=goal))
    return [Section("Arrow exchange over loopback sockets (GB/s of payload)", one_way + both_ways + links,
                    notes=[f"{BYTES >> 20} MiB per measurement; batches of 2 int64 columns routed "
                           "whole to the other process (hostfile on 127.0.0.1, sockets forced); "
                           f"median of {repeats}.",
                           "limit: raw TCP sendall/recv_into between two processes with buffers "
                           "of the batch size, same direction(s), same run."],
                    key="sockets").print()]


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
