"""Moving streams between nested scopes: ``enter`` and ``leave``."""
from __future__ import annotations

from typing import Self

from ..dataflow import builder
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..errors import require_type


class EnterLeaveOps(StreamCore):
    """``enter`` and ``leave``."""

    __slots__ = ()

    def enter(self, scope: ScopeCore[Self]) -> Self:
        """This stream inside ``scope``, a scope nested directly in this stream's scope
        (times ``t`` become ``Product(t, 0)``).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.iterative(lambda inner: s.to_stream([1]).enter(inner)
        ...            .inspect_time(lambda t, x: print(t, x)).leave()).capture()).extract()
        Product(0, 0) 1
        [(0, [1])]
        """
        require_type("enter", scope, ScopeCore, "a scope nested in the stream's scope")
        return builder.enter(self, scope)

    def leave(self) -> Self:
        """This stream in the scope enclosing its own (``Product(t, i)`` becomes ``t``).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.region(lambda inner: s.to_stream([2]).enter(inner).leave())
        ...            .capture()).extract()
        [(0, [2])]
        """
        return builder.leave(self)
