"""Shared helpers of the benchmark sections: timing, the one row shape every section returns,
and the tables (plain text for the console, Markdown for RESULTS.md) built from it.

Every section's ``main()`` returns a :class:`Section`: rows of the same shape

    figure | size | unit | sparktimely | <each peer> | <each limit> | ÷ best peer | ÷ <limit> | goal

so the runner can put all of them in one report. A value is a float, or a string saying why
there is none ("missing (pip install -e .[bench])", "failed: ..."): a missing peer shows as
missing, never as an empty cell.
"""
from __future__ import annotations

import bisect
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

Value = Union[float, str, None]

# Units where a smaller figure is better; every other unit is a rate (higher is better).
LOWER_IS_BETTER = {"us", "ms", "s", "ms/iter", "MB", "MiB"}


def median_seconds(run: Callable[[], object], repeat: int = 5) -> float:
    """The median wall time of ``repeat`` calls of ``run``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_rounds(worker, input, probe, rounds: int) -> list[float]:
    """Seconds of each of ``rounds`` rounds: ``input.advance_to(round)``, then stepping
    ``worker`` until ``probe`` has passed ``round``."""
    latencies = []
    for round in range(1, rounds + 1):
        start = time.perf_counter()
        input.advance_to(round)
        while probe.less_than(round):
            worker.step_or_park(None)
        latencies.append(time.perf_counter() - start)
    return latencies


def run_script(script: str, timeout: float = 900) -> object:
    """Run ``script`` in a fresh interpreter; return the JSON of its last printed line, or a
    string saying why it could not run (a missing module is reported as missing)."""
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"failed: timed out after {timeout:.0f} s"
    if run.returncode != 0:
        missing = [line for line in run.stderr.splitlines() if "ModuleNotFoundError" in line]
        if missing:
            module = missing[-1].split("'")[1] if "'" in missing[-1] else "a module"
            return f"missing: {module} (pip install -e .[bench])"
        return "failed: " + (run.stderr.strip().splitlines() or ["?"])[-1][:80]
    return json.loads(run.stdout.strip().splitlines()[-1])


@dataclass
class Goal:
    """``sparktimely <op> value`` (``of`` None), or ``sparktimely / of <op> value`` where ``of``
    names a peer or a limit of the row."""
    op: str                     # ">=" or "<="
    value: float
    of: str | None = None

    def check(self, row: "Row") -> bool | None:
        if not isinstance(row.sparktimely, float):
            return None
        if self.of is None:
            figure = row.sparktimely
        else:
            base = {**row.peers, **row.limits}.get(self.of)
            if not isinstance(base, float) or base == 0:
                return None
            figure = row.sparktimely / base
        return figure >= self.value if self.op == ">=" else figure <= self.value

    def text(self) -> str:
        sign = "≥" if self.op == ">=" else "≤"
        return f"{sign} {self.value:g}" + (f"× {self.of}" if self.of else "")


@dataclass
class Row:
    """One figure at one size: sparktimely's value beside its peers and limits, all measured in
    the same run, in ``unit``."""
    figure: str
    size: str
    unit: str
    sparktimely: Value
    peers: Mapping[str, Value] = field(default_factory=dict)
    limits: Mapping[str, Value] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)

    @property
    def lower_is_better(self) -> bool:
        return self.unit in LOWER_IS_BETTER

    def best_peer(self) -> tuple[str, float] | None:
        numbers = [(v, k) for k, v in self.peers.items() if isinstance(v, float)]
        if not numbers:
            return None
        value, name = (min if self.lower_is_better else max)(numbers)
        return name, value

    def ratio(self, other: Value) -> float | None:
        if isinstance(self.sparktimely, float) and isinstance(other, float) and other:
            return self.sparktimely / other
        return None

    def missed(self) -> list[Goal]:
        return [goal for goal in self.goals if goal.check(self) is False]

    def goal_text(self) -> str:
        marks = {True: " ✓", False: " ✗ MISSED", None: " (n/a)"}
        return "; ".join(goal.text() + marks[goal.check(self)] for goal in self.goals)


QUANTILES = (50, 90, 99, 99.9)


def quantile(values: list[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (the nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def histogram_edges(series: dict[str, list[float]]) -> list[float]:
    """Bin edges shared by every engine's latencies: powers of sqrt(2) from below the
    smallest to above the largest value (a log scale: a tail ten times the median shows).

    >>> histogram_edges({"a": [0.3, 0.9]})
    [0.25, 0.354, 0.5, 0.707, 1.0]
    """
    values = [v for latencies in series.values() for v in latencies if v > 0]
    if not values:
        return []
    step = 2 ** 0.5
    low = 2.0 ** math.floor(math.log2(min(values)))
    edges = [low]
    while edges[-1] <= max(values):
        edges.append(edges[-1] * step)
    return [float(f"{e:.3g}") for e in edges]


def histogram_counts(latencies: list[float], edges: list[float]) -> list[int]:
    """How many of ``latencies`` fall in each bin ``[edges[i], edges[i + 1])``.

    >>> histogram_counts([0.3, 0.3, 0.9], [0.25, 0.354, 0.5, 0.707, 1.0])
    [2, 0, 0, 1]
    """
    counts = [0] * (len(edges) - 1)
    for value in latencies:
        i = bisect.bisect_right(edges, value) - 1
        counts[min(max(i, 0), len(counts) - 1)] += 1
    return counts


@dataclass
class Histogram:
    """The latency distribution of one figure: each engine's latencies (ms) of the same
    updates, measured in the same run."""
    figure: str
    series: dict[str, list[float]]

    def lines(self) -> list[list[str]]:
        """Rows of cells: the quantiles, then each bin's share of the updates (%)."""
        names = [n for n, v in self.series.items() if v]
        rows = [[f"p{q:g}"] + [f"{quantile(self.series[n], q):.3g}" for n in names]
                for q in QUANTILES]
        rows.append(["max"] + [f"{max(self.series[n]):.3g}" for n in names])
        edges = histogram_edges({n: self.series[n] for n in names})
        counts = {n: histogram_counts(self.series[n], edges) for n in names}
        for i in range(len(edges) - 1):
            shares = [100 * counts[n][i] / len(self.series[n]) for n in names]
            if any(shares):
                rows.append([f"{edges[i]:g}-{edges[i + 1]:g}"]
                            + [(f"{s:.1f}% " + "#" * round(s / 4)).rstrip() if s else ""
                               for s in shares])
        return [["ms"] + names] + rows

    def text(self) -> str:
        cells = self.lines()
        widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
        lines = [f"  {self.figure}: latency distribution ({', '.join(f'{n}: {len(v)}' for n, v in self.series.items() if v)} updates)"]
        lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                  for row in cells]
        return "\n".join(lines) + "\n"

    def markdown(self) -> str:
        cells = self.lines()
        lines = [f"\n{self.figure}, latency distribution (quantiles in ms, then the share of "
                 f"updates per bin):\n", "| " + " | ".join(cells[0]) + " |",
                 "|---|" + "---:|" * (len(cells[0]) - 1)]
        lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
        return "\n".join(lines) + "\n"


@dataclass
class Section:
    """A benchmark section: its rows (see :class:`Row`), notes on how they were measured,
    and the latency distributions (:class:`Histogram`) behind its median and p99 rows."""
    title: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    key: str = ""               # short name for the plot and the runner
    histograms: list[Histogram] = field(default_factory=list)

    def peer_names(self) -> list[str]:
        return _ordered(name for row in self.rows for name in row.peers)

    def limit_names(self) -> list[str]:
        return _ordered(name for row in self.rows for name in row.limits)

    def header(self) -> list[str]:
        peers, limits = self.peer_names(), self.limit_names()
        columns = ["figure", "size", "unit", "sparktimely", *peers, *(f"limit: {l}" for l in limits)]
        if peers:
            columns.append("÷ best peer")
        columns += [f"÷ {l}" for l in limits]
        if any(row.goals for row in self.rows):
            columns.append("goal")
        return columns

    def cells(self) -> list[list[str]]:
        peers, limits = self.peer_names(), self.limit_names()
        has_goals = any(row.goals for row in self.rows)
        table = []
        for row in self.rows:
            cells = [row.figure, row.size, row.unit + (" ↓" if row.lower_is_better else " ↑"),
                     fmt(row.sparktimely)]
            cells += [fmt(row.peers.get(p, "")) for p in peers]
            cells += [fmt(row.limits.get(l, "")) for l in limits]
            if peers:
                best = row.best_peer()
                cells.append(_ratio(row.ratio(best[1]) if best else None,
                                    best[0] if best and len(row.peers) > 1 else ""))
            cells += [_ratio(row.ratio(row.limits.get(l))) for l in limits]
            if has_goals:
                cells.append(row.goal_text())
            table.append(cells)
        return table

    def text(self) -> str:
        """The section as an aligned plain-text table (what ``main()`` prints)."""
        cells = [self.header()] + self.cells()
        widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
        lines = [f"\n{self.title}"]
        for n, row in enumerate(cells):
            lines.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines) + "\n" + "".join(h.text() for h in self.histograms)

    def markdown(self) -> str:
        header = self.header()
        lines = [f"### {self.title}\n", "| " + " | ".join(header) + " |",
                 "|" + "|".join("---" if i < 3 else "---:" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in self.cells()]
        if self.notes:
            lines.append("")
            lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n" + "".join(h.markdown() for h in self.histograms)

    def print(self) -> "Section":
        print(self.text(), end="", flush=True)
        return self


def fmt(value: Value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def _ratio(value: float | None, against: str = "") -> str:
    if value is None:
        return ""
    text = f"{value:.2g}" if value < 0.1 else f"{value:.2f}" if value < 10 else f"{value:.1f}"
    return f"{text}x" + (f" ({against})" if against else "")


def _ordered(names) -> list[str]:
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault(name, None)
    return list(seen)


def batch_source(scope, batch, count: int):
    """A stream of ``count`` copies of ``batch`` at time 0, one per scheduling, as a live
    source feeds a dataflow (so sending overlaps with what happens downstream)."""
    import sparktimely as st

    def ctor(capability, info):
        again = scope.activator_for(info.address).activate
        sent = 0

        def logic(output):
            nonlocal sent
            if sent < count:
                output.give_at(capability, batch)
                sent += 1
            if sent < count:
                again()
            else:
                capability.drop()
        return logic
    return st.source(scope, "Batches", ctor)

