"""CRC-32 of many parts of a buffer in one compiled call, computed by zlib.

The chunk index of every level and mask of a lossy stream holds the CRC-32 (zlib's, as
:func:`zlib.crc32`) of each chunk (``docs/format.md``): thousands per level. One Python call
each cost about 0.4 µs a chunk on top of the checksum itself (ns3d192 at 1e-4: 1986 chunks,
0.8 ms of a 45 ms decompression on two threads, all of it serial). Here compiled code calls
zlib's own ``crc32`` for each part, the parts spread over the threads; zlib's shared library
is loaded into the process for the compiled code to link against (by symbol name, so the
on-disk cache of compiled code stays valid across processes). Where it cannot be loaded, or
its ``crc32`` gives another value than :func:`zlib.crc32` on a check at the first call, each
part goes through :func:`zlib.crc32` from Python (as a few parts always do): the same values.
"""
from __future__ import annotations

import sys
import zlib

import numpy as np
from numba import njit, prange, types

from ._numba import serial_runner, workers
from .errors import InvalidInputError

#: Parts below which the compiled loop runs on the calling thread alone.
SERIAL_PARTS = 64
#: At most this many parts (plus one offset) go through :func:`zlib.crc32` from Python.
_FEW_PARTS = 9

#: Bytes zlib's ``crc32`` takes in one call (its length argument is 32-bit).
_PIECE = 1 << 30

_zlib_crc32 = types.ExternalFunction("crc32", types.uint64(types.uint64, types.voidptr, types.uint32))


@njit(parallel=True, nogil=True, cache=True)
def _parts(data, offsets, out, n_workers):
    for w in prange(n_workers):
        for i in range(w, out.shape[0], n_workers):
            crc = np.uint64(0)
            pos, end = offsets[i], offsets[i + 1]
            while pos < end:
                n = min(end - pos, _PIECE)
                crc = _zlib_crc32(crc, data[pos:].ctypes.data, np.uint32(n))
                pos += n
            out[i] = crc & np.uint64(0xFFFFFFFF)


_runner = serial_runner(_parts)
_state: dict[str, bool] = {}


def _linked() -> bool:
    """Whether zlib's shared library is loaded and the compiled loop agrees with :func:`zlib.crc32`."""
    if "ok" not in _state:
        _state["ok"] = False
        import llvmlite.binding as llvm

        names = {"darwin": ("libz.1.dylib", "libz.dylib"), "win32": ()}.get(sys.platform, ("libz.so.1", "libz.so"))
        for name in names:
            try:
                llvm.load_library_permanently(name)
            except RuntimeError:
                continue
            probe = np.frombuffer(b"strata checks zlib's crc32 against the zlib module" * 3, np.uint8)
            offsets = np.array([0, 0, 7, probe.size], np.int64)
            out = np.zeros(3, np.uint32)
            try:  # (a symbol the linker cannot resolve raises here)
                _runner(_parts, True)(probe, offsets, out, 1)
            except Exception:
                break
            want = [zlib.crc32(probe[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
            _state["ok"] = out.tolist() == want
            break
    return _state["ok"]


def crc32_parts(data, offsets) -> np.ndarray:
    """CRC-32 (:func:`zlib.crc32`) of each part ``data[offsets[i]:offsets[i + 1]]``.

    Args:
        data: bytes-like or uint8 array (contiguous).
        offsets: ``(n + 1,)`` int, non-decreasing, from 0 or more to at most ``len(data)``.

    Returns:
        uint32 ``(n,)``.

    Raises:
        InvalidInputError: offsets outside ``data`` or decreasing.
    """
    if not isinstance(data, np.ndarray):
        buf = np.frombuffer(data, np.uint8)
    elif data.dtype == np.uint8 and data.ndim == 1 and data.flags.c_contiguous:
        buf = data
    else:
        buf = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if len(offsets) <= _FEW_PARTS:  # (a compiled call costs more than a few zlib calls)
        o = offsets.tolist() if isinstance(offsets, np.ndarray) else [int(v) for v in offsets]
        if o and (o[0] < 0 or o[-1] > buf.size or any(x > y for x, y in zip(o, o[1:]))):
            raise _outside(buf)
        return _from_python(buf, o)
    o = np.ascontiguousarray(offsets, dtype=np.int64)
    if o[0] < 0 or o[-1] > buf.size or np.any(o[1:] < o[:-1]):
        raise _outside(buf)
    if not _linked():
        return _from_python(buf, o.tolist())
    out = np.zeros(o.shape[0] - 1, np.uint32)
    _runner(_parts, out.shape[0] < SERIAL_PARTS)(buf, o, out, workers(out.shape[0]))
    return out


def _outside(buf: np.ndarray) -> InvalidInputError:
    return InvalidInputError(f"part offsets must be non-decreasing within the {buf.size} bytes")


def _from_python(buf: np.ndarray, offsets: list) -> np.ndarray:
    view = memoryview(buf)
    return np.array([zlib.crc32(view[a:b]) for a, b in zip(offsets, offsets[1:])], np.uint32)


__all__ = ["SERIAL_PARTS", "crc32_parts"]
