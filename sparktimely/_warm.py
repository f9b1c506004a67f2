"""Warming up the process that starts workers, so that a worker's first exchange does not pay
for what that process can do once: load the modules a job needs on first use, make the first
calls into pyarrow's kernels.

A freshly forked worker loads, inside its first exchange, what its job uses for the first time:
pyarrow's group_by engine (``pyarrow.acero``, 10-35 ms in a forked worker on a 2-core VM, about
5 ms in the process before it forks), ``numpy.ma`` (which ``pyarrow.array`` of a numpy array
loads: 14 ms), sparktimely's Arrow differential operators. Loaded before the fork, every worker
inherits them. This happens on two occasions:

- While the process waits for its peers (:func:`start`, from a Spark barrier task taking its
  ``Seat`` until it knows the plan, which takes Spark's ``allGather`` about a second; from a
  hostfile process joining its peers until they have all connected), a thread rehearses the
  Arrow exchange path on a two-row batch, loads ``numpy.ma`` and ``pyarrow.acero`` (and runs a
  two-row ``group_by``) and what earlier jobs' workers loaded. :func:`stop` ends it after the
  step under way (one module's load at most) and is called before anything forks or connects;
  a fork by anyone else waits for the same (``os.register_at_fork``).
- Before a job's workers are forked (:func:`prepare`), the library modules (numpy, pyarrow,
  sparktimely) that the workers of the process's earlier jobs loaded (:func:`learn`) are
  loaded, and if their exchanges sent Arrow batches, the Arrow exchange path is rehearsed
  here, once (the first calls into its kernels, which every fresh worker otherwise makes in
  its first exchange: 3-6 ms of it on a 2-core VM): a program tends to run the same jobs
  again (a long-lived driver; a Spark executor's Python worker, reused from stage to stage).
  A job that needs none of them pays nothing.

And around the fork (:func:`forking`) the process's objects are frozen for the garbage
collector, so that a worker's collections do not copy the pages they sit on.

Nothing here changes what a job computes: modules are loaded, and kernels called, earlier.
"""
from __future__ import annotations

import functools
import gc
import importlib
import os
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

LIBRARIES = ("numpy.", "pyarrow.", "sparktimely.")
"""Prefixes of the modules a worker's loading is learned from (libraries without side effects
on import; a job's own modules are never loaded on its behalf)."""
ARROW_JOBS = ("numpy.ma", "pyarrow.acero")
"""Modules an Arrow job usually loads on first use: loaded whenever there is time to wait."""

_learned: set[str] = set()
_rehearsed = False
_exchanges_arrow = False        # an earlier job's exchanges sent Arrow batches
_thread: threading.Thread | None = None
_stopping = threading.Event()


def learn(modules: Iterable[str], exchanged_arrow: bool = False) -> None:
    """Remember the library modules among ``modules`` (loaded by a job's workers), to load
    them before the next job's workers are forked, and whether that job's exchanges sent
    Arrow batches (``exchanged_arrow``), to rehearse that path before then."""
    global _exchanges_arrow
    _learned.update(name for name in modules if name.startswith(LIBRARIES))
    _exchanges_arrow = _exchanges_arrow or exchanged_arrow


def learned() -> list[str]:
    """What :func:`learn` remembered, sorted.

    >>> from sparktimely import _warm
    >>> _warm.learn(["numpy.linalg", "my_job"])
    >>> "numpy.linalg" in _warm.learned(), "my_job" in _warm.learned()
    (True, False)
    """
    return sorted(_learned)


def loaded_since(before: set[str]) -> list[str]:
    """The library modules loaded in this process that ``before`` (an earlier ``set(sys.modules)``)
    does not hold: what a worker reports for :func:`learn`."""
    return sorted(name for name in set(sys.modules) - before if name.startswith(LIBRARIES))


def prepare() -> None:
    """Before forking workers: end a warm-up under way, then load what earlier jobs' workers
    loaded (and make the first ``group_by`` if that loaded its engine), and rehearse the
    Arrow exchange if their exchanges sent Arrow batches."""
    stop()
    for name in learned():
        _load(name)
    if _exchanges_arrow:
        rehearse()


@contextmanager
def forking() -> Iterator[None]:
    """Around forking workers: the objects this process holds go to the collector's
    permanent generation (``gc.freeze``), so that a worker's collections never walk them. A
    collection writes to every object it visits, and the worker then copies each page it
    writes to (copy on write): a full collection in a fresh worker's first exchange cost it
    about 3 ms of its 12. The process takes its objects back afterwards (unless it had
    frozen objects itself).

    >>> import gc
    >>> from sparktimely import _warm
    >>> with _warm.forking():
    ...     gc.get_freeze_count() > 0
    True
    >>> gc.get_freeze_count()
    0
    """
    frozen = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen:
            gc.unfreeze()


def start() -> None:
    """Warm up in a thread while this process waits for its peers (see the module doc). Does
    nothing if a warm-up is under way or everything is warm already."""
    global _thread
    if _thread is not None:
        return
    steps: list[Callable[[], None]] = [] if _rehearsed else [rehearse]
    steps += [functools.partial(_load, name) for name in ARROW_JOBS + tuple(learned())
              if name not in sys.modules]
    if not steps:
        return
    _stopping.clear()
    _thread = threading.Thread(target=_warm, args=(steps,), name="sparktimely-warm-up",
                               daemon=True)
    _thread.start()


def stop() -> None:
    """End the warm-up under way, if any, once its current step is done."""
    global _thread
    thread = _thread
    if thread is None:
        return
    _stopping.set()
    thread.join()
    _thread = None


def rehearse() -> None:
    """Once per process: split a two-row Arrow batch by a string key and an integer key as an
    exchange does, and put the parts through the Arrow IPC codec both ways."""
    global _rehearsed
    if _rehearsed:
        return
    import pyarrow as pa

    from .dataflow.containers import partition_batch
    from .shm import decode_arrow, encode_arrow
    batch = pa.record_batch({"key": ["a", "bc"], "n": [1, 2]})
    for key in ("key", "n"):
        for part in partition_batch(batch, key, None, 2):
            decode_arrow(b"".join(bytes(buffer) for buffer in encode_arrow(part)))
    _rehearsed = True


def _load(name: str) -> None:
    """Import ``name`` unless loaded (a module that fails to load is left to the job to report);
    after pyarrow's group_by engine, make the first (tiny) ``group_by``."""
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
    except Exception:
        return
    if name == "pyarrow.acero":
        import pyarrow as pa
        pa.table({"k": ["a"]}).group_by("k", use_threads=False).aggregate([("k", "count")])


def _warm(steps: list[Callable[[], None]]) -> None:
    for step in steps:
        if _stopping.is_set():
            return
        try:
            step()
        except Exception:       # the job meets the same problem itself, and reports it
            return


os.register_at_fork(before=stop)
