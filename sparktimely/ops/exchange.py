"""Moving records between workers: exchange and broadcast."""
from __future__ import annotations

from typing import Any, Callable

from ..dataflow import Exchange, Stream
from ..dataflow.channels import Broadcast


def _forward(stream: Stream, pact, name: str) -> Stream:
    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                output.give_at(cap, batch)
        return logic
    return stream.unary(pact, name, ctor)


def exchange(stream: Stream, route: Callable[[Any], int] | None = None, *,
             key: str | list[str] | None = None) -> Stream:
    """Sends each record to worker ``route(x) % peers`` (Arrow streams: ``key="column"``).

    ``route`` must give the same answer on every worker, in every process and on every host.
    Python's built-in ``hash`` does not: for strings and bytes it is salted per interpreter,
    so in a job of several processes one key would reach several workers. Route by
    :func:`~sparktimely.stable_hash` (or by ints you computed yourself).

    >>> import sparktimely as st
    >>> st.example(lambda s: s.to_stream([3, 1]).exchange(lambda x: x).capture()).extract()
    [(0, [1, 3])]
    >>> st.example(lambda s: s.to_stream(["b", "a"]).exchange(st.stable_hash)
    ...            .capture()).extract()
    [(0, ['a', 'b'])]
    """
    return _forward(stream, Exchange(route, key=key), "Exchange")


def broadcast(stream: Stream) -> Stream:
    """Sends every record to every worker."""
    return _forward(stream, Broadcast(), "Broadcast")
