"""Traces: immutable batches of updates, the spine that merges them, and shared handles."""
from .batch import AdvancedBatch, Batch, Batcher
from .handle import TraceAgent, TraceBox
from .spine import Spine

__all__ = ["AdvancedBatch", "Batch", "Batcher", "Spine", "TraceAgent", "TraceBox"]
