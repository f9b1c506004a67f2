"""Processes exchanging through a mesh: all-to-all checksums, parking and waking, attaching by
name from an unrelated process, and cleanup after a worker is SIGKILLed."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from shm_helpers import CTX, shm_entries

from sparktimely.shm import Mesh

RING = 1 << 16


def message(src: int, dst: int, i: int) -> bytes:
    size = (src * 7919 + dst * 104729 + i * 1299709) % (3 * RING)  # some beyond the ring
    return hashlib.sha256(f"{src} {dst} {i}".encode()).digest() * (size // 32)


def _all_to_all(mesh, me, count):
    n = mesh.num_workers
    sums = [hashlib.sha256() for _ in range(n)]
    got = [0] * n
    with mesh.endpoint(me) as ep:
        sent = 0
        while sent < count or sum(got) < n * count or ep.pending_bytes:
            if sent < count:
                for target in range(n):
                    ep.send(target, [message(me, target, sent)])
                sent += 1
            for src, msg in ep.recv():
                sums[src].update(len(msg).to_bytes(8, "little"))
                sums[src].update(msg)
                got[src] += 1
            if sent == count:
                ep.park(0.1)
    return [s.hexdigest() for s in sums]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, 3])
def test_all_to_all_checksums(procs, workers):
    count = 60
    with Mesh.create(workers, ring_bytes=RING) as mesh:
        for me in range(workers):
            procs.start(_all_to_all, mesh, me, count)
        results = procs.results(timeout=50)
    for dst, sums in enumerate(results):
        for src in range(workers):
            h = hashlib.sha256()
            for i in range(count):
                data = message(src, dst, i)
                h.update(len(data).to_bytes(8, "little"))
                h.update(data)
            assert sums[src] == h.hexdigest(), (src, dst)


def _park_once(mesh, timeout):
    with mesh.endpoint(1, spin_us=0) as ep:  # no spin: the futex path
        woke = ep.park(timeout)
        return woke, time.monotonic(), [bytes(m) for _, m in ep.recv()]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backing", ["dev-shm", "file"])
def test_park_wakes_on_send(procs, backing, tmp_path, monkeypatch):
    if backing == "file":
        monkeypatch.setenv("SPARKTIMELY_SHM_DIR", str(tmp_path))
    with Mesh.create(2) as mesh, mesh.endpoint(0) as ep:
        assert os.path.exists(tmp_path / f"{mesh.name}-ctl") == (backing == "file")
        procs.start(_park_once, mesh, 20.0)
        time.sleep(0.3)  # let the child fall asleep on the futex
        sent_at = time.monotonic()
        ep.send(1, [b"wake up"])
        [(woke, woke_at, msgs)] = procs.results()
    assert woke and msgs == [b"wake up"]
    assert 0 <= woke_at - sent_at < 0.05


@pytest.mark.timeout(60)
def test_wake_without_data(procs):
    with Mesh.create(2) as mesh, mesh.endpoint(0) as ep:
        procs.start(_park_once, mesh, 20.0)
        time.sleep(0.3)
        ep.wake(1)
        [(woke, _, msgs)] = procs.results()
    assert woke and msgs == []


def test_park_times_out():
    with Mesh.create(2) as mesh, mesh.endpoint(1) as ep:
        start = time.monotonic()
        assert ep.park(0.2) is False
        assert 0.2 <= time.monotonic() - start < 1.0
        assert ep.park(0.0) is False


@pytest.mark.timeout(60)
def test_unrelated_process_attaches_by_name():
    code = textwrap.dedent("""
        import sys
        from sparktimely.shm import Mesh
        with Mesh.attach(sys.argv[1]).endpoint(1, spin_us=0) as ep:
            while not (msgs := ep.recv()):
                assert ep.park(20), "no message"
            ep.send(0, [bytes(msgs[0][1])[::-1]])
    """)
    with Mesh.create(2) as mesh, mesh.endpoint(0) as ep:
        child = subprocess.Popen([sys.executable, "-c", code, mesh.name])
        try:
            time.sleep(0.5)  # the child parks on the futex through its own mapping
            ep.send(1, [b"olleh"])
            deadline = time.monotonic() + 30
            while not (reply := ep.recv()):
                assert ep.park(deadline - time.monotonic()), "no reply"
            assert reply == [(1, b"hello")]
            assert child.wait(30) == 0
        finally:
            child.kill()
            child.wait()


def _doomed(mesh, ready):
    ep = mesh.endpoint(1)
    ep.send(1, [bytes(4 * RING)])  # beyond the ring: creates a second generation
    ready.set()
    while True:
        ep.park(1.0)


@pytest.mark.timeout(60)
def test_segments_removed_after_worker_sigkill(procs):
    ready = CTX.Event()
    mesh = Mesh.create(2, ring_bytes=RING)
    try:
        child = procs.start(_doomed, mesh, ready)
        assert ready.wait(30)
        assert any(e.endswith("-r1-1-g1") for e in shm_entries())
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
    finally:
        mesh.unlink()
    assert not [e for e in shm_entries() if mesh.name in e]
