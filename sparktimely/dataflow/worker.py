"""Workers and the dataflows they run.

A :class:`Worker` owns dataflows; each :class:`Dataflow` owns its operators, a progress
tracker for its (flattened) graph and the set of operators waiting to be scheduled.
``worker.step()`` runs one round: take in messages from other workers, apply progress,
schedule what is activated (in operator order, so a pipeline runs end to end in one step),
apply progress again, and send what was produced.

With several workers, every worker tracks the global progress of each dataflow: the
pointstamp changes a worker makes are shared, as one atomic batch, with every other worker
(FIFO per sender), and each worker applies everyone's batches to its own tracker. When and
what to share is decided by :class:`~sparktimely.progress.exchange.ProgressExchange`, a pure
state machine; this module only moves its messages.
"""
from __future__ import annotations

import logging
import os
import pickle
import threading
import time as _time
import weakref
from collections import deque
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Callable

from ..hashing import calls_hash
from ..progress.exchange import ProgressExchange
from ..progress.reachability import GraphBuilder, Tracker
from ..progress.timestamp import TimeKind, Timestamp
from .channels import SchemaCheckedQueue
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
``(GRAPH, dataflow, shape, names, salt_probe)`` (each worker's description of the dataflow
it built, and its Python ``hash`` of a fixed string, to detect differently salted peers)."""

logger = logging.getLogger("sparktimely")

_SALT_PROBE = "sparktimely: is hash() salted alike on every worker?"


class Dataflow:
    """One dataflow graph on one worker: operators, progress and scheduling."""

    def __init__(self, worker: "Worker", index: int, name: str) -> None:
        self.worker = worker
        self.index = index
        self.name = name
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
        self._edges: list[tuple["OutputPort", "InputPort", "Pact"]] = []
        self.scopes: dict[tuple, str] = {}      # scope address -> name (for pictures)
        self._loops: list = []
        self._on_drop: list[Callable[[], None]] = []
        self._frontier_watchers: dict[int, int] = {}
        self._queued: list[bool] = []
        self._heap: list[int] = []
        self._deferred: list[int] = []
        self._cursor: int | None = None
        self._inputs_at: dict[int, "InputPort"] = {}
        self._input_handles: list = []

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
        pact.connect(source, target)
        self._edges.append((source, target, pact))

    def add_loop(self, handle) -> None:
        self._loops.append(handle)

    def add_input_handle(self, handle, operator: int) -> None:
        """Remember that ``handle`` feeds operator ``operator`` (to name it if it is left
        open). Weakly: a handle nobody references any more closes itself."""
        self._input_handles.append((weakref.ref(handle), operator))

    def on_drop(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` if this dataflow is dropped (``Worker.drop_dataflow``)."""
        self._on_drop.append(callback)

    def finish_building(self) -> None:
        """Compile the graph into a tracker; errors here name the offending operators."""
        graph = self._building()
        for handle in self._loops:
            handle._check_connected()
        source_ports = {loc: port for port, loc in graph._sources.items()}
        target_ports = {loc: port for port, loc in graph._targets.items()}
        for source, target, _ in self._edges:
            graph.add_edge(source_ports[source.location], target_ports[target.location])
        self.tracker = graph.build()
        # Workers compare structure only: names may hold user objects' reprs (addresses).
        self.shape = [(op.address, len(op.inputs), len(op.outputs)) for op in self.operators] + [
            (source.location, target.location) for source, target, _ in self._edges]
        self.graph = None
        self._loops = []
        if self.worker._log is not None:
            self.worker._log.dataflow_built(self)
        initial_frontiers = self.progress.start(self.tracker)
        if self.peers > 1:       # first, so peers check the shape before anything else
            self.worker.broadcast((GRAPH, self.index, self.shape,
                                   [op.name for op in self.operators], hash(_SALT_PROBE)))
        for operator in self.operators:
            if operator.watches_frontiers:
                for handle in operator.inputs:
                    self._frontier_watchers[handle.location] = operator.index
        self._activate_watchers(initial_frontiers)
        self._propagate()

    # -- progress and scheduling ----------------------------------------------------------

    def acquire(self, location: int, time: Timestamp) -> None:
        """Count a new capability. One made while the dataflow is built is made identically
        by every worker, so it is counted once per worker without any message."""
        if self.graph is not None:
            self.progress.acquire_initial(location, time)
        else:
            self.update(location, time, 1)

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
        if self.worker._log is not None:
            self.worker._log.received(source, message)
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
        elif kind == GRAPH:
            _, _, shape, names, salt_probe = message
            if shape != self.shape:
                raise RuntimeError(
                    f"workers built dataflow {self.name!r} differently: worker {source} has "
                    f"{_describe(names)}, worker {self.worker.index} has "
                    f"{_describe([op.name for op in self.operators])}; every worker must "
                    f"build the same dataflows in the same order")
            if salt_probe != hash(_SALT_PROBE) and self.worker.index == 0 and \
                    any(calls_hash(route) for route in self._routes()):
                self.worker._warn_salted_hash(source)

    def _routes(self) -> list[Callable[[Any], Any]]:
        """The route functions of this dataflow's exchanges."""
        return [route for _, _, pact in self._edges
                if callable(route := getattr(pact, "route", None))]

    def _propagate(self) -> bool:
        """Run the progress protocol: share what must be shared, and schedule the operators
        whose input frontiers moved. True if it shared changes or moved a frontier."""
        batch, changed = self.progress.exchange()
        if batch is not None:
            self.worker.broadcast((PROGRESS, self.index, batch))
        self._activate_watchers(changed)
        return batch is not None or bool(changed)

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
            log = self.worker._log
            try:
                while heap:
                    index = heappop(heap)
                    queued[index] = False
                    self._cursor = index
                    if log is not None:
                        log.schedule(self.index, index, True)
                    if operators[index].schedule():
                        self.activate(index)
                    if log is not None:
                        log.schedule(self.index, index, False)
            finally:
                self._cursor = None
                for index in self._deferred:
                    heappush(heap, index)
                self._deferred = []
            self._propagate()
        if self.progress.tracking_anything() or heap:
            return True
        self.running = False
        if self.worker._log is not None:
            self.worker._log.shutdown(self)
        return False

    def drop(self) -> None:
        """Stop this dataflow here: run the ``on_drop`` callbacks and release what it holds."""
        self.dropped = True
        if self.worker._log is not None:
            self.worker._log.shutdown(self)
        callbacks, self._on_drop = self._on_drop, []
        for callback in callbacks:
            callback()
        for handle_ref, _ in self._input_handles:
            handle = handle_ref()
            if handle is not None:
                handle._forget(self)
        self.operators = []
        self._inputs_at = {}
        self._frontier_watchers = {}
        self._heap = []
        self._input_handles = []

    def open_inputs(self) -> list[str]:
        """Descriptions of the input handles that alone keep this dataflow from completing
        (empty if anything else holds a pointstamp)."""
        tracker = self.tracker
        held = {location for location in range(tracker.locations())
                if not tracker.pointstamps(location).is_empty()}
        inputs = {}
        for handle_ref, operator in self._input_handles:
            handle = handle_ref()
            if handle is not None and not handle._closed:
                inputs[self.operators[operator].outputs[0].location] = (handle, operator)
        if not held or not held <= inputs.keys():
            return []
        return [f"input handle {inputs[location][0].name!r} (operator "
                f"{self.operators[inputs[location][1]].name!r} at address "
                f"{self.operators[inputs[location][1]].address})" for location in sorted(held)]


class SyncActivator:
    """Schedules an operator from any thread, and wakes its worker if it is parked (timely's
    ``SyncActivator``): for sources fed by I/O threads.

    >>> import threading, queue
    >>> import sparktimely as st
    >>> def job(worker):
    ...     arrived = queue.SimpleQueue()
    ...     def build(scope):
    ...         def ctor(cap, info):
    ...             activator = worker.sync_activator_for(info.address)
    ...             def feed():                   # another thread produces, then pokes
    ...                 for x in (1, 2, None):
    ...                     arrived.put(x)
    ...                     activator.activate()
    ...             threading.Thread(target=feed).start()
    ...             def logic(output):
    ...                 while not arrived.empty():
    ...                     x = arrived.get()
    ...                     if x is None:
    ...                         cap.drop()
    ...                     else:
    ...                         output.session(cap).give(x)
    ...             return logic
    ...         return st.source(scope, "FromThread", ctor).capture()
    ...     return worker.dataflow(build)
    >>> st.execute_directly(job).extract()
    [(0, [1, 2])]
    """

    __slots__ = ("_worker", "_dataflow", "_operator")

    def __init__(self, worker: "Worker", dataflow: int, operator: int) -> None:
        self._worker = worker
        self._dataflow = dataflow
        self._operator = operator

    def activate(self) -> None:
        """Schedule the operator at the worker's next step (safe from any thread)."""
        self._worker._remote_activations.append((self._dataflow, self._operator))
        self._worker._wake()


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

    idle_hint_after = 2.0
    """Seconds without any work, after ``func`` returned, before :meth:`run` logs which input
    handles were never closed (once per dataflow)."""

    def __init__(self, index: int = 0, peers: int = 1, args: list[str] | None = None,
                 allocator: "Allocator | None" = None) -> None:
        if peers > 1 and allocator is None:
            raise ValueError("a worker with peers needs an allocator to reach them")
        self.index = index
        self.peers = peers
        self.args = list(args or [])
        self._allocator = allocator
        self._dataflows: list[Dataflow] = []
        self._built: dict[int, Dataflow] = {}     # built and not dropped, by index
        self._dropped: set[int] = set()            # their late messages are discarded
        self._early: dict[int, list[tuple[int, tuple]]] = {}
        self._dataflow_count = 0
        self._salt_warned = False
        self._remote_activations: deque = deque()
        self._alone_wakeup: threading.Event | None = None
        self._log: Any = None            # sparktimely.logging's hooks while a log is registered
        self._log_registry: Any = None
        self.steps = 0
        """Steps taken so far (a stall watchdog reads it from another thread)."""
        self.recovery: Any = None
        """The checkpoint coordinator (``sparktimely.io.enable_checkpoints``), or None: told
        of every dataflow built and called after every step."""

    def dataflow(self, build: Callable[[Any], Any], *, name: str | None = None,
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
        for source, message in self._early.pop(index, ()):
            dataflow.deliver(source, message)
        if self.recovery is not None:
            self.recovery.dataflow_built(dataflow, named=name is not None)
        return result

    def next_dataflow_index(self) -> int:
        """The index the next :meth:`dataflow` will get (for :meth:`drop_dataflow`)."""
        return self._dataflow_count

    def installed_dataflows(self) -> list[int]:
        """The indexes of the dataflows still running on this worker."""
        return [dataflow.index for dataflow in self._dataflows]

    def drop_dataflow(self, index: int) -> None:
        """Stop running dataflow ``index`` on this worker and release what it holds.

        Its ``scope.on_drop`` callbacks run, its operators and queued batches are released,
        input handles stop feeding it, and messages still arriving for it are discarded. As
        in timely, dropping is local: drop it on every worker, or peers that still exchange
        data with it wait forever.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     index = worker.next_dataflow_index()
        ...     worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     before = worker.installed_dataflows()
        ...     worker.drop_dataflow(index)               # the open input no longer matters
        ...     return before, worker.installed_dataflows()
        >>> st.execute_directly(job)
        ([0], [])
        """
        dataflow = self._built.pop(index, None)
        if dataflow is None:
            raise KeyError(f"worker {self.index} has no dataflow {index} to drop "
                           f"(installed: {self.installed_dataflows()})")
        self._dropped.add(index)
        dataflow.drop()
        self._dataflows = [d for d in self._dataflows if d is not dataflow]

    def log_register(self) -> Any:
        """This worker's log registry (a :class:`sparktimely.logging.Registry`):
        ``insert(name, callback)`` has ``callback(time, events)`` receive the ``"timely"``
        events (operators, channels, scheduling, messages, shutdown, parking, steps) or the
        ``"timely/progress"`` ones in batches, once per step. Nothing is logged, at no cost,
        while no callback is registered.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     events = []
        ...     worker.log_register().insert("timely", lambda time, batch: events.extend(batch))
        ...     worker.dataflow(lambda scope: scope.to_stream([1, 2]).map(str).probe())
        ...     worker.run()
        ...     worker.log_register().remove("timely")
        ...     return sorted({type(event).__name__ for event in events})
        >>> st.execute_directly(job)                    # doctest: +NORMALIZE_WHITESPACE
        ['ChannelsEvent', 'MessagesEvent', 'OperatesEvent', 'ScheduleEvent', 'ShutdownEvent',
         'StepsEvent']
        """
        if self._log_registry is None:
            if _log_registry_class is None:
                raise RuntimeError("import sparktimely.logging to register logs")
            self._log_registry = _log_registry_class(self)
        return self._log_registry

    def sync_activator_for(self, address: tuple) -> SyncActivator:
        """An activator for the operator at ``address`` (its ``info.address``) that other
        threads may call; see :class:`SyncActivator`."""
        if self._allocator is None and self._alone_wakeup is None:
            self._alone_wakeup = threading.Event()
        return SyncActivator(self, address[0], address[-1])

    def _wake(self) -> None:
        if self._allocator is not None:
            self._allocator.wake()
        elif self._alone_wakeup is not None:
            self._alone_wakeup.set()

    # -- communication ---------------------------------------------------------------------

    def send_data(self, target: int, dataflow: int, location: int, time: Timestamp,
                  batch: Any) -> None:
        """Send a batch to input ``location`` of ``dataflow`` on worker ``target``."""
        if self._log is not None:
            self._log.sent(target, dataflow, location, batch)
        try:
            self._peer_allocator().send(target, (DATA, dataflow, location, time, batch))
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise TypeError(f"a batch for worker {target} at time {time!r} cannot be pickled "
                            f"({error}); records that move between workers must be "
                            f"picklable") from error

    def _peer_allocator(self) -> "Allocator":
        if self._allocator is None:
            raise RuntimeError(f"worker {self.index} has no peers to exchange messages with")
        return self._allocator

    def broadcast(self, message: tuple) -> None:
        """Send ``message`` to every other worker."""
        if self._log is not None:
            self._log.broadcast(message)
        send = self._peer_allocator().send
        for target in range(self.peers):
            if target != self.index:
                send(target, message)

    def _receive(self, allocator: "Allocator") -> bool:
        """Deliver arrived messages (stashing those for dataflows not built yet, discarding
        those for dropped ones)."""
        messages = allocator.receive()
        if not messages:
            return False
        for source, message in messages:
            dataflow = self._built.get(message[1])
            if dataflow is not None:
                dataflow.deliver(source, message)
            elif message[1] not in self._dropped:
                self._early.setdefault(message[1], []).append((source, message))
        return bool(messages)

    def _warn_salted_hash(self, peer: int) -> None:
        """Once per job (worker 0 sees every peer's salt): a route of this job calls hash()
        and worker ``peer``'s process salts it differently."""
        if not self._salt_warned:
            self._salt_warned = True
            logger.warning(
                "sparktimely: Python's hash() of strings differs between the processes of "
                "this job (worker %d's and worker %d's, another PYTHONHASHSEED), and a route "
                "calls hash(): it sends one key to different workers in different processes. "
                "Route with sparktimely.stable_hash instead; or give every process the same "
                "PYTHONHASHSEED (e.g. PYTHONHASHSEED=0), which also silences this warning.",
                self.index, peer)

    # -- running -----------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one round of every dataflow; True while any dataflow is still running.

        When the round found nothing to do and this host has more workers than the cores
        this process may use, it yields its time slice (``os.sched_yield``), so that a loop
        of steps gives the core to a peer with work, such as the one it waits for. (Parking
        on the doorbell instead, for up to a millisecond, made rounds of 3 and 4 workers on 2
        cores 1.5-1.8x slower than yielding, measured side by side.)"""
        running, busy = self._step()
        if running and not busy and self._allocator is not None and \
                self._allocator.oversubscribed():
            os.sched_yield()
        return running

    def _step(self) -> tuple[bool, bool]:
        """One round; returns (still running, whether there was anything to do)."""
        self.steps += 1
        log = self._log
        if log is not None:
            log.step_began()
        try:
            allocator = self._allocator
            busy = allocator is not None and self._receive(allocator)
            if log is not None:
                log.step_received()
            if self._remote_activations:
                busy = True
                self._activate_remote()
            dataflows = self._dataflows
            finished = False
            for dataflow in dataflows:
                if dataflow._heap or dataflow.tracker.has_pending():
                    busy = True                 # operators to run or progress to apply
                if not dataflow.step():
                    finished = True
                if dataflow.moved:
                    busy = True                 # a frontier may have moved: look before parking
            if finished:
                self._dataflows = [d for d in dataflows if d.running and not d.dropped]
            if log is not None:
                log.step_computed()
            if self.recovery is not None and self.recovery.after_step(busy):
                busy = True
            if allocator is not None:
                if log is not None:
                    log.step_sending()
                allocator.flush()
        except BaseException as error:
            if self._log is not None:           # keep this worker's last events
                self._log.failed(error)
            raise
        if self._log is not None:
            self._log.step_ended()
            self._log.flush()
        return bool(self._dataflows), busy

    def _activate_remote(self) -> None:
        activations = self._remote_activations
        while activations:
            index, operator = activations.popleft()
            dataflow = self._built.get(index)
            if dataflow is not None:
                dataflow.activate(operator)

    def _park(self, timeout_seconds: float | None, idle_sleep: float = 0.0) -> None:
        """Wait up to ``timeout_seconds`` for messages from other workers or activations
        from other threads (a lone worker without such activators sleeps ``idle_sleep``)."""
        if self._log is not None:
            self._log.park(timeout_seconds)
        if self._allocator is not None:
            self._allocator.park(timeout_seconds)
        elif self._alone_wakeup is not None:
            self._alone_wakeup.wait(timeout_seconds)
            self._alone_wakeup.clear()
        elif idle_sleep:
            _time.sleep(idle_sleep)
        if self._log is not None:
            self._log.unpark()

    def step_while(self, predicate: Callable[[], bool]) -> None:
        """Step until ``predicate()`` is false (parking while there is nothing to do)."""
        while predicate():
            self.step_or_park(1.0)

    def step_or_park(self, timeout_seconds: float | None = None) -> bool:
        """Step; if there was nothing to do, wait up to ``timeout_seconds`` (None: until
        something arrives) for messages from other workers or activations from other
        threads. A lone worker without such activators never waits."""
        running, busy = self._step()
        if running and not busy and (self._allocator is not None
                                     or self._alone_wakeup is not None):
            self._park(timeout_seconds)
        return running

    def step_or_park_while(self, timeout_seconds: float | None,
                           predicate: Callable[[], bool]) -> None:
        """:meth:`step_or_park` with ``timeout_seconds`` until ``predicate()`` is false."""
        while predicate():
            self.step_or_park(timeout_seconds)

    def run(self) -> None:
        """Step until every dataflow has completed (here and, as far as it affects this
        worker, everywhere), then make sure every message for other workers is sent.

        If nothing moves for :attr:`idle_hint_after` seconds and only input handles that were
        never closed hold a dataflow open, says which, once (a forgotten ``close()``).
        """
        idle_since = _time.monotonic()
        hinted: set[int] = set()
        while True:
            running, busy = self._step()
            if not running:
                break
            now = _time.monotonic()
            if busy:
                idle_since = now
            elif now - idle_since >= self.idle_hint_after:
                self._hint_open_inputs(hinted)
            if not busy:
                self._park(0.25, idle_sleep=0.001)
        self._check_all_built()
        if self._allocator is not None:
            while not self._allocator.flush():
                self._allocator.park(0.01)

    def _hint_open_inputs(self, hinted: set[int]) -> None:
        for dataflow in self._dataflows:
            if dataflow.index in hinted:
                continue
            open_inputs = dataflow.open_inputs()
            if open_inputs:
                hinted.add(dataflow.index)
                logger.warning(
                    "worker %d: dataflow %r (index %d) cannot complete: only %s still "
                    "hold%s it open. Call close() on an input handle once its input is done.",
                    self.index, dataflow.name, dataflow.index, " and ".join(open_inputs),
                    "s" if len(open_inputs) == 1 else "")

    def _check_all_built(self) -> None:
        for index, messages in self._early.items():
            sources = sorted({source for source, _ in messages})
            raise RuntimeError(
                f"worker {self.index} got messages for dataflow {index} from worker(s) "
                f"{sources} but never built it: every worker must build the same dataflows")


_log_registry_class: Callable[[Worker], Any] | None = None


def use_log_registry_class(cls: Callable[[Worker], Any]) -> None:
    """Make :meth:`Worker.log_register` create registries of ``cls`` (sparktimely.logging's
    ``Registry``, which registers itself here: this layer does not import the ones above)."""
    global _log_registry_class
    _log_registry_class = cls


def _describe(names: list[str]) -> str:
    return f"{len(names)} operators ({', '.join(names)})"
