"""Socket links between workers, in one process: framing, FIFO order, goodbye and loss."""
from __future__ import annotations

import re
import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from sparktimely.comm import ClusterAllocator, PeerLost, WorkerAddress, build_allocator
from sparktimely.comm.net import connect_peers, job_token, listen

pytestmark = pytest.mark.timeout(30)


def pair(groups=("a", "b")) -> list[ClusterAllocator]:
    """Two workers in different groups, linked over loopback."""
    listeners = [listen("127.0.0.1") for _ in groups]
    plan = [WorkerAddress("127.0.0.1", s.getsockname()[1], g, f"test {i}")
            for i, (s, g) in enumerate(zip(listeners, groups))]
    return together(*(lambda i=i: build_allocator(i, plan, listeners[i], None, timeout=5)
                      for i in range(2)))


def together(*calls):
    """Call each of ``calls`` in a thread of its own (as peers run at once); their results."""
    results: list = [None] * len(calls)

    def run(i):
        results[i] = calls[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert None not in results, "a peer did not connect"
    return results


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
    with pytest.raises(PeerLost, match=r"^lost worker 1 at 127\.0\.0\.1:\d+ \(test 1\): "):
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
    token = job_token("test")
    connected = together(lambda: connect_peers(1, {0: addresses[0]}, listeners[1], 5, token=token),
                         lambda: connect_peers(0, {1: addresses[1]}, listeners[0], 5, token=token))
    assert [list(c) for c in connected] == [[0], [1]]
    for sock in [*connected[0].values(), *connected[1].values()]:
        sock.close()
    wrong = {0: addresses[0], 1: addresses[0]}     # process 2 believes process 1 is at 0's port
    waiting: list = []

    def process_0():
        try:
            connect_peers(0, {1: addresses[1], 2: addresses[2]}, listeners[0], 2, token=token)
        except ConnectionError as error:
            waiting.append(str(error))
    thread = threading.Thread(target=process_0)
    thread.start()
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"process 2 could not connect to process 1 at "
                                              rf"{addresses[0]}: it is process 0 of this job, "
                                              rf"not process 1"):
        connect_peers(2, wrong, listeners[2], 5, token=token)
    assert time.monotonic() - started < 3                  # not the 5 s timeout
    thread.join(10)
    # process 2 met process 0, then gave up and closed: process 0 names it at once
    assert re.match(rf"process 2 at {addresses[2]} closed its connection to process 0 during "
                    rf"start-up( \(connection reset by peer\))?, while process 1 "
                    rf"\({addresses[1]}\) had not connected yet; meanwhile ", waiting[0])
    assert waiting[0].endswith("wanted process 1, not process 0")
    for listener in listeners:
        listener.close()


def test_abort_drops_the_links_at_once_and_the_peer_sees_it():
    a, b = pair()
    a.send(1, ("unfinished", 1))
    a.abort()                                  # no goodbye, no waiting for worker 1
    with pytest.raises(PeerLost, match=r"^lost worker 0 at 127\.0\.0\.1:\d+ \(test 0\): "):
        drain(b, 2, timeout=5)
    b.abort()


class _RecordingPoller:
    """An epoll object that records the timeout of every ``poll``."""

    def __init__(self, poller) -> None:
        self.poller, self.timeouts = poller, []

    def poll(self, timeout=-1):
        self.timeouts.append(timeout)
        return self.poller.poll(timeout)

    def __getattr__(self, name):
        return getattr(self.poller, name)


def test_a_worker_with_only_remote_peers_polls_its_sockets_before_it_sleeps():
    """``park`` first polls without blocking for ``ClusterAllocator.spin`` seconds (a peer's
    answer usually comes sooner than the kernel wakes a sleeper), then sleeps in epoll for
    the rest of the timeout; what arrives is received either way."""
    a, b = pair()
    try:
        b._poller = recording = _RecordingPoller(b._poller)
        b.park(0.05)                                        # nothing comes
        *spinning, sleeping = recording.timeouts
        assert len(spinning) > 1 and set(spinning) == {0}
        assert 0.04 < sleeping <= 0.05 - b.spin + 1e-9
        a.send(1, ("hi",))
        a.flush()
        assert drain(b, 1) == [(0, ("hi",))]
    finally:
        close_both([a, b])


def test_a_broadcast_leaves_at_once_with_what_was_sent_before_it():
    """A control message (progress) is written to the sockets when it is broadcast, not at
    the step's flush: the remote peer reads it while the sender's step goes on, as a peer
    of its host reads the ring; a batch sent before it goes with it, in order."""
    a, b = pair()
    try:
        a.send(1, ("data", 1, [10, 20]))
        a.broadcast(("progress", 1, [((0, 5), -1)]))           # no a.flush()
        assert drain(b, 2, timeout=3) == [(0, ("data", 1, [10, 20])),
                                          (0, ("progress", 1, [((0, 5), -1)]))]
        a.send(1, ("data", 2, [30]))                            # data alone waits for it
        b.park(0.2)
        assert b.receive() == []
        a.flush()
        assert drain(b, 1, timeout=3) == [(0, ("data", 2, [30]))]
    finally:
        close_both([a, b])


def test_a_peer_that_dies_while_another_is_awaited_is_named_at_once():
    """Processes 0 and 2 of 3 have met; 1 never starts. Process 0 is killed: process 2 must
    fail at once naming it (it waited for the timeout, then named only process 1)."""
    import subprocess
    import sys
    listeners = [listen("127.0.0.1") for _ in range(3)]
    addresses = {i: f"127.0.0.1:{s.getsockname()[1]}" for i, s in enumerate(listeners)}
    port0 = listeners[0].getsockname()[1]
    listeners[0].close()
    listeners[1].close()                         # process 1 never listens
    token = job_token("test")
    process_0 = subprocess.Popen([sys.executable, "-c", (
        "import sys\n"
        "from sparktimely.comm.net import connect_peers, listen\n"
        f"listener = listen('127.0.0.1', {port0})\n"
        "print('listening', flush=True)\n"
        f"connect_peers(0, {{1: {addresses[1]!r}, 2: {addresses[2]!r}}}, listener, 30, "
        f"token={token!r})\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert process_0.stdout.readline() == "listening\n"
        failure: list = []

        def process_2():
            try:
                connect_peers(2, {0: addresses[0], 1: addresses[1]}, listeners[2], 30, token=token)
            except ConnectionError as error:
                failure.append((str(error), time.monotonic()))
        thread = threading.Thread(target=process_2)
        thread.start()
        time.sleep(2.0)                          # long enough for 0 and 2 to have met
        assert not failure
        process_0.kill()
        killed = time.monotonic()
        thread.join(10)
        assert not thread.is_alive()
        message, failed = failure[0]
        assert message == (f"process 0 at {addresses[0]} closed its connection to process 2 "
                           f"during start-up, while process 1 ({addresses[1]}) had not "
                           f"connected yet")
        assert failed - killed < 5               # not the 30 s timeout
    finally:
        process_0.kill()
        process_0.wait()
        listeners[2].close()
