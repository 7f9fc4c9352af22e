"""The resident memory a call adds at its peak, measured in this process (Linux).

Numba's kernels allocate outside Python's allocator, where ``tracemalloc`` does not see them;
the kernel's peak resident set does. :func:`peak_added` resets it
(``/proc/self/clear_refs``), runs the call and reads it back (``VmHWM``) against the resident
set before the call. glibc's malloc would serve a large array from memory an earlier one freed
(its threshold for mapping blocks of their own rises with the blocks freed), which the peak
would not count: the first measurement fixes the threshold (``mallopt``), so blocks of more
than 128 KiB are mapped and unmapped whole, and what a call frees before it returns is counted
at its peak and gone afterwards.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from pathlib import Path

import pytest

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _status(key: str) -> int:
    with open(_STATUS) as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


#: glibc's ``M_MMAP_THRESHOLD`` (``mallopt``) and the value it takes here (its default).
_M_MMAP_THRESHOLD, _THRESHOLD = -3, 128 << 10


@functools.cache
def _libc():
    """glibc (its ``mallopt`` and ``malloc_trim``), or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)
        return libc if hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None


def available() -> bool:
    """Whether this system lets a process reset and read its peak resident set."""
    try:
        _CLEAR.write_text("5")
        _status("VmHWM")
        return True
    except (OSError, StopIteration):
        return False


def peak_added(call) -> tuple[int, object]:
    """``(bytes, result)``: the peak resident set during ``call()`` less the resident set before
    it, and what the call returned (an exception it raises propagates). Skips the test where
    the peak cannot be reset."""
    if not available() or _libc() is None:
        pytest.skip("no /proc/self/clear_refs or no glibc: the peak resident set cannot be measured")
    gc.collect()
    _libc().malloc_trim(0)
    _CLEAR.write_text("5")
    before = _status("VmRSS")
    result = call()
    return _status("VmHWM") - before, result


def peak_added_raising(call, exc_type) -> int:
    """The peak resident bytes ``call()`` adds before it raises ``exc_type`` (it must)."""
    def run():
        with pytest.raises(exc_type):
            call()

    return peak_added(run)[0]
