"""The differential examples at 1, 2 and 3 workers, against oracles computed from scratch."""
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from ports import free_ports

import sparktimely as st

from examples import dd_bfs, dd_queries, dd_wordcount
from examples.bfs import reference_bfs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def test_dd_queries_reports_worker_zeros_distinct_answers(run):
    """The report counts the (person, friend) pairs worker 0 holds for the query, each once
    however often it was inserted or replayed; the oracle builds ``knows`` as the example
    does (per worker, seeded by its index) and routes keys as arrangements do."""
    edges, rounds = 300, 4

    def job(worker):
        reports: list = []
        dd_queries.queries(worker, edges, rounds, report=reports.append)
        return reports
    reports = run(job)[0]
    people = edges // 10
    knows = set()
    for index in range(run.workers):
        rng = random.Random(index)
        knows |= {(rng.randrange(people), rng.randrange(people))
                  for _ in range(index, edges, run.workers)}
    expected = []
    for round in range(1, rounds + 1):
        knows |= {((round * run.workers + index) % people, round % people)
                  for index in range(run.workers)}
        asked = {person % people for person in range(round, round + 3)}
        found = {(p, f) for p, f in knows
                 if p in asked and st.stable_hash(p) % run.workers == 0}
        expected.append(len(found))
    assert [int(text.split(": ")[1].split()[0]) for text in reports] == expected


@pytest.mark.timeout(120)
def test_dd_bfs_from_the_command_line_as_two_processes(tmp_path):
    # each process holds half the workers; worker 0's process checks every round
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"127.0.0.1:{port}\n" for port in free_ports(2)))
    args = ["--nodes", "300", "--edges", "900", "--rounds", "2"]
    procs = [subprocess.Popen([sys.executable, "-m", "examples.dd_bfs", "-w", "2", "-n", "2",
                               "-p", str(p), "-h", str(hostfile), *args], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in range(2)]
    try:
        outputs = [proc.communicate(timeout=100) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    assert [line.endswith("same as BFS from scratch") for line in outputs[0][0].splitlines()] \
        == [True] * 3
    assert "worker 0's process checks" in outputs[1][0]
