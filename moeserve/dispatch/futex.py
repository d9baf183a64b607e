"""Linux futexes on words of a shared mapping: a waiter sleeps in the kernel until the word changes and
the writer wakes it, so a rank whose peer is descheduled gives its core away and is woken (with the
scheduler's wake-up preference) the moment the peer's flag lands, instead of polling for it.

A futex on a MAP_SHARED page is keyed by the page, not the address, so processes that map the same
segment at different addresses wait and wake on the same word. Only the low 32 bits of a word take
part (x86-64 is little-endian: the low half of an int64 flag changes with every epoch).
`available()` is False off Linux x86-64 or without libc's syscall(); callers then poll.
"""
from __future__ import annotations

import ctypes
import errno
import platform
import sys

_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not FUTEX_PRIVATE_FLAG): waiters and wakers are processes
_WAKE_ALL = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _syscall():
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # releases the GIL around the call
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_int]
    return fn


_call = _syscall()


def available() -> bool:
    return _call is not None


def wait(address: int, expected: int, timeout_s: float) -> None:
    """Sleeps while the 32-bit word at `address` holds `expected` (low 32 bits), at most timeout_s,
    until a `wake` on it. Returns at once when the word already differs; may return early."""
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    low = expected & 0xFFFFFFFF
    r = _call(_SYS_FUTEX, address, _FUTEX_WAIT, low - (1 << 32) if low >> 31 else low, ctypes.byref(ts), None, 0)
    if r < 0:
        e = ctypes.get_errno()
        assert e in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR), f"futex wait failed: {errno.errorcode.get(e, e)}"


def wake(address: int) -> None:
    """Wakes every process sleeping in `wait` on the word at `address` (a no-op when none is)."""
    _call(_SYS_FUTEX, address, _FUTEX_WAKE, _WAKE_ALL, None, None, 0)
