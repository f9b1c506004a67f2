"""Breadth-first search in an iterative scope, spread over the workers.

Edges are split across workers and exchanged by source node; proposed distances circulate
around a loop (one iteration per BFS level) and each node keeps the first distance that
reaches it. Notifications make sure a level is complete before it is expanded.

    python examples/bfs.py -w2 --nodes 1000 --edges 5000
"""
import random
from collections import defaultdict

import sparktimely as st
from sparktimely.execute import at_least


def random_graph(nodes: int, edges: int, seed: int = 7) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def reference_bfs(edges: list[tuple[int, int]], root: int) -> dict[int, int]:
    """Plain-Python BFS distances, for checking."""
    adjacency = defaultdict(list)
    for src, dst in edges:
        adjacency[src].append(dst)
    distances, frontier = {root: 0}, [root]
    while frontier:
        following = []
        for node in frontier:
            for neighbour in adjacency[node]:
                if neighbour not in distances:
                    distances[neighbour] = distances[node] + 1
                    following.append(neighbour)
        frontier = following
    return distances


def bfs(worker: st.Worker, edges: list[tuple[int, int]], root: int = 0) -> dict[int, int]:
    """The BFS distances of the nodes owned by this worker."""
    mine = edges[worker.index::worker.peers]

    def build(scope):
        edge_stream = scope.to_stream(mine)
        start = scope.to_stream([(root, 0)] if worker.index == 0 else [])

        def loop(inner):
            handle, proposals = inner.loop_variable(1)
            builder = st.OperatorBuilder("ExpandLevel", inner)
            edges_in = builder.new_input(edge_stream.enter(inner), st.Exchange(lambda e: e[0]))
            reach_in = builder.new_input(start.enter(inner).concat(proposals),
                                         st.Exchange(lambda p: p[0]))
            accepted_out, accepted = builder.new_output()
            proposals_out, next_level = builder.new_output()

            def ctor(capabilities):
                for capability in capabilities:
                    capability.drop()
                adjacency: defaultdict[int, list[int]] = defaultdict(list)
                best: dict[int, int] = {}
                waiting: dict = {}            # time -> (capability per output, [(node, d)])
                notificator = st.FrontierNotificator()

                def expand(cap, notificator):
                    caps, reached = waiting.pop(cap.time)
                    fresh = []
                    for node, distance in reached:
                        if node not in best:
                            best[node] = distance
                            fresh.append((node, distance))
                    accepted_out.give_at(caps[0], fresh)
                    proposals_out.give_at(caps[1], [(n, d + 1) for node, d in fresh
                                                    for n in adjacency[node]])

                def logic(frontiers):
                    for _, batch in edges_in:
                        for src, dst in batch:
                            adjacency[src].append(dst)
                    for cap, batch in reach_in:
                        if cap.time not in waiting:
                            waiting[cap.time] = ((cap.retain_for_output(0),
                                                  cap.retain_for_output(1)), [])
                            notificator.notify_at(waiting[cap.time][0][0])
                        waiting[cap.time][1].extend(batch)
                    notificator.for_each(frontiers, expand)
                return logic
            builder.build(ctor)
            next_level.connect_loop(handle)
            return accepted.leave()
        return scope.iterative(loop).capture()
    captured = worker.dataflow(build, name="bfs")
    worker.run()
    return {node: distance for _, pairs in captured.extract() for node, distance in pairs}


if __name__ == "__main__":
    parser = st.timely_parser(description=__doc__, checkpoints=False)
    parser.add_argument("--nodes", type=at_least(1), default=1000, help="nodes of the random graph")
    parser.add_argument("--edges", type=at_least(0), default=5000, help="edges of the random graph")
    options = parser.parse_args()
    graph = random_graph(options.nodes, options.edges)
    parts = st.execute_from_args(options, lambda worker: bfs(worker, graph))
    distances = {k: v for part in parts for k, v in part.items()}
    # this process's workers own the nodes routed to them (node % peers)
    peers = options.workers * options.processes
    mine = range(options.process * options.workers, (options.process + 1) * options.workers)
    expected = {k: v for k, v in reference_bfs(graph, 0).items() if k % peers in mine}
    assert distances == expected
    print(f"process {options.process}: its workers reached {len(distances)} of {options.nodes} "
          f"nodes, as plain Python does; deepest level {max(distances.values(), default=0)}")
