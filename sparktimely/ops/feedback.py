"""Loops: ``scope.feedback``, ``scope.loop_variable`` and ``stream.connect_loop``."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from ..dataflow.builder import passthrough_operator
from ..dataflow.handles import LoopHandle
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..errors import require_type
from ..progress.timestamp import Product, advance, check_summary

S = TypeVar("S", bound=StreamCore)


class FeedbackScope(ScopeCore[S]):
    """``feedback`` and ``loop_variable``."""

    def feedback(self, summary: Any,
                 restamp: Callable[[Any], Any] | None = None) -> tuple[LoopHandle, S]:
        """A loop: records given to the handle come back on the stream, their time
        advanced by ``summary`` (which must be greater than zero). ``restamp(batch)``, if
        given, replaces each batch on its way round (keeping its length), e.g. to advance
        times written inside its records too.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     handle, looped = scope.feedback(1)
        ...     counted = scope.to_stream([0]).concat(looped).map(lambda x: x + 1)
        ...     counted.filter(lambda x: x < 3).connect_loop(handle)
        ...     return counted.capture()
        >>> st.example(build).extract()
        [(0, [1]), (1, [2]), (2, [3])]
        """
        _check_advances(self.kind.minimum(), summary)
        input, stream = passthrough_operator(f"Feedback({summary!r})", self, self,
                                             lambda t: advance(t, summary), summary, restamp)
        handle = LoopHandle(self, input, summary)
        self.dataflow.add_loop(handle)
        return handle, stream

    def loop_variable(self, summary: Any,
                      restamp: Callable[[Any], Any] | None = None) -> tuple[LoopHandle, S]:
        """A loop in a nested scope; an int ``n`` means ``Product(0, n)``; ``restamp`` as
        in :meth:`feedback`.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     def loop(inner):
        ...         handle, looped = inner.loop_variable(1)
        ...         halved = scope.to_stream([8]).enter(inner).concat(looped).map(lambda x: x // 2)
        ...         halved.filter(lambda x: x > 1).connect_loop(handle)
        ...         return halved.filter(lambda x: x == 1).leave()
        ...     return scope.iterative(loop).capture()
        >>> st.example(build).extract()
        [(0, [1])]
        """
        if self.kind.depth == 0:
            raise ValueError("loop_variable needs a nested scope (scope.iterative(...))")
        if summary.__class__ is int:
            summary = Product(0, summary)
        return self.feedback(summary, restamp)


def _check_advances(minimum: Any, summary: Any) -> None:
    """Raise ValueError (a negative summary) or TypeError (a summary that cannot advance
    times like ``minimum``, the scope's least time), naming ``feedback`` and the summary."""
    where = f"feedback({summary!r})"
    if summary.__class__ is bool:
        raise TypeError(f"{where}: a path summary is an int or a Product, not a bool")
    try:
        check_summary(summary)
        advanced = advance(minimum, summary)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    except (TypeError, AttributeError):
        advanced = None
    if advanced is None or advanced.__class__ is not minimum.__class__:
        raise TypeError(f"{where}: the summary cannot advance this scope's times (like "
                        f"{minimum!r}): an int scope takes an int, a nested scope a Product "
                        f"(or, in loop_variable, an int n for Product(0, n))")


class FeedbackOps(StreamCore):
    """``connect_loop``."""

    __slots__ = ()

    def connect_loop(self, handle: LoopHandle) -> None:
        """Send this stream around the loop created with ``feedback``/``loop_variable``.

        >>> import sparktimely as st
        >>> def build(scope):
        ...     handle, looped = scope.feedback(2)
        ...     stream = scope.to_stream([1]).concat(looped)
        ...     stream.filter(lambda x: False).connect_loop(handle)
        ...     return stream.capture()
        >>> st.example(build).extract()
        [(0, [1])]
        """
        require_type("connect_loop", handle, LoopHandle,
                     "the LoopHandle of scope.feedback or scope.loop_variable")
        handle.connect(self)
