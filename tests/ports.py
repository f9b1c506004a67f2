"""Free loopback ports for tests that write hostfiles.

>>> len(set(free_ports(3)))
3
"""
from __future__ import annotations

import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free on ``host`` a moment ago."""
    sockets = [socket.create_server((host, 0)) for _ in range(count)]
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
