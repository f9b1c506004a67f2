"""Hashes that are the same in every process, on every host and in every run.

Routing a record to worker ``h(key) % peers`` is only right if every worker computes the same
``h``. Python's built-in ``hash`` of a ``str`` or ``bytes`` is salted per interpreter
(``PYTHONHASHSEED``): in a job of several processes or hosts one key would land on several
workers and keyed results would be wrong. :func:`stable_hash` hashes Python values;
:func:`hash_array` and :func:`hash_rows` hash Arrow columns without a Python loop over rows
(strings from Arrow's 16-byte views and then 8 bytes at a time, never a pass per byte and
never a dictionary per batch, unless long values repeat a lot).
Each path is deterministic on its own; the two are different functions (a key travelling as a
Python object and the same key in an Arrow column need not hash alike). :func:`stable_hash` is
built on XXH3, from the ``xxhash`` package where it is installed and otherwise from
``sparktimely._xxh3`` (Python and numpy, the same values, slower): a Spark executor whose Python
lacks ``xxhash`` routes every key as the driver does.

>>> stable_hash("apple") == stable_hash("apple"), 0 <= stable_hash(("apple", 3)) < 2 ** 64
(True, True)
"""
from __future__ import annotations

import builtins
import dis
import functools
import struct
import types
from numbers import Integral
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from .progress.timestamp import Product

try:                            # (xxh3_128_hexdigest: the checkpoints' file digests)
    from xxhash import xxh3_64_intdigest, xxh3_128_hexdigest
except ImportError:             # a host with only the core packages: the same values, in Python
    from ._xxh3 import xxh3_64_intdigest, xxh3_128_hexdigest

__all__ = ["calls_hash", "hash_array", "hash_rows", "stable_hash"]

Routed = int | np.integer[Any]
"""What a route returns: a record (or key) goes to worker ``route(x) % peers``."""
Route = Callable[[Any], Routed]
"""A route function (an exchange's, a keyed operator's)."""

_MASK = (1 << 64) - 1
_SEED_STR, _SEED_BYTES, _SEED_INT, _SEED_BIG, _SEED_FLOAT = 1, 2, 3, 4, 5
_NONE_HASH = 0x6E756C6C6E756C6C
_TUPLE_START, _PRODUCT_START = 0x7475706C65000000, 0x70726F6475637400
_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")
_NAN_BYTES = _FLOAT64.pack(float("nan"))
"""The bytes every NaN is hashed as: NaNs of another sign or payload (``inf - inf`` is a
negative one) are one key, as ``one_nan`` and Arrow's grouping take them."""


def _combine(h: int, element: int) -> int:
    """Fold ``element``'s hash into ``h`` (order matters: ``(a, b)`` and ``(b, a)`` differ)."""
    return xxh3_64_intdigest(_PAIR.pack(h, element))


_PAIR = struct.Struct("<QQ")


def stable_hash(x: Any) -> int:
    """A 64-bit hash of ``x`` that every process, host and run agrees on.

    Hashes ints (and bools, and numpy's integers and bools), strings, bytes, floats (and
    numpy's), None, tuples of these and :class:`~sparktimely.Product` times. Values that
    compare equal hash equally within that set (``2 == 2.0 == numpy.int64(2)``, so
    ``stable_hash(2) == stable_hash(2.0)``). Other values raise TypeError naming their type.
    Use it in routes, e.g. ``exchange(lambda w: stable_hash(w))`` or
    ``Exchange(lambda kv: stable_hash(kv[0]))``.

    >>> stable_hash("word") == stable_hash("word"), stable_hash("word") == stable_hash(b"word")
    (True, False)
    >>> stable_hash(7) == stable_hash(7.0), stable_hash((1, "a")) == stable_hash((1, "a"))
    (True, True)
    >>> import numpy as np
    >>> stable_hash(np.int64(7)) == stable_hash(7) == stable_hash(np.uint8(7))
    True
    >>> stable_hash([1, 2])
    Traceback (most recent call last):
    ...
    TypeError: stable_hash cannot hash a list ([1, 2]): use ints, strings, bytes, floats, None, tuples of these or Product
    """
    cls = x.__class__
    if cls is str:
        return xxh3_64_intdigest(x.encode("utf-8", "surrogatepass"), _SEED_STR)
    if cls is int:
        if -(1 << 63) <= x < 1 << 63:
            return xxh3_64_intdigest(_INT64.pack(x), _SEED_INT)
        return xxh3_64_intdigest(x.to_bytes((x.bit_length() + 8) // 8, "little",
                                                signed=True), _SEED_BIG)
    if cls is tuple:
        h = _TUPLE_START + len(x)
        for element in x:
            h = _combine(h, stable_hash(element))
        return h
    if cls is bytes:
        return xxh3_64_intdigest(x, _SEED_BYTES)
    if cls is Product:
        return _combine(_combine(_PRODUCT_START, stable_hash(x.outer)),
                        stable_hash(x.inner))
    if cls is float:
        if x.is_integer():
            return stable_hash(int(x))
        return xxh3_64_intdigest(_FLOAT64.pack(x) if x == x else _NAN_BYTES, _SEED_FLOAT)
    if x is None:
        return _NONE_HASH
    if cls is bool:
        return stable_hash(int(x))
    if isinstance(x, (str, int, float, bytes, tuple)):    # subclasses: hash the value
        bases: tuple[Any, ...] = (int, str, float, bytes, tuple)
        for base in bases:
            if isinstance(x, base):
                return stable_hash(base(x))
    if isinstance(x, (Integral, np.bool_)):     # numpy's integers and bools: as the int
        return stable_hash(int(x))              # they equal
    if isinstance(x, np.floating):              # numpy's float32 and float16: as the float
        return stable_hash(float(x))
    raise TypeError(f"stable_hash cannot hash a {cls.__name__} ({x!r:.60}): use ints, "
                    f"strings, bytes, floats, None, tuples of these or Product")


# -- routes that use the salted hash ------------------------------------------------------

def calls_hash(function: Any) -> bool:
    """Whether ``function`` (a route) calls Python's salted built-in ``hash``, directly or
    through the functions it names (globals, module attributes, closures, ``partial``), as
    far as can be seen without running it: workers whose ``hash`` differs warn only about a
    dataflow with such a route. Methods called on the records are not followed.

    >>> calls_hash(lambda word: hash(word)), calls_hash(hash)
    (True, True)
    >>> calls_hash(lambda kv: stable_hash(kv[0])), calls_hash(lambda x: x % 7)
    (False, False)
    """
    return _calls_hash(function, set())


_FOLLOWED = 200
"""How many functions :func:`calls_hash` looks through before it assumes the worst."""


def _calls_hash(function: Any, seen: set[int]) -> bool:
    if function is builtins.hash:
        return True
    if id(function) in seen or function is stable_hash or isinstance(function, type):
        return False
    if len(seen) >= _FOLLOWED:
        return True                 # too much to look through: it may
    seen.add(id(function))
    if isinstance(function, functools.partial):
        return any(_calls_hash(f, seen) for f in (function.func, *function.args) if callable(f))
    function = getattr(function, "__func__", function)              # a bound method
    code = getattr(function, "__code__", None)
    if code is None:                # compiled code other than hash; or a callable object
        call = getattr(type(function), "__call__", None)
        return hasattr(call, "__code__") and _calls_hash(call, seen)
    cells = [cell.cell_contents for cell in function.__closure__ or ()
             if cell.cell_contents is not None]
    named = dict(vars(builtins), **getattr(function, "__globals__", {}))
    modules = [value for value in named.values() if isinstance(value, types.ModuleType)]
    codes, referred = [code], list(cells)
    while codes:
        for instruction in dis.get_instructions(codes.pop()):
            name = instruction.argval
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF"):
                if name == "hash":
                    return True
                referred.append(named.get(name))
            elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                if name == "__hash__":
                    return True
                referred += [getattr(module, name, None) for module in modules]
            elif instruction.opname == "LOAD_CONST" and isinstance(name, types.CodeType):
                codes.append(name)
    return any(_calls_hash(f, seen) for f in referred
               if callable(f) and not isinstance(f, types.ModuleType))


# -- Arrow columns -------------------------------------------------------------------------

_U64 = np.uint64
_NAN_BITS = np.frombuffer(_NAN_BYTES, _U64)[0]
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_NULL = _U64(0x6E756C6C6E756C6C)      # the hash of a null, in every column type
_ARROW_INT64 = pa.int64()


_SMALL = 16
"""Arrays at most this long are mixed with Python integers: a numpy operation costs about a
microsecond whatever its length, and a mix is six of them, where a loop over a few values in
Python costs a fraction of that (a one-row update is hashed in ~1 us instead of ~9)."""


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 (increment, then finaliser), in place on a uint64 array.

    >>> [hex(v) for v in _mix(np.array([0, 42], np.uint64)).tolist()]
    ['0xe220a8397b1dcdaf', '0xbdd732262feb6e95']
    """
    if len(h) <= _SMALL:
        h[:] = [_mix_int(v) for v in h.tolist()]
        return h
    h += _GOLDEN
    h ^= h >> _U64(30)
    h *= _M1
    h ^= h >> _U64(27)
    h *= _M2
    h ^= h >> _U64(31)
    return h


def _mix_int(v: int) -> int:
    """:func:`_mix` of one value, in Python integers (the same result)."""
    v = (v + 0x9E3779B97F4A7C15) & _MASK
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & _MASK
    return v ^ (v >> 31)


def _is_bytes(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t))


_FMIX = _U64(0xFF51AFD7ED558CCD)   # murmur3's fmix64 multiplier
_S29, _S32 = _U64(29), _U64(32)


def _as_view(values: pa.Array) -> pa.Array:
    """``values`` (string or binary of any layout) as a string_view or binary_view array: a
    16-byte view per value whose first word holds the length and the first 4 bytes and whose
    second word holds bytes 4 to 11, zero-padded, when the value has at most 12 bytes (the
    Arrow format's inline layout). pyarrow's cast does this in C++, without a copy of the
    bytes."""
    kind = values.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return values
    if values.offset > len(values) // 8:
        values = pa.concat_arrays([values])     # the cast would make views for the rows before
    if pa.types.is_fixed_size_binary(kind):
        values = values.cast(pa.binary())
    return values.cast(pa.string_view() if pa.types.is_string(kind)
                       or pa.types.is_large_string(kind) else pa.binary_view())


def _words_at(data: pa.Buffer, positions: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """The little-endian 8-byte words of ``data`` at byte ``positions`` (any alignment), each
    cut to its first ``keep`` bytes (1 to 8, the rest zero; None: all 8). A word that would
    run past the buffer's end is read where it ends and shifted down."""
    size = data.size
    if size < 8:                                    # too short for one word: pad a copy
        padded = np.zeros(8, np.uint8)
        padded[:size] = np.frombuffer(data, np.uint8, size)
        data, size = pa.py_buffer(padded), 8
    view = np.ndarray((size - 7,), "V8", data, 0, (1,))          # a word at every byte
    if positions.max(initial=0) <= size - 8:
        words = view[positions].view("<u8")
    else:
        clamped = np.minimum(positions, size - 8)
        words = view[clamped].view("<u8")
        words >>= ((positions - clamped) * 8).astype(_U64)
    if keep is not None:
        shift = (8 - keep.astype(_U64)) * _U64(8)
        words <<= shift
        words >>= shift
    return words


def _hash_bytes(values: pa.Array) -> np.ndarray:
    """Hashes of the values of a string or binary array, computed from 8-byte words of the
    bytes, never byte by byte: a value's head (its length and first 12 bytes, zero-padded) is
    the 16-byte view Arrow's view layout keeps for it, so values of at most 12 bytes are
    hashed from the views alone; longer ones also fold in their further bytes 8 at a time."""
    views = _as_view(values)
    n = len(views)
    raw = views.buffers()[1]
    words = np.frombuffer(raw, _U64, 2 * n, 16 * views.offset).reshape(n, 2)
    lengths = np.frombuffer(raw, np.uint32, 4 * n, 16 * views.offset)[::4]
    second = words[:, 1]
    if len(views.buffers()) > 2 and n and lengths.max() > 12:     # else every value is inline
        if n > 4 * _SAMPLE and _repetitive(values):
            return _hash_distinct(values)
        long = np.flatnonzero(lengths > 12)
        if views.null_count:
            long = long[np.asarray(views.is_valid())[long]]   # a null's view may be anything
        if len(long) == n:
            second = _long_words(views, slice(None), lengths)
        elif len(long):
            second = second.copy()
            second[long] = _long_words(views, long, lengths[long])
    h = np.empty(n, _U64)
    scratch = np.empty(min(n, _CHUNK), _U64)
    for start in range(0, n, _CHUNK):       # in pieces that stay in the CPU's cache
        part, end = h[start:start + _CHUNK], start + _CHUNK
        np.add(words[start:end, 0], _FMIX, out=part)  # (so that the empty value's hash is not 0)
        part *= _GOLDEN
        part ^= second[start:end]
        _finish(part, scratch[:len(part)])
    return h


_SAMPLE = 4096
_CHUNK = 1 << 15
"""Rows hashed at a time: the temporaries of a piece stay in the CPU's cache, where those
of a whole large column would be fresh memory for every pass."""


def _repetitive(values: pa.Array) -> bool:
    """Whether ``values`` likely hold fewer than a quarter as many distinct values as rows
    (estimated from the repeats among evenly spaced rows, as in the birthday problem): long
    values are then cheaper to hash once per distinct value."""
    rows = np.linspace(0, len(values) - 1, _SAMPLE).astype(np.int64)
    kind = values.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        # pyarrow has no take (nor count_distinct) for views: the sampled rows one by one,
        # then in the large layout (casting the whole column would copy all its bytes)
        sample = pa.concat_arrays([values.slice(row, 1) for row in rows.tolist()]).cast(
            pa.large_string() if pa.types.is_string_view(kind) else pa.large_binary())
    else:
        sample = values.take(rows)
    repeats = _SAMPLE - pc.count_distinct(sample, mode="all").as_py()
    return repeats > 0 and _SAMPLE ** 2 / (2 * repeats) < len(values) / 4


def _hash_distinct(values: pa.Array) -> np.ndarray:
    """:func:`_hash_bytes` through a dictionary: each distinct value hashed once."""
    encoded = pc.dictionary_encode(values)
    return _by_dictionary(encoded, _hash_bytes(encoded.dictionary))


def _by_dictionary(encoded: pa.DictionaryArray, distinct: np.ndarray) -> np.ndarray:
    """Each row's hash picked from the hashes of its dictionary's values (a null row gets
    the null hash)."""
    distinct = np.append(distinct, _NULL)
    indices = encoded.indices
    if indices.null_count:      # the null row's index: one past the dictionary (in int64)
        indices = indices.cast(pa.int64()).fill_null(len(distinct) - 1)
    return distinct[np.asarray(indices)]


def _long_words(views: pa.Array, rows: np.ndarray | slice,
                lengths: np.ndarray) -> np.ndarray:
    """For the values at ``rows`` (longer than 12 bytes): their bytes 4 to 11 as a word, with
    their bytes from 12 on folded in, 8 at a time (the last word zero-padded)."""
    data = views.buffers()[2:]
    layout = np.frombuffer(views.buffers()[1], np.uint32, 4 * len(views),
                           16 * views.offset).reshape(-1, 4)
    offsets = layout[:, 3][rows].astype(np.int64)
    buffers = layout[:, 2][rows] if len(data) > 1 else None
    lengths = lengths.astype(np.int64)
    folded = np.empty(len(lengths), _U64)
    for index in range(len(data)) if buffers is not None else [0]:
        mine = np.flatnonzero(buffers == index) if buffers is not None else slice(None)
        start, left = offsets[mine] + 12, lengths[mine] - 12
        h = _words_at(data[index], start - 8, None)             # bytes 4 to 11: all there
        if not len(h):
            continue
        more = None                                             # None: every value
        while True:                     # one word of every value that still has bytes
            short = left.min() < 8
            word = _words_at(data[index], start, np.minimum(left, 8) if short else None)
            if more is None:
                h *= _FMIX
                h ^= word
                _finish(h)
            else:
                h[more] = _finish(h[more] * _FMIX ^ word)
            if left.max() <= 8:
                break
            if short or left.min() <= 8:
                going = np.flatnonzero(left > 8)
                more = going if more is None else more[going]
                start, left = start[going], left[going]
            start += 8
            left -= 8
        folded[mine] = h
    return folded


def _finish(h: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Mix a uint64 array in place so that every bit of the input moves the low bits
    (xorshift-multiply-xorshift); ``scratch``, if given, is a temporary of ``h``'s length."""
    if len(h) <= _SMALL:
        h[:] = [_finish_int(v) for v in h.tolist()]
        return h
    high = np.right_shift(h, _S32, out=scratch)
    h ^= high
    h *= _FMIX
    np.right_shift(h, _S29, out=high)
    h ^= high
    return h


def _finish_int(v: int) -> int:
    """:func:`_finish` of one value, in Python integers (the same result)."""
    v = ((v ^ (v >> 32)) * 0xFF51AFD7ED558CCD) & _MASK
    return v ^ (v >> 29)


def hash_array(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A deterministic uint64 hash per value: equal values hash equally across processes,
    hosts, integer widths, integers and floats (``1`` and ``1.0``), and plain, large or
    dictionary-encoded strings; nulls hash alike.

    >>> import pyarrow as pa
    >>> a = hash_array(pa.array(["x", None, "y"]))
    >>> b = hash_array(pa.array(["y", "x", None], pa.large_string()).dictionary_encode())
    >>> [int(a[i]) == int(b[j]) for i, j in [(0, 1), (1, 2), (2, 0)]]
    [True, True, True]
    >>> bool(hash_array(pa.array([7], pa.int8()))[0] == hash_array(pa.array([7]))[0])
    True
    >>> (hash_array(pa.array([7.0, -2.0, 0.5])) == hash_array(pa.array([7, -2, 0]))).tolist()
    [True, True, False]
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    kind = array.type
    if kind == _ARROW_INT64 and not array.null_count:         # the usual key: no type dispatch
        return _mix(array.to_numpy().astype(_U64))
    if _is_bytes(kind):
        h = _hash_bytes(array)
    elif pa.types.is_dictionary(kind):
        h = _by_dictionary(array, hash_array(array.dictionary))
    elif pa.types.is_floating(kind):
        if kind == pa.float16():
            raise TypeError("cannot key on a float16 column (Arrow compares no half floats): "
                            "cast it to float32 or float64")
        floats = np.asarray(array.cast(pa.float64()).fill_null(0.0)) + 0.0  # -0.0 becomes 0.0
        whole = floats == np.trunc(floats)  # hashed as the equal integer: 1.0 joins 1
        signed = whole & (floats >= -2.0 ** 63) & (floats < 2.0 ** 63)
        unsigned = whole & (floats >= 2.0 ** 63) & (floats < 2.0 ** 64)   # as uint64's bits
        nan = np.isnan(floats)              # of any sign or payload: one NaN
        # every mask is taken before the first write: ``bits`` is a view of ``floats`` (our
        # own new array, changed in place), and an integer's bits read as a float may be a
        # NaN or a float in the unsigned range
        bits = floats.view(_U64)
        if signed.any():
            bits[signed] = floats[signed].astype(np.int64).view(_U64)
        if unsigned.any():
            bits[unsigned] = floats[unsigned].astype(_U64)
        if nan.any():
            bits[nan] = _NAN_BITS
        h = _mix(bits)
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        ints = array.cast(pa.int64(), safe=False)
        h = _mix(np.array(ints.fill_null(0) if ints.null_count else ints).view(_U64))
    elif pa.types.is_temporal(kind) and kind.bit_width <= 64:
        h = _mix(_instants(array) ^ _TEMPORAL_TAGS[temporal_family(kind)])
    elif pa.types.is_null(kind):
        h = np.full(len(array), _NULL)
    else:
        raise TypeError(f"cannot hash a key column of type {kind}: use integer, floating, "
                        f"temporal, boolean, string, binary or dictionary columns")
    if array.null_count:
        h[np.asarray(array.is_null())] = _NULL
    return h


_PER_MICROSECOND = {"s": 1_000_000, "ms": 1_000, "us": 1}
_TEMPORAL_TAGS = {family: _U64(tag) for family, tag in (
    ("timestamp", 0x74696D657374616D), ("timestamp with a time zone", 0x74696D657A6F6E65),
    ("date", 0x6461746564617465), ("time of day", 0x74696D656F666461),
    ("duration", 0x6475726174696F6E))}


def temporal_family(kind: pa.DataType) -> str:
    """Which of Python's kinds of time values a temporal Arrow type holds: values of two
    families never compare equal in Python (a ``datetime`` and a ``date``, a naive and an
    aware ``datetime``), values of one family do whatever their units.

    >>> temporal_family(pa.timestamp("ms")), temporal_family(pa.timestamp("s", tz="UTC"))
    ('timestamp', 'timestamp with a time zone')
    >>> temporal_family(pa.date64()), temporal_family(pa.time32("s"))
    ('date', 'time of day')
    """
    if pa.types.is_timestamp(kind):
        return "timestamp with a time zone" if kind.tz is not None else "timestamp"
    if pa.types.is_date(kind):
        return "date"
    if pa.types.is_time(kind):
        return "time of day"
    return "duration"


def _instants(array: pa.Array) -> np.ndarray:
    """A temporal column's values as one unit whatever the column's (uint64 bits): days for
    dates, whole microseconds (Python's resolution) for the others, so that equal values in
    two units hash alike; nanoseconds within one microsecond share it (a collision that
    the comparison of the values settles).

    >>> import datetime as dt
    >>> day = dt.datetime(2020, 1, 1, 0, 0, 1)
    >>> [int(_instants(pa.array([day], pa.timestamp(unit)))[0]) for unit in ("s", "ms", "ns")]
    [1577836801000000, 1577836801000000, 1577836801000000]
    """
    kind = array.type
    width = pa.int32() if kind.bit_width == 32 else pa.int64()          # date32, time32
    values = array.cast(width).cast(pa.int64())
    ints = np.array(values.fill_null(0) if values.null_count else values, np.int64)
    if pa.types.is_date64(kind):
        ints //= 86_400_000                                 # milliseconds to days
    elif not pa.types.is_date(kind):
        unit = kind.unit
        if unit == "ns":
            ints //= 1_000
        elif unit != "us":
            ints *= _PER_MICROSECOND[unit]                  # (wraps beyond 292,000 years)
    return ints.view(_U64)


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
        try:
            column = hash_array(batch.column(name))
        except TypeError as error:
            raise TypeError(f"key column {name!r}: {error}") from None
        h = column if h is None else _mix(h * _GOLDEN + column)
    if h is None:
        raise ValueError("partitioning by key needs at least one key column")
    return h
