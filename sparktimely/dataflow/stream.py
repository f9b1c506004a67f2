"""Streams of timestamped batches, with the generic operator constructors.

The operator library (``map``, ``exchange``, ``aggregate``, ...) lives in
:mod:`sparktimely.ops`, which adds its methods to :class:`Stream`, as timely's extension
traits add methods to its ``Stream`` type.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..progress.timestamp import Timestamp
from .operator import binary_operator, enter, leave, notify_operator, sink_operator, unary_operator

if TYPE_CHECKING:
    from .handles import LoopHandle
    from .ports import OutputPort
    from .scope import Scope


class Stream:
    """A stream of timestamped batches produced by one operator output, in one scope."""

    __slots__ = ("scope", "_port")

    def __init__(self, scope: "Scope", port: "OutputPort") -> None:
        self.scope = scope
        self._port = port

    def unary(self, pact, name: str, ctor: Callable) -> "Stream":
        """A one-input operator: ``ctor(capability, info)`` returns ``logic(input, output)``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def ctor(cap, info):
        ...         cap.drop()
        ...         def logic(input, output):
        ...             for cap, batch in input:
        ...                 output.session(cap).give_batch([x * 10 for x in batch])
        ...         return logic
        ...     return scope.to_stream([1, 2]).unary(st.Pipeline, "Times10", ctor).capture()
        >>> st.example(build).extract()
        [(0, [10, 20])]
        """
        return unary_operator(self, pact, name, ctor, frontier=False)

    def unary_frontier(self, pact, name: str, ctor: Callable) -> "Stream":
        """Like :meth:`unary`, and also scheduled whenever ``input.frontier`` changes."""
        return unary_operator(self, pact, name, ctor, frontier=True)

    def unary_notify(self, pact, name: str, init_times: Sequence[Timestamp],
                     logic: Callable) -> "Stream":
        """A one-input operator with notifications: ``logic(input, output, notificator)``.

        ``init_times`` are notifications requested up front.
        """
        return notify_operator([self], [pact], name, init_times, logic)

    def binary(self, other: "Stream", pact1, pact2, name: str, ctor: Callable) -> "Stream":
        """A two-input operator: ``ctor(capability, info)`` returns
        ``logic(input1, input2, output)``."""
        return binary_operator(self, other, pact1, pact2, name, ctor, frontier=False)

    def binary_frontier(self, other: "Stream", pact1, pact2, name: str, ctor: Callable) -> "Stream":
        """Like :meth:`binary`, and also scheduled whenever an input frontier changes."""
        return binary_operator(self, other, pact1, pact2, name, ctor, frontier=True)

    def binary_notify(self, other: "Stream", pact1, pact2, name: str,
                      init_times: Sequence[Timestamp], logic: Callable) -> "Stream":
        """A two-input operator with notifications:
        ``logic(input1, input2, output, notificator)``."""
        return notify_operator([self, other], [pact1, pact2], name, init_times, logic)

    def sink(self, pact, name: str, logic: Callable) -> None:
        """A terminal operator: ``logic(input)`` runs whenever data arrives or the input
        frontier changes."""
        sink_operator(self, pact, name, logic)

    def enter(self, scope: "Scope") -> "Stream":
        """This stream inside ``scope``, a scope nested directly in this stream's scope."""
        return enter(self, scope)

    def leave(self) -> "Stream":
        """This stream in the scope enclosing its own."""
        return leave(self)

    def connect_loop(self, handle: "LoopHandle") -> None:
        """Send this stream around the loop created with ``feedback``/``loop_variable``."""
        handle._connect(self)

    def __repr__(self) -> str:
        return f"Stream(scope={self.scope.name!r})"
