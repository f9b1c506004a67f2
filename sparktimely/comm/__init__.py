"""Communication between workers: allocators that move message tuples between worker
indexes over shared memory (one host) or sockets (many hosts).

- ``allocator``: the :class:`Allocator` protocol and :class:`ShmAllocator` (one host).
- ``codec``: message tuples as buffer lists (Arrow batches as IPC, the rest pickle-5).
- ``net``: listeners, timely's connect-lower/accept-higher handshake, frames.
- ``cluster``: :func:`build_allocator`, the entry point for workers on many hosts, used by
  ``execute`` and by the Spark integration (its docstring states the contract).
- ``rendezvous``: how the supervisors of a hostfile job meet and plan.
- ``inprocess``: workers as threads of one process, for tests (``sparktimely.testing``).
"""
from .allocator import Allocator, ShmAllocator
from .cluster import (ClusterAllocator, WorkerAddress, build_allocator, host_identity,
                      sockets_forced)
from .net import PeerLost, connect_timeout, listen

__all__ = ["Allocator", "ClusterAllocator", "PeerLost", "ShmAllocator", "WorkerAddress",
           "build_allocator", "connect_timeout", "host_identity", "listen", "sockets_forced"]
