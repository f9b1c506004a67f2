"""Free loopback ports for tests that write hostfiles (see ``sparktimely.testing.free_ports``).

>>> len(set(free_ports(3)))
3
"""
from __future__ import annotations

from sparktimely.testing import free_ports

__all__ = ["free_ports"]
