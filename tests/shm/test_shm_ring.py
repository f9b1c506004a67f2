"""Rings: exact FIFO delivery of random sizes (also beyond the ring), overflow without deadlock,
zero-copy leases that block reuse until released, and rolling away from retained views."""
from __future__ import annotations

import os
import random
import time

import pytest

from sparktimely.shm import Mesh, segments
from sparktimely.shm._mesh import SENDER_BYTES

RING = 1 << 16


def payload(seed: int, i: int, big: int = 3 * RING) -> bytes:
    rng = random.Random(seed * 1_000_003 + i)
    size = rng.choice([0, 1, 7, 8, 9, rng.randrange(100), rng.randrange(RING), rng.randrange(big)])
    return rng.randbytes(size)


def test_round_trip_random_sizes_in_one_process():
    with Mesh.create(2, ring_bytes=RING) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        received = []
        for i in range(400):
            data = payload(1, i)
            a.send(1, [data[: len(data) // 3], data[len(data) // 3:]])  # parts are concatenated
            if i % 7 == 0:
                received += [bytes(m) for _, m in b.recv()]
        while a.pending_bytes or len(received) < 400:
            a.flush()
            received += [bytes(m) for _, m in b.recv()]
        assert received == [payload(1, i) for i in range(400)]
        assert a._out[1].gen > 0  # messages beyond the ring rolled to larger generations


def _writer(mesh, seed, count):
    with mesh.endpoint(1) as ep:
        for i in range(count):
            ep.send(0, [payload(seed, i)])
        while not ep.flush():
            ep.park(0.1)
    return count


@pytest.mark.timeout(60)
def test_round_trip_random_sizes_across_processes(procs):
    count = 500
    with Mesh.create(2, ring_bytes=RING) as mesh:
        procs.start(_writer, mesh, 2, count)
        with mesh.endpoint(0) as ep:
            got = []
            while len(got) < count:
                got += [(src, bytes(m)) for src, m in ep.recv()] or []
                if len(got) < count:
                    assert ep.park(10.0), "writer went silent"
        assert procs.results() == [count]
    assert got == [(1, payload(2, i)) for i in range(count)]


def _flood(mesh, me, count):
    other = 1 - me
    with mesh.endpoint(me) as ep:
        for i in range(count):  # send everything before receiving anything
            ep.send(other, [payload(me, i, big=RING)])
        overflowed = ep.pending_bytes > 0
        got = []
        while len(got) < count or ep.pending_bytes:
            got += [bytes(m) for _, m in ep.recv()]
            ep.park(0.1)
    assert got == [payload(other, i, big=RING) for i in range(count)]
    return len(got), overflowed


@pytest.mark.timeout(60)
def test_mutual_flood_does_not_deadlock(procs):
    with Mesh.create(2, ring_bytes=RING) as mesh:
        procs.start(_flood, mesh, 0, 300)
        procs.start(_flood, mesh, 1, 300)
        (n0, over0), (n1, over1) = procs.results()
        assert n0 == n1 == 300 and (over0 or over1)


def test_zero_copy_slot_is_reused_only_after_release():
    with Mesh.create(2, ring_bytes=RING) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1, copy_below=0) as b:
        a.send(1, [b"A" * 20000])
        [(_, held)] = b.recv()
        ring = b._in[0]                       # the ring appears with the first message
        lo, hi = ring.seg.address, ring.seg.address + ring.seg.size
        held_addr = memoryview(held).obj.address
        assert isinstance(held, memoryview) and lo <= held_addr < hi
        sent = 0
        while a.try_send(1, [b"B" * 20000]):
            sent += 1
            for _, m in b.recv():  # received and released at once
                assert not (held_addr <= m.obj.address < held_addr + 20000)
            assert sent < 10, "the writer overran a held record"
        assert bytes(held) == b"A" * 20000
        del held  # release: the writer may now wrap onto the slot
        assert a.try_send(1, [b"C" * 20000])
        [(_, m)] = b.recv()
        assert m.obj.address == held_addr and bytes(m) == b"C" * 20000
        assert a._out[1].gen == 0


def test_retained_views_make_the_writer_roll():
    with Mesh.create(2, ring_bytes=RING) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1, copy_below=0) as b:
        kept, generations = [], []
        for i in range(20):  # the reader keeps every view across recv calls
            data = bytes([i]) * 20000
            while not a.try_send(1, [data]):
                kept += [m for _, m in b.recv()]  # sees the writer waiting: asks it to roll
            kept += [m for _, m in b.recv()]
            if not any(seg is b._in[0].seg for seg in generations):
                generations.append(b._in[0].seg)
        assert [bytes(m) for m in kept] == [bytes([i]) * 20000 for i in range(20)]
        assert a._out[1].gen > 0 and b._in[0].gen == a._out[1].gen
        *old, current = generations
        assert old and current is b._in[0].seg
        assert f"{mesh.name}-r0-1-g0" not in os.listdir("/dev/shm")  # unlinked by the reader
        assert all(seg._mm is not None for seg in old)  # ... but still mapped for `kept`
        del kept  # dropping the views unmaps the old generations
        assert all(seg._mm is None for seg in old)
        assert current._mm is not None  # the current generation stays mapped


def test_small_messages_are_copied_out():
    with Mesh.create(2, ring_bytes=RING) as mesh, mesh.endpoint(0) as a, mesh.endpoint(1, copy_below=100) as b:
        a.send(1, [b"x" * 99])
        a.send(1, [b"y" * 100])
        (_, small), (_, large) = b.recv()
        assert type(small) is bytes and isinstance(large, memoryview) and large.readonly


def test_a_ring_removed_before_its_reader_attached_names_the_writer_as_gone():
    """A worker whose process ended (its segments removed by its host group's janitor) made
    its ring and said so, but the ring is gone when the reader attaches: the reader loses a
    peer (a ConnectionError, which a Spark stage may retry; PeerLost in the allocator),
    not a FileNotFoundError taken for an error in user code."""
    from sparktimely.comm import PeerLost, ShmAllocator
    with Mesh.create(3, ring_bytes=RING) as mesh:
        with mesh.endpoint(0) as a, mesh.endpoint(2) as c, mesh.endpoint(1) as b:
            a.send(1, [b"last words"])
            c.send(1, [b"alive"])
            os.unlink(next(path for path in segments(mesh.name) if path.endswith("-r0-1-g0")))
            with pytest.raises(ConnectionResetError, match=r"worker 0 is gone: its ring to "
                                                          r"worker 1 .* was removed"):
                b.recv()
        with mesh.endpoint(0) as a, mesh.endpoint(1) as b:
            a.send(1, [b"again"])
            os.unlink(next(path for path in segments(mesh.name) if path.endswith("-r0-1-g0")))
            with pytest.raises(PeerLost, match=r"^lost worker 0: its ring to worker 1 .* was "
                                               r"removed, as when its process ends$"):
                ShmAllocator(b, 1, 3).receive()


def test_rings_appear_only_between_workers_that_talk():
    with Mesh.create(4, ring_bytes=RING) as mesh:
        with mesh.endpoint(0) as a, mesh.endpoint(2) as c, mesh.endpoint(3) as d:
            a.send(2, [b"to two"])
            assert c.recv() == [(0, b"to two")] and d.recv() == []
            rings = sorted(os.path.basename(path)[len(mesh.name):] for path in segments(mesh.name))
    assert rings == ["-ctl", "-r0-2-g0"]


def test_first_rings_share_a_budget_per_sender_within_the_bound():
    for workers, limit in [(2, 1 << 30), (5, 1 << 30), (8, 16 << 20)]:
        with Mesh.create(workers, limit=limit) as mesh, mesh.endpoint(0) as ep:
            share = min(SENDER_BYTES, limit // workers) // (workers - 1)
            assert share - 4096 < ep._ring_bytes + 256 <= share
            for target in range(1, workers):
                ep.send(target, [b"x"])
            assert ep.reserved <= min(SENDER_BYTES, limit // workers)


def test_a_message_beyond_the_bound_arrives_whole_in_parts():
    """The bound forbids a ring large enough for the message: it crosses in PART records,
    in order with the messages around it, and no ring grows."""
    with Mesh.create(2, ring_bytes=RING, limit=4 * RING) as mesh, \
            mesh.endpoint(0) as a, mesh.endpoint(1) as b:
        sent = [b"before", bytes(range(256)) * (40 * RING // 256) + b"tail", b"after"]
        for message in sent:
            a.send(1, [message])
        received = []
        while len(received) < 3:
            a.flush()
            received += [bytes(m) for _, m in b.recv()]
        assert received == sent
        assert a._out[1].gen == 0 and a.reserved <= 4 * RING


def _wait_parked(mesh, me):
    with mesh.endpoint(me, spin_us=0) as ep:
        return ep.park(20.0)


def test_a_mesh_with_more_workers_than_cores_is_oversubscribed():
    cores = len(os.sched_getaffinity(0))
    for workers, expected in [(cores, False), (cores + 1, True)]:
        with Mesh.create(workers, ring_bytes=RING) as mesh, mesh.endpoint(0) as ep:
            assert ep.oversubscribed() is expected


@pytest.mark.timeout(60)
def test_a_mesh_with_more_awake_workers_than_cores_is_crowded(procs):
    cores = len(os.sched_getaffinity(0))
    with Mesh.create(cores + 1, ring_bytes=RING) as mesh, mesh.endpoint(0) as ep:
        assert ep.crowded()                   # the others have not gone to sleep
        for other in range(1, cores + 1):
            procs.start(_wait_parked, mesh, other)
        deadline = time.monotonic() + 20
        while ep.crowded():
            assert time.monotonic() < deadline, "the parked workers still count as awake"
            time.sleep(0.01)
        for other in range(1, cores + 1):
            ep.wake(other)
        assert procs.results() == [True] * cores
