"""Lattice operations on times and on frontiers (antichains given as lists of times).

Differential dataflow needs more of a time than timely does: the least upper bound ``join``
(the first time at which two updates are both visible) and the greatest lower bound ``meet``.
A *frontier* here is a list of mutually incomparable times; the empty list is the frontier
past every time.

>>> from sparktimely import Product
>>> advance_by(Product(0, 3), [Product(2, 0)])
Product(2, 3)
>>> antichain_join([Product(1, 0), Product(0, 2)], [Product(0, 1)])
[Product(1, 1), Product(0, 2)]
"""
from __future__ import annotations

from typing import Iterable

from ..progress.timestamp import Timestamp, join, less_equal, meet, sort_times

__all__ = ["advance_by", "antichain", "antichain_join", "beyond", "frontier_le",
           "interesting_times"]


def antichain(times: Iterable[Timestamp]) -> list:
    """The minimal elements of ``times`` (duplicates removed).

    >>> antichain([3, 1, 2, 1])
    [1]
    """
    result: list = []
    for time in times:
        if any(less_equal(kept, time) for kept in result):
            continue
        result = [kept for kept in result if not less_equal(time, kept)]
        result.append(time)
    return result


def beyond(frontier: list, time: Timestamp) -> bool:
    """True if ``time`` is at or after some element of ``frontier`` (so not yet complete
    for an input whose frontier this is).

    >>> beyond([4], 5), beyond([4], 3), beyond([], 3)
    (True, False, False)
    """
    if len(frontier) == 1:
        first = frontier[0]
        if first.__class__ is int:
            return first <= time
        return first.less_equal(time)
    return any(less_equal(f, time) for f in frontier)


def frontier_le(a: list, b: list) -> bool:
    """``a <= b`` for frontiers: every element of ``b`` is beyond some element of ``a``
    (``b`` is at or past ``a``; the empty frontier is past everything).

    >>> frontier_le([2], [3]), frontier_le([3], [2]), frontier_le([2], [])
    (True, False, True)
    """
    if len(b) == 1 and len(a) == 1:                 # the usual: one time each
        return beyond(a, b[0])
    return all(beyond(a, t) for t in b)


def antichain_join(a: list, b: list) -> list:
    """The frontier of times beyond both ``a`` and ``b``: minimal pairwise joins.

    >>> antichain_join([2], [5]), antichain_join([], [5])
    ([5], [])
    """
    if len(a) == 1 and len(b) == 1:
        return [join(a[0], b[0])]
    return antichain(join(x, y) for x in a for y in b)


def advance_by(time: Timestamp, frontier: list) -> Timestamp:
    """The least time equivalent to ``time`` for every observer beyond ``frontier``:
    the meet over ``f`` in ``frontier`` of ``time.join(f)`` (``time`` itself for ``[]``).

    Accumulating updates at advanced times gives the same result at every time beyond
    the frontier, which is what lets an arrangement coalesce old times.

    >>> advance_by(3, [5]), advance_by(7, [5]), advance_by(3, [])
    (5, 7, 3)
    """
    if not frontier:
        return time
    if time.__class__ is int:
        first = frontier[0]
        return first if first > time else time
    result = None
    for f in frontier:
        joined = join(time, f)
        result = joined if result is None else meet(result, joined)
    return result


def interesting_times(seeds: set, partners: set, upper: list) -> tuple[list, set]:
    """The times at which a key must be re-evaluated, given the times of its new updates
    (``seeds``) and of its other input and output updates (``partners``): the closure of
    the seeds under joins with partners and with each other. Returns the ones not beyond
    ``upper``, in an order extending the partial order, and the ones beyond it (to be
    evaluated when the frontier gets there).

    >>> from sparktimely import Product as P
    >>> interesting_times({P(1, 0)}, {P(0, 2)}, [P(1, 1)])
    ([Product(1, 0)], {Product(1, 2)})
    >>> interesting_times({P(0, 1), P(1, 0)}, set(), [P(2, 0)])
    ([Product(0, 1), Product(1, 0), Product(1, 1)], set())
    """
    seeds = set(seeds)
    floor = None
    for time in seeds:
        floor = time if floor is None else meet(floor, time)
    # every reached time is beyond `floor`, so partners may be advanced to it first
    partners = {join(p, floor) for p in partners} if floor is not None else set()
    reached: set = set()
    future: set = set()
    todo = [t for t in seeds if not beyond(upper, t)]
    future.update(t for t in seeds if beyond(upper, t))
    while todo:
        time = todo.pop()
        if time in reached:
            continue
        reached.add(time)
        for other in list(partners) + list(reached):
            joined = join(time, other)
            if joined in reached or joined in future:
                continue
            if beyond(upper, joined):
                future.add(joined)
            else:
                todo.append(joined)
    return sort_times(list(reached)), future
