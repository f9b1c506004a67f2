"""Dataflow construction and scheduling: workers, scopes, streams, operators and handles.

This layer knows how operators connect and when they run, not how bytes move between
workers (that is :mod:`sparktimely.comm`).
"""
from .capability import Capability, CapabilityError, CapabilitySet, InputCapability
from .channels import Exchange, Pact, Pipeline
from .handles import InputHandle, LoopHandle, ProbeHandle
from .notificator import FrontierNotificator, Notificator
from .operator import OperatorBuilder, OperatorError, OperatorInfo, source
from .scope import Scope
from .stream import Stream
from .worker import Worker

__all__ = [
    "Capability", "CapabilityError", "CapabilitySet", "Exchange", "FrontierNotificator",
    "InputCapability", "InputHandle", "LoopHandle", "Notificator", "OperatorBuilder",
    "OperatorError", "OperatorInfo", "Pact", "Pipeline", "ProbeHandle", "Scope", "Stream",
    "Worker", "source",
]
