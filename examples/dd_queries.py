"""Seed 003's program: one arranged ``knows`` collection shared by many query dataflows.

A first dataflow arranges ``knows`` (pairs ``(person, friend)``) and returns the arrangement's
trace. Then, round after round, a new dataflow imports the trace, asks for the friends of a few
people (``semijoin`` with a query set), prints how long installing and answering took, and is
dropped; meanwhile ``knows`` keeps changing. Every query reads the one shared index: nothing is
copied, however many queries there are.

    python examples/dd_queries.py --edges 100000 --queries 1000
"""
from __future__ import annotations

import random
import time
from collections import Counter

import sparktimely as st
import sparktimely.differential as dd
from sparktimely.execute import at_least


def queries(worker: st.Worker, edges: int, rounds: int, report=print) -> list[float]:
    """Install ``rounds`` query dataflows against one arranged ``knows``; their latencies."""
    knows = dd.InputSession()

    def build(scope):
        arranged = knows.to_collection(scope).arrange_by_key()
        return arranged.trace, arranged.stream.probe()
    trace, probe = worker.dataflow(build, name="knows")
    people = max(1, edges // 10)
    rng = random.Random(worker.index)
    for i in range(worker.index, edges, worker.peers):
        knows.insert((rng.randrange(people), rng.randrange(people)))
    knows.advance_to(1)
    worker.step_while(lambda: probe.less_than(1))
    latencies = []
    for round in range(1, rounds + 1):
        query = dd.InputSession()
        answers: Counter = Counter()        # (person, friend) -> count, this worker's share
        started = time.perf_counter()
        index = worker.next_dataflow_index()
        done = worker.dataflow(lambda scope: trace.import_(scope)
                               .semijoin(query.to_collection(scope))
                               .inspect(lambda update: answers.update({update[0]: update[2]}))
                               .probe(), name=f"query-{round}")
        query.advance_to(round)
        if worker.index == 0:
            for person in range(round, round + 3):
                query.insert(person % people)
        # change the collection a bit, then run until the query and knows are current
        knows.insert(((round * worker.peers + worker.index) % people, round % people))
        knows.advance_to(round + 1)
        query.advance_to(round + 1)
        worker.step_while(lambda: done.less_than(round + 1))
        latencies.append(time.perf_counter() - started)
        query.close()
        worker.drop_dataflow(index)
        trace.set_logical_compaction([round + 1])
        trace.set_physical_compaction([])
        if worker.index == 0 and (round <= 3 or round % max(1, rounds // 10) == 0):
            found = sum(1 for count in answers.values() if count)
            report(f"query {round}: {found} answers on worker 0, "
                   f"{latencies[-1] * 1e3:.2f} ms to install and answer")
    knows.close()
    return latencies


def main(argv: list[str] | None = None) -> None:
    parser = st.timely_parser(description=__doc__, checkpoints=False)
    parser.add_argument("--edges", type=at_least(0), default=100_000, help="size of knows")
    parser.add_argument("--queries", type=at_least(1), default=1000, help="query dataflows to install")
    options = parser.parse_args(argv)
    edges, rounds = options.edges, options.queries
    parts = st.execute_from_args(options, lambda worker: queries(worker, edges, rounds))
    slowest = [max(per_round) for per_round in zip(*parts)]
    slowest.sort()
    print(f"{rounds} queries over {edges:,} edges: median {slowest[len(slowest) // 2] * 1e3:.2f} ms, "
          f"p99 {slowest[int(len(slowest) * 0.99)] * 1e3:.2f} ms to install and answer")


if __name__ == "__main__":
    main()
