"""Window kinds: which windows an event time belongs to.

Event times and window bounds are ints (epoch milliseconds, say). A window is the half-open
interval ``[start, end)``. :class:`Tumbling` and :class:`Sliding` windows are aligned to
``offset`` and depend only on the event time; :class:`Session` windows depend on the other
events of the key, and are built by the window operator.

>>> Tumbling(10).windows_of(23), Sliding(10, 5).windows_of(23)
([Window(start=20, end=30)], [Window(start=15, end=25), Window(start=20, end=30)])
"""
from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Session", "Sliding", "Tumbling", "Window"]


class Window(NamedTuple):
    """A window of event time, ``[start, end)``: the window of each result of
    ``stream.window``.

    >>> w = Window(0, 60)
    >>> w.start, w.end, 59 in range(*w)
    (0, 60, True)
    """

    start: int
    end: int


def _check_int(owner: str, name: str, value: object, positive: bool = True) -> int:
    if value.__class__ is not int:
        raise TypeError(f"{owner}: {name} must be an int, got {value!r}")
    assert isinstance(value, int)
    if positive and value <= 0:
        raise ValueError(f"{owner}: {name} must be positive, got {value}")
    return value


class Sliding:
    """Windows of length ``size`` starting every ``slide`` (``0 < slide <= size``) at
    ``offset + k * slide`` for every int ``k``: an event belongs to each window that contains
    it (``size // slide`` of them when ``slide`` divides ``size``).

    The window operator keeps one partial aggregate per key and *pane* (``gcd(size, slide)``
    of event time) and merges a window's panes when it closes, so a record costs one update
    whatever ``size / slide`` is; with compact partials (see ``Aggregation``) it keeps merges
    of runs of panes, so a closing window merges a few of them, not each of its panes.

    >>> [tuple(w) for w in Sliding(300, 60).windows_of(130)]
    [(-120, 180), (-60, 240), (0, 300), (60, 360), (120, 420)]
    >>> Sliding(10, 20)
    Traceback (most recent call last):
    ...
    ValueError: Sliding: slide must be at most size (10), got 20
    """

    __slots__ = ("size", "slide", "offset", "pane")

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        owner = type(self).__name__
        self.size = _check_int(owner, "size", size)
        self.slide = _check_int(owner, "slide", slide)
        self.offset = _check_int(owner, "offset", offset, positive=False)
        if slide > size:
            raise ValueError(f"{owner}: slide must be at most size ({size}), got {slide}")
        self.pane = math.gcd(size, slide)
        """The length of a pane: windows are unions of whole panes."""

    def windows_of(self, event_time: int) -> list[Window]:
        """The windows that contain ``event_time``, earliest first.

        >>> Tumbling(60, offset=30).windows_of(100)
        [Window(start=90, end=150)]
        """
        last = (event_time - self.offset) // self.slide
        first = (event_time - self.offset - self.size) // self.slide + 1
        return [self.window(i) for i in range(first, last + 1)]

    def window(self, i: int) -> Window:
        """Window number ``i``: the one starting at ``offset + i * slide``.

        >>> Sliding(10, 5).window(3)
        Window(start=15, end=25)
        """
        start = self.offset + i * self.slide
        return Window(start, start + self.size)

    def __repr__(self) -> str:
        return f"Sliding(size={self.size}, slide={self.slide}, offset={self.offset})"



class Tumbling(Sliding):
    """Windows ``[offset + k * size, offset + (k + 1) * size)`` for every int ``k``: each
    event belongs to exactly one. (A sliding window whose slide is its size.)

    >>> Tumbling(60).windows_of(125)
    [Window(start=120, end=180)]
    >>> Tumbling(0)
    Traceback (most recent call last):
    ...
    ValueError: Tumbling: size must be positive, got 0
    """

    __slots__ = ()

    def __init__(self, size: int, offset: int = 0) -> None:
        super().__init__(size, size if size.__class__ is int and size > 0 else 1, offset)

    def __repr__(self) -> str:
        return f"Tumbling(size={self.size}, offset={self.offset})"


class Session:
    """Per key, events closer than ``gap`` to each other fall into one session; events
    exactly ``gap`` apart do not. A session spans ``[first event, last event + gap)``.

    >>> Session(30)
    Session(gap=30)
    >>> Session(-1)
    Traceback (most recent call last):
    ...
    ValueError: Session: gap must be positive, got -1
    """

    __slots__ = ("gap",)

    def __init__(self, gap: int) -> None:
        self.gap = _check_int("Session", "gap", gap)

    def __repr__(self) -> str:
        return f"Session(gap={self.gap})"

