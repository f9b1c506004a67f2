"""Event-time windows under epoch checkpoints, with in-process workers: files read with
``FileSource(event_time=...)`` (epochs are watermarks) through ``stream.window`` into a
``DirectorySink``; a failure while windows are open and a rerun, at the same or another
worker count, give the output of an uninterrupted run. Open windows (panes, sessions) are
keyed state, restored on the worker that owns their key."""
from __future__ import annotations

import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktimely as st
import sparktimely.windows as win
from sparktimely.io import DirectorySink, FileSource
from sparktimely.testing import execute_in_process

from recovery_jobs import FailOnce, checkpointed, sink_files

pytestmark = pytest.mark.timeout(120)

KINDS = [win.Tumbling(10), win.Sliding(12, 4), win.Session(6)]
ROWS = 4                  # rows per batch: every file's watermark moves every 4 rows
EVERY = 8                 # checkpoint every 8 epochs (of event time)


def write_events(folder: str, files: int = 3, rows: int = 36, seed: int = 0) -> None:
    """Parquet files of events ``id, key, ts, value``: event times rising by about 3 a row,
    a few far behind (late), so windows of every kind are open across many epochs."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    for f in range(files):
        ts = [3 * i + f - rng.choice([0, 0, 1, 4, 9, 30]) for i in range(rows)]
        pq.write_table(pa.table({
            "id": [100 * f + i for i in range(rows)], "key": [rng.choice("abcd") for _ in ts],
            "ts": ts, "value": [rng.randrange(-5, 20) for _ in ts]}),
            os.path.join(folder, f"events-{f}.parquet"))


def job(folder: str, out: str, kind, arrow: bool, hook=None, records_aggregate=win.collect):
    """Per-key windows of the events' values with lateness 2: results and late records
    written as JSON lines; ``hook(worker, time)`` sees the time of each batch of results;
    ``records_aggregate()`` is the aggregation of the Python form."""
    def run(worker):
        def build(scope):
            events = scope.input_from_source(FileSource(folder, batch_rows=ROWS,
                                                        event_time="ts", out_of_order=5),
                                             "events")
            if arrow:
                windows = events.window(kind, time_of="ts", key="key", lateness=2,
                                        aggregate={"total": ("sum", "value"),
                                                   "n": ("count", None)})
                results = windows.results.map_batches(lambda b: b)
                late = windows.late
            else:
                windows = events.from_arrow(tuples=True).window(
                    kind, time_of=lambda r: r[2], key=lambda r: r[1], lateness=2,
                    aggregate=records_aggregate())
                results = windows.results.map(lambda r: {"key": r[0], "window_start": r[1].start,
                                                         "window_end": r[1].end,
                                                         "ids": sorted(e[0] for e in r[2])})
                late = windows.late.map(lambda r: {"id": r[0]})
            if hook is not None:
                results = results.inspect_batch(lambda time, batch: hook(worker, time))
            results.output_to(DirectorySink(os.path.join(out, "results"), format="jsonl"),
                              "results")
            late.output_to(DirectorySink(os.path.join(out, "late"), format="jsonl"), "late")
        worker.dataflow(build, name="windows")
    return run


def visible(out: str) -> dict:
    """What each sink made visible: ``(epoch, row)`` pairs, sorted."""
    found = {}
    for part in ("results", "late"):
        rows = []
        for epoch, path in sink_files(os.path.join(out, part)):
            with open(path) as lines:
                rows += [(epoch, json.dumps(json.loads(line), sort_keys=True)) for line in lines]
        found[part] = sorted(rows)
    return found


def result_epoch(output: dict, fraction: float) -> int:
    """The epoch of some results, ``fraction`` of the way through those of ``output``."""
    epochs = sorted({epoch for epoch, _ in output["results"]})
    return epochs[int(len(epochs) * fraction)]


@pytest.fixture
def events(tmp_path):
    folder = str(tmp_path / "events")
    write_events(folder)
    return folder


@pytest.mark.parametrize("arrow", [False, True], ids=["python", "arrow"])
@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_a_failure_while_windows_are_open_and_a_rerun_give_the_undisturbed_output(
        run, events, tmp_path, kind, arrow):
    plain = str(tmp_path / "plain")
    run(job(events, plain, kind, arrow))
    expected = visible(plain)
    assert expected["results"] and expected["late"]
    fail = FailOnce(str(tmp_path / "failed"), result_epoch(expected, 0.7), worker=None)
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    failing = checkpointed(job(events, out, kind, arrow, fail), directory, EVERY)
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(failing)
    assert len(os.listdir(directory / "windows" / "commits")) > 1
    run(failing)
    assert visible(out) == expected


@pytest.mark.parametrize("arrow", [False, True], ids=["python", "arrow"])
@pytest.mark.parametrize("before, after", [(2, 3), (3, 1)])
@pytest.mark.parametrize("kind", [KINDS[1], KINDS[2]], ids=repr)
def test_a_rerun_at_another_worker_count_gives_the_same_output(events, tmp_path, kind, before,
                                                               after, arrow):
    plain = str(tmp_path / "plain")
    execute_in_process(job(events, plain, kind, arrow), after, seed=after)
    fail = FailOnce(str(tmp_path / "failed"), result_epoch(visible(plain), 0.5), worker=None)
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    failing = checkpointed(job(events, out, kind, arrow, fail), directory, EVERY)
    with pytest.raises(st.WorkerError):
        execute_in_process(failing, before, seed=before)
    execute_in_process(failing, after, seed=after)
    assert visible(out) == visible(plain)


def nan_keyed_job(folder: str, out: str, kind, hook=None):
    """Counts per window of the events' ids, keyed by a float that is NaN for half the
    keys (each record's NaN an object of its own)."""
    def run(worker):
        def build(scope):
            events = scope.input_from_source(FileSource(folder, batch_rows=ROWS,
                                                        event_time="ts", out_of_order=5),
                                             "events").from_arrow(tuples=True)
            windows = events.window(kind, time_of=lambda r: r[2], aggregate=win.count(),
                                    key=lambda r: float("nan") if r[1] in "ab" else 1.5)
            results = windows.results.map(lambda r: {"key": str(r[0]), "n": r[2],
                                                     "window_start": r[1].start})
            if hook is not None:
                results = results.inspect_batch(lambda time, batch: hook(worker, time))
            results.output_to(DirectorySink(os.path.join(out, "results"), format="jsonl"),
                              "results")
            windows.late.output_to(DirectorySink(os.path.join(out, "late"), format="jsonl"),
                                   "late")
        worker.dataflow(build, name="windows")
    return run


@pytest.mark.parametrize("before, after", [(1, 1), (2, 3)])
@pytest.mark.parametrize("kind", [win.Tumbling(10), win.Session(6)], ids=repr)
def test_windows_of_nan_keys_resume_as_one_key(events, tmp_path, kind, before, after):
    """A NaN key of a restored window (an object of its own, unpickled) and the NaN keys of
    records after the resume were two keys: the window reported twice, split."""
    plain = str(tmp_path / "plain")
    execute_in_process(nan_keyed_job(events, plain, kind), 1, seed=1)
    fail = FailOnce(str(tmp_path / "failed"), result_epoch(visible(plain), 0.5), worker=None)
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    failing = checkpointed(nan_keyed_job(events, out, kind, fail), directory, EVERY)
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        execute_in_process(failing, before, seed=before)
    execute_in_process(failing, after, seed=after)
    assert visible(out) == visible(plain)


def refused_rerun(run, events, tmp_path, before: dict, after: dict) -> str:
    """What refuses a rerun of ``job(**after)`` from the checkpoints of ``job(**before)``
    (which failed on purpose after 70% of its results)."""
    plain = str(tmp_path / "plain")
    run(job(events, plain, **before))
    fail = FailOnce(str(tmp_path / "failed"), result_epoch(visible(plain), 0.7), worker=None)
    out, directory = str(tmp_path / "out"), tmp_path / "ck"
    with pytest.raises(st.WorkerError, match="failing on purpose"):
        run(checkpointed(job(events, out, hook=fail, **before), directory, EVERY))
    with pytest.raises(st.WorkerError) as refused:
        run(checkpointed(job(events, out, hook=fail, **after), directory, EVERY))
    told = str(refused.value)
    assert "RecoveryError" in told and "is of another program" in told, told
    return told


@pytest.mark.parametrize("arrow", [False, True], ids=["python", "arrow"])
@pytest.mark.parametrize("before, after", [(win.Tumbling(10), win.Tumbling(20)),
                                           (win.Tumbling(10), win.Session(6))], ids=repr)
def test_a_rerun_with_another_window_is_refused_naming_both(run, events, tmp_path, before,
                                                            after, arrow):
    """A resumed Tumbling(20) read Tumbling(10)'s open windows by their numbers (window 14
    of [140, 150) came out as [280, 300)), and a session failed in Python's words."""
    told = refused_rerun(run, events, tmp_path, {"kind": before, "arrow": arrow},
                         {"kind": after, "arrow": arrow})
    form = "Arrow aggregate " if arrow else "records collect)"
    for kind in (before, after):
        assert f"({kind!r}, lateness 2, {form}" in told, told


def test_a_rerun_with_another_python_aggregation_is_refused(run, events, tmp_path):
    """A resumed win.count() read win.collect()'s open windows (lists of events) as counts,
    silently: the Python aggregation, like the Arrow dict, is part of the window's name."""
    told = refused_rerun(run, events, tmp_path, {"kind": win.Tumbling(10), "arrow": False},
                         {"kind": win.Tumbling(10), "arrow": False, "records_aggregate": win.count})
    assert "lateness 2, records collect)" in told and "lateness 2, records count)" in told, told
