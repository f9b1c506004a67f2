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
4. Each worker calls ``build_allocator(index, plan, listener, mesh)``: it connects to the
   lower-indexed workers of other groups, accepts the higher ones on ``listener`` (then closes
   it), and returns the allocator to give ``Worker``. Its ``close()`` flushes, says goodbye to
   every remote worker and waits until each has said goodbye too, so call it after
   ``worker.run()``; the creator may remove the mesh once every member's worker has closed.

One TCP connection links every pair of workers in different groups. Small output is written
by the worker's own thread at ``flush`` (one ``sendmsg`` per connection and step); bulk
output goes through a writer thread per connection, so partitioning the next batch overlaps
sending this one. A reader thread per connection receives frames into an inbox and rings the
worker's doorbell. Workers of one host use the mesh, so a source always uses one path and
messages stay FIFO per source. A connection that drops without a goodbye makes ``receive``,
``send`` or ``close`` raise :class:`PeerLost` naming the worker and its address.
(Connections are per worker rather than per process: every worker is an OS process of its
own, so "the process's sockets" are the worker's, and no extra hop through a router process
is paid.)
"""
from __future__ import annotations

import os
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa

from ..shm import Endpoint, Mesh
from .allocator import Allocator, ShmAllocator
from .codec import decode, encode
from .net import (FRAME, GOODBYE, MAX_FRAME, MESSAGE, PeerLost, connect_peers, connect_timeout,
                  job_token)

__all__ = ["ClusterAllocator", "WorkerAddress", "build_allocator", "host_identity",
           "sockets_forced"]

_STAGE = 1 << 20          # reader staging buffer; smaller frames are copied out of it
_DIRECT = 64 << 10        # bodies at least this large are received straight into their buffer
_HAND_OFF = 256 << 10     # output beyond this goes through the writer thread at once
_IN_FLIGHT = 64 << 20     # send() waits while this much output is still unwritten
_IOV_MAX = 512            # buffers per sendmsg call


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
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


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


class _Link:
    """The TCP connection from this worker to one remote worker.

    Writing: ``send`` frames a message into a local list. ``flush`` writes a small amount at
    once from the worker's thread if nothing is in flight; more than ``_HAND_OFF`` bytes go
    to the writer thread, so the worker prepares its next batch while the kernel copies this
    one, and ``send`` waits while more than ``_IN_FLIGHT`` bytes are still unwritten. Either
    way bytes leave in ``send`` order. Reading: a reader thread feeds the shared inbox.
    """

    def __init__(self, sock: socket.socket, me: int, peer: int, name: str, inbox: deque,
                 wake: Callable[[], None]) -> None:
        self.sock, self.me, self.peer, self.name = sock, me, peer, name
        self.failure: PeerLost | None = None
        self._inbox, self._wake = inbox, wake
        self._frames: list[memoryview] = []     # worker thread only
        self._framed = 0
        self._cond = threading.Condition()
        self._handed: list[memoryview] = []     # for the writer thread, under _cond
        self._in_flight = 0                     # bytes handed and not yet written
        self._closing = False
        self._goodbye = False
        self._threads = [threading.Thread(target=target, daemon=True,
                                          name=f"sparktimely-{kind}-{me}-{peer}")
                         for kind, target in (("reader", self._read), ("writer", self._write))]
        for thread in self._threads:
            thread.start()

    # -- writing (worker thread) ------------------------------------------------------------

    def send(self, parts: list, channel: int = MESSAGE) -> None:
        views = [_bytes(part) for part in parts]
        length = sum(view.nbytes for view in views)
        if length > MAX_FRAME:
            raise ValueError(f"a message of {length} bytes for {self.name} is larger than a "
                             f"frame may be ({MAX_FRAME} bytes): send it in smaller batches")
        self._frames.append(memoryview(FRAME.pack(channel, self.me, self.peer, length)))
        self._frames += views
        self._framed += FRAME.size + length
        if self._framed >= _HAND_OFF:
            self._hand_off()

    def flush(self) -> bool:
        """Write or hand off everything sent; True when nothing is left unwritten."""
        if self._frames:
            if self._in_flight == 0 and self._framed < _HAND_OFF:
                try:
                    self._write_all(self._frames)
                except OSError as error:
                    raise self._lost(error) from None
                self._frames, self._framed = [], 0
            else:
                self._hand_off()
        return self._in_flight == 0

    def _hand_off(self, closing: bool = False) -> None:
        with self._cond:
            self._handed += self._frames
            self._in_flight += self._framed
            self._closing = closing
            self._cond.notify_all()
            while self._in_flight > _IN_FLIGHT and self.failure is None:
                self._cond.wait()
        self._frames, self._framed = [], 0
        if self.failure is not None:
            raise self.failure

    def finish(self) -> None:
        """Send everything and a goodbye, then stop writing (the reader goes on)."""
        self.send([], GOODBYE)
        self._hand_off(closing=True)

    def join(self) -> None:
        """Wait until everything is written and the peer has said goodbye and closed (or
        the connection failed)."""
        for thread in self._threads:
            while thread.is_alive():
                thread.join(1.0)
        self.sock.close()

    def abort(self) -> None:
        """Drop the connection: both threads end at once."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- writing (writer thread) ------------------------------------------------------------

    def _write(self) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    while not self._handed and not self._closing:
                        cond.wait()
                    views, self._handed = self._handed, []
                if not views:
                    break
                written = self._write_all(views)
                with cond:
                    self._in_flight -= written
                    cond.notify_all()
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as error:
            self._lost(error)
            with cond:
                cond.notify_all()
            self._wake()

    def _write_all(self, views: list[memoryview]) -> int:
        """Write ``views`` in order (consuming the list); returns the bytes written."""
        total = 0
        while views:
            sent = self.sock.sendmsg(views[:_IOV_MAX])
            total += sent
            done = 0
            while sent and sent >= views[done].nbytes:
                sent -= views[done].nbytes
                done += 1
            if sent:
                views[done] = views[done][sent:]
            del views[:done]
        return total

    def _lost(self, error: OSError) -> PeerLost:
        if self.failure is None:
            self.failure = PeerLost(f"lost connection to {self.name}: {error.strerror or error}")
        return self.failure

    # -- reading (reader thread) ------------------------------------------------------------

    def _read(self) -> None:
        try:
            self._read_frames()
            if not self._goodbye:
                raise ConnectionError("the peer closed the connection without a goodbye "
                                      "(its process died?)")
        except OSError as error:
            self._lost(error)
        except Exception as error:
            self.failure = self.failure or PeerLost(f"failed to receive from {self.name}: "
                                                    f"{type(error).__name__}: {error}")
        finally:
            self._wake()

    def _read_frames(self) -> None:
        """Receive frames until EOF: small ones through a staging buffer (many per recv),
        large ones straight into an aligned buffer of their own."""
        sock, inbox, wake, peer = self.sock, self._inbox, self._wake, self.peer
        stage = memoryview(bytearray(_STAGE))
        start = end = 0
        while True:
            delivered = False
            while end - start >= FRAME.size:
                channel, source, target, length = FRAME.unpack_from(stage, start)
                if (source, target) != (peer, self.me) or length > MAX_FRAME:
                    header = bytes(stage[start:start + FRAME.size])
                    raise ConnectionError(f"a corrupt frame header {header!r} (channel "
                                          f"{channel}, {source} -> {target}, {length} bytes) "
                                          f"on the link {peer} -> {self.me}")
                body_start = start + FRAME.size
                if length >= _DIRECT:
                    staged = min(end - body_start, length)
                    body = self._read_large(stage[body_start:body_start + staged], length)
                    start, end = (body_start + length, end) if staged == length else (0, 0)
                elif end - body_start >= length:
                    body = stage[body_start:body_start + length].tobytes()
                    start = body_start + length
                else:
                    break
                if channel == GOODBYE:
                    self._goodbye = True
                else:
                    inbox.append((peer, body))
                    delivered = True
            if delivered:
                wake()
            if start == end:
                start = end = 0
            elif start + FRAME.size + _DIRECT > _STAGE:
                stage[:end - start] = stage[start:end]
                start, end = 0, end - start
            count = sock.recv_into(stage[end:])
            if count == 0:
                if start != end:
                    raise ConnectionError("connection closed in the middle of a frame")
                return
            end += count

    def _read_large(self, prefix: memoryview, length: int) -> pa.Buffer:
        body = pa.allocate_buffer(length)
        view = memoryview(body).cast("B")
        got = prefix.nbytes
        view[:got] = prefix
        while got < length:
            count = self.sock.recv_into(view[got:], length - got, socket.MSG_WAITALL)
            if count == 0:
                raise ConnectionError("connection closed in the middle of a frame")
            got += count
        return body


def _bytes(part: Any) -> memoryview:
    view = memoryview(part)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class ClusterAllocator:
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
        self._event = threading.Event()
        wake = self._event.set if endpoint is None else (lambda: endpoint.wake(slots[index]))
        self.wake = wake
        self._links = {peer: _Link(sock, index, peer, names[peer], self._inbox, wake)
                       for peer, sock in connections.items()}

    @property
    def remote(self) -> list[int]:
        """The peers reached through sockets."""
        return sorted(self._links)

    def send(self, target: int, message: tuple) -> None:
        link = self._links.get(target)
        if link is None:
            assert self.endpoint is not None           # a peer of this group
            self.endpoint.send(self._slots[target], encode(message))
        else:
            link.send(encode(message))

    def receive(self) -> list[tuple[int, tuple]]:
        self._check()
        received = []
        if self.endpoint is not None:
            sources = self._sources
            received = [(sources[slot], decode(data)) for slot, data in self.endpoint.recv()]
        inbox = self._inbox
        while inbox:
            source, data = inbox.popleft()
            received.append((source, decode(data)))
        return received

    def park(self, timeout: float | None) -> None:
        self.flush()
        if self._inbox:
            return
        self._check()
        if self.endpoint is not None:
            self.endpoint.park(timeout)
        else:
            self._event.wait(timeout)
            self._event.clear()

    def flush(self) -> bool:
        written = all([link.flush() for link in self._links.values()])
        return (self.endpoint is None or self.endpoint.flush()) and written

    def close(self) -> None:
        """Say goodbye to every remote worker, wait for theirs, then release everything.
        Raises PeerLost if a connection dropped before its goodbye."""
        try:
            for link in self._links.values():
                link.finish()
            for link in self._links.values():
                link.join()
            self._check()
        except BaseException:
            self.abort()
            raise
        if self.endpoint is not None:
            self.endpoint.close()

    def abort(self) -> None:
        """Drop every connection now (the remote workers see PeerLost) and release the mesh
        endpoint; for a worker that failed, so nobody waits for its goodbye."""
        for link in self._links.values():
            link.abort()
        for link in self._links.values():
            link.join()            # no thread may ring the doorbell of a closed endpoint
        if self.endpoint is not None:
            self.endpoint.close()

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
