"""The profile report: ``python -m sparktimely.profile LOGDIR`` on the logs of a real run,
the page's tables against an oracle, the page in a real headless browser (Chromium from the
system packages, when installed), and the page without Graphviz."""
from __future__ import annotations

import html.parser
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter

import pytest

import sparktimely as st
from sparktimely.logging import (LogDirectory, MessagesEvent, OperatesEvent, ParkEvent,
                                 ScheduleEvent, ShutdownEvent, StepsEvent, has_graphviz,
                                 log_to_directory, read_log_directory, render_report, summarize)
from sparktimely.logging.report import COLUMNS, EXACT_INTERVALS

PROG = "python -m sparktimely.profile"
"""How the profile command names itself in its errors (argparse's ``prog``)."""

RECORDS = 3000


def words_job(directory):
    def job(worker):
        log_to_directory(worker, directory)
        data = [f"w{i % 7}" for i in range(RECORDS)] if worker.index == 0 else []
        worker.dataflow(lambda scope: scope.to_stream(data).exchange(lambda w: int(w[1:]))
                        .map(len).probe(), name="words")
    return job


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("logs")
    st.execute(words_job(directory), workers=2)
    return directory


class _Page(html.parser.HTMLParser):
    """Collects tables as rows of cell texts and checks that elements nest properly."""

    VOID = {"meta", "br", "img", "link", "input", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.table: str | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.open.append(tag)
        if tag == "table":
            self.table = dict(attrs).get("id")
            self.tables[self.table] = []
        elif tag == "tr" and self.table is not None:
            self.tables[self.table].append([])
        elif tag in ("td", "th") and self.table is not None:
            self.cell = []

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1:]}>"
        self.open.pop()
        if tag in ("td", "th") and self.cell is not None:
            self.tables[self.table][-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "table":
            self.table = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    return parser


@pytest.mark.timeout(120)
def test_the_profile_command_writes_a_page_whose_tables_match_the_run(logdir):
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(logdir)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    path = os.path.join(logdir, "profile.html")
    assert result.stdout.strip() == f"sparktimely.profile: wrote {path}"
    page = parse(open(path).read())
    share = Counter(int(f"w{i % 7}"[1:]) % 2 for i in range(RECORDS))
    operators = {row[1].lstrip("\u25a0 "): row for row in page.tables["operators"][1:]}
    assert sorted(operators) == ["Exchange", "Map", "Probe", "ToStream"]
    # runs, ms, share, records in, records out
    assert operators["ToStream"][6:] == ["0", f"{RECORDS:,}"]
    assert operators["Exchange"][6:] == [f"{RECORDS:,}", f"{RECORDS:,}"]
    assert operators["Probe"][6:] == [f"{RECORDS:,}", "0"]
    assert abs(sum(float(row[5].rstrip("%")) for row in operators.values()) - 100) < 0.5
    assert [row[0] for row in page.tables["workers"][1:]] == ["0", "1"]
    traffic = page.tables["traffic"]
    assert traffic[0] == ["", "to 0", "to 1", "to other workers", "routed to itself",
                          "along pipelines"]
    # only worker 0 has records: its exchange sends worker 1's share across and routes its
    # own share to itself; then each worker passes its share along two pipelines (to Map,
    # to Probe), which never leave the worker
    assert traffic[1] == ["from 0", "\u2014", f"{share[1]:,}", f"{share[1]:,}",
                          f"{share[0]:,}", f"{2 * share[0]:,}"]
    assert traffic[2] == ["from 1", "0", "\u2014", "0", "0", f"{2 * share[1]:,}"]


PARTS = ["operators", "progress", "communication", "checkpoints", "parked", "other"]


def workers_rows(page) -> list[dict]:
    """The workers table as dicts: logged ms, each part's ms, steps."""
    table = page.tables["workers"]
    assert table[0] == ["worker", "host", "pid", "logged ms",
                        *[name for part in PARTS for name in (f"{part} ms", "%")], "steps"]
    number = lambda cell: float(cell.replace(",", "").rstrip("%"))
    return [{"logged": number(row[3]), **{part: number(row[4 + 2 * i])
                                          for i, part in enumerate(PARTS)},
             "shares": [number(row[5 + 2 * i]) for i in range(len(PARTS))],
             "steps": int(row[-1].replace(",", ""))} for row in table[1:]]


@pytest.mark.timeout(120)
def test_every_workers_time_is_accounted_for(tmp_path):
    """The parts of a worker's logged time add up to it: a program that sleeps 50 ms after
    each of its 4 rounds shows at least that much outside steps, and its steps show time
    in operators, in progress, in communication and in checkpoints beside the time
    parked."""
    def job(worker):
        log_to_directory(worker, tmp_path)
        input = st.InputHandle()
        probe = worker.dataflow(lambda scope: scope.input_from(input).exchange(lambda x: x)
                                .map(str).probe(), name="rounds")
        for round in range(4):
            input.send_batch(range(round * 5000, (round + 1) * 5000))
            input.advance_to(round + 1)
            worker.step_while(lambda: probe.less_than(round + 1))
            time.sleep(0.05)                        # the program's own code, between steps
        input.close()
    st.execute(job, workers=2, checkpoint_dir=tmp_path / "checkpoints")
    page = parse(render_report(read_log_directory(tmp_path)))
    for row in workers_rows(page):
        assert abs(sum(row[part] for part in PARTS) - row["logged"]) < 0.01, row
        assert abs(sum(row["shares"]) - 100) < 0.5, row
        assert row["other"] >= 190, row                 # 4 x 50 ms of sleeping
        assert all(row[part] > 0 for part in ("operators", "progress", "communication",
                                              "checkpoints")), row
        assert row["steps"] > 4, row


def test_the_workers_table_splits_the_logged_time_exactly():
    """One step from 5 to 50 ns, 5 of it communicating, an operator running 10 to 40 in it,
    a park from 50 to 80, and the log's last event at 100: each part to the nanosecond."""
    events = [OperatesEvent(0, 0, 0, (0, 0), "Map", "d"), ScheduleEvent(10, 0, 0, True),
              ScheduleEvent(40, 0, 0, False), StepsEvent(50, 0, 1, 45, 5, 0),
              ParkEvent(50, 0, True, None), ParkEvent(80, 0, False, None),
              ShutdownEvent(100, 0, 0)]
    worker = summarize(events).workers[0]
    assert [worker.logged_ns, worker.busy_ns, worker.progress_ns, worker.communication_ns,
            worker.checkpoint_ns, worker.parked_ns, worker.other_ns] == [100, 30, 10, 5, 0, 30,
                                                                         25]
    row = workers_rows(parse(render_report(LogDirectory({0: {"epoch_ns": 0}}, events))))[0]
    assert (row["shares"], row["steps"]) == ([30.0, 10.0, 5.0, 0.0, 30.0, 25.0], 1)


def test_a_directory_without_logs_is_a_usage_error(tmp_path):
    """Told as argparse tells a bad argument: the usage, one ``prog: error:`` line, status 2
    (was ``sparktimely.profile: ...``, a prefix of its own)."""
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    usage, error = result.stderr.splitlines()
    assert usage.startswith(f"usage: {PROG} ")
    assert error == f"{PROG}: error: no sparktimely logs (worker-N.json) in {tmp_path}"


@pytest.mark.parametrize("content, problem", [
    ("{", "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
          "(char 1)"),
    ('{"epoch_ns": 0}', "KeyError: 'worker'"),
    ('{"worker": 0, "epoch_ns": "x"}', "TypeError: its epoch_ns is 'x', not an int")])
def test_a_damaged_log_description_is_named_in_one_line(tmp_path, content, problem):
    """Was json's traceback, naming no file."""
    (tmp_path / "worker-0.json").write_text(content)
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{PROG}: error: {tmp_path / 'worker-0.json'} is not a worker's log description "
        f"(damaged, or written by something else): {problem}"]


@pytest.mark.parametrize("suffix", ["timely", "progress"])
def test_a_damaged_event_log_is_named_in_one_line(tmp_path, suffix):
    """Was read as a log of no events, and the page drawn from nothing."""
    (tmp_path / "worker-0.json").write_text('{"worker": 0, "peers": 1, "epoch_ns": 0}')
    (tmp_path / f"worker-0.{suffix}").write_bytes(b"these are not the events of a worker\n")
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{PROG}: error: {tmp_path / f'worker-0.{suffix}'} is not a worker's event log "
        f"(damaged, or written by something else): ValueError: not events written by an "
        f"EventWriter (each is a length and a pickle; this is not)"]


def framed(pickled: bytes) -> bytes:
    """One record of an EventWriter's file: its length, then the pickle."""
    return struct.pack("<Q", len(pickled)) + pickled


EVENT = pickle.dumps(("messages", 0, [MessagesEvent(5, 0, True, 0, 0, 1, 2, 3)]), protocol=5)


@pytest.mark.parametrize("record, problem", [
    (EVENT.replace(b"MessagesEvent", b"MessagXsEvent"), "AttributeError: Can't get attribute "
     "'MessagXsEvent' on <module 'sparktimely.logging.events'"),
    (EVENT.replace(b"sparktimely.logging", b"sparktimelX.logging"),
     "ModuleNotFoundError: No module named 'sparktimelX'"),
    (b"\x80\x05\x8e" + struct.pack("<Q", 1 << 62) + b".", "ValueError: not events written "
     "by an EventWriter (each is a length and a pickle; this is not): MemoryError"),
    (pickle.dumps(("messages", 0, ["a", "b"])), "it holds 'a', not a logged event"),
], ids=["class", "module", "length", "not-events"])
def test_a_damaged_event_record_is_named_in_one_line(tmp_path, record, problem):
    """A flipped bit in a record's class name or a pickle's length, or records that are not
    events, ended the profile with a traceback (AttributeError, ModuleNotFoundError,
    MemoryError, or the sort of events without times)."""
    (tmp_path / "worker-0.json").write_text('{"worker": 0, "peers": 1, "epoch_ns": 0}')
    (tmp_path / "worker-0.timely").write_bytes(framed(record))
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{PROG}: error: {tmp_path / 'worker-0.timely'} is not a "
                           f"worker's event log (damaged, or written by something else): "
                           f"{problem}"), line


@pytest.mark.timeout(120)
def test_the_output_may_be_a_directory_and_a_missing_one_is_named(logdir, tmp_path):
    """-o into an existing directory writes profile.html there; -o into a directory that
    does not exist is a usage error naming it, and leaves no partial page behind."""
    def profile(output):
        return subprocess.run([sys.executable, "-m", "sparktimely.profile", str(logdir), "-o",
                               str(output)], capture_output=True, text=True, timeout=60)
    (tmp_path / "out").mkdir()
    done = profile(tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sparktimely.profile: wrote {tmp_path / 'out' / 'profile.html'}"
    assert os.listdir(tmp_path / "out") == ["profile.html"]
    failed = profile(tmp_path / "nowhere" / "page.html")
    assert failed.returncode == 2 and failed.stderr.splitlines()[1:] == [
        f"{PROG}: error: cannot write {tmp_path / 'nowhere' / 'page.html'}: there is no "
        f"directory {tmp_path / 'nowhere'}"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_without_graphviz_the_page_shows_the_dot_text_and_how_to_install_it(logdir, monkeypatch,
                                                                             tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    from sparktimely.logging import read_log_directory
    page = render_report(read_log_directory(logdir))
    parse(page)
    assert "apt-get install graphviz" in page
    assert "<pre>digraph dataflow {" in page and "&quot;op0&quot;" in page


@pytest.mark.skipif(not has_graphviz(), reason="Graphviz's dot is not installed "
                                               "(apt-get install graphviz)")
def test_with_graphviz_the_page_embeds_the_picture(logdir):
    from sparktimely.logging import read_log_directory
    page = render_report(read_log_directory(logdir))
    picture = page.split("<h2>Dataflow</h2>")[1].split("<h2>")[0]
    assert '<div class="picture"><svg' in picture and "<?xml" not in picture
    assert "ToStream" in picture and "3,000 records" in picture


def test_a_long_timeline_is_drawn_in_intervals_showing_where_the_time_went():
    """Each 1000 ns, one of three operators runs for 600 ns in a step of 800 ns (100 of them
    communicating), then the worker parks for 150 ns: every interval of the timeline shows
    each operator 20%, progress 10%, communication 10%, parked 15%, other 5%."""
    periods = COLUMNS * 111                     # more than EXACT_INTERVALS; 111 per column
    assert periods > EXACT_INTERVALS
    events = [OperatesEvent(0, 0, op, (0, op), f"Op{op}", "d") for op in range(3)]
    for i in range(periods):
        at = 1000 * i
        events += [ScheduleEvent(at, 0, i % 3, True), ScheduleEvent(at + 600, 0, i % 3, False),
                   StepsEvent(at + 800, 0, 1, 800, 100, 0), ParkEvent(at + 800, 0, True, None),
                   ParkEvent(at + 950, 0, False, None)]
    events.append(ShutdownEvent(1000 * periods, 0, 0))
    page = render_report(LogDirectory({0: {"epoch_ns": 0}}, events))
    parse(page)
    timeline = page.split("<h2>Timeline</h2>")[1]
    columns = re.findall(r"<g><title>worker 0, ([\d.,]+)-([\d.,]+) ms: ([^<]*)</title>", timeline)
    assert len(columns) == COLUMNS
    assert timeline.count("<rect") <= COLUMNS * 8        # not one per scheduling
    for _, _, label in columns:
        shares = dict((name, float(share)) for name, share in
                      re.findall(r"(\w+) ([\d.]+)%", label))
        assert shares == {"Op0": 20.0, "Op1": 20.0, "Op2": 20.0, "progress": 10.0,
                          "communication": 10.0, "parked": 15.0, "other": 5.0}, label
    few = render_report(LogDirectory({0: {"epoch_ns": 0}}, events[:3 + 5 * 50]))
    assert few.split("<h2>Timeline</h2>")[1].count("<rect") == 50 + 50   # each run and park


def test_a_long_timeline_of_a_worker_that_never_parks_names_only_the_parts_it_had(tmp_path):
    """A long run with no parks and no checkpoints (a busy worker): the intervals show the
    operator and progress only, and ``python -m sparktimely.profile`` writes the page."""
    periods = COLUMNS * 111
    events = [OperatesEvent(0, 0, 0, (0, 0), "Busy", "d")]
    for i in range(periods):
        at = 1000 * i
        events += [ScheduleEvent(at, 0, 0, True), ScheduleEvent(at + 900, 0, 0, False),
                   StepsEvent(at + 1000, 0, 1, 1000, 0, 0)]
    page = render_report(LogDirectory({0: {"epoch_ns": 0}}, events))
    labels = re.findall(r"<g><title>worker 0, [\d.,]+-[\d.,]+ ms: ([^<]*)</title>",
                        page.split("<h2>Timeline</h2>")[1])
    assert len(labels) == COLUMNS
    assert all(label == "Busy 90.0%, progress 10.0%" for label in labels[1:-1]), labels


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_many_dataflows_of_one_shape_are_drawn_once_counting_them_all(tmp_path, workers):
    """A query dataflow per round (seed 003's program): the picture draws the first of six
    alike dataflows for all of them, its operators' runs and records being their sums, and
    the dataflow of another shape as it is."""
    def job(worker):
        log_to_directory(worker, tmp_path)
        worker.dataflow(lambda scope: scope.to_stream(range(10)).probe(), name="other")
        for q in range(6):
            mine = list(range(q + 1)) if worker.index == 0 else []
            worker.dataflow(lambda scope: scope.to_stream(mine).exchange(lambda x: x)
                            .map(str).probe(), name=f"q-{q}")
            worker.run()
    st.execute(job, workers=workers)
    logs = read_log_directory(tmp_path)
    summary = summarize(logs.events)
    from sparktimely.logging.picture import collapse_alike, graph_of, to_dot
    graph, collapsed = collapse_alike(graph_of(logs), summary)
    assert sorted(graph.scopes[(d,)] for d in {op.addr[0] for op in graph.operators}) == [
        "other", "q-0 and 5 more alike, to q-5"]
    maps = [op for op in summary.operators.values() if op.name == "Map"]
    [shown] = [op.id for op in graph.operators if op.name == "Map"]
    assert collapsed.operators[shown].records_in == sum(range(1, 7)) == \
        sum(op.records_in for op in maps)
    assert collapsed.operators[shown].runs == sum(op.runs for op in maps)
    dot = to_dot(logs)
    assert dot.count("Map\\n") == 1 and "21 in, 21 out" in dot, dot
    rows = parse(render_report(logs)).tables["operators"][1:]
    [map_row] = [row for row in rows if row[1].endswith("Map")]
    assert map_row[2] == "q-0 and 5 more alike, to q-5" and map_row[6:] == ["21", "21"], rows


def test_a_picture_graphviz_cannot_draw_in_time_is_shown_as_dot_text(logdir, monkeypatch):
    from sparktimely.logging import picture
    if not has_graphviz():
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    monkeypatch.setattr(picture, "DOT_SECONDS", 1e-9)
    page = render_report(read_log_directory(logdir))
    parse(page)
    assert "Graphviz&#x27;s dot did not lay out the picture within 1e-09 s" in page, page[:2000]
    assert "<pre>digraph dataflow {" in page


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.timeout(180)
@pytest.mark.skipif(_chromium() is None, reason="no headless browser: Chromium is not "
                                                 "installed (apt-get install -y chromium)")
def test_the_page_renders_in_a_headless_browser(logdir, tmp_path):
    path = os.path.join(logdir, "profile.html")
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "sparktimely.profile", str(logdir)], check=True,
                       capture_output=True, timeout=60)
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(browser + ["--dump-dom", f"file://{path}"], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for part in ("<h2>Operators</h2>", "<h2>Timeline</h2>", 'id="operators"', "<svg",
                 "worker 1"):
        assert part in dom.stdout
    shot = tmp_path / "page.png"
    result = subprocess.run(browser + [f"--screenshot={shot}", "--window-size=1280,2000",
                                       f"file://{path}"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1280, 2000)
    assert len(data) > 20_000                    # not a blank page
