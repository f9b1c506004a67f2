"""examples.recoverable_wordcount at 1, 2 and 3 workers: the running totals per epoch against
a recount in plain Python, after a failure and a resume, also at another worker count."""
from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow.parquet as pq
import pytest

import sparktimely as st
from examples.recoverable_wordcount import wordcount
from sparktimely.testing import execute_in_process

from recovery_jobs import checkpointed

pytestmark = pytest.mark.timeout(120)

PER_EPOCH = 7


def write_words(folder, files=3, lines=40, seed=1) -> None:
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for f in range(files):
        with open(os.path.join(folder, f"{seed}-{f}.txt"), "w") as out:
            for _ in range(lines):
                out.write("  ".join(f"w{rng.randrange(60)}" for _ in range(rng.randrange(7)))
                          + "\n")


def oracle(folder) -> list[tuple[int, str, int]]:
    """(epoch, word, running total) for each word counted in each epoch."""
    by_epoch: dict = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as lines:
            for i, line in enumerate(lines):
                by_epoch.setdefault(i // PER_EPOCH, Counter()).update(line.split())
    totals, rows = Counter(), []
    for epoch in sorted(by_epoch):
        totals.update(by_epoch[epoch])
        rows += [(epoch, word, totals[word]) for word in by_epoch[epoch]]
    return sorted(rows)


def written(out) -> list[tuple[int, str, int]]:
    rows = []
    for name in os.listdir(out):
        assert not name.startswith("_"), name
        epoch = int(name.split("-")[1])
        rows += [(epoch, row["word"], row["total"])
                 for row in pq.read_table(os.path.join(out, name)).to_pylist()]
    return sorted(rows)


def test_running_totals_per_epoch_at_any_worker_count(run, tmp_path):
    write_words(tmp_path / "in")
    run(lambda w: wordcount(w, str(tmp_path / "in"), str(tmp_path / "out"), PER_EPOCH))
    assert written(tmp_path / "out") == oracle(tmp_path / "in")


def test_a_failed_run_resumed_at_another_worker_count_writes_every_total_once(run, tmp_path):
    source, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_words(source)
    commits = tmp_path / "ck" / "recoverable-wordcount" / "commits"

    def failing(worker):
        wordcount(worker, source, out, PER_EPOCH)
        if worker.index == worker.peers - 1:
            worker.step_while(lambda: not (commits.exists() and os.listdir(commits)))
            raise RuntimeError("stopping after the first checkpoint")
    with pytest.raises(st.WorkerError, match="stopping after the first checkpoint"):
        execute_in_process(checkpointed(failing, tmp_path / "ck", 2), 2, seed=4)
    run(checkpointed(lambda w: wordcount(w, source, out, PER_EPOCH), tmp_path / "ck", 2))
    assert written(out) == oracle(source)
