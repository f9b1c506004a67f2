"""Helpers for the two kinds of batches the runtime moves: Python lists and
``pyarrow.RecordBatch``.

Arrow batches are partitioned without a Python loop over rows: the key columns are hashed
with numpy (a splitmix64 finaliser; strings are dictionary-encoded and only the distinct
values are hashed, byte by byte, with a polynomial over the value buffers), rows are ordered
by destination with one stable radix sort and one ``take``, and each worker gets a zero-copy
slice. Hashes depend only on the values, never on the process (no salted ``hash()``): the same
key goes to the same worker on every host, whatever its integer width or string encoding.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
                           f"({format_schema(batch.schema)})")
        column = hash_array(batch.column(name))
        h = column if h is None else _mix(h * _GOLDEN + column)
    if h is None:
        raise ValueError("partitioning by key needs at least one key column")
    return h


def partition_batch(batch: Any, key: str | Sequence[str] | None,
                    route: Callable[[Any], Any] | None, peers: int) -> list:
    """The batch split into ``peers`` parts, part ``w`` for worker ``w``.

    A list goes record by record to ``route(record) % peers``. A RecordBatch goes row by row
    by the hash of its ``key`` column(s), or by ``route(batch)``, which returns one integer
    per row; its parts are zero-copy slices of one reordered copy (or the batch itself when
    every row goes to one worker).

    >>> import pyarrow as pa
    >>> partition_batch([1, 2, 3], None, lambda x: x, 2)
    [[2], [1, 3]]
    >>> parts = partition_batch(pa.record_batch({"k": [5, 6, 5, 7]}), "k", None, 2)
    >>> sorted(sum((p.column("k").to_pylist() for p in parts), []))
    [5, 5, 6, 7]
    >>> [p.num_rows for p in partition_batch(pa.record_batch({"k": [4, 1]}), None,
    ...                                      lambda b: b.column("k"), 2)]
    [1, 1]
    """
    if batch.__class__ is list:
        if route is None:
            raise TypeError("Exchange(key=...) partitions Arrow batches; this stream carries "
                            "Python objects: use Exchange(route)")
        parts: list[list] = [[] for _ in range(peers)]
        appends = [part.append for part in parts]
        for record in batch:
            appends[route(record) % peers](record)
        return parts
    if key is not None:
        dest = hash_rows(batch, key) % _U64(peers)
    else:
        dest = np.asarray(route(batch))
        if dest.shape != (batch.num_rows,) or dest.dtype.kind not in "iu":
            raise ValueError(f"an Exchange route for Arrow batches must return one integer "
                             f"per row ({batch.num_rows}), got {dest.dtype} of shape "
                             f"{dest.shape}")
        low, high = (int(dest.min()), int(dest.max())) if dest.size else (0, 0)
        if low == high:                                      # one destination: no work
            return _all_to(batch, low % peers, peers)
        if low < 0 or high >= peers:
            dest = dest % peers
    dest = dest.astype(np.uint8 if peers <= 256 else np.uint16 if peers <= 65536 else np.int64)
    counts = np.bincount(dest, minlength=peers)
    if counts.max(initial=0) == batch.num_rows:              # one destination: no copy
        return _all_to(batch, int(counts.argmax()), peers)
    ordered = batch.take(np.argsort(dest, kind="stable"))  # radix sort for small integers
    starts = np.cumsum(counts) - counts
    return [ordered.slice(start, n) for start, n in zip(starts.tolist(), counts.tolist())]


def _all_to(batch: pa.RecordBatch, target: int, peers: int) -> list:
    return [batch if worker == target else batch.slice(0, 0) for worker in range(peers)]


def format_schema(schema: pa.Schema) -> str:
    """A schema on one line.

    >>> import pyarrow as pa
    >>> format_schema(pa.schema([("w", pa.string()), pa.field("n", pa.int64(), False)]))
    'w: string, n: int64 not null'
    """
    return ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)


def check_schema(expected: pa.Schema | None, schema: pa.Schema, what: str) -> pa.Schema:
    """``schema``, if it equals ``expected`` (ignoring metadata) or nothing is expected yet;
    else a ValueError naming both.

    >>> import pyarrow as pa
    >>> check_schema(pa.schema([("x", pa.int64())]), pa.schema([("x", pa.string())]), "send")
    Traceback (most recent call last):
    ...
    ValueError: send: the batch's schema (x: string) differs from the stream's schema (x: int64)
    """
    if expected is not None and not schema.equals(expected):
        raise ValueError(f"{what}: the batch's schema ({format_schema(schema)}) differs from "
                         f"the stream's schema ({format_schema(expected)})")
    return schema


def arrow_batches(items: Any, schema: pa.Schema | None = None,
                  what: str = "stream") -> tuple[list[pa.RecordBatch], pa.Schema] | None:
    """For a Table, a RecordBatch or a non-empty list of them: their non-empty batches and
    their schema, checked to be one (and ``schema``, if given). None for anything else.

    >>> import pyarrow as pa
    >>> t = pa.table({"x": [1, 2]})
    >>> batches, schema = arrow_batches([t, t.slice(0, 0), t.to_batches()[0]])
    >>> [b.num_rows for b in batches], schema.names
    ([2, 2], ['x'])
    >>> arrow_batches([1, 2]) is None
    True
    """
    if isinstance(items, (pa.Table, pa.RecordBatch)):
        items = [items]
    if not (isinstance(items, (list, tuple)) and items
            and all(isinstance(x, (pa.Table, pa.RecordBatch)) for x in items)):
        return None
    for x in items:
        schema = check_schema(schema, x.schema, what)
    batches = [b for x in items for b in (x.to_batches() if isinstance(x, pa.Table) else [x])]
    return [b for b in batches if b.num_rows], schema
