"""The progress protocol between workers, as a pure state machine.

Every worker runs the same dataflow and keeps its own :class:`Tracker` of the global
pointstamp counts. :class:`ProgressExchange` decides what a worker tells the others and when.
It does no I/O, in the style of dask/distributed's worker state machine: events go in,
messages come out, and the caller moves the messages.

Events in:

- :meth:`~ProgressExchange.update`: a pointstamp change this worker made (a capability
  acquired, downgraded or dropped; records produced for an input, ``+n``; records consumed,
  ``-n``).
- :meth:`~ProgressExchange.acquire_initial`: the capability an operator's constructor is given
  while the dataflow is built. Every worker builds the same dataflow, so each counts it once
  per worker, with no message. (Other capabilities made while building may differ from worker
  to worker: they are changes of its own, shared when tracking starts.)
- :meth:`~ProgressExchange.receive`: a batch another worker broadcast (FIFO per sender).

Out, from :meth:`~ProgressExchange.exchange`: the batch to broadcast to every other worker
(or None) and the input locations whose frontier changed here.

The rules (timely's, see its ``subgraph.rs`` and ``reachability.rs``):

- A batch is atomic: the consumed-records decrement and the capability or records it
  justifies travel together, so no worker ever sees one without the other.
- A worker's changes are applied to its own tracker exactly when they are broadcast, so every
  worker's tracker is a sum of whole batches.
- Demand mode: changes are held back until one of them removes a pointstamp that alone holds
  some frontier where it is (:meth:`Tracker.is_global`). Held-back increments are harmless:
  whatever they stand for is still implied by pointstamps every worker already counts.

>>> from sparktimely.progress import GraphBuilder
>>> def worker(peers):
...     graph = GraphBuilder()
...     _ = graph.add_node("source", inputs=0, outputs=1)
...     _ = graph.add_node("sink", inputs=1, outputs=0)
...     graph.add_edge((0, 0), (1, 0))
...     exchange = ProgressExchange(peers)
...     exchange.acquire_initial(graph.source(0, 0), 0)
...     exchange.start(graph.build())
...     return exchange
>>> a, b = worker(2), worker(2)
>>> a.exchange(), a.frontier_at(a.tracker.target(1, 0))
((None, set()), [0])
>>> a.update(a.tracker.source(0, 0), 0, -1)          # worker a drops its capability
>>> batch, _ = a.exchange()
>>> batch, a.frontier_at(a.tracker.target(1, 0))  # b's capability still holds time 0
([((0, 0), -1)], [0])
>>> b.receive(batch); b.update(b.tracker.source(0, 0), 0, -1)
>>> batch, changed = b.exchange()
>>> a.receive(batch); a.exchange()[1] == changed == {1}
True
>>> a.frontier_at(a.tracker.target(1, 0)), b.frontier_at(b.tracker.target(1, 0))
([], [])
"""
from __future__ import annotations

from typing import Callable, Iterable

from .reachability import Tracker
from .timestamp import Timestamp

Batch = list
"""A list of ``((location, time), delta)`` changes, applied all at once."""


class ProgressExchange:
    """One worker's side of the progress protocol for one dataflow (see the module doc)."""

    __slots__ = ("peers", "tracker", "_local", "_initial", "_judged")
    tracker: Tracker            # set by start(), once the dataflow is built

    def __init__(self, peers: int) -> None:
        self.peers = peers
        self._local: dict[tuple[int, Timestamp], int] = {}
        self._initial: dict[tuple[int, Timestamp], int] = {}
        # True once the held changes were judged not urgent, until they or the frontiers
        # change: a worker waiting for its peers steps again and again, and must not scan
        # its held changes at every step
        self._judged = False

    # -- events in -------------------------------------------------------------------------

    def acquire_initial(self, location: int, time: Timestamp) -> None:
        """Count an operator's initial capability, made alike by every worker while the
        dataflow is built (before :meth:`start`)."""
        key = (location, time)
        self._initial[key] = self._initial.get(key, 0) + 1

    def start(self, tracker: Tracker, send: Callable[[Batch | None], object] | None = None
              ) -> tuple[Batch | None, set[int]]:
        """Begin tracking with ``tracker``: every worker's initial capabilities are counted
        (each worker made the same ones), and the changes this worker made while building
        (initial capabilities dropped or delayed, input handles connected at their times) are
        released as one batch, sent with ``send`` before the one pass that applies both, so
        the first frontier anything sees holds what is still held. ``send``, if given, is
        called once, with None when there is nothing to share: a caller can carry the batch
        in a message it sends anyway (a dataflow's description). Returns ``(batch to
        broadcast or None, input locations whose frontier changed)``, as :meth:`exchange`
        does."""
        self.tracker = tracker
        for (location, time), count in self._initial.items():
            tracker.update(location, time, count * self.peers)
        self._initial = {}
        batch = self._take_held()
        if send is not None:
            send(batch)
        return batch, tracker.propagate_all()

    def update(self, location: int, time: Timestamp, delta: int) -> None:
        """Record a pointstamp change this worker made (shared at a later :meth:`exchange`)."""
        key = (location, time)
        local = self._local
        local[key] = local.get(key, 0) + delta
        self._judged = False

    def receive(self, batch: Iterable[tuple[tuple[int, Timestamp], int]]) -> None:
        """Take in a batch another worker broadcast."""
        update = self.tracker.update
        for (location, time), delta in batch:
            update(location, time, delta)

    # -- decisions -------------------------------------------------------------------------

    def must_share(self) -> bool:
        """True if this worker's held changes could move a frontier somewhere (or there is
        no one to wait for)."""
        local = self._local
        if not local:
            return False
        if self.peers == 1:
            return True
        is_global = self.tracker.is_global
        return any(delta < 0 and is_global(location, time)
                   for (location, time), delta in local.items())

    def share(self) -> Batch | None:
        """If this worker's held changes must be shared now, release them as one batch,
        buffered in its own tracker too, and return it to broadcast (None: nothing to
        broadcast). Judged on the frontiers as they are, before what arrived since the last
        :meth:`propagate` is applied: sharing early is always safe (every batch is whole),
        and the caller can send the batch before it pays for the pass that applies it."""
        if not self._local or self._judged:
            return None
        if not self.must_share():
            self._judged = True
            return None
        return self._take_held()

    def _take_held(self) -> Batch | None:
        """Release every held change as one batch, buffered in this worker's tracker; the
        batch to broadcast (None: nothing, or no one to tell)."""
        local, self._local = self._local, {}
        batch = [(key, delta) for key, delta in local.items() if delta]
        update = self.tracker.update
        for (location, time), delta in batch:
            update(location, time, delta)
        return batch if batch and self.peers > 1 else None

    def propagate(self) -> set[int]:
        """Apply what arrived and what was released, in one pass of the tracker; returns
        the input locations whose frontier changed."""
        tracker = self.tracker
        if not tracker.has_pending():
            return set()
        self._judged = False                    # the frontiers may move
        return tracker.propagate_all()

    def exchange(self, send: Callable[[Batch], object] | None = None
                 ) -> tuple[Batch | None, set[int]]:
        """One round of the protocol: :meth:`share`, :meth:`propagate`, and, if changes are
        still held, judge them again on the new frontiers (what arrived may have made them
        urgent). Returns ``(batch to broadcast or None, input locations whose frontier
        changed)``. ``send(batch)``, if given, is called with the batch as soon as it is
        released, before the pass that applies it here (a batch is sent once: the caller
        does not broadcast the returned one again)."""
        batch = self._release(send)
        changed = self.propagate()
        if batch is None and self._local:
            batch = self._release(send)
            changed |= self.propagate()
        return batch, changed

    def _release(self, send: Callable[[Batch], object] | None) -> Batch | None:
        """:meth:`share`, and ``send`` what it releases."""
        batch = self.share()
        if batch is not None and send is not None:
            send(batch)
        return batch

    # -- observations ----------------------------------------------------------------------

    def holds_changes(self) -> bool:
        """True while this worker has changes it has not shared."""
        return bool(self._local)

    def quiet(self) -> bool:
        """True if :meth:`exchange` would do nothing now: nothing to apply, and nothing held
        that could move a frontier (as judged since the last change)."""
        return (not self._local or self._judged) and not self.tracker.has_pending()

    def frontier_at(self, location: int) -> list:
        """The frontier of times that may still reach ``location``, as this worker knows it."""
        return self.tracker.implications(location).frontier()

    def tracking_anything(self) -> bool:
        """True while any pointstamp is counted, or changes wait to be applied or shared."""
        return self.tracker.tracking_anything() or any(self._local.values())
