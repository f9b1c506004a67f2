"""A whole run observed: logs to a directory, progress shown, the job's results intact."""
from __future__ import annotations

import io

import pytest

import sparktimely as st
from sparktimely.logging import observing, read_log_directory, write_report


def job(worker):
    data = range(100) if worker.index == 0 else []
    worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda x: x).capture())
    return worker.index


@pytest.mark.timeout(60)
def test_a_run_logs_shows_progress_and_returns_what_the_job_returns(tmp_path):
    out = io.StringIO()
    with observing(job, log_dir=tmp_path / "logs", progress=True, stream=out) as observed:
        assert observed is not job
        assert st.execute(observed, workers=2) == [0, 1]
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("sparktimely: ") and ", 2 workers, " in last
    assert "probe" not in last and "worker 0: cpu" in last and "100 records done" in last
    logs = read_log_directory(tmp_path / "logs")
    assert sorted(logs.workers) == [0, 1]
    assert [e.name for e in logs.operators()] == ["ToStream", "Exchange", "Capture"]
    page = open(write_report(tmp_path / "logs")).read()
    assert "<h2>Timeline</h2>" in page


def test_nothing_asked_for_runs_the_job_itself():
    with observing(job) as observed:
        assert observed is job
        assert st.execute(observed, workers=2) == [0, 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_last_line_of_a_failed_run_says_where_its_workers_got(workers):
    def failing(worker):
        handle = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(handle).map(
            lambda x: x // (x - 5_500) if worker.index == worker.peers - 1 else x)
            .exchange(lambda x: x).probe())
        for epoch in range(10):
            handle.send_batch(range(epoch * 1_000, (epoch + 1) * 1_000))
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time()))
        handle.close()
    out = io.StringIO()
    with pytest.raises(st.WorkerError, match="ZeroDivisionError"):
        with observing(failing, progress=True, stream=out, interval=3600) as observed:
            st.execute(observed, workers=workers)
    last = out.getvalue().splitlines()[-1]
    assert f", {workers} worker{'s' if workers > 1 else ''}, " in last, last
    # The failing worker tells where it got before its failure is reported; the others may
    # be stopped before their last status arrives (each had sent 6,000 records by then).
    assert " 6,000 records" in last, last
