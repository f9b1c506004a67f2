"""Parallelization contracts (pacts) and the channels they build between operators.

``Pipeline`` keeps records on the worker that produced them; ``Exchange(route)`` sends each
record to worker ``route(record) % peers``. On a single worker both are a local queue.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .ports import batch_length

if TYPE_CHECKING:
    from .ports import InputPort, OutputPort


class LocalPusher:
    """Delivers batches to an input queue on this worker and accounts for them."""

    __slots__ = ("_queue", "_update", "_location", "_activate", "_operator")

    def __init__(self, target: "InputPort") -> None:
        self._queue = target.queue
        self._update = target.dataflow.update
        self._location = target.location
        self._activate = target.dataflow.activate
        self._operator = target.operator

    def push(self, time, batch) -> None:
        self._update(self._location, time, batch_length(batch))
        self._queue.append((time, batch))
        self._activate(self._operator)


class Pact:
    """How records move from an output to an input."""

    def connect(self, source: "OutputPort", target: "InputPort") -> None:
        raise NotImplementedError


class Pipeline(Pact):
    """Records stay on the worker that produced them (no data movement)."""

    def connect(self, source: "OutputPort", target: "InputPort") -> None:
        source.pushers.append(LocalPusher(target))

    def __repr__(self) -> str:
        return "Pipeline"


class Exchange(Pact):
    """Each record goes to worker ``route(record) % peers``.

    ``Exchange(lambda x: x)`` routes ints by value; for Arrow streams use
    ``Exchange(key="column")`` (or several columns).
    """

    def __init__(self, route: Callable[[Any], int] | None = None, *,
                 key: str | list[str] | None = None) -> None:
        if (route is None) == (key is None):
            raise ValueError("Exchange needs exactly one of a route function or key=column")
        self.route = route
        self.key = key

    def connect(self, source: "OutputPort", target: "InputPort") -> None:
        dataflow = source.dataflow
        if dataflow.peers == 1:
            source.pushers.append(LocalPusher(target))
        else:
            source.pushers.append(dataflow.worker.exchange_pusher(self, source, target))

    def __repr__(self) -> str:
        return f"Exchange({self.key or self.route!r})"


def as_pact(pact: Pact | type) -> Pact:
    """Accept ``Pipeline`` as well as ``Pipeline()``."""
    if isinstance(pact, type) and issubclass(pact, Pact):
        pact = pact()
    if not isinstance(pact, Pact):
        raise TypeError(f"expected a pact (Pipeline or Exchange(route)), got {pact!r}")
    return pact


class Broadcast(Pact):
    """Every record goes to every worker."""

    def connect(self, source: "OutputPort", target: "InputPort") -> None:
        dataflow = source.dataflow
        if dataflow.peers == 1:
            source.pushers.append(LocalPusher(target))
        else:
            source.pushers.append(dataflow.worker.broadcast_pusher(source, target))
