"""Helpers for the shared-memory transport tests: bounded child processes, segment listing."""
from __future__ import annotations

import time
import traceback

import multiprocess
import pytest
from multiprocess.connection import wait

from sparktimely.shm import run_prefix, segments

CTX = multiprocess.get_context("fork")


def shm_entries() -> set[str]:
    """This test run's segments, wherever they live (see tests/segment_leaks.py)."""
    return set(segments(run_prefix()))


def _child(conn, target, args):
    try:
        conn.send(("ok", target(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class Procs:
    """Start forked children and collect their return values within a deadline."""

    def __init__(self):
        self.procs = []

    def start(self, target, *args):
        parent, child = CTX.Pipe(duplex=False)
        proc = CTX.Process(target=_child, args=(child, target, args), daemon=True)
        proc.start()
        child.close()
        self.procs.append((proc, parent))
        return proc

    def results(self, timeout: float = 30.0) -> list:
        """Return values in start order; fail at the first error, or if any child is late."""
        deadline = time.monotonic() + timeout
        pending = {conn: i for i, (_, conn) in enumerate(self.procs)}
        out = [None] * len(self.procs)
        while pending:
            ready = wait(list(pending), max(0.0, deadline - time.monotonic()))
            if not ready:
                late = [self.procs[i][0].pid for i in pending.values()]
                pytest.fail(f"children {late} produced no result within {timeout}s")
            for conn in ready:
                i = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except EOFError:  # died without reporting
                    self.procs[i][0].join(5)
                    status, value = "error", f"died with exit code {self.procs[i][0].exitcode}"
                if status != "ok":
                    pytest.fail(f"child {self.procs[i][0].pid} failed:\n{value}")
                out[i] = value
        for proc, _ in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        return out

    def kill_all(self):
        for proc, _ in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
