"""Parallelization contracts (pacts) and the channels they build between operators.

``Pipeline`` keeps records on the worker that produced them; ``Exchange(route)`` sends each
record to worker ``route(record) % peers``. On a single worker both are a local queue.
"""
from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import pyarrow as pa

from ..errors import ExchangeSchemaError, describe, message_of, short_repr
from .containers import format_schemas, partition_batch
from .ports import batch_length, own_copy

if TYPE_CHECKING:
    from ..hashing import Route
    from .ports import InputPort, OutputPort


class LocalPusher:
    """Delivers batches to an input queue on this worker and accounts for them: the local
    end of every channel. :meth:`observe` shows each batch it delivers to a callback
    (timely's ``LogPusher``: batches that stay on their worker never pass the worker)."""

    __slots__ = ("_queue", "_update", "_location", "_activate", "_operator", "_observer")

    def __init__(self, target: "InputPort") -> None:
        self._queue = target.queue
        self._update = target.dataflow.update
        self._location = target.location
        self._activate = target.dataflow.activate
        self._operator = target.operator
        self._observer: Callable[[Any], None] | None = None

    def observe(self, observer: Callable[[Any], None] | None) -> None:
        """Call ``observer(batch)`` for every batch delivered from now on (None: stop)."""
        self._observer = observer

    def push(self, time, batch) -> None:
        if self._observer is not None:
            self._observer(batch)
        count = batch_length(batch)
        self._update(self._location, time, count)
        self._queue.append((time, batch, count))
        self._activate(self._operator)


class Edge(NamedTuple):
    """A channel of a dataflow: from an output to an input through a pact; ``local`` is
    the end that delivers on this worker (see :meth:`LocalPusher.observe`)."""

    source: "OutputPort"
    target: "InputPort"
    pact: "Pact"
    local: LocalPusher


class Pact:
    """How records move from an output to an input: :class:`Pipeline` or :class:`Exchange`.

    >>> import sparktimely as st
    >>> isinstance(st.Exchange(lambda x: x), st.dataflow.Pact)
    True
    """

    def connect(self, source: "OutputPort", target: "InputPort") -> LocalPusher:
        """Make ``source`` feed ``target``; returns the channel's local end."""
        raise NotImplementedError


class Pipeline(Pact):
    """Records stay on the worker that produced them (no data movement).

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     cap.drop()
    ...     return lambda input, output: [output.give_at(c, b) for c, b in input]
    >>> st.execute(lambda w: w.dataflow(lambda s: s.to_stream([w.index]).unary(
    ...     st.Pipeline, "Stay", ctor).capture()), workers=2)[1].extract()
    [(0, [1])]
    """

    def connect(self, source: "OutputPort", target: "InputPort") -> LocalPusher:
        """Make ``source`` feed ``target``; returns the channel's local end. The dataflow
        calls it when an input is fed through this pact.

        >>> import sparktimely as st
        >>> class Shown(st.Pipeline):
        ...     def connect(self, source, target):
        ...         local = super().connect(source, target)
        ...         local.observe(lambda batch: print("delivered", batch))
        ...         return local
        >>> st.example(lambda scope: scope.to_stream([1, 2]).sink(Shown(), "Keep", list))
        delivered [1, 2]
        """
        local = LocalPusher(target)
        source.pushers.append(local)
        return local

    def __repr__(self) -> str:
        return "Pipeline"


class Exchange(Pact):
    """Each record goes to worker ``route(record) % peers``.

    ``Exchange(lambda x: x)`` routes ints by value; for Arrow streams use
    ``Exchange(key="column")`` (or several columns).

    >>> import sparktimely as st
    >>> def ctor(cap, info):
    ...     cap.drop()
    ...     return lambda input, output: [output.give_at(c, b) for c, b in input]
    >>> st.execute(lambda w: w.dataflow(lambda s: s.to_stream([0, 1, 2]).unary(
    ...     st.Exchange(lambda x: x), "Route", ctor).capture()), workers=2)[1].extract()
    [(0, [1, 1])]

    ``combine``, if given, is applied by the sending worker to each batch before it is
    partitioned, when there are other workers to send to: a combiner that shrinks what
    crosses (e.g. consolidates it) without an operator, and so without a step or a
    progress location of its own. It must return a batch the receiving operator reads as
    it would the original.

    >>> dedup = st.Exchange(lambda x: x, combine=lambda batch: sorted(set(batch)))
    >>> st.execute(lambda w: w.dataflow(lambda s: s.to_stream([1, 1, 1]).unary(
    ...     dedup, "Route", ctor).capture()), workers=2)[1].extract()   # one 1 from each
    [(0, [1, 1])]
    """

    def __init__(self, route: Route | None = None, *,
                 key: str | Sequence[str] | None = None,
                 combine: Callable[[Any], Any] | None = None) -> None:
        if (route is None) == (key is None):
            raise ValueError("Exchange needs exactly one of a route function or key=column")
        if route is not None and not callable(route):
            hint = f" (to route an Arrow stream by a column: key={route!r})" \
                if isinstance(route, str) else ""
            raise TypeError(f"exchange: the route must be a function of a record, got "
                            f"{route!r}{hint}")
        self.route = route
        self.key = key
        self.combine = combine

    def refusal(self, batch: Any) -> Exception | None:
        """The error to tell when ``batch`` (a list of records or an Arrow batch) could not
        be routed, if the receiving operator knows better than the routing error (a
        subclass's hook: a receiver of Python records told an Arrow batch, or the other way
        round); None for the routing error itself.

        >>> import sparktimely as st
        >>> print(st.Exchange(lambda x: x).refusal([1, 2]))
        None
        """
        return None

    def connect(self, source: "OutputPort", target: "InputPort") -> LocalPusher:
        """Make ``source`` feed ``target``; returns the channel's local end (the records
        routed to this worker). The dataflow calls it when an input is fed through this pact.

        >>> import sparktimely as st
        >>> class Shown(st.Exchange):
        ...     def connect(self, source, target):
        ...         local = super().connect(source, target)
        ...         local.observe(lambda batch: print("delivered", batch))
        ...         return local
        >>> st.example(lambda scope: scope.to_stream([1, 2]).sink(
        ...     Shown(lambda x: x), "Keep", list))
        delivered [1, 2]
        """
        target.queue = SchemaCheckedQueue(target)       # one worker too: the same error
        local = LocalPusher(target)
        source.pushers.append(LoneExchangePusher(self, target, local)
                              if target.dataflow.peers == 1
                              else ExchangePusher(self, target, local))
        return local

    def __repr__(self) -> str:
        if self.route is None:
            return f"Exchange(key={self.key!r})"
        return f"Exchange(route={route_name(self.route)})"


def route_name(route: Callable[..., Any]) -> str:
    """How errors name a route: its qualified name, else its repr; a lambda or a function
    defined inside another by its name and where it is defined.

    >>> import sparktimely as st
    >>> route_name(st.stable_hash), st.Exchange(key="k")
    ('stable_hash', Exchange(key='k'))
    >>> st.Exchange(lambda x: x)                                # doctest: +ELLIPSIS
    Exchange(route=<lambda> at <doctest ...>:1)
    """
    name = getattr(route, "__qualname__", None)
    if name is None:
        return repr(route)
    code = getattr(route, "__code__", None)
    if code is not None and (name == "<lambda>" or "<locals>" in name):
        return f"{route.__name__} at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    return name


class SchemaCheckedQueue(deque):
    """The queue of an exchange's input on one worker: every Arrow batch arriving, from this
    worker or another, must have the schema of the first one (metadata aside), or the exchange
    fails at once naming both schemas and the workers that sent them. Batches from one stream
    meet here first, so a mismatch is caught before it reaches an operator. This worker's own
    parts arrive by ``append``; other workers' by :meth:`append_from`, which
    ``Dataflow.deliver`` calls with the sender the transport names. Each sender also
    announces its schema to every worker (:meth:`check`), so that a mismatch is told
    wherever the rows go."""

    def __init__(self, target: "InputPort") -> None:
        super().__init__()
        # the port's dataflow and operator, not the port, which holds this queue: no
        # reference cycle for the cycle collector once the dataflow is dropped
        self._dataflow = target.dataflow
        self._operator = target.operator
        self._me = target.dataflow.worker.index
        self._first: tuple[pa.Schema, int] | None = None

    def append(self, item: tuple) -> None:
        self.append_from(self._me, item)

    def append_from(self, sender: int, item: tuple) -> None:
        """Queue ``item``, a ``(time, batch, count)`` that worker ``sender`` sent."""
        batch = item[1]
        if batch.__class__ is pa.RecordBatch:
            self.check(sender, batch.schema)
        super().append(item)

    def check(self, sender: int, schema: pa.Schema) -> None:
        """Raise ExchangeSchemaError unless ``schema`` (of a batch worker ``sender`` sent
        or announced) is the first one's."""
        if self._first is None:
            self._first = (schema, sender)
        elif not schema.equals(self._first[0]):
            self._mismatch(schema, sender)

    def _mismatch(self, schema: pa.Schema, sender: int) -> None:
        assert self._first is not None
        first, first_sender = self._first
        dataflow = self._dataflow
        operator = dataflow.operators[self._operator].name
        shown, then = format_schemas(first, schema)
        senders = (f"worker {sender} sent {shown}, then {then}" if sender == first_sender
                   else f"worker {first_sender} sent {shown}, worker {sender} sent {then}")
        raise ExchangeSchemaError(
            f"an exchange into {operator!r} (dataflow {dataflow.name!r}) on worker {self._me} "
            f"got Arrow batches of two schemas: {senders}; every batch of one stream, from "
            f"every worker, must have the same schema")


def as_pact(pact: Pact | type) -> Pact:
    """Accept ``Pipeline`` as well as ``Pipeline()``."""
    if isinstance(pact, type) and issubclass(pact, Pact):
        pact = pact()
    if not isinstance(pact, Pact):
        raise TypeError(f"expected a pact (Pipeline or Exchange(route)), got {pact!r}")
    return pact


class Broadcast(Pact):
    """Every record goes to every worker."""

    def connect(self, source: "OutputPort", target: "InputPort") -> LocalPusher:
        local = LocalPusher(target)
        source.pushers.append(local if target.dataflow.peers == 1
                              else BroadcastPusher(target, local))
        return local


class _RemotePusher:
    """Sends batches for one input to other workers; the producer accounts for them."""

    def __init__(self, target: "InputPort", local: LocalPusher) -> None:
        dataflow = target.dataflow
        self._local = local
        self._me = dataflow.worker.index
        self._peers = dataflow.peers
        self._send = dataflow.worker._send_data
        self._update = dataflow.update
        self._dataflow = dataflow.index
        self._location = target.location

    def _deliver(self, worker: int, time, part) -> None:
        if worker == self._me:
            self._local.push(time, part)
        else:
            self._update(self._location, time, batch_length(part))
            self._send(worker, self._dataflow, self._location, time, part)


class _Routing:
    """What an exchange's pushers share: partitioning by the pact, and an error naming the
    exchange, the record and the route's value when a batch cannot be routed."""

    def __init__(self, pact: Exchange, target: "InputPort") -> None:
        self._pact = pact
        self._target = target
        self._route = pact.route
        self._key = pact.key

    def _partition(self, batch: Any, peers: int) -> list:
        try:
            return partition_batch(batch, self._key, self._route, peers)
        except Exception as error:
            explained = self._explain(batch, error, peers)
            if explained is None:
                raise
            from .builder import OperatorError          # (builder imports this module)
            raise OperatorError(explained[0]) from explained[1]

    def _explain(self, batch: Any, error: Exception, peers: int
                 ) -> tuple[str, BaseException | None] | None:
        """What went wrong with a batch this exchange could not partition, told from the
        exchange (not as the failure of the operator feeding it, which was running), and its
        cause: for records, the first whose route is not an int and what the route returned
        (checked only now, so routing costs nothing more while it works; no cause: the
        arithmetic that failed on the value is ours); for Arrow batches, and for records
        sent to key columns, the error partitioning gave; for a route that raised
        (``stable_hash`` of a key it cannot hash, an IndexError of a key function), that error
        and the record; for a batch the pact refuses (a window's, of the other form), the
        pact's error. None when there is nothing to add."""
        target = self._target
        operator = target.dataflow.operators[target.operator]
        port = f"input {operator.inputs.index(target)} of " if len(operator.inputs) > 1 else ""
        where = (f"the exchange into {port}operator {operator.name!r} (address "
                 f"{operator.address}) by {self._pact!r}")
        refused = self._pact.refusal(batch)
        if refused is not None:
            return f"{where} raised {type(refused).__name__}: {message_of(refused)}", error
        if batch.__class__ is not list or self._route is None:     # (None: records by key)
            return f"{where} raised {type(error).__name__}: {message_of(error)}", error
        workers = range(peers)
        for record in batch:
            try:
                value = self._route(record)
            except Exception as raised:
                kind = type(raised).__name__
                if str(message_of(raised)).startswith(operator.name):     # named already
                    return f"{where} raised {kind}: {message_of(raised)}", raised
                return (f"{where}: its route raised {kind} on the record {short_repr(record)}"
                        f"{describe(raised)[len(kind):]}", raised)
            try:
                workers[value % peers]                  # what routing does with the value
            except TypeError:
                return (f"{where} cannot route the record {short_repr(record)}: its route "
                        f"returned {short_repr(value)} (a {type(value).__name__}); a route must "
                        f"return an int (the record goes to worker route(record) % peers), "
                        f"e.g. st.stable_hash(key)"), None
        return None


class ExchangePusher(_RemotePusher, _Routing):
    """Partitions each batch by the pact's route (or key columns) across the workers.

    The parts split off while the producing operator runs are gathered per worker, as
    timely's exchange buffers records per destination: a worker's parts go as one batch
    once they hold as many records as the batch being split, and the rest when the time
    changes or the operator's activation ends (``Dataflow.step`` calls
    :meth:`activation_ended`). Each worker so receives batches about as large as those sent
    into the exchange, not a ``1/peers`` share of each, and an operator after the exchange
    pays its per-batch costs (a ``group_by``'s) as often as at one worker. Batches pushed
    outside an activation (by an input handle) are split and sent at once."""

    def __init__(self, pact: Exchange, target: "InputPort", local: LocalPusher) -> None:
        _RemotePusher.__init__(self, target, local)
        _Routing.__init__(self, pact, target)
        self._combine = pact.combine
        self._announced = pa.schema([])     # none yet: no batch has this schema
        assert isinstance(target.queue, SchemaCheckedQueue)     # connect() made it
        self._checked = target.queue
        self._flow = target.dataflow
        self._gathered: list[list] = [[] for _ in range(self._peers)]
        self._counts = [0] * self._peers
        self._time: Any = None              # the time of the gathered parts
        self._kind: type = list             # their container: list or pa.RecordBatch
        self._listed = False                # in the dataflow's list of exchanges to flush

    def push(self, time, batch) -> None:
        if self._combine is not None:
            batch = self._combine(batch)
        kind = batch.__class__
        if kind is pa.RecordBatch and not batch.schema.equals(self._announced):
            self.flush()                    # the parts gathered into one batch share a schema
            self._announce(batch.schema)
        parts = self._partition(batch, self._peers)
        if not self._flow.activating:       # outside an activation: send at once
            for worker, part in enumerate(parts):
                if batch_length(part):
                    self._deliver(worker, time, part)
            return
        if time != self._time or kind is not self._kind:
            self.flush()
            self._time, self._kind = time, kind
        if not self._listed:
            self._flow.gathering.append(self)
            self._listed = True
        gathered, counts, enough = self._gathered, self._counts, batch_length(batch)
        for worker, part in enumerate(parts):
            count = batch_length(part)
            if count:
                gathered[worker].append(part)
                counts[worker] += count
                if counts[worker] >= enough:
                    self._send_gathered(worker)

    def flush(self) -> None:
        """Send every part gathered so far."""
        for worker, parts in enumerate(self._gathered):
            if parts:
                self._send_gathered(worker)

    def activation_ended(self) -> None:
        """The producing operator's activation is over: send what is gathered."""
        self._listed = False
        self.flush()

    def _send_gathered(self, worker: int) -> None:
        parts = self._gathered[worker]
        self._gathered[worker] = []
        self._counts[worker] = 0
        if len(parts) == 1:
            batch = parts[0]
        elif self._kind is list:
            batch = [record for part in parts for record in part]
        else:
            batch = pa.concat_batches(parts)
        self._deliver(worker, self._time, batch)

    def _announce(self, schema: pa.Schema) -> None:
        """Tell every worker's end of this exchange the schema of the batches this worker
        sends from now on, whichever worker each row goes to: batches of two schemas then
        meet (and are told) even where the route keeps their rows apart (the same columns
        in another order, arranged by the whole row)."""
        self._announced = schema
        self._checked.check(self._me, schema)
        self._target.dataflow.announce_schema(self._location, schema)


class LoneExchangePusher(_Routing):
    """An exchange on a single worker: nothing moves (as in timely), but the first record of
    each batch of records is routed, and an Arrow batch must have the key columns, so a route
    that gives no worker fails at one worker as it does at several, for one route call per
    batch. (An Arrow route is not called: it may read what only several workers add.)"""

    def __init__(self, pact: Exchange, target: "InputPort", local: LocalPusher) -> None:
        super().__init__(pact, target)
        self._local = local

    def push(self, time, batch) -> None:
        if batch.__class__ is list:
            self._partition(batch[:1], 1)
        elif self._key is not None:
            self._partition(batch.slice(0, 1), 1)
        self._local.push(time, batch)


class BroadcastPusher(_RemotePusher):
    """Sends every batch to every worker."""

    def push(self, time, batch) -> None:
        for worker in range(self._peers):
            self._deliver(worker, time, batch if worker == self._me else own_copy(batch))
