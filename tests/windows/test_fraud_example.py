"""examples/fraud_sessions.py at 1, 2 and 3 workers against the window model (each file's
batches at its watermark) and, for the blocked cards' transactions of the last hour, against
that set recomputed from scratch at every time it may change; and its command line at two
worker processes."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

import sparktimely.windows as win
from examples import fraud_sessions as example
from window_oracle import model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("transactions"))
    example.write_transactions(path)
    return path


def file_entries(folder: str) -> list:
    """``(timely_time, (id, card, ts, amount))``: each batch of 20 rows of a file at the
    file's greatest earlier event time minus 10 s (0 at first)."""
    entries = []
    for name in sorted(os.listdir(folder)):
        rows = [tuple(row.values()) for row in pq.read_table(os.path.join(folder, name)).to_pylist()]
        watermark = 0
        for i in range(0, len(rows), 20):
            entries += [(watermark, row) for row in rows[i:i + 20]]
            watermark = max(watermark, max(row[2] for row in rows[i:i + 20]) - 10_000)
    return entries


def test_sessions_alerts_and_late_transactions_follow_the_files_watermarks(run, folder):
    parts = run(lambda worker: example.fraud_sessions(worker, folder))
    sessions, late = model(win.Session(example.GAP), file_entries(folder), 0,
                           lambda rows: (sum(r[3] for r in rows), len(rows)))
    expected = sorted((t, card, w.start, w.end, *value) for t, rs in sessions
                      for card, w, value in rs)
    found = {name: sorted(r for part in parts for r in part[name]) for name in parts[0]}
    assert found["sessions"] == expected
    assert found["alerts"] == [s for s in expected if s[4] > example.THRESHOLD]
    assert found["late"] == sorted((t, r[0]) for t, rs in late for r in rs)
    assert len(found["alerts"]) == 3 and len(found["late"]) >= 5


def flagged_from_scratch(entries: list, blocklist: list, time: int) -> dict:
    """``(card, id) -> amount`` of the transactions present at ``time`` (arrived, their
    event time passed, within the hour after it) whose card the blocklist holds then."""
    holds = Counter()
    for at, card, diff in blocklist:
        if at <= time:
            holds[card] += diff
    return {(card, id): amount for arrival, (id, card, ts, amount) in entries
            if holds[card] > 0 and max(ts, arrival) <= time < ts + example.HOUR}


@pytest.mark.parametrize("blocklist", [example.BLOCKLIST,
                                       [(0, "card050", 1), (30 * 60_000, "card050", -1),
                                        (30 * 60_000, "card003", 1), (90 * 60_000, "card003", -1)]],
                         ids=["example", "changes-at-once"])
def test_blocked_cards_transactions_of_the_last_hour_follow_every_change(run, folder, blocklist):
    parts = run(lambda worker: example.fraud_sessions(worker, folder, blocklist))
    updates = sorted(update for part in parts for update in part["flagged"])
    entries = file_entries(folder)
    times = sorted({max(ts, arrival) for arrival, (_, _, ts, _) in entries} |
                   {ts + example.HOUR for _, (_, _, ts, _) in entries} |
                   {time for time, _, _ in blocklist} | {time for time, *_ in updates})
    present, i, sizes = Counter(), 0, []
    for time in times:
        while i < len(updates) and updates[i][0] <= time:
            _, card, id, amount, diff = updates[i]
            present[card, id, amount] += diff
            i += 1
        found = {(card, id): amount for (card, id, amount), n in present.items() if n}
        assert found == flagged_from_scratch(entries, blocklist, time), f"at time {time}"
        assert all(n in (0, 1) for n in present.values()), f"at time {time}"
        sizes.append(len(found))
    assert max(sizes) >= 10 and sizes[-1] == 0


def test_the_command_line_prints_alerts_sessions_and_late_transactions(folder):
    printed = subprocess.run([sys.executable, "examples/fraud_sessions.py", "--folder", folder,
                              "-w", "2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines == example.main(["--folder", folder])
    assert [line.split(":")[0] for line in lines[:3]] == ["ALERT card050", "ALERT card000",
                                                          "ALERT card100"]
