"""Arrangements: a collection exchanged by key, batched by completed time and indexed.

``arrange_by_key`` sends each ``(key, val)`` update to worker ``stable_hash(key) % peers``;
there, updates wait until their time is complete (the input frontier passed it), and are then
sealed into an immutable, consolidated, indexed :class:`~..trace.batch.Batch` that is both
added to the worker's shared trace and sent downstream on ``Arranged.stream``. Operators that
need an index (join, reduce) read the trace through their own handles instead of keeping
copies; other dataflows of the same worker read it with ``arranged.trace.import_(scope)``.

>>> import sparktimely as st, sparktimely.differential as dd
>>> def build(scope):
...     pairs = dd.from_stream(scope.to_stream([("a", 1), ("b", 2), ("a", 1)]))
...     return pairs.arrange_by_key().as_collection(lambda k, v: (k, v)).inner.capture()
>>> st.example(build).extract()
[(0, [(('a', 1), 0, 2), (('b', 2), 0, 1)])]
"""
from __future__ import annotations

import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...dataflow import CapabilitySet, Exchange, Pipeline, source
from ...hashing import stable_hash
from ...progress.timestamp import less_equal, sort_times
from ..arrow.arrange import ArrowArranger
from ..arrow.batch import HASH, column_numpy, consolidated_rows, with_key_hashes
from ..collection import Collection
from ..lattice import antichain, beyond, frontier_le
from ..recovery import TraceState, checkpointing
from ..trace.batch import (AdvancedBatch, Batch, Batcher, EnteredBatch, capability_intervals,
                           consolidate_keyed, entered_frontier, split_by_capabilities)
from ..trace.handle import TraceAgent, TraceBox

if TYPE_CHECKING:
    from ...ops import Scope, Stream


# -- handles and dataflow lifetimes --------------------------------------------------------------

_TRACES: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def trace_phase(scope: "Scope") -> int:
    """How many traces the dataflow of ``scope`` made before this one: the phase that keeps
    their merges apart (see ``spine.STAGGER``), the same in every run of the dataflow."""
    dataflow = scope.dataflow
    phase = _TRACES.get(dataflow, 0)
    _TRACES[dataflow] = phase + 1
    return phase


def reader(arranged: "Arranged", scope: "Scope") -> TraceAgent:
    """A new handle on ``arranged``'s trace for an operator of ``scope``, released when the
    operator is done with it or when the dataflow is dropped."""
    handle = arranged.trace.clone()
    scope.hold(handle)
    return handle


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

    def import_(self, scope: "Scope", name: str = "Import") -> "Arranged":
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
        if checkpointing(scope):
            raise NotImplementedError(
                f"import_ of the trace of {box.name!r} into dataflow {scope.dataflow.name!r}: "
                f"import_ into a dataflow that checkpoints is not supported yet; arrange the "
                f"collection inside the dataflow that uses it, or run without checkpoint_dir")
        if box.worker is not None and scope.dataflow.worker is not box.worker:
            raise ValueError(f"import_: the trace of {box.name!r} belongs to another worker; "
                             f"import it into a dataflow of the worker that built it")
        if box.kind is not None and scope.kind != box.kind:
            raise TypeError(f"import_: the trace of {box.name!r} has times like "
                            f"{box.kind.minimum()!r}, the scope times like {scope.kind.minimum()!r}")
        if scope.kind.depth:
            raise ValueError("import_ needs a dataflow's top-level scope")
        handle = TraceHandle(box, self._logical, box.physical_frontier())
        scope.hold(handle)
        feed = ImportFeed(box, handle.get_logical_compaction())
        scope.hold(feed)

        def ctor(capability, info):
            caps = CapabilitySet([capability])
            feed.activate = scope.activator_for(info.address).activate

            def logic(output):
                queue = feed.queue
                while queue:
                    kind, item, time = queue.popleft()
                    if kind == "batch":
                        cap = next(c for c in caps if less_equal(c.time, time))
                        output.session(cap).give(item)
                    else:
                        caps.downgrade(item)
                if feed.closed and not caps.is_empty():
                    caps.drop()
            return logic
        stream = source(scope, name, ctor)
        return Arranged(stream, handle)


class ImportFeed:
    """What an import hands its source operator: the replayed batches, then each new batch
    and frontier of the trace (``(kind, item, time)`` entries)."""

    def __init__(self, box: TraceBox, since: list) -> None:
        self.queue: deque = deque()
        self.activate: Callable[[], None] | None = None
        self.closed = False
        self._box = box
        minimum = box._minimum[0]
        for batch in box.spine.batches():
            if not (frontier_le(since, batch.since) or frontier_le(since, batch.lower)):
                batch = batch.advanced(since) if hasattr(batch, "advanced") else AdvancedBatch(batch, since)
            self.queue.append(("batch", batch, minimum))
        self.queue.append(("upper", list(box.spine.upper), None))
        box.add_listener(self)

    def push_batch(self, batch: Any, time: Any) -> None:
        self.queue.append(("batch", batch, time))
        self._wake()

    def push_upper(self, upper: list) -> None:
        self.queue.append(("upper", list(upper), None))
        self._wake()

    def _wake(self) -> None:
        if self.activate is not None:
            self.activate()

    def close(self) -> None:
        """Stop following the trace (the importing dataflow was dropped)."""
        self.closed = True
        self.queue.clear()
        self._box.remove_listener(self)
        self._wake()


# -- the arrange operator --------------------------------------------------------------------------

def _route(name: str, pairs: bool) -> Callable[[Any], Any]:
    """The exchange route of an arrangement: ``stable_hash`` of the key of a Python update,
    or, for an Arrow batch, the hashes of its key columns that the combiner before the
    exchange (:func:`combined`) put in it."""
    def route(update):
        if update.__class__ is not tuple:
            if update.__class__ is list or not hasattr(update, "schema"):
                raise TypeError(f"{name}: {update!r} is not a (data, time, diff) update")
            return column_numpy(update, HASH) >> 1
        if not pairs:
            return stable_hash(update[0])
        data = update[0]
        if data.__class__ is not tuple or len(data) != 2:
            raise TypeError(f"{name}: the data {data!r} of update {update!r} is not a "
                            f"(key, val) pair")
        return stable_hash(data[0])
    return route


def check_updates(name: str, batch: list, time: Any, pairs: bool) -> None:
    """Raise a TypeError/ValueError naming operator ``name`` and the first bad update of
    ``batch`` (received at capability ``time``): not a ``(data, time, diff)`` triple, a
    diff that is not an int, a time before the capability's, or (``pairs``) data that is
    not a ``(key, val)`` pair."""
    int_time = time.__class__ is int
    try:
        if int_time:
            bad = [u for u in batch if u.__class__ is not tuple or len(u) != 3
                   or u[2].__class__ is not int or u[1].__class__ is not int or u[1] < time
                   or (pairs and (u[0].__class__ is not tuple or len(u[0]) != 2))]
        else:
            bad = [u for u in batch if u.__class__ is not tuple or len(u) != 3
                   or u[2].__class__ is not int or u[1].__class__ is not time.__class__
                   or not less_equal(time, u[1])
                   or (pairs and (u[0].__class__ is not tuple or len(u[0]) != 2))]
    except TypeError:
        bad = [u for u in batch if not _comparable(u, time)] or batch[:1]
    if not bad:
        return
    u = bad[0]
    if u.__class__ is not tuple or len(u) != 3:
        raise TypeError(f"{name}: {u!r} is not a (data, time, diff) update")
    if u[2].__class__ is not int:
        raise TypeError(f"{name}: the diff of update {u!r} is not an integer "
                        f"({type(u[2]).__name__})")
    if pairs and (u[0].__class__ is not tuple or len(u[0]) != 2):
        raise TypeError(f"{name}: the data {u[0]!r} of update {u!r} is not a (key, val) pair")
    raise ValueError(f"{name}: update {u!r} has time {u[1]!r}, which is not at or after the "
                     f"time of the batch carrying it ({time!r}): a time went back")


def _comparable(update: Any, time: Any) -> bool:
    try:
        return less_equal(time, update[1])
    except (TypeError, AttributeError, IndexError):
        return False


def arrange(collection: Collection, name: str, pairs: bool,
            key: str | Sequence[str] | None = None) -> "Arranged":
    """The arrangement operator behind ``arrange_by_key`` and ``arrange_by_self``."""
    scope = collection.scope
    minimum = scope.kind.minimum()
    box = TraceBox(name, [minimum], scope.kind, scope.dataflow.worker, trace_phase(scope))
    handle = TraceHandle(box)
    arranger = Arranger(name, pairs, key, scope.kind)
    pact = Exchange(_route(name, pairs))
    updates = collection.inner
    if scope.peers > 1 or checkpointing(scope):   # a checkpoint's program is the same at any
        updates = combined(updates, name, key)     # number of workers

    def ctor(capability, info):
        capability.drop()
        caps = CapabilitySet()
        lower = [minimum]

        def restored(upper: list) -> None:
            nonlocal lower
            lower = upper
        if checkpointing(scope):
            TraceState(scope, info, box, restored)

        def logic(input, output):
            nonlocal lower
            for cap, batch in input:
                time = cap.time
                if not any(less_equal(c.time, time) for c in caps):
                    caps.insert(cap.retain())
                arranger.push(time, batch)
            frontier = input.frontier.frontier()
            if frontier == lower:
                return
            held = {c.time: c for c in caps if not beyond(frontier, c.time)}
            if held:
                for cap_time, batch in arranger.seal(lower, frontier, sort_times(list(held))):
                    box.insert(batch, cap_time)
                    output.give_at(held[cap_time], [batch])
            box.seal(frontier)
            caps.downgrade(antichain(arranger.pending_times()))
            lower = frontier
        return logic
    stream = updates.unary_frontier(pact, name, ctor)
    return Arranged(stream, handle, key)


def combined(updates: "Stream", name: str, key: Any) -> "Stream":
    """Large Arrow batches consolidated where they are, before they are exchanged (a
    combiner: 1M words over 10k keys cross as 10k rows), and every Arrow batch given the
    hashes of its ``key`` columns, which the exchange routes by and the arrangement sorts
    by; lists pass unchanged, and so does everything on a single worker."""
    alone = updates.scope.peers == 1

    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                output.give_at(cap, batch if alone or batch.__class__ is list
                               else with_key_hashes(name, consolidated_rows(batch), key))
        return logic
    return updates.unary(Pipeline, f"{name}Combine", ctor)


class Arranger:
    """Buffers and seals the updates of one arrangement: Python updates into
    :class:`Batch`es, Arrow batches into ``ArrowBatch``es (chosen by the first batch)."""

    def __init__(self, name: str, pairs: bool, key: Any, kind: Any) -> None:
        self.name = name
        self.pairs = pairs
        self.key = key
        self.kind = kind
        self.inner: Any = None

    def push(self, time: Any, batch: Any) -> None:
        inner = self.inner
        if inner is None:
            if batch.__class__ is list:
                if self.key is not None:
                    raise TypeError(f"{self.name}: key={self.key!r} names Arrow columns, but "
                                    f"this collection carries Python updates")
                inner = PythonArranger(self.name, self.pairs)
            else:
                if self.pairs and self.key is None:
                    raise TypeError(f"{self.name}: an Arrow collection is arranged by "
                                    f"columns: use arrange_by_key(key='column')")
                inner = ArrowArranger(self.name, self.key, self.kind)
            self.inner = inner
        inner.push(time, batch)

    def seal(self, lower: list, upper: list, held: list) -> list:
        return [] if self.inner is None else self.inner.seal(lower, upper, held)

    def pending_times(self) -> list:
        return [] if self.inner is None else self.inner.pending_times()


class PythonArranger:
    """Buffers Python updates and seals them into :class:`Batch`es, one per capability."""

    def __init__(self, name: str, pairs: bool) -> None:
        self.name = name
        self.pairs = pairs
        self.batcher = Batcher()

    def push(self, time: Any, batch: Any) -> None:
        if batch.__class__ is not list:
            raise TypeError(f"{self.name}: this collection carries Arrow batches; arrange "
                            f"them with arrange_by_key(key='column')")
        check_updates(self.name, batch, time, self.pairs)
        self.batcher.push(batch if self.pairs else [((d, ()), t, r) for d, t, r in batch])

    def seal(self, lower: list, upper: list, held: list) -> list:
        """``(capability time, batch)`` for each held capability with sealed updates."""
        parts = split_by_capabilities(self.batcher.seal(upper), held, lambda u: u[1])
        return [(cap_time, Batch.from_keyed(consolidate_keyed(part), part_lower, part_upper))
                for (cap_time, part_lower, part_upper), part
                in zip(capability_intervals(lower, upper, held), parts) if part]

    def pending_times(self) -> list:
        return self.batcher.frontier_times()


# -- arranged collections -----------------------------------------------------------------------

class Arranged:
    """An arrangement: ``stream`` (the sealed batches, as they are made) and ``trace`` (a
    :class:`TraceHandle` on the worker's shared index of them).

    ``key`` names the key column(s) of an Arrow arrangement (None for Python updates).

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

    def __init__(self, stream: "Stream", trace: Any, key: Any = None) -> None:
        self.stream = stream
        self.trace = trace
        self.key = key

    @property
    def scope(self) -> "Scope":
        return self.stream.scope

    def as_collection(self, f: Callable[[Any, Any], Any] | None = None) -> Collection:
        """The arranged updates as a collection of ``f(key, val)`` (default ``(key, val)``;
        an Arrow arrangement gives its rows back as RecordBatches and takes no ``f``).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> st.example(lambda s: dd.from_stream(s.to_stream([3, 1])).arrange_by_self()
        ...            .as_collection(lambda k, _: k * 2).inner.capture()).extract()
        [(0, [(2, 0, 1), (6, 0, 1)])]
        """
        def ctor(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batches in input:
                    for batch in batches:
                        if hasattr(batch, "to_record_batches"):
                            for time, records in batch.to_record_batches():
                                output.give_at(cap.delayed(time), records)
                        elif f is None:
                            output.give_at(cap, [((k, v), t, d) for k, ups in batch.items()
                                                 for v, t, d in ups])
                        else:
                            output.give_at(cap, [(f(k, v), t, d) for k, ups in batch.items()
                                                 for v, t, d in ups])
            return logic
        return Collection(self.stream.unary(Pipeline, "AsCollection", ctor))

    def enter(self, scope: "Scope") -> "Arranged":
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
            return Arranged(stream, self.trace, self.key)

        def ctor(capability, info):
            capability.drop()

            def logic(input, output):
                for cap, batches in input:
                    output.give_at(cap, [entered_batch(b) for b in batches])
            return logic
        handle = EnteredHandle(self.trace.clone())
        scope.hold(handle)
        return Arranged(stream.unary(Pipeline, "EnterArranged", ctor), handle, self.key)

    def __repr__(self) -> str:
        return f"Arranged({self.trace.name!r})"


def entered_batch(batch: Any) -> Any:
    """``batch`` as seen from a directly nested iterative scope."""
    return batch.entered() if hasattr(batch, "entered") else EnteredBatch(batch)


class EnteredHandle:
    """A handle on an enclosing scope's trace, used from a directly nested iterative scope:
    frontiers of ``Product(t, i)`` times are read as the outer times ``t``, batches are seen
    through :func:`entered_batch`."""

    def __init__(self, outer: TraceAgent) -> None:
        self._outer = outer

    @property
    def name(self) -> str:
        return self._outer.name

    @property
    def closed(self) -> bool:
        return self._outer.closed

    def clone(self) -> "EnteredHandle":
        return EnteredHandle(self._outer.clone())

    def batches_through(self, frontier: list) -> list:
        return [entered_batch(b) for b in self._outer.batches_through(outer_frontier(frontier))]

    def set_logical_compaction(self, frontier: list) -> None:
        self._outer.set_logical_compaction(outer_frontier(frontier))

    def set_physical_compaction(self, frontier: list) -> None:
        self._outer.set_physical_compaction(outer_frontier(frontier))

    def set_compaction(self, logical: list, physical: list) -> None:
        self._outer.set_compaction(outer_frontier(logical), outer_frontier(physical))

    def read_upper(self) -> list:
        return entered_frontier(self._outer.read_upper())

    def close(self) -> None:
        self._outer.close()


def outer_frontier(frontier: list) -> list:
    """An iterative scope's frontier as a frontier of the enclosing scope."""
    return antichain(t.outer for t in frontier)


def arrange_by_key(collection: Collection, key: str | Sequence[str] | None = None,
                   name: str = "ArrangeByKey") -> Arranged:
    """Arranges ``(key, val)`` updates by key (Arrow collections: by the ``key`` column(s),
    the other columns being the value).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> st.example(lambda s: dd.from_stream(s.to_stream([5])).arrange_by_key())
    Traceback (most recent call last):
    ...
    sparktimely.dataflow.operator.OperatorError: operator 'ArrangeByKey' (address (0, 2)) raised TypeError: ArrangeByKey: the data 5 of update (5, 0, 1) is not a (key, val) pair
    """
    return arrange(collection, name, True, key)


def arrange_by_self(collection: Collection, name: str = "ArrangeBySelf") -> Arranged:
    """Arranges the data themselves as keys (with the unit value ``()``; Arrow: every data
    column is part of the key)."""
    return arrange(collection, name, False, None)


def consolidate(collection: Collection) -> Collection:
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
    return arrange_by_self(collection, "Consolidate").as_collection(lambda k, _: k)
