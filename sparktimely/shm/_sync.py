"""Futex and full-fence primitives through ctypes (Linux, x86-64 or aarch64).

The futex calls omit FUTEX_PRIVATE_FLAG, so a word in a MAP_SHARED mapping works as a wait
queue between any processes that map the same file, related or not. ``fence`` is a full
(sequentially consistent) barrier: libatomic's ``atomic_thread_fence`` when the library is
present, else glibc's ``pthread_spin_trylock`` on a private lock (a ``lock cmpxchg`` on x86).
"""
from __future__ import annotations

import ctypes
import platform
from functools import partial

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}[platform.machine()]
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1

# x86-64 keeps stores in order and loads in order (TSO); elsewhere head/tail publication needs fences.
WEAK_ORDERING = platform.machine() != "x86_64"

_libc = ctypes.CDLL(None, use_errno=True)  # CDLL releases the GIL while a futex waits
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wait(address: int, expected: int, timeout: float | None) -> None:
    """Sleep while the u32 at ``address`` equals ``expected``, at most ``timeout`` seconds.

    Returns on wake, timeout, signal, or at once if the word already differs; callers re-check.
    """
    ts = None
    if timeout is not None:
        timeout = max(timeout, 0.0)
        ts = ctypes.byref(_Timespec(int(timeout), int(timeout % 1 * 1e9)))
    _syscall(_SYS_FUTEX, address, _FUTEX_WAIT, expected, ts, None, 0)


def futex_wake(address: int, count: int = 1) -> None:
    """Wake up to ``count`` waiters on the u32 at ``address``."""
    _syscall(_SYS_FUTEX, address, _FUTEX_WAKE, count, None, None, 0)


def _make_fence():
    try:
        fn = ctypes.PyDLL("libatomic.so.1").atomic_thread_fence
        fn.argtypes, fn.restype = [ctypes.c_int], None
        return partial(fn, 5)  # memory_order_seq_cst
    except (OSError, AttributeError):
        trylock = ctypes.PyDLL(None).pthread_spin_trylock
        trylock.argtypes, trylock.restype = [ctypes.c_void_p], ctypes.c_int
        return partial(trylock, ctypes.addressof(_LOCK))


_LOCK = ctypes.c_int(0)  # the trylock result is irrelevant: the locked instruction is the fence
fence = _make_fence()
