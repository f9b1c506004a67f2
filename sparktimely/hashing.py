"""Hashes that are the same in every process, on every host and in every run.

Routing a record to worker ``h(key) % peers`` is only right if every worker computes the same
``h``. Python's built-in ``hash`` of a ``str`` or ``bytes`` is salted per interpreter
(``PYTHONHASHSEED``): in a job of several processes or hosts one key would land on several
workers and keyed results would be wrong. :func:`stable_hash` hashes Python values;
:func:`hash_array` and :func:`hash_rows` hash Arrow columns without a Python loop over rows.
Each path is deterministic on its own; the two are different functions (a key travelling as a
Python object and the same key in an Arrow column need not hash alike).

>>> stable_hash("apple") == stable_hash("apple"), 0 <= stable_hash(("apple", 3)) < 2 ** 64
(True, True)
"""
from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from xxhash import xxh3_64_intdigest

from .progress.timestamp import Product

__all__ = ["hash_array", "hash_rows", "stable_hash"]

_MASK = (1 << 64) - 1
_SEED_STR, _SEED_BYTES, _SEED_INT, _SEED_BIG, _SEED_FLOAT = 1, 2, 3, 4, 5
_NONE_HASH = 0x6E756C6C6E756C6C
_TRUE_HASH, _FALSE_HASH = 0x74727565A5A5A5A5, 0x66616C73655A5A5A
_TUPLE_START, _PRODUCT_START = 0x7475706C65000000, 0x70726F6475637400
_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")


def _combine(h: int, element: int) -> int:
    """Fold ``element``'s hash into ``h`` (order matters: ``(a, b)`` and ``(b, a)`` differ)."""
    return xxh3_64_intdigest(_PAIR.pack(h, element))


_PAIR = struct.Struct("<QQ")


def stable_hash(value: Any) -> int:
    """A 64-bit hash of ``value`` that every process, host and run agrees on.

    Hashes ints (and bools), strings, bytes, floats, None, tuples of these and
    :class:`~sparktimely.Product` times. Values that compare equal hash equally within that
    set (``2 == 2.0``, so ``stable_hash(2) == stable_hash(2.0)``). Other values raise
    TypeError naming their type. Use it in routes, e.g. ``exchange(lambda w: stable_hash(w))``
    or ``Exchange(lambda kv: stable_hash(kv[0]))``.

    >>> stable_hash("word") == stable_hash("word"), stable_hash("word") == stable_hash(b"word")
    (True, False)
    >>> stable_hash(7) == stable_hash(7.0), stable_hash((1, "a")) == stable_hash((1, "a"))
    (True, True)
    >>> stable_hash([1, 2])
    Traceback (most recent call last):
    ...
    TypeError: stable_hash cannot hash a list ([1, 2]): use ints, strings, bytes, floats, None, tuples of these or Product
    """
    cls = value.__class__
    if cls is str:
        return xxh3_64_intdigest(value.encode("utf-8", "surrogatepass"), _SEED_STR)
    if cls is int:
        if -(1 << 63) <= value < 1 << 63:
            return xxh3_64_intdigest(_INT64.pack(value), _SEED_INT)
        return xxh3_64_intdigest(value.to_bytes((value.bit_length() + 8) // 8, "little",
                                                signed=True), _SEED_BIG)
    if cls is tuple:
        h = _TUPLE_START + len(value)
        for element in value:
            h = _combine(h, stable_hash(element))
        return h
    if cls is bytes:
        return xxh3_64_intdigest(value, _SEED_BYTES)
    if cls is Product:
        return _combine(_combine(_PRODUCT_START, stable_hash(value.outer)),
                        stable_hash(value.inner))
    if cls is float:
        if value.is_integer():
            return stable_hash(int(value))
        return xxh3_64_intdigest(_FLOAT64.pack(value), _SEED_FLOAT)
    if value is None:
        return _NONE_HASH
    if cls is bool:
        return stable_hash(int(value))
    if isinstance(value, (str, int, float, bytes, tuple)):    # subclasses: hash the value
        bases: tuple[Any, ...] = (bool, int, str, float, bytes, tuple)
        for base in bases:
            if isinstance(value, base):
                return stable_hash(base(value))
    raise TypeError(f"stable_hash cannot hash a {cls.__name__} ({value!r:.60}): use ints, "
                    f"strings, bytes, floats, None, tuples of these or Product")


# -- Arrow columns -------------------------------------------------------------------------

_U64 = np.uint64
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_BASE = _U64(0x100000001B3)          # odd multiplier of the byte polynomial
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_NULL = _U64(0x6E756C6C6E756C6C)      # the hash of a null, in every column type


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 (increment, then finaliser), in place on a uint64 array."""
    h += _GOLDEN
    h ^= h >> _U64(30)
    h *= _M1
    h ^= h >> _U64(27)
    h *= _M2
    h ^= h >> _U64(31)
    return h


def _is_bytes(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t))


def _hash_bytes(values: pa.Array) -> np.ndarray:
    """Hashes of the values of a string/binary array: ``sum((byte + 1) * BASE**(i + 1))``
    plus the length, mixed."""
    values = values.cast(pa.large_binary())
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64, len(values) + 1, values.offset * 8)
    first = int(offsets[0])
    starts, ends = offsets[:-1] - first, offsets[1:] - first
    lengths = ends - starts
    total = int(ends[-1]) if len(values) else 0
    data = (np.frombuffer(data_buffer, np.uint8, total, first) if total
            else np.empty(0, np.uint8)).astype(_U64) + _U64(1)
    weights = np.cumprod(np.full(int(lengths.max(initial=0)), _BASE, _U64))
    data *= weights[np.arange(total) - np.repeat(starts, lengths)]
    sums = np.zeros(total + 1, _U64)
    np.cumsum(data, out=sums[1:])
    return _mix(sums[ends] - sums[starts] + lengths.astype(_U64) * _GOLDEN)


def hash_array(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A deterministic uint64 hash per value: equal values hash equally across processes,
    hosts, integer widths, and plain, large or dictionary-encoded strings; nulls hash alike.

    >>> import pyarrow as pa
    >>> a = hash_array(pa.array(["x", None, "y"]))
    >>> b = hash_array(pa.array(["y", "x", None], pa.large_string()).dictionary_encode())
    >>> [int(a[i]) == int(b[j]) for i, j in [(0, 1), (1, 2), (2, 0)]]
    [True, True, True]
    >>> bool(hash_array(pa.array([7], pa.int8()))[0] == hash_array(pa.array([7]))[0])
    True
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_dictionary(kind) or _is_bytes(kind):
        encoded = array if pa.types.is_dictionary(kind) else pc.dictionary_encode(array)
        values = encoded.dictionary
        distinct = _hash_bytes(values) if _is_bytes(values.type) else hash_array(values)
        if values.null_count:
            distinct[np.asarray(values.is_null())] = _NULL
        indices = encoded.indices                  # a null index picks the appended null hash
        distinct = np.append(distinct, _NULL)
        h = distinct[np.asarray(indices.fill_null(len(values)) if indices.null_count else indices)]
    elif pa.types.is_floating(kind):
        floats = array.cast(pa.float64())
        h = _mix((np.asarray(floats.fill_null(0.0)) + 0.0).view(_U64))   # -0.0 becomes 0.0
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind) or (
            pa.types.is_temporal(kind) and kind.bit_width <= 64):
        ints = array.cast(pa.int32()) if kind.bit_width == 32 else array   # date32, time32
        ints = ints.cast(pa.int64(), safe=False)
        h = _mix(np.array(ints.fill_null(0) if ints.null_count else ints).view(_U64))
    elif pa.types.is_null(kind):
        h = np.full(len(array), _NULL)
    else:
        raise TypeError(f"cannot hash a key column of type {kind}: use integer, floating, "
                        f"temporal, boolean, string, binary or dictionary columns")
    if array.null_count:
        h[np.asarray(array.is_null())] = _NULL
    return h


def hash_rows(batch: pa.RecordBatch | pa.Table, key: str | Sequence[str]) -> np.ndarray:
    """A uint64 hash per row of the ``key`` column(s), combined column by column.

    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"a": [1, 2, 1], "b": ["x", "y", "x"]})
    >>> h = hash_rows(batch, ["a", "b"])
    >>> bool(h[0] == h[2]), bool(h[0] == h[1])
    (True, False)
    """
    names = [key] if isinstance(key, str) else list(key)
    h = None
    for name in names:
        if name not in batch.schema.names:
            raise KeyError(f"key column {name!r} is not in the batch's schema "
                           f"(columns {', '.join(batch.schema.names)})")
        column = hash_array(batch.column(name))
        h = column if h is None else _mix(h * _GOLDEN + column)
    if h is None:
        raise ValueError("partitioning by key needs at least one key column")
    return h
