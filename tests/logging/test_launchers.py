"""The launchers wired to the logs and the display: ``st.execute(log_dir=, progress=)`` and
``--log-dir``/``--progress`` at 1, 2 and 3 worker processes, a hostfile job of two processes
whose logs the profile command renders, and the display on a terminal and off one."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from collections import Counter

import pytest
from ports import free_ports
from test_report import parse

import launched_job
import sparktimely as st
from sparktimely.logging import MessagesEvent, OperatesEvent, read_log_directory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENT = launched_job.ROUNDS * launched_job.PER_ROUND          # records each worker sends


def launch(*flags: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    """``launched_job.py`` with ``flags``, as a program of its own."""
    return subprocess.Popen([sys.executable, launched_job.__file__, *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))


def check_results(results: list[dict], first: int, peers: int) -> None:
    assert [r["worker"] for r in results] == list(range(first, first + len(results)))
    for result in results:
        assert result["received"] == launched_job.expected_received(result["worker"], peers)


def check_logs(directory, results: list[dict], peers: int) -> None:
    """Each worker process wrote its own files, and they hold what the job did."""
    logs = read_log_directory(directory)
    assert sorted(logs.workers) == list(range(peers))
    assert {w: logs.workers[w]["pid"] for w in range(peers)} == {
        r["worker"]: r["pid"] for r in results}
    assert [e.name for e in logs.operators()] == ["Input", "Exchange", "InspectBatch", "Probe"]
    assert all(type(e) is not OperatesEvent or e.worker in logs.workers for e in logs.events)
    exchange = [e for e in logs.events if type(e) is MessagesEvent and e.is_send
                and e.channel == 0]
    moved = Counter()
    for event in exchange:
        moved[event.source, event.target] += event.length
    expected = Counter((source, x % peers) for source in range(peers)
                       for round in range(launched_job.ROUNDS)
                       for x in launched_job.records(source, round))
    assert moved == expected


def check_display(stderr: str, workers: list[int]) -> None:
    """Off a terminal the display prints plain lines; the last one shows the finished run."""
    assert "\x1b" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("sparktimely: ")]
    assert lines, stderr
    last = lines[-1].split("; ")
    count = len(workers)
    assert re.fullmatch(rf"sparktimely: \d+\.\d s, {count} workers?, [\d,]+ records/s, done",
                        last[0]), last
    assert last[1] == "probe rounds/3: done"
    for line, worker in zip(last[2:], workers, strict=True):
        assert re.fullmatch(rf"worker {worker}: cpu +\d+% rss +\d+ MB {SENT:,} records done",
                            line), line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_log_dir_and_progress_flags(tmp_path, workers):
    logs = tmp_path / "logs"
    job = launch("-w", str(workers), "--log-dir", str(logs), "--progress")
    out, err = job.communicate(timeout=90)
    assert job.returncode == 0, err
    results = json.loads(out.splitlines()[-1])
    check_results(results, 0, workers)
    check_logs(logs, results, workers)
    check_display(err, list(range(workers)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_log_dir_and_progress_keywords(tmp_path, capfd, workers):
    results = st.execute(launched_job.rounds, workers=workers, log_dir=tmp_path / "logs",
                         progress=True)
    check_results(results, 0, workers)
    check_logs(tmp_path / "logs", results, workers)
    check_display(capfd.readouterr().err, list(range(workers)))


def test_off_by_default(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = st.execute(launched_job.rounds, workers=2)
    check_results(results, 0, 2)
    assert capfd.readouterr().err == ""
    assert os.listdir(tmp_path) == []                 # no log files either


def test_flag_errors_name_the_flag(capsys):
    for argv, error in ((["--progress=yes"], "argument --progress: ignored explicit argument "
                                             "'yes'"),
                        (["--log-dir"], "argument --log-dir: expected one argument")):
        with pytest.raises(SystemExit, match="^2$"):
            st.execute_from_args(argv, lambda worker: None)
        assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {error}")


@pytest.mark.timeout(180)
def test_a_hostfile_jobs_logs_render_in_the_profile(tmp_path):
    """Two processes of two workers each log to one directory; each shows its own workers;
    ``python -m sparktimely.profile`` renders the four workers and what crossed processes."""
    logs = tmp_path / "logs"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"127.0.0.1:{port}\n" for port in free_ports(2)))
    jobs = [launch("-w", "2", "-n", "2", "-p", str(process), "-h", str(hostfile),
                   "--log-dir", str(logs), "--progress") for process in (0, 1)]
    outputs = [job.communicate(timeout=120) for job in jobs]
    for job, (_, err) in zip(jobs, outputs):
        assert job.returncode == 0, err
    results = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    check_results(results[0], 0, 4)
    check_results(results[1], 2, 4)
    check_logs(logs, results[0] + results[1], 4)
    check_display(outputs[0][1], [0, 1])
    check_display(outputs[1][1], [2, 3])
    profile = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(logs)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert profile.returncode == 0, profile.stderr
    page = parse((logs / "profile.html").read_text())
    pids = {r["worker"]: r["pid"] for r in results[0] + results[1]}
    assert [(int(row[0]), int(row[2])) for row in page.tables["workers"][1:]] == sorted(
        pids.items())
    traffic = page.tables["traffic"]
    assert traffic[0] == ["", "to 0", "to 1", "to 2", "to 3", "to other workers",
                          "routed to itself", "along pipelines"]
    for source in range(4):
        routed = Counter(x % 4 for r in range(launched_job.ROUNDS)
                         for x in launched_job.records(source, r))
        assert [int(cell.replace(",", "").replace("\u2014", "-1"))
                for cell in traffic[1 + source][1:]] == [
            *(routed[target] if target != source else -1 for target in range(4)),
            SENT - routed[source], routed[source],
            2 * len(launched_job.expected_received(source, 4))]   # what it got, twice
    assert all(f">worker {w}</text>" in (logs / "profile.html").read_text() for w in range(4))


def on_a_terminal(*flags: str) -> tuple[list[dict], list[list[str]]]:
    """Run ``launched_job.py`` with ``flags`` and ``--progress`` on a pseudo-terminal: its
    results, and the display's drawings (each a list of lines), checking that every
    drawing goes up over the lines of the one before."""
    main, terminal = pty.openpty()
    job = launch(*flags, "--progress", stderr=terminal)
    os.close(terminal)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:                         # EIO: the program has ended
                return
            if not chunk:
                return
            chunks.append(chunk)
    reader = threading.Thread(target=read)
    reader.start()
    out, _ = job.communicate(timeout=90)
    reader.join(30)
    os.close(main)
    assert job.returncode == 0
    screen = b"".join(chunks).decode()
    drawings = re.split(r"\x1b\[(\d+)F", screen)    # cursor up the last drawing's lines
    for drawing, up in zip(drawings[0:-1:2], drawings[1::2]):
        assert len(drawing.splitlines()) == int(up)
        assert all(line.startswith("\x1b[2K") for line in drawing.splitlines())
    return (json.loads(out.splitlines()[-1]),
            [[line.removeprefix("\x1b[2K") for line in drawing.splitlines()]
             for drawing in drawings[0::2]])


@pytest.mark.timeout(120)
def test_on_a_terminal_the_display_redraws_in_place(tmp_path):
    results, drawings = on_a_terminal("-w", "2", "--pause", "0.4")
    check_results(results, 0, 2)
    assert len(drawings) >= 3, drawings                # 1.6 s of rounds: drawn every 0.5 s
    last = drawings[-1]
    head = re.fullmatch(r"sparktimely  \d+\.\d s  2 workers  ([\d,]+) records/s  done", last[0])
    assert head and int(head[1].replace(",", "")) > 0       # the rate over the whole run
    assert last[1:] == [line for line in last[1:] if line.startswith("  ")]
    assert last[1].strip() == "probe rounds/3: done"
    assert [line.split()[:2] for line in last[2:]] == [["worker", "0:"], ["worker", "1:"]]


@pytest.mark.timeout(120)
def test_the_display_keeps_a_value_between_two_statuses(tmp_path):
    """Workers report once a second, the terminal is redrawn twice a second: a drawing
    without a new status shows the rates the last one showed, not a dash."""
    _, drawings = on_a_terminal("-w", "2", "--pause", "0.7")
    assert len(drawings) >= 5, drawings                # 2.8 s of rounds
    shown: dict[str, bool] = {}
    for drawing in drawings:
        for line in drawing:
            match = re.match(r"  (worker \d+): cpu (.{4})", line)
            if match:
                number = match[2].strip() != "-"
                assert number or not shown.get(match[1]), drawings
                shown[match[1]] = number
            elif line.startswith("sparktimely "):
                number = "records/s" in line
                assert number or not shown.get("head"), drawings
                shown["head"] = shown.get("head", False) or number
    assert shown == {"head": True, "worker 0": True, "worker 1": True}
