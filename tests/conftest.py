"""Test-suite plumbing: a wall-clock limit on every test (a hang is a bug).

``@pytest.mark.timeout(seconds)`` sets a test's limit; others get DEFAULT_TIMEOUT. The limit
is enforced with SIGALRM in the main thread, so a stuck test fails with a traceback instead
of stalling the run.
"""
from __future__ import annotations

import signal

import pytest

DEFAULT_TIMEOUT = 120


class TimeLimitExceeded(Exception):
    """Raised inside a test that ran past its time limit."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("timeout")
    seconds = marker.args[0] if marker and marker.args else DEFAULT_TIMEOUT

    def expire(signum, frame):
        raise TimeLimitExceeded(f"{item.nodeid} ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
