"""Test-suite plumbing: a wall-clock limit on every test (a hang is a bug), a check that no
test leaves shared-memory segments or processes of this run behind, and the worker matrix.

``@pytest.mark.timeout(seconds)`` sets a test's limit; others get DEFAULT_TIMEOUT. The limit
is enforced with SIGALRM in the main thread, so a stuck test fails with a traceback instead
of stalling the run. The leak check counts only this run's segments (see ``segment_leaks``):
other programs' segments in /dev/shm are none of its business. A test that leaves a process
it started running fails, and the process is killed, so that no later test fails for it.

The ``run`` fixture runs a job at 1, 2 and 3 workers (the ``workers`` fixture), in this
process, in a seeded random interleaving (:func:`sparktimely.testing.execute_in_process`):
``run(job)`` returns the per-worker results. The seed comes from the test's name, so every run
of a test is the same; ``SPARKTIMELY_TEST_SEED=N`` replays seed N (a failing test prints its
seed), and ``SPARKTIMELY_TEST_SEEDS=K`` runs every matrix test with K seeds.
"""
from __future__ import annotations

import os
import signal
import zlib

import psutil
import pytest
from hypothesis import HealthCheck, settings
from segment_leaks import SegmentWatch, tag_this_run

from sparktimely.testing import execute_in_process

# On a loaded machine hypothesis may find its own data generation too slow and fail a
# property test for it; the properties, not the speed of generating examples, are tested.
settings.register_profile("suite", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

DEFAULT_TIMEOUT = 120
WORKER_COUNTS = (1, 2, 3)
RUN_PREFIX = tag_this_run()          # before any test starts a process or a Spark session


def pytest_generate_tests(metafunc):
    if "interleaving" in metafunc.fixturenames:
        replay = os.environ.get("SPARKTIMELY_TEST_SEED")
        if replay is not None:
            seeds = [int(replay)]
        else:
            base = zlib.crc32(metafunc.definition.nodeid.encode())
            seeds = [base + i for i in range(int(os.environ.get("SPARKTIMELY_TEST_SEEDS", "1")))]
        metafunc.parametrize("interleaving", seeds, ids=[f"seed{s}" for s in seeds])


@pytest.fixture(params=WORKER_COUNTS, ids=[f"{n}w" for n in WORKER_COUNTS])
def workers(request) -> int:
    """How many workers the test runs (1, 2 and 3)."""
    return request.param


@pytest.fixture
def run(workers, interleaving, request):
    """``run(job, **kwargs)``: ``job(worker)`` on ``workers`` in-process workers, stepped in an
    order drawn from the seed ``interleaving``; returns the results by worker index."""
    seed = interleaving
    request.node.stash[_SEED] = seed

    def run_job(job, **kwargs):
        return execute_in_process(job, workers, seed, **kwargs)
    run_job.workers = workers
    run_job.seed = seed
    return run_job


_SEED = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = item.stash.get(_SEED, None)
    if report.failed and seed is not None:
        report.sections.append(("sparktimely", f"in-process seed {seed}: replay with "
                                               f"SPARKTIMELY_TEST_SEED={seed}"))


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


@pytest.fixture(autouse=True)
def no_leftover_segments():
    """Fail a test that leaves segments of this run behind."""
    watch = SegmentWatch(RUN_PREFIX)
    yield
    leftovers = watch.leftovers()
    if leftovers:
        watch.clean()
        pytest.fail(f"segments left behind: {leftovers}")


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Fail a test that leaves a process it started running (after a grace of a few seconds
    for processes on their way out) and kill what is left. The processes of wider-scoped
    fixtures (a Spark JVM) and what they start (Spark's Python workers) are not the test's."""
    me = psutil.Process()
    before = me.children(recursive=True)
    yield
    theirs = {process.pid for process in before}
    for process in before:
        theirs.update(child.pid for child in _descendants(process))
    new = [process for process in me.children(recursive=True) if process.pid not in theirs]
    if not new:
        return
    _, alive = psutil.wait_procs(new, timeout=5)
    if alive:
        for process in alive:
            _kill(process)
        psutil.wait_procs(alive, timeout=5)
        pytest.fail(f"processes left running: {alive}")


def _descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _kill(process: psutil.Process) -> None:
    try:
        process.kill()
    except psutil.NoSuchProcess:
        pass
