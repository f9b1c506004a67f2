"""The jobs and oracles of the recovery tests: running word counts over text files, written
by a ``DirectorySink``, with an independent recomputation in plain Python."""
from __future__ import annotations

import json
import os
import signal
from collections import Counter
from typing import Any, Callable

import pyarrow.parquet as pq

import sparktimely as st
from sparktimely.io import DirectorySink, FileSource, enable_checkpoints

KEYS = 31
BATCH_ROWS = 3


def write_texts(folder: str, files: int = 3, lines: int = 12, width: int = 4,
                salt: int = 0) -> None:
    """``files`` text files of ``lines`` lines of ``width`` words each, deterministic."""
    os.makedirs(folder, exist_ok=True)
    for f in range(files):
        with open(os.path.join(folder, f"text-{salt}-{f}.txt"), "w") as out:
            for i in range(lines):
                out.write(" ".join(f"w{(i * 7 + f * 13 + j * 5 + salt) % KEYS}"
                                   for j in range(width)) + "\n")


def lines_by_epoch(folder: str, batch_rows: int = BATCH_ROWS,
                   start: int = 0) -> dict[int, list[str]]:
    """The lines of each epoch: line ``i`` of every file is in epoch ``i // batch_rows`` (but
    not before ``start``); the header line of a CSV file is skipped."""
    by_epoch: dict[int, list[str]] = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith((".", "_")):
            continue
        with open(os.path.join(folder, name)) as lines:
            rows = lines.read().splitlines()
        for i, line in enumerate(rows[1:] if name.endswith(".csv") else rows):
            by_epoch.setdefault(max(i // batch_rows, start), []).append(line)
    return by_epoch


def epochs_of(folder: str, batch_rows: int = BATCH_ROWS, start: int = 0) -> dict[int, list[str]]:
    """The words of each epoch (see :func:`lines_by_epoch`)."""
    return {epoch: [word for line in lines for word in line.split()]
            for epoch, lines in lines_by_epoch(folder, batch_rows, start).items()}


def running_counts(by_epoch: dict[int, list[str]],
                   totals: Counter | None = None) -> list[tuple[int, str, int]]:
    """What ``state_machine`` running counts send: for each epoch in order and each word seen
    ``c`` times in it after a total ``T``, the records ``(word, T + 1) ... (word, T + c)``."""
    totals = Counter() if totals is None else totals
    out = []
    for epoch in sorted(by_epoch):
        for word, count in Counter(by_epoch[epoch]).items():
            out += [(epoch, word, totals[word] + i) for i in range(1, count + 1)]
            totals[word] += count
    return sorted(out)


def fold(key, value, total):
    total = (total or 0) + value
    return False, [[key, total]], total


def wordcount(worker: st.Worker, source: str, out: str, *, format: str = "jsonl",
              batch_rows: int = BATCH_ROWS, hook: Callable | None = None) -> None:
    """Running counts of the words of the text files in ``source``, written to ``out``;
    ``hook(worker, epoch)`` runs for each batch of counts (to fail on purpose)."""
    def build(scope):
        counts = (scope.input_from_source(FileSource(source, format="text",
                                                     batch_rows=batch_rows), "lines")
                  .flat_map(lambda line: [(word, 1) for word in line.split()])
                  .state_machine(fold))
        if hook is not None:
            counts = counts.inspect_batch(lambda time, batch: hook(worker, time))
        counts.output_to(DirectorySink(out, format=format), "counts")
    worker.dataflow(build, name="wordcount")


def checkpointed(job: Callable, directory, every: int = 1) -> Callable:
    """``job`` run by a worker that checkpoints into ``directory``; the lock is released
    however the job ends (in-process workers are threads: nothing else would release it)."""
    def run(worker):
        coordinator = enable_checkpoints(worker, directory, every)
        try:
            result = job(worker)
            worker.run()
            return result
        finally:
            coordinator.close()
    return run


def sink_files(out: str) -> list[tuple[int, str]]:
    """``(epoch, path)`` of every visible file of a DirectorySink directory, by name."""
    return [(int(name.split("-")[1]), os.path.join(out, name)) for name in sorted(os.listdir(out))
            if not name.startswith((".", "_"))]


def visible(out: str) -> list[tuple[int, str, int]]:
    """``(epoch, word, count)`` of every visible file of a DirectorySink directory."""
    rows = []
    for epoch, path in sink_files(out):
        if path.endswith(".jsonl"):
            with open(path) as lines:
                rows += [(epoch, *json.loads(line)) for line in lines]
        else:
            table = pq.read_table(path)
            rows += [(epoch, w, n) for w, n in zip(table.column("f0").to_pylist(),
                                                   table.column("f1").to_pylist())]
    return sorted(rows)


def tree(path: str) -> dict[str, bytes]:
    """Every file under ``path`` and its bytes."""
    files = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            with open(full, "rb") as data:
                files[os.path.relpath(full, path)] = data.read()
    return files


class FailOnce:
    """A hook that fails once, on ``worker`` (None: whichever worker gets there first) at
    ``epoch``: raises (in-process workers) or kills its own process with SIGKILL; ``marker``
    (a file) remembers that it did."""

    def __init__(self, marker: str, epoch: Any, worker: int | None = 0,
                 kill: bool = False) -> None:
        self.marker = marker
        self.epoch = epoch
        self.worker = worker
        self.kill = kill

    def __call__(self, worker: st.Worker, time: Any) -> None:
        if time == self.epoch and \
                (self.worker is None or worker.index == self.worker % worker.peers) and \
                not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"failing on purpose at epoch {time} on worker {worker.index}")
