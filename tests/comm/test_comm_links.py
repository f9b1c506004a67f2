"""Socket links between workers, in one process: framing, FIFO order, goodbye and loss."""
from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from sparktimely.comm import ClusterAllocator, PeerLost, WorkerAddress, build_allocator
from sparktimely.comm.net import connect_peers, listen

pytestmark = pytest.mark.timeout(30)


def pair(groups=("a", "b")) -> list[ClusterAllocator]:
    """Two workers in different groups, linked over loopback (worker 1 connects first: its
    connection waits in worker 0's backlog)."""
    listeners = [listen("127.0.0.1") for _ in groups]
    plan = [WorkerAddress("127.0.0.1", s.getsockname()[1], g, f"test {i}")
            for i, (s, g) in enumerate(zip(listeners, groups))]
    second = build_allocator(1, plan, listeners[1], None, timeout=5)
    first = build_allocator(0, plan, listeners[0], None, timeout=5)
    return [first, second]


def drain(allocator, count: int, timeout: float = 10) -> list:
    received, deadline = [], time.monotonic() + timeout
    while len(received) < count:
        assert time.monotonic() < deadline, f"got {len(received)} of {count}"
        allocator.park(0.5)
        received += allocator.receive()
    return received


def close_both(allocators) -> None:
    closer = threading.Thread(target=allocators[1].close)
    closer.start()
    allocators[0].close()
    closer.join(10)
    assert not closer.is_alive()


def test_small_and_large_messages_arrive_in_order_and_intact():
    a, b = pair()
    assert a.remote == [1] and b.remote == [0]
    batch = pa.record_batch({"x": np.arange(300_000, dtype=np.int64), "y": ["z"] * 300_000})
    sent = []
    for i in range(2000):
        message = ("progress", i, [((i, 0), 1)]) if i % 100 else ("data", i, batch.slice(i, 50_000))
        sent.append(message)
        a.send(1, message)
    a.flush()
    received = drain(b, len(sent))
    assert [source for source, _ in received] == [0] * len(sent)
    for (_, got), want in zip(received, sent):
        if isinstance(want[-1], pa.RecordBatch):
            assert got[:-1] == want[:-1] and got[-1].equals(want[-1])
        else:
            assert got == want
    b.send(0, ("back", np.arange(10)))
    b.flush()
    [(source, (tag, array))] = drain(a, 1)
    assert (source, tag, array.tolist()) == (1, "back", list(range(10)))
    close_both((a, b))


def test_a_dropped_connection_names_the_lost_worker():
    a, b = pair()
    for link in b._links.values():        # worker 1 vanishes without a goodbye
        link.sock.shutdown(socket.SHUT_RDWR)
    deadline = time.monotonic() + 5
    with pytest.raises(PeerLost, match=r"lost connection to worker 1 at 127\.0\.0\.1:\d+ \(test 1\)"):
        while time.monotonic() < deadline:
            a.park(0.5)
            a.receive()
    with pytest.raises(PeerLost):
        b.close()
    with pytest.raises(PeerLost):
        a.close()


def test_unreachable_worker_is_named_within_the_timeout():
    unused = listen("127.0.0.1")
    port = unused.getsockname()[1]
    unused.close()
    plan = [WorkerAddress("127.0.0.1", port, "a"), WorkerAddress("127.0.0.1", 0, "b")]
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"could not reach worker 0 at 127.0.0.1:{port} "
                                              f"within 0.5 s"):
        build_allocator(1, plan, listen("127.0.0.1"), None, timeout=0.5)
    assert time.monotonic() - start < 3


def test_stray_connections_are_ignored_and_misrouted_ones_refused():
    listeners = [listen("127.0.0.1") for _ in range(3)]
    addresses = {i: f"127.0.0.1:{s.getsockname()[1]}" for i, s in enumerate(listeners)}
    stray = socket.create_connection(("127.0.0.1", listeners[0].getsockname()[1]))
    stray.sendall(b"GET / HTTP/1.0\r\n\r\n")
    stray.close()
    peer = threading.Thread(target=lambda: connect_peers(1, {0: addresses[0]}, listeners[1], 5))
    peer.start()
    [(index, sock)] = connect_peers(0, {1: addresses[1]}, listeners[0], timeout=5).items()
    peer.join(5)
    assert index == 1
    sock.close()
    wrong = {0: addresses[0], 1: addresses[0]}     # process 2 believes process 1 is at 0's port
    with pytest.raises(ConnectionError, match="unexpected connection to process 0 claiming "
                                              "to be process 2 for process 1"):
        threading.Thread(target=lambda: _quietly(connect_peers, 2, wrong, listeners[2], 2)).start()
        connect_peers(0, {1: addresses[1], 2: addresses[2]}, listeners[0], timeout=5)
    for listener in listeners:
        listener.close()


def _quietly(function, *args):
    try:
        function(*args)
    except ConnectionError:
        pass


def test_abort_drops_the_links_at_once_and_the_peer_sees_it():
    a, b = pair()
    a.send(1, ("unfinished", 1))
    a.abort()                                  # no goodbye, no waiting for worker 1
    with pytest.raises(PeerLost, match=r"lost connection to worker 0 at 127\.0\.0\.1:\d+ \(test 0\)"):
        drain(b, 2, timeout=5)
    b.abort()
