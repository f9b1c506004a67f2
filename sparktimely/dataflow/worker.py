"""Workers and the dataflows they run.

A :class:`Worker` owns dataflows; each :class:`Dataflow` owns its operators, a progress
tracker for its (flattened) graph and the set of operators waiting to be scheduled.
``worker.step()`` runs one round: take in messages from other workers, apply progress,
schedule what is activated (in operator order, so a pipeline runs end to end in one step),
apply progress again, and send what was produced.

With several workers, every worker tracks the global progress of each dataflow: the
pointstamp changes a worker makes in one propagation are sent, as one atomic batch, to every
other worker (FIFO per sender), and each worker applies everyone's batches to its own tracker.
"""
from __future__ import annotations

import pickle
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable

from ..progress.reachability import GraphBuilder, Tracker
from ..progress.timestamp import TimeKind, Timestamp
from .operator import Operator
from .ports import batch_length

if TYPE_CHECKING:
    from ..comm import Allocator
    from .channels import Pact
    from .ports import InputPort, OutputPort
    from .scope import ScopeCore as Scope


DATA, PROGRESS, GRAPH = 0, 1, 2
"""Kinds of worker-to-worker messages: ``(DATA, dataflow, location, time, batch)``,
``(PROGRESS, dataflow, [((location, time), delta), ...])`` and
``(GRAPH, dataflow, shape)`` (each worker's description of the dataflow it built)."""


class Dataflow:
    """One dataflow graph on one worker: operators, progress and scheduling."""

    def __init__(self, worker: "Worker", index: int, name: str) -> None:
        self.worker = worker
        self.index = index
        self.name = name
        self.peers = worker.peers
        self.operators: list[Operator] = []
        self.graph: GraphBuilder | None = GraphBuilder()
        self.tracker: Tracker | None = None
        self._edges: list[tuple["OutputPort", "InputPort"]] = []
        self._loops: list = []
        self._changes: dict[tuple[int, Timestamp], int] = {}
        self._initial: dict[tuple[int, Timestamp], int] = {}
        self._frontier_watchers: dict[int, int] = {}
        self._queued: list[bool] = []
        self._heap: list[int] = []
        self._deferred: list[int] = []
        self._cursor: int | None = None
        self._inputs_at: dict[int, "InputPort"] = {}

    # -- building -------------------------------------------------------------------------

    def reserve_operator(self, name: str, scope: "Scope") -> Operator:
        if self.graph is None:
            raise RuntimeError(f"dataflow {self.name!r} is already built; "
                               f"operators can only be added inside its build function")
        index = len(self.operators)
        operator = Operator(name, index, scope.address + (index,))
        self.operators.append(operator)
        self._queued.append(False)
        return operator

    def add_operator(self, operator: Operator, summaries: list[list[list]],
                     input_kinds: list[TimeKind], output_kinds: list[TimeKind] | None = None) -> None:
        """Place a reserved operator (its ports already created) into the progress graph."""
        graph = self.graph
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
        pact.connect(source, target)
        self._edges.append((source, target))

    def add_loop(self, handle) -> None:
        self._loops.append(handle)

    def finish_building(self) -> None:
        """Compile the graph into a tracker; errors here name the offending operators."""
        graph = self.graph
        for handle in self._loops:
            handle._check_connected()
        source_ports = {loc: port for port, loc in graph._sources.items()}
        target_ports = {loc: port for port, loc in graph._targets.items()}
        for source, target in self._edges:
            graph.add_edge(source_ports[source.location], target_ports[target.location])
        self.tracker = graph.build()
        self.shape = [(op.name, len(op.inputs), len(op.outputs)) for op in self.operators] + [
            (source.location, target.location) for source, target in self._edges]
        self.graph = None
        self._loops = []
        for (location, time), count in self._initial.items():
            self.tracker.update(location, time, count * self.peers)
        if self.peers > 1:       # first, so peers check the shape before anything else
            self.worker.broadcast((GRAPH, self.index, self.shape))
        for operator in self.operators:
            if operator.watches_frontiers:
                for handle in operator.inputs:
                    self._frontier_watchers[handle.location] = operator.index
        self._propagate()

    # -- progress and scheduling ----------------------------------------------------------

    def acquire(self, location: int, time: Timestamp) -> None:
        """Count a new capability. One made while the dataflow is built is made identically
        by every worker, so it is counted once per worker without any message."""
        if self.tracker is None:
            key = (location, time)
            self._initial[key] = self._initial.get(key, 0) + 1
        else:
            self.update(location, time, 1)

    def update(self, location: int, time: Timestamp, delta: int) -> None:
        """Record a pointstamp change made on this worker (applied at the next propagation)."""
        key = (location, time)
        changes = self._changes
        changes[key] = changes.get(key, 0) + delta

    def activate(self, index: int) -> None:
        """Schedule operator ``index`` at the next opportunity."""
        if self._queued[index]:
            return
        self._queued[index] = True
        if self._cursor is not None and index <= self._cursor:
            self._deferred.append(index)
        else:
            heappush(self._heap, index)

    def deliver(self, source: int, message: tuple) -> None:
        """Take in a message another worker sent for this dataflow."""
        kind = message[0]
        if kind == DATA:
            _, _, location, time, batch = message
            input = self._inputs_at[location]
            input.queue.append((time, batch, batch_length(batch)))
            self.activate(input.operator)
        elif kind == PROGRESS:
            update = self.tracker.update
            for (location, time), delta in message[2]:
                update(location, time, delta)
        elif kind == GRAPH:
            if message[2] != self.shape:
                raise RuntimeError(
                    f"workers built dataflow {self.name!r} differently: worker {source} has "
                    f"{_describe(message[2])}, worker {self.worker.index} has "
                    f"{_describe(self.shape)}; every worker must build the same dataflows "
                    f"in the same order")

    def _propagate(self) -> None:
        """Share and apply this worker's pointstamp changes, then push everything that
        arrived through the tracker.

        With peers, changes are held back (timely's "demand" mode) until one of them
        removes a pointstamp that alone holds some frontier back; then all of them go out
        as one atomic batch, to every worker and to this one's tracker. Held-back
        increments are always justified by pointstamps every worker still sees.
        """
        tracker = self.tracker
        if tracker.has_pending():     # what the others sent, and the initial capabilities
            self._activate_watchers(tracker.propagate_all())
        changes = self._changes
        if changes and (self.peers == 1 or any(
                delta < 0 and tracker.is_global(location, time)
                for (location, time), delta in changes.items())):
            self._changes = {}
            if self.peers > 1:
                batch = [(key, delta) for key, delta in changes.items() if delta]
                if batch:
                    self.worker.broadcast((PROGRESS, self.index, batch))
            update = tracker.update
            for (location, time), delta in changes.items():
                if delta:
                    update(location, time, delta)
            self._activate_watchers(tracker.propagate_all())

    def _activate_watchers(self, targets: set[int]) -> None:
        """Schedule the operators that watch the frontiers of ``targets``."""
        watchers = self._frontier_watchers
        for target in targets:
            index = watchers.get(target)
            if index is not None:
                self.activate(index)

    def step(self) -> bool:
        """Run one round; True while the dataflow has work left (capabilities or data)."""
        self._propagate()
        heap = self._heap
        if heap:
            operators = self.operators
            queued = self._queued
            try:
                while heap:
                    index = heappop(heap)
                    queued[index] = False
                    self._cursor = index
                    if operators[index].schedule():
                        self.activate(index)
            finally:
                self._cursor = None
                for index in self._deferred:
                    heappush(heap, index)
                self._deferred = []
            self._propagate()
        return self.tracker.tracking_anything() or bool(heap) or bool(self._changes)


class Worker:
    """A timely worker: builds dataflows and runs them step by step.

    >>> import sparktimely as st
    >>> def job(worker):
    ...     probe = worker.dataflow(lambda scope: scope.to_stream(range(5)).count().probe())
    ...     worker.step_while(lambda: not probe.done())
    ...     return worker.index, worker.peers
    >>> st.execute_directly(job)
    (0, 1)
    """

    def __init__(self, index: int = 0, peers: int = 1, args: list[str] | None = None,
                 allocator: "Allocator | None" = None) -> None:
        if peers > 1 and allocator is None:
            raise ValueError("a worker with peers needs an allocator to reach them")
        self.index = index
        self.peers = peers
        self.args = list(args or [])
        self._allocator = allocator
        self._dataflows: list[Dataflow] = []
        self._built: dict[int, Dataflow] = {}
        self._early: dict[int, list[tuple[int, tuple]]] = {}
        self._dataflow_count = 0

    def dataflow(self, build: Callable[["Scope"], Any], *, name: str | None = None,
                 timestamp: type = int) -> Any:
        """Build a new dataflow with ``build(scope)`` and return what ``build`` returns.

        Every worker must build the same dataflows in the same order.
        """
        from .scope import root_scope
        index = self._dataflow_count
        self._dataflow_count += 1
        dataflow = Dataflow(self, index, name or f"dataflow-{index}")
        scope = root_scope(dataflow, TimeKind(timestamp))
        result = build(scope)
        dataflow.finish_building()
        self._dataflows.append(dataflow)
        self._built[index] = dataflow
        if self._allocator is not None:
            for source, message in self._early.pop(index, ()):
                dataflow.deliver(source, message)
        return result

    # -- communication ---------------------------------------------------------------------

    def send_data(self, target: int, dataflow: int, location: int, time: Timestamp,
                  batch: Any) -> None:
        """Send a batch to input ``location`` of ``dataflow`` on worker ``target``."""
        try:
            self._allocator.send(target, (DATA, dataflow, location, time, batch))
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise TypeError(f"a batch for worker {target} at time {time!r} cannot be pickled "
                            f"({error}); records that move between workers must be "
                            f"picklable") from error

    def broadcast(self, message: tuple) -> None:
        """Send ``message`` to every other worker."""
        send = self._allocator.send
        for target in range(self.peers):
            if target != self.index:
                send(target, message)

    def _receive(self) -> bool:
        """Deliver arrived messages (stashing those for dataflows not built yet)."""
        messages = self._allocator.receive()
        for source, message in messages:
            dataflow = self._built.get(message[1])
            if dataflow is None:
                self._early.setdefault(message[1], []).append((source, message))
            else:
                dataflow.deliver(source, message)
        return bool(messages)

    # -- running -----------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one round of every dataflow; True while any dataflow is still running."""
        return self._step()[0]

    def _step(self) -> tuple[bool, bool]:
        """One round; returns (still running, whether there was anything to do)."""
        allocator = self._allocator
        busy = allocator is not None and (self._receive() or any(
            d._heap or d.tracker.has_pending() for d in self._dataflows))
        self._dataflows = [d for d in self._dataflows if d.step()]
        if allocator is not None:
            allocator.flush()
        return bool(self._dataflows), busy

    def step_while(self, predicate: Callable[[], bool]) -> None:
        """Step until ``predicate()`` is false (parking while there is nothing to do)."""
        while predicate():
            self.step_or_park(1.0)

    def step_or_park(self, timeout_seconds: float | None = None) -> bool:
        """Step; if there was nothing to do, wait up to ``timeout_seconds`` (None: until
        something arrives) for messages from other workers. A lone worker never waits."""
        running, busy = self._step()
        if running and not busy and self._allocator is not None:
            self._allocator.park(timeout_seconds)
        return running

    def run(self) -> None:
        """Step until every dataflow has completed (here and, as far as it affects this
        worker, everywhere), then make sure every message for other workers is sent."""
        while self.step_or_park(1.0):
            pass
        self._check_all_built()
        if self._allocator is not None:
            while not self._allocator.flush():
                self._allocator.park(0.01)

    def _check_all_built(self) -> None:
        for index, messages in self._early.items():
            sources = sorted({source for source, _ in messages})
            raise RuntimeError(
                f"worker {self.index} got messages for dataflow {index} from worker(s) "
                f"{sources} but never built it: every worker must build the same dataflows")


def _describe(shape: list) -> str:
    operators = [entry[0] for entry in shape if isinstance(entry[0], str)]
    return f"{len(operators)} operators ({', '.join(operators)})"
