"""Aggregations of a window's records, for ``stream.window`` over Python records.

Each is an :class:`Aggregation`: partial values per key and pane (or session) that merge
when a window closes. ``f`` extracts the value aggregated from a record (default: the record
itself). ``count``, ``sum``, ``min``, ``max`` and ``mean`` keep one value per pane; ``collect``
and ``fold`` keep the records of each pane (with their event and timely times) and build a
window's value when it closes: ``collect`` sorts them by event time (ties in any order),
``fold`` applies ``f`` in timely-time order (records of one time in any order), which partial
folds could not do once panes or sessions merge.

Sums of floats are added in an order that may depend on how records were batched, so they
can differ in the last bits between runs; sums of ints are exact.

>>> agg = sum(lambda r: r[1])
>>> acc = None
>>> for record in [("a", 2), ("a", 5)]:
...     acc = agg.add(acc, record, 0, 0)
>>> agg.result(acc), mean().result(mean().merge((3, 1), (5, 1)))
(7, 4.0)
"""
from __future__ import annotations

import builtins
import copy
from operator import itemgetter
from typing import Any, Callable

__all__ = ["Aggregation", "collect", "count", "fold", "max", "mean", "min", "sum"]

_first = itemgetter(0)


class Aggregation:
    """How the records of a window become its value: ``add(acc, record, event_time, time)``
    folds a record into a partial value (``acc`` None for the first), ``merge(a, b)``
    combines two partials into a new one (changing neither) and ``result(acc)`` is the value
    a closed window reports. ``compact`` says that a partial stays small whatever it merges
    (a number, a short tuple: not a list of records): a sliding window then keeps merges of
    runs of panes and merges a few partials when it closes, not one for each of its
    ``size / gcd(size, slide)`` panes, which with partials that grow would hold a copy of
    the records per pane.

    >>> agg = count()
    >>> agg.name, agg.result(agg.merge(agg.add(None, "x", 0, 0), agg.add(None, "y", 1, 0)))
    ('count', 2)
    """

    __slots__ = ("name", "add", "merge", "result", "compact")

    def __init__(self, name: str, add: Callable[[Any, Any, int, Any], Any],
                 merge: Callable[[Any, Any], Any], result: Callable[[Any], Any],
                 compact: bool = False) -> None:
        self.name = name
        self.add = add
        self.merge = merge
        self.result = result
        self.compact = compact

    def __repr__(self) -> str:
        return f"win.{self.name}()"


def _same(acc: Any) -> Any:
    return acc


def count() -> Aggregation:
    """The number of records.

    >>> count().result(count().add(count().add(None, "a", 0, 0), "b", 0, 0))
    2
    """
    return Aggregation("count", lambda acc, r, e, t: 1 if acc is None else acc + 1,
                       lambda a, b: a + b, _same, compact=True)


def _value_of(name: str, f: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """``f(record)`` (the record without ``f``); a TypeError naming the aggregation and the
    record where that is None (an accumulator of None means "no record yet", so a None value
    would be taken for one, or not, by the records' order)."""
    def value_of(record: Any) -> Any:
        value = record if f is None else f(record)
        if value is None:
            raise TypeError(f"win.{name}: the value of record {record!r} is None; {name} "
                            f"takes values (filter the records, or give f a default)")
        return value
    return value_of


def _reducing(name: str, f: Callable[[Any], Any] | None,
              combine: Callable[[Any, Any], Any]) -> Aggregation:
    value_of = _value_of(name, f)

    def add(acc: Any, record: Any, event_time: int, time: Any) -> Any:
        value = value_of(record)
        return value if acc is None else combine(acc, value)
    return Aggregation(name, add, combine, _same, compact=True)


def sum(f: Callable[[Any], Any] | None = None) -> Aggregation:
    """The sum of ``f(record)`` (of the records themselves without ``f``).

    >>> agg = sum(len)
    >>> agg.result(agg.add(agg.add(None, "ab", 0, 0), "cde", 0, 0))
    5
    """
    return _reducing("sum", f, lambda a, b: a + b)


def min(f: Callable[[Any], Any] | None = None) -> Aggregation:
    """The least ``f(record)``.

    >>> agg = min()
    >>> agg.result(agg.merge(agg.add(None, 4, 0, 0), agg.add(None, 2, 0, 0)))
    2
    """
    return _reducing("min", f, builtins.min)


def max(f: Callable[[Any], Any] | None = None) -> Aggregation:
    """The greatest ``f(record)``.

    >>> agg = max(lambda r: r["t"])
    >>> agg.result(agg.add(agg.add(None, {"t": 3}, 0, 0), {"t": 8}, 0, 0))
    8
    """
    return _reducing("max", f, builtins.max)


def mean(f: Callable[[Any], Any] | None = None) -> Aggregation:
    """The mean of ``f(record)``: ``sum / count`` (a float for ints).

    >>> agg = mean()
    >>> agg.result(agg.add(agg.add(None, 1, 0, 0), 2, 0, 0))
    1.5
    """
    value_of = _value_of("mean", f)

    def add(acc: Any, record: Any, event_time: int, time: Any) -> tuple:
        v = value_of(record)
        return (v, 1) if acc is None else (acc[0] + v, acc[1] + 1)
    return Aggregation("mean", add, lambda a, b: (a[0] + b[0], a[1] + b[1]),
                       lambda acc: acc[0] / acc[1], compact=True)


def _keeping(name: str, stamp: int, result: Callable[[list], Any]) -> Aggregation:
    """An aggregation keeping ``(stamp, record)`` pairs, stamp 0 the event time, 1 the time."""
    def add(acc: list | None, record: Any, event_time: int, time: Any) -> list:
        pair = (event_time if stamp == 0 else time, record)
        if acc is None:
            return [pair]
        acc.append(pair)
        return acc
    return Aggregation(name, add, lambda a, b: a + b, result)


def collect() -> Aggregation:
    """The records, sorted by event time (records with the same event time in any order).

    >>> agg = collect()
    >>> agg.result(agg.add(agg.add(None, "late", 9, 0), "early", 1, 0))
    ['early', 'late']
    """
    return _keeping("collect", 0, lambda pairs: [r for _, r in sorted(pairs, key=_first)])


def fold(init: Any, f: Callable[[Any, Any], Any]) -> Aggregation:
    """``acc = f(acc, record)`` over the window's records in timely-time order (records of
    one time in any order), starting from ``init()`` if ``init`` is callable, else from a
    deep copy of ``init`` (each window its own).

    >>> agg = fold(list, lambda acc, r: acc + [r])
    >>> agg.result(agg.add(agg.add(None, "second", 0, 5), "first", 9, 2))
    ['first', 'second']
    """
    def result(pairs: list) -> Any:
        acc = init() if callable(init) else copy.deepcopy(init)
        for _, record in sorted(pairs, key=_first):
            acc = f(acc, record)
        return acc
    return _keeping("fold", 1, result)
