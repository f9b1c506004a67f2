"""Building operators: the generic ``OperatorBuilder`` and what the dataflow schedules.

Every operator, from ``map`` to user-written ones, is built here: it gets inputs (each fed
through a pact), outputs, an internal connection (path summaries from inputs to outputs)
and a logic function the worker calls whenever the operator is activated: when data
arrives, when a watched input frontier moves, or when someone activates it.
"""
from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Sequence, TypeVar

from ..comm import PeerLost
from ..errors import (ExchangeSchemaError, describe, require_function, require_type,
                      short_repr)
from ..progress.timestamp import LEAVE, EnterSummary, Timestamp, advance, check_summary
from .capability import Capability
from .channels import Pact, Pipeline, as_pact
from .notificator import Notificator
from .ports import InputPort, OutputHandle, OutputPort, batch_length

if TYPE_CHECKING:
    from .scope import ScopeCore
    from .stream import StreamCore
    from .subgraph import Dataflow

S = TypeVar("S", bound="StreamCore")


class OperatorError(RuntimeError):
    """An operator's logic raised; the message names the operator.

    >>> import sparktimely as st
    >>> try:
    ...     st.example(lambda scope: scope.to_stream([0]).map(lambda x: 1 // x).probe())
    ... except st.OperatorError as error:
    ...     print(error)
    operator 'Map' (address (0, 1)) raised ZeroDivisionError on the record 0: integer division or modulo by zero
    """


TOLD_ALREADY = (OperatorError, ExchangeSchemaError, PeerLost)
"""Errors an operator's logic passes on as they are: a stream's (an operator downstream's,
an exchange's) or the transport's, which name their place themselves."""

_NO_RECORD: Any = object()


def operator_failed(name: str, address: tuple, error: Exception,
                    record: Any = _NO_RECORD) -> Exception:
    """The error to raise for operator ``name`` at ``address`` whose logic raised ``error``
    (the user's function on ``record``, if given): an :class:`OperatorError` naming the
    operator (and the record), or ``error`` itself if it is one of :data:`TOLD_ALREADY`.

    >>> operator_failed("Map", (0, 1), KeyError("a"), {"b": 2})
    OperatorError("operator 'Map' (address (0, 1)) raised KeyError on the record {'b': 2}: 'a'")
    >>> operator_failed("Map", (0, 1), KeyError("a"))
    OperatorError("operator 'Map' (address (0, 1)) raised KeyError: 'a'")
    """
    if isinstance(error, TOLD_ALREADY):
        return error
    told = describe(error)
    if record is not _NO_RECORD:
        kind = type(error).__name__
        told = f"{kind} on the record {short_repr(record)}{told[len(kind):]}"
    return OperatorError(f"operator {name!r} (address {address}) raised {told}")


def require_one_argument(operator: str, logic: Callable) -> None:
    """A TypeError naming ``operator`` unless ``logic`` can be called with one argument (the
    input): a sink takes its logic directly, and a constructor ``ctor(capability, info)``
    given instead would fail only once the dataflow runs.

    >>> require_one_argument("Out (sink)", lambda cap, info: None)
    Traceback (most recent call last):
    TypeError: Out (sink): a sink takes logic(input), called with the input, not a constructor; the function given takes (cap, info)
    """
    try:
        signature = inspect.signature(logic)
    except (TypeError, ValueError):         # no signature to read (some builtins): let it run
        return
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(f"{operator}: a sink takes logic(input), called with the input, not "
                        f"a constructor; the function given takes {signature}") from None


def returned_logic(value: Any) -> Any:
    """``value``, what an operator's constructor returned, if it is the logic function; a
    TypeError saying so otherwise (told where the operator is built, not when it first runs).

    >>> returned_logic(None)
    Traceback (most recent call last):
    TypeError: the constructor returned None, not the logic function to run when the operator is scheduled (does it end with return logic?)
    """
    if not callable(value):
        raise TypeError(f"the constructor returned {value!r:.60}, not the logic function to "
                        f"run when the operator is scheduled (does it end with return logic?)")
    return value


@dataclass(frozen=True)
class OperatorInfo:
    """What an operator's constructor learns about it: ``name``, ``index`` within its
    dataflow and ``address`` (use ``scope.activator_for(info.address)`` to reschedule it).

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     print(info)
    ...     cap.drop()
    ...     return lambda output: None
    >>> _ = st.example(lambda scope: st.source(scope, "Named", ctor))
    OperatorInfo(name='Named', index=0, address=(0, 0))
    """

    name: str
    index: int
    address: tuple


class FrontierInterest(enum.Enum):
    """When a change of one input's frontier schedules an operator (timely's ``FrontierInterest``; set with
    ``OperatorBuilder.set_notify_for(input, interest)``).

    >>> import sparktimely as st
    >>> [interest.name for interest in st.FrontierInterest]
    ['ALWAYS', 'IF_CAPABILITY', 'NEVER']
    """

    ALWAYS = "always"
    """Every change of the input's frontier schedules the operator (the default)."""
    IF_CAPABILITY = "if_capability"
    """Only while the operator holds a capability."""
    NEVER = "never"
    """Never: only arriving data and activations schedule the operator."""


class Operator:
    """An operator as the dataflow schedules it."""

    __slots__ = ("name", "index", "address", "inputs", "outputs", "handles", "logic",
                 "watches_frontiers", "interest", "poked", "blocked", "gated", "activations",
                 "_seen")

    def __init__(self, name: str, index: int, address: tuple) -> None:
        self.name = name
        self.index = index
        self.address = address
        self.inputs: list[InputPort] = []
        self.outputs: list[OutputPort] = []
        self.handles: list[OutputHandle] = []
        self.logic: Callable[[], Any] | None = None
        self.watches_frontiers = False
        self.interest: list[FrontierInterest] | None = None   # None: as watches_frontiers says
        self.poked = True         # activated by an Activator, by asking again, or at start
        self.blocked = False      # lazily given output waits for room downstream
        self.gated = False        # an input holds batches back (InputPort.gate)
        self.activations = 0      # how many times the logic ran: an InputCapability's era
        self._seen: list[list] = []

    def schedule(self) -> bool:
        """Run the logic once (unless nothing it cares about happened); True if it asks to
        be scheduled again or has output waiting for room downstream."""
        try:
            if self.blocked or self.interest is not None:
                if self.blocked:
                    if self._drain():
                        return True
                    self.blocked = False
                if not self._wanted():
                    return False
            self.poked = False
            if self.gated:
                for input in self.inputs:
                    input.hold_back()
            again = self.logic() if self.logic is not None else False
            self.activations += 1
            for handle in self.handles:
                if handle._flush():
                    self.blocked = True
        except TOLD_ALREADY:
            raise               # the stream's, or the transport's (sending), not the operator's
        except Exception as error:
            raise operator_failed(self.name, self.address, error) from error
        if self.blocked or self.interest is not None:
            self._seen = [input.frontier.frontier() for input in self.inputs]
        if again:
            self.poked = True
        return bool(again) or self.blocked

    def _drain(self) -> bool:
        """Send lazily given output while there is room; True if some still waits."""
        return any([handle._drain() for handle in self.handles])

    def _wanted(self) -> bool:
        """Whether to run the logic: data waits, someone activated the operator, or the
        frontier of an input it is interested in moved since it last ran."""
        if self.poked or any(input.queue for input in self.inputs):
            return True
        default = FrontierInterest.ALWAYS if self.watches_frontiers else FrontierInterest.NEVER
        interests = self.interest or [default] * len(self.inputs)
        holds = any(output.held for output in self.outputs)
        for input, before, interest in zip(self.inputs, self._seen, interests):
            if (interest is FrontierInterest.ALWAYS or
                    (interest is FrontierInterest.IF_CAPABILITY and holds)):
                if input.frontier.frontier() != before:
                    return True
        return False


def _normalize_connection(connection, count: int, what: str) -> list[list]:
    """A connection is, per port on the other side, None (no path), a summary or a list."""
    if connection is None:
        return [[0] for _ in range(count)]
    if len(connection) != count:
        other = "output" if what == "input" else "input"
        raise ValueError(f"{what} connection lists {len(connection)} entries, one per "
                         f"{other} the operator has so far ({count}): an {what}'s connection "
                         f"names the {other}s made before it; those made after it reach it "
                         f"unchanged unless their own connection says otherwise")
    result = []
    for entry in connection:
        paths = [] if entry is None else list(entry) if isinstance(entry, (list, tuple)) else [entry]
        for summary in paths:
            check_summary(summary)
        result.append(paths)
    return result


def connect(dataflow: "Dataflow", source: OutputPort, target: InputPort, pact: Pact) -> None:
    """Feed ``target`` from ``source`` through ``pact``; ``source`` learns of the queue it
    fills (for rate-controlled output)."""
    dataflow.connect(source, target, pact)
    source.consumers.append(target)


class OperatorBuilder(Generic[S]):
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

    def __init__(self, name: str, scope: "ScopeCore[S]") -> None:
        self.scope = scope
        self._dataflow = scope.dataflow
        self._operator = self._dataflow.reserve_operator(name, scope)
        self._input_streams: list[tuple["StreamCore", Pact]] = []
        self._inputs: list[InputPort] = []
        # _summaries[i][o]: path summaries from input i to output o
        self._summaries: list[list[list]] = []
        self._interest: list[FrontierInterest] | None = None
        self._notify = True
        self._built = False

    @property
    def index(self) -> int:
        """The operator's index in its dataflow.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     numbers = scope.to_stream([1])                    # operator 0
        ...     builder = st.OperatorBuilder("Named", scope)
        ...     print(builder.index)
        ...     builder.build(lambda capabilities: lambda frontiers: None)
        >>> st.example(build)
        1
        """
        return self._operator.index

    @property
    def address(self) -> tuple:
        """The operator's address (for ``scope.activator_for``).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Named", scope)
        ...     print(builder.address)
        ...     builder.build(lambda capabilities: lambda frontiers: None)
        >>> st.example(build)
        (0, 0)
        """
        return self._operator.address

    def operator_info(self) -> "OperatorInfo":
        """The operator's name, index and address.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Named", scope)
        ...     print(builder.operator_info())
        ...     builder.build(lambda capabilities: lambda frontiers: None)
        >>> st.example(build)
        OperatorInfo(name='Named', index=0, address=(0, 0))
        """
        return OperatorInfo(self._operator.name, self.index, self.address)

    def set_notify(self, notify: bool) -> None:
        """Whether changes of the input frontiers schedule the operator at all (timely's
        ``set_notify``; default True). An operator without inputs, or one that only reacts
        to data and activations, says False and is not scheduled for frontier changes.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Quiet", scope)
        ...     input = builder.new_input(scope.to_stream([1, 2]), st.Pipeline)
        ...     builder.set_notify(False)
        ...     seen = []
        ...     builder.build(lambda caps: lambda frontiers: seen.extend(b for _, b in input))
        ...     return seen
        >>> st.example(build)
        [[1, 2]]
        """
        self._check_open()
        self._notify = notify

    def set_notify_for(self, input: "int | InputPort", interest: FrontierInterest) -> None:
        """Whether changes of input ``input``'s frontier (its index, or the handle
        :meth:`new_input` returned) schedule the operator (default
        :attr:`FrontierInterest.ALWAYS`).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Runs", scope)
        ...     input = builder.new_input(scope.to_stream([1, 2]), st.Pipeline)
        ...     builder.set_notify_for(input, st.FrontierInterest.NEVER)     # or 0, its index
        ...     runs = []
        ...     builder.build(lambda caps: lambda frontiers: runs.append([b for _, b in input]))
        ...     return runs
        >>> st.example(build)           # at start and for the data, not when the frontier moved
        [[], [[1, 2]]]
        """
        if isinstance(input, InputPort):
            if input not in self._inputs:
                raise ValueError(f"operator {self._operator.name!r}: set_notify_for was given "
                                 f"another operator's input")
            input = self._inputs.index(input)
        if not isinstance(input, int) or not 0 <= input < len(self._inputs):
            raise ValueError(f"operator {self._operator.name!r} has no input {input}")
        interests = self._interest or [FrontierInterest.ALWAYS] * len(self._inputs)
        interests += [FrontierInterest.ALWAYS] * (len(self._inputs) - len(interests))
        interests[input] = FrontierInterest(interest)
        self._interest = interests

    def _connection(self, connection: Sequence | None, count: int, what: str) -> list[list]:
        """``connection`` as a list of path summaries per port on the other side, each one
        that advances this scope's times; errors name the operator."""
        name = self._operator.name
        minimum = self.scope.kind.minimum()
        try:
            paths = _normalize_connection(connection, count, what)
            for summaries in paths:
                for summary in summaries:
                    advance(minimum, summary)
        except ValueError as error:
            raise ValueError(f"operator {name!r}: {error}") from None
        except (TypeError, AttributeError) as error:
            raise TypeError(f"operator {name!r}: an {what} connection's path summary does not "
                            f"advance this scope's times (like {minimum!r}): {error}") from None
        return paths

    def new_input(self, stream: "StreamCore", pact: Pact | type,
                  connection: Sequence | None = None) -> InputPort:
        """Add an input fed by ``stream`` through ``pact``; returns the logic's handle on it.

        ``connection`` lists, per output, the path summary (or None for no path); by default
        the input reaches every output, present and future, unchanged.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Sum", scope)
        ...     input = builder.new_input(scope.to_stream([1, 2]), st.Pipeline)
        ...     sums = []
        ...     def logic(frontiers):
        ...         sums.extend(sum(batch) for _, batch in input)
        ...     builder.build(lambda capabilities: logic)
        ...     return sums
        >>> st.example(build)
        [3]
        """
        self._check_open()
        self.scope._check_owns(stream, self._operator.name)
        outputs = len(self._operator.outputs)
        self._summaries.append(self._connection(connection, outputs, "input"))
        self._input_streams.append((stream, as_pact(pact)))
        handle = InputPort(self._dataflow, -1, self._operator.index, None)
        self._inputs.append(handle)
        return handle

    def new_output(self, connection: Sequence | None = None) -> tuple[OutputHandle, S]:
        """Add an output; returns ``(output_handle, stream)``.

        ``connection`` lists, per input, the path summary (or None); by default every input
        reaches the new output unchanged.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Copy", scope)
        ...     input = builder.new_input(scope.to_stream([1, 2]), st.Pipeline)
        ...     output, copied = builder.new_output()
        ...     def logic(frontiers):
        ...         for cap, batch in input:
        ...             output.give_at(cap, batch)
        ...     builder.build(lambda capabilities: logic)
        ...     return copied.capture()
        >>> st.example(build).extract()
        [(0, [1, 2])]
        """
        self._check_open()
        summaries = self._connection(connection, len(self._inputs), "output")
        for row, paths in zip(self._summaries, summaries):
            row.append(paths)
        port = OutputPort(self._dataflow, -1, self.scope.kind)
        self._operator.outputs.append(port)
        handle = OutputHandle(port, len(self._operator.outputs) - 1)
        self._operator.handles.append(handle)
        return handle, self.scope._stream(port)

    def _check_open(self) -> None:
        if self._built:
            raise RuntimeError(f"operator {self._operator.name!r} is already built")

    def build(self, ctor: Callable[[list[Capability]], Callable[[list], None]]) -> None:
        """Finish the operator: ``ctor(capabilities)`` returns ``logic(frontiers)``, which
        runs each time the operator is scheduled.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Once", scope)
        ...     builder.build(lambda capabilities: lambda frontiers: print("scheduled"))
        >>> st.example(build)                        # no inputs: only at start
        scheduled
        """
        self._require_constructor(ctor)

        def reschedule_never(capabilities):
            logic = returned_logic(ctor(capabilities))

            def run(frontiers):
                logic(frontiers)
                return False
            return run
        self.build_reschedule(reschedule_never)

    def _require_constructor(self, ctor: Any) -> None:
        require_function(f"operator {self._operator.name!r}", ctor,
                         "OperatorBuilder.build expected a function of the capabilities")

    def build_reschedule(self, ctor: Callable[[list[Capability]], Callable[[list], bool]]) -> None:
        """Like :meth:`build`, but ``logic(frontiers)`` returns True to be scheduled again.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     builder = st.OperatorBuilder("Thrice", scope)
        ...     runs = []
        ...     def logic(frontiers):
        ...         runs.append(len(runs))
        ...         return len(runs) < 3                   # True: schedule it again
        ...     builder.build_reschedule(lambda capabilities: logic)
        ...     return runs
        >>> st.example(build)
        [0, 1, 2]
        """
        self._check_open()
        self._require_constructor(ctor)
        self._built = True
        operator = self._operator
        operator.inputs = self._inputs
        self._dataflow.add_operator(operator, self._summaries,
                                    [stream.scope.kind for stream, _ in self._input_streams])
        for handle, (stream, pact) in zip(self._inputs, self._input_streams):
            connect(self._dataflow, stream._port, handle, pact)
        frontiers = [handle.frontier for handle in self._inputs]
        for i, handle in enumerate(self._inputs):
            handle._set_outputs(operator.outputs, self._summaries[i])
        capabilities = [Capability(self.scope.kind.minimum(), port, initial=True)
                        for port in operator.outputs]
        try:
            logic = returned_logic(ctor(capabilities))
        except (OperatorError, ExchangeSchemaError):
            raise
        except Exception as error:
            raise OperatorError(
                f"operator {operator.name!r} (address {operator.address}), while it was "
                f"built, raised {describe(error)}") from error
        del capabilities
        operator.logic = lambda: logic(frontiers)
        operator.watches_frontiers = self._notify
        if self._interest is not None:
            operator.interest = self._interest + [FrontierInterest.ALWAYS] * (
                len(self._inputs) - len(self._interest))


def unary_operator(stream: S, pact: Pact | type, name: str, ctor: Callable, *,
                   frontier: bool) -> S:
    """The operator of ``stream.unary`` (``frontier``: ``unary_frontier``)."""
    return _constructed_operator([stream], [pact], name, ctor, frontier)


def per_batch(stream: S, pact: Pact | type, name: str,
              transform: Callable[[Timestamp, Any], Any]) -> S:
    """A stateless operator sending ``transform(time, batch)`` for each input batch, at the
    batch's time (nothing when it returns None): what map-like operators are made of.

    >>> import sparktimely as st
    >>> st.example(lambda scope: per_batch(scope.to_stream([1, 2]), st.Pipeline, "Twice",
    ...                                    lambda time, batch: [x * 2 for x in batch])
    ...            .capture()).extract()
    [(0, [2, 4])]
    """
    def ctor(capability: Capability, info: OperatorInfo) -> Callable[[InputPort, OutputHandle], None]:
        capability.drop()

        def logic(input: InputPort, output: OutputHandle) -> None:
            for cap, batch in input:
                out = transform(cap.time, batch)
                if out is not None:
                    output.give_at(cap, out)
        return logic
    return unary_operator(stream, pact, name, ctor, frontier=False)


def binary_operator(stream1: S, stream2: S, pact1: Pact | type, pact2: Pact | type, name: str,
                    ctor: Callable, *, frontier: bool) -> S:
    """The operator of ``stream1.binary`` (``frontier``: ``binary_frontier``)."""
    return _constructed_operator([stream1, stream2], [pact1, pact2], name, ctor, frontier)


def _constructed_operator(streams: Sequence[S], pacts: Sequence[Pact | type], name: str,
                          ctor: Callable, frontier: bool) -> S:
    """An operator of one output whose ``ctor(capability, info)`` returns its logic, called
    as ``logic(*inputs, output)`` (timely's ``unary``/``binary`` and their ``_frontier``
    forms; ``frontier`` asks to be scheduled when an input frontier moves)."""
    kind = "unary" if len(streams) == 1 else "binary"
    require_function(f"{name} ({kind}{'_frontier' if frontier else ''})", ctor)
    builder = OperatorBuilder(name, streams[0].scope)
    inputs = [builder.new_input(stream, pact) for stream, pact in zip(streams, pacts)]
    output, result = builder.new_output()
    builder.set_notify(frontier)

    def build(capabilities):
        logic = returned_logic(ctor(capabilities[0], OperatorInfo(name, builder.index,
                                                                  builder.address)))
        if len(inputs) == 1:
            input, = inputs
            return lambda frontiers: logic(input, output)
        input1, input2 = inputs
        return lambda frontiers: logic(input1, input2, output)
    builder.build(build)
    return result


def notify_operator(streams: Sequence[S], pacts: Sequence[Pact | type], name: str,
                    init_times: Sequence[Timestamp], logic: Callable) -> S:
    """An operator with a Notificator: ``logic(*inputs, output, notificator)``."""
    place = f"{name} ({'unary' if len(streams) == 1 else 'binary'}_notify)"
    require_function(place, logic)
    require_type(place, init_times, (list, tuple, range), "init_times as a list of times")
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


def sink_operator(stream: "StreamCore", pact: Pact | type, name: str,
                  logic: Callable[[InputPort], Any]) -> InputPort:
    require_function(f"{name} (sink)", logic)
    builder = OperatorBuilder(name, stream.scope)
    input = builder.new_input(stream, pact)
    builder.build(lambda capabilities: lambda frontiers: logic(input))
    return input


def source(scope: "ScopeCore[S]", name: str, ctor: Callable) -> S:
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
    require_function(f"{name} (source)", ctor)
    builder = OperatorBuilder(name, scope)
    output, result = builder.new_output()
    builder.set_notify(False)

    def build(capabilities):
        logic = returned_logic(ctor(capabilities[0], OperatorInfo(name, builder.index,
                                                                  builder.address)))
        return lambda frontiers: logic(output)
    builder.build(build)
    return result


def passthrough_operator(name: str, scope: "ScopeCore", out_scope: "ScopeCore[S]",
                         time_map: Callable[[Timestamp], Timestamp], summary: Any,
                         restamp: Callable[[Any], Any] | None = None) -> tuple[InputPort, S]:
    """An operator that moves batches but re-stamps their time (enter, leave, feedback).
    It needs no capabilities: each batch is consumed and re-sent in one step.
    ``restamp(batch)``, if given, replaces each batch (of the same length), e.g. to move
    times written inside its records the way ``time_map`` moves the batch's time, without
    a second operator (and its two progress locations) behind this one."""
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
            push(time_map(time), batch if restamp is None else _restamped(restamp, batch, count))
    operator.logic = logic
    return input, out_scope._stream(output)


def _restamped(restamp: Callable[[Any], Any], batch: Any, count: int) -> Any:
    """``restamp(batch)``, checked to be a batch of the same ``count`` records."""
    new = restamp(batch)
    if new.__class__ is not list and not hasattr(new, "num_rows"):
        raise TypeError(f"restamp must return the batch rewritten (a list or an Arrow "
                        f"batch of {count} records), got {type(new).__name__} {new!r:.60}")
    if batch_length(new) != count:
        raise ValueError(f"restamp must keep the batch's length: {count} records came "
                         f"in, {batch_length(new)} went out")
    return new


def enter(stream: S, inner: "ScopeCore[S]", restamp: Callable[[Any], Any] | None = None) -> S:
    """``stream`` inside the nested scope ``inner``; ``restamp`` as in
    :func:`passthrough_operator` (not called when ``inner`` is a region: times stay)."""
    if inner.parent is not stream.scope:
        raise ValueError(f"enter: scope {inner.name!r} is not nested directly in the "
                         f"stream's scope {stream.scope.name!r}")
    if inner.kind == stream.scope.kind:                    # a region: same times
        return inner._stream(stream._port)
    summary = EnterSummary(inner.kind.minimum().inner)
    input, result = passthrough_operator("Enter", stream.scope, inner, summary.results_in,
                                         summary, restamp)
    connect(stream.scope.dataflow, stream._port, input, Pipeline())
    return result


def leave(stream: S, restamp: Callable[[Any], Any] | None = None) -> S:
    """``stream`` in the scope enclosing its own; ``restamp`` as in
    :func:`passthrough_operator` (not called when leaving a region: times stay)."""
    scope = stream.scope
    parent = scope.parent
    if parent is None:
        raise ValueError("leave: the stream is already in the dataflow's top-level scope")
    if scope.kind == parent.kind:
        return parent._stream(stream._port)
    input, result = passthrough_operator("Leave", scope, parent, LEAVE.results_in, LEAVE,
                                         restamp)
    connect(scope.dataflow, stream._port, input, Pipeline())
    return result

