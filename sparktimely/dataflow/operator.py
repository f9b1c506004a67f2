"""Building operators: the generic ``OperatorBuilder`` and what the dataflow schedules.

Every operator, from ``map`` to user-written ones, is built here: it gets inputs (each fed
through a pact), outputs, an internal connection (path summaries from inputs to outputs)
and a logic function the worker calls whenever the operator is activated: when data
arrives, when a watched input frontier moves, or when someone activates it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..progress.timestamp import ENTER, LEAVE, Timestamp, check_summary
from .capability import Capability
from .channels import Pact, Pipeline, as_pact
from .ports import InputPort, OutputHandle, OutputPort

if TYPE_CHECKING:
    from .scope import Scope
    from .stream import Stream


class OperatorError(RuntimeError):
    """An operator's logic raised; the message names the operator."""


@dataclass(frozen=True)
class OperatorInfo:
    """What an operator's constructor learns about it: ``name``, ``index`` within its
    dataflow and ``address`` (use ``scope.activator_for(info.address)`` to reschedule it)."""

    name: str
    index: int
    address: tuple


class Operator:
    """An operator as the dataflow schedules it."""

    __slots__ = ("name", "index", "address", "inputs", "outputs", "handles",
                 "logic", "watches_frontiers")

    def __init__(self, name: str, index: int, address: tuple) -> None:
        self.name = name
        self.index = index
        self.address = address
        self.inputs: list[InputPort] = []
        self.outputs: list[OutputPort] = []
        self.handles: list[OutputHandle] = []
        self.logic: Callable[[], Any] | None = None
        self.watches_frontiers = False

    def schedule(self) -> bool:
        """Run the logic once; True if it asks to be scheduled again."""
        try:
            again = self.logic() if self.logic is not None else False
            for handle in self.handles:
                handle._flush()
        except OperatorError:
            raise
        except Exception as error:
            raise OperatorError(
                f"operator {self.name!r} (address {self.address}) raised "
                f"{type(error).__name__}: {error}") from error
        return bool(again)


def _normalize_connection(connection, count: int, what: str) -> list[list]:
    """A connection is, per port on the other side, None (no path), a summary or a list."""
    if connection is None:
        return [[0] for _ in range(count)]
    if len(connection) != count:
        raise ValueError(f"{what} connection lists {len(connection)} entries for {count} ports")
    result = []
    for entry in connection:
        paths = [] if entry is None else list(entry) if isinstance(entry, (list, tuple)) else [entry]
        for summary in paths:
            check_summary(summary)
        result.append(paths)
    return result


class OperatorBuilder:
    """Builds an operator with any number of inputs and outputs.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     numbers = scope.to_stream(range(3))
    ...     builder = st.OperatorBuilder("Double", scope)
    ...     input = builder.new_input(numbers, st.Pipeline)
    ...     output, doubled = builder.new_output()
    ...     def ctor(capabilities):
    ...         capabilities[0].drop()
    ...         def logic(frontiers):
    ...             for cap, batch in input:
    ...                 output.session(cap).give_batch([2 * x for x in batch])
    ...         return logic
    ...     builder.build(ctor)
    ...     return doubled.capture()
    >>> st.example(build).extract()
    [(0, [0, 2, 4])]
    """

    def __init__(self, name: str, scope: "Scope") -> None:
        self.scope = scope
        self._dataflow = scope.dataflow
        self._operator = self._dataflow.reserve_operator(name, scope)
        self._input_streams: list[tuple["Stream", Pact]] = []
        self._inputs: list[InputPort] = []
        # _summaries[i][o]: path summaries from input i to output o
        self._summaries: list[list[list]] = []
        self._built = False

    @property
    def index(self) -> int:
        return self._operator.index

    @property
    def address(self) -> tuple:
        return self._operator.address

    def new_input(self, stream: "Stream", pact: Pact | type, connection=None) -> InputPort:
        """Add an input fed by ``stream`` through ``pact``; returns the logic's handle on it.

        ``connection`` lists, per output, the path summary (or None for no path); by default
        the input reaches every output, present and future, unchanged.
        """
        self._check_open()
        self.scope._check_owns(stream)
        outputs = len(self._operator.outputs)
        self._summaries.append(_normalize_connection(connection, outputs, "input"))
        self._input_streams.append((stream, as_pact(pact)))
        handle = InputPort(self._dataflow, -1, self._operator.index, None)
        self._inputs.append(handle)
        return handle

    def new_output(self, connection=None) -> tuple[OutputHandle, "Stream"]:
        """Add an output; returns ``(output_handle, stream)``.

        ``connection`` lists, per input, the path summary (or None); by default every input
        reaches the new output unchanged.
        """
        self._check_open()
        from .stream import Stream
        summaries = _normalize_connection(connection, len(self._inputs), "output")
        for row, paths in zip(self._summaries, summaries):
            row.append(paths)
        port = OutputPort(self._dataflow, -1, self.scope.kind)
        self._operator.outputs.append(port)
        handle = OutputHandle(port, len(self._operator.outputs) - 1)
        self._operator.handles.append(handle)
        return handle, Stream(self.scope, port)

    def _check_open(self) -> None:
        if self._built:
            raise RuntimeError(f"operator {self._operator.name!r} is already built")

    def build(self, ctor: Callable[[list[Capability]], Callable[[list], None]]) -> None:
        """Finish the operator: ``ctor(capabilities)`` returns ``logic(frontiers)``, which
        runs each time the operator is scheduled."""
        def reschedule_never(capabilities):
            logic = ctor(capabilities)

            def run(frontiers):
                logic(frontiers)
                return False
            return run
        self.build_reschedule(reschedule_never)

    def build_reschedule(self, ctor: Callable[[list[Capability]], Callable[[list], bool]]) -> None:
        """Like :meth:`build`, but ``logic(frontiers)`` returns True to be scheduled again."""
        self._check_open()
        self._built = True
        operator = self._operator
        operator.inputs = self._inputs
        self._dataflow.add_operator(operator, self._summaries,
                                    [stream.scope.kind for stream, _ in self._input_streams])
        for handle, (stream, pact) in zip(self._inputs, self._input_streams):
            self._dataflow.connect(stream._port, handle, pact)
        frontiers = [handle.frontier for handle in self._inputs]
        for i, handle in enumerate(self._inputs):
            handle._set_outputs(operator.outputs, self._summaries[i])
        capabilities = [Capability(self.scope.kind.minimum(), port) for port in operator.outputs]
        logic = ctor(capabilities)
        del capabilities
        operator.logic = lambda: logic(frontiers)
        operator.watches_frontiers = True


def unary_operator(stream: "Stream", pact, name: str, ctor, *, frontier: bool) -> "Stream":
    builder = OperatorBuilder(name, stream.scope)
    input = builder.new_input(stream, pact)
    output, result = builder.new_output()

    def build(capabilities):
        logic = ctor(capabilities[0], OperatorInfo(name, builder.index, builder.address))
        return lambda frontiers: logic(input, output)
    builder.build(build)
    builder._operator.watches_frontiers = frontier
    return result


def binary_operator(stream1: "Stream", stream2: "Stream", pact1, pact2, name: str, ctor,
                    *, frontier: bool) -> "Stream":
    builder = OperatorBuilder(name, stream1.scope)
    input1 = builder.new_input(stream1, pact1)
    input2 = builder.new_input(stream2, pact2)
    output, result = builder.new_output()

    def build(capabilities):
        logic = ctor(capabilities[0], OperatorInfo(name, builder.index, builder.address))
        return lambda frontiers: logic(input1, input2, output)
    builder.build(build)
    builder._operator.watches_frontiers = frontier
    return result


def notify_operator(streams: Sequence["Stream"], pacts: Sequence, name: str,
                    init_times: Sequence[Timestamp], logic) -> "Stream":
    """An operator with a Notificator: ``logic(*inputs, output, notificator)``."""
    from .notificator import Notificator
    builder = OperatorBuilder(name, streams[0].scope)
    inputs = [builder.new_input(s, p) for s, p in zip(streams, pacts)]
    output, result = builder.new_output()
    activate = builder.scope.activator_for(builder.address).activate

    def build(capabilities):
        notificator = Notificator([i.frontier for i in inputs], activate)
        for time in init_times:
            notificator.notify_at(capabilities[0].delayed(time))
        capabilities[0].drop()

        def run(frontiers):
            logic(*inputs, output, notificator)
            notificator._after_logic()
        return run
    builder.build(build)
    return result


def sink_operator(stream: "Stream", pact, name: str, logic) -> InputPort:
    builder = OperatorBuilder(name, stream.scope)
    input = builder.new_input(stream, pact)
    builder.build(lambda capabilities: lambda frontiers: logic(input))
    return input


def source(scope: "Scope", name: str, ctor) -> "Stream":
    """An operator with no inputs: ``ctor(capability, info)`` returns ``logic(output)``.

    The logic runs once at start and again whenever the operator is activated (see
    ``scope.activator_for(info.address)``). Drop the capability when done.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     def ctor(cap, info):
    ...         def logic(output):
    ...             output.session(cap).give_iterator(["a", "b"])
    ...             cap.drop()
    ...         return logic
    ...     return st.source(scope, "Letters", ctor).capture()
    >>> st.example(build).extract()
    [(0, ['a', 'b'])]
    """
    builder = OperatorBuilder(name, scope)
    output, result = builder.new_output()

    def build(capabilities):
        logic = ctor(capabilities[0], OperatorInfo(name, builder.index, builder.address))
        return lambda frontiers: logic(output)
    builder.build(build)
    builder._operator.watches_frontiers = False
    return result


def passthrough_operator(name: str, scope: "Scope", out_scope: "Scope",
                 time_map: Callable[[Timestamp], Timestamp], summary) -> tuple[InputPort, "Stream"]:
    """An operator that moves batches unchanged but re-stamps their time (enter, leave,
    feedback). It needs no capabilities: each batch is consumed and re-sent in one step."""
    dataflow = scope.dataflow
    operator = dataflow.reserve_operator(name, scope)
    input = InputPort(dataflow, -1, operator.index, None)
    output = OutputPort(dataflow, -1, out_scope.kind)
    operator.inputs = [input]
    operator.outputs = [output]
    dataflow.add_operator(operator, [[[summary]]], [scope.kind], [out_scope.kind])
    operator.watches_frontiers = False
    queue = input.queue
    update = dataflow.update
    push = output.push

    def logic() -> None:
        location = input.location
        while queue:
            time, batch, count = queue.popleft()
            update(location, time, -count)
            push(time_map(time), batch)
    operator.logic = logic
    from .stream import Stream
    return input, Stream(out_scope, output)


def enter(stream: "Stream", inner: "Scope") -> "Stream":
    """``stream`` inside the nested scope ``inner``."""
    if inner.parent is not stream.scope:
        raise ValueError(f"enter: scope {inner.name!r} is not nested directly in the "
                         f"stream's scope {stream.scope.name!r}")
    if inner.kind == stream.scope.kind:                    # a region: same times
        return type(stream)(inner, stream._port)
    input, result = passthrough_operator("Enter", stream.scope, inner, ENTER.results_in, ENTER)
    stream.scope.dataflow.connect(stream._port, input, Pipeline())
    return result


def leave(stream: "Stream") -> "Stream":
    """``stream`` in the scope enclosing its own."""
    scope = stream.scope
    if scope.parent is None:
        raise ValueError("leave: the stream is already in the dataflow's top-level scope")
    if scope.kind == scope.parent.kind:
        return type(stream)(scope.parent, stream._port)
    input, result = passthrough_operator("Leave", scope, scope.parent, LEAVE.results_in, LEAVE)
    scope.dataflow.connect(stream._port, input, Pipeline())
    return result

