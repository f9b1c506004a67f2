"""The machinery of arrangements: a stream of updates exchanged by key, batched by
completed time and indexed in a trace, and the streams made from arranged batches.

:func:`arrange_stream` sends each ``(key, val)`` update to worker ``stable_hash(key) %
peers``; there, updates wait until their time is complete (the input frontier passed it), and
are then sealed into an immutable, consolidated, indexed :class:`~..trace.batch.Batch` that is
both added to the worker's shared trace and sent downstream (``Arranged.stream``). Operators
that need an index (join, reduce) read the trace through their own handles (:func:`reader`)
instead of keeping copies; other dataflows of the same worker read it through an import
(:func:`import_stream`). ``Collection.arrange_by_key`` and the other methods of
:mod:`..collection` are built on these functions.

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
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar

from ...dataflow import CapabilitySet, Exchange, Pipeline, source
from ...dataflow.builder import per_batch
from ...hashing import stable_hash
from ...progress.timestamp import TimeKind, less_equal, sort_times
from ..arrow.arrange import ArrowArranger
from ..arrow.batch import (HASH, column_numpy, consolidated_if_short, consolidated_rows,
                           with_key_hashes)
from ..lattice import antichain, beyond, frontier_le
from ..recovery import TraceState, checkpointing
from ..trace.batch import (Batch, Batcher, EnteredBatch, capability_intervals,
                           consolidate_keyed, entered_frontier, split_by_capabilities)
from ..trace.handle import TraceBox

if TYPE_CHECKING:
    from ...ops import Scope, Stream

KeyColumns = str | Sequence[str] | None
"""The key column(s) of an Arrow arrangement (None: every data column, or Python updates)."""


class TraceReader(Protocol):
    """What operators read an arrangement's trace through: a handle on the worker's trace
    (``TraceHandle``), or, from a nested iterative scope, an :class:`EnteredHandle` on it."""

    @property
    def name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def clone(self) -> "TraceReader": ...

    def clone_from_start(self) -> "TraceReader": ...

    def batches_through(self, frontier: list) -> list: ...

    def set_logical_compaction(self, frontier: list) -> None: ...

    def set_physical_compaction(self, frontier: list) -> None: ...

    def set_compaction(self, logical: list, physical: list) -> None: ...

    def _follow(self, logical: list, physical: list) -> None:
        """``set_compaction`` with frontiers of the dataflow's own times (not checked)."""

    def read_upper(self) -> list: ...

    def close(self) -> None: ...


# -- handles and dataflow lifetimes --------------------------------------------------------------

_TRACES: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def trace_phase(scope: "Scope") -> int:
    """How many traces the dataflow of ``scope`` made before this one: the phase that keeps
    their merges apart (see ``spine.STAGGER``), the same in every run of the dataflow."""
    dataflow = scope.dataflow
    phase = _TRACES.get(dataflow, 0)
    _TRACES[dataflow] = phase + 1
    return phase


def reader(trace: TraceReader, scope: "Scope") -> TraceReader:
    """A new handle on ``trace`` for an operator of ``scope``, released when the operator is
    done with it or when the dataflow is dropped."""
    handle = trace.clone_from_start()
    scope.hold(handle)
    return handle


# -- imports into other dataflows ------------------------------------------------------------------

def check_importable(box: TraceBox, scope: "Scope") -> None:
    """Raise the error that keeps ``box``'s trace from being imported into ``scope``, if any:
    a dataflow that checkpoints, another worker's dataflow, a nested scope (either one's),
    other times."""
    if checkpointing(scope):
        raise NotImplementedError(
            f"import_ of the trace of {box.name!r} into dataflow {scope.dataflow.name!r}: "
            f"import_ into a dataflow that checkpoints is not supported yet; arrange the "
            f"collection inside the dataflow that uses it, or run without checkpoint_dir")
    if box.worker is not None and scope.dataflow.worker is not box.worker:
        raise ValueError(f"import_: the trace of {box.name!r} belongs to another worker; "
                         f"import it into a dataflow of the worker that built it")
    if scope.kind.depth:
        raise ValueError(f"import_ of the trace of {box.name!r} into scope {scope.name!r}: "
                         f"import_ needs a dataflow's top-level scope; import the trace "
                         f"there and bring it in with .enter(scope)")
    if box.kind is not None and box.kind.depth:
        raise TypeError(f"import_: the trace of {box.name!r} was arranged inside a nested "
                        f"scope (times like {box.kind.minimum()!r}); import_ takes the traces "
                        f"of a dataflow's top-level scope: leave() the collection and arrange "
                        f"it there")
    if box.kind is not None and scope.kind != box.kind:
        raise TypeError(f"import_: the trace of {box.name!r} has times like "
                        f"{box.kind.minimum()!r}, the scope times like {scope.kind.minimum()!r}")


def import_stream(box: TraceBox, since: list, scope: "Scope", name: str) -> "Stream":
    """The batches of ``box``'s trace as a stream of ``scope`` (another dataflow of the same
    worker, checked with :func:`check_importable`): its contents so far, advanced to
    ``since``, then every new batch as the arrangement seals it, at its capability's time;
    the stream's frontier follows the trace's upper."""
    feed = ImportFeed(box, since)
    scope.hold(feed)

    def ctor(capability, info):
        caps = CapabilitySet([capability])
        feed.activate = scope.activator_for(info.address).activate

        def logic(output):
            queue = feed.queue
            batches: list = []                  # given together, at capability ``cap``
            cap = None
            while queue:
                kind, item, time = queue.popleft()
                if kind == "batch":
                    held = next(c for c in caps if less_equal(c.time, time))
                    if held is not cap and batches:
                        output.give_at(cap, batches)
                        batches = []
                    cap = held
                    batches.append(item)
                else:
                    if batches:
                        output.give_at(cap, batches)
                        batches = []
                    caps.downgrade(item)
            if batches:
                output.give_at(cap, batches)
            if feed.closed and not caps.is_empty():
                caps.drop()
        return logic
    return source(scope, name, ctor)


class ImportFeed:
    """What an import hands its source operator: the replayed batches, then each new batch
    and frontier of the trace (``(kind, item, time)`` entries)."""

    def __init__(self, box: TraceBox, since: list) -> None:
        self.queue: deque = deque()
        self.activate: Callable[[], None] | None = None
        self.closed = False
        self._box = box
        self._since = since
        minimum = box._minimum[0]
        for batch in box.spine.batches():
            self.queue.append(("batch", self._as_of_since(batch), minimum))
        self.queue.append(("upper", list(box.spine.upper), None))
        box.add_listener(self)

    def _as_of_since(self, batch: Any) -> Any:
        """``batch`` with its times advanced to the import's compaction frontier, if it has
        times before it: the import shows the trace as of that frontier (differential's
        ``import_frontier``), the batches that come after the import included, so that no
        operator sees a later batch's update at a time before one it was replayed at."""
        return batch if frontier_le(self._since, batch.lower) else batch.as_of(self._since)

    def push_batch(self, batch: Any, time: Any) -> None:
        self.queue.append(("batch", self._as_of_since(batch), time))
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

def key_exchange(name: str, pairs: bool, key: KeyColumns) -> Exchange:
    """The pact of an arrangement's input (or of an operator keyed as one, such as
    ``count_total_stream``): each update to the worker of its key, Arrow batches combined
    and hashed before they cross (:func:`combiner`)."""
    return Exchange(_route(name, pairs), combine=combiner(name, key))


def _route(name: str, pairs: bool) -> Callable[[Any], Any]:
    """The exchange route of an arrangement: ``stable_hash`` of the key of a Python update,
    or, for an Arrow batch, the hashes of its key columns that the exchange's
    :func:`combiner` put in it."""
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


def arrange_stream(updates: "Stream", name: str, pairs: bool, key: KeyColumns = None,
                   call: str | None = None) -> tuple["Stream", TraceBox]:
    """The arrange operator on a stream of updates (``(key, val)`` data if ``pairs``, else
    the data themselves as keys; Arrow batches arranged by the ``key`` columns): the stream
    of sealed batches and the worker's trace of them. ``call``: the join (or semijoin,
    antijoin) it arranges for, whose ``on`` is ``key`` (see :func:`choose_arranger`)."""
    scope = updates.scope
    minimum = scope.kind.minimum()
    box = TraceBox(name, [minimum], scope.kind, scope.dataflow.worker, trace_phase(scope))
    box.key = key
    scope.on_drop(box.drop_writer)
    pact = key_exchange(name, pairs, key)

    def ctor(capability, info):
        caps = CapabilitySet()
        lower = [minimum]
        arranger: Arranger | None = None

        def started(upper: list | None, later: list) -> None:
            """The checkpointed trace starts (``TraceState``): resumed up to ``upper``, with
            the updates held for ``later`` times when the checkpoint was taken, for which the
            initial capability is delayed before it goes."""
            nonlocal lower, arranger
            if upper is not None:
                lower = upper
            if later:                           # before any input: no arranger yet
                held = PythonArranger(name, pairs)
                held.hold(later)
                arranger = held
                for time in held.pending_times():
                    caps.insert(capability.delayed(time))
            capability.drop()

        def held_back() -> Any:
            return arranger.held_back(lower) if arranger is not None else None
        if checkpointing(scope):
            TraceState(scope, info, box, started, held_back)
        else:
            capability.drop()

        def logic(input, output):
            nonlocal lower, arranger
            arranger = take_in(input, caps, arranger, lambda batch: choose_arranger(
                name, pairs, key, scope.kind, batch, call))
            frontier = input.frontier.frontier()
            if frontier == lower:
                return
            held = {c.time: c for c in caps if not beyond(frontier, c.time)}
            if held and arranger is not None:
                for cap_time, batch in arranger.seal(lower, frontier, sort_times(list(held))):
                    box.insert(batch, cap_time)
                    output.give_at(held[cap_time], [batch])
            box.seal(frontier)
            if arranger is not None:
                caps.downgrade(antichain(arranger.pending_times()))
            lower = frontier
        return logic
    return updates.unary_frontier(pact, name, ctor), box


A = TypeVar("A", bound="Arranger")


def take_in(input: Any, caps: CapabilitySet, arranger: A | None,
            choose: Callable[[Any], A]) -> A | None:
    """Push every batch of ``input`` into ``arranger`` (made by ``choose(batch)`` for the
    first batch when None), with a capability in ``caps`` for each time not yet held;
    returns the arranger."""
    for cap, batch in input:
        time = cap.time
        if not any(less_equal(c.time, time) for c in caps):
            caps.insert(cap.retain())
        if arranger is None:
            arranger = choose(batch)
        arranger.push(time, batch)
    return arranger


def combiner(name: str, key: KeyColumns) -> Callable[[Any], Any]:
    """What an arrangement's exchange does to each batch before it crosses (several workers
    only): a large Arrow batch is consolidated where it is (1M words over 10k keys cross as
    10k rows) and every Arrow batch is given the hashes of its ``key`` columns, which the
    exchange routes by and the arrangement sorts by; lists pass unchanged."""
    def combine(batch: Any) -> Any:
        if batch.__class__ is list:
            return batch
        return with_key_hashes(name, consolidated_rows(batch), key)
    return combine


class Arranger(Protocol):
    """How an arrangement buffers and seals one kind of batch: :class:`PythonArranger`
    (lists of updates into :class:`Batch`es) or ``ArrowArranger`` (RecordBatches into
    ``ArrowBatch``es), chosen by the first batch (:func:`choose_arranger`)."""

    def push(self, time: Any, batch: Any) -> None:
        """Buffer ``batch``, received at capability ``time``."""

    def seal(self, lower: list, upper: list, held: list) -> list:
        """``(capability time, batch)`` for each time of ``held`` (the capabilities still
        held, sorted) with updates in ``[lower, upper)``, sealed."""
        ...

    def pending_times(self) -> list:
        """The times of the updates still buffered."""
        ...

    def held_back(self, lower: list) -> Any:
        """The updates still buffered, as a batch from ``lower`` for a checkpoint (None if
        there are none)."""
        ...


def choose_arranger(name: str, pairs: bool, key: KeyColumns, kind: TimeKind,
                    batch: Any, call: str | None = None) -> Arranger:
    """The arranger for a collection whose first batch is ``batch``; a key that does not
    fit the batches is told as ``call``'s ``on`` when the arrangement is a join's.

    >>> import pyarrow as pa
    >>> from sparktimely.progress.timestamp import TimeKind
    >>> choose_arranger("ArrangeByKey", True, None, TimeKind(int),
    ...                 pa.record_batch({"k": [1], "diff": [1]}), "join")
    Traceback (most recent call last):
    ...
    TypeError: join: Arrow collections are joined on key columns: give on='column' (or a list of columns)
    """
    if batch.__class__ is list:
        if key is not None:
            if call is not None:
                raise TypeError(f"{call}: on={key!r} names Arrow columns, but one of its "
                                f"collections carries Python updates (join Arrow collections "
                                f"with on=, Python ones without)")
            raise TypeError(f"{name}: key={key!r} names Arrow columns, but this collection "
                            f"carries Python updates")
        return PythonArranger(name, pairs)
    if pairs and key is None:
        if call is not None:
            raise TypeError(f"{call}: Arrow collections are joined on key columns: give "
                            f"on='column' (or a list of columns)")
        raise TypeError(f"{name}: an Arrow collection is arranged by columns: use "
                        f"arrange_by_key(key='column')")
    return ArrowArranger(name, key, kind)


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
        try:
            return [(cap_time, Batch.from_keyed(consolidate_keyed(part), part_lower, part_upper))
                    for (cap_time, part_lower, part_upper), part
                    in zip(capability_intervals(lower, upper, held), parts) if part]
        except TypeError:
            self.name_unhashable(parts)
            raise

    def name_unhashable(self, parts: list) -> None:
        """A TypeError naming the first update of ``parts`` whose data cannot be hashed
        (Python's says only ``unhashable type: 'list'``); nothing if there is none."""
        for part in parts:
            for kv, time, diff in part:
                data = kv if self.pairs else kv[0]
                try:
                    hash(data)
                except TypeError as error:
                    raise TypeError(f"{self.name}: the data {data!r} of update "
                                    f"{(data, time, diff)!r} cannot be hashed ({error}): "
                                    f"arranged data must be hashable (a tuple, not a list)"
                                    ) from None

    def take_ready(self, upper: list) -> list:
        """The buffered ``((key, val), time, diff)`` updates at times ``upper`` has passed,
        no longer buffered (not sealed into a batch)."""
        return self.batcher.seal(upper)

    def pending_times(self) -> list:
        return self.batcher.frontier_times()

    def held_back(self, lower: list) -> Batch | None:
        updates = self.batcher.updates()
        return Batch.from_updates(updates, lower, lower) if updates else None

    def hold(self, updates: list) -> None:
        """Buffer ``((key, val), time, diff)`` updates that a checkpoint kept (see
        :meth:`held_back`)."""
        self.batcher.push(updates)


# -- streams of arranged batches -----------------------------------------------------------------

def as_collection_stream(batches: "Stream", f: Callable[[Any, Any], Any] | None) -> "Stream":
    """The updates of a stream of arranged batches as a stream of updates of ``f(key, val)``
    (default ``(key, val)``; an Arrow arrangement's rows come back as RecordBatches, one per
    time, consolidated as a Python arrangement's updates are)."""
    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, arranged in input:
                for batch in arranged:
                    if hasattr(batch, "to_record_batches"):
                        for time, records in batch.to_record_batches():
                            records = consolidated_if_short(records)
                            if records.num_rows:
                                output.give_at(cap.delayed(time), records)
                    elif f is None:
                        output.give_at(cap, [((k, v), t, d) for k, ups in batch.items()
                                             for v, t, d in ups])
                    else:
                        output.give_at(cap, [(f(k, v), t, d) for k, ups in batch.items()
                                             for v, t, d in ups])
        return logic
    return batches.unary(Pipeline, "ArrangedAsCollection", ctor)


def entered_stream(batches: "Stream") -> "Stream":
    """A stream of arranged batches that entered a directly nested iterative scope, each
    batch seen through :func:`entered_batch`."""
    return per_batch(batches, Pipeline, "EnterArranged",
                     lambda time, arranged: [entered_batch(b) for b in arranged])


def entered_batch(batch: Any) -> Any:
    """``batch`` as seen from a directly nested iterative scope."""
    return batch.entered() if hasattr(batch, "entered") else EnteredBatch(batch)


class EnteredHandle:
    """A handle on an enclosing scope's trace, used from a directly nested iterative scope:
    frontiers of ``Product(t, i)`` times are read as the outer times ``t``, batches are seen
    through :func:`entered_batch`."""

    def __init__(self, outer: TraceReader) -> None:
        self._outer = outer

    @property
    def name(self) -> str:
        return self._outer.name

    @property
    def closed(self) -> bool:
        return self._outer.closed

    def clone(self) -> "EnteredHandle":
        return EnteredHandle(self._outer.clone())

    def clone_from_start(self) -> "EnteredHandle":
        return EnteredHandle(self._outer.clone_from_start())

    def batches_through(self, frontier: list) -> list:
        return [entered_batch(b) for b in self._outer.batches_through(outer_frontier(frontier))]

    def set_logical_compaction(self, frontier: list) -> None:
        self._outer.set_logical_compaction(outer_frontier(frontier))

    def set_physical_compaction(self, frontier: list) -> None:
        self._outer.set_physical_compaction(outer_frontier(frontier))

    def set_compaction(self, logical: list, physical: list) -> None:
        self._outer.set_compaction(outer_frontier(logical), outer_frontier(physical))

    def _follow(self, logical: list, physical: list) -> None:
        self._outer._follow(outer_frontier(logical), outer_frontier(physical))

    def read_upper(self) -> list:
        return entered_frontier(self._outer.read_upper())

    def close(self) -> None:
        self._outer.close()


def outer_frontier(frontier: list) -> list:
    """An iterative scope's frontier as a frontier of the enclosing scope."""
    return antichain(t.outer for t in frontier)
