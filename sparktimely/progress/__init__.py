"""Timestamps, frontiers and the reachability tracker: the pure core of progress tracking.

Nothing here knows about processes, sockets or Spark; the dataflow layer drives it with
pointstamp changes, and the communication layer carries those changes between workers.
"""
from .frontier import Antichain, ChangeBatch, MutableAntichain
from .reachability import CycleError, GraphBuilder, Tracker
from .timestamp import ENTER, LEAVE, Product, TimeKind, advance, is_identity, less_equal, less_than

__all__ = [
    "Antichain", "ChangeBatch", "CycleError", "ENTER", "GraphBuilder", "LEAVE",
    "MutableAntichain", "Product", "TimeKind", "Tracker", "advance", "is_identity",
    "less_equal", "less_than",
]
