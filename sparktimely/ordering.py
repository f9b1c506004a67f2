"""One order for values Python cannot compare with each other (``None`` beside ints, numpy
scalars beside tuples, a NaN beside any number), so that what is sorted for a user
(``Capture.extract``'s records, the ``input`` of a differential ``reduce``) comes out the same
on every worker, whatever the order it arrived in; and one NaN for keys (:func:`one_nan`), so
that what is grouped by key in a dict is grouped the same on every worker."""
from __future__ import annotations

import numbers
from itertools import islice
from typing import Any


def total_order(value: Any) -> tuple:
    """A sort key that orders values Python cannot compare with each other the same way on
    every worker: ``None`` first, then real numbers (numpy's too), NaNs, strings, bytes,
    tuples (element by element) and other values by type name and ``repr``.

    >>> sorted([3, None, "a", (1, None), (1, 2), 1.5, float("nan")], key=total_order)
    [None, 1.5, 3, nan, 'a', (1, None), (1, 2)]
    """
    if value is None:
        return (0,)
    if isinstance(value, numbers.Real):
        return (1, value) if value == value else (1.5,)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, bytes):
        return (3, value)
    if isinstance(value, tuple):
        return (4, tuple(total_order(item) for item in value))
    return (5, type(value).__qualname__, repr(value))


def sort_totally(items: list) -> None:
    """Sorts ``items`` in place: in Python's order where it is one (every item then at most
    its successor), else by :func:`total_order`. A NaN is neither below nor above a number,
    so Python's sort leaves it, and the numbers around it, in the order they arrived.

    >>> items = [3.0, float("nan"), 1.0, 2.0]
    >>> sort_totally(items)
    >>> items
    [1.0, 2.0, 3.0, nan]
    """
    try:
        items.sort()
        if all(a <= b for a, b in zip(items, islice(items, 1, None))):
            return
    except (TypeError, ValueError):     # None beside ints, numpy scalars beside tuples
        pass
    items.sort(key=total_order)


_NAN = float("nan")


def one_nan(key: Any) -> Any:
    """``key`` with each float NaN in it (numpy's float32, float16 and longdouble NaNs too),
    itself or in a tuple, as one NaN object: a dict
    tells NaNs apart by identity, and a record that crossed workers carries a NaN of its own,
    so NaN keys would form one group or several by how the records were split over workers
    (Arrow rows with NaN keys form one group). Keyed operators call it only for a key that
    is not equal to itself or is a tuple (``k != k or isinstance(k, tuple)``), which keeps
    their loops cheap.

    >>> one_nan(float("nan")) is one_nan(float("nan")), one_nan((1.5, float("nan")))[1] is _NAN
    (True, True)
    >>> import numpy as np
    >>> one_nan(np.float32("nan")) is _NAN, one_nan((1, np.float16("nan")))[1] is _NAN
    (True, True)
    >>> key = ("sensor", (1, 2.5))
    >>> one_nan(key) is key                 # no NaN in it: the key itself
    True
    """
    if isinstance(key, float):
        return _NAN if key != key else key
    if isinstance(key, tuple):
        for item in key:            # most tuple keys hold no NaN: one look at each item
            if item != item or isinstance(item, tuple):
                break
        else:
            return key
        items = [one_nan(item) for item in key]
        if any(a is not b for a, b in zip(items, key)):
            return type(key)(*items) if hasattr(key, "_fields") else type(key)(items)
        return key
    if key != key and isinstance(key, numbers.Real):        # numpy's floats (the ABC's
        return _NAN                                         # check is slow: after the test)
    return key
