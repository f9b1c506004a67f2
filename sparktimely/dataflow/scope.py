"""Scopes: where operators live, with a timestamp type; nested scopes for iteration."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..progress.timestamp import Product, TimeKind, advance, check_summary
from .channels import Pipeline
from .containers import arrow_batches
from .handles import InputHandle, LoopHandle
from .operator import OperatorBuilder, passthrough_operator, source
from .ports import BATCH_SIZE
from .stream import Stream

if TYPE_CHECKING:
    from .worker import Dataflow


class Activator:
    """Schedules an operator again: ``scope.activator_for(info.address).activate()``."""

    __slots__ = ("_dataflow", "_index")

    def __init__(self, dataflow: "Dataflow", index: int) -> None:
        self._dataflow = dataflow
        self._index = index

    def activate(self) -> None:
        self._dataflow.activate(self._index)


class Scope:
    """A place to build operators; all of a scope's streams share its timestamp type."""

    def __init__(self, dataflow: "Dataflow", parent: "Scope | None", kind: TimeKind,
                 address: tuple, name: str) -> None:
        self.dataflow = dataflow
        self.parent = parent
        self.kind = kind
        self.address = address
        self.name = name
        self._children = 0

    @property
    def index(self) -> int:
        """This worker's index."""
        return self.dataflow.worker.index

    @property
    def peers(self) -> int:
        """The number of workers."""
        return self.dataflow.worker.peers

    def _check_owns(self, stream: Stream) -> None:
        if not isinstance(stream, Stream):
            raise TypeError(f"expected a Stream, got {type(stream).__name__}")
        if stream.scope is not self:
            raise ValueError(
                f"stream of scope {stream.scope.name!r} used in scope {self.name!r}: "
                f"bring it in with stream.enter(scope) or out with stream.leave()")

    def on_drop(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` if the dataflow is dropped with ``worker.drop_dataflow`` (to
        release what its operators hold outside it, such as shared traces)."""
        self.dataflow.on_drop(callback)

    def activator_for(self, address: tuple) -> Activator:
        """An activator for the operator at ``address`` (from its ``info.address``)."""
        return Activator(self.dataflow, address[-1])

    # -- inputs --------------------------------------------------------------------------

    def to_stream(self, items: Iterable[Any]) -> Stream:
        """A stream of ``items`` at the minimum time, produced on every worker.

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.to_stream("abc").capture()).extract()
        [(0, ['a', 'b', 'c'])]
        """
        batches = _as_batches(items)

        def ctor(capability, info):
            def logic(output):
                session = output.session(capability)
                for batch in batches:
                    session.give_batch(batch)
                batches.clear()
                capability.drop()
            return logic
        return source(self, "ToStream", ctor)

    def new_input(self) -> tuple[InputHandle, Stream]:
        """A new input handle and the stream of what is sent into it."""
        handle = InputHandle()
        return handle, self.input_from(handle)

    def input_from(self, handle: InputHandle) -> Stream:
        """The stream of what is sent into ``handle`` (one handle may feed several dataflows)."""
        if self.kind.depth:
            raise ValueError("inputs can only be created in a dataflow's top-level scope")
        builder = OperatorBuilder("Input", self)
        _, stream = builder.new_output()

        def ctor(capabilities):
            capabilities[0].drop()
            return lambda frontiers: None
        builder.build(ctor)
        builder._operator.watches_frontiers = False
        handle._bind(stream._port)
        self.dataflow.add_input_handle(handle, builder.index)
        return stream

    def concatenate(self, streams: Sequence[Stream]) -> Stream:
        """One stream with the records of all ``streams``."""
        builder = OperatorBuilder("Concatenate", self)
        inputs = [builder.new_input(stream, Pipeline) for stream in streams]
        output, result = builder.new_output()

        def ctor(capabilities):
            capabilities[0].drop()

            def logic(frontiers):
                for input in inputs:
                    for cap, batch in input:
                        output.session(cap).give_batch(batch)
            return logic
        builder.build(ctor)
        builder._operator.watches_frontiers = False
        return result

    # -- loops and nesting -----------------------------------------------------------------

    def feedback(self, summary) -> tuple[LoopHandle, Stream]:
        """A loop: records given to the handle come back on the stream, their time advanced
        by ``summary`` (which must be greater than zero)."""
        check_summary(summary)
        name = f"Feedback({summary!r})"
        input, stream = passthrough_operator(name, self, self,
                                             lambda t: advance(t, summary), summary)
        handle = LoopHandle(self, input, summary)
        self.dataflow.add_loop(handle)
        return handle, stream

    def loop_variable(self, summary) -> tuple[LoopHandle, Stream]:
        """A loop in an iterative scope; an int ``n`` means ``Product(0, n)``."""
        if self.kind.depth == 0:
            raise ValueError("loop_variable needs an iterative scope (scope.iterative(...))")
        if summary.__class__ is int:
            summary = Product(0, summary)
        return self.feedback(summary)

    def _child(self, kind: TimeKind, what: str) -> "Scope":
        self._children += 1
        return Scope(self.dataflow, self, kind, self.address + (-self._children,),
                     f"{self.name}/{what}-{self._children}")

    def iterative(self, build: Callable[["Scope"], Any]) -> Any:
        """A nested scope whose times are ``Product(outer, iteration)``; returns ``build(inner)``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def loop(inner):
        ...         handle, looped = inner.loop_variable(1)
        ...         doubled = scope.to_stream([1]).enter(inner).concat(looped).map(lambda x: 2 * x)
        ...         doubled.filter(lambda x: x < 100).connect_loop(handle)
        ...         return doubled.filter(lambda x: x >= 100).leave()
        ...     return scope.iterative(loop).capture()
        >>> st.example(build).extract()
        [(0, [128])]
        """
        return build(self._child(self.kind.nested(), "iterative"))

    def region(self, build: Callable[["Scope"], Any]) -> Any:
        """A nested scope with the same times, to group operators; returns ``build(inner)``."""
        return build(self._child(self.kind, "region"))


def _as_batches(items: Any) -> list:
    if not hasattr(items, "schema"):                       # not a pyarrow Table or RecordBatch
        items = list(items)
    arrow = arrow_batches(items, what="to_stream")
    if arrow is not None:
        return arrow[0]
    return [items[i:i + BATCH_SIZE] for i in range(0, len(items), BATCH_SIZE)]

