"""The profile report: ``python -m sparktimely.profile LOGDIR`` on the logs of a real run,
the page's tables against an oracle, the page in a real headless browser (Chromium from the
system packages, when installed), and the page without Graphviz."""
from __future__ import annotations

import html.parser
import os
import shutil
import struct
import subprocess
import sys
from collections import Counter

import pytest

import sparktimely as st
from sparktimely.logging import (LogDirectory, OperatesEvent, ScheduleEvent, has_graphviz,
                                 log_to_directory, render_report)
from sparktimely.logging.report import EXACT_INTERVALS, TIMELINE_WIDTH

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


def test_a_missing_directory_is_named(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sparktimely.profile", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"no sparktimely logs (worker-N.json) in {tmp_path}" in result.stderr


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


def test_a_long_timeline_is_drawn_one_bar_per_pixel_column():
    intervals = 3 * EXACT_INTERVALS
    events = [OperatesEvent(0, 0, op, (0, op), f"Op{op}", "d") for op in range(3)]
    for i in range(intervals):
        events += [ScheduleEvent(1000 * i, 0, i % 3, True),
                   ScheduleEvent(1000 * i + 600, 0, i % 3, False)]
    page = render_report(LogDirectory({0: {"epoch_ns": 0}}, events))
    parse(page)
    timeline = page.split("<h2>Timeline</h2>")[1]
    assert 100 < timeline.count("<rect") <= TIMELINE_WIDTH + 1
    few = render_report(LogDirectory({0: {"epoch_ns": 0}}, events[:3 + 2 * 50]))
    assert few.split("<h2>Timeline</h2>")[1].count("<rect") == 50


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
