"""The differential examples at 1, 2 and 3 workers, against oracles computed from scratch."""
from collections import Counter

from examples import dd_bfs, dd_queries, dd_wordcount
from examples.bfs import reference_bfs


def test_dd_wordcount_reports_count_changes(run):
    changes = [c for part in run(dd_wordcount.wordcount) for c in part]
    lines: Counter = Counter()
    for round, batch in enumerate(dd_wordcount.ROUNDS):
        for line in batch:
            lines[line.lstrip("-")] += -1 if line.startswith("-") else 1
        words = Counter()
        for line, n in lines.items():
            for word in line.split():
                words[word] += n
        now: Counter = Counter()
        for time, data, diff in changes:
            if time <= round:
                now[data] += diff
        assert {data for data, n in now.items() if n} == {(w, n) for w, n in words.items() if n}
        assert all(n == 1 for n in now.values() if n)


def test_dd_bfs_distances_follow_insertions_and_deletions(run):
    rounds = dd_bfs.edge_rounds(300, 900, 3)
    changes = [c for part in run(lambda worker: dd_bfs.bfs(worker, rounds)) for c in part]
    present: Counter = Counter()
    for round, updates in enumerate(rounds):
        for edge, diff in updates:
            present[edge] += diff
        now: Counter = Counter()
        for data, time, diff in changes:
            if time <= round:
                now[data] += diff
        assert dict(pair for pair, n in now.items() if n) == \
            reference_bfs([e for e, n in present.items() if n > 0], 0)


def test_dd_queries_installs_and_drops_one_dataflow_per_query(run):
    def job(worker):
        latencies = dd_queries.queries(worker, 2000, 15, report=lambda text: None)
        return len(latencies), worker.installed_dataflows()
    for count, installed in run(job):
        assert count == 15 and len(installed) <= 1      # only the knows dataflow is left
