"""Fixtures for the shared-memory transport tests: bounded child processes."""
from __future__ import annotations

import pytest
from shm_helpers import Procs


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.kill_all()
