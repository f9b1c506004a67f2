"""Dataflow construction and scheduling: workers, scopes, streams, operators and handles.

This layer knows how operators connect and when they run, not how bytes move between
workers (that is :mod:`sparktimely.comm`). It knows streams, scopes and workers as
:class:`StreamCore`, :class:`ScopeCore` and :class:`WorkerCore`; the operator library
assembles the concrete ``Stream`` and ``Scope`` from them (see :mod:`sparktimely.ops`), and
:mod:`sparktimely.worker` the ``Worker``. Layers above watch a worker through one seam,
:class:`WorkerObserver`.

>>> from sparktimely.dataflow import StreamCore
>>> import sparktimely as st
>>> issubclass(st.Stream, StreamCore)
True
"""
from .builder import FrontierInterest, OperatorBuilder, OperatorError, OperatorInfo, source
from .capability import Capability, CapabilityError, CapabilitySet, InputCapability
from .channels import Exchange, Pact, Pipeline
from .handles import InputHandle, LoopHandle, ProbeHandle
from .notificator import FrontierNotificator, Notificator
from .observer import WorkerObserver
from .scope import Activator, ScopeCore
from .stream import StreamCore
from .subgraph import Dataflow
from .worker import WorkerCore

__all__ = [
    "Activator", "Capability", "CapabilityError", "CapabilitySet", "Dataflow", "Exchange",
    "FrontierInterest", "FrontierNotificator", "InputCapability", "InputHandle", "LoopHandle",
    "Notificator", "OperatorBuilder", "OperatorError", "OperatorInfo", "Pact", "Pipeline",
    "ProbeHandle", "ScopeCore", "StreamCore", "WorkerCore", "WorkerObserver", "source",
]
