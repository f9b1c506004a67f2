"""Workers and the dataflows they run.

A :class:`Worker` owns dataflows; each :class:`Dataflow` owns its operators, a progress
tracker for its (flattened) graph and the set of operators waiting to be scheduled.
``worker.step()`` runs one round: apply progress, schedule what is activated (in operator
order, so a pipeline runs end to end in one step), apply progress again.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable

from ..progress.reachability import GraphBuilder, Tracker
from ..progress.timestamp import TimeKind, Timestamp
from .operator import Operator

if TYPE_CHECKING:
    from .channels import Pact
    from .ports import InputPort, OutputPort
    from .scope import Scope


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
        self._frontier_watchers: dict[int, int] = {}
        self._queued: list[bool] = []
        self._heap: list[int] = []
        self._deferred: list[int] = []
        self._cursor: int | None = None

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
        self.graph = None
        self._loops = []
        for operator in self.operators:
            if operator.watches_frontiers:
                for handle in operator.inputs:
                    self._frontier_watchers[handle.location] = operator.index
        self._propagate()

    # -- progress and scheduling ----------------------------------------------------------

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

    def _propagate(self) -> None:
        changes = self._changes
        if not changes:
            return
        self._changes = {}
        tracker = self.tracker
        for (location, time), delta in changes.items():
            if delta:
                tracker.update(location, time, delta)
        watchers = self._frontier_watchers
        for target in tracker.propagate_all():
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
        return self.tracker.tracking_anything() or bool(heap)


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

    def __init__(self, index: int = 0, peers: int = 1, args: list[str] | None = None) -> None:
        self.index = index
        self.peers = peers
        self.args = list(args or [])
        self._dataflows: list[Dataflow] = []
        self._dataflow_count = 0

    def dataflow(self, build: Callable[["Scope"], Any], *, name: str | None = None,
                 timestamp: type = int) -> Any:
        """Build a new dataflow with ``build(scope)`` and return what ``build`` returns.

        Every worker must build the same dataflows in the same order.
        """
        from .scope import Scope
        index = self._dataflow_count
        self._dataflow_count += 1
        dataflow = Dataflow(self, index, name or f"dataflow-{index}")
        scope = Scope(dataflow, None, TimeKind(timestamp), (index,), dataflow.name)
        result = build(scope)
        dataflow.finish_building()
        self._dataflows.append(dataflow)
        return result

    def step(self) -> bool:
        """Run one round of every dataflow; True while any dataflow is still running."""
        self._dataflows = [d for d in self._dataflows if d.step()]
        return bool(self._dataflows)

    def step_while(self, predicate: Callable[[], bool]) -> None:
        """Step until ``predicate()`` is false."""
        while predicate():
            self.step()

    def step_or_park(self, timeout_seconds: float | None = None) -> bool:
        """Step; a worker with peers then waits up to ``timeout_seconds`` for news if it had
        nothing to do. A lone worker has nobody to hear from, so it never waits."""
        return self.step()

    def run(self) -> None:
        """Step until every dataflow has completed."""
        while self.step():
            pass
