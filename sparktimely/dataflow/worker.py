"""The worker: builds dataflows and runs them step by step (timely's ``worker.rs``).

``worker.step()`` runs one round: take in messages from other workers, run every dataflow's
round (:class:`~.subgraph.Dataflow`: apply progress, schedule what is activated in operator
order, so a pipeline runs end to end in one step, share progress), let the observers act,
and send what was produced.

:class:`WorkerCore` knows scopes as :class:`~.scope.ScopeCore`; ``sparktimely.Worker`` is the
same worker whose dataflows are built in the operator library's ``Scope``.
"""
from __future__ import annotations

import gc
import logging
import numbers
import os
import pickle
import threading
import time as _time
import weakref
from bisect import bisect_right
from collections import deque
from types import MappingProxyType, MethodType
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from ..comm.codec import UndecodableMessage
from ..errors import require_function, short_repr
from ..progress.timestamp import TimeKind, Timestamp, check_time_type
from .observer import ObserverFanOut, WorkerObserver
from .scope import ScopeCore
from .subgraph import DATA, FINISHED, GRAPH, Dataflow

if TYPE_CHECKING:
    from ..comm import Allocator

R = TypeVar("R")

logger = logging.getLogger("sparktimely")


def _first_unpicklable(batch: Any) -> str:
    """``: the record R``, naming the first record of ``batch`` (a list) that does not
    pickle; empty for an Arrow batch or when each record pickles alone.

    >>> import threading
    >>> _first_unpicklable([1, threading.Lock(), 2])      # doctest: +ELLIPSIS
    ': the record <unlocked _thread.lock object at 0x...>'
    """
    if batch.__class__ is not list:
        return ""
    for record in batch:
        try:
            pickle.dumps(record)
        except Exception:
            return f": the record {short_repr(record)}"
    return ""


class IndexRanges:
    """A set of ints kept as sorted, disjoint runs ``[start, end)``: the indexes of a
    worker's dropped dataflows, which come in runs (a program that builds a dataflow per
    request and lets each go), so that a worker that has dropped millions holds a few runs,
    not millions of ints.

    >>> dropped = IndexRanges()
    >>> for index in [1, 2, 4, 3, 7]:
    ...     dropped.add(index)
    >>> dropped.runs(), 3 in dropped, 5 in dropped
    ([(1, 5), (7, 8)], True, False)
    """

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, index: int) -> None:
        """Put ``index`` in the set, joining the runs it touches."""
        starts, ends = self._starts, self._ends
        at = bisect_right(starts, index)        # runs starting at or before index: at
        if at and index < ends[at - 1]:
            return
        extends_left = at > 0 and ends[at - 1] == index
        extends_right = at < len(starts) and starts[at] == index + 1
        if extends_left and extends_right:
            ends[at - 1] = ends[at]
            del starts[at], ends[at]
        elif extends_left:
            ends[at - 1] = index + 1
        elif extends_right:
            starts[at] = index
        else:
            starts.insert(at, index)
            ends.insert(at, index + 1)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        at = bisect_right(self._starts, index)
        return at > 0 and index < self._ends[at - 1]

    def runs(self) -> list[tuple[int, int]]:
        """The runs, ``(start, end)`` with ``end`` excluded, in order."""
        return list(zip(self._starts, self._ends))


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

    def __init__(self, worker: "WorkerCore", dataflow: int, operator: int) -> None:
        self._worker = worker
        self._dataflow = dataflow
        self._operator = operator

    def activate(self) -> None:
        """Schedule the operator at the worker's next step (safe from any thread)."""
        self._worker._remote_activations.append((self._dataflow, self._operator))
        self._worker._wake()


class WorkerCore:
    """A timely worker: builds dataflows and runs them step by step. Its dataflows are
    built in scopes of :attr:`scope_class`.

    >>> worker = WorkerCore()                      # one worker, scopes of the dataflow layer
    >>> worker.dataflow(lambda scope: type(scope).__name__), worker.index, worker.peers
    ('ScopeCore', 0, 1)
    """

    scope_class: type[ScopeCore] = ScopeCore
    """The class of the scopes dataflows are built in."""

    idle_hint_after = 2.0
    """Seconds without any work, after ``func`` returned, before :meth:`run` logs which input
    handles were never closed (once per dataflow)."""

    finished_kept = 16
    """Finished dataflows a worker keeps (for :meth:`dataflows`, pictures and status
    reports), their operators' logic already released: when one more finishes, the
    oldest of them is dropped, as timely drops each dataflow once it completes. A program
    that builds dataflows in a loop, letting each finish, holds no more than this many."""

    collect_after = 1.0
    """Seconds without any work after which a waiting worker runs Python's cycle collector
    once (until it has work again): a capability whose last references sit in a reference
    cycle is released then, as one no longer referenced must be, where an idle worker
    allocates too little for the collector to run by itself."""

    idle_work_after = 0.002
    """Seconds without any work after which :meth:`step_or_park` and :meth:`run` spend the
    wait on work put off with :meth:`defer`: longer than a worker waits for its peers in the
    middle of a small update (at 0.5 ms, two workers did about two units of merging inside
    every back-to-back word count update), so that such waits are not taken for idleness."""

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
        self._building: Dataflow | None = None    # the one being built, until it is built
        self._dropped = IndexRanges()              # their late messages are discarded
        self._finished: deque[int] = deque()       # finished and kept, oldest first
        self._early: dict[int, list[tuple[int, tuple]]] = {}
        self._dataflow_count = 0
        self._finished_peers: dict[int, int] = {}  # peer -> how many dataflows it built
        self._salt_warned = False
        self._remote_activations: deque = deque()
        self._alone_wakeup: threading.Event | None = None
        self._observers: tuple[WorkerObserver, ...] = ()
        self._observer: WorkerObserver | None = None     # all of them as one, or None
        self.steps = 0
        """Steps taken so far (a stall watchdog reads it from another thread)."""
        self._deferred: dict[Any, None] = {}   # tasks or WeakMethods, an ordered set: defer()
        self._busy_at = _time.perf_counter()      # when a step last had something to do
        self._failure: BaseException | None = None  # what a step raised: no step goes on
        self._collected = False                    # the collector ran since the last work
        self._stepping = False                     # inside a step (operators' logic runs)
        self.exchanged_arrow = False
        """True once an exchange of this worker has sent Arrow batches (a program's next
        job warms that path up before its workers are forked)."""

    def dataflow(self, build: Callable[[Any], R], *, name: str | None = None,
                 timestamp: type = int) -> R:
        """Build a new dataflow with ``build(scope)`` and return what ``build`` returns.

        Every worker must build the same dataflows in the same order.
        """
        if self._stepping:
            raise RuntimeError(self._reentered("worker.dataflow()", "build a dataflow"))
        if self._failure is not None:
            raise self._failure             # as a step would: this worker cannot go on
        check_time_type(timestamp, "worker.dataflow")
        require_function("worker.dataflow", build)
        index = self._dataflow_count
        self._dataflow_count += 1
        dataflow = Dataflow(self, index, name)
        kind = TimeKind(timestamp)
        scope = self.scope_class(dataflow, None, kind, (index,), dataflow.name)
        try:
            self._building = dataflow
            result = build(scope)
            dataflow.finish_building()
            self._dataflows.append(dataflow)
            self._built[index] = dataflow
            if self._finished_peers:    # (a peer's last word may come while this one builds)
                self._check_built_by_finished(dataflow)
            for source, message in self._early.pop(index, ()):
                dataflow.deliver(source, message)
            if self._observer is not None:
                self._observer.dataflow_started(dataflow)   # (checkpoints may refuse it)
        except BaseException as error:
            # The other workers build this dataflow and wait for this one's part of it: the
            # worker cannot go on, even if the caller catches the error (a step would raise
            # it again, and so would the run after the job's function returns).
            self._failure = error
            if self._observer is not None:      # e.g. logs keep this worker's last events
                self._observer.failed(error)
            raise
        finally:
            self._building = None
        return result

    def dataflows(self) -> Mapping[int, Dataflow]:
        """The dataflows built on this worker and not dropped, by index (a read-only view):
        those running, and the last :attr:`finished_kept` that finished.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     worker.dataflow(lambda scope: scope.to_stream([1]).probe(), name="one")
        ...     return {index: d.name for index, d in worker.dataflows().items()}
        >>> st.execute_directly(job)
        {0: 'one'}
        """
        return MappingProxyType(self._built)

    @property
    def observers(self) -> tuple[WorkerObserver, ...]:
        """The observers attached, in order (see :mod:`.observer`)."""
        return self._observers

    def add_observer(self, observer: WorkerObserver) -> None:
        """Tell ``observer`` what this worker does from now on; it learns of the dataflows
        built before through :meth:`dataflows`."""
        self._set_observers(self._observers + (observer,))

    def remove_observer(self, observer: WorkerObserver) -> None:
        """Stop telling ``observer`` (attached with :meth:`add_observer`)."""
        self._set_observers(tuple(o for o in self._observers if o is not observer))

    def _set_observers(self, observers: tuple[WorkerObserver, ...]) -> None:
        self._observers = observers
        self._observer = (None if not observers else observers[0] if len(observers) == 1
                          else ObserverFanOut(observers))

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
        data with it wait forever. A finished dataflow is dropped by the worker itself once
        :attr:`finished_kept` more have finished. Dropping a dropped dataflow again does
        nothing; an index never built is a KeyError.

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
        if self._stepping:
            raise RuntimeError(self._reentered("worker.drop_dataflow()", "drop a dataflow"))
        dataflow = self._built.pop(index, None)
        if dataflow is None:
            if index in self._dropped:          # as timely's: dropping again does nothing
                return
            raise KeyError(f"worker {self.index} has no dataflow {index!r} to drop "
                           f"(installed: {self.installed_dataflows()})")
        self._dropped.add(index)
        self._dataflows = [d for d in self._dataflows if d is not dataflow]
        dataflow.drop()

    def _drop_oldest_finished(self) -> None:
        """Drop the finished dataflows kept beyond the last :attr:`finished_kept`."""
        kept = self._finished
        while len(kept) > self.finished_kept:
            index = kept.popleft()
            if index in self._built:            # (unless the program dropped it already)
                self.drop_dataflow(index)

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

    def _send_data(self, target: int, dataflow: int, location: int, time: Timestamp,
                  batch: Any) -> None:
        """Send a batch to input ``location`` of ``dataflow`` on worker ``target``."""
        if self._observer is not None:
            self._observer.sent(target, dataflow, location, batch)
        try:
            self._peer_allocator().send(target, (DATA, dataflow, location, time, batch))
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            flow = self._built.get(dataflow)
            into = "" if flow is None else f", into {flow.describe_input(location)},"
            raise TypeError(f"a batch for worker {target} at time {time!r}{into} cannot be "
                            f"pickled ({error}){_first_unpicklable(batch)}; records that move "
                            f"between workers must be picklable") from error

    def _peer_allocator(self) -> "Allocator":
        if self._allocator is None:
            raise RuntimeError(f"worker {self.index} has no peers to exchange messages with")
        return self._allocator

    def broadcast(self, message: tuple) -> None:
        """Send the control message ``message`` (progress, a dataflow's description, a last
        word: plain Python values) to every other worker."""
        if self._observer is not None:
            self._observer.broadcast(message)
        self._peer_allocator().broadcast(message)

    def _receive_arrived(self) -> None:
        """Deliver the messages that have arrived, as a step does first. A dataflow that has
        just shared progress calls it, so that its pass applies what the other workers
        shared meanwhile instead of waiting for the next step. What it delivers may queue
        work for operators or dataflows already run in this step, and the doorbell that
        announced it is spent; the step is busy all the same (its dataflow shared progress,
        so it moved or had operators to run), so the worker steps again before it parks."""
        if self._allocator is not None:
            self._receive(self._allocator)

    def _receive(self, allocator: "Allocator") -> bool:
        """Deliver arrived messages (stashing those for dataflows not built yet, discarding
        those for dropped ones)."""
        try:
            messages = allocator.receive()
        except UndecodableMessage as bad:
            raise self._undecodable(bad) from bad.error
        if not messages:
            return False
        for source, message in messages:
            dataflow = self._built.get(message[1])
            if dataflow is not None:
                dataflow.deliver(source, message)
            elif message[0] == FINISHED:
                self._finished_peers[source] = message[2]
                for built in self._built.values():
                    self._check_built_by_finished(built)
            elif message[1] not in self._dropped:
                self._early.setdefault(message[1], []).append((source, message))
        return bool(messages)

    def _undecodable(self, bad: UndecodableMessage) -> pickle.UnpicklingError:
        """The error for a message that arrived and cannot be unpickled, naming its sender
        and, for a batch, its time and the operator it was sent to (as the sender names a
        batch that cannot be pickled)."""
        what, place, header = "a message", "", bad.header
        if len(header) >= 3 and header[0] == DATA:
            flow = self._built.get(header[1])
            if flow is None and self._building is not None and self._building.index == header[1]:
                flow = self._building     # its build shares progress and takes messages in
            what = "a batch"
            place = f" at time {header[3]!r}" if len(header) > 3 else ""
            place += "" if flow is None else f", into {flow.describe_input(header[2])},"
        return pickle.UnpicklingError(
            f"{what} from worker {bad.source}{place} cannot be unpickled "
            f"({type(bad.error).__name__}: {bad.error}); records that move between workers "
            f"must unpickle in every worker (their classes importable there by the same "
            f"names)")

    def _check_built_by_finished(self, dataflow: Dataflow) -> None:
        """Fail if a worker that has finished never built ``dataflow`` (built here): its
        initial capabilities, counted here for every worker, would never be retired."""
        for peer, built in sorted(self._finished_peers.items()):
            if dataflow.index >= built:
                raise RuntimeError(
                    f"worker {peer} never built dataflow {dataflow.index} ({dataflow.name!r}), "
                    f"which worker {self.index} built: worker {peer} finished after building "
                    f"{built} dataflow{'' if built == 1 else 's'}; every worker must build the "
                    f"same dataflows in the same order")

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

        A round with nothing to do after :attr:`collect_after` idle seconds runs the cycle
        collector once, as a wait does. Otherwise, when the round found nothing to do and
        this host has more workers than the cores this process may use, it yields its time
        slice (``os.sched_yield``), so that a loop
        of steps gives the core to a peer with work, such as the one it waits for (parking
        on the doorbell instead keeps the core from that peer for up to the park's timeout;
        ``benchmarks/bench_scaling.py`` measures rounds with more workers than cores)."""
        running, busy = self._step()
        # (a loop of steps never waits, where the collector otherwise runs)
        if not busy and (self._collected or self._collect_when_idle() != 0.0) and running \
                and self._allocator is not None and self._allocator.oversubscribed():
            os.sched_yield()
        return running

    def _collect_when_idle(self) -> float | None:
        """Run the cycle collector once this worker has been idle for
        :attr:`collect_after` (once per idle spell): the seconds left until then, 0.0 if
        it ran now, None if it ran already."""
        if self._collected:
            return None
        left = self.collect_after - (_time.perf_counter() - self._busy_at)
        if left > 0:
            return left
        self._collected = True
        gc.collect()
        return 0.0

    def _reentered(self, call: str, what: str) -> str:
        return (f"{call} was called while worker {self.index} steps (from an operator's "
                f"logic, or what it calls): a worker cannot {what} inside its own step; "
                f"step, run and build dataflows from the worker's function")

    def _step(self) -> tuple[bool, bool]:
        """One round; returns (still running, whether there was anything to do)."""
        if self._stepping:
            raise RuntimeError(self._reentered("a worker's step (step, run, step_while, "
                                               "step_or_park)", "step"))
        if self._failure is not None:
            # A step raised (an operator's logic, a lost peer): the dataflows are halfway
            # through it, so none can go on, though the caller caught the error. Raising it
            # again fails the job at every worker count, as timely's panic does, instead of
            # stepping forever beside peers that wait for this worker.
            raise self._failure
        self.steps += 1
        observer = self._observer
        if observer is not None:
            observer.step_began()
        self._stepping = True
        try:
            allocator = self._allocator
            busy = allocator is not None and self._receive(allocator)
            if observer is not None:
                observer.step_received()
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
                self._finished.extend(d.index for d in dataflows
                                      if not d.running and not d.dropped)
            observer = self._observer           # attached during the step, maybe
            if observer is not None:
                observer.step_computed()
                if observer.after_step(busy):
                    busy = True
            if allocator is not None:
                if observer is not None:
                    observer.step_sending()
                allocator.flush()
        except BaseException as error:
            self._failure = error
            if self._observer is not None:      # e.g. logs keep this worker's last events
                self._observer.failed(error)
            raise
        finally:
            self._stepping = False
        if len(self._finished) > self.finished_kept:
            self._drop_oldest_finished()        # (their on_drop callbacks run outside the step)
        if observer is not None:
            observer.step_ended()
        if busy:
            self._busy_at = _time.perf_counter()
            self._collected = False
        return bool(self._dataflows), busy

    def defer(self, task: Callable[[], bool]) -> None:
        """Call ``task()`` when this worker has had nothing to do for
        :attr:`idle_work_after` seconds and would wait (in :meth:`step_or_park`,
        :meth:`step_while` and :meth:`run`), once per such wait, until it returns False
        (nothing left). Work that can be done later, such as merging a trace's batches, is so
        taken off the path of the next update, as differential merges with the fuel of idle
        workers. Deferring a task already waiting does nothing; tasks take turns. A bound
        method is held weakly: once its object is gone (a dropped dataflow's trace), so is
        the task, rather than keeping the object alive until the worker next idles.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     left = [3]
        ...     def task():
        ...         left[0] -= 1
        ...         return left[0] > 0
        ...     worker.defer(task)
        ...     while left[0]:
        ...         worker.step_or_park(0.01)
        ...     return left[0]
        >>> st.execute_directly(job)
        0
        """
        deferred = self._deferred
        if isinstance(task, MethodType):
            deferred[weakref.WeakMethod(task, lambda gone: deferred.pop(gone, None))] = None
        else:
            deferred[task] = None

    def _wait(self, timeout_seconds: float | None, idle_sleep: float = 0.0) -> None:
        """Nothing to do: a unit of deferred work once idle long enough, else park (until
        then, if deferred work waits; a lone worker without activators does not park), or
        collect cycles once idle for :attr:`collect_after`."""
        left = self._collect_when_idle()
        if left == 0.0:
            return
        if left is not None:
            timeout_seconds = left if timeout_seconds is None else min(timeout_seconds, left)
        if self._deferred:
            idle = _time.perf_counter() - self._busy_at
            if idle >= self.idle_work_after:
                entry = next(iter(self._deferred))
                self._deferred.pop(entry, None)       # (its object may just have gone)
                task = entry() if isinstance(entry, weakref.WeakMethod) else entry
                if task is not None and task():
                    self._deferred[entry] = None     # more to do: after the others
                return
            left = self.idle_work_after - idle
            timeout_seconds = left if timeout_seconds is None else min(timeout_seconds, left)
        if self._allocator is not None or self._alone_wakeup is not None or idle_sleep:
            self._park(timeout_seconds, idle_sleep)

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
        if self._observer is not None:
            self._observer.parked(timeout_seconds)
        if self._allocator is not None:
            self._allocator.park(timeout_seconds)
        elif self._alone_wakeup is not None:
            self._alone_wakeup.wait(timeout_seconds)
            self._alone_wakeup.clear()
        elif idle_sleep:
            _time.sleep(idle_sleep)
        if self._observer is not None:
            self._observer.unparked()

    def step_while(self, predicate: Callable[[], bool]) -> None:
        """Step until ``predicate()`` is false (parking while there is nothing to do).

        If nothing moves for :attr:`idle_hint_after` seconds while only input handles hold
        a dataflow back, says which, once (a forgotten ``advance_to`` or ``close()``)."""
        idleness = _Idleness(self, "has not moved while step_while waits: only {inputs} "
                                   "hold{s} it back.", "Advance an input handle (advance_to) "
                                   "past the time waited for, or close() it.", earliest=True)
        while predicate():
            idleness.stepped(self._step_or_park(1.0)[1])

    def step_or_park(self, timeout_seconds: float | None = None) -> bool:
        """Step; if there was nothing to do, wait up to ``timeout_seconds`` (None: until
        something arrives) for messages from other workers or activations from other
        threads, or do a unit of deferred work (:meth:`defer`) instead. A lone worker
        without such activators never waits.

        A negative timeout is a deadline already passed: no wait (as ``threading.Event.wait``;
        ``deadline - time.monotonic()`` may come out a hair below zero). None, not -1, waits
        until something arrives.

        >>> import sparktimely as st
        >>> st.execute_directly(lambda worker: worker.step_or_park(float("nan")))
        Traceback (most recent call last):
        ValueError: worker 0: step_or_park(nan): the timeout is not a number; give seconds (0 or less: no wait) or None (wait until something arrives)
        """
        if timeout_seconds is not None:
            timeout_seconds = self._checked_timeout("step_or_park", timeout_seconds)
        return self._step_or_park(timeout_seconds)[0]

    def _checked_timeout(self, method: str, timeout_seconds: Any) -> float:
        """``timeout_seconds`` as seconds to wait, a negative one as 0; a ValueError or
        TypeError naming ``method`` if it is NaN or not a number."""
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, numbers.Real):
            raise TypeError(f"worker {self.index}: {method}({timeout_seconds!r}): the timeout "
                            f"is seconds (a number) or None (wait until something arrives)")
        seconds = float(timeout_seconds)
        if seconds != seconds:
            raise ValueError(f"worker {self.index}: {method}({timeout_seconds!r}): the timeout "
                             f"is not a number; give seconds (0 or less: no wait) or None (wait "
                             f"until something arrives)")
        return max(seconds, 0.0)

    def _step_or_park(self, timeout_seconds: float | None) -> tuple[bool, bool]:
        """:meth:`step_or_park`; returns (still running, whether the step had anything to
        do)."""
        running, busy = self._step()
        if not busy and (running or self._deferred):
            self._wait(timeout_seconds)
        return running, busy

    def step_or_park_while(self, timeout_seconds: float | None,
                           predicate: Callable[[], bool]) -> None:
        """:meth:`step_or_park` with ``timeout_seconds`` until ``predicate()`` is false
        (timely's ``step_or_park_while``).

        >>> import sparktimely as st
        >>> def job(worker):
        ...     input = st.InputHandle()
        ...     probe = worker.dataflow(lambda scope: scope.input_from(input).probe())
        ...     input.advance_to(3)
        ...     worker.step_or_park_while(0.01, lambda: probe.less_than(3))
        ...     return probe.frontier()
        >>> st.execute_directly(job)
        [3]
        """
        if timeout_seconds is not None:
            timeout_seconds = self._checked_timeout("step_or_park_while", timeout_seconds)
        while predicate():
            self._step_or_park(timeout_seconds)

    def run(self) -> None:
        """Step until every dataflow has completed (here and, as far as it affects this
        worker, everywhere), then make sure every message for other workers is sent.

        If nothing moves for :attr:`idle_hint_after` seconds and only input handles that were
        never closed hold a dataflow open, says which, once (a forgotten ``close()``).
        """
        idleness = _Idleness(self, "cannot complete: only {inputs} still hold{s} it open.",
                             "Call close() on an input handle once its input is done.")
        while True:
            running, busy = self._step()
            if not running:
                break
            idleness.stepped(busy)
            if not busy:
                self._wait(0.25, idle_sleep=0.001)
        self._flush_all()

    def finish(self) -> None:
        """A worker's last word, once its function has returned and :meth:`run` has completed
        its dataflows: fails if messages came for a dataflow this worker never built; else
        tells every other worker how many dataflows it built (it builds no more) and sends
        everything. A worker still running a dataflow this one never built then fails naming
        it, instead of waiting forever for this worker's part. ``WorkerSession`` calls it as
        the worker leaves, and so does ``sparktimely.testing.execute_in_process``.

        >>> import sparktimely as st
        >>> def job(worker):
        ...     if worker.index == 0:          # worker 1 builds nothing
        ...         worker.dataflow(lambda scope: scope.to_stream([1]).probe())
        >>> try:
        ...     st.execute(job, workers=2)
        ... except st.WorkerError as error:
        ...     print("worker 1 never built dataflow 0" in error.message)
        True
        """
        self._check_all_built()
        if self._allocator is not None:
            self.broadcast((FINISHED, None, self._dataflow_count))
            self._flush_all()

    def _flush_all(self) -> None:
        """Send every message queued for other workers (parking while they make room)."""
        if self._allocator is not None:
            while not self._allocator.flush():
                self._allocator.park(0.01)

    def _check_all_built(self) -> None:
        for index, messages in self._early.items():
            sources = sorted({source for source, _ in messages})
            names = {message[2] for _, message in messages if message[0] == GRAPH}
            named = f" ({' or '.join(map(repr, sorted(names)))})" if names else ""
            raise RuntimeError(
                f"worker {self.index} never built dataflow {index}{named}, for which it got "
                f"messages from worker(s) {sources}: every worker must build the same "
                f"dataflows in the same order")


_UNORDERED_ADVICE = ("Drop an unordered input's capabilities (drop()) and end its sessions "
                     "once its input is done.")


class _Idleness:
    """How long a loop of a worker's steps has had nothing to do: once that is
    :attr:`WorkerCore.idle_hint_after` and only inputs hold a dataflow, says so, once per
    dataflow: ``hint`` with the inputs as ``{inputs}`` (and ``{s}`` for one), then
    ``handle_advice`` if input handles are among them and what to do with an unordered
    input's capabilities if one is. With ``earliest``, inputs are named when they alone hold
    the dataflow's earliest times (what a loop waiting for a time waits on), though something
    else holds later ones."""

    __slots__ = ("worker", "hint", "handle_advice", "earliest", "since", "hinted")

    def __init__(self, worker: WorkerCore, hint: str, handle_advice: str,
                 earliest: bool = False) -> None:
        self.worker = worker
        self.hint = hint
        self.handle_advice = handle_advice
        self.earliest = earliest
        self.since = _time.monotonic()
        self.hinted: set[int] = set()

    def stepped(self, busy: bool) -> None:
        """A step of the loop happened (``busy``: it had something to do)."""
        now = _time.monotonic()
        if busy:
            self.since = now
        elif now - self.since >= self.worker.idle_hint_after:
            worker = self.worker
            for dataflow in worker._dataflows:
                if dataflow.index in self.hinted:
                    continue
                open_inputs = dataflow.open_inputs(self.earliest)
                if open_inputs:
                    self.hinted.add(dataflow.index)
                    kinds = {held.kind for held in open_inputs}
                    advice = [self.handle_advice] if "handle" in kinds else []
                    if "unordered" in kinds:
                        advice.append(_UNORDERED_ADVICE)
                    logger.warning("worker %d: dataflow %r (index %d) %s %s", worker.index,
                                   dataflow.name, dataflow.index, self.hint.format(
                                       inputs=" and ".join(held.description
                                                           for held in open_inputs),
                                       s="s" if len(open_inputs) == 1 else ""),
                                   " ".join(advice))
