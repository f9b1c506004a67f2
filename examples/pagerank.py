"""PageRank in an iterative scope, with numpy doing the arithmetic of each worker.

Worker ``w`` owns the nodes ``n`` with ``n % peers == w`` (stored at slot ``n // peers``),
and the edges whose source it owns. Each iteration it multiplies its ranks by the inverse
out-degrees, sums the contributions of its edges per destination with ``np.bincount`` (one
vector per destination owner), and sends each owner its vector: numpy arrays in Python-list
batches, which travel through shared memory without copies. A notification at every
iteration time makes sure all contributions are in before the next ranks are computed.
The update is the one of Spark's example and of ``shared/anchors/pr_anchor.py``:
``rank = 0.15 + 0.85 * sum(contributions)``.

Run it on local worker processes::

    python examples/pagerank.py -w2 --nodes 100000 --edges 1000000 --iterations 10

or as a Spark application, one barrier task per worker, reading a Parquet edge list
(columns ``src``, ``dst``)::

    sparktimely-submit -w 2 examples.pagerank:job --edges /data/edges.parquet

:func:`pagerank_dataframe` is the DataFrame form (``map_in_arrow``).
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

import sparktimely as st
from sparktimely.execute import at_least

SCHEMA = pa.schema([("node", pa.int64()), ("rank", pa.float64())])


# -- the graph and the reference --------------------------------------------------------------

def generate_graph(nodes: int, edges: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """The random graph of ``pr_anchor.py``: ``(src, dst)`` int64 arrays."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, edges)
    dst = (src * 2654435761 + rng.integers(0, nodes, edges)) % nodes
    return src.astype(np.int64), dst.astype(np.int64)


def numpy_pagerank(src: np.ndarray, dst: np.ndarray, nodes: int, iterations: int) -> np.ndarray:
    """Single-threaded numpy PageRank (the COST baseline); ranks of nodes ``0..nodes-1``.

    >>> src, dst = np.array([0, 1, 2]), np.array([1, 2, 0])
    >>> numpy_pagerank(src, dst, 3, 5).round(3).tolist()
    [1.0, 1.0, 1.0]
    """
    deg = np.bincount(src, minlength=nodes).astype(np.float64)
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    rank: np.ndarray = np.ones(nodes)
    for _ in range(iterations):
        rank = 0.15 + 0.85 * np.bincount(dst, weights=(rank * inv)[src], minlength=nodes)
    return rank


# -- the dataflow -------------------------------------------------------------------------------

def _columns(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of an edge batch: an Arrow batch with those columns, or a list of
    ``(src_array, dst_array)`` pairs or ``(src, dst)`` records."""
    if isinstance(batch, pa.RecordBatch):
        return (batch.column("src").to_numpy().astype(np.int64, copy=False),
                batch.column("dst").to_numpy().astype(np.int64, copy=False))
    if batch and isinstance(batch[0][0], np.ndarray):
        return (np.concatenate([b[0] for b in batch]).astype(np.int64, copy=False),
                np.concatenate([b[1] for b in batch]).astype(np.int64, copy=False))
    pairs = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _split(values: np.ndarray, owners: np.ndarray, peers: int, *others: np.ndarray):
    """Group rows by owner: yields ``(owner, values_part, *others_parts)``."""
    order = np.argsort(owners, kind="stable")
    bounds = np.searchsorted(owners[order], np.arange(peers + 1))
    for owner in range(peers):
        part = order[bounds[owner]:bounds[owner + 1]]
        yield (owner, values[part], *(other[part] for other in others))


def pagerank(scope: st.Scope, edges: st.Stream, iterations: int = 10,
             timings: list | None = None) -> st.Stream:
    """The ranks of the nodes in ``edges`` after ``iterations`` rounds, as Arrow batches
    ``(node int64, rank float64)``, each node reported by its owner at the edges' time.

    ``edges`` carries batches of edges (see :func:`_columns`) at one time. If ``timings`` is
    a list, ``(iterations, seconds)`` is appended once the loop is done, measured from the
    first iteration's start to the last one's end on this worker.

    >>> def build(scope):
    ...     edges = scope.to_stream([(0, 1), (1, 2), (2, 0), (0, 2)])
    ...     return pagerank(scope, edges, 20).capture()
    >>> table = st.example(build).extract()[0][1]
    >>> [round(r, 3) for r in table.sort_by("node").column("rank").to_pylist()]
    [1.163, 0.644, 1.192]
    """
    peers, me = scope.peers, scope.index

    def by_owner(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                src, dst = _columns(batch)
                output.give_at(cap, list(_split(src, src % peers, peers, dst)))
        return logic
    owned = edges.unary(st.Pipeline, "EdgesByOwner", by_owner).exchange(lambda part: part[0])

    def loop(inner):
        handle, contributions = inner.loop_variable(1)
        builder = st.OperatorBuilder("PageRank", inner)
        edges_in = builder.new_input(owned.enter(inner), st.Pipeline)
        sums_in = builder.new_input(contributions, st.Exchange(lambda part: part[0]))
        sums_out, sums = builder.new_output()
        ranks_out, ranks = builder.new_output()

        def ctor(capabilities):
            loop_cap, rank_cap = capabilities
            notificator = st.FrontierNotificator()
            notificator.notify_at(loop_cap)
            frontiers = [edges_in.frontier, sums_in.frontier]
            pieces: list = []                       # (src, dst) arrays of owned edges
            waiting: dict = {}                      # time -> received contribution vectors
            graph: dict = {}
            started = [0.0]

            def setup() -> None:
                src = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
                dst = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0, np.int64)
                pieces.clear()
                src_slot = src // peers
                slots = int(src_slot.max()) + 1 if len(src) else 0
                deg = np.bincount(src_slot, minlength=slots).astype(np.float64)
                graph["inv"] = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
                graph["rank"] = np.ones(slots)
                # Edges grouped by destination owner (and sorted by destination inside):
                # each owner's sums are one bincount over a contiguous slice.
                order = np.lexsort((dst // peers, dst % peers))
                src_slot, dst = src_slot[order], dst[order]
                graph["src"], graph["dst"] = src_slot, dst // peers
                graph["bounds"] = np.searchsorted(dst % peers, np.arange(peers + 1))
                graph["sizes"] = [int(graph["dst"][b:e].max()) + 1 if e > b else 0
                                  for b, e in zip(graph["bounds"][:-1], graph["bounds"][1:])]

            def send_contributions(cap) -> None:
                weights = (graph["rank"] * graph["inv"])[graph["src"]]
                dst, bounds, sizes = graph["dst"], graph["bounds"], graph["sizes"]
                sums_out.give_at(cap, [
                    (owner, np.bincount(dst[bounds[owner]:bounds[owner + 1]],
                                        weights=weights[bounds[owner]:bounds[owner + 1]],
                                        minlength=sizes[owner]))
                    for owner in range(peers)])

            def update_ranks(vectors: list) -> None:
                size = max([len(graph["rank"])] + [len(v) for v in vectors])
                total = np.zeros(size)
                for vector in vectors:
                    total[:len(vector)] += vector
                rank = 0.15 + 0.85 * total
                if size > len(graph["inv"]):        # nodes with in-edges only
                    graph["inv"] = np.concatenate([graph["inv"],
                                                   np.zeros(size - len(graph["inv"]))])
                graph["rank"] = rank

            def fire(cap, _notificator) -> None:
                iteration = cap.time.inner
                if iteration == 0:
                    setup()
                    started[0] = time.perf_counter()
                else:
                    update_ranks(waiting.pop(cap.time, []))
                if iteration < iterations:
                    send_contributions(cap)
                    notificator.notify_at(cap.delayed(st.Product(cap.time.outer, iteration + 1)))
                    return
                if timings is not None:
                    timings.append((iterations, time.perf_counter() - started[0]))
                rank = graph["rank"]
                nodes = np.arange(len(rank), dtype=np.int64) * peers + me
                out = rank_cap.delayed(cap.time)
                ranks_out.give_at(out, pa.RecordBatch.from_arrays(
                    [pa.array(nodes), pa.array(rank)], schema=SCHEMA))
                out.drop()
                rank_cap.drop()

            def logic(frontiers_now):
                for _, batch in edges_in:
                    pieces.extend(batch)
                for cap, batch in sums_in:
                    waiting.setdefault(cap.time, []).extend(vector for _, vector in batch)
                notificator.for_each(frontiers, fire)
            return logic
        builder.build(ctor)
        sums.connect_loop(handle)
        return ranks.leave()
    return scope.iterative(loop)


def top_ranks(ranks: st.Stream, k: int) -> st.Stream:
    """The ``k`` highest ``(rank, node)`` pairs of each worker, gathered on worker 0 (ties
    in rank cut by node, highest first, as the gathered pairs are sorted)."""
    def ctor(capability, info):
        capability.drop()

        def logic(input, output):
            for cap, batch in input:
                rank = batch.column("rank").to_numpy()
                node = batch.column("node").to_numpy()
                best = np.lexsort((node, rank))[::-1][:k]
                output.give_at(cap, [(float(rank[i]), int(node[i])) for i in best])
        return logic
    return ranks.unary(st.Pipeline, "TopK", ctor).exchange(lambda pair: 0)


# -- reading Parquet and running --------------------------------------------------------------

def read_edges(path: str, index: int, peers: int) -> list[pa.RecordBatch]:
    """This worker's share of a Parquet edge list: every ``peers``-th row group."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    dataset = ds.dataset(path, format="parquet")
    groups = [(f, g) for f in sorted(dataset.files)
              for g in range(pq.ParquetFile(f).metadata.num_row_groups)]
    batches = []
    for file, group in groups[index::peers]:
        table = pq.ParquetFile(file).read_row_group(group, columns=["src", "dst"])
        batches.extend(table.combine_chunks().to_batches())
    return batches


def pagerank_worker(worker: st.Worker, edges: Sequence, iterations: int = 10,
                    top: int = 10) -> dict | None:
    """Run PageRank on this worker's ``edges`` (batches); worker 0 returns a summary:
    ``top`` (list of ``(rank, node)``), ``iterations``, ``seconds`` (the loop, on worker 0)
    and ``ms_per_iteration``; other workers return None."""
    timings: list = []

    def build(scope):
        ranks = pagerank(scope, scope.to_stream(list(edges)), iterations, timings)
        return top_ranks(ranks, top).capture()
    captured = worker.dataflow(build, name="pagerank")
    worker.run()
    if worker.index != 0:
        return None
    pairs = sorted((pair for _, batch in captured.extract() for pair in batch), reverse=True)
    iterations_done, seconds = timings[0] if timings else (iterations, 0.0)
    return {"top": pairs[:top], "iterations": iterations_done, "seconds": seconds,
            "ms_per_iteration": 1000 * seconds / max(iterations_done, 1)}


def format_report(summary: dict, header: str = "") -> str:
    lines = [header] if header else []
    lines.append(f"PageRank: {summary['iterations']} iterations in {summary['seconds']:.3f} s "
                 f"({summary['ms_per_iteration']:.1f} ms per iteration)")
    lines.append("top ranks:")
    lines += [f"  node {node:>8}  rank {rank:10.4f}" for rank, node in summary["top"]]
    return "\n".join(lines)


def job_options(args: list[str]) -> argparse.Namespace:
    """The spark-submit job's arguments (``worker.args``): ``--edges PATH`` (required),
    ``--iterations N`` (10), ``--top K`` (10); ValueError naming what is wrong.

    >>> job_options(["--edges", "e.parquet", "--top", "3"]).top
    3
    >>> job_options(["--edges", "e.parquet", "--iterations", "many"])
    Traceback (most recent call last):
    ValueError: examples.pagerank:job: argument --iterations: invalid int value: 'many'
    """
    parser = argparse.ArgumentParser(prog="examples.pagerank:job", add_help=False,
                                     allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--edges", metavar="PATH")
    parser.add_argument("--iterations", type=at_least(1), default=10)
    parser.add_argument("--top", type=at_least(1), default=10)
    usage = "it takes --edges PATH (a Parquet edge list), --iterations N, --top K"
    try:
        options, unknown = parser.parse_known_args(args)
    except argparse.ArgumentError as error:
        raise ValueError(f"{parser.prog}: {error}") from None
    if unknown:
        raise ValueError(f"{parser.prog}: unrecognized arguments: {' '.join(unknown)} ({usage})")
    if not options.edges:
        raise ValueError(f"{parser.prog} needs --edges PATH ({usage})")
    return options


def job(worker: st.Worker) -> str | None:
    """The spark-submit job (arguments: :func:`job_options`). Worker 0 returns the report."""
    options = job_options(worker.args)
    started = time.perf_counter()
    edges = read_edges(options.edges, worker.index, worker.peers)
    loaded = time.perf_counter() - started
    summary = pagerank_worker(worker, edges, options.iterations, options.top)
    if summary is None:
        return None
    return format_report(summary, f"{worker.peers} workers; worker 0 read its share of "
                                  f"{options.edges} in {loaded:.2f} s")


def pagerank_dataframe(df, iterations: int = 10, num_workers: int | None = None):
    """PageRank of a Spark DataFrame of edges (columns ``src``, ``dst``): a DataFrame
    ``(node long, rank double)`` computed in one barrier stage."""
    from sparktimely.barrier import map_in_arrow
    return map_in_arrow(df, lambda scope, edges: pagerank(scope, edges, iterations),
                        SCHEMA, num_workers=num_workers)


if __name__ == "__main__":
    parser = st.timely_parser(description=__doc__, checkpoints=False)
    parser.add_argument("--nodes", type=at_least(1), default=100_000, metavar="N",
                        help="nodes of the random graph (default 100000)")
    parser.add_argument("--edges", type=at_least(0), default=1_000_000, metavar="N",
                        help="random edges between them (default 1000000; the Spark form, "
                             "sparktimely-submit ... examples.pagerank:job, takes a Parquet "
                             "path instead)")
    parser.add_argument("--iterations", type=at_least(1), default=10, metavar="N",
                        help="PageRank iterations (default 10)")
    options = parser.parse_args()
    src, dst = generate_graph(options.nodes, options.edges)

    def local(worker):
        mine = slice(worker.index, None, worker.peers)
        edges = [pa.RecordBatch.from_arrays([pa.array(src[mine]), pa.array(dst[mine])],
                                            names=["src", "dst"])]
        return pagerank_worker(worker, edges, options.iterations)
    summary = st.execute_from_args(options, local)[0]
    print(format_report(summary) if summary is not None else "worker 0's process reports")
