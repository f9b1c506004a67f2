"""Collections and arrangements: the user-facing classes of differential dataflow.

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

:class:`Collection` has the operators (those that need no state run per batch here; the
stateful ones arrange the collection and call the machinery of :mod:`.operators`), an
:class:`Arranged` collection those that read its index, and :class:`Reducible` is what the
two share. This module holds all the classes that make each other (a collection arranges
into an ``Arranged``, which gives collections back), so that none of them is patched in.
"""
from __future__ import annotations

from typing import (TYPE_CHECKING, Any, Callable, Generic, Iterable, Protocol, Sequence,
                    TypeVar)

import numpy as np
import pyarrow as pa

from ..dataflow import Pipeline
from ..dataflow.builder import enter as enter_stream, leave as leave_stream, per_batch
from ..dataflow.containers import large_layouts
from ..dataflow.scope import ScopeCore
from ..errors import require_function, require_type
from ..progress.timestamp import Product
from .arrow.reduce import count_spec, distinct_spec
from .recovery import checkpointing
from .operators.arrange import (EnteredHandle, KeyColumns, TraceReader, arrange_stream,
                                as_collection_stream, check_importable, entered_stream,
                                import_stream)
from .operators.count import count_total_stream
from .operators.iterate import loop_variable
from .operators.join import JOIN_MANY, JOIN_MAP, JOIN_PAIR, JOIN_SEMI, join_core_stream
from .operators.reduce import (CountReduction, ThresholdReduction, distinct_count,
                               reduce_stream, user_reduction)
from .operators.temporal import TimeOf, active_between_stream
from .trace.batch import entered_frontier
from .trace.handle import TraceAgent
from .updates import DIFF, arrow_only, diff_last, negated, python_only

if TYPE_CHECKING:
    from ..dataflow import ProbeHandle
    from ..ops import Scope, Stream

Trace_co = TypeVar("Trace_co", bound=TraceReader, covariant=True)
"""The type of an arrangement's trace (``TraceHandle``, or a view from a nested scope)."""


def _check_lattice(kind: Any) -> None:
    """A TypeError, where a collection is made, if the scope's times cannot be joined and
    met: differential combines times by ``join`` and ``meet`` (a join's output times,
    compaction), and would otherwise fail at the first update, in Python's words.

    >>> from sparktimely.progress.timestamp import TimeKind
    >>> class Tick:
    ...     def less_equal(self, other): return True
    >>> _check_lattice(TimeKind(Tick))
    Traceback (most recent call last):
    TypeError: differential collections need times with join and meet (their least upper and greatest lower bounds), as int and Product times have; the scope's time type Tick has no join or meet
    """
    for kind_of_time in (kind.base, *kind.inners):
        if kind_of_time is int:
            continue
        missing = [name for name in ("join", "meet")
                   if not callable(getattr(kind_of_time, name, None))]
        if missing:
            raise TypeError(f"differential collections need times with join and meet (their "
                            f"least upper and greatest lower bounds), as int and Product times "
                            f"have; the scope's time type {kind_of_time.__name__} has no "
                            f"{' or '.join(missing)}")


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
        _check_lattice(inner.scope.kind)
        self.inner = inner

    @property
    def scope(self) -> "Scope":
        """The scope this collection lives in.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda scope: dd.from_stream(scope.to_stream([1])).scope is scope)
        True
        """
        return self.inner.scope

    def _per_batch(self, name: str, transform: Callable[[Any, Any], Any]) -> "Collection":
        """A pipeline operator sending ``transform(time, batch)`` for each input batch
        (nothing when it returns None)."""
        return Collection(per_batch(self.inner, Pipeline, name, transform))

    # -- record at a time --------------------------------------------------------------------

    def map(self, f: Callable[[Any], Any]) -> "Collection":
        """Each ``data`` becomes ``f(data)``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([1, 2])).map(lambda x: x * 10)
        ...            .inner.capture()).extract()
        [(0, [(10, 0, 1), (20, 0, 1)])]
        """
        require_function("map", f)

        def transform(time, batch):
            return [(f(d), t, r) for d, t, r in python_only("map", "map_batches", batch)]
        return self._per_batch("Map", transform)

    def flat_map(self, f: Callable[[Any], Iterable[Any]]) -> "Collection":
        """Each ``data`` becomes the items of ``f(data)``, each with the update's diff.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream(["a b", "b"])).flat_map(str.split)
        ...            .consolidate().inner.capture()).extract()
        [(0, [('a', 0, 1), ('b', 0, 2)])]
        """
        require_function("flat_map", f)

        def transform(time, batch):
            return [(y, t, r) for d, t, r in python_only("flat_map", "map_batches", batch)
                    for y in f(d)]
        return self._per_batch("FlatMap", transform)

    def filter(self, p: Callable[[Any], bool]) -> "Collection":
        """Keeps the updates whose ``data`` satisfies ``p``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([1, 2, 3, 4])).filter(lambda x: x > 2)
        ...            .inner.capture()).extract()
        [(0, [(3, 0, 1), (4, 0, 1)])]
        """
        require_function("filter", p)

        def transform(time, batch):
            return [u for u in python_only("filter", "filter_batches", batch) if p(u[0])]
        return self._per_batch("Filter", transform)

    def explode(self, f: Callable[[Any], Iterable[tuple[Any, int]]]) -> "Collection":
        """Each ``data`` becomes the ``(y, diff)`` pairs of ``f(data)``; diffs multiply.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([3])).explode(lambda x: [(x, x)])
        ...            .inner.capture()).extract()
        [(0, [(3, 0, 3)])]
        """
        def transform(time, batch):
            out = []
            for d, t, r in python_only("explode", "map_batches", batch):
                for y, n in f(d):
                    if n.__class__ is not int:
                        raise TypeError(f"explode: f({d!r}) gave ({y!r}, {n!r}), whose diff is "
                                        f"not an integer ({type(n).__name__})")
                    out.append((y, t, r * n))
            return out
        return self._per_batch("Explode", transform)

    def negate(self) -> "Collection":
        """Every diff negated: the collection subtracted instead of added.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream(["x"])).negate()
        ...            .inner.capture()).extract()
        [(0, [('x', 0, -1)])]
        """
        def transform(time, batch):
            if batch.__class__ is list:
                return [(d, t, -r) for d, t, r in batch]
            return negated(arrow_only("negate", batch))
        return self._per_batch("Negate", transform)

    def map_batches(self, f: Callable[[pa.RecordBatch], pa.RecordBatch]) -> "Collection":
        """Arrow collections: each RecordBatch becomes ``f(batch)``, which must keep an
        int64 ``diff`` column (rows keep the batch's time).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> import pyarrow as pa, pyarrow.compute as pc
        >>> def build(scope):
        ...     rows = dd.from_stream(scope.to_stream(pa.table({"x": [1, 2]})))
        ...     return rows.map_batches(lambda b: b.set_column(0, "x", pc.multiply(b["x"], 10))
        ...                             ).inner.capture()
        >>> st.example(build).extract()[0][1].to_pydict()
        {'x': [10, 20], 'diff': [1, 1]}
        """
        def transform(time, batch):
            out = f(arrow_only("map_batches", batch))
            if not isinstance(out, pa.RecordBatch) or DIFF not in out.schema.names:
                raise TypeError(f"map_batches: f must return a RecordBatch with a '{DIFF}' "
                                f"column, got {type(out).__name__}")
            return out
        return self._per_batch("MapBatches", transform)

    def filter_batches(self, mask: Callable[[pa.RecordBatch], Any]) -> "Collection":
        """Arrow collections: keeps the rows where ``mask(batch)`` is true.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> import pyarrow as pa, pyarrow.compute as pc
        >>> def build(scope):
        ...     rows = dd.from_stream(scope.to_stream(pa.table({"x": [1, 2, 3]})))
        ...     return rows.filter_batches(lambda b: pc.greater(b["x"], 1)).inner.capture()
        >>> st.example(build).extract()[0][1].to_pydict()
        {'x': [2, 3], 'diff': [1, 1]}
        """
        return self._per_batch("FilterBatches",
                               lambda time, batch: arrow_only("filter_batches", batch)
                               .filter(mask(batch)))

    def inspect(self, f: Callable[[tuple], None]) -> "Collection":
        """Calls ``f((data, time, diff))`` for every update, passing updates on unchanged.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> _ = st.example(lambda s: dd.from_stream(s.to_stream(["a"])).inspect(print))
        ('a', 0, 1)
        """
        def transform(time, batch):
            for update in python_only("inspect", "inspect_batch", batch):
                f(update)
            return batch
        return self._per_batch("Inspect", transform)

    def inspect_batch(self, f: Callable[[Any, Any], None]) -> "Collection":
        """Calls ``f(time, batch)`` for every batch (a list of updates or a RecordBatch).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> _ = st.example(lambda s: dd.from_stream(s.to_stream(["a", "b"]))
        ...                .inspect_batch(lambda time, batch: print(time, len(batch))))
        0 2
        """
        def transform(time, batch):
            f(time, batch)
            return batch
        return self._per_batch("InspectBatch", transform)

    # -- plumbing ----------------------------------------------------------------------------

    def concat(self, other: "Collection") -> "Collection":
        """The updates of both collections (the sum of the two multisets).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     a, b = dd.from_stream(scope.to_stream("ab")), dd.from_stream(scope.to_stream("b"))
        ...     return a.concat(b).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [('a', 0, 1), ('b', 0, 2)])]
        """
        _require_collection("concat", other)
        return Collection(self.inner.concat(other.inner))

    def probe(self) -> "ProbeHandle":
        """A probe on this collection's frontier.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session = dd.InputSession()
        ...     probe = worker.dataflow(lambda scope: session.to_collection(scope).count().probe())
        ...     session.insert("a"); session.advance_to(1)
        ...     worker.step_while(lambda: probe.less_than(1))       # time 0 is now final
        ...     return probe.less_than(1), probe.less_than(2)
        >>> st.execute_directly(job)
        (False, True)
        """
        return self.inner.probe()

    def probe_with(self, handle: "ProbeHandle") -> "Collection":
        """Adds this collection's frontier to ``handle``; returns the collection.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     session, probe = dd.InputSession(), st.ProbeHandle()
        ...     worker.dataflow(lambda scope: session.to_collection(scope).count().probe_with(probe))
        ...     session.advance_to(3)
        ...     worker.step_while(lambda: probe.less_than(3))
        ...     return probe.frontier()
        >>> st.execute_directly(job)
        [3]
        """
        self.inner.probe_with(handle)
        return self

    def enter(self, scope: "Scope") -> "Collection":
        """This collection inside ``scope``, a scope nested directly in its own; in an
        iterative scope every time ``t`` becomes ``Product(t, 0)``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     numbers = dd.from_stream(scope.to_stream([1]))
        ...     return scope.iterative(lambda inner: numbers.enter(inner).inner.capture())
        >>> st.example(build).extract()
        [(Product(0, 0), [(1, Product(0, 0), 1)])]
        """
        require_type("Collection.enter", scope, ScopeCore, "a scope nested directly in the "
                     "collection's (inside iterate, the inner collection's is .scope)")
        return Collection(enter_stream(self.inner, scope, _enter_records(scope)))

    def leave(self) -> "Collection":
        """This collection in the enclosing scope; ``Product(t, i)`` becomes ``t``, so the
        updates of every iteration accumulate.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     numbers = dd.from_stream(scope.to_stream([1]))
        ...     return scope.iterative(lambda inner: numbers.enter(inner).map(lambda x: -x).leave())
        >>> st.example(lambda scope: build(scope).inner.capture()).extract()
        [(0, [(-1, 0, 1)])]
        """
        return Collection(leave_stream(self.inner, _leave_records))

    # -- arrangements ------------------------------------------------------------------------

    def arrange_by_key(self, key: KeyColumns = None,
                       name: str = "ArrangeByKey") -> "Arranged[TraceHandle]":
        """Arranges ``(key, val)`` updates by key (Arrow collections: by the ``key``
        column(s), the other columns being the value): each worker indexes the updates of
        the keys it owns, once their times are complete, in a trace other operators share.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([("a", 1), ("b", 2), ("a", 1)]))
        ...     return pairs.arrange_by_key().as_collection().inner.capture()
        >>> st.example(build).extract()
        [(0, [(('a', 1), 0, 2), (('b', 2), 0, 1)])]
        >>> st.example(lambda s: dd.from_stream(s.to_stream([5])).arrange_by_key())
        Traceback (most recent call last):
        ...
        sparktimely.dataflow.builder.OperatorError: the exchange into operator 'ArrangeByKey' (address (0, 2)) by Exchange(route=route at arrange.py:...) raised TypeError: ArrangeByKey: the data 5 of update (5, 0, 1) is not a (key, val) pair
        """
        return self._arranged(name, True, key)

    def arrange_by_self(self, name: str = "ArrangeBySelf") -> "Arranged[TraceHandle]":
        """Arranges the data themselves as keys (with the unit value ``()``; Arrow: every
        data column is part of the key).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream(["b", "a", "b"])).arrange_by_self()
        ...            .as_collection().inner.capture()).extract()
        [(0, [(('a', ()), 0, 1), (('b', ()), 0, 2)])]
        """
        return self._arranged(name, False, None)

    def _arranged(self, name: str, pairs: bool, key: KeyColumns,
                  call: str | None = None) -> "Arranged[TraceHandle]":
        """The arrangement of ``arrange_by_key``/``arrange_by_self``; ``call``: the operator
        (join, semijoin, antijoin) it is made for, whose ``on`` its errors name."""
        stream, box = arrange_stream(self.inner, name, pairs, key, call)
        return Arranged(stream, TraceHandle(box), key)

    def consolidate(self) -> "Collection":
        """The same collection with the diffs of equal ``(data, time)`` summed and zeros
        dropped, each update once its time is complete (data are exchanged by
        ``stable_hash``; Arrow batches by every data column).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     words = dd.from_stream(scope.to_stream(["a", "b", "a"]))
        ...     return words.concat(words.filter(lambda w: w == "b").negate()).consolidate()
        >>> st.example(lambda s: build(s).inner.capture()).extract()
        [(0, [('a', 0, 2)])]
        """
        return self.arrange_by_self("Consolidate").as_collection(lambda k, _: k)

    # -- joins -------------------------------------------------------------------------------

    def join(self, other: "Collection", on: KeyColumns = None) -> "Collection":
        """``(key, (v1, v2))`` for every pair of ``(key, v1)`` here and ``(key, v2)`` in
        ``other``, at the join of their times with the product of their diffs (Arrow
        collections: ``on`` names the key column(s); the result has the key, then this
        side's other columns, then the other side's, a name already taken getting
        ``_right`` until it is unique, and ``diff``).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     names = dd.from_stream(scope.to_stream([(1, "ann"), (2, "bob")]))
        ...     pets = dd.from_stream(scope.to_stream([(1, "cat"), (1, "dog")]))
        ...     return names.join(pets).inner.capture()
        >>> st.example(build).extract()
        [(0, [((1, ('ann', 'cat')), 0, 1), ((1, ('ann', 'dog')), 0, 1)])]
        """
        _require_collection("join", other)
        return Collection(join_core_stream(self._arranged("ArrangeByKey", True, on, "join"),
                                           other._arranged("ArrangeByKey", True, on, "join"),
                                           None, JOIN_PAIR, "Join"))

    def join_map(self, other: "Collection", f: Callable[[Any, Any, Any], Any]) -> "Collection":
        """``f(key, v1, v2)`` for every matching pair.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     a = dd.from_stream(scope.to_stream([("x", 2)]))
        ...     b = dd.from_stream(scope.to_stream([("x", 5)]))
        ...     return a.join_map(b, lambda k, v1, v2: v1 * v2).inner.capture()
        >>> st.example(build).extract()
        [(0, [(10, 0, 1)])]
        """
        _require_collection("join_map", other)
        require_function("join_map", f)
        return Collection(join_core_stream(self.arrange_by_key(), other.arrange_by_key(), f,
                                           JOIN_MAP, "JoinMap"))

    def semijoin(self, keys: "Collection | Arranged[Any]", on: KeyColumns = None) -> "Collection":
        """The ``(key, val)`` updates whose key is in ``keys`` (multiplicities multiply).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([(1, "a"), (2, "b")]))
        ...     return pairs.semijoin(dd.from_stream(scope.to_stream([2]))).inner.capture()
        >>> st.example(build).extract()
        [(0, [((2, 'b'), 0, 1)])]
        """
        return self._arranged("ArrangeByKey", True, on, "semijoin").semijoin(keys)

    def antijoin(self, keys: "Collection | Arranged[Any]", on: KeyColumns = None) -> "Collection":
        """The ``(key, val)`` updates whose key is not in ``keys`` (``keys`` should hold each
        key at most once, e.g. after ``distinct()``).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([(1, "a"), (2, "b")]))
        ...     return pairs.antijoin(dd.from_stream(scope.to_stream([2]))).consolidate()
        >>> st.example(lambda s: build(s).inner.capture()).extract()
        [(0, [((1, 'a'), 0, 1)])]
        """
        return self.concat(self._arranged("ArrangeByKey", True, on, "antijoin").semijoin(keys)
                           .negate())

    # -- reductions --------------------------------------------------------------------------

    def reduce(self, logic: Callable[[Any, list, list], None] | None = None, *,
               key: KeyColumns = None, aggs: dict | None = None) -> "Collection":
        """``(key, val)`` for the output of ``logic(key, input, output)`` on each key's
        values: ``input`` lists ``(val, count)`` (positive counts, sorted by val; values
        Python cannot compare, such as None beside ints, by ``ordering.total_order``: None
        first), ``logic`` appends ``(val, diff)`` pairs to ``output``.

        Arrow collections aggregate instead: ``reduce(key="k", aggs={"total": ("sum", "x")})``
        gives one row per key with the ``key`` columns and one column per aggregation
        (``sum``, ``count``, ``min``, ``max`` of the column's non-null values, as SQL's: a
        sum of none is null; ``("count", None)`` counts rows).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def largest(key, input, output):
        ...     output.append((input[-1][0], 1))
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([("a", 3), ("a", 7), ("b", 1)]))
        ...     return pairs.reduce(largest).inner.capture()
        >>> st.example(build).extract()
        [(0, [(('a', 7), 0, 1), (('b', 1), 0, 1)])]
        """
        reduction, spec = user_reduction(logic, aggs)
        return Collection(reduce_stream(self.arrange_by_key(key=key), reduction, "Reduce", spec))

    def count(self, key: KeyColumns = None) -> "Collection":
        """``(x, n)`` for each ``x`` with non-zero count ``n`` (Arrow: rows of the ``key``
        columns, default every data column, with an int64 ``count`` column).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("abca")).count()
        ...            .inner.capture()).extract()
        [(0, [(('a', 2), 0, 1), (('b', 1), 0, 1), (('c', 1), 0, 1)])]
        >>> import pyarrow as pa
        >>> def build(scope):
        ...     rows = dd.from_stream(scope.to_stream(pa.table({"word": ["a", "b", "a"]})))
        ...     return rows.count(key="word").inner.capture()
        >>> sorted(st.example(build).extract()[0][1].to_pylist(), key=lambda row: row["word"])
        [{'word': 'a', 'count': 2, 'diff': 1}, {'word': 'b', 'count': 1, 'diff': 1}]
        """
        scope = self.scope
        if scope.kind.depth == 0 and scope.kind.base is int and not checkpointing(scope):
            return Collection(count_total_stream(self.inner, key))     # no input trace
        arranged = self.arrange_by_self() if key is None else self.arrange_by_key(key=key)
        return arranged.count()

    def distinct(self) -> "Collection":
        """Each ``x`` with a positive count, once (Arrow: each distinct row).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).distinct()
        ...            .inner.capture()).extract()
        [(0, [('a', 0, 1), ('b', 0, 1)])]
        """
        return self.arrange_by_self().distinct()

    def threshold(self, f: Callable[[Any, int], int]) -> "Collection":
        """Each ``x`` with multiplicity ``f(x, count)`` (``f`` is called for non-zero counts).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).threshold(
        ...     lambda x, n: n * 10).inner.capture()).extract()
        [(0, [('a', 0, 20), ('b', 0, 10)])]
        """
        return self.arrange_by_self().threshold(f)

    # -- iteration ---------------------------------------------------------------------------

    def iterate(self, f: Callable[["Collection"], "Collection"]) -> "Collection":
        """The fixed point of ``f`` started from this collection: ``f`` gets the collection
        of the current round (in a nested iterative scope) and returns the next round's; the
        result is the limit, back in this collection's scope. Outer collections used inside
        ``f`` must be entered: ``other.enter(x.scope)``. As in differential, ``f`` must
        consolidate what it returns (end in ``distinct``, ``reduce``, ``count`` or
        ``consolidate``): what goes round is not consolidated, and an update and its
        retraction would circulate for ever.

        As in differential there is no round limit: a loop that never reaches its fixed
        point runs for ever. ``f`` bounds it, differential's way, by keeping only the updates
        of the first rounds (an update's time is ``Product(outer, round)``); the result is
        then the collection of the last round kept:

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def counting(scope):                          # 0, 1, 2, ... never converges
        ...     def step(numbers):
        ...         more = numbers.map(lambda n: n + 1).concat(numbers).distinct()
        ...         return dd.as_collection(more.inner.filter(lambda u: u[1].inner < 3))
        ...     return dd.from_stream(scope.to_stream([0])).iterate(step).inner.capture()
        >>> st.example(counting).extract()
        [(0, [(0, 0, 1), (1, 0, 1), (2, 0, 1), (3, 0, 1)])]

        >>> def build(scope):
        ...     edges = dd.from_stream(scope.to_stream([(1, 2), (2, 3), (3, 1), (4, 5)]))
        ...     roots = dd.from_stream(scope.to_stream([1]))
        ...     def step(reach):
        ...         inner = edges.enter(reach.scope)
        ...         return reach.map(lambda n: (n, ())).join_map(inner, lambda n, _, m: m) \\
        ...             .concat(roots.enter(reach.scope)).distinct()
        ...     return roots.iterate(step).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [(1, 0, 1), (2, 0, 1), (3, 0, 1)])]
        """
        require_function("iterate", f)

        def build(inner: "Scope") -> Collection:
            variable = Variable.new_from(self.enter(inner))
            result = f(variable)
            if not isinstance(result, Collection):
                raise TypeError(f"iterate: f must return a Collection, not "
                                f"{type(result).__name__}")
            variable.set(result)
            return result.leave()
        return self.scope.iterative(build)

    # -- time ---------------------------------------------------------------------------------

    def active_between(self, start_of: TimeOf, end_of: TimeOf) -> "Collection":
        """Each record ``x`` present from time ``start_of(x)`` until time ``end_of(x)``:
        inserted at ``max(start_of(x), its own time)`` and removed at ``end_of(x)`` when that
        is later (never present otherwise); an update with diff ``d`` contributes ``d`` over
        that span. ``start_of`` and ``end_of`` return ints (times are ints). On Arrow
        collections they are the names of two integer columns instead.

        ``collection.active_between(lambda r: r.ts, lambda r: r.ts + 300).count()`` counts
        the records of the last 300 time units, and corrects itself when late or retracted
        records arrive.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     readings = dd.from_stream(scope.to_stream([("a", 1), ("b", 4)]))
        ...     return readings.active_between(lambda r: r[1], lambda r: r[1] + 3).inner.capture()
        >>> for time, updates in st.example(build).extract():
        ...     print(time, updates)
        1 [(('a', 1), 1, 1)]
        4 [(('a', 1), 4, -1), (('b', 4), 4, 1)]
        7 [(('b', 4), 7, -1)]

        On an Arrow collection (rows of a batch are at the batch's time):

        >>> import pyarrow as pa
        >>> def build(scope):
        ...     rows = pa.record_batch({"id": [1, 2], "from": [0, 2], "until": [2, 9],
        ...                             "diff": [1, 1]})
        ...     return dd.as_collection(scope.to_stream([rows])).active_between("from", "until") \\
        ...         .inner.capture()
        >>> [(time, table.to_pydict()["id"], table.to_pydict()["diff"])
        ...  for time, table in st.example(build).extract()]
        [(0, [1], [1]), (2, [1, 2], [-1, 1]), (9, [2], [-1])]
        """
        return Collection(active_between_stream(self.inner, start_of, end_of))

    def __repr__(self) -> str:
        return f"Collection(scope={self.scope.name!r})"


def _columns(key: KeyColumns) -> list | None:
    """Key columns as a list (None: a Python arrangement's key, or an Arrow one by itself)."""
    return None if key is None else [key] if isinstance(key, str) else list(key)


def _require_collection(operator: str, other: Any) -> None:
    """A TypeError naming ``operator`` unless ``other`` is a :class:`Collection`."""
    if not isinstance(other, Collection):
        raise TypeError(f"{operator}: expected a differential Collection, got "
                        f"{type(other).__name__} (make one with dd.from_stream, "
                        f"dd.as_collection or an InputSession)")


def _enter_records(scope: "Scope") -> Callable[[Any], Any]:
    """How the times inside a batch of updates entering the nested ``scope`` change (the
    Enter operator moves the batch's own time): ``t`` becomes ``Product(t, start)``, ``start``
    the scope's least inner time (0 in an iterative scope); Arrow batches carry none."""
    start = scope.kind.minimum().inner if scope.kind.depth else 0

    def restamp(batch: Any) -> Any:
        return batch if batch.__class__ is not list else [(d, Product(t, start), r)
                                                          for d, t, r in batch]
    return restamp


def _leave_records(batch: Any) -> Any:
    """The times inside a batch of updates leaving an iterative scope: ``Product(t, i)``
    becomes ``t``."""
    return batch if batch.__class__ is not list else [(d, t.outer, r) for d, t, r in batch]


class Arranged(Generic[Trace_co]):
    """An arrangement: ``stream`` (the sealed batches, as they are made) and ``trace`` (a
    :class:`TraceHandle` on the worker's shared index of them; inside an iterative scope it
    entered, a view of the enclosing scope's trace).

    ``key`` names the key column(s) of an Arrow arrangement (None for Python updates).
    ``since`` is an import's logical compaction frontier (None: not an import): the trace's
    history reads as of it (:meth:`TraceHandle.import_`).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     pairs = dd.from_stream(scope.to_stream([("a", 1), ("a", 2), ("b", 3)]))
    ...     arranged = pairs.arrange_by_key()          # one index, read by both operators
    ...     sizes = arranged.count()
    ...     largest = arranged.reduce(lambda key, vals, out: out.append((vals[-1][0], 1)))
    ...     return sizes.concat(largest).inner.capture()
    >>> st.example(build).extract()
    [(0, [(('a', 2), 0, 1), (('a', 2), 0, 1), (('b', 1), 0, 1), (('b', 3), 0, 1)])]
    """

    def __init__(self, stream: "Stream", trace: Trace_co, key: KeyColumns = None,
                 since: list | None = None) -> None:
        self.stream = stream
        self.trace = trace
        self.key = key
        self.since = since

    @property
    def scope(self) -> "Scope":
        """The scope of the arrangement's stream.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda scope: dd.from_stream(scope.to_stream([1])).arrange_by_self()
        ...            .scope is scope)
        True
        """
        return self.stream.scope

    def as_collection(self, f: Callable[[Any, Any], Any] | None = None) -> Collection:
        """The arranged updates as a collection of ``f(key, val)`` (default ``(key, val)``;
        an Arrow arrangement gives its rows back as RecordBatches and takes no ``f``).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([3, 1])).arrange_by_self()
        ...            .as_collection(lambda k, _: k * 2).inner.capture()).extract()
        [(0, [(2, 0, 1), (6, 0, 1)])]
        """
        if f is not None and self.key is not None:
            raise TypeError(f"as_collection: an Arrow arrangement (by {self.key!r}) gives its "
                            f"rows back as RecordBatches and takes no function; map the "
                            f"collection it returns (map_batches) instead")
        return Collection(as_collection_stream(self.stream, f))

    def enter(self, scope: "Scope") -> "Arranged[TraceReader]":
        """This arrangement inside ``scope``, nested directly in its own: in an iterative
        scope its times read as ``Product(t, 0)``. The batches and the trace are shared
        with the enclosing scope (read through views), not copied.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     edges = dd.from_stream(scope.to_stream([(1, 2), (2, 3)])).arrange_by_key()
        ...     roots = dd.from_stream(scope.to_stream([1]))
        ...     def step(reach):
        ...         inner = edges.enter(reach.scope)
        ...         return (inner.join_core(reach.arrange_by_self(), lambda n, m, _: [m])
        ...                 .concat(roots.enter(reach.scope)).distinct())
        ...     return roots.iterate(step).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [(1, 0, 1), (2, 0, 1), (3, 0, 1)])]
        """
        stream = self.stream.enter(scope)
        if scope.kind.depth == self.scope.kind.depth:
            return Arranged(stream, self.trace, self.key, self.since)
        rounds = scope.kind.inners[-1]
        if rounds is not int:
            raise ValueError(f"Arranged.enter: scope {scope.name!r} counts its rounds in "
                             f"{rounds.__name__} times; an arrangement enters only scopes of "
                             f"int rounds (scope.iterative, scope.scoped(name, int, ...)): "
                             f"enter the collection and arrange it inside")
        handle = EnteredHandle(self.trace.clone())
        scope.hold(handle)
        return Arranged(entered_stream(stream), handle, self.key,
                        None if self.since is None else entered_frontier(self.since))

    # -- joins -------------------------------------------------------------------------------

    def join_core(self, other_arranged: "Arranged[Any]",
                  f: Callable[[Any, Any, Any], Iterable[Any]]) -> Collection:
        """Joins two arrangements of the same scope by key: each new batch of one side
        meets the other side's trace as that side has delivered it so far, so each pair of
        updates meets once. A pair ``(v1, t1, d1)``, ``(v2, t2, d2)`` of one key gives the
        items of ``f(key, v1, v2)`` at ``t1.join(t2)`` with diff ``d1 * d2``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     a = dd.from_stream(scope.to_stream([(1, 2)])).arrange_by_key()
        ...     b = dd.from_stream(scope.to_stream([(1, 3)])).arrange_by_key()
        ...     return a.join_core(b, lambda k, x, y: [x + y, x * y]).inner.capture()
        >>> st.example(build).extract()
        [(0, [(5, 0, 1), (6, 0, 1)])]
        """
        return Collection(join_core_stream(self, other_arranged, f, JOIN_MANY, "JoinCore"))

    def join(self, other: "Collection | Arranged[Any]") -> Collection:
        """The pairs of this arrangement's updates and ``other``'s of one key, as
        :meth:`Collection.join` gives them (``(key, (v1, v2))``; Arrow rows by their key
        columns), reading this arrangement's trace as it is: an imported arrangement joins
        without arranging its collection again. ``other`` is an arrangement by the same key,
        or a collection (arranged here by this arrangement's key columns).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     names = dd.from_stream(scope.to_stream([(1, "ann"), (2, "bob")])).arrange_by_key()
        ...     pets = dd.from_stream(scope.to_stream([(1, "cat")]))
        ...     return names.join(pets).inner.capture()
        >>> st.example(build).extract()
        [(0, [((1, ('ann', 'cat')), 0, 1)])]
        """
        if not isinstance(other, Arranged):
            _require_collection("Arranged.join", other)
            other = other.arrange_by_key(self.key)
        elif _columns(self.key) != _columns(other.key):
            raise ValueError(f"Arranged.join: the arrangements are keyed by different columns "
                             f"({self.key!r} and {other.key!r}): arrange both by the same key")
        return Collection(join_core_stream(self, other, None, JOIN_PAIR, "Join"))

    def semijoin(self, keys: "Collection | Arranged[Any]") -> Collection:
        """The ``(key, val)`` of this arrangement whose key is in ``keys`` (a collection of
        keys, or an arrangement of them by themselves; multiplicities multiply).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([(1, "a"), (2, "b")])).arrange_by_key()
        ...     return pairs.semijoin(dd.from_stream(scope.to_stream([1]))).inner.capture()
        >>> st.example(build).extract()
        [(0, [((1, 'a'), 0, 1)])]
        """
        arranged_keys = keys if isinstance(keys, Arranged) else keys.arrange_by_self()
        return Collection(join_core_stream(self, arranged_keys, None, JOIN_SEMI, "Semijoin"))

    # -- reductions --------------------------------------------------------------------------

    def reduce(self, logic: Callable[[Any, list, list], None] | None = None, *,
               aggs: dict | None = None) -> Collection:
        """``(key, val)`` for the output of ``logic(key, input, output)`` on each key's
        values, as :meth:`Collection.reduce` (Arrow arrangements: ``aggs``, per key).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([("a", 3), ("a", 7)])).arrange_by_key()
        ...     return pairs.reduce(lambda k, vals, out: out.append((len(vals), 1)))
        >>> st.example(lambda s: build(s).inner.capture()).extract()
        [(0, [(('a', 2), 0, 1)])]
        """
        reduction, spec = user_reduction(logic, aggs)
        return Collection(reduce_stream(self, reduction, "Reduce", spec))

    def count(self) -> Collection:
        """``(key, n)`` for each key with ``n`` (non-zero) updates summed (Arrow: rows of
        the key columns with an int64 ``count`` column).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([("a", 3), ("a", 7), ("b", 1)]))
        ...     return pairs.arrange_by_key().count().inner.capture()
        >>> st.example(build).extract()
        [(0, [(('a', 2), 0, 1), (('b', 1), 0, 1)])]
        """
        return Collection(reduce_stream(self, CountReduction(), "Count", count_spec()))

    def distinct(self) -> Collection:
        """Each key with a positive count, once (Arrow: each distinct row).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).arrange_by_self()
        ...            .distinct().inner.capture()).extract()
        [(0, [('a', 0, 1), ('b', 0, 1)])]
        """
        return Collection(reduce_stream(self, ThresholdReduction(distinct_count), "Distinct",
                                        distinct_spec()))

    def threshold(self, f: Callable[[Any, int], int]) -> Collection:
        """Each key with multiplicity ``f(key, count)`` (``f`` is called for non-zero
        counts).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).arrange_by_self()
        ...            .threshold(lambda x, n: n - 1).inner.capture()).extract()
        [(0, [('a', 0, 1)])]
        """
        return Collection(reduce_stream(self, ThresholdReduction(f), "Threshold"))

    def __repr__(self) -> str:
        return f"Arranged({self.trace.name!r})"


class Reducible(Protocol):
    """What collections and arranged collections both offer, as differential's
    ``CountTotal`` and ``Threshold`` traits are implemented for both: the reductions and
    ``semijoin``. A collection arranges itself first (``count`` and ``distinct`` by the
    whole data, ``reduce`` by key); an arrangement reduces its own index, by its key.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def counted(data: dd.Reducible) -> dd.Collection:
    ...     return data.count()
    >>> def build(scope):
    ...     pairs = dd.from_stream(scope.to_stream([("a", 1), ("a", 2)]))
    ...     return (counted(pairs).inner.capture(),
    ...             counted(pairs.arrange_by_key()).inner.capture())
    >>> [captured.extract() for captured in st.example(build)]
    [[(0, [((('a', 1), 1), 0, 1), ((('a', 2), 1), 0, 1)])], [(0, [(('a', 2), 0, 1)])]]
    """

    def reduce(self, logic: Callable[[Any, list, list], None] | None = None, *,
               aggs: dict | None = None) -> Collection:
        """``(key, val)`` for the output of ``logic(key, input, output)`` per key.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def largest(data: dd.Reducible) -> dd.Collection:
        ...     return data.reduce(lambda key, vals, out: out.append((vals[-1][0], 1)))
        >>> st.example(lambda s: largest(dd.from_stream(s.to_stream([("a", 3), ("a", 7)])))
        ...            .inner.capture()).extract()
        [(0, [(('a', 7), 0, 1)])]
        """
        ...

    def count(self) -> Collection:
        """``(x, n)`` for each ``x`` (a record, or an arrangement's key) counted ``n``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).arrange_by_self().count()
        ...            .inner.capture()).extract()
        [(0, [(('a', 2), 0, 1), (('b', 1), 0, 1)])]
        """
        ...

    def distinct(self) -> Collection:
        """Each ``x`` with a positive count, once.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("abba")).distinct()
        ...            .inner.capture()).extract()
        [(0, [('a', 0, 1), ('b', 0, 1)])]
        """
        ...

    def threshold(self, f: Callable[[Any, int], int]) -> Collection:
        """Each ``x`` with multiplicity ``f(x, count)``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream("aab")).threshold(
        ...     lambda x, n: 1 if n > 1 else 0).inner.capture()).extract()
        [(0, [('a', 0, 1)])]
        """
        ...

    def semijoin(self, keys: "Collection | Arranged[Any]") -> Collection:
        """The ``(key, val)`` whose key is in ``keys``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     pairs = dd.from_stream(scope.to_stream([(1, "a"), (2, "b")])).arrange_by_key()
        ...     return pairs.semijoin(dd.from_stream(scope.to_stream([2]))).inner.capture()
        >>> st.example(build).extract()
        [(0, [((2, 'b'), 0, 1)])]
        """
        ...


class TraceHandle(TraceAgent):
    """A handle on an arrangement's trace (``arranged.trace``), usable from other dataflows
    of the same worker.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def job(worker):
    ...     knows = dd.InputSession()
    ...     trace = worker.dataflow(lambda s: knows.to_collection(s).arrange_by_key().trace)
    ...     knows.insert((1, "ann")); knows.insert((2, "bob")); knows.advance_to(1)
    ...     worker.step_while(lambda: trace.read_upper() == [0])
    ...     query = dd.InputSession()
    ...     found = worker.dataflow(lambda s: trace.import_(s).semijoin(query.to_collection(s))
    ...                             .inner.capture())
    ...     query.advance_to(1); query.insert(2); query.close(); knows.close()
    ...     worker.run()
    ...     return found.extract()
    >>> st.execute_directly(job)
    [(1, [((2, 'bob'), 1, 1)])]
    """

    def import_(self, scope: "Scope", name: str = "Import") -> "Arranged[TraceHandle]":
        """This trace as an arrangement in ``scope`` (a dataflow of the same worker): its
        contents so far, advanced to this handle's logical compaction frontier, then every
        new batch as the arrangement seals it. The batches are shared, not copied.

        Not yet in a worker that takes epoch checkpoints (``checkpoint_dir``): the importing
        and the arranging dataflow checkpoint separately, and nothing yet keeps the import's
        position consistent with both, so ``import_`` raises NotImplementedError there
        (arrangements used within their own dataflow are checkpointed and restored).

        >>> import tempfile, sparktimely as st, sparktimely.differential as dd
        >>> def job(worker):
        ...     st.io.enable_checkpoints(worker, tempfile.mkdtemp())
        ...     trace = worker.dataflow(lambda s: dd.InputSession().to_collection(s)
        ...                             .arrange_by_key().trace, name="arranged")
        ...     worker.dataflow(lambda s: trace.import_(s), name="queries")
        >>> try:
        ...     st.execute_directly(job)
        ... except NotImplementedError as error:
        ...     print(error)                    # doctest: +NORMALIZE_WHITESPACE
        import_ of the trace of 'ArrangeByKey' into dataflow 'queries': import_ into a
        dataflow that checkpoints is not supported yet; arrange the collection inside the
        dataflow that uses it, or run without checkpoint_dir
        """
        self._check_open("import_")
        box = self._box
        check_importable(box, scope)
        handle = TraceHandle(box, self._logical, box.physical_frontier())
        scope.hold(handle)
        since = handle.get_logical_compaction()
        return Arranged(import_stream(box, since, scope, name), handle, box.key, since=since)


class Variable(Collection):
    """A collection in an iterative scope whose definition is given later with
    :meth:`set`; ``step`` (an int ``n`` means ``Product(0, n)``) is how far each round
    advances the time.

    ``Variable(scope)`` starts empty; ``Variable.new_from(collection)`` starts as
    ``collection`` (which must be in the iterative scope).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     def loop(inner):
    ...         seed = dd.from_stream(scope.to_stream([1])).enter(inner)
    ...         powers = dd.Variable.new_from(seed)
    ...         grown = powers.map(lambda x: x * 2).filter(lambda x: x <= 8)
    ...         return powers.set(seed.concat(grown).distinct()).leave()
    ...     return scope.iterative(loop).consolidate().inner.capture()
    >>> st.example(build).extract()
    [(0, [(1, 0, 1), (2, 0, 1), (4, 0, 1), (8, 0, 1)])]
    """

    __slots__ = ("_loop", "_source", "_done")

    def __init__(self, scope: "Scope", step: Any = 1, source: Collection | None = None) -> None:
        loop, stream = loop_variable(scope, step)
        loop.unclosed = ("a dd.Variable was never defined: call var.set(collection) in the "
                         "iterative scope that made it")
        super().__init__(stream if source is None else stream.concat(source.inner))
        self._loop = loop
        self._source = source
        self._done = False

    @classmethod
    def new_from(cls, collection: Collection, step: Any = 1) -> "Variable":
        """A variable starting as ``collection`` (of the iterative scope).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     def loop(inner):
        ...         start = dd.from_stream(scope.to_stream([5])).enter(inner)
        ...         countdown = dd.Variable.new_from(start)         # starts as {5}
        ...         lower = countdown.map(lambda x: x - 1).filter(lambda x: x >= 3)
        ...         return countdown.set(start.concat(lower).distinct()).leave()
        ...     return scope.iterative(loop).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [(3, 0, 1), (4, 0, 1), (5, 0, 1)])]
        """
        return cls(collection.scope, step, collection)

    def set(self, collection: Collection) -> Collection:
        """Define the variable as ``collection`` one round later; returns ``collection``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     def loop(inner):
        ...         edges = dd.from_stream(scope.to_stream([(1, 2), (2, 3)])).enter(inner)
        ...         reach = dd.Variable(inner)                      # starts empty
        ...         by_end = reach.map(lambda path: (path[1], path[0]))
        ...         step = by_end.join_map(edges, lambda mid, src, dst: (src, dst))
        ...         return reach.set(edges.concat(step).distinct()).leave()
        ...     return scope.iterative(loop).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [((1, 2), 0, 1), ((1, 3), 0, 1), ((2, 3), 0, 1)])]
        """
        _require_collection("Variable.set", collection)
        if collection.scope is not self.scope:
            raise ValueError(f"Variable.set: the collection is in scope {collection.scope.name!r}, "
                             f"not in the variable's {self.scope.name!r}: enter it first "
                             f"(collection.enter(scope))")
        if self._done:
            raise RuntimeError("Variable.set was already called for this variable")
        self._done = True
        feedback = collection if self._source is None else collection.concat(self._source.negate())
        feedback.inner.connect_loop(self._loop)
        return collection


def as_collection(stream: "Stream") -> Collection:
    """A timely stream of ``(data, time, diff)`` triples (or Arrow batches with a ``diff``
    column, anywhere: it is moved last) as a collection.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> st.example(lambda s: dd.as_collection(s.to_stream([("x", 0, 2)])).count()
    ...            .inner.capture()).extract()
    [(0, [(('x', 2), 0, 1)])]
    """
    return Collection(per_batch(stream, Pipeline, "AsCollection", lambda time, batch:
                                batch if batch.__class__ is list else diff_last(batch)))


def from_stream(stream: "Stream") -> Collection:
    """Each record of a timely stream becomes an insertion (diff 1) at the record's time;
    an Arrow stream gets a ``diff`` column of ones (its batches must not have one: batches
    of updates with their own diffs are :func:`as_collection`'s).

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
                elif DIFF in batch.schema.names:
                    raise ValueError(f"from_stream: the batch has a {DIFF!r} column already "
                                     f"(from_stream adds one, of ones): a stream of updates "
                                     f"with their own diffs is dd.as_collection(stream)")
                else:
                    output.give_at(cap, large_layouts(batch).append_column(
                        DIFF, pa.array(np.ones(batch.num_rows, np.int64))))
        return logic
    return Collection(stream.unary(Pipeline, "FromStream", ctor))


def concatenate(scope: "Scope", collections: Iterable[Collection]) -> Collection:
    """One collection with the updates of all ``collections`` (of ``scope``).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     parts = [dd.from_stream(scope.to_stream([x])) for x in "abc"]
    ...     return dd.concatenate(scope, parts).inner.capture()
    >>> st.example(build).extract()
    [(0, [('a', 0, 1), ('b', 0, 1), ('c', 0, 1)])]
    """
    return Collection(scope.concatenate([c.inner for c in collections]))
