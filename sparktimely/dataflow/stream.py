"""The base of every stream: where it comes from, and the generic operator constructors.

The dataflow layer knows streams only as :class:`StreamCore`. The operator library
(:mod:`sparktimely.ops`) defines one mixin per family of operators (``map`` in
``ops/basic.py``, ``exchange`` in ``ops/exchange.py``, ...) and assembles the concrete
``sparktimely.Stream`` from them and this base, as timely's extension traits add methods to
its ``Stream`` type. Streams are made by their scope (:meth:`ScopeCore._stream`), which
knows the concrete class, so this layer never imports the operator library.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Self, Sequence

from ..progress.timestamp import Timestamp
from .builder import (binary_operator, notify_operator, require_one_argument, sink_operator,
                      unary_operator)

if TYPE_CHECKING:
    from .channels import Pact
    from .ports import OutputPort
    from .scope import ScopeCore


class StreamCore:
    """A stream of timestamped batches produced by one operator output, in one scope.

    ``unary``, ``binary``, ``sink`` and their ``_frontier``/``_notify`` forms build
    operators from user logic (timely's operator-writing guide); they return streams of the caller's class.

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

    __slots__ = ("scope", "_port")

    scope: "ScopeCore[Self]"

    def __init__(self, scope: "ScopeCore[Self]", port: "OutputPort") -> None:
        self.scope = scope
        self._port = port

    @property
    def port(self) -> "OutputPort":
        """The operator output that produces this stream."""
        return self._port

    def unary(self, pact: "Pact | type", name: str, ctor: Callable) -> Self:
        """A one-input operator: ``ctor(capability, info)`` returns ``logic(input, output)``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     return lambda input, output: [output.give_at(c, b[::-1]) for c, b in input]
        >>> st.example(lambda s: s.to_stream([1, 2]).unary(st.Pipeline, "Rev", ctor)
        ...            .capture()).extract()
        [(0, [1, 2])]
        """
        return unary_operator(self, pact, name, ctor, frontier=False)

    def unary_frontier(self, pact: "Pact | type", name: str, ctor: Callable) -> Self:
        """Like :meth:`unary`, and also scheduled whenever ``input.frontier`` changes.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = {}
        ...     cap.drop()
        ...     def logic(input, output):
        ...         for cap, batch in input:
        ...             held.setdefault(cap.retain(), []).extend(batch)
        ...         for cap in [c for c in held if not input.frontier.less_equal(c.time)]:
        ...             output.session(cap).give(sum(held.pop(cap)))
        ...     return logic
        >>> st.example(lambda s: s.to_stream([1, 2, 3]).unary_frontier(st.Pipeline, "Sum", ctor)
        ...            .capture()).extract()
        [(0, [6])]
        """
        return unary_operator(self, pact, name, ctor, frontier=True)

    def unary_notify(self, pact: "Pact | type", name: str, init_times: Sequence[Timestamp],
                     logic: Callable) -> Self:
        """A one-input operator with notifications: ``logic(input, output, notificator)``;
        ``init_times`` are notifications requested up front.

        >>> import sparktimely as st
        >>> def logic(input, output, notificator):
        ...     for cap, batch in input:
        ...         pass
        ...     for cap, count in notificator:
        ...         output.session(cap).give(f"done {cap.time}")
        >>> st.example(lambda s: s.to_stream([]).unary_notify(st.Pipeline, "N", [3], logic)
        ...            .capture()).extract()
        [(3, ['done 3'])]
        """
        return notify_operator([self], [pact], name, init_times, logic)

    def binary(self, other: Self, pact1: "Pact | type", pact2: "Pact | type", name: str,
               ctor: Callable) -> Self:
        """A two-input operator: ``ctor(capability, info)`` returns
        ``logic(input1, input2, output)``.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     cap.drop()
        ...     def logic(input1, input2, output):
        ...         for side, input in enumerate((input1, input2)):
        ...             for cap, batch in input:
        ...                 output.give_at(cap, [(side, x) for x in batch])
        ...     return logic
        >>> st.example(lambda s: s.to_stream([1]).binary(s.to_stream([2]), st.Pipeline,
        ...            st.Pipeline, "Tag", ctor).capture()).extract()
        [(0, [(0, 1), (1, 2)])]
        """
        return binary_operator(self, other, pact1, pact2, name, ctor, frontier=False)

    def binary_frontier(self, other: Self, pact1: "Pact | type", pact2: "Pact | type",
                        name: str, ctor: Callable) -> Self:
        """Like :meth:`binary`, and also scheduled whenever an input frontier changes.

        >>> import sparktimely as st
        >>> def ctor(cap, info):
        ...     held = [cap]
        ...     def logic(input1, input2, output):
        ...         for input in (input1, input2):
        ...             for _ in input:
        ...                 pass
        ...         if held and input1.frontier.is_empty() and input2.frontier.is_empty():
        ...             output.session(held[0]).give("both seen")
        ...             held.pop().drop()
        ...     return logic
        >>> st.example(lambda s: s.to_stream([1]).binary_frontier(s.to_stream([2]), st.Pipeline,
        ...            st.Pipeline, "Done", ctor).capture()).extract()
        [(0, ['both seen'])]
        """
        return binary_operator(self, other, pact1, pact2, name, ctor, frontier=True)

    def binary_notify(self, other: Self, pact1: "Pact | type", pact2: "Pact | type",
                      name: str, init_times: Sequence[Timestamp], logic: Callable) -> Self:
        """A two-input operator with notifications:
        ``logic(input1, input2, output, notificator)``.

        >>> import sparktimely as st
        >>> def logic(input1, input2, output, notificator):
        ...     for input in (input1, input2):
        ...         for cap, batch in input:
        ...             notificator.notify_at(cap.retain())
        ...     for cap, count in notificator:
        ...         output.session(cap).give(count)
        >>> st.example(lambda s: s.to_stream([1]).binary_notify(s.to_stream([2]), st.Pipeline,
        ...            st.Pipeline, "Count", [], logic).capture()).extract()
        [(0, [2])]
        """
        return notify_operator([self, other], [pact1, pact2], name, init_times, logic)

    def sink(self, pact: "Pact | type", name: str, logic: Callable) -> None:
        """A terminal operator: ``logic(input)`` runs whenever data arrives or the input
        frontier changes.

        >>> import sparktimely as st
        >>> seen = []
        >>> st.example(lambda s: s.to_stream([1, 2]).sink(
        ...     st.Pipeline, "Keep", lambda input: [seen.extend(b) for _, b in input]))
        >>> seen
        [1, 2]
        """
        require_one_argument(f"{name} (sink)", logic)    # (checked here: a probe's is ours)
        sink_operator(self, pact, name, logic)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scope={self.scope.name!r})"
