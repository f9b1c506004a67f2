"""examples/fraud_sessions.py at 1, 2 and 3 workers against the window model (each file's
batches at its watermark), and its command line at two worker processes."""
from __future__ import annotations

import os
import subprocess
import sys

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


def test_the_command_line_prints_alerts_sessions_and_late_transactions(folder):
    printed = subprocess.run([sys.executable, "examples/fraud_sessions.py", "--folder", folder,
                              "-w", "2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines == example.main(["--folder", folder])
    assert [line.split(":")[0] for line in lines[:3]] == ["ALERT card050", "ALERT card000",
                                                          "ALERT card100"]
