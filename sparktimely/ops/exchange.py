"""Moving records between workers: exchange and broadcast."""
from __future__ import annotations

from typing import Any, Self, Sequence

from ..dataflow import Exchange
from ..dataflow.builder import per_batch
from ..dataflow.channels import Broadcast, Pact
from ..dataflow.stream import StreamCore
from ..hashing import Route


class ExchangeOps(StreamCore):
    """``exchange`` and ``broadcast``."""

    __slots__ = ()

    def _forward(self, pact: Pact, name: str) -> Self:
        return per_batch(self, pact, name, lambda time, batch: batch)

    def exchange(self, route: Route | None = None, *,
                 key: str | Sequence[str] | None = None) -> Self:
        """Sends each record to worker ``route(x) % peers`` (Arrow streams: ``key="column"``).
        ``route(x)`` returns an int (numpy integer types too); anything else fails naming this
        exchange, the record and the value returned.

        ``route`` must give the same answer on every worker, in every process and on every
        host. Python's built-in ``hash`` does not: for strings and bytes it is salted per
        interpreter, so in a job of several processes one key would reach several workers.
        Route by :func:`~sparktimely.stable_hash` (or by ints you computed yourself).

        An Arrow stream exchanged by ``key`` sends every row: when what follows is a grouped
        aggregation (``exchange(key="word").map_batches(group_by)``), use
        :meth:`~sparktimely.ops.arrow.ArrowOps.aggregate_batches` instead, which combines the
        rows on their own worker first and exchanges one partial row per key: it gets faster
        with more workers, where the exchange of every row does not (it moves and groups each
        row twice; ``benchmarks/bench_scaling.py`` measures both).

        >>> import sparktimely as st
        >>> st.example(lambda s: s.to_stream([3, 1]).exchange(lambda x: x).capture()).extract()
        [(0, [1, 3])]
        >>> st.example(lambda s: s.to_stream(["b", "a"]).exchange(st.stable_hash)
        ...            .capture()).extract()
        [(0, ['a', 'b'])]
        """
        return self._forward(Exchange(route, key=key), "Exchange")

    def broadcast(self) -> Self:
        """Sends every record to every worker.

        >>> import sparktimely as st
        >>> st.execute(lambda w: w.dataflow(lambda s: s.to_stream([w.index]).broadcast()
        ...            .capture()), workers=2)[0].extract()
        [(0, [0, 1])]
        """
        return self._forward(Broadcast(), "Broadcast")
