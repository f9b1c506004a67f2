"""The differential examples at 1, 2 and 3 workers, against oracles computed from scratch."""
import os
import subprocess
import sys
from collections import Counter

import pytest
from ports import free_ports

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
