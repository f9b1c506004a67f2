"""Scopes: where operators live, with a timestamp type; nested scopes for iteration.

:class:`ScopeCore` is what this layer knows of a scope. The concrete ``sparktimely.Scope``
(in :mod:`sparktimely.ops.scope`) adds the operators that start streams (``to_stream``,
``new_input``, ``feedback``, ...) and names the stream class its operators produce
(``stream_class``); a worker makes root scopes of its ``scope_class``
(``sparktimely.Worker``'s is ``Scope``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar, Generic, Self, TypeVar

from ..errors import require_function
from ..progress.timestamp import TimeKind, check_time_type
from .stream import StreamCore

if TYPE_CHECKING:
    from .ports import OutputPort
    from .subgraph import Closeable, Dataflow

S = TypeVar("S", bound=StreamCore)
R = TypeVar("R")


class Activator:
    """Schedules an operator again: ``scope.activator_for(info.address).activate()``.

    >>> import sparktimely as st
    >>> def build(scope):
    ...     def ctor(cap, info):
    ...         activator, left = scope.activator_for(info.address), [3]
    ...         def logic(output):
    ...             output.session(cap).give(left[0])
    ...             left[0] -= 1
    ...             activator.activate() if left[0] else cap.drop()
    ...         return logic
    ...     return st.source(scope, "Countdown", ctor).capture()
    >>> st.example(build).extract()
    [(0, [1, 2, 3])]
    """

    __slots__ = ("_dataflow", "_index")

    def __init__(self, dataflow: "Dataflow", index: int) -> None:
        self._dataflow = dataflow
        self._index = index

    def activate(self) -> None:
        """Schedule the operator at the next opportunity (in this step if it comes later)."""
        if self._dataflow.dropped:
            return
        try:
            self._dataflow.operators[self._index].poked = True
        except IndexError:
            raise ValueError(f"activate: dataflow {self._dataflow.name!r} has no operator "
                             f"{self._index} (it has {len(self._dataflow.operators)}): use "
                             f"scope.activator_for(info.address) with the address its "
                             f"constructor was given") from None
        self._dataflow.activate(self._index)


class ScopeCore(Generic[S]):
    """A place to build operators; all of a scope's streams share its timestamp type.

    >>> import sparktimely as st
    >>> st.example(lambda scope: (scope.index, scope.peers, scope.name))
    (0, 1, 'dataflow-0')
    """

    stream_class: ClassVar[type]
    """The class of the streams this scope's operators produce."""

    def __init__(self, dataflow: "Dataflow", parent: "Self | None", kind: TimeKind,
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

    def _stream(self, port: "OutputPort") -> S:
        """The stream of ``port``, an output of an operator of this scope."""
        stream: S = self.stream_class(self, port)
        return stream

    def _check_owns(self, stream: StreamCore, operator: str) -> None:
        if not isinstance(stream, StreamCore):
            raise TypeError(f"operator {operator!r}: an input must be a Stream, got "
                            f"{type(stream).__name__} {stream!r:.60}")
        if stream.scope is not self:
            raise ValueError(
                f"stream of scope {stream.scope.name!r} used in scope {self.name!r}: "
                f"bring it in with stream.enter(scope) or out with stream.leave()")

    def on_drop(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` if the dataflow is dropped with ``worker.drop_dataflow`` (to
        release what its operators hold outside it, such as shared traces).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     released = []
        ...     worker.dataflow(lambda scope: scope.on_drop(lambda: released.append(True)))
        ...     worker.drop_dataflow(0)
        ...     return released
        >>> st.execute_directly(job)
        [True]
        """
        self.dataflow.on_drop(callback)

    def hold(self, closeable: "Closeable") -> None:
        """Close ``closeable`` (anything with ``close()``, such as a handle on a trace
        shared with other dataflows) when the dataflow is dropped with
        ``worker.drop_dataflow``, after its ``on_drop`` callbacks. It is held weakly: an
        object nobody references any more is not kept alive, nor closed, by the dataflow.

        >>> import sparktimely as st
        >>> class Lease:
        ...     def close(self):
        ...         print("released")
        >>> def job(worker):
        ...     lease = Lease()
        ...     worker.dataflow(lambda scope: scope.hold(lease))
        ...     worker.drop_dataflow(0)
        >>> st.execute_directly(job)
        released
        """
        self.dataflow.hold(closeable)

    def activator_for(self, address: tuple) -> Activator:
        """An activator for the operator at ``address`` (from its ``info.address``). An
        address that is no operator's (empty, or ending in no index from 0 up, which would
        pick an operator from the end) is a ValueError.

        >>> import sparktimely as st
        >>> st.example(lambda scope: scope.activator_for((0, -1)))
        Traceback (most recent call last):
        ValueError: activator_for: (0, -1) is no operator's address (its last number is the operator's index, from 0 up): use the info.address its constructor was given
        """
        index = address[-1] if isinstance(address, tuple) and address else None
        if index.__class__ is not int or index < 0:
            raise ValueError(f"activator_for: {address!r} is no operator's address (its last "
                             f"number is the operator's index, from 0 up): use the "
                             f"info.address its constructor was given")
        return Activator(self.dataflow, index)

    # -- nesting -----------------------------------------------------------------------------

    def _child(self, kind: TimeKind, what: str) -> Self:
        self._children += 1
        return type(self)(self.dataflow, self, kind, self.address + (-self._children,),
                          f"{self.name}/{what}-{self._children}")

    def scoped(self, name: str, timestamp: type, build: Callable[[Self], R]) -> R:
        """A nested scope whose times are ``Product(outer, inner)`` with ``inner`` of type
        ``timestamp``; returns ``build(inner_scope)``. ``timestamp`` is ``int`` or a user
        type with ``less_equal``, a ``minimum()`` classmethod, hashing, pickling and a
        ``__lt__`` that extends its order (returning ``NotImplemented`` for other types);
        loop summaries inside are ``Product(0, s)`` where ``s`` advances an inner time
        (``s.results_in(t)``, or ``t + s``).

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def rounds(inner):
        ...         handle, looped = inner.loop_variable(st.Product(0, 1))
        ...         counted = scope.to_stream([0]).enter(inner).concat(looped).map(lambda x: x + 1)
        ...         counted.filter(lambda x: x < 3).connect_loop(handle)
        ...         return counted.inspect_time(lambda t, x: seen.append((t.inner, x))).leave()
        ...     return scope.scoped("Rounds", int, rounds).capture()
        >>> seen = []
        >>> st.example(build).extract(), seen
        ([(0, [1, 2, 3])], [(0, 1), (1, 2), (2, 3)])
        """
        check_time_type(timestamp, f"scoped({name!r})", total=True)
        return build(self._child(self.kind.nested(timestamp), name))

    def iterative(self, build: Callable[[Self], R]) -> R:
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
        require_function("scope.iterative", build)
        return build(self._child(self.kind.nested(), "iterative"))

    def region(self, build: Callable[[Self], R]) -> R:
        """A nested scope with the same times, to group operators; returns ``build(inner)``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     numbers = scope.to_stream([1, 2])
        ...     return scope.region(lambda inner: numbers.enter(inner).map(str).leave()).capture()
        >>> st.example(build).extract()
        [(0, ['1', '2'])]
        """
        require_function("scope.region", build)
        return build(self._child(self.kind, "region"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
