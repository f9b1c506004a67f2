"""One order for values Python cannot compare with each other (``None`` beside ints, numpy
scalars beside tuples), so that what is sorted for a user (``Capture.extract``'s records, the
``input`` of a differential ``reduce``) comes out the same on every worker, whatever the
order it arrived in."""
from __future__ import annotations

import numbers
from typing import Any


def total_order(value: Any) -> tuple:
    """A sort key that orders values Python cannot compare with each other the same way on
    every worker: ``None`` first, then real numbers (numpy's too), strings, bytes, tuples
    (element by element) and other values by type name and ``repr``.

    >>> sorted([3, None, "a", (1, None), (1, 2), 1.5], key=total_order)
    [None, 1.5, 3, 'a', (1, None), (1, 2)]
    """
    if value is None:
        return (0,)
    if isinstance(value, numbers.Real):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, bytes):
        return (3, value)
    if isinstance(value, tuple):
        return (4, tuple(total_order(item) for item in value))
    return (5, type(value).__qualname__, repr(value))
