"""Merging streams: ``stream.concat(other)`` and ``scope.concatenate(streams)``."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Callable, Self, TypeVar

from ..dataflow import OperatorBuilder, Pipeline
from ..dataflow.builder import FrontierInterest
from ..dataflow.scope import ScopeCore
from ..dataflow.stream import StreamCore
from ..errors import require_type

S = TypeVar("S", bound=StreamCore)


def concatenate(scope: ScopeCore[S], streams: Iterable[S]) -> S:
    """One stream with the records of all ``streams`` (all of ``scope``)."""
    require_type("concatenate", streams, Iterable, "a list of streams")
    builder = OperatorBuilder("Concatenate", scope)
    inputs = [builder.new_input(stream, Pipeline) for stream in streams]
    for i in range(len(inputs)):
        builder.set_notify_for(i, FrontierInterest.NEVER)
    output, result = builder.new_output()

    def ctor(capabilities: list) -> Callable[[list], None]:
        capabilities[0].drop()

        def logic(frontiers: list) -> None:
            for input in inputs:
                for cap, batch in input:
                    output.give_at(cap, batch)
        return logic
    builder.build(ctor)
    return result


class ConcatOps(StreamCore):
    """``concat``."""

    __slots__ = ()

    def concat(self, other: Self) -> Self:
        """The records of both streams.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([1]).concat(s.to_stream([2])).capture()).extract()
        [(0, [1, 2])]
        """
        return concatenate(self.scope, [self, other])


class ConcatScope(ScopeCore[S]):
    """``concatenate``."""

    def concatenate(self, streams: Iterable[S]) -> S:
        """One stream with the records of all ``streams``.

        >>> import sparktimely as st
        >>> st.example(lambda s: s.concatenate([s.to_stream([i]) for i in range(3)])
        ...            .capture()).extract()
        [(0, [0, 1, 2])]
        """
        return concatenate(self, streams)


