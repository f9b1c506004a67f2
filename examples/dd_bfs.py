"""Differential breadth-first search: distances that follow edge insertions and deletions.

Distances from node 0 are the fixed point of ``iterate``: a node's distance is the smallest of
its neighbours' plus one (``join_map`` then ``reduce``). Each round a few edges are inserted and
a few earlier ones deleted; the distances are updated incrementally, a deleted edge retracting
the distances derived through it. Every round is checked against a BFS from scratch.

    python examples/dd_bfs.py -w2 --nodes 2000 --edges 6000 --rounds 5
"""
from __future__ import annotations

import os
import random
import sys
from collections import defaultdict

import sparktimely as st
import sparktimely.differential as dd
from sparktimely.execute import at_least

if __package__ in (None, ""):          # run as a file: its sibling examples.bfs is a module away
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples.bfs import reference_bfs  # noqa: E402


def distances(edges: dd.Collection, roots: dd.Collection) -> dd.Collection:
    """``(node, distance)`` from ``roots`` over ``(src, dst)`` edges."""
    start = roots.map(lambda node: (node, 0))

    def step(current: dd.Collection) -> dd.Collection:
        inner_edges = edges.enter(current.scope)
        proposed = current.join_map(inner_edges, lambda node, d, neighbour: (neighbour, d + 1))
        return (proposed.concat(start.enter(current.scope))
                .reduce(lambda node, ds, out: out.append((ds[0][0], 1))))
    return start.iterate(step)


def edge_rounds(nodes: int, edges: int, rounds: int, seed: int = 7) -> list[list[tuple]]:
    """The graph as rounds of ``((src, dst), diff)``: all edges first, then per round some new
    edges in and some old ones out."""
    rng = random.Random(seed)
    present = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]
    result = [[(e, 1) for e in present]]
    for _ in range(rounds):
        out = rng.sample(present, min(len(present), max(1, edges // 100)))
        new = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(max(1, edges // 100))]
        for e in out:
            present.remove(e)
        present += new
        result.append([(e, -1) for e in out] + [(e, 1) for e in new])
    return result


def bfs(worker: st.Worker, rounds: list[list[tuple]]) -> list[tuple]:
    """The ``((node, distance), round, diff)`` changes of all workers, on worker 0 (the
    others return none: with several processes, worker 0's process checks them all)."""
    edges, roots = dd.InputSession(), dd.InputSession()
    changes: list = []
    probe = worker.dataflow(lambda scope: distances(edges.to_collection(scope),
                                                    roots.to_collection(scope))
                            .inner.exchange(lambda change: 0).inspect(changes.append).probe(),
                            name="dd-bfs")
    if worker.index == 0:
        roots.insert(0)
    for round, updates in enumerate(rounds):
        for i, (edge, diff) in enumerate(updates):
            if i % worker.peers == worker.index:
                edges.update(edge, diff)
        edges.advance_to(round + 1)
        roots.advance_to(round + 1)
        worker.step_while(lambda: probe.less_than(round + 1))
    edges.close()
    roots.close()
    return changes


def main(argv: list[str] | None = None) -> None:
    parser = st.timely_parser(description=__doc__, checkpoints=False)
    parser.add_argument("--nodes", type=at_least(1), default=1000, help="nodes of the random graph")
    parser.add_argument("--edges", type=at_least(0), default=3000, help="edges at first")
    parser.add_argument("--rounds", type=at_least(0), default=4, help="rounds of edge changes")
    options = parser.parse_args(argv)
    rounds = edge_rounds(options.nodes, options.edges, options.rounds)
    parts = st.execute_from_args(options, lambda worker: bfs(worker, rounds))
    if options.process != 0:
        print("worker 0's process checks the distances against BFS from scratch")
        return
    changes = [change for part in parts for change in part]
    present: dict = defaultdict(int)
    for round, updates in enumerate(rounds):
        for edge, diff in updates:
            present[edge] += diff
        now: dict = defaultdict(int)
        for data, time, diff in changes:
            if time <= round:
                now[data] += diff
        found = dict(pair for pair, n in now.items() if n)
        assert found == reference_bfs([e for e, n in present.items() if n > 0], 0), f"round {round}"
        moved = sum(1 for _, time, _ in changes if time == round)
        print(f"round {round}: {len(found)} nodes reachable, {moved} distance updates, "
              f"same as BFS from scratch")


if __name__ == "__main__":
    main()
