"""A dataflow on one worker: its operators, its progress and its scheduling (timely's
``subgraph.rs``; the worker that runs dataflows is :mod:`.worker`).

Every worker tracks the global progress of each dataflow: the pointstamp changes a worker
makes are shared, as one atomic batch, with every other worker (FIFO per sender), and each
worker applies everyone's batches to its own tracker. When and what to share is decided by
:class:`~sparktimely.progress.exchange.ProgressExchange`, a pure state machine; this module
only moves its messages, through the worker.

>>> import sparktimely as st
>>> def job(worker):
...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe(), name="pipeline")
...     [dataflow] = worker.dataflows().values()
...     return dataflow.name, [op.name for op in dataflow.operators], len(dataflow.edges)
>>> st.execute_directly(job)
('pipeline', ['ToStream', 'Map', 'Probe'], 2)
"""
from __future__ import annotations

import weakref
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable, Literal, NamedTuple, Protocol

from ..errors import describe
from ..hashing import calls_hash
from ..progress.exchange import ProgressExchange
from ..progress.reachability import GraphBuilder, Tracker
from ..progress.timestamp import TimeKind, Timestamp
from .builder import Operator
from .channels import Edge, SchemaCheckedQueue, route_name
from .ports import batch_length

if TYPE_CHECKING:
    from .channels import Pact
    from .ports import InputPort, OutputPort
    from .scope import ScopeCore as Scope
    from .worker import WorkerCore


DATA, PROGRESS, GRAPH, FINISHED, SCHEMA = 0, 1, 2, 3, 4
"""Kinds of worker-to-worker messages: ``(DATA, dataflow, location, time, batch)``,
``(PROGRESS, dataflow, [((location, time), delta), ...])``,
``(GRAPH, dataflow, name, shape, operator_names, salt_probe, batch)`` (each worker's description
of the dataflow it built, its Python ``hash`` of a fixed string, to detect differently salted
peers, and the progress batch of the changes it made to capabilities while building, or
None: one message per dataflow built instead of two),
``(SCHEMA, dataflow, location, schema)`` (the Arrow schema this worker sends into the exchange
at input ``location`` from now on) and
``(FINISHED, None, built)``: a worker's last word, the number of dataflows it built (it builds
no more). Its dataflow slot is None, so it never reaches a dataflow's ``deliver``."""

SALT_PROBE = "sparktimely: is hash() salted alike on every worker?"


class Closeable(Protocol):
    """Anything a dataflow can hold until it is dropped (:meth:`Dataflow.hold`)."""

    def close(self) -> None: ...


class OpenInput(NamedTuple):
    """An input that alone keeps a dataflow from completing (see
    :meth:`Dataflow.open_inputs`): its ``kind``, ``"handle"`` (an input handle not closed) or
    ``"unordered"`` (an unordered input's capability or session), and its ``description``."""

    kind: Literal["handle", "unordered"]
    description: str


class Dataflow:
    """One dataflow graph on one worker: operators, progress and scheduling.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="small")
    ...     dataflow = worker.dataflows()[0]
    ...     return dataflow.index, dataflow.name, dataflow.named, len(dataflow.operators)
    >>> st.execute_directly(job)
    (0, 'small', True, 2)
    """

    def __init__(self, worker: "WorkerCore", index: int, name: str | None = None) -> None:
        self.worker = worker
        self.index = index
        self.name = name or f"dataflow-{index}"
        self.named = name is not None           # the user named it (checkpoints need names)
        self.peers = worker.peers
        self.operators: list[Operator] = []
        self.graph: GraphBuilder | None = GraphBuilder()    # None once built
        self.tracker: Tracker                               # set when built
        self.progress = ProgressExchange(worker.peers)
        self.update = self.progress.update       # the hot path: a bound method, no wrapper
        self.dropped = False
        self.running = True                     # False once a step found it complete
        self.moved = False                      # whether the last step shared or applied progress
        self.shape: list = []
        self._edges: list[Edge] = []
        self.scopes: dict[tuple, str] = {}      # scope address -> name (for pictures)
        self._loops: list = []
        self._on_drop: list[Callable[[], None]] = []
        self._held: list[weakref.ref[Closeable]] = []
        self._frontier_watchers: dict[int, int] = {}
        self._queued: list[bool] = []
        self._heap: list[int] = []
        self._deferred: list[int] = []
        self._cursor: int | None = None
        self.gathering: list = []       # exchanges holding parts of the activation under way
        self._inputs_at: dict[int, "InputPort"] = {}
        self._input_handles: list = []
        self._unordered_inputs: list[int] = []
        self._sent_while_built: list[tuple["OutputPort", Any, Any]] = []

    # -- building -------------------------------------------------------------------------

    def _building(self) -> GraphBuilder:
        """The graph being built (an error once the dataflow is built)."""
        if self.graph is None:
            raise RuntimeError(f"dataflow {self.name!r} is already built; "
                               f"operators can only be added inside its build function")
        return self.graph

    def reserve_operator(self, name: str, scope: "Scope") -> Operator:
        self._building()
        index = len(self.operators)
        self.scopes.setdefault(scope.address, scope.name)
        operator = Operator(name, index, scope.address + (index,))
        self.operators.append(operator)
        self._queued.append(False)
        return operator

    def add_operator(self, operator: Operator, summaries: list[list[list]],
                     input_kinds: list[TimeKind], output_kinds: list[TimeKind] | None = None) -> None:
        """Place a reserved operator (its ports already created) into the progress graph."""
        graph = self._building()
        outputs = operator.outputs
        node = graph.add_node(operator.name, len(operator.inputs), len(outputs), summaries,
                              input_kinds, output_kinds or [port.kind for port in outputs])
        for port, handle in enumerate(operator.inputs):
            handle.location = graph.target(node, port)
            handle.frontier = graph.implications(handle.location)
            self._inputs_at[handle.location] = handle
        for port, output in enumerate(outputs):
            output.location = graph.source(node, port)
        self.activate(operator.index)

    def connect(self, source: "OutputPort", target: "InputPort", pact: "Pact") -> None:
        """Feed ``target`` from ``source`` through ``pact`` (an edge of the progress graph)."""
        self._edges.append(Edge(source, target, pact, pact.connect(source, target)))

    @property
    def edges(self) -> tuple[Edge, ...]:
        """The channels between this dataflow's operators, in the order they were made."""
        return tuple(self._edges)

    def add_loop(self, handle) -> None:
        self._loops.append(handle)

    def add_input_handle(self, handle, operator: int) -> None:
        """Remember that ``handle`` feeds operator ``operator`` (to name it if it is left
        open). Weakly: a handle nobody references any more closes itself."""
        self._input_handles.append((weakref.ref(handle), operator))

    def add_unordered_input(self, operator: int) -> None:
        """Remember that operator ``operator`` is an unordered input (to name it if its
        capabilities or sessions alone hold the dataflow)."""
        self._unordered_inputs.append(operator)

    def input_handles(self) -> dict[int, Any]:
        """The input handles still referenced that feed this dataflow, by the index of the
        operator each feeds."""
        return {operator: handle for ref, operator in self._input_handles
                if (handle := ref()) is not None}

    def on_drop(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` if this dataflow is dropped (``Worker.drop_dataflow``)."""
        self._on_drop.append(callback)

    def hold(self, closeable: Closeable) -> None:
        """Close ``closeable`` (anything with ``close()``: a handle on something outside
        the dataflow) when this dataflow is dropped, after the ``on_drop`` callbacks.
        Weakly: what nobody references any more is not kept alive for it."""
        self._held.append(weakref.ref(closeable))

    def hold_until_built(self, port: "OutputPort", time: Any, batch: Any) -> None:
        """Keep a batch sent out of ``port`` while the dataflow is built (an input handle
        given records in the build function) until every consumer is connected."""
        self._sent_while_built.append((port, time, batch))

    def finish_building(self) -> None:
        """Compile the graph into a tracker; errors here name the offending operators."""
        graph = self._building()
        for operator in self.operators:
            if operator.logic is None:
                raise RuntimeError(
                    f"operator {operator.name!r} (address {operator.address}) of dataflow "
                    f"{self.name!r} was never built: call build(ctor) or build_reschedule(ctor) "
                    f"on its OperatorBuilder")
        for handle in self._loops:
            handle._check_connected()
        source_ports = {loc: port for port, loc in graph.sources.items()}
        target_ports = {loc: port for port, loc in graph.targets.items()}
        for source, target, _, _ in self._edges:
            graph.add_edge(source_ports[source.location], target_ports[target.location])
        self.tracker = graph.build()
        # Workers compare structure only: names may hold user objects' reprs (addresses).
        self.shape = [(op.address, len(op.inputs), len(op.outputs)) for op in self.operators] + [
            (source.location, target.location) for source, target, _, _ in self._edges]
        self.graph = None
        self._loops = []
        for port, time, batch in self._sent_while_built:
            port.push(time, batch)
        self._sent_while_built = []
        if self.worker._observer is not None:
            self.worker._observer.dataflow_built(self)
        for operator in self.operators:
            if operator.watches_frontiers:
                for handle in operator.inputs:
                    self._frontier_watchers[handle.location] = operator.index
        _, initial_frontiers = self.progress.start(
            self.tracker, self._announce if self.peers > 1 else None)
        self._activate_watchers(initial_frontiers)

    def _announce(self, batch: list | None) -> None:
        """Tell every other worker what this one built, with the capabilities its operators
        dropped while building (``batch``, or None): they check the shape before they apply
        anything from this dataflow. Then take in what they sent, as :meth:`_broadcast`."""
        self.worker.broadcast((GRAPH, self.index, self.name, self.shape,
                               [op.name for op in self.operators], hash(SALT_PROBE), batch))
        if batch is not None:
            self.worker._receive_arrived()

    # -- progress and scheduling ----------------------------------------------------------

    def acquire_initial(self, location: int, time: Timestamp) -> None:
        """Count the capability an operator's constructor is given while the dataflow is
        built: every worker's operator gets the same one, so it is counted once per worker
        without any message. Any other capability (one a constructor delays to, an input
        handle's at its current time) is a change of this worker's own, shared as any other
        (``update``): it may differ from worker to worker."""
        if self.graph is None:
            raise RuntimeError(f"dataflow {self.name!r} is built: an initial capability "
                               f"can only be made while it is being built")
        self.progress.acquire_initial(location, time)

    @property
    def activating(self) -> bool:
        """True while one of this dataflow's operators is being scheduled: what it pushes
        into an exchange may wait for the end of its activation (:attr:`gathering`), where
        a push from outside (an input handle's) must go at once.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     seen, flows = [], []
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).inspect(
        ...         lambda x: seen.append(flows[0].activating)))
        ...     flows.append(worker.dataflows()[0])
        ...     outside = flows[0].activating
        ...     worker.run()
        ...     return outside, seen
        >>> st.execute_directly(job)
        (False, [True])
        """
        return self._cursor is not None

    def activate(self, index: int) -> None:
        """Schedule operator ``index`` at the next opportunity."""
        if self._queued[index]:
            return
        self._queued[index] = True
        if self._cursor is not None and index <= self._cursor:
            self._deferred.append(index)
        else:
            heappush(self._heap, index)

    def describe_input(self, location: int) -> str:
        """How errors name the input at ``location``: its operator, and the dataflow.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).map(str).probe(), name="small")
        ...     dataflow = worker.dataflows()[0]
        ...     return dataflow.describe_input(dataflow.operators[1].inputs[0].location)
        >>> st.execute_directly(job)
        "operator 'Map' (address (0, 1)) of dataflow 'small'"
        """
        operator = self.operators[self._inputs_at[location].operator]
        return f"operator {operator.name!r} (address {operator.address}) of dataflow {self.name!r}"

    def deliver(self, source: int, message: tuple) -> None:
        """Take in a message another worker sent for this dataflow."""
        if self.worker._observer is not None:
            self.worker._observer.received(source, message)
        kind = message[0]
        if kind == DATA:
            _, _, location, time, batch = message
            input = self._inputs_at[location]
            queue = input.queue
            if queue.__class__ is SchemaCheckedQueue:       # an exchange's: names the sender
                queue.append_from(source, (time, batch, batch_length(batch)))
            else:
                queue.append((time, batch, batch_length(batch)))
            self.activate(input.operator)
        elif kind == PROGRESS:
            self.progress.receive(message[2])
        elif kind == SCHEMA:
            _, _, location, schema = message
            queue = self._inputs_at[location].queue
            if isinstance(queue, SchemaCheckedQueue):       # an exchange's, as announced
                queue.check(source, schema)
        elif kind == GRAPH:
            _, _, name, shape, names, salt_probe, dropped = message
            if name != self.name:
                raise RuntimeError(
                    f"workers built dataflow {self.index} under different names: worker "
                    f"{source} named it {name!r}, worker {self.worker.index} {self.name!r}; "
                    f"every worker must build the same dataflows in the same order (are two "
                    f"programs, or one with other arguments, run on one hostfile?)")
            if shape != self.shape:
                raise RuntimeError(
                    f"workers built dataflow {self.name!r} differently: worker {source} has "
                    f"{_describe(names)}, worker {self.worker.index} has "
                    f"{_describe([op.name for op in self.operators])}; every worker must "
                    f"build the same dataflows in the same order")
            if salt_probe != hash(SALT_PROBE) and self.worker.index == 0 and \
                    any(calls_hash(route) for route in self._routes()):
                self.worker._warn_salted_hash(source)
            if dropped is not None:
                self.progress.receive(dropped)

    def announce_schema(self, location: int, schema: Any) -> None:
        """Tell every other worker's input ``location`` (an exchange's) the Arrow schema of
        the batches this worker sends it from now on."""
        self.worker.exchanged_arrow = True
        self.worker.broadcast((SCHEMA, self.index, location, schema))

    def _routes(self) -> list[Callable[[Any], Any]]:
        """The route functions of this dataflow's exchanges."""
        return [route for edge in self._edges
                if callable(route := getattr(edge.pact, "route", None))]

    def _propagate(self) -> bool:
        """Run the progress protocol: share what must be shared, and schedule the operators
        whose input frontiers moved. True if it shared changes or moved a frontier."""
        batch, changed = self.progress.exchange(self._broadcast)
        self._activate_watchers(changed)
        return batch is not None or bool(changed)

    def _broadcast(self, batch: list) -> None:
        """Send a progress batch to every other worker before this one applies it, so they
        apply it meanwhile; then take in what they shared (in a round, their part of it),
        so that this worker's pass applies it too instead of waiting for the next step."""
        self.worker.broadcast((PROGRESS, self.index, batch))
        self.worker._receive_arrived()

    def _activate_watchers(self, targets: set[int]) -> None:
        """Schedule the operators that watch the frontiers of ``targets``."""
        watchers = self._frontier_watchers
        for target in targets:
            index = watchers.get(target)
            if index is not None:
                self.activate(index)

    def step(self) -> bool:
        """Run one round; True while the dataflow has work left (capabilities or data).
        ``moved`` says whether this round shared or applied progress (a frontier, e.g. a
        probe's, may have changed: the caller's loop must look before it waits)."""
        self.moved = not self.progress.quiet() and self._propagate()
        heap = self._heap
        if heap:
            operators = self.operators
            queued = self._queued
            observer = self.worker._observer
            gathering = self.gathering
            try:
                while heap:
                    index = heappop(heap)
                    queued[index] = False
                    self._cursor = index
                    if observer is not None:
                        observer.scheduled(self.index, index, True)
                    if operators[index].schedule():
                        self.activate(index)
                    if gathering:
                        for pusher in gathering:
                            pusher.activation_ended()
                        gathering.clear()
                    if observer is not None:
                        observer.scheduled(self.index, index, False)
            finally:
                self._cursor = None
                for index in self._deferred:
                    heappush(heap, index)
                self._deferred = []
            self._propagate()
        if self.progress.tracking_anything() or heap:
            return True
        self.running = False
        if self.worker._observer is not None:
            self.worker._observer.dataflow_finished(self)
        self._release_operators()
        return False

    def _release_operators(self) -> None:
        """Let go of what the operators run with: their logic (with its state and whatever
        the user's functions captured) and their output handles. A finished dataflow runs no
        more, but the worker keeps the last few (their operators and channels, for
        ``worker.dataflows()`` and pictures; ``Worker.finished_kept``), which need none of
        that. And the logic refers back to its operator, so a dropped dataflow would
        otherwise wait for the cycle collector to be freed."""
        for operator in self.operators:
            operator.logic = None
            operator.handles = []

    def drop(self) -> None:
        """Stop this dataflow here: run the ``on_drop`` callbacks and release what it holds.
        A callback that raises does not keep the others from running nor the dataflow from
        being released; the first such error is raised then, naming the dataflow."""
        self.dropped = True
        observer = self.worker._observer
        if self.running and observer is not None:       # (told when it finished)
            observer.dataflow_finished(self)
        callbacks, self._on_drop = self._on_drop, []
        failed: tuple[Callable[[], Any], Exception] | None = None
        for callback in callbacks:
            try:
                callback()
            except Exception as error:
                failed = failed or (callback, error)
        held, self._held = self._held, []
        for ref in held:
            closeable = ref()
            if closeable is not None:
                closeable.close()
        for handle_ref, _ in self._input_handles:
            handle = handle_ref()
            if handle is not None:
                handle._forget(self)
        self._release_operators()
        self.operators = []
        self._edges = []                # (each edge's ports refer back to this dataflow)
        self._inputs_at = {}
        self._frontier_watchers = {}
        self._heap = []
        self._input_handles = []
        if observer is not None:
            observer.dataflow_dropped(self)
        if failed is not None:
            callback, cause = failed
            raise RuntimeError(f"dataflow {self.name!r} (index {self.index}): its on_drop "
                               f"callback {route_name(callback)} raised {describe(cause)}"
                               ) from cause

    def open_inputs(self, earliest: bool = False) -> list[OpenInput]:
        """The inputs (input handles, unordered inputs) that alone keep this dataflow from
        completing (empty if anything else holds a pointstamp, or if another worker's copy of
        an input, at an earlier time than this worker's, is what holds it: a busy peer, not a
        forgotten handle here). With ``earliest``, those that alone hold its earliest times
        back: a capability at later times only (an imported trace's, say) is not counted."""
        tracker = self.tracker
        # Capabilities, at operators' outputs: counts of messages at their inputs may stay
        # unshared while a capability upstream holds their time (they could move nothing).
        stamps = {port.location: tracker.pointstamps(port.location)
                  for operator in self.operators for port in operator.outputs}
        stamps = {location: held for location, held in stamps.items() if not held.is_empty()}
        held = {location for location, mine in stamps.items()
                if not earliest or any(not any(other.less_than(time) for other in stamps.values())
                                       for time in mine.frontier())}
        inputs: dict[Any, tuple[Literal["handle", "unordered"], str, int]] = {}
        for handle_ref, operator in self._input_handles:
            handle = handle_ref()
            location = self.operators[operator].outputs[0].location
            if handle is not None and not handle._closed and \
                    not tracker.pointstamps(location).less_than(handle.time()):
                inputs[location] = ("handle", f"input handle {handle.name!r}", operator)
        for operator in self._unordered_inputs:
            inputs[self.operators[operator].outputs[0].location] = (
                "unordered", "an unordered input, by a capability not dropped or a session not "
                "ended,", operator)
        if not held or not held <= inputs.keys():
            return []
        return [OpenInput(kind, f"{what} (operator {self.operators[operator].name!r} at address "
                                f"{self.operators[operator].address})")
                for kind, what, operator in (inputs[location] for location in sorted(held))]


def _describe(names: list[str]) -> str:
    return f"{len(names)} operators ({', '.join(names)})"
