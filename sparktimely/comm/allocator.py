"""Allocators: how a worker sends messages to other worker indexes.

The dataflow layer hands an allocator message tuples addressed to worker
indexes and receives them back FIFO per sender; it never sees bytes or transports. The
:class:`ShmAllocator` connects the workers of one host through a shared-memory mesh.
"""
from __future__ import annotations

from typing import Protocol

from ..shm import Endpoint, RingGone
from .codec import decode_all, encode, encode_control
from .net import PeerLost


class Allocator(Protocol):
    """What a worker needs from the communication layer.

    >>> from sparktimely.comm import Allocator, ShmAllocator
    >>> [name for name in ("send", "broadcast", "receive", "park", "wake", "flush",
    ...                    "oversubscribed", "close", "abort") if not hasattr(ShmAllocator, name)]
    []
    """

    index: int
    peers: int

    def send(self, target: int, message: tuple) -> None:
        """Queue ``message`` for worker ``target`` (never blocks; a parked ``target`` may be
        woken only at the next ``flush``)."""

    def broadcast(self, message: tuple) -> None:
        """:meth:`send` a control message (plain Python values: progress, a dataflow's
        description) to every other worker, encoded once."""

    def receive(self) -> list[tuple[int, tuple]]:
        """Every message that has arrived, as ``(source, message)``, FIFO per source."""

    def park(self, timeout: float | None) -> None:
        """Wait until a message may have arrived or ``timeout`` seconds passed."""

    def wake(self) -> None:
        """Make this worker's current or next ``park`` return (safe from any thread)."""

    def flush(self) -> bool:
        """Push queued output on and wake the peers it is for; True when nothing is left
        queued."""

    def oversubscribed(self) -> bool:
        """Whether this host has more workers than the cores this process may use (a step
        with nothing to do should then give its core to a peer with work)."""

    def close(self) -> None:
        """Release the transport once everything sent has left."""

    def abort(self) -> None:
        """Release the transport at once, after a failure (remote peers see the loss)."""


class EncodingAllocator:
    """What the allocators over byte transports share: a message is encoded (:func:`encode`;
    a control message once for every peer, :func:`encode_control`) and handed to
    :meth:`send_parts`, the transport's own."""

    index: int
    peers: int

    def send(self, target: int, message: tuple) -> None:
        self.send_parts(target, encode(message))

    def broadcast(self, message: tuple) -> None:
        parts = [encode_control(message)]
        for target in range(self.peers):
            if target != self.index:
                self.send_parts(target, parts)

    def send_parts(self, target: int, parts: list) -> None:
        """Queue the encoded message ``parts`` for worker ``target``."""
        raise NotImplementedError


class ShmAllocator(EncodingAllocator):
    """Messages between the workers of one host through a shared-memory mesh endpoint
    (``endpoint``, public so a host's workers can ring each other's doorbells).

    >>> from sparktimely.shm import Mesh
    >>> with Mesh.create(2, ring_bytes=1 << 16) as mesh:
    ...     a, b = (ShmAllocator(mesh.endpoint(i), i, 2) for i in range(2))
    ...     a.send(1, ("progress", [1, 2]))
    ...     received = b.receive()
    ...     a.close(); b.close()
    >>> received
    [(0, ('progress', [1, 2]))]
    """

    def __init__(self, endpoint: Endpoint, index: int, peers: int) -> None:
        self.index = index
        self.peers = peers
        self.endpoint = endpoint

    def send_parts(self, target: int, parts: list) -> None:
        self.endpoint.send(target, parts, notify=False)

    def broadcast(self, message: tuple) -> None:
        data = encode_control(message)
        send_one = self.endpoint.send_one
        for target in range(self.peers):
            if target != self.index:
                send_one(target, data)

    def receive(self) -> list[tuple[int, tuple]]:
        try:
            arrived = self.endpoint.recv()
        except RingGone as gone:                   # a peer's ring removed: the peer ended
            raise PeerLost(gone.worker, f"worker {gone.worker}", gone.reason) from None
        if not arrived:                           # the common case of a step: nothing to decode
            return []
        return decode_all(arrived)

    def park(self, timeout: float | None) -> None:
        self.endpoint.park(timeout)

    def wake(self) -> None:
        self.endpoint.wake(self.index)

    def flush(self) -> bool:
        return self.endpoint.flush()

    def oversubscribed(self) -> bool:
        return self.endpoint.oversubscribed()

    def close(self) -> None:
        self.endpoint.close()

    abort = close
