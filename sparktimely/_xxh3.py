"""XXH3 (64 and 128 bits, with a seed) in Python and numpy, giving the values of the
``xxhash`` package, for the hosts that lack it.

``sparktimely.hashing`` uses ``xxhash`` when it is installed and these otherwise, so
:func:`sparktimely.stable_hash` and the checkpoints' digests are the same on a Spark
executor whose Python has only numpy, pyarrow, psutil and multiprocess as on the driver.
Short inputs (what ``stable_hash`` hashes: 8- and 16-byte words, most strings) take a few
integer operations; inputs over 240 bytes run XXH3's stripe loop as numpy array operations,
one Python step per kilobyte. Follows the reference implementation (xxHash 0.8,
``XXH3_64bits_withSeed`` and ``XXH3_128bits_withSeed``) path by path.

>>> xxh3_64_intdigest(b"")
3244421341483603138
>>> xxh3_128_hexdigest(b"sparktimely")[:8] == xxh3_128_hexdigest(bytearray(b"sparktimely"))[:8]
True
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = ["xxh3_128_hexdigest", "xxh3_64_intdigest"]

_M = (1 << 64) - 1
_P32_1, _P32_2, _P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_P64_1, _P64_2, _P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P64_4, _P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_PMX1, _PMX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25

_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
_SECRET_MIN = 136                    # the 129-240 path indexes its tail from this size
_STRIPE, _LANES = 64, 8
_STRIPES_PER_BLOCK = (len(_SECRET) - _STRIPE) // 8
_BLOCK = _STRIPE * _STRIPES_PER_BLOCK


def _r64(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 8], "little")


def _r32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "little")


_U64 = struct.Struct("<Q").unpack_from
_U32 = struct.Struct("<I").unpack_from
_FLIP_0 = _r64(_SECRET, 56) ^ _r64(_SECRET, 64)
_FLIP_1 = _r32(_SECRET, 0) ^ _r32(_SECRET, 4)
_FLIP_4 = _r64(_SECRET, 8) ^ _r64(_SECRET, 16)
_FLIP_9, _FLIP_9B = _r64(_SECRET, 24) ^ _r64(_SECRET, 32), _r64(_SECRET, 40) ^ _r64(_SECRET, 48)


def _swap32(x: int) -> int:
    return int.from_bytes(x.to_bytes(4, "little"), "big")


def _swap64(x: int) -> int:
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _fold(a: int, b: int) -> int:
    """The 128-bit product of two 64-bit words, its halves xor-ed."""
    p = a * b
    return (p ^ (p >> 64)) & _M


def _avalanche(h: int) -> int:
    h ^= h >> 37
    h = (h * _PMX1) & _M
    return h ^ (h >> 32)


def _avalanche64(h: int) -> int:
    """XXH64's avalanche."""
    h ^= h >> 33
    h = (h * _P64_2) & _M
    h ^= h >> 29
    h = (h * _P64_3) & _M
    return h ^ (h >> 32)


def _rrmxmx(h: int, length: int) -> int:
    h ^= ((h << 49 | h >> 15) ^ (h << 24 | h >> 40)) & _M
    h = (h * _PMX2) & _M
    h ^= (h >> 35) + length
    h = (h * _PMX2) & _M
    return h ^ (h >> 28)


def _mix16(data: bytes, at: int, secret: bytes, key: int, seed: int) -> int:
    return _fold(_r64(data, at) ^ ((_r64(secret, key) + seed) & _M),
                 _r64(data, at + 8) ^ ((_r64(secret, key + 8) - seed) & _M))


def _bytes(data: Any) -> bytes:
    if data.__class__ is bytes:
        return data
    if isinstance(data, str):
        raise TypeError("Strings must be encoded before hashing")
    return memoryview(data).cast("B").tobytes()


# -- 64 bits --------------------------------------------------------------------------------

def xxh3_64_intdigest(data: Any, seed: int = 0) -> int:
    """XXH3-64 of ``data`` (bytes or any buffer) with ``seed``, as ``xxhash`` gives it.

    >>> xxh3_64_intdigest(b"a", 3) == xxh3_64_intdigest(memoryview(b"a"), 3)
    True
    """
    if data.__class__ is not bytes:
        data = _bytes(data)
    if seed.__class__ is not int or not 0 <= seed <= _M:
        seed &= _M
    n = len(data)
    if n <= 16:
        if n > 8:
            low = _U64(data, 0)[0] ^ ((_FLIP_9 + seed) & _M)
            high = _U64(data, n - 8)[0] ^ ((_FLIP_9B - seed) & _M)
            return _avalanche((n + _swap64(low) + high + _fold(low, high)) & _M)
        if n >= 4:
            seed ^= _swap32(seed & 0xFFFFFFFF) << 32
            keyed = (_U32(data, n - 4)[0] + (_U32(data, 0)[0] << 32)) ^ ((_FLIP_4 - seed) & _M)
            return _rrmxmx(keyed, n)
        if n:
            combined = data[0] << 16 | data[n >> 1] << 24 | data[n - 1] | n << 8
            return _avalanche64(combined ^ ((_FLIP_1 + seed) & _M))
        return _avalanche64(seed ^ _FLIP_0)
    s = _SECRET
    if n <= 128:
        acc = n * _P64_1
        for i in range((n - 1) // 32, -1, -1):
            acc += _mix16(data, 16 * i, s, 32 * i, seed)
            acc += _mix16(data, n - 16 * (i + 1), s, 32 * i + 16, seed)
        return _avalanche(acc & _M)
    if n <= 240:
        acc = n * _P64_1
        for i in range(8):
            acc += _mix16(data, 16 * i, s, 16 * i, seed)
        acc = _avalanche(acc & _M)
        for i in range(8, n // 16):
            acc += _mix16(data, 16 * i, s, 16 * (i - 8) + 3, seed)
        acc += _mix16(data, n - 16, s, _SECRET_MIN - 17, seed)
        return _avalanche(acc & _M)
    secret = _secret_of(seed)
    return _merge(_long(data, secret), secret, 11, n * _P64_1)


# -- 128 bits -------------------------------------------------------------------------------

def xxh3_128_hexdigest(data: Any, seed: int = 0) -> str:
    """XXH3-128 of ``data`` with ``seed``, as ``xxhash.xxh3_128_hexdigest`` gives it (32 hex
    digits, the high word first).

    >>> len(xxh3_128_hexdigest(b"x" * 1000))
    32
    """
    high, low = _xxh3_128(_bytes(data), seed & _M)
    return f"{high:016x}{low:016x}"


def _mix32(low: int, high: int, data: bytes, first: int, second: int, s: bytes, key: int,
           seed: int) -> tuple[int, int]:
    low = ((low + _mix16(data, first, s, key, seed)) & _M) ^ (
        (_r64(data, second) + _r64(data, second + 8)) & _M)
    high = ((high + _mix16(data, second, s, key + 16, seed)) & _M) ^ (
        (_r64(data, first) + _r64(data, first + 8)) & _M)
    return low, high


def _finish128(low: int, high: int, n: int, seed: int) -> tuple[int, int]:
    h_low = (low + high) & _M
    h_high = (low * _P64_1 + high * _P64_4 + ((n - seed) & _M) * _P64_2) & _M
    return (-_avalanche(h_high)) & _M, _avalanche(h_low)


def _xxh3_128(data: bytes, seed: int) -> tuple[int, int]:
    """(high, low) words of XXH3-128."""
    n = len(data)
    s = _SECRET
    if n <= 16:
        if n > 8:
            flip_low = ((_r64(s, 32) ^ _r64(s, 40)) - seed) & _M
            flip_high = ((_r64(s, 48) ^ _r64(s, 56)) + seed) & _M
            low_in, high_in = _r64(data, 0), _r64(data, n - 8)
            m = (low_in ^ high_in ^ flip_low) * _P64_1
            m_low, m_high = m & _M, m >> 64
            m_low = (m_low + ((n - 1) << 54)) & _M
            high_in ^= flip_high
            m_high = (m_high + high_in + (high_in & 0xFFFFFFFF) * (_P32_2 - 1)) & _M
            m_low ^= _swap64(m_high)
            h = m_low * _P64_2
            h_low, h_high = h & _M, ((h >> 64) + m_high * _P64_2) & _M
            return _avalanche(h_high), _avalanche(h_low)
        if n >= 4:
            seed ^= _swap32(seed & 0xFFFFFFFF) << 32
            keyed = (_r32(data, 0) + (_r32(data, n - 4) << 32)) ^ (
                ((_r64(s, 16) ^ _r64(s, 24)) + seed) & _M)
            m = keyed * (_P64_1 + (n << 2))
            m_low, m_high = m & _M, m >> 64
            m_high = (m_high + (m_low << 1)) & _M
            m_low ^= m_high >> 3
            m_low ^= m_low >> 35
            m_low = (m_low * _PMX2) & _M
            m_low ^= m_low >> 28
            return _avalanche(m_high), m_low
        if n:
            combined = data[0] << 16 | data[n >> 1] << 24 | data[n - 1] | n << 8
            swapped = _swap32(combined)
            combined_high = ((swapped << 13) | (swapped >> 19)) & 0xFFFFFFFF
            flip_low = ((_r32(s, 0) ^ _r32(s, 4)) + seed) & _M
            flip_high = ((_r32(s, 8) ^ _r32(s, 12)) - seed) & _M
            return _avalanche64(combined_high ^ flip_high), _avalanche64(combined ^ flip_low)
        return (_avalanche64(seed ^ _r64(s, 80) ^ _r64(s, 88)),
                _avalanche64(seed ^ _r64(s, 64) ^ _r64(s, 72)))
    if n <= 128:
        low, high = (n * _P64_1) & _M, 0
        for i in range((n - 1) // 32, -1, -1):
            low, high = _mix32(low, high, data, 16 * i, n - 16 * (i + 1), s, 32 * i, seed)
        return _finish128(low, high, n, seed)
    if n <= 240:
        low, high = (n * _P64_1) & _M, 0
        for i in range(4):
            low, high = _mix32(low, high, data, 32 * i, 32 * i + 16, s, 32 * i, seed)
        low, high = _avalanche(low), _avalanche(high)
        for i in range(4, n // 32):
            low, high = _mix32(low, high, data, 32 * i, 32 * i + 16, s, 3 + 32 * (i - 4), seed)
        low, high = _mix32(low, high, data, n - 16, n - 32, s, _SECRET_MIN - 17 - 16,
                           (-seed) & _M)
        return _finish128(low, high, n, seed)
    secret = _secret_of(seed)
    acc = _long(data, secret)
    return (_merge(acc, secret, len(secret) - _STRIPE - 11, ~(n * _P64_2) & _M),
            _merge(acc, secret, 11, (n * _P64_1) & _M))


# -- inputs over 240 bytes ------------------------------------------------------------------

def _secret_of(seed: int) -> bytes:
    """The secret for ``seed``: the default one with ``seed`` added to the first word of each
    16-byte pair and subtracted from the second."""
    if not seed:
        return _SECRET
    words = np.frombuffer(_SECRET, "<u8").copy()
    words[0::2] += np.uint64(seed)
    words[1::2] -= np.uint64(seed)
    return words.tobytes()


def _keys(secret: bytes, stripes: int, offset: int = 0) -> np.ndarray:
    """The secret words stripe ``j`` (of ``stripes``) xors with: secret bytes from
    ``offset + 8 * j``, one word per lane."""
    return np.stack([np.frombuffer(secret, "<u8", _LANES, offset + 8 * j)
                     for j in range(stripes)])


def _accumulate(stripes: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """What stripes (shape ``(..., k, 8)``) add to the accumulators, summed over their
    ``k`` axis: each lane's keyed 32x32-bit product, and each lane's input to its neighbour."""
    keyed = stripes ^ keys
    products = (keyed & np.uint64(0xFFFFFFFF)) * (keyed >> np.uint64(32))
    added = products.sum(axis=-2, dtype=np.uint64)
    added += stripes.sum(axis=-2, dtype=np.uint64).reshape(*added.shape[:-1], 4, 2)[..., ::-1] \
        .reshape(added.shape)
    return added


def _long(data: bytes, secret: bytes) -> list[int]:
    """XXH3's accumulators after the stripes of ``data`` (over 240 bytes)."""
    n = len(data)
    acc = np.array([_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1], np.uint64)
    blocks = (n - 1) // _BLOCK
    keys = _keys(secret, _STRIPES_PER_BLOCK)
    scramble = np.frombuffer(secret, "<u8", _LANES, len(secret) - _STRIPE)
    words = np.frombuffer(data, "<u8", blocks * _BLOCK // 8)
    step = 1024                                       # blocks summed at once (1 MiB)
    for first in range(0, blocks, step):
        count = min(step, blocks - first)
        chunk = words[first * _BLOCK // 8:(first + count) * _BLOCK // 8]
        added = _accumulate(chunk.reshape(count, _STRIPES_PER_BLOCK, _LANES), keys)
        for row in added:
            acc += row
            acc ^= acc >> np.uint64(47)
            acc ^= scramble
            acc *= np.uint64(_P32_1)
    start = blocks * _BLOCK
    last = ((n - 1) - start) // _STRIPE
    if last:
        stripes = np.frombuffer(data, "<u8", last * _LANES, start).reshape(last, _LANES)
        acc += _accumulate(stripes, keys[:last])
    final = np.frombuffer(data, "<u8", _LANES, n - _STRIPE).reshape(1, _LANES)
    acc += _accumulate(final, _keys(secret, 1, len(secret) - _STRIPE - 7))
    return [int(x) for x in acc]


def _merge(acc: list[int], secret: bytes, offset: int, start: int) -> int:
    result = start
    for i in range(4):
        result += _fold(acc[2 * i] ^ _r64(secret, offset + 16 * i),
                        acc[2 * i + 1] ^ _r64(secret, offset + 16 * i + 8))
    return _avalanche(result & _M)
