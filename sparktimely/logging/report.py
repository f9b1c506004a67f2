"""The profile report: one self-contained HTML page from a log directory.

``python -m sparktimely.profile LOGDIR`` (see :func:`main`) reads the logs that
:func:`~sparktimely.logging.files.log_to_directory` wrote and writes ``LOGDIR/profile.html``:
the dataflow picture annotated with time and records (SVG when Graphviz is installed, the
DOT text otherwise), a table of operators by time spent, a table of workers (busy, parked),
the records that crossed between workers (what stayed on a worker apart), and a timeline per
worker of which operator ran when. The page has no scripts and loads nothing from elsewhere.

>>> import os, tempfile, sparktimely as st
>>> from sparktimely.logging import log_to_directory
>>> directory = tempfile.mkdtemp()
>>> def job(worker):
...     log_to_directory(worker, directory)
...     worker.dataflow(lambda scope: scope.to_stream(range(100)).map(str).probe())
>>> _ = st.execute(job, workers=2)
>>> path = write_report(directory)
>>> page = open(path).read()
>>> "<h2>Operators</h2>" in page and "Map" in page
True
"""
from __future__ import annotations

import argparse
import html
import os
import sys
import zlib
from typing import Any, Sequence

from .events import ChannelsEvent, MessagesEvent
from .files import DamagedLog, LogDirectory, read_log_directory
from .picture import GraphvizMissing, collapse_alike, dot_to, graph_of, to_dot
from .summary import Summary, summarize

TIMELINE_WIDTH = 1100
"""Pixels of the timeline's time axis."""

EXACT_INTERVALS = 4000
"""Up to this many schedulings per worker the timeline draws each; beyond, it draws the run
in :data:`COLUMNS` intervals, each a column showing where the worker's time went in it."""

COLUMNS = 110
"""Intervals of a long run's timeline (10 pixels each)."""

_PART_COLORS = {"progress": "#666", "communication": "#9b59b6", "checkpoints": "#e67e22",
                "parked": "#ccc", "other": "#fff"}

_STYLE = """
body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
th { background: #f3f3f3; } td.name, th.name { text-align: left; }
.picture svg { max-width: 100%; height: auto; }
.note { color: #666; font-size: 13px; }
pre { background: #f7f7f7; padding: 8px; font-size: 12px; overflow-x: auto; }
"""


def _color(operator: int) -> str:
    """A stable, distinguishable colour per operator id."""
    hue = (zlib.crc32(str(operator).encode()) % 360)
    return f"hsl({hue}, 65%, 55%)"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f}"


def _picture(logs: LogDirectory, summary: Summary) -> str:
    dot = to_dot(graph_of(logs), summary)
    try:
        svg = dot_to(dot, "svg").decode()
        return f'<div class="picture">{svg[svg.index("<svg"):]}</div>'
    except (GraphvizMissing, RuntimeError) as problem:   # not installed, failed, too slow
        return (f'<p class="note">{html.escape(str(problem))}. The picture as DOT text:</p>'
                f"<pre>{html.escape(dot)}</pre>")


def _operators_table(logs: LogDirectory, summary: Summary) -> str:
    """A row per operator, busiest first; dataflows of one shape share rows, as in the
    picture (:func:`~sparktimely.logging.picture.collapse_alike`)."""
    graph, collapsed = collapse_alike(graph_of(logs), summary)
    assert collapsed is not None
    scopes = {op.id: graph.scopes.get(op.addr[:1], "") + op.scope.partition("/")[1]
              + op.scope.partition("/")[2] for op in graph.operators}
    total = summary.total_busy_ns() or 1
    rows = []
    shown = [collapsed.operators[i] for i in scopes if i in collapsed.operators]
    for op in sorted(shown, key=lambda op: (-op.busy_ns, op.id)):
        rows.append(
            f'<tr><td>{op.id}</td><td class="name"><span style="color:{_color(op.id)}">'
            f'&#9632;</span> {html.escape(op.name)}</td>'
            f'<td class="name">{html.escape(scopes.get(op.id, ""))}</td>'
            f"<td>{op.runs:,}</td><td>{_ms(op.busy_ns)}</td>"
            f"<td>{100 * op.busy_ns / total:.1f}%</td>"
            f"<td>{op.records_in:,}</td><td>{op.records_out:,}</td></tr>")
    return ('<table id="operators"><tr><th>id</th><th class="name">operator</th>'
            '<th class="name">scope</th><th>runs</th><th>ms</th><th>share</th>'
            "<th>records in</th><th>records out</th></tr>" + "".join(rows) + "</table>")


def _workers_table(logs: LogDirectory, summary: Summary) -> str:
    rows = []
    for index in sorted(summary.workers):
        worker = summary.workers[index]
        meta = logs.workers.get(index, {})
        span = max(worker.logged_ns, 1)
        parts = (worker.busy_ns, worker.progress_ns, worker.communication_ns,
                 worker.checkpoint_ns, worker.parked_ns, worker.other_ns)
        rows.append(
            f"<tr><td>{index}</td><td class=\"name\">{html.escape(str(meta.get('host', '')))}"
            f"</td><td>{meta.get('pid', '')}</td><td>{_ms(worker.logged_ns)}</td>"
            + "".join(f"<td>{_ms(part)}</td><td>{100 * part / span:.1f}%</td>"
                      for part in parts) + f"<td>{worker.steps:,}</td></tr>")
    head = "".join(f"<th>{part} ms</th><th>%</th>" for part in _PARTS)
    return ('<table id="workers"><tr><th>worker</th><th class="name">host</th><th>pid</th>'
            f"<th>logged ms</th>{head}<th>steps</th></tr>" + "".join(rows) + "</table>")


_PARTS = ("operators", "progress", "communication", "checkpoints", "parked", "other")
"""Where a worker's logged time went, in the order the workers table shows it."""


def _traffic_table(logs: LogDirectory) -> str:
    """Records that crossed from worker to worker (by exchanges and broadcasts), and apart
    from them what stayed on its worker: routed to itself by an exchange, or passed along a
    pipeline (which never leaves its worker)."""
    pacts = {event.id: event.pact for event in logs.events if type(event) is ChannelsEvent}
    crossed: dict[tuple[int, int], int] = {}
    routed: dict[int, int] = {}
    piped: dict[int, int] = {}
    for event in logs.events:
        if type(event) is MessagesEvent and event.is_send:
            source, target = event.source, event.target
            if source != target:
                crossed[source, target] = crossed.get((source, target), 0) + event.length
            else:
                stayed = piped if pacts.get(event.channel) == "Pipeline" else routed
                stayed[source] = stayed.get(source, 0) + event.length
    workers = sorted(logs.workers)
    head = "".join(f"<th>to {w}</th>" for w in workers)
    rows = "".join(
        f"<tr><th>from {s}</th>"
        + "".join(f"<td>{crossed.get((s, t), 0):,}</td>" if s != t else "<td>&#8212;</td>"
                  for t in workers)
        + f"<td>{sum(crossed.get((s, t), 0) for t in workers):,}</td>"
        f"<td>{routed.get(s, 0):,}</td><td>{piped.get(s, 0):,}</td></tr>"
        for s in workers)
    return (f'<table id="traffic"><tr><th></th>{head}<th>to other workers</th>'
            f"<th>routed to itself</th><th>along pipelines</th></tr>{rows}</table>")


def _timeline(logs: LogDirectory, summary: Summary) -> str:
    names = {op.id: op.name for op in summary.operators.values()}
    lanes = sorted(summary.workers)
    if not lanes:
        return '<p class="note">No events.</p>'
    offsets = {w: logs.wall_offset(w) for w in lanes}
    start = min(summary.workers[w].first_ns + offsets[w] for w in lanes)
    end = max(summary.workers[w].last_ns + offsets[w] for w in lanes)
    span = max(end - start, 1)
    scale = TIMELINE_WIDTH / span
    left, lane_height = 70, 26
    height = lane_height * len(lanes) + 30
    long = any(len(summary.intervals.get(w, [])) > EXACT_INTERVALS for w in lanes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + TIMELINE_WIDTH + 50}" '
             f'height="{height}" font-family="Helvetica" font-size="11">']
    for row, worker in enumerate(lanes):
        y = row * lane_height + 4
        parts.append(f'<text x="4" y="{y + 15}">worker {worker}</text>')
        shift = offsets[worker] - start
        if long:
            parts += _columns(summary, worker, shift, span, names, left, y)
            continue
        for begin, stop in summary.parks.get(worker, []):
            x = left + (begin + shift) * scale
            width = max((stop - begin) * scale, 0.5)
            parts.append(f'<rect x="{x:.1f}" y="{y + 18}" width="{width:.1f}" height="3" '
                         f'fill="#ccc"><title>parked {_ms(stop - begin)} ms</title></rect>')
        for begin, stop, operator in summary.intervals.get(worker, []):
            parts.append(f'<rect x="{left + (begin + shift) * scale:.1f}" y="{y}" '
                         f'width="{max((stop - begin) * scale, 0.5):.1f}" height="16" '
                         f'fill="{_color(operator)}"><title>{html.escape(names.get(operator, ""))}'
                         f" (operator {operator}): {_ms(stop - begin)} ms</title></rect>")
    axis = lane_height * len(lanes) + 20
    for tick in range(6):
        x = left + tick * TIMELINE_WIDTH / 5
        parts.append(f'<text x="{x:.0f}" y="{axis}" text-anchor="middle">'
                     f"{_ms(tick * span / 5)} ms</text>")
    parts.append("</svg>")
    note = ("Which operator each worker ran when (grey: parked, waiting for work)."
            if not long else
            f"The run in {COLUMNS} intervals: each column shows where a worker's time went "
            f"in it, from the bottom: operators (in their colours, the busiest first), "
            f"progress (dark grey), communication (purple), checkpoints (orange), parked "
            f"(light grey), other (white). Hover over a column for its numbers.")
    return (f'<p class="note">{note} Workers are aligned by their wall clocks.</p>'
            + "".join(parts))


def _shares(summary: Summary, worker: int, shift: int, span: int) -> list[dict]:
    """Per interval of the run (:data:`COLUMNS` of them), the nanoseconds of each part of
    ``worker``'s time in it: operator ids, and "progress", "communication",
    "checkpoints", "parked", "other" (as the workers table, interval by interval)."""
    width = span / COLUMNS
    columns: list[dict] = [dict.fromkeys(_PARTS[1:], 0) for _ in range(COLUMNS)]

    def spread(begin: int, stop: int, key: Any) -> None:
        begin, stop = begin + shift, stop + shift
        first, last = int(begin // width), min(int(stop // width), COLUMNS - 1)
        for column in range(max(first, 0), last + 1):
            overlap = min(stop, (column + 1) * width) - max(begin, column * width)
            if overlap > 0:
                columns[column][key] = columns[column].get(key, 0) + overlap
    for begin, stop, operator in summary.intervals.get(worker, []):
        spread(begin, stop, operator)
    for begin, stop in summary.parks.get(worker, []):
        spread(begin, stop, "parked")
    stepping = [0.0] * COLUMNS
    for time, step_ns, communication_ns, checkpoint_ns in summary.steps.get(worker, []):
        at = min(max(int((time + shift) // width), 0), COLUMNS - 1)
        stepping[at] += step_ns - communication_ns - checkpoint_ns
        for key, ns in (("communication", communication_ns), ("checkpoints", checkpoint_ns)):
            columns[at][key] = columns[at].get(key, 0) + ns
    for column, rest in zip(columns, stepping):
        busy = sum(ns for key, ns in column.items() if isinstance(key, int))
        column["progress"] = max(rest - busy, 0)
        column["other"] = max(width - sum(column.values()), 0)
    return columns


def _columns(summary: Summary, worker: int, shift: int, span: int, names: dict[int, str],
             left: int, y: int) -> list[str]:
    """One lane of a long run's timeline: a column per interval (:func:`_shares`)."""
    step = TIMELINE_WIDTH / COLUMNS
    width = span / COLUMNS
    drawn = []
    for index, column in enumerate(_shares(summary, worker, shift, span)):
        total = sum(column.values()) or 1
        ordered: list[int | str] = sorted((key for key in column if isinstance(key, int)),
                                          key=lambda key: -column[key])
        ordered += _PARTS[1:]
        label = ", ".join(
            f"{html.escape(names.get(key, f'operator {key}')) if isinstance(key, int) else key}"
            f" {100 * column[key] / total:.1f}%" for key in ordered if column[key] > 0)
        x, bottom = left + index * step, y + 16.0
        bars = []
        for key in ordered:
            size = 16 * column[key] / total
            if size <= 0:
                continue
            bottom -= size
            color = _color(key) if isinstance(key, int) else _PART_COLORS[key]
            bars.append(f'<rect x="{x:.1f}" y="{bottom:.2f}" width="{step - 1:.1f}" '
                        f'height="{size:.2f}" fill="{color}"/>')
        drawn.append(f'<g><title>worker {worker}, {_ms(index * width)}-'
                     f'{_ms((index + 1) * width)} ms: {label}</title>'
                     f'<rect x="{x:.1f}" y="{y}" width="{step - 1:.1f}" height="16" '
                     f'fill="none" stroke="#eee"/>{"".join(bars)}</g>')
    return drawn


def render_report(logs: LogDirectory, title: str = "sparktimely profile") -> str:
    """The report's HTML for ``logs``.

    >>> page = render_report(LogDirectory())
    >>> page.startswith("<!DOCTYPE html>") and "No events." in page
    True
    """
    summary = summarize(logs.events)
    spans = [w.last_ns - w.first_ns for w in summary.workers.values()]
    hosts = sorted({str(meta.get("host", "")) for meta in logs.workers.values()})
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
        f"</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="note">{len(logs.workers)} worker(s) on {", ".join(map(html.escape, hosts))}'
        f"; longest worker log {_ms(max(spans, default=0))} ms; "
        f"{_ms(summary.total_busy_ns())} ms in operators over all workers.</p>"
        f"<h2>Dataflow</h2>{_picture(logs, summary)}"
        f"<h2>Operators</h2>{_operators_table(logs, summary)}"
        f"<h2>Workers</h2>"
        f'<p class="note">Where each worker\'s logged time went: in operators\' logic; in '
        f"the rest of its steps (progress: tracking frontiers, scheduling); taking in and "
        f"sending out messages (communication); taking epoch checkpoints (checkpoints); "
        f"waiting for work (parked); and outside "
        f"steps (other: the program's own code between them, building dataflows, writing "
        f"logs). The parts add up to the logged time.</p>{_workers_table(logs, summary)}"
        f"<h2>Records sent between workers</h2>"
        f'<p class="note">Records that crossed from one worker to another (exchanges, '
        f"broadcasts). Records that stayed on their worker are counted apart: routed to it "
        f"by an exchange, or passed along a pipeline.</p>{_traffic_table(logs)}"
        f"<h2>Timeline</h2>{_timeline(logs, summary)}"
        "</body></html>\n")


def write_report(directory: str | os.PathLike, output: str | os.PathLike | None = None) -> str:
    """Read the logs in ``directory`` and write the report to ``output`` (default
    ``directory/profile.html``; an existing directory: ``profile.html`` in it); returns its
    path.

    >>> import tempfile
    >>> write_report(tempfile.mkdtemp())
    Traceback (most recent call last):
    FileNotFoundError: no sparktimely logs (worker-N.json) in ...
    """
    logs = read_log_directory(directory)
    path = os.fspath(output if output is not None else directory)
    if os.path.isdir(path):
        path = os.path.join(path, "profile.html")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path}: there is no directory {folder}")
    page = render_report(logs, f"sparktimely profile of {os.path.abspath(directory)}")
    partial = f"{path}.partial"
    try:
        with open(partial, "w") as file:
            file.write(page)
        os.replace(partial, path)  # a failed or killed run leaves no empty page behind
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparktimely.profile LOGDIR [-o FILE]``: write the report; returns the
    exit status. Errors follow argparse's convention: an argument that names no logs or no
    directory to write in is a usage error (the usage, ``prog: error: ...``, SystemExit 2);
    a damaged log, or a page that cannot be written, is ``prog: error: ...`` and status 1.

    >>> import tempfile
    >>> main([tempfile.mkdtemp()])
    Traceback (most recent call last):
    SystemExit: 2
    """
    parser = argparse.ArgumentParser(
        prog="python -m sparktimely.profile",
        description="Write an HTML profile of a sparktimely run from the logs its workers "
                    "wrote (sparktimely.logging.log_to_directory).")
    parser.add_argument("logdir", help="the directory the workers logged to")
    parser.add_argument("-o", "--output", help="where to write the page "
                                               "(default: LOGDIR/profile.html)")
    options = parser.parse_args(argv)
    try:
        path = write_report(options.logdir, options.output)
    except FileNotFoundError as error:       # no logs there, or nowhere to write the page
        parser.error(str(error))
    except (OSError, DamagedLog) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(f"sparktimely.profile: wrote {path}")
    return 0


__all__ = ["main", "render_report", "write_report"]
