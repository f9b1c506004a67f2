"""Fixed points with ``iterate`` and ``Variable`` against graph oracles (BFS, components,
transitive closure), as edges are inserted and deleted over rounds, at 1, 2 and 3 workers
(in-process through the ``run`` fixture; worker processes for the fixed scenarios).
A deleted edge must retract everything derived through it (the intent of differential's
tests/bfs.rs and tests/scc.rs)."""
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sparktimely as st
import sparktimely.differential as dd
from dd_harness import adjacency, bfs, check_rounds, processes, toggled

SETTINGS = settings(max_examples=10, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
NODES = 6
edge = hs.tuples(hs.integers(0, NODES - 1), hs.integers(0, NODES - 1))
toggles = hs.lists(hs.lists(edge, max_size=5), min_size=1, max_size=4)


def reachability(edges, roots):
    """Nodes reachable from ``roots``: iterate(join, concat, distinct)."""
    def step(reach):
        inner_edges = edges.enter(reach.scope)
        return (reach.map(lambda n: (n, ())).join_map(inner_edges, lambda n, _, m: m)
                .concat(roots.enter(reach.scope)).distinct())
    return roots.iterate(step)


@pytest.mark.timeout(120)
@SETTINGS
@given(edge_rounds=toggles, roots=hs.lists(hs.integers(0, NODES - 1), min_size=1, max_size=2,
                                            unique=True))
def test_reachability_with_insertions_and_deletions(run, edge_rounds, roots):
    inputs = [toggled(edge_rounds), [[(r, 1) for r in roots]]]
    check_rounds(lambda scope, e, r: reachability(e, r),
                 lambda e, r: {n: 1 for n in bfs(e, list(r))}, inputs, run)


@pytest.mark.timeout(120)
@SETTINGS
@given(edge_rounds=toggles)
def test_reachability_over_an_entered_arrangement(run, edge_rounds):
    """The edges are arranged once outside the loop and entered (shared, not re-arranged)."""
    def build(scope, edges, roots):
        arranged = edges.arrange_by_key()

        def step(reach):
            return (arranged.enter(reach.scope).semijoin(reach)
                    .map(lambda edge: edge[1]).concat(roots.enter(reach.scope)).distinct())
        return roots.iterate(step)
    check_rounds(build, lambda e, r: {n: 1 for n in bfs(e, list(r))},
                 [toggled(edge_rounds), [[(0, 1)]]], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(edge_rounds=toggles)
def test_bfs_distances(run, edge_rounds):
    def build(scope, edges, roots):
        start = roots.map(lambda n: (n, 0))

        def step(dists):
            inner_edges = edges.enter(dists.scope)
            return (dists.join_map(inner_edges, lambda n, d, m: (m, d + 1))
                    .concat(start.enter(dists.scope))
                    .reduce(lambda n, ds, out: out.append((ds[0][0], 1))))
        return start.iterate(step)
    inputs = [toggled(edge_rounds), [[(0, 1)]]]
    check_rounds(build, lambda e, r: {(n, d): 1 for n, d in bfs(e, list(r)).items()},
                 inputs, run)


@pytest.mark.timeout(120)
@SETTINGS
@given(edge_rounds=toggles)
def test_connected_components_by_label_propagation(run, edge_rounds):
    def build(scope, edges):
        both = edges.concat(edges.map(lambda e: (e[1], e[0])))
        nodes = both.map(lambda e: e[0]).distinct()
        labels = nodes.map(lambda n: (n, n))

        def step(current):
            inner = both.enter(current.scope)
            return (current.join_map(inner, lambda n, label, m: (m, label))
                    .concat(labels.enter(current.scope))
                    .reduce(lambda n, ls, out: out.append((ls[0][0], 1))))
        return labels.iterate(step)

    def oracle(edges):
        undirected = Counter(edges)
        undirected.update({(v, u): 1 for (u, v) in edges})
        adj: dict = {}
        for (u, v) in undirected:
            adj.setdefault(u, set()).add(v)
        out = {}
        for n in adj:
            seen = bfs({(u, v): 1 for u in adj for v in adj[u]}, [n])
            out[(n, min(seen))] = 1
        return out
    check_rounds(build, oracle, [toggled(edge_rounds)], run)


@pytest.mark.timeout(120)
@SETTINGS
@given(edge_rounds=toggles)
def test_strongly_connected_components_by_closure(run, edge_rounds):
    """Transitive closure by iterate, then each node's SCC labelled by its smallest member
    (nodes on a cycle only)."""
    def build(scope, edges):
        def step(paths):
            inner = edges.enter(paths.scope)
            longer = paths.map(lambda p: (p[1], p[0])).join_map(inner, lambda mid, src, dst: (src, dst))
            return longer.concat(inner).distinct()
        closure = edges.iterate(step)
        back = closure.map(lambda p: ((p[1], p[0]), ()))
        mutual = closure.map(lambda p: (p, ())).semijoin(back.map(lambda kv: kv[0])).map(lambda kv: kv[0])
        return mutual.reduce(lambda n, others, out: out.append((min(others[0][0], n), 1)))

    def oracle(edges):
        adj = adjacency(edges)
        reach = {n: set(bfs(edges, [n])) - {n} | {v for v in adj.get(n, ()) if v == n}
                 for n in range(NODES)}
        out = {}
        for n in range(NODES):
            mutual = [m for m in reach[n] if n in reach[m]]
            if mutual:
                out[(n, min(min(mutual), n))] = 1
        return out
    check_rounds(build, oracle, [toggled(edge_rounds)], run)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_deleting_an_edge_retracts_what_was_derived(workers):
    """A chain 0->1->2->3 reachable from 0; deleting 1->2 later retracts 2 and 3."""
    inputs = [[[((0, 1), 1), ((1, 2), 1), ((2, 3), 1)], [((1, 2), -1)], [((1, 2), 1)]],
              [[(0, 1)]]]
    check_rounds(lambda scope, e, r: reachability(e, r),
                 lambda e, r: {n: 1 for n in bfs(e, list(r))}, inputs, processes(workers))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_mutually_recursive_variables(workers):
    """Even and odd distances from 0 as two variables defined in terms of each other."""
    edges_in = [[((0, 1), 1), ((1, 2), 1), ((2, 3), 1), ((3, 0), 1)], [((3, 0), -1)]]

    def build(scope, edges):
        def loop(inner):
            e = edges.enter(inner)
            start = dd.from_stream(scope.to_stream([0])).enter(inner)
            even = dd.Variable(inner)
            odd = dd.Variable(inner)
            next_odd = even.map(lambda n: (n, ())).join_map(e, lambda n, _, m: m).distinct()
            next_even = odd.map(lambda n: (n, ())).join_map(e, lambda n, _, m: m) \
                .concat(start).distinct()
            even.set(next_even)
            odd.set(next_odd)
            return next_even.map(lambda n: ("even", n)).concat(
                next_odd.map(lambda n: ("odd", n))).leave()
        return scope.iterative(loop).consolidate()

    def oracle(edges):
        adj, out, frontier, parity, seen = adjacency(edges), {}, {0}, "even", set()
        while frontier:
            for n in frontier:
                out[(parity, n)] = 1
            seen |= {(parity, n) for n in frontier}
            parity = "odd" if parity == "even" else "even"
            frontier = {m for n in frontier for m in adj.get(n, ())} - {n for p, n in seen if p == parity}
        return out
    # the dataflow's result accumulates every round of the loop: compare distinct facts
    check_rounds(lambda scope, e: build(scope, e).distinct(), oracle, [edges_in], processes(workers))


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.timeout(60)
def test_nested_iterate(workers):
    """Reachability computed by an iterate nested in another iterate (times
    ``Product(Product(t, i), j)``) equals plain reachability."""
    def build(scope, edges, roots):
        def outer_step(seen):
            outer_edges = edges.enter(seen.scope)

            def inner_step(reach):
                inner_edges = outer_edges.enter(reach.scope)
                return (reach.map(lambda n: (n, ())).join_map(inner_edges, lambda n, _, m: m)
                        .concat(seen.enter(reach.scope)).distinct())
            return seen.iterate(inner_step).concat(roots.enter(seen.scope)).distinct()
        return roots.iterate(outer_step)
    inputs = [[[((0, 1), 1), ((1, 2), 1), ((3, 4), 1)], [((2, 3), 1)], [((1, 2), -1)]],
              [[(0, 1)]]]
    check_rounds(build, lambda e, r: {n: 1 for n in bfs(e, list(r))}, inputs, processes(workers))


@pytest.mark.timeout(120)
def test_variable_in_a_scope_of_product_rounds(run):
    """Reachability by a Variable in ``scope.scoped(name, Product, ...)`` (inner times are
    Products, a round is ``Product(0, Product(0, 1))``), edges deleted over rounds. Entering
    stamped the updates ``Product(t, 0)``, below the scope's least time (an arrangement
    refused them: "a time went back"), and the step lost its outer 0 (a feedback error)."""
    def build(scope, edges, roots):
        def loop(inner):
            reach = dd.Variable.new_from(roots.enter(inner), step=st.Product(0, st.Product(0, 1)))
            step = reach.map(lambda n: (n, ())).join_map(edges.enter(inner), lambda n, _, m: m)
            return reach.set(step.concat(roots.enter(inner)).distinct()).leave()
        return scope.scoped("Rounds", st.Product, loop)
    inputs = [[[((0, 1), 1), ((1, 2), 1), ((2, 3), 1), ((4, 5), 1)], [((1, 2), -1), ((0, 4), 1)],
               [((1, 2), 1)]], [[(0, 1)]]]
    check_rounds(build, lambda e, r: {n: 1 for n in bfs(e, list(r))}, inputs, run)


def test_iterate_needs_a_collection_back():
    def build(scope):
        dd.from_stream(scope.to_stream([1])).iterate(lambda c: None)
    with pytest.raises(TypeError, match="iterate: f must return a Collection"):
        st.example(build)
