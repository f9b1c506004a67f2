"""Run every benchmark in one go and write benchmarks/RESULTS.md and results.png.

    python -m benchmarks [--quick]

Each section is one ``bench_*`` module; its table is printed and copied into RESULTS.md,
headed by the machine's core count and memory, so every ratio in the report comes from
figures measured in the same run. ``--quick`` uses the smallest input sizes only.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import platform
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SECTIONS = ["bench_core", "bench_shm", "bench_wordcount", "bench_arrow", "bench_sockets",
            "bench_pagerank"]


def run_section(name: str, quick: bool) -> tuple[str, object]:
    """Run one module's ``main()``; return what it printed and what it returned."""
    buffer = io.StringIO()
    try:
        module = importlib.import_module(f"benchmarks.{name}")
    except ImportError as error:
        return f"{name}: not available ({error})\n", None
    main = getattr(module, "main")
    kwargs = {"quick": True} if quick and "quick" in main.__code__.co_varnames else {}
    with contextlib.redirect_stdout(buffer):
        result = main(**kwargs)
    text = buffer.getvalue()
    print(text, end="", flush=True)
    return text, result


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return (f"{os.cpu_count()} cores, {memory:.0f} GiB memory, {platform.machine()}, "
            f"Python {platform.python_version()}")


def plot(results: dict, path: Path) -> bool:
    """A bar chart of the wordcount rates at the largest size; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = results.get("bench_wordcount") or []
    rows = [r for r in rows if isinstance(r[2], float)]
    if not rows:
        return False
    largest = rows[-1][0]
    rows = [r for r in rows if r[0] == largest]
    figure, axes = plt.subplots(figsize=(8, 0.5 + 0.45 * len(rows)))
    axes.barh([r[1] for r in rows], [r[2] for r in rows],
              color=["tab:orange" if r[1].startswith("sparktimely") else "tab:gray" for r in rows])
    axes.set_xlabel("million records / s (higher is better)")
    axes.set_title(largest.replace("wordcount", "Wordcount,") + ", 10,007 keys")
    axes.invert_yaxis()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    started = time.strftime("%Y-%m-%d %H:%M")
    texts, results = [], {}
    for name in SECTIONS:
        text, result = run_section(name, quick)
        texts.append(text)
        results[name] = result
    has_plot = plot(results, HERE / "results.png")
    report = [f"# Benchmark results\n\nMeasured {started} on {machine()} by "
              f"`python -m benchmarks{' --quick' if quick else ''}`. Every table's figures and "
              f"ratios come from this one run; each figure is a median of several runs.\n"]
    if has_plot:
        report.append("![wordcount](results.png)\n")
    for text in texts:
        report.append("```\n" + text.strip("\n") + "\n```\n")
    (HERE / "RESULTS.md").write_text("\n".join(report))


if __name__ == "__main__":
    main(sys.argv[1:])
