"""The suite's leak check: shared-memory segments this test run made and did not remove.

``tests/conftest.py`` gives the run a segment tag (``$SPARKTIMELY_SHM_TAG``) before anything
starts; every process of the run (forked workers, subprocesses, Spark's Python workers)
inherits it, so the run's segments are exactly those under ``run_prefix()`` and segments of
other programs on the machine (other test runs, other jobs) are never counted.
"""
from __future__ import annotations

import os
import secrets
import time

from sparktimely.shm import run_prefix, segments, sweep_stale

TAG_ENV = "SPARKTIMELY_SHM_TAG"


def tag_this_run() -> str:
    """Give this process and its future children a fresh segment tag; returns the prefix."""
    os.environ[TAG_ENV] = f"t{secrets.token_hex(4)}"
    return run_prefix()


class SegmentWatch:
    """Segments of this run made since ``start`` and still there (after a short grace for
    cleanup that happens asynchronously, such as a janitor sweeping after a killed task)."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or run_prefix()
        self.before = set(segments(self.prefix))

    def leftovers(self, grace: float = 5.0) -> list[str]:
        deadline = time.monotonic() + grace
        while True:
            left = sorted(set(segments(self.prefix)) - self.before)
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.05)

    def clean(self) -> None:
        """Remove leftovers whose creator is gone, so one leak is reported by one test."""
        sweep_stale()


def segments_of(pids) -> list[str]:
    """Names of this run's segments made by any of the processes ``pids``."""
    return sorted(os.path.basename(path) for pid in pids
                  for path in segments(f"{run_prefix()}{pid}-"))
