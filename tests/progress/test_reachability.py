"""The reachability tracker: timely's doctest, cycle detection and a randomized comparison
against a brute-force model of implied frontiers."""
import random

import pytest

from sparktimely.progress import (
    ENTER, LEAVE, CycleError, GraphBuilder, Product, TimeKind,
)


# -- timely's doctest ----------------------------------------------------------------------

def three_node_cycle():
    graph = GraphBuilder()
    for name, step in [("a", 0), ("b", 0), ("c", 1)]:
        graph.add_node(name, inputs=1, outputs=1, summaries=[[[step]]])
    graph.add_edge((0, 0), (1, 0))
    graph.add_edge((1, 0), (2, 0))
    graph.add_edge((2, 0), (0, 0))
    return graph.build()


def test_timely_reachability_doctest():
    tracker = three_node_cycle()
    tracker.update(tracker.source(0, 0), 17, 1)
    changed = tracker.propagate_all()
    assert sorted(tracker.node_of(t) for t in changed) == [0, 1, 2]
    assert [tracker.implications(tracker.target(n, 0)).frontier() for n in range(3)] == [
        [18], [17], [17]]
    # sources: node 0's output holds 17 itself, node 1's output 17, node 2's 18
    assert [tracker.implications(tracker.source(n, 0)).frontier() for n in range(3)] == [
        [17], [17], [18]]
    assert tracker.tracking_anything()

    tracker.update(tracker.source(0, 0), 17, -1)
    changed = tracker.propagate_all()
    assert sorted(tracker.node_of(t) for t in changed) == [0, 1, 2]
    for n in range(3):
        assert tracker.implications(tracker.target(n, 0)).frontier() == []
        assert tracker.implications(tracker.source(n, 0)).frontier() == []
    assert not tracker.tracking_anything()
    assert tracker.propagate_all() == set()


def test_reachability_two_pointstamps_then_lower_one_removed():
    tracker = three_node_cycle()
    tracker.update(tracker.source(0, 0), 17, 1)
    tracker.update(tracker.target(1, 0), 20, 1)
    tracker.propagate_all()
    assert [tracker.implications(tracker.target(n, 0)).frontier() for n in range(3)] == [
        [18], [17], [17]]
    tracker.update(tracker.source(0, 0), 17, -1)
    tracker.propagate_all()
    assert [tracker.implications(tracker.target(n, 0)).frontier() for n in range(3)] == [
        [21], [20], [20]]
    assert tracker.pointstamps(tracker.target(1, 0)).frontier() == [20]


def test_propagate_all_without_changes_returns_empty_set():
    tracker = three_node_cycle()
    assert tracker.propagate_all() == set()
    assert not tracker.tracking_anything()
    tracker.update(tracker.source(0, 0), 5, 1)
    tracker.update(tracker.source(0, 0), 5, -1)
    assert tracker.propagate_all() == set()


def test_graph_builder_locations_are_stable():
    graph = GraphBuilder()
    a = graph.add_node("a", 2, 1)
    b = graph.add_node("b", 1, 2)
    locations = {graph.source(a, 0), graph.target(a, 0), graph.target(a, 1),
                 graph.source(b, 0), graph.source(b, 1), graph.target(b, 0)}
    assert len(locations) == 6
    graph.add_edge((a, 0), (b, 0))
    view = graph.implications(graph.target(b, 0))
    tracker = graph.build()
    assert tracker.target(b, 0) == graph.target(b, 0)
    assert tracker.source(a, 0) == graph.source(a, 0)
    assert tracker.implications(tracker.target(b, 0)) is view
    tracker.update(tracker.target(a, 1), 4, 1)
    tracker.propagate_all()
    assert view.frontier() == [4]
    assert tracker.implications(tracker.source(b, 1)).frontier() == [4]
    assert tracker.implications(tracker.target(a, 0)).frontier() == []


def test_unconnected_path_does_not_imply():
    graph = GraphBuilder()
    n = graph.add_node("split", 2, 2, summaries=[[[0], []], [[], [3]]])
    tracker = graph.build()
    tracker.update(tracker.target(n, 0), 1, 1)
    tracker.update(tracker.target(n, 1), 1, 1)
    tracker.propagate_all()
    assert tracker.implications(tracker.source(n, 0)).frontier() == [1]
    assert tracker.implications(tracker.source(n, 1)).frontier() == [4]


def test_edge_to_missing_port_rejected():
    graph = GraphBuilder()
    graph.add_node("a", 1, 1)
    graph.add_edge((0, 0), (0, 1))
    with pytest.raises(ValueError, match=r"edge \(0, 0\) -> \(0, 1\) names a missing port"):
        graph.build()


def test_summaries_shape_and_negative_summary_rejected():
    graph = GraphBuilder()
    with pytest.raises(ValueError, match="operator 'bad': summaries must be 1 x 2"):
        graph.add_node("bad", 1, 2, summaries=[[[0]]])
    with pytest.raises(ValueError, match="path summary -1 is negative"):
        graph.add_node("negative", 1, 1, summaries=[[[-1]]])
    with pytest.raises(ValueError, match="path summary -1 is negative"):
        graph.add_node("negative", 1, 1, summaries=[[[Product(0, -1)]]])


# -- cycle detection -------------------------------------------------------------------------

def test_identity_cycle_rejected_naming_operators():
    graph = GraphBuilder()
    graph.add_node("alpha", 1, 1, summaries=[[[0]]])
    graph.add_node("beta", 1, 1, summaries=[[[0]]])
    graph.add_edge((0, 0), (1, 0))
    graph.add_edge((1, 0), (0, 0))
    with pytest.raises(CycleError) as info:
        graph.build()
    message = str(info.value)
    assert "alpha" in message and "beta" in message
    assert isinstance(info.value, ValueError)


def test_self_loop_with_identity_rejected():
    graph = GraphBuilder()
    graph.add_node("selfish", 1, 1, summaries=[[[0]]])
    graph.add_edge((0, 0), (0, 0))
    with pytest.raises(CycleError, match="selfish"):
        graph.build()


def test_cycle_with_one_identity_and_one_advancing_path_rejected():
    graph = GraphBuilder()
    graph.add_node("gamma", 1, 1, summaries=[[[1, 0]]])   # one of the paths is identity
    graph.add_node("delta", 1, 1, summaries=[[[0]]])
    graph.add_edge((0, 0), (1, 0))
    graph.add_edge((1, 0), (0, 0))
    with pytest.raises(CycleError):
        graph.build()


def nested_cycle(step):
    """Two operators of an iterative scope in a cycle: ``a`` passes times on unchanged,
    ``b`` applies the summary ``step``."""
    nested = TimeKind().nested()
    graph = GraphBuilder()
    a = graph.add_node("a", 1, 1, [[[0]]], [nested], [nested])
    b = graph.add_node("b", 1, 1, [[[step]]], [nested], [nested])
    graph.add_edge((a, 0), (b, 0))
    graph.add_edge((b, 0), (a, 0))
    return graph, a, b


@pytest.mark.timeout(5)
@pytest.mark.parametrize("step, round_trip", [(Product(0, 1), Product(2, 1)),
                                              (Product(1, 0), Product(3, 0))])
def test_advancing_cycle_accepted_and_drains(step, round_trip):
    # The same cycle with a zero step is rejected (below): here the step advances time, so
    # the graph builds and a pointstamp's implications go once round the cycle.
    graph, a, b = nested_cycle(step)
    tracker = graph.build()
    tracker.update(tracker.source(a, 0), Product(2, 0), 1)
    tracker.propagate_all()
    assert tracker.implications(tracker.target(b, 0)).frontier() == [Product(2, 0)]
    assert tracker.implications(tracker.source(b, 0)).frontier() == [round_trip]
    assert tracker.implications(tracker.target(a, 0)).frontier() == [round_trip]
    tracker.update(tracker.source(a, 0), Product(2, 0), -1)
    tracker.propagate_all()
    assert not tracker.tracking_anything()
    assert tracker.implications(tracker.target(a, 0)).frontier() == []


def test_the_same_cycle_without_advance_rejected():
    graph, _, _ = nested_cycle(Product(0, 0))
    with pytest.raises(CycleError, match="operators a, b"):
        graph.build()


def leave_enter_cycle(outer_name, outer_summary, inner_name, inner_summary):
    """An outer node -> enter -> one inner node -> leave -> back to the outer node."""
    o, i = TimeKind(int), TimeKind(int).nested()
    graph = GraphBuilder()
    a = graph.add_node(outer_name, 1, 1, [[[outer_summary]]])
    e = graph.add_node("Enter", 1, 1, [[[ENTER]]], [o], [i])
    m = graph.add_node(inner_name, 1, 1, [[[inner_summary]]], [i], [i])
    l = graph.add_node("Leave", 1, 1, [[[LEAVE]]], [i], [o])
    for source, target in ((a, e), (e, m), (m, l), (l, a)):
        graph.add_edge((source, 0), (target, 0))
    return graph, (a, e, m, l)


def test_nested_cycle_through_enter_and_leave_identity_rejected():
    graph, _ = leave_enter_cycle("Outer", 0, "InnerMap", 0)
    with pytest.raises(CycleError, match="Outer"):
        graph.build()


def test_cycle_through_leave_enter_with_only_inner_advance_rejected():
    graph, _ = leave_enter_cycle("Outer", 0, "InnerFeedback", Product(0, 1))
    with pytest.raises(CycleError):
        graph.build()


@pytest.mark.timeout(5)
def test_cycle_through_leave_enter_with_outer_advance_accepted_and_drains():
    graph, (a, e, f, l) = leave_enter_cycle("OuterFeedback", 1, "InnerFeedback", Product(0, 1))
    tracker = graph.build()
    tracker.update(tracker.source(a, 0), 3, 1)
    tracker.propagate_all()
    assert tracker.implications(tracker.target(e, 0)).frontier() == [3]
    assert tracker.implications(tracker.target(f, 0)).frontier() == [Product(3, 0)]
    assert tracker.implications(tracker.target(l, 0)).frontier() == [Product(3, 1)]
    assert tracker.implications(tracker.target(a, 0)).frontier() == [3]
    assert tracker.implications(tracker.source(a, 0)).frontier() == [3]
    tracker.update(tracker.source(a, 0), 3, -1)
    tracker.propagate_all()
    for loc in range(8):
        assert tracker.implications(loc).frontier() == []


# -- randomized comparison against a brute-force model ----------------------------------------

def model_le(a, b):
    if isinstance(a, int):
        return a <= b
    return model_le(a.outer, b.outer) and model_le(a.inner, b.inner)


def model_advance(t, s):
    if s is ENTER:
        return Product(t, 0)
    if s is LEAVE:
        return t.outer
    if isinstance(s, int):
        if isinstance(t, int):
            return t + s
        assert s == 0
        return t
    return Product(model_advance(t.outer, s.outer), model_advance(t.inner, s.inner))


def random_time(rng, depth):
    if depth == 0:
        return rng.randrange(5)
    return Product(random_time(rng, depth - 1), rng.randrange(3))


def random_summary(rng, depth, positive=False):
    """A path summary for times of ``depth``; ``positive`` ones advance some coordinate."""
    if depth == 0:
        return rng.randrange(1, 3) if positive else rng.randrange(3)
    while True:
        s = Product(random_summary(rng, depth - 1), rng.randrange(2))
        if not positive or not model_le(s, zero_summary(depth)):
            return s


def zero_summary(depth):
    if depth == 0:
        return 0
    return Product(zero_summary(depth - 1), 0)


class RandomGraph:
    """A random dataflow graph: per scope, operators in an order with forward edges, plus
    feedback nodes with advancing summaries; nested scopes entered and left through
    ENTER/LEAVE nodes. Records the model's adjacency alongside the GraphBuilder."""

    def __init__(self, rng, max_depth):
        self.rng = rng
        self.max_depth = max_depth
        self.graph = GraphBuilder()
        self.kind_depth = {}          # location -> depth
        self.moves = {}               # location -> [(location, summary or None)]
        self.targets = set()
        self.names = 0
        self.build_scope(0)
        self.tracker = self.graph.build()

    def node(self, inputs, outputs, summaries, in_depth, out_depth):
        g = self.graph
        kinds_in = [self.kind(in_depth)] * inputs
        kinds_out = [self.kind(out_depth)] * outputs
        self.names += 1
        n = g.add_node(f"op{self.names}", inputs, outputs, summaries, kinds_in, kinds_out)
        for i in range(inputs):
            loc = g.target(n, i)
            self.targets.add(loc)
            self.kind_depth[loc] = in_depth
            self.moves[loc] = [(g.source(n, o), s) for o in range(outputs)
                               for s in summaries[i][o]]
        for o in range(outputs):
            loc = g.source(n, o)
            self.kind_depth[loc] = out_depth
            self.moves[loc] = []
        return n

    @staticmethod
    def kind(depth):
        k = TimeKind()
        for _ in range(depth):
            k = k.nested()
        return k

    def edge(self, source, target):
        self.graph.add_edge(source, target)
        self.moves[self.graph.source(*source)].append((self.graph.target(*target), 0))

    def build_scope(self, depth):
        rng = self.rng
        items = []   # each: (list of input ports (node, port), list of output ports)
        for _ in range(rng.randrange(2, 5)):
            if depth < self.max_depth and rng.random() < 0.35:
                # nested scope: enters feed the inner scope, leaves come out of it
                enters = [self.node(1, 1, [[[ENTER]]], depth, depth + 1)
                          for _ in range(rng.randrange(1, 3))]
                inner_out = self.build_scope_body(depth + 1,
                                                            [(e, 0) for e in enters])
                leaves = [self.node(1, 1, [[[LEAVE]]], depth + 1, depth)
                          for _ in range(rng.randrange(1, 3))]
                for leave in leaves:
                    for src in rng.sample(inner_out, min(len(inner_out), rng.randrange(1, 3))):
                        self.edge(src, (leave, 0))
                items.append(([(e, 0) for e in enters], [(l, 0) for l in leaves]))
            else:
                items.append(self.ordinary(depth))
        self.connect_items(depth, items)

    def build_scope_body(self, depth, initial_sources):
        """Operators of a nested scope fed by ``initial_sources`` (the enters' outputs)."""
        items = [([], list(initial_sources))]
        for _ in range(self.rng.randrange(1, 4)):
            items.append(self.ordinary(depth))
        return self.connect_items(depth, items)

    def ordinary(self, depth):
        rng = self.rng
        inputs, outputs = rng.randrange(1, 3), rng.randrange(1, 3)
        summaries = []
        for _ in range(inputs):
            row = []
            for _ in range(outputs):
                r = rng.random()
                if r < 0.15:
                    row.append([])
                elif r < 0.3:
                    row.append([random_summary(rng, depth), random_summary(rng, depth)])
                elif r < 0.4 and depth > 0:
                    row.append([0])
                else:
                    row.append([random_summary(rng, depth)])
            summaries.append(row)
        n = self.node(inputs, outputs, summaries, depth, depth)
        return [(n, i) for i in range(inputs)], [(n, o) for o in range(outputs)]

    def connect_items(self, depth, items):
        """Forward edges between items in order, and feedback nodes going backwards."""
        rng = self.rng
        available = []
        for ins, outs in items:
            for target in ins:
                if available:
                    for src in rng.sample(available, min(len(available), rng.randrange(0, 3))):
                        self.edge(src, target)
            available.extend(outs)
        all_targets = [t for ins, _ in items for t in ins]
        for _ in range(rng.randrange(0, 3)):
            if not all_targets or not available:
                break
            summary = random_summary(rng, depth, positive=True)
            fb = self.node(1, 1, [[[summary]]], depth, depth)
            self.edge(rng.choice(available), (fb, 0))
            self.edge((fb, 0), rng.choice(all_targets))
        return available

    def expected(self, counts):
        """For every location, the minimal times reachable from positive pointstamps."""
        reached = {loc: [] for loc in self.moves}
        stack = [(loc, t) for (loc, t), c in counts.items() if c > 0]
        while stack:
            loc, t = stack.pop()
            times = reached[loc]
            if any(model_le(e, t) for e in times):
                continue
            times[:] = [e for e in times if not model_le(t, e)] + [t]
            for nxt, summary in self.moves[loc]:
                stack.append((nxt, model_advance(t, summary)))
        return reached


def run_random_updates(seed, max_depth):
    rng = random.Random(seed)
    rg = RandomGraph(rng, max_depth)
    tracker = rg.tracker
    locations = sorted(rg.moves)
    counts = {}
    previous = {loc: [] for loc in locations}
    for _ in range(25):
        batch = []
        final = dict(counts)
        for _ in range(rng.randrange(1, 5)):
            positive = [key for key, c in final.items() if c > 0]
            if positive and rng.random() < 0.45:
                key = rng.choice(positive)
                batch.append((key, -1))
                final[key] -= 1
            else:
                loc = rng.choice(locations)
                t = random_time(rng, rg.kind_depth[loc])
                if rng.random() < 0.2:
                    # transiently negative within the batch: the -1 comes first
                    batch.append(((loc, t), -1))
                    batch.append(((loc, t), +1))
                batch.append(((loc, t), +1))
                final[(loc, t)] = final.get((loc, t), 0) + 1
        for key, c in final.items():
            assert c >= 0
        for (loc, t), delta in batch:
            tracker.update(loc, t, delta)
        changed = tracker.propagate_all()
        counts = {k: c for k, c in final.items() if c}
        expected = rg.expected(counts)
        for loc in locations:
            got = tracker.implications(loc).frontier()
            assert sorted(got) == sorted(expected[loc]), (seed, loc, got, expected[loc])
        really_changed = {loc for loc in rg.targets
                          if sorted(expected[loc]) != sorted(previous[loc])}
        assert really_changed <= changed
        assert changed <= rg.targets
        assert tracker.tracking_anything() == bool(counts)
        previous = expected
    # drain everything: all frontiers become empty
    for (loc, t), c in counts.items():
        tracker.update(loc, t, -c)
    tracker.propagate_all()
    for loc in locations:
        assert tracker.implications(loc).frontier() == []
    assert not tracker.tracking_anything()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("seed", range(40))
def test_random_int_graphs_match_brute_force(seed):
    run_random_updates(seed, max_depth=0)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("seed", range(40))
def test_random_nested_graphs_match_brute_force(seed):
    run_random_updates(1000 + seed, max_depth=1)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("seed", range(20))
def test_random_doubly_nested_graphs_match_brute_force(seed):
    run_random_updates(2000 + seed, max_depth=2)
