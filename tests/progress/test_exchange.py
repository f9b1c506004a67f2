"""The progress protocol alone: three simulated workers, hypothesis-generated work and
delivery orders, checked for safety and liveness.

The dataflow is a source feeding an operator whose output goes to a sink and, through a
feedback edge that adds 1 to the time, back to the operator:

    source S0 -> T1 [op] S1 -> T2 [sink]
                  ^          \\-> T3 [feedback +1] S3 -/

Every worker runs a ProgressExchange over its own Tracker. The simulation keeps the truth:
the capabilities each worker holds and the data messages not yet consumed (in flight or
queued). Data is consumed in any order; progress batches travel FIFO per sender, and a
worker may take in what arrived between sending its batch and applying it.

- Safety: no worker's frontier at any location ever passes a pointstamp that some worker
  still holds (taking the path summaries into account).
- Liveness: once all work is done and every batch delivered, every frontier is empty.
"""
from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as strategies

from sparktimely.progress import GraphBuilder
from sparktimely.progress.exchange import ProgressExchange

WORKERS = 3
LAST_ROUND = 3            # the loop stops re-circulating at this time


def build_graph():
    graph = GraphBuilder()
    graph.add_node("source", inputs=0, outputs=1)
    graph.add_node("op", inputs=1, outputs=1)
    graph.add_node("sink", inputs=1, outputs=0)
    graph.add_node("feedback", inputs=1, outputs=1, summaries=[[[1]]])
    graph.add_edge((0, 0), (1, 0))
    graph.add_edge((1, 0), (2, 0))
    graph.add_edge((1, 0), (3, 0))
    graph.add_edge((3, 0), (1, 0))
    return graph


GRAPH = build_graph()
S0, S1, S3 = GRAPH.source(0, 0), GRAPH.source(1, 0), GRAPH.source(3, 0)
T1, T2, T3 = GRAPH.target(1, 0), GRAPH.target(2, 0), GRAPH.target(3, 0)
LOCATIONS = [S0, T1, S1, T2, T3, S3]
# Least path summary from one location to another (None: unreachable), by Bellman-Ford.
STEPS = {S0: [(T1, 0)], T1: [(S1, 0)], S1: [(T2, 0), (T3, 0)], T3: [(S3, 1)], S3: [(T1, 0)],
         T2: []}


def least_summaries(start):
    best = {start: 0}
    for _ in LOCATIONS:
        for here, cost in list(best.items()):
            for there, step in STEPS[here]:
                if there not in best or cost + step < best[there]:
                    best[there] = cost + step
    return best


LEAST = {location: least_summaries(location) for location in LOCATIONS}


class Simulation:
    def __init__(self):
        self.exchanges = []
        for _ in range(WORKERS):
            exchange = ProgressExchange(WORKERS)
            # Every worker makes the same initial capabilities while building; the operator
            # and the feedback drop theirs at once, as real operators do.
            for location in (S0, S1, S3):
                exchange.acquire_initial(location, 0)
            exchange.update(S1, 0, -1)
            exchange.update(S3, 0, -1)
            self.exchanges.append(exchange)
        self.caps = [{0: 1} for _ in range(WORKERS)]           # source capabilities by time
        self.messages = []                                      # (worker, target, time)
        self.channels = {(a, b): deque() for a in range(WORKERS) for b in range(WORKERS)
                         if a != b}
        for worker, exchange in enumerate(self.exchanges):     # the drops go out at start
            batch, _ = exchange.start(build_graph().build())
            assert sorted(batch) == [((S1, 0), -1), ((S3, 0), -1)]
            for other in range(WORKERS):
                if other != worker:
                    self.channels[(worker, other)].append(batch)

    # -- the truth ---------------------------------------------------------------------------

    def held(self):
        for worker, caps in enumerate(self.caps):
            for time, count in caps.items():
                if count:
                    yield S0, time
        for _, target, time in self.messages:
            yield target, time

    def check_safety(self):
        held = list(self.held())
        for index, exchange in enumerate(self.exchanges):
            for location, time in held:
                for there, summary in LEAST[location].items():
                    frontier = exchange.tracker.implications(there)
                    assert frontier.less_equal(time + summary), (
                        f"worker {index} passed ({location}, {time}) at location {there}: "
                        f"frontier {frontier.frontier()}")

    # -- operations --------------------------------------------------------------------------

    def send_data(self, worker, target_worker):
        caps = self.caps[worker]
        times = [t for t, n in caps.items() if n]
        if times:
            time = min(times)
            self.exchanges[worker].update(T1, time, 1)
            self.messages.append((target_worker, T1, time))

    def downgrade(self, worker):
        caps = self.caps[worker]
        times = [t for t, n in caps.items() if n]
        if times:
            time = min(times)
            caps[time] -= 1
            caps[time + 1] = caps.get(time + 1, 0) + 1
            self.exchanges[worker].update(S0, time + 1, 1)
            self.exchanges[worker].update(S0, time, -1)

    def drop(self, worker):
        caps = self.caps[worker]
        for time, count in caps.items():
            if count:
                caps[time] -= 1
                self.exchanges[worker].update(S0, time, -1)
                return

    def consume(self, choice, outputs):
        """Process one pending message; the operator and the feedback send what it implies,
        in the same atomic set of changes as the consumption."""
        if not self.messages:
            return
        worker, target, time = self.messages.pop(choice % len(self.messages))
        exchange = self.exchanges[worker]
        exchange.update(target, time, -1)
        if target == T1:                              # the operator: to the sink and loop
            for destination in outputs:
                exchange.update(T2, time, 1)
                self.messages.append((destination, T2, time))
                if time < LAST_ROUND:
                    exchange.update(T3, time, 1)
                    self.messages.append((destination, T3, time))
        elif target == T3:                            # the feedback: back, one time later
            exchange.update(T1, time + 1, 1)
            self.messages.append((outputs[0] if outputs else worker, T1, time + 1))

    def exchange(self, worker, take_in=False):
        """One round at ``worker``: its batch, if any, is sent before the pass that applies
        it; with ``take_in``, what the others sent is delivered right after sending, so the
        same pass applies it too (as a dataflow does)."""
        def send(batch):
            for other in range(WORKERS):
                if other != worker:
                    self.channels[(worker, other)].append(batch)
            if take_in:
                for sender in range(WORKERS):
                    while sender != worker and self.channels[(sender, worker)]:
                        self.deliver(sender, worker)
        self.exchanges[worker].exchange(send)

    def deliver(self, sender, receiver):
        channel = self.channels[(sender, receiver)]
        if channel:
            self.exchanges[receiver].receive(channel.popleft())

    def quiesce(self, order):
        """Finish all work, then exchange and deliver until nothing moves."""
        for worker in range(WORKERS):
            while any(self.caps[worker].values()):
                self.drop(worker)
        while self.messages:
            self.consume(next(order), [])
            self.check_safety()
        for _ in range(4 * WORKERS):
            for worker in range(WORKERS):
                self.exchange(worker)
            for sender, receiver in self.channels:
                while self.channels[(sender, receiver)]:
                    self.deliver(sender, receiver)
            self.check_safety()


OPERATIONS = strategies.one_of(
    strategies.tuples(strategies.just("send"), strategies.integers(0, WORKERS - 1),
                      strategies.integers(0, WORKERS - 1)),
    strategies.tuples(strategies.just("downgrade"), strategies.integers(0, WORKERS - 1)),
    strategies.tuples(strategies.just("drop"), strategies.integers(0, WORKERS - 1)),
    strategies.tuples(strategies.just("consume"), strategies.integers(0, 1000),
                      strategies.lists(strategies.integers(0, WORKERS - 1), max_size=2)),
    strategies.tuples(strategies.just("exchange"), strategies.integers(0, WORKERS - 1),
                      strategies.booleans()),
    strategies.tuples(strategies.just("deliver"), strategies.integers(0, WORKERS - 1),
                      strategies.integers(0, WORKERS - 1)),
)


@settings(max_examples=300, deadline=None)
@given(strategies.lists(OPERATIONS, max_size=80), strategies.lists(strategies.integers(0, 1000),
                                                                    min_size=1))
def test_no_frontier_passes_a_held_pointstamp_and_all_complete(operations, final_order):
    simulation = Simulation()
    simulation.check_safety()
    for operation in operations:
        kind, *arguments = operation
        if kind == "deliver" and arguments[0] == arguments[1]:
            continue
        getattr(simulation, {"send": "send_data"}.get(kind, kind))(*arguments)
        simulation.check_safety()
    order = iter(final_order * 1000)
    simulation.quiesce(order)
    for index, exchange in enumerate(simulation.exchanges):
        assert not exchange.tracking_anything(), f"worker {index} still tracks something"
        for location in LOCATIONS:
            assert exchange.frontier_at(location) == [], (index, location)


def test_demand_mode_holds_back_changes_that_move_no_frontier():
    simulation = Simulation()
    for worker in range(WORKERS):              # settle the operators' initial drops first
        simulation.exchange(worker)
    for sender, receiver in simulation.channels:
        simulation.deliver(sender, receiver)
    simulation.send_data(0, 1)            # +1 at T1: justified by worker 0's capability
    batch, _ = simulation.exchanges[0].exchange()
    assert batch is None and simulation.exchanges[0].holds_changes()
    simulation.drop(0)                    # a decrement at the frontier: everything goes
    batch, _ = simulation.exchanges[0].exchange()
    assert sorted(batch) == [((S0, 0), -1), ((T1, 0), 1)]
    assert not simulation.exchanges[0].holds_changes()


def test_consuming_records_whose_production_is_not_shared_yet_is_held_back():
    """Worker 0 sends records to worker 1 and holds the +n back (its capability justifies
    them); worker 1 consumes them, driving its count at T1 negative. That decrement implies
    nothing (the capabilities still hold time 0 at T1), so worker 1 holds it back too, step
    after step, until worker 0's increment arrives and the records matter."""
    simulation = Simulation()
    for worker in range(WORKERS):
        simulation.exchange(worker)
    for sender, receiver in simulation.channels:
        simulation.deliver(sender, receiver)
    for _ in range(5):
        simulation.send_data(0, 1)
        simulation.consume(0, [])              # worker 1 consumes what worker 0 sent
        for worker in range(WORKERS):
            batch, _ = simulation.exchanges[worker].exchange()
            assert batch is None, (worker, batch)
    simulation.drop(0)                         # now worker 0 shares its +5 with its drop
    batch, _ = simulation.exchanges[0].exchange()
    assert sorted(batch) == [((S0, 0), -1), ((T1, 0), 5)]
