"""Timestamps and path summaries.

Times are Python ``int`` (a total order with minimum 0), :class:`Product` (the product
partial order used by nested iterative scopes) or a user type that provides
``less_equal``, a ``minimum()`` classmethod, ``__hash__`` and pickling. User types should
also define ``__lt__`` as a total order that extends ``less_equal`` (lexicographic order
does for most types): the progress tracker processes changes in that order.

A *path summary* says how a time changes along a path: an ``int`` summary adds to an
``int`` time, a :class:`Product` summary adds component-wise, any other summary must
provide ``results_in(time)``.

>>> Product(1, 2).less_equal(Product(1, 3)), Product(1, 2).less_equal(Product(0, 3))
(True, False)
>>> advance(Product(4, 0), Product(0, 1))
Product(4, 1)
"""
from __future__ import annotations

from typing import Any, Callable

Timestamp = Any
Summary = Any


def less_equal(a: Timestamp, b: Timestamp) -> bool:
    """``a <= b`` in the partial order of times (ints compare numerically).

    >>> less_equal(3, 3), less_equal(Product(1, 5), Product(2, 0))
    (True, False)
    """
    if a.__class__ is int:
        return a <= b
    return a.less_equal(b)


def less_than(a: Timestamp, b: Timestamp) -> bool:
    """``a < b`` in the partial order of times.

    >>> less_than(3, 3), less_than(Product(1, 0), Product(1, 2))
    (False, True)
    """
    if a.__class__ is int:
        return a < b
    return a != b and a.less_equal(b)


def _two_types(time: Timestamp, other: Timestamp) -> TypeError:
    """The error for comparing times of two types (an int with a Product, say)."""
    return TypeError(f"cannot compare {time!r} with {other!r}: they are times of two types")


def relation(time: Timestamp, other: Timestamp) -> str:
    """How ``time``, not at or after ``other``, stands to it: ``"earlier than"``, or
    ``"incomparable with"`` (times of a partial order), for errors that refuse it.

    >>> relation(2, 5), relation(Product(0, 5), Product(1, 1))
    ('earlier than', 'incomparable with')
    """
    return "earlier than" if less_than(time, other) else "incomparable with"


def join(a: Timestamp, b: Timestamp) -> Timestamp:
    """The least upper bound of two times (ints: the larger; Product: component-wise max).

    >>> join(3, 5), join(Product(1, 4), Product(2, 0))
    (5, Product(2, 4))
    """
    if a.__class__ is int:
        return a if a >= b else b
    return a.join(b)


def meet(a: Timestamp, b: Timestamp) -> Timestamp:
    """The greatest lower bound of two times (ints: the smaller; Product: component-wise min).

    >>> meet(3, 5), meet(Product(1, 4), Product(2, 0))
    (3, Product(1, 0))
    """
    if a.__class__ is int:
        return a if a <= b else b
    return a.meet(b)


def sort_times(times: list) -> list:
    """``times`` in an order that extends their partial order (sorted when orderable).

    >>> sort_times([Product(1, 0), Product(0, 3)])
    [Product(0, 3), Product(1, 0)]
    """
    try:
        return sorted(times)
    except TypeError:
        rest, ordered = list(times), []
        while rest:
            first = next(t for t in rest if not any(less_than(u, t) for u in rest))
            rest.remove(first)
            ordered.append(first)
        return ordered


INTERNED_PRODUCTS = 4096
"""How many ``Product`` times of two integer coordinates are kept to be handed out again:
``Product(r, i)`` made a second time is the same object, so the dict and set lookups of the
progress tracker (several per time per pass) find it by identity, without a Python-level
``__eq__`` (measured on 2026-12-03 in a reachability's single-edge updates: 148 calls of it
an update instead of 381; updates alternating with and without, three runs, mean 2-6% and
p99 0-23% lower). A cache only: the table is emptied when full, and equal times compare
equal either way."""
_interned: dict = {}


class Product:
    """A pair of times ordered component-wise: ``(a, b) <= (c, d)`` iff ``a <= c and b <= d``.

    Used as the timestamp of a nested iterative scope: ``outer`` is the time of the
    enclosing scope and ``inner`` the iteration count. ``<`` sorts lexicographically (a
    total order extending the partial order), for sorting and deterministic output.

    >>> Product(0, 5).less_than(Product(1, 5)), Product(2, 0) < Product(1, 9)
    (True, False)
    """

    __slots__ = ("outer", "inner", "_hash")
    outer: Timestamp
    inner: Timestamp
    _hash: int

    def __new__(cls, outer: Timestamp, inner: Timestamp) -> "Product":
        """A new time, or the same one made before (see :data:`INTERNED_PRODUCTS`).

        >>> Product(3, 1) is Product(3, 1), Product(3, 1).join(Product(2, 4))
        (True, Product(3, 4))
        """
        key = (outer, inner)
        plain = cls is Product and outer.__class__ is int and inner.__class__ is int
        if plain:
            found = _interned.get(key)
            if found is not None:
                return found
        self = object.__new__(cls)
        self.outer, self.inner, self._hash = outer, inner, hash(key)
        if plain:
            if len(_interned) >= INTERNED_PRODUCTS:
                _interned.clear()
            _interned[key] = self
        return self

    @classmethod
    def minimum(cls) -> "Product":
        """The least ``Product`` of int coordinates.

        >>> Product.minimum()
        Product(0, 0)
        """
        return cls(0, 0)

    def less_equal(self, other: "Product") -> bool:
        """``self <= other`` in the product order: both coordinates at most ``other``'s.

        >>> Product(1, 5).less_equal(Product(2, 5)), Product(1, 5).less_equal(Product(2, 0))
        (True, False)
        """
        try:
            a, b = self.outer, other.outer
        except AttributeError:
            raise _two_types(self, other) from None
        if a.__class__ is int and b.__class__ is int:
            if a > b:
                return False
        elif not less_equal(a, b):
            return False
        a, b = self.inner, other.inner
        if a.__class__ is int and b.__class__ is int:
            return a <= b
        return less_equal(a, b)

    def less_than(self, other: "Product") -> bool:
        """``self < other`` in the product order: :meth:`less_equal` and not equal.

        >>> Product(1, 5).less_than(Product(1, 5)), Product(1, 5).less_than(Product(1, 6))
        (False, True)
        """
        return self != other and self.less_equal(other)

    def join(self, other: "Product") -> "Product":
        """The least upper bound: the component-wise maximum.

        >>> Product(1, 4).join(Product(2, 0))
        Product(2, 4)
        """
        a, b = self.outer, other.outer
        outer = (a if a >= b else b) if a.__class__ is int and b.__class__ is int else join(a, b)
        a, b = self.inner, other.inner
        inner = (a if a >= b else b) if a.__class__ is int and b.__class__ is int else join(a, b)
        return Product(outer, inner)

    def meet(self, other: "Product") -> "Product":
        """The greatest lower bound: the component-wise minimum.

        >>> Product(1, 4).meet(Product(2, 0))
        Product(1, 0)
        """
        a, b = self.outer, other.outer
        outer = (a if a <= b else b) if a.__class__ is int and b.__class__ is int else meet(a, b)
        a, b = self.inner, other.inner
        inner = (a if a <= b else b) if a.__class__ is int and b.__class__ is int else meet(a, b)
        return Product(outer, inner)

    def results_in(self, time: "Product") -> "Product":
        """Apply this value as a path summary to ``time`` (component-wise addition).

        >>> Product(0, 1).results_in(Product(3, 4))
        Product(3, 5)
        """
        return Product(advance(time.outer, self.outer), advance(time.inner, self.inner))

    def __eq__(self, other: object) -> bool:
        return (other.__class__ is Product and self.outer == other.outer
                and self.inner == other.inner)

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: "Product") -> bool:
        try:
            return (self.outer, self.inner) < (other.outer, other.inner)
        except AttributeError:
            raise _two_types(self, other) from None

    def __le__(self, other: "Product") -> bool:
        try:
            return (self.outer, self.inner) <= (other.outer, other.inner)
        except AttributeError:
            raise _two_types(self, other) from None

    def __gt__(self, other: "Product") -> bool:
        try:
            return (self.outer, self.inner) > (other.outer, other.inner)
        except AttributeError:
            raise _two_types(self, other) from None

    def __ge__(self, other: "Product") -> bool:
        try:
            return (self.outer, self.inner) >= (other.outer, other.inner)
        except AttributeError:
            raise _two_types(self, other) from None

    def __reduce__(self):
        return (Product, (self.outer, self.inner))

    def __repr__(self) -> str:
        return f"Product({self.outer!r}, {self.inner!r})"


def advance(time: Timestamp, summary: Summary) -> Timestamp:
    """The time that results from ``time`` along a path with ``summary``.

    >>> advance(3, 2), advance(Product(1, 1), 0)
    (5, Product(1, 1))
    """
    if summary.__class__ is int:
        if time.__class__ is int:
            return time + summary
        if summary == 0:
            return time
        raise TypeError(f"an int path summary ({summary}) cannot advance time {time!r}")
    results_in = getattr(summary, "results_in", None)
    if results_in is None:
        return time + summary
    return results_in(time)


def is_identity(summary: Summary) -> bool:
    """True if ``summary`` leaves every time unchanged (it does not advance a cycle).

    >>> is_identity(0), is_identity(Product(0, 1)), is_identity(ENTER)
    (True, False, True)
    """
    if summary.__class__ is int:
        return summary == 0
    if summary.__class__ is Product:
        return is_identity(summary.outer) and is_identity(summary.inner)
    check = getattr(summary, "is_identity", None)
    return bool(check()) if check is not None else False


def check_summary(summary: Summary) -> None:
    """Reject summaries that would move time backwards (negative components)."""
    if summary.__class__ is int:
        if summary < 0:
            raise ValueError(f"path summary {summary} is negative: time cannot go backwards")
    elif summary.__class__ is Product:
        check_summary(summary.outer)
        check_summary(summary.inner)


class TimeKind:
    """Describes the timestamp type of a scope: its minimum and how it nests.

    ``TimeKind(int)`` is a plain scope; ``TimeKind(int).nested()`` the kind of an iterative
    scope inside it (``Product(outer, int)``); ``nested(T)`` a scope whose inner coordinate
    is of the user type ``T`` (``scope.scoped``).

    >>> TimeKind(int).nested().nested().minimum()
    Product(Product(0, 0), 0)
    """

    __slots__ = ("base", "inners")

    def __init__(self, base: type = int, depth: int = 0, inners: tuple = ()) -> None:
        self.base = base
        self.inners = tuple(inners) or (int,) * depth

    @property
    def depth(self) -> int:
        """How many scopes deep: the number of inner coordinates."""
        return len(self.inners)

    def nested(self, inner: type = int) -> "TimeKind":
        return TimeKind(self.base, inners=self.inners + (inner,))

    def minimum(self) -> Timestamp:
        time = minimum_of(self.base)
        for inner in self.inners:
            time = Product(time, minimum_of(inner))
        return time

    def coordinates(self, time: Timestamp) -> tuple:
        """The time as a tuple (outermost first), for ordering times of different depths."""
        parts = []
        for _ in self.inners:
            parts.append(time.inner)
            time = time.outer
        parts.append(time)
        parts.reverse()
        return tuple(parts)

    def check(self, time: Timestamp, where: str = "") -> None:
        """Raise TypeError if ``time`` is not of this kind, ValueError if it is but has a
        negative int coordinate (below the minimum); the message starts with ``where`` (the
        call given the time), if given.

        >>> TimeKind(int).check(2.5, where="advance_to")
        Traceback (most recent call last):
        TypeError: advance_to: time 2.5 is not of this scope's type (like 0)
        >>> TimeKind(int).nested().check(Product(-1, 0))
        Traceback (most recent call last):
        ValueError: time Product(-1, 0) is below this scope's minimum Product(0, 0)
        """
        if time.__class__ is int and not self.inners and self.base is int and time >= 0:
            return
        if self._shaped(time, _is_time_of):
            return
        place = f"{where}: " if where else ""
        if self._shaped(time, _is_of_type):
            raise ValueError(f"{place}time {time!r} is below this scope's minimum "
                             f"{self.minimum()!r}")
        raise TypeError(f"{place}time {time!r} is not of this scope's type "
                        f"(like {self.minimum()!r})")

    def _shaped(self, time: Timestamp, is_time_of: Callable[[Any, type], bool]) -> bool:
        """Whether ``time`` nests as this kind's times do, each coordinate passing
        ``is_time_of(coordinate, its type)``."""
        probe = time
        for inner in reversed(self.inners):
            if probe.__class__ is not Product or not is_time_of(probe.inner, inner):
                return False
            probe = probe.outer
        return is_time_of(probe, self.base)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimeKind) and (self.base, self.inners) == (other.base, other.inners)

    def __hash__(self) -> int:
        return hash((self.base, self.inners))

    def __repr__(self) -> str:
        inners = "".join(f", {t.__name__}" for t in self.inners)
        return f"TimeKind({self.base.__name__}{inners})"


def check_time_type(timestamp: Any, where: str, total: bool = False) -> None:
    """Raise TypeError, the message starting with ``where``, unless ``timestamp`` is ``int``
    or a type whose times can be a scope's: with ``less_equal``, a ``minimum()`` classmethod
    and hashing (``total``: and ``__lt__``, a total order that extends ``less_equal``).

    >>> check_time_type(str, "worker.dataflow")
    Traceback (most recent call last):
    TypeError: worker.dataflow: timestamp type str has no less_equal (a timestamp type provides less_equal, a minimum() classmethod, hashing and pickling)
    """
    if timestamp is int:
        return
    name = getattr(timestamp, "__name__", repr(timestamp))
    if not isinstance(timestamp, type):
        raise TypeError(f"{where}: timestamp {name} is not a type (int, or a class "
                        f"with less_equal and a minimum() classmethod)")
    for needed in ("less_equal", "minimum", "__hash__"):
        if getattr(timestamp, needed, None) is None:
            raise TypeError(f"{where}: timestamp type {name} has no {needed} (a timestamp "
                            f"type provides less_equal, a minimum() classmethod, hashing "
                            f"and pickling)")
    if total and getattr(timestamp, "__lt__", None) is getattr(object, "__lt__"):
        raise TypeError(f"{where}: timestamp type {name} needs __lt__, a total order that "
                        f"extends less_equal")


def minimum_of(kind: type) -> Timestamp:
    """The least time of ``kind`` (``int``, or a type with a ``minimum()`` classmethod)."""
    return 0 if kind is int else kind.minimum()      # type: ignore[attr-defined]


def _is_of_type(time: Timestamp, kind: type) -> bool:
    """Whether ``time`` is of ``kind`` (an int of ``int``, whatever its sign)."""
    return time.__class__ is int if kind is int else isinstance(time, kind)


def _is_time_of(time: Timestamp, kind: type) -> bool:
    """Whether ``time`` is a time of ``kind``: of its type, and not negative if an int."""
    return _is_of_type(time, kind) and (kind is not int or time >= 0)


class EnterSummary:
    """Path summary of entering a nested scope: ``t`` becomes ``Product(t, minimum)``
    (``minimum`` is the inner coordinate's least value, 0 for iterative scopes); ``ENTER``
    is the one for iterative scopes.

    >>> ENTER.results_in(3)
    Product(3, 0)
    """

    __slots__ = ("minimum",)

    def __init__(self, minimum: Timestamp = 0) -> None:
        self.minimum = minimum

    def results_in(self, time: Timestamp) -> Product:
        return Product(time, self.minimum)

    def is_identity(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "enter"


class LeaveSummary:
    """Path summary of leaving a nested scope: ``Product(t, i)`` becomes ``t`` (``LEAVE``).

    >>> LEAVE.results_in(Product(3, 7))
    3
    """

    __slots__ = ()

    def results_in(self, time: Product) -> Timestamp:
        return time.outer

    def is_identity(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "leave"


ENTER = EnterSummary()
LEAVE = LeaveSummary()
