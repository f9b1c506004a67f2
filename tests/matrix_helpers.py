"""Helpers for tests that run at 1, 2 and 3 workers through the ``run`` fixture
(tests/conftest.py): building one dataflow on every worker, merging what the workers
captured, and plain-Python oracles shared by several test files.

Workers of an in-process run share this process: a test that records what operators observe
keeps one list per worker (:func:`per_worker`), indexed by ``scope.index``.

>>> copies([(0, [2, 1])], 2)
[(0, [1, 1, 2, 2])]
>>> summed([(0, [2, 3]), (4, [1])])
[(0, 5), (4, 1)]
>>> [collatz_steps(n) for n in (1, 6, 27)]
[0, 8, 111]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import sparktimely as st
from sparktimely.testing import consolidate


def example(run, build: Callable[[Any], Any]) -> list:
    """``build(scope)`` in one dataflow on every worker, run to completion: what ``build``
    returned, per worker (the matrix form of ``st.example``)."""
    return run(lambda worker: worker.dataflow(build))


def merged(results: Iterable) -> Any:
    """What the workers' results hold together: a Capture per worker becomes one
    consolidated extract; tuples and lists of captures are merged element by element."""
    results = list(results)
    first = results[0]
    if isinstance(first, st.Capture):
        return consolidate([captured.extract() for captured in results])
    return type(first)(merged(list(parts)) for parts in zip(*results))


def copies(extract: list, workers: int) -> list:
    """``extract`` as it looks merged when every worker produced it (``scope.to_stream``
    produces its items on every worker)."""
    return [(time, sorted(records * workers)) for time, records in extract]


def summed(extract: list) -> list:
    """Per time, the sum of the numbers the workers reported (per-worker counts)."""
    return [(time, sum(counts)) for time, counts in extract]


def per_worker(workers: int) -> list[list]:
    """An empty list per worker, for what operators observe."""
    return [[] for _ in range(workers)]


def collatz_steps(n: int) -> int:
    """How many steps ``n -> n/2 or 3n+1`` take ``n`` to 1."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps
