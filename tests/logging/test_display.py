"""The live progress display: what workers publish, what the display draws on a terminal
and as plain lines, against a job whose records and epochs are known."""
from __future__ import annotations

import io
import re

import pytest

import sparktimely as st
from sparktimely.logging import ProgressDisplay, report_status
from sparktimely.logging.display import plain_line, render_lines

ROUNDS, PER_ROUND = 5, 300


def rounds_job(directory=None, stream=None):
    def job(worker):
        reporter = report_status(worker, directory, stream, interval=0)
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .map(lambda x: x + 1).probe(), name="rounds")
        for round in range(ROUNDS):
            if worker.index == 0:
                input.send_batch(range(round * PER_ROUND, (round + 1) * PER_ROUND))
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
        input.close()
        worker.run()
        worker.log_register().close()
        return reporter.records
    return job


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.timeout(60)
def test_the_display_reads_what_worker_processes_publish(tmp_path):
    out = io.StringIO()
    with ProgressDisplay(tmp_path, out, plain_every=0.05):
        records = st.execute(rounds_job(tmp_path), workers=2)
    # records entering the dataflow: worker 0's input sends them all
    assert records == [ROUNDS * PER_ROUND, 0]
    last = out.getvalue().splitlines()[-1].split("; ")
    assert re.fullmatch(r"sparktimely: \d+\.\d s, 2 workers, (\d[\d,]* records/s, )?done",
                        last[0])
    assert last[1] == "probe rounds/3: done"
    assert re.fullmatch(r"worker 0: cpu +(-|\d+%) rss +\d+ MB 1,500 records done", last[2])
    assert re.fullmatch(r"worker 1: cpu +(-|\d+%) rss +\d+ MB 0 records done", last[3])


def test_a_worker_publishes_its_progress_as_it_goes(run, tmp_path):
    streams = [io.StringIO() for _ in range(run.workers)]

    def job(worker):
        return rounds_job(stream=streams[worker.index])(worker)
    run(job)
    lines = streams[0].getvalue().splitlines()
    frontiers = [re.search(r"probe rounds/3: (frontier \[\d+\]|done)", line).group(1)
                 for line in lines]
    # the probe's frontier only moves forward, through every round, to done: the worker
    # waits at each round for the probe to pass it, and publishes after every step
    numbers = [int(f[10:-1]) for f in frontiers if f != "done"]
    assert numbers == sorted(numbers)
    assert set(range(1, ROUNDS + 1)) <= set(numbers) <= set(range(ROUNDS + 1))
    assert frontiers[-1] == "done" and lines[-1].endswith(
        f"{ROUNDS * PER_ROUND:,} records done")


def test_on_a_terminal_the_display_redraws_in_place(tmp_path):
    terminal = Terminal()
    display = ProgressDisplay(tmp_path, terminal)
    display.show()
    st.execute_directly(rounds_job(tmp_path))
    display.show()
    output = terminal.getvalue()
    first, second = output.split("\x1b[1F")          # the first drawing had one line
    assert first == "\x1b[2Ksparktimely  " + first.split("sparktimely  ")[1]
    assert "no status from the workers yet" in first
    lines = second.split("\n")[:-1]
    assert all(line.startswith("\x1b[2K") for line in lines)
    assert [line[4:].split()[0:2] for line in lines[1:]] == [["probe", "rounds/3:"],
                                                              ["worker", "0:"]]


def test_rates_come_from_successive_statuses():
    before = {w: {"worker": w, "wall": 100.0, "records": 1_000 * w, "cpu": 1.0, "rss": 0,
                  "probes": [], "done": False} for w in (0, 1)}
    after = [{**before[w], "wall": 102.0, "records": 1_000 * w + 5_000, "cpu": 2.5}
             for w in (0, 1)]
    lines = render_lines(after, before, 30.0)
    assert lines[0] == "sparktimely  30.0 s  2 workers  5,000 records/s"
    assert lines[1] == "  worker 0: cpu  75%  rss     0 MB  5,000 records"
    assert plain_line(after, before, 30.0) == (
        "sparktimely: 30.0 s, 2 workers, 5,000 records/s; worker 0: cpu 75% rss 0 MB 5,000 "
        "records; worker 1: cpu 75% rss 0 MB 6,000 records")


def test_a_worker_begun_again_counts_from_its_new_start_not_below_zero():
    """A retried Spark stage runs worker 0 again: its counters start over, and its rate is
    taken from its new start, not against the previous run's larger counts."""
    before = {0: {"worker": 0, "wall": 100.0, "records": 9_000, "cpu": 30.0, "rss": 0,
                  "probes": [], "done": False, "started": [50.0, 0.5]}}
    again = [{"worker": 0, "wall": 104.0, "records": 2_000, "cpu": 1.5, "rss": 0,
              "probes": [], "done": False, "started": [103.0, 0.5]}]
    assert render_lines(again, before, 30.0)[:2] == [
        "sparktimely  30.0 s  1 worker  2,000 records/s",
        "  worker 0: cpu 100%  rss     0 MB  2,000 records"]


@pytest.mark.timeout(60)
def test_a_worker_that_cannot_reach_the_display_says_so_once_and_goes_on(capfd):
    import socket
    from sparktimely.logging import observed
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]                  # closed again: nobody listens there
    job = observed(rounds_job(), status_address=("127.0.0.1", port), interval=0)
    assert st.execute(job, workers=2) == [ROUNDS * PER_ROUND, 0]
    err = capfd.readouterr().err
    for worker in (0, 1):
        assert err.count(f"worker {worker} cannot send its status to the progress display "
                         f"at 127.0.0.1:{port}") == 1, err


def test_the_listener_keeps_each_workers_latest_status_and_ignores_the_rest():
    import json
    import socket
    from sparktimely.logging import StatusListener
    listener = StatusListener("127.0.0.1")
    listener.MAX_LINE = 100                  # a longer line is not a worker's: hang up on it
    try:
        with socket.create_connection(listener.address) as first, \
                socket.create_connection(listener.address) as second, \
                socket.create_connection(listener.address) as stranger:
            first.sendall(b'{"worker": 0, "records": 1}\n{"worker": 0, "rec')
            second.sendall(json.dumps({"worker": 1, "records": 5}).encode() + b"\n")
            stranger.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"x" * 200)
            listener.poll(1.0)
            while listener.poll(0.2):
                pass
            first.sendall(b'ords": 2}\n')
            assert stranger.recv(1) == b""                   # hung up on
        listener.drain(5.0)
        assert listener.statuses() == [{"worker": 0, "records": 2}, {"worker": 1, "records": 5}]
    finally:
        listener.close()
