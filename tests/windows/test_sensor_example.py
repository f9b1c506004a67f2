"""examples/sensor_windows.py at 1, 2 and 3 workers against the window model, and its
command line at two worker processes printing what two in-process workers report."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import sparktimely.windows as win
from sparktimely.testing import execute_in_process
from examples import sensor_windows as example
from window_oracle import model, model_value, watermarked

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(120)
def test_sensor_means_maxima_and_late_readings_follow_the_watermarks(run):
    arriving = example.readings()
    parts = run(example.sensor_windows)
    entries = [entry for w in range(run.workers)
               for entry in watermarked(arriving[w::run.workers], 5000)]
    means, late = model(win.Tumbling(example.MINUTE), entries, 0,
                        lambda readings: model_value("mean", readings))
    maxima, _ = model(win.Sliding(5 * example.MINUTE, example.MINUTE), entries, 0,
                      lambda readings: model_value("max", readings))

    def merged(name):
        return sorted(report for part in parts for report in part[name])
    assert merged("means") == [(t, *r) for t, rs in means for r in rs]
    assert merged("maxima") == [(t, *r) for t, rs in maxima for r in rs]
    assert merged("late") == [(t, r) for t, rs in late for r in rs]
    assert len(merged("late")) >= 5


@pytest.mark.timeout(120)
def test_the_command_line_prints_the_reports_of_its_workers():
    lines = example.report(execute_in_process(example.sensor_windows, 2, seed=5))
    printed = subprocess.run([sys.executable, "examples/sensor_windows.py", "-w", "2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == lines
    assert "s1 mean  [00:00, 01:00): 20.73 C" in lines
    assert sum(" late  reading of " in line for line in lines) >= 5
