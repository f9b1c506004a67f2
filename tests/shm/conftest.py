"""Fixtures for the shared-memory transport tests: bounded child processes and a leak check."""
from __future__ import annotations

import pytest
from shm_helpers import Procs, shm_entries


@pytest.fixture(autouse=True)
def no_leftover_segments():
    """Fail a test that leaves sparktimely* segments behind."""
    before = shm_entries()
    yield
    leftovers = shm_entries() - before
    assert not leftovers, f"segments left behind: {sorted(leftovers)}"


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.kill_all()
