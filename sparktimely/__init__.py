"""sparktimely: timely dataflow (the Naiad model) for Python, run on Spark.

>>> import sparktimely as st
>>> st.example(lambda scope: scope.to_stream(range(5)).map(lambda x: x * 2).capture()).extract()
[(0, [0, 2, 4, 6, 8])]

``st.__version__`` is the installed distribution's version ("0+unknown" in a source checkout
that was never installed):

>>> st.__version__ == "0+unknown" or st.__version__[0].isdigit()
True
"""
from importlib import metadata as _metadata

from . import _compiled

_compiled.install()           # before any module that may be compiled is imported


try:
    __version__ = _metadata.version("sparktimely")
except _metadata.PackageNotFoundError:
    __version__ = "0+unknown"

from .dataflow import (
    Capability, CapabilityError, CapabilitySet, Exchange, FrontierInterest, FrontierNotificator,
    InputCapability, InputHandle, LoopHandle, Notificator, OperatorBuilder, OperatorError,
    OperatorInfo, Pipeline, ProbeHandle, source,
)
from .hashing import stable_hash
from .execute import (WorkerError, example, execute, execute_directly, execute_from_args,
                      timely_parser)
from .ops import (Capture, Err, EventLink, EventReader, EventWriter, Ok, Scope, Sequencer,
                  Stream, UnorderedHandle, replay_into)
from . import logging
from .worker import Worker
from .progress import Antichain, ChangeBatch, CycleError, MutableAntichain, Product
from . import io
from .io import RecoveryError

# The submodules io and logging are public but left out: a star import would replace the
# standard library's io and logging (docs/API.md, Modules).
__all__ = [
    "Antichain", "Capability", "CapabilityError", "CapabilitySet", "Capture", "ChangeBatch",
    "CycleError", "Err", "EventLink", "EventReader", "EventWriter", "Exchange",
    "FrontierInterest", "FrontierNotificator", "InputCapability", "InputHandle", "LoopHandle",
    "MutableAntichain", "Notificator", "Ok", "OperatorBuilder", "OperatorError", "OperatorInfo",
    "Pipeline", "ProbeHandle", "Product", "RecoveryError", "Scope", "Sequencer", "Stream", "UnorderedHandle",
    "Worker", "WorkerError", "example", "execute", "execute_directly", "execute_from_args",
    "replay_into", "source", "stable_hash", "timely_parser",
]
