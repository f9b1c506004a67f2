"""Shared helpers of the benchmark sections: timing, the one row shape every section returns,
and the tables (plain text for the console, Markdown for RESULTS.md) built from it.

Every section's ``main()`` returns a :class:`Section`: rows of the same shape

    figure | size | unit | sparktimely | <each peer> | <each limit> | ÷ best peer | ÷ <limit> | goal

so the runner can put all of them in one report. A value is a float, or a string saying why
there is none ("missing (pip install -e .[bench])", "failed: ..."): a missing peer shows as
missing, never as an empty cell.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Union

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
    peers: dict[str, Value] = field(default_factory=dict)
    limits: dict[str, Value] = field(default_factory=dict)
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


@dataclass
class Section:
    """A benchmark section: its rows (see :class:`Row`) and notes on how they were measured."""
    title: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    key: str = ""               # short name for the plot and the runner

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
        return "\n".join(lines) + "\n"

    def markdown(self) -> str:
        header = self.header()
        lines = [f"### {self.title}\n", "| " + " | ".join(header) + " |",
                 "|" + "|".join("---" if i < 3 else "---:" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in self.cells()]
        if self.notes:
            lines.append("")
            lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

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

