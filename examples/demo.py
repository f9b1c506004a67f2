"""The main example job: BFS over a random graph on two worker processes.

    python -m examples.demo
"""
import time

import sparktimely as st
from examples.bfs import bfs, random_graph, reference_bfs


def main() -> None:
    graph = random_graph(20_000, 100_000)
    start = time.perf_counter()
    parts = st.execute(lambda worker: bfs(worker, graph), workers=2)
    elapsed = time.perf_counter() - start
    distances = {node: d for part in parts for node, d in part.items()}
    assert distances == reference_bfs(graph, 0)
    print(f"BFS on 2 workers reached {len(distances)} nodes, {max(distances.values())} levels, "
          f"in {elapsed:.2f} s (matches plain Python)")


if __name__ == "__main__":
    main()
