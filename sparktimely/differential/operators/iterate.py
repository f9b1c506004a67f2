"""The machinery of fixed points: the loop behind ``Collection.iterate`` and ``Variable``
in nested iterative scopes.

Inside ``scope.iterative(...)`` times are ``Product(outer, round)``. A ``Variable`` is a
collection defined in terms of itself: ``var.set(result)`` feeds ``result`` back one round
later, so the variable's value in round ``i + 1`` is ``result``'s value in round ``i``. Only
changes travel around the loop: once a round changes nothing, nothing circulates and the
frontier moves on. As in differential, the feedback (``result`` minus the variable's start)
is not consolidated on its way round: the step must hold an operator that consolidates
(``distinct``, ``reduce``, ``count``, ``consolidate``), or an update and its retraction go
round for ever (``iterate(lambda x: x)`` does not end). Leaving the scope accumulates every
round, so the collection outside is the fixed point; when an input changes at a later outer
time, only the differences are recomputed, retractions included (an edge deleted later
retracts what was derived from it).

>>> import sparktimely as st, sparktimely.differential as dd
>>> def build(scope):
...     numbers = dd.from_stream(scope.to_stream([1]))
...     halving = numbers.map(lambda x: 40).iterate(
...         lambda x: x.map(lambda n: n // 2 if n > 5 else n).distinct())
...     return halving.consolidate().inner.capture()
>>> st.example(build).extract()
[(0, [(5, 0, 1)])]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dataflow import LoopHandle
from ...progress.timestamp import Product, advance

if TYPE_CHECKING:
    from ...ops import Scope, Stream


def loop_variable(scope: "Scope", step: Any) -> tuple[LoopHandle, "Stream"]:
    """A loop in the iterative scope ``scope`` whose updates come back ``step`` later (an
    int ``n`` means ``Product(0, n)``), the times inside the update records advanced too:
    the handle to connect the loop's input to, and its output."""
    if scope.kind.depth == 0:
        raise ValueError("a Variable lives in an iterative scope (scope.iterative(...))")
    summary = loop_summary(scope.kind.depth, step)
    return scope.loop_variable(
        summary, lambda batch: batch if batch.__class__ is not list
        else [(d, advance(t, summary), r) for d, t, r in batch])


def loop_summary(depth: int, step: Any) -> Any:
    """The feedback summary that advances the innermost round by ``step`` (an int, or a
    ``Product(0, n)``) in a scope nested ``depth`` deep, spelled out at every level:
    ``Product(Product(0, 0), n)`` at depth 2 (the timely layer's cycle check reads a bare
    int outer part as "no advance" in scopes nested two deep or more).

    >>> loop_summary(1, 1), loop_summary(2, Product(0, 3))
    (Product(0, 1), Product(Product(0, 0), 3))
    """
    if step.__class__ is Product and step.outer == 0 and step.inner.__class__ is int:
        step = step.inner
    if step.__class__ is not int:
        return step
    outer: Any = 0
    for _ in range(depth - 1):
        outer = Product(outer, 0)
    return Product(outer, step)
