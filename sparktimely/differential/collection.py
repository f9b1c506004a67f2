"""Collections: timely streams of updates, and the operators that need no state.

A collection is a multiset that changes over time, written as a stream of *updates*
``(data, time, diff)``: at time ``time`` the multiplicity of ``data`` changes by the integer
``diff``. Its value at a time ``t`` is the sum of the diffs of all updates at times ``<= t``
(in the partial order of times: for ``Product`` times, component-wise). An update is always
at or after the timely time of the batch carrying it.

A value at ``t`` is *final* once the collection's frontier (``probe().less_than(...)``, or
``less_equal(t)`` turning false) has passed ``t``: no update at a time ``<= t`` can still come.
Every operator's output, accumulated to a completed time, equals the operator applied to its
inputs accumulated to that time, however many workers run it.

>>> import sparktimely as st
>>> import sparktimely.differential as dd
>>> def build(scope):
...     words = dd.from_stream(scope.to_stream(["a", "b", "a"]))
...     return words.map(str.upper).negate().inner.capture()
>>> st.example(build).extract()
[(0, [('A', 0, -1), ('A', 0, -1), ('B', 0, -1)])]

Arrow collections carry ``pyarrow.RecordBatch``es with the data columns and an int64
``diff`` column; every row of a batch is at the batch's (timely) time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..dataflow import Pipeline
from ..dataflow.operator import enter as enter_stream, leave as leave_stream
from ..progress.timestamp import Product
from .updates import DIFF, arrow_only, python_only

if TYPE_CHECKING:
    from ..dataflow import ProbeHandle
    from ..ops import Scope, Stream

class Collection:
    """A stream of ``(data, time, diff)`` updates (or Arrow batches with a ``diff`` column).

    ``inner`` is the timely stream; ``scope`` its scope.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     numbers = dd.from_stream(scope.to_stream([1, 2, 3]))
    ...     evens = numbers.filter(lambda x: x % 2 == 0)
    ...     return numbers.concat(evens.negate()).consolidate().inner.capture()
    >>> st.example(build).extract()
    [(0, [(1, 0, 1), (3, 0, 1)])]
    """

    __slots__ = ("inner",)

    def __init__(self, inner: "Stream") -> None:
        self.inner = inner

    @property
    def scope(self) -> "Scope":
        return self.inner.scope

    def _per_batch(self, name: str, transform: Callable[[Any, Any], Any]) -> "Collection":
        """A pipeline operator sending ``transform(time, batch)`` for each input batch."""
        def ctor(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batch in input:
                    out = transform(cap.time, batch)
                    if out is not None:
                        output.give_at(cap, out)
            return logic
        return Collection(self.inner.unary(Pipeline, name, ctor))

    # -- record at a time --------------------------------------------------------------------

    def map(self, f: Callable[[Any], Any]) -> "Collection":
        """Each ``data`` becomes ``f(data)``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([1, 2])).map(lambda x: x * 10)
        ...            .inner.capture()).extract()
        [(0, [(10, 0, 1), (20, 0, 1)])]
        """
        def transform(time, batch):
            return [(f(d), t, r) for d, t, r in python_only("map", "map_batches", batch)]
        return self._per_batch("Map", transform)

    def flat_map(self, f: Callable[[Any], Iterable[Any]]) -> "Collection":
        """Each ``data`` becomes the items of ``f(data)``, each with the update's diff."""
        def transform(time, batch):
            return [(y, t, r) for d, t, r in python_only("flat_map", "map_batches", batch)
                    for y in f(d)]
        return self._per_batch("FlatMap", transform)

    def filter(self, predicate: Callable[[Any], bool]) -> "Collection":
        """Keeps the updates whose ``data`` satisfies ``predicate``."""
        def transform(time, batch):
            return [u for u in python_only("filter", "filter_batches", batch) if predicate(u[0])]
        return self._per_batch("Filter", transform)

    def explode(self, f: Callable[[Any], Iterable[tuple[Any, int]]]) -> "Collection":
        """Each ``data`` becomes the ``(y, diff)`` pairs of ``f(data)``; diffs multiply.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([3])).explode(lambda x: [(x, x)])
        ...            .inner.capture()).extract()
        [(0, [(3, 0, 3)])]
        """
        def transform(time, batch):
            return [(y, t, r * n) for d, t, r in python_only("explode", "map_batches", batch)
                    for y, n in f(d)]
        return self._per_batch("Explode", transform)

    def negate(self) -> "Collection":
        """Every diff negated: the collection subtracted instead of added."""
        def transform(time, batch):
            if batch.__class__ is list:
                return [(d, t, -r) for d, t, r in batch]
            batch = arrow_only("negate", batch)
            index = batch.schema.get_field_index(DIFF)
            return batch.set_column(index, DIFF, pc.negate(batch.column(index)))
        return self._per_batch("Negate", transform)

    def map_batches(self, f: Callable[[pa.RecordBatch], pa.RecordBatch]) -> "Collection":
        """Arrow collections: each RecordBatch becomes ``f(batch)``, which must keep an
        int64 ``diff`` column (rows keep the batch's time)."""
        def transform(time, batch):
            out = f(arrow_only("map_batches", batch))
            if not isinstance(out, pa.RecordBatch) or DIFF not in out.schema.names:
                raise TypeError(f"map_batches: f must return a RecordBatch with a '{DIFF}' "
                                f"column, got {type(out).__name__}")
            return out
        return self._per_batch("MapBatches", transform)

    def filter_batches(self, mask: Callable[[pa.RecordBatch], Any]) -> "Collection":
        """Arrow collections: keeps the rows where ``mask(batch)`` is true."""
        return self._per_batch("FilterBatches",
                               lambda time, batch: arrow_only("filter_batches", batch)
                               .filter(mask(batch)))

    def inspect(self, f: Callable[[tuple], None]) -> "Collection":
        """Calls ``f((data, time, diff))`` for every update, passing updates on unchanged."""
        def transform(time, batch):
            for update in python_only("inspect", "inspect_batch", batch):
                f(update)
            return batch
        return self._per_batch("Inspect", transform)

    def inspect_batch(self, f: Callable[[Any, Any], None]) -> "Collection":
        """Calls ``f(time, batch)`` for every batch (a list of updates or a RecordBatch)."""
        def transform(time, batch):
            f(time, batch)
            return batch
        return self._per_batch("InspectBatch", transform)

    # -- plumbing ----------------------------------------------------------------------------

    def concat(self, other: "Collection") -> "Collection":
        """The updates of both collections (the sum of the two multisets)."""
        return Collection(self.inner.concat(other.inner))

    def probe(self) -> "ProbeHandle":
        """A probe on this collection's frontier."""
        return self.inner.probe()

    def probe_with(self, handle: "ProbeHandle") -> "Collection":
        """Adds this collection's frontier to ``handle``; returns the collection."""
        self.inner.probe_with(handle)
        return self

    def enter(self, scope: "Scope") -> "Collection":
        """This collection inside ``scope``, a scope nested directly in its own; in an
        iterative scope every time ``t`` becomes ``Product(t, 0)``."""
        return Collection(enter_stream(self.inner, scope, _enter_records))

    def leave(self) -> "Collection":
        """This collection in the enclosing scope; ``Product(t, i)`` becomes ``t``, so the
        updates of every iteration accumulate."""
        return Collection(leave_stream(self.inner, _leave_records))

    def __repr__(self) -> str:
        return f"Collection(scope={self.scope.name!r})"


def _enter_records(batch: Any) -> Any:
    """The times inside a batch of updates entering an iterative scope (the Enter operator
    moves the batch's own time): ``t`` becomes ``Product(t, 0)``; Arrow batches carry none."""
    return batch if batch.__class__ is not list else [(d, Product(t, 0), r) for d, t, r in batch]


def _leave_records(batch: Any) -> Any:
    """The times inside a batch of updates leaving an iterative scope: ``Product(t, i)``
    becomes ``t``."""
    return batch if batch.__class__ is not list else [(d, t.outer, r) for d, t, r in batch]


def as_collection(stream: "Stream") -> Collection:
    """A timely stream of ``(data, time, diff)`` triples (or Arrow batches with a ``diff``
    column) as a collection.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> st.example(lambda s: dd.as_collection(s.to_stream([("x", 0, 2)])).count()
    ...            .inner.capture()).extract()
    [(0, [(('x', 2), 0, 1)])]
    """
    return Collection(stream)


def from_stream(stream: "Stream") -> Collection:
    """Each record of a timely stream becomes an insertion (diff 1) at the record's time;
    an Arrow stream gets a ``diff`` column of ones.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> st.example(lambda s: dd.from_stream(s.to_stream("ab")).inner.capture()).extract()
    [(0, [('a', 0, 1), ('b', 0, 1)])]
    """
    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                time = cap.time
                if batch.__class__ is list:
                    output.give_at(cap, [(x, time, 1) for x in batch])
                else:
                    output.give_at(cap, batch.append_column(
                        DIFF, pa.array(np.ones(batch.num_rows, np.int64))))
        return logic
    return Collection(stream.unary(Pipeline, "FromStream", ctor))


def concatenate(scope: "Scope", collections: Sequence[Collection]) -> Collection:
    """One collection with the updates of all ``collections`` (of ``scope``).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     parts = [dd.from_stream(scope.to_stream([x])) for x in "abc"]
    ...     return dd.concatenate(scope, parts).inner.capture()
    >>> st.example(build).extract()
    [(0, [('a', 0, 1), ('b', 0, 1), ('c', 0, 1)])]
    """
    return Collection(scope.concatenate([c.inner for c in collections]))
