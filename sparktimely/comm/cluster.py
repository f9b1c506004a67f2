"""Workers on many hosts: one allocator per worker that routes each peer to shared memory or
to a socket.

The contract, shared by ``sparktimely.execute`` (several processes from a hostfile) and the
Spark integration (one barrier task per worker):

1. Before telling anyone its address, each worker (or its supervisor, before forking it)
   binds a listening socket with ``net.listen(host)`` (port 0: any free port) and keeps it
   open.
2. Every participant learns the same *plan*: one :class:`WorkerAddress` per global worker
   index, holding the host and port others reach that worker's listener on, and a ``group``:
   workers with equal groups share memory. Use :func:`host_identity` as the group (hostname,
   boot id, IPC and network namespaces), or a unique string per worker to force sockets.
3. The workers of a group of more than one share a ``sparktimely.shm.Mesh`` with one slot per
   group member, in index order. Exactly one member creates it (``Mesh.create(size)``) and the
   others attach it by name (``Mesh.attach(name)``) once it exists.
4. Each worker calls ``build_allocator(index, plan, listener, mesh)``: it makes its rings to
   the other members of its group (``Endpoint.make_rings``), connects to the
   lower-indexed workers of other groups, accepts the higher ones on ``listener`` (then closes
   it), and returns the allocator to give ``Worker``. Its ``close()`` flushes, says goodbye to
   every remote worker and waits until each has said goodbye too, so call it after
   ``worker.run()``; the creator may remove the mesh once every member's worker has closed.

One TCP connection (:class:`~.link.Link`) links every pair of workers in different groups,
written and read as :mod:`.link` says. A worker with only remote peers parks in ``epoll`` on its sockets (and an eventfd
for ``wake``); one that also has a shared-memory mesh parks on its doorbell, and a watcher
thread, armed only while it is parked, rings that doorbell when a socket becomes readable.
Workers of one host use the mesh, so a source always uses one path and messages stay FIFO
per source. A connection that drops without a goodbye makes ``receive``, ``send``, ``park``
or ``close`` raise :class:`PeerLost` naming the worker and its address.
(Connections are per worker rather than per process: every worker is an OS process of its
own, so "the process's sockets" are the worker's, and no extra hop through a router process
is paid.)
"""
from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence


from ..shm import Endpoint, Mesh
from .allocator import Allocator, EncodingAllocator, ShmAllocator
from .codec import decode_all
from .link import Link
from .net import connect_peers, connect_timeout, job_token, join_address, ready

__all__ = ["ClusterAllocator", "WorkerAddress", "build_allocator", "host_identity",
           "sockets_forced"]

@dataclass(frozen=True)
class WorkerAddress:
    """Where a worker's listener is reached, and which workers share its memory.

    >>> WorkerAddress("node-1", 40123, "node-1/ipc:[4026531839]", "process 0").address
    'node-1:40123'
    """

    host: str
    port: int
    group: str
    label: str = ""
    mesh: str = ""
    """The name of the shared memory of this worker's group (the same for every member)."""

    @property
    def address(self) -> str:
        return join_address(self.host, self.port)


FORCE_SOCKETS_ENV = "SPARKTIMELY_FORCE_SOCKETS"


def sockets_forced(force: bool | None = None) -> bool:
    """``force``, else whether ``$SPARKTIMELY_FORCE_SOCKETS`` asks every process (or Spark
    task) to count as a host of its own, so that all workers talk through sockets.

    >>> sockets_forced(True), sockets_forced(False)
    (True, False)
    """
    if force is not None:
        return force
    return os.environ.get(FORCE_SOCKETS_ENV, "") not in ("", "0")


def host_identity() -> str:
    """What decides whether two processes can share memory: hostname, boot id, and the IPC and
    network namespaces (separate network namespaces count as separate hosts).

    >>> host_identity() == host_identity()
    True
    """
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            parts.append(boot.read().strip())
    except OSError:
        pass
    for namespace in ("ipc", "net"):
        try:
            parts.append(os.readlink(f"/proc/self/ns/{namespace}"))
        except OSError:
            pass
    return "/".join(parts)


class _ParkWatcher:
    """For a worker with a mesh and sockets: a thread that rings the worker's doorbell when
    one of its sockets becomes readable, armed (one shot per socket) only while the worker
    parks, so it takes the interpreter lock only to wake a sleeping worker."""

    def __init__(self, ring: Callable[[], None]) -> None:
        self._ring = ring
        self._epoll = select.epoll()
        self._stop = os.eventfd(0)
        self._epoll.register(self._stop, select.EPOLLIN)
        self._watched: set[int] = set()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="sparktimely-park-watcher")
        self._thread.start()

    def arm(self, fds: Iterable[int]) -> None:
        """Watch each of ``fds`` until it becomes readable once."""
        mask = select.EPOLLIN | select.EPOLLONESHOT
        for fd in fds:
            if fd in self._watched:
                self._epoll.modify(fd, mask)
            else:
                self._epoll.register(fd, mask)
                self._watched.add(fd)

    def _watch(self) -> None:
        try:
            while True:
                events = self._epoll.poll()
                if any(fd == self._stop for fd, _ in events):
                    return
                self._ring()
        except (OSError, ValueError):           # closed under it: the allocator is going
            return

    def stop(self) -> None:
        os.eventfd_write(self._stop, 1)
        self._thread.join()
        self._epoll.close()
        os.close(self._stop)


class ClusterAllocator(EncodingAllocator):
    """Routes each peer to the shared-memory mesh (same group) or to a socket link.

    >>> import threading
    >>> from sparktimely.comm import WorkerAddress, build_allocator, listen
    >>> listeners = [listen("127.0.0.1") for _ in range(2)]
    >>> plan = [WorkerAddress("127.0.0.1", s.getsockname()[1], f"host-{i}")
    ...         for i, s in enumerate(listeners)]
    >>> made = {}
    >>> def connect(i):
    ...     made[i] = build_allocator(i, plan, listeners[i], None, timeout=10)
    >>> threads = [threading.Thread(target=connect, args=(i,)) for i in range(2)]
    >>> for thread in threads: thread.start()
    >>> for thread in threads: thread.join()
    >>> made[0].remote, made[1].remote
    ([1], [0])
    >>> made[0].send(1, ("hello",)); _ = made[0].flush()
    >>> received = []
    >>> while not received:
    ...     made[1].park(1.0); received += made[1].receive()
    >>> received
    [(0, ('hello',))]
    >>> for allocator in made.values(): allocator.abort()
    """

    def __init__(self, index: int, peers: int, endpoint: Endpoint | None,
                 slots: dict[int, int], connections: dict[int, socket.socket],
                 names: dict[int, str]) -> None:
        self.index = index
        self.peers = peers
        self.endpoint = endpoint
        self._slots = slots
        self._sources = {slot: worker for worker, slot in slots.items()}
        self._inbox: deque = deque()
        self._poller = select.epoll()
        self._wakeup: int | None = None
        self._watcher: _ParkWatcher | None = None
        if endpoint is None:
            self._wakeup = os.eventfd(0, os.EFD_NONBLOCK)
            self._poller.register(self._wakeup, select.EPOLLIN)
            wake: Callable[[], None] = self._ring_wakeup
        else:
            slot = slots[index]
            wake = lambda: endpoint.wake(slot)              # noqa: E731
            self._watcher = _ParkWatcher(wake)
        self.wake = wake
        self._links = {peer: Link(sock, index, peer, names[peer], wake, self._read_all)
                       for peer, sock in connections.items()}
        self._by_fd = {link.fd: link for link in self._links.values()}
        for link in self._links.values():
            self._poller.register(link.fd, select.EPOLLIN)

    @property
    def remote(self) -> list[int]:
        """The peers reached through sockets."""
        return sorted(self._links)

    def _ring_wakeup(self) -> None:
        if self._wakeup is not None:
            os.eventfd_write(self._wakeup, 1)

    def send_parts(self, target: int, parts: list) -> None:
        link = self._links.get(target)
        if link is None:
            assert self.endpoint is not None           # a peer of this group
            self.endpoint.send(self._slots[target], parts, notify=False)
        else:
            link.send(parts)

    def broadcast(self, message: tuple) -> None:
        """Send a control message (progress, above all) to every other worker, and write it
        to the sockets at once, with what was sent before it: a remote peer then reads it
        while this worker's step goes on (its pass, its operators), as a peer of this host
        reads its ring at once. Batches of data wait for the step's :meth:`flush` (one
        write for many)."""
        super().broadcast(message)
        for link in self._links.values():
            link.flush()

    def _read_all(self) -> None:
        """Read every socket that has input into the inbox."""
        by_fd, inbox = self._by_fd, self._inbox
        for fd, _ in self._poller.poll(0):
            link = by_fd.get(fd)
            if link is not None:
                link.read(inbox)
                if link.ended:
                    self._forget(link)

    def _forget(self, link: Link) -> None:
        """Stop polling a link whose peer said goodbye and closed."""
        if self._by_fd.pop(link.fd, None) is not None:
            self._poller.unregister(link.fd)

    def receive(self) -> list[tuple[int, tuple]]:
        self._read_all()
        self._check()
        received = []
        if self.endpoint is not None:
            sources = self._sources
            received = decode_all((sources[slot], data) for slot, data in self.endpoint.recv())
        inbox = self._inbox
        if inbox:
            received += decode_all(inbox)
            inbox.clear()
        return received

    def park(self, timeout: float | None) -> None:
        self.flush()
        self._read_all()
        if self._inbox:
            return
        self._check()
        if self.endpoint is not None:
            assert self._watcher is not None
            self._watcher.arm(self._by_fd)
            self.endpoint.park(timeout)
        else:
            events = self._spin(timeout) or self._poller.poll(
                -1 if timeout is None else max(timeout - self.spin, 0.0))
            if any(fd == self._wakeup for fd, _ in events):
                assert self._wakeup is not None
                try:
                    os.eventfd_read(self._wakeup)
                except BlockingIOError:
                    pass

    spin = 200e-6
    """Seconds a worker with only remote peers polls its sockets (yielding its core between
    polls) before it sleeps in ``epoll``: an answer usually comes within a round's Python,
    and waking from the kernel costs more each way (``benchmarks/bench_sockets.py``)."""

    def _spin(self, timeout: float | None) -> list:
        """Poll the sockets and the wake-up descriptor for up to ``spin`` seconds (no longer
        than ``timeout``); the events, or an empty list."""
        end = time.perf_counter() + (self.spin if timeout is None else min(self.spin, timeout))
        poll = self._poller.poll
        while True:
            events = poll(0)
            if events or time.perf_counter() >= end:
                return events
            os.sched_yield()

    def oversubscribed(self) -> bool:
        return self.endpoint is not None and self.endpoint.oversubscribed()

    def flush(self) -> bool:
        written = all([link.flush() for link in self._links.values()])
        return (self.endpoint is None or self.endpoint.flush()) and written

    def close(self) -> None:
        """Say goodbye to every remote worker, wait for theirs, then release everything.
        Raises PeerLost if a connection dropped before its goodbye."""
        try:
            for link in self._links.values():
                link.finish()
            if self.endpoint is not None:
                self.endpoint.flush()
            while self._by_fd:                # read until every peer has said goodbye
                self._read_all()
                self._check()
                if self._by_fd:
                    ready(list(self._by_fd), timeout=1.0)
            for link in self._links.values():
                link.join()
            self._check()
        except BaseException:
            self.abort()
            raise
        self._release()

    def abort(self) -> None:
        """Drop every connection now (the remote workers see PeerLost) and release the mesh
        endpoint; for a worker that failed, so nobody waits for its goodbye."""
        for link in self._links.values():
            link.abort()
        for link in self._links.values():
            link.join()            # no thread may ring the doorbell of a closed endpoint
        self._release()

    def _release(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if not self._poller.closed:
            self._poller.close()
        if self._wakeup is not None:
            os.close(self._wakeup)
            self._wakeup = None
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None

    def _check(self) -> None:
        for link in self._links.values():
            if link.failure is not None:
                raise link.failure


def build_allocator(index: int, plan: Sequence[WorkerAddress], listener: socket.socket | None,
                    mesh: Mesh | None, timeout: float | None = None) -> Allocator | None:
    """The allocator of worker ``index`` in a job laid out by ``plan`` (see the module
    docstring); None for a job of one worker.

    ``listener`` is this worker's listening socket (``plan[index]`` advertises its port; None
    if the worker has no remote peers); it is closed once the higher-indexed remote workers
    have connected. ``mesh`` holds one slot per
    worker of this worker's group (None if the group is this worker alone). Connecting gives
    up after ``timeout`` seconds (default ``$SPARKTIMELY_CONNECT_TIMEOUT`` or 60) with a
    ConnectionError naming the unreachable worker and address.

    >>> plan = [WorkerAddress("localhost", 0, "host-a"), WorkerAddress("localhost", 0, "host-a")]
    >>> with Mesh.create(2) as mesh:
    ...     allocators = [build_allocator(i, plan, None, mesh) for i in range(2)]
    ...     allocators[0].send(1, ("hello", 42))
    ...     allocators[1].receive()
    [(0, ('hello', 42))]
    """
    peers = len(plan)
    if not 0 <= index < peers:
        raise IndexError(f"worker index {index} is not in 0..{peers - 1}")
    if peers == 1:
        return None
    me = plan[index]
    group = [worker for worker, address in enumerate(plan) if address.group == me.group]
    slots = {worker: slot for slot, worker in enumerate(group)}
    endpoint = None
    if len(group) > 1:
        if mesh is None or mesh.num_workers != len(group):
            raise ValueError(f"worker {index} shares memory with workers {group} and needs a "
                             f"mesh of {len(group)} slots, got {mesh and mesh.num_workers}")
        endpoint = mesh.endpoint(slots[index])
        endpoint.make_rings()          # every worker of a dataflow sends to every other one
    if len(group) == peers:
        assert endpoint is not None                     # peers > 1: a group of several
        if listener is not None:
            listener.close()
        return ShmAllocator(endpoint, index, peers)
    remote = {worker: address for worker, address in enumerate(plan) if worker not in slots}
    if listener is None:
        raise ValueError(f"worker {index} has remote peers and needs a listening socket")
    try:
        with listener:
            connections = connect_peers(index, {w: a.address for w, a in remote.items()},
                                        listener, connect_timeout(timeout), "worker",
                                        job_token("workers", [(a.address, a.group) for a in plan]))
    except BaseException:
        if endpoint is not None:
            endpoint.close()
        raise
    names = {worker: f"worker {worker} at {address.address}"
                     + (f" ({address.label})" if address.label else "")
             for worker, address in remote.items()}
    return ClusterAllocator(index, peers, endpoint, slots, connections, names)
