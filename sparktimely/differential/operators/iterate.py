"""Fixed points: ``iterate`` and ``Variable`` in nested iterative scopes.

Inside ``scope.iterative(...)`` times are ``Product(outer, round)``. A :class:`Variable` is a
collection defined in terms of itself: ``var.set(result)`` feeds ``result`` back one round
later, so the variable's value in round ``i + 1`` is ``result``'s value in round ``i``. Only
changes travel around the loop: once a round changes nothing, nothing circulates and the
frontier moves on. Leaving the scope accumulates every round, so the collection outside is
the fixed point; when an input changes at a later outer time, only the differences are
recomputed, retractions included (an edge deleted later retracts what was derived from it).

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

from typing import TYPE_CHECKING, Any, Callable

from ...progress.timestamp import Product, advance
from ..collection import Collection

if TYPE_CHECKING:
    from ...ops import Scope


class Variable(Collection):
    """A collection in an iterative scope whose definition is given later with
    :meth:`set`; ``step`` (an int ``n`` means ``Product(0, n)``) is how far each round
    advances the time.

    ``Variable(scope)`` starts empty; ``Variable.new_from(collection)`` starts as
    ``collection`` (which must be in the iterative scope).

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     def loop(inner):
    ...         seed = dd.from_stream(scope.to_stream([1])).enter(inner)
    ...         powers = dd.Variable.new_from(seed)
    ...         grown = powers.map(lambda x: x * 2).filter(lambda x: x <= 8)
    ...         return powers.set(seed.concat(grown).distinct()).leave()
    ...     return scope.iterative(loop).consolidate().inner.capture()
    >>> st.example(build).extract()
    [(0, [(1, 0, 1), (2, 0, 1), (4, 0, 1), (8, 0, 1)])]
    """

    __slots__ = ("_loop", "_source", "_done")

    def __init__(self, scope: "Scope", step: Any = 1, source: Collection | None = None) -> None:
        if scope.kind.depth == 0:
            raise ValueError("a Variable lives in an iterative scope (scope.iterative(...))")
        step = loop_summary(scope.kind.depth, step)
        loop, stream = scope.loop_variable(                   # advances records' times too
            step, lambda batch: batch if batch.__class__ is not list
            else [(d, advance(t, step), r) for d, t, r in batch])
        super().__init__(stream if source is None else stream.concat(source.inner))
        self._loop = loop
        self._source = source
        self._done = False

    @classmethod
    def new_from(cls, collection: Collection, step: Any = 1) -> "Variable":
        """A variable starting as ``collection`` (of the iterative scope).

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     def loop(inner):
        ...         start = dd.from_stream(scope.to_stream([5])).enter(inner)
        ...         countdown = dd.Variable.new_from(start)         # starts as {5}
        ...         lower = countdown.map(lambda x: x - 1).filter(lambda x: x >= 3)
        ...         return countdown.set(start.concat(lower).distinct()).leave()
        ...     return scope.iterative(loop).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [(3, 0, 1), (4, 0, 1), (5, 0, 1)])]
        """
        return cls(collection.scope, step, collection)

    def set(self, result: Collection) -> Collection:
        """Define the variable as ``result`` one round later; returns ``result``.

        >>> import sparktimely as st, sparktimely.differential as dd
        >>> def build(scope):
        ...     def loop(inner):
        ...         edges = dd.from_stream(scope.to_stream([(1, 2), (2, 3)])).enter(inner)
        ...         reach = dd.Variable(inner)                      # starts empty
        ...         by_end = reach.map(lambda path: (path[1], path[0]))
        ...         step = by_end.join_map(edges, lambda mid, src, dst: (src, dst))
        ...         return reach.set(edges.concat(step).distinct()).leave()
        ...     return scope.iterative(loop).consolidate().inner.capture()
        >>> st.example(build).extract()
        [(0, [((1, 2), 0, 1), ((1, 3), 0, 1), ((2, 3), 0, 1)])]
        """
        if self._done:
            raise RuntimeError("Variable.set was already called for this variable")
        self._done = True
        feedback = result if self._source is None else result.concat(self._source.negate())
        feedback.inner.connect_loop(self._loop)
        return result


def loop_summary(depth: int, step: Any) -> Any:
    """The feedback summary that advances the innermost round by ``step`` (an int, or a
    ``Product(0, n)``) in a scope nested ``depth`` deep, spelled out at every level:
    ``Product(Product(0, 0), n)`` at depth 2 (the timely layer's cycle check reads a bare
    int outer part as "no advance" in scopes nested two deep or more).

    >>> loop_summary(1, 1), loop_summary(2, Product(0, 3))
    (Product(0, 1), Product(Product(0, 0), 3))
    """
    if step.__class__ is Product and step.outer == 0:
        step = step.inner
    if step.__class__ is not int:
        return step
    outer: Any = 0
    for _ in range(depth - 1):
        outer = Product(outer, 0)
    return Product(outer, step)


def iterate(collection: Collection, f: Callable[[Collection], Collection]) -> Collection:
    """The fixed point of ``f`` started from ``collection``: ``f`` gets the collection of
    the current round (in a nested iterative scope) and returns the next round's; the
    result is the limit, back in ``collection``'s scope. Outer collections used inside
    ``f`` must be entered: ``other.enter(x.scope)``.

    >>> import sparktimely as st, sparktimely.differential as dd
    >>> def build(scope):
    ...     edges = dd.from_stream(scope.to_stream([(1, 2), (2, 3), (3, 1), (4, 5)]))
    ...     roots = dd.from_stream(scope.to_stream([1]))
    ...     def step(reach):
    ...         inner = edges.enter(reach.scope)
    ...         return reach.map(lambda n: (n, ())).join_map(inner, lambda n, _, m: m) \\
    ...             .concat(roots.enter(reach.scope)).distinct()
    ...     return roots.iterate(step).consolidate().inner.capture()
    >>> st.example(build).extract()
    [(0, [(1, 0, 1), (2, 0, 1), (3, 0, 1)])]
    """
    def build(inner: "Scope") -> Collection:
        variable = Variable.new_from(collection.enter(inner))
        result = f(variable)
        if not isinstance(result, Collection):
            raise TypeError(f"iterate: f must return a Collection, not {type(result).__name__}")
        variable.set(result)
        return result.leave()
    return collection.scope.iterative(build)
