"""Communication between workers: allocators that move message tuples between worker
indexes over shared memory (one host) or sockets (many hosts)."""
from .allocator import Allocator, ShmAllocator

__all__ = ["Allocator", "ShmAllocator"]
