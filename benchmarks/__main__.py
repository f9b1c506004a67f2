"""Run every benchmark in one go and write benchmarks/RESULTS.md and benchmarks/results.png.

    python -m benchmarks [--quick] [--only bench_core,bench_wordcount]      (or scripts/bench)

Each section is one ``bench_*`` module whose ``main()`` prints its tables and returns them as
:class:`benchmarks._util.Section` objects (one row shape for all: figure, size, sparktimely,
each peer, each limit, the ratios, the goal). RESULTS.md gets one Markdown table per section,
headed by the date, the machine's core count and memory and the Python version, so every ratio
in the report comes from figures measured in the same run. ``--quick`` runs one small size of
each section (a smoke test; its report says so). A section that fails is reported as failed.
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import psutil

from sparktimely._compiled import compiled_modules

from ._util import Histogram, Section, fmt, histogram_counts, histogram_edges, quantile

HERE = Path(__file__).resolve().parent
SECTIONS = ["bench_core", "bench_operators", "bench_shm", "bench_exchange", "bench_sockets",
            "bench_wordcount", "bench_pagerank", "bench_logging", "bench_differential",
            "bench_recovery", "bench_scaling", "bench_windows", "bench_coldstart"]
COLORS_OURS = ["#d62728", "#ff7f0e", "#e6550d", "#fdae6b", "#9e0142", "#f768a1"]
COLORS_PEERS = ["#1f77b4", "#17becf", "#2ca02c", "#7f7f7f", "#9467bd", "#bcbd22", "#393b79"]


def run_section(name: str, quick: bool) -> tuple[list[Section], str | None, float]:
    """Run one module's ``main()``; return its sections, the error if it failed, and seconds."""
    started = time.perf_counter()
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        sections = module.main(quick=quick)
        error = None
    except Exception:                                    # reported in RESULTS.md, not hidden
        traceback.print_exc()
        sections, error = [], traceback.format_exc().strip().splitlines()[-1]
    return sections, error, time.perf_counter() - started


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return (f"{os.cpu_count()} cores, {memory:.1f} GiB memory, {platform.machine()}, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


def build() -> str:
    """How the sparktimely that ran was built: how many of its modules ran compiled."""
    compiled = compiled_modules()
    if not compiled:
        return ("pure Python (no module compiled: installed without a C compiler, or "
                "SPARKTIMELY_PURE_PYTHON=1)")
    return (f"{len(compiled)} modules compiled with Cython (setup.py: the progress tracker, "
            f"the dataflow's scheduling, the transports between workers, hashing, "
            f"differential's inputs, traces and operators), the rest pure Python")


def _series(section: Section, unit: str) -> tuple[list[str], dict[str, dict[str, float]], set]:
    """(sizes, engine -> size -> value, sparktimely engine names) of the rows in ``unit``."""
    sizes: list[str] = []
    series: dict[str, dict[str, float]] = {}
    ours = set()
    for row in section.rows:
        if row.unit != unit:
            continue
        if row.size not in sizes:
            sizes.append(row.size)
        if isinstance(row.sparktimely, float):
            series.setdefault(row.figure, {})[row.size] = row.sparktimely
            ours.add(row.figure)
        for peer, value in row.peers.items():
            if isinstance(value, float):
                series.setdefault(peer, {}).setdefault(row.size, value)
    return sizes, series, ours


def plot(sections: dict[str, Section], path: Path) -> bool:
    """Grouped bars (log scale) of wordcount and PageRank across sizes, sparktimely in warm
    colours, peers in cool ones; then the latency distributions of the sections that have
    them (``Section.histograms``), one panel each, every engine's share of updates per
    latency bin on a log scale. False without matplotlib or without data."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("benchmarks: matplotlib missing (pip install -e .[bench]): no plot", file=sys.stderr)
        return False
    panels = [(key, unit, label) for key, unit, label in
              [("wordcount", "M rec/s", "Wordcount: million records/s (higher is better)"),
               ("pagerank", "ms/iter", "PageRank: ms per iteration (lower is better)"),
               ("scaling", "us", "Scaling out: us per empty progress round at 1-4 workers, "
                                 "shared memory and sockets (lower is better)")]
              if key in sections]
    histograms = [h for section in sections.values() for h in section.histograms
                  if sum(bool(v) for v in h.series.values())]
    if not panels and not histograms:
        return False
    rows = len(panels) + len(histograms)
    figure, axes = plt.subplots(rows, 1, figsize=(11, 5 * len(panels) + 3.5 * len(histograms)),
                                squeeze=False)
    for axis, histogram in zip(axes[len(panels):, 0], histograms):
        plot_histogram(axis, histogram)
    for axis, (key, unit, label) in zip(axes[:, 0], panels):
        sizes, series, ours = _series(sections[key], unit)
        names = [n for n in series if n in ours] + [n for n in series if n not in ours]
        width = 0.85 / max(len(names), 1)
        ours_colors, peer_colors = iter(COLORS_OURS * 3), iter(COLORS_PEERS * 3)
        for i, name in enumerate(names):
            mine = name in ours
            xs = [s + (i - (len(names) - 1) / 2) * width for s in range(len(sizes))]
            values = [series[name].get(size, 0) for size in sizes]
            bars = axis.bar(xs, values, width, label=name,
                            color=next(ours_colors) if mine else next(peer_colors),
                            edgecolor="black" if mine else "none", linewidth=0.8 if mine else 0)
            for bar, value in zip(bars, values):
                if value:
                    axis.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, value),
                                  ha="center", va="bottom", fontsize=6, rotation=90,
                                  xytext=(0, 2), textcoords="offset points")
        axis.set_yscale("log")
        axis.set_xticks(range(len(sizes)), sizes)
        axis.set_ylabel(unit + " (log scale)")
        axis.set_title(label)
        axis.grid(axis="y", which="both", alpha=0.25)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.suptitle(f"sparktimely (warm colours, outlined) vs peers (cool colours): {machine()}",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return True


def plot_histogram(axis, histogram: Histogram) -> None:
    """One figure's latency distribution: each engine's share of updates per bin (the bins
    of the text tables), sparktimely in a warm colour, peers in cool ones, the median and
    p99 marked."""
    from matplotlib.ticker import FormatStrFormatter
    series = {name: values for name, values in histogram.series.items() if values}
    edges = histogram_edges(series)
    peer_colors = iter(COLORS_PEERS * 3)
    for name, values in series.items():
        shares = [100 * c / len(values) for c in histogram_counts(values, edges)]
        color = COLORS_OURS[0] if name == "sparktimely" else next(peer_colors)
        axis.stairs(shares, edges, label=name, color=color, linewidth=1.6)
        for q, style in ((50, "-"), (99, ":")):
            axis.axvline(quantile(values, q), color=color, linestyle=style, linewidth=0.9)
    axis.set_xscale("log")
    axis.set_yscale("log")                  # the tail's few percent show beside the bulk
    axis.set_ylim(bottom=0.05)
    for ticks in (axis.xaxis, axis.yaxis):
        ticks.set_major_formatter(FormatStrFormatter("%g"))
        ticks.set_minor_formatter(FormatStrFormatter("%g"))
    axis.set_xlabel("latency, ms (log scale); lines: median (solid), p99 (dotted)")
    axis.set_ylabel("% of updates (log scale)")
    axis.set_title(f"{histogram.figure}: latency distribution")
    axis.grid(alpha=0.25)
    axis.legend(fontsize=7, loc="upper right")


def report(started: str, command: str, seconds: float, sections: list[Section],
           failures: dict[str, str], has_plot: bool, quick: bool) -> str:
    lines = [
        "# Benchmark results\n",
        f"- measured: {started}, in {seconds / 60:.1f} minutes",
        f"- machine: {machine()}",
        f"- build: {build()}",
        f"- command: `{command}`" + (" (quick: smallest sizes only, a smoke test)" if quick else ""),
        "- every figure is a median of several runs (see each table's notes); every ratio in a "
        "row comes from figures of this one run. `↑` higher is better, `↓` lower is better. "
        "`÷ best peer` is sparktimely's figure divided by the best peer's in that row (named when "
        "there are several), `÷ <limit>` divided by the limit; `limit` columns are physical or "
        "language limits, not competitors.",
        "- reproduce: `scripts/bench` (sets up .venv, installs the `[bench]` extras: bytewax, "
        "matplotlib; and Pathway 0.33 in `.pwvenv`), or `pip install -e .[bench] && python -m "
        "benchmarks`; one section: "
        "`python -m benchmarks.bench_wordcount` etc. Needs Java for the PySpark peers.\n",
    ]
    if (HERE / "FINDINGS.md").exists():
        lines.append("- why the missed goals are missed, profiled by hand on the code of its date: "
                     "[FINDINGS.md](FINDINGS.md) (a run does not rewrite it)\n")
    if has_plot:
        lines.append("![wordcount and PageRank across sizes](results.png)\n")
    goals = [(section, row, goal) for section in sections for row in section.rows
             for goal in row.goals]
    if goals:
        lines.append("## Goals\n")
        lines.append("| figure | size | sparktimely | goal |\n|---|---|---:|---|")
        for section, row, goal in goals:
            mark = {True: "✓ met", False: "✗ **missed**", None: "n/a"}[goal.check(row)]
            lines.append(f"| {row.figure} | {row.size} | {fmt(row.sparktimely)} {row.unit} | "
                         f"{goal.text()}: {mark} |")
        lines.append("")
    if failures:
        lines.append("## Sections that failed\n")
        lines += [f"- {name}: {error}" for name, error in failures.items()]
        lines.append("")
    lines.append("## Tables\n")
    lines += [section.markdown() for section in sections]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``--quick`` and ``--only`` (sections by name, with or without ``bench_``), checked
    before anything runs: a bad name is an error, not an 18-minute run of the others."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run the benchmarks and rewrite benchmarks/RESULTS.md and results.png.")
    parser.add_argument("--quick", action="store_true",
                        help="one small size of each section (a smoke test)")
    parser.add_argument("--only", metavar="NAMES", type=lambda text: text.split(","),
                        help=f"comma-separated sections to run (of {', '.join(SECTIONS)}); "
                             f"RESULTS.md then holds only these")
    args = parser.parse_args(argv)
    if args.only is not None:
        args.only = [n if n.startswith("bench_") else f"bench_{n}" for n in args.only]
        unknown = [n for n in args.only if n not in SECTIONS]
        if unknown:
            parser.error(f"argument --only: no section {', '.join(unknown)} "
                         f"(choose from {', '.join(SECTIONS)})")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    quick = args.quick
    names = args.only or SECTIONS
    started, clock = time.strftime("%Y-%m-%d %H:%M %Z"), time.perf_counter()
    print(f"benchmarks on {machine()}", flush=True)
    sections, failures = [], {}
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        got, error, seconds = run_section(name, quick)
        sections += got
        if error:
            failures[name] = error
        print(f"=== {name}: {seconds:.0f} s ===", flush=True)
    seconds = time.perf_counter() - clock
    has_plot = plot({s.key: s for s in sections if s.key}, HERE / "results.png")
    command = "python -m benchmarks" + (" " + " ".join(argv) if argv else "")
    (HERE / "RESULTS.md").write_text(report(started, command, seconds, sections, failures,
                                            has_plot, quick))
    missed = [(row.figure, row.size, goal.text()) for s in sections for row in s.rows
              for goal in row.missed()]
    print(f"\nwrote {HERE / 'RESULTS.md'}" + (f" and {HERE / 'results.png'}" if has_plot else "")
          + f" in {seconds / 60:.1f} minutes")
    for figure, size, goal in missed:
        print(f"  goal missed: {figure}, {size}: {goal}")
    for name, error in failures.items():
        print(f"  section failed: {name}: {error}")
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
