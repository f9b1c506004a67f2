"""``Session.give_iterator`` gives every record now, as timely's does; only
``give_iterator_later`` consumes its iterable after the operator's logic returns.

The programs here are written the natural way: a generator expression that reads the logic's
loop variables. Python's closures bind late, so such a generator consumed after the loop sees
the variables' last values; consumed at once it sees each iteration's own.
"""
from __future__ import annotations

import networkx as nx
import pytest

import sparktimely as st
from sparktimely.dataflow.ports import BATCH_SIZE


def label_propagation(graph: nx.Graph):
    """A job whose workers compute connected components of ``graph`` by label propagation in
    an iterative scope: each node's label is the least node in its component. The operator
    gives its proposals with a generator expression over its loop variables."""
    adjacency = {node: sorted(graph[node], key=st.stable_hash) for node in graph}

    def job(worker):
        mine = [node for node in graph if st.stable_hash(node) % worker.peers == worker.index]

        def build(scope):
            initial = scope.to_stream([(node, node) for node in mine])

            def propagate(inner):
                handle, cycle = inner.loop_variable(1)
                labels: dict = {}
                proposals: dict = {}

                def logic(input, output, notificator):
                    for cap, batch in input:
                        best = proposals.setdefault(cap.time, {})
                        if not best:
                            notificator.notify_at(cap.retain())
                        for node, label in batch:
                            if node not in best or label < best[node]:
                                best[node] = label
                    for cap, _ in notificator:
                        best = proposals.pop(cap.time)
                        with output.session(cap) as session:
                            for node, label in best.items():
                                if node in labels and labels[node] <= label:
                                    continue
                                labels[node] = label
                                session.give_iterator((neighbour, label)
                                                      for neighbour in adjacency[node])
                improved = (initial.enter(inner).concat(cycle)
                            .unary_notify(st.Exchange(lambda pair: st.stable_hash(pair[0])),
                                          "Propagate", [], logic))
                improved.connect_loop(handle)
                return improved.leave()
            return (initial.concat(scope.iterative(propagate))
                    .aggregate(lambda node, label, least: label if least is None
                               else min(label, least),
                               lambda node, least: (node, least), st.stable_hash)
                    .capture())
        capture = worker.dataflow(build)
        worker.run()
        return capture.extract()
    return job


def least_in_component(graph: nx.Graph) -> dict:
    return {node: min(component) for component in nx.connected_components(graph)
            for node in component}


def random_graph() -> nx.Graph:
    """5,000 nodes and 4,000 edges: many components of many sizes."""
    return nx.gnm_random_graph(5000, 4000, seed=7)


@pytest.mark.parametrize("graph", [nx.karate_club_graph(), nx.les_miserables_graph(),
                                   random_graph()],
                         ids=["karate_club", "les_miserables", "random_5000"])
def test_label_propagation_with_generator_output_matches_networkx(graph, run):
    results = run(label_propagation(graph))
    labels = dict(pair for worker in results for _, pairs in worker for pair in pairs)
    assert labels == least_in_component(graph)


@pytest.mark.parametrize("container", [iter, list, tuple])
def test_give_iterator_sends_in_batches_as_it_iterates(run, container):
    """The records of a long iterator (or list, or tuple) are sent as batches of at most
    BATCH_SIZE while the logic runs: a consumer sees all of them, in order, at the
    session's time."""
    def job(worker):
        sizes = []

        def ctor(cap, info):
            def logic(output):
                with output.session(cap) as session:
                    session.give_iterator(container(range(2 * BATCH_SIZE + 5)))
                cap.drop()
            return logic

        def watch(time, batch):
            sizes.append(len(batch))
        capture = worker.dataflow(
            lambda scope: st.source(scope, "Long", ctor).inspect_batch(watch).capture())
        worker.run()
        return sizes, capture.extract()
    for sizes, captured in run(job):
        assert sizes == [BATCH_SIZE, BATCH_SIZE, 5]
        assert captured == [(0, list(range(2 * BATCH_SIZE + 5)))]


def test_give_iterator_later_consumes_after_the_logic_returns(run):
    """The opt-in: the iterable is read after the logic returns, so a generator that reads a
    variable the logic changes afterwards sees the later value."""
    def job(worker):
        def ctor(cap, info):
            def logic(output):
                with output.session(cap) as session:
                    value = "before"
                    session.give_iterator_later(value for _ in range(2))
                    value = "after"
                    session.give_iterator(value for _ in range(1))
                cap.drop()
            return logic
        capture = worker.dataflow(lambda scope: st.source(scope, "Later", ctor).capture())
        worker.run()
        return capture.extract()
    for captured in run(job):
        assert captured == [(0, ["after", "after", "after"])]
