"""Shared helpers for the benchmark scripts: timing, medians and table printing."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(run: Callable[[], object], repeat: int = 5) -> float:
    """The median wall time of ``repeat`` calls of ``run``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def print_table(title: str, rows: list[tuple], header: tuple) -> None:
    """Print rows as an aligned plain-text table."""
    cells = [tuple(str(c) for c in header)] + [tuple(_fmt(c) for c in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)
