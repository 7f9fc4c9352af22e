"""The varint of every strata stream, for compiled code.

Unsigned LEB128: 7 bits a byte, least significant group first, the high bit set on every byte
but the last (the encoding of :meth:`strata.container.Writer.varint` and
:meth:`strata.container.Reader.varint`, which Python code uses). The compiled readers here
refuse a varint of more than :data:`MAX_BYTES` bytes: no count or length in a stream reaches
``2**56``, and values below it cannot overflow an int64 sum with a position.
"""
from __future__ import annotations

import numpy as np
from numba import njit

#: Longest varint the compiled readers accept (values below ``2**56``).
MAX_BYTES = 8


@njit(inline="always")
def put(out, pos, v):
    """Write ``v`` (>= 0) to the uint8 array ``out`` from ``pos`` (room: 8 bytes for values
    below ``2**56``); returns the position after it."""
    while v >= 0x80:
        out[pos] = (v & 0x7F) | 0x80
        v >>= 7
        pos += 1
    out[pos] = v
    return pos + 1


@njit(nogil=True, cache=True)
def put_many(values):
    """The varints of ``values`` (int64), one after another (uint8 array); None if a value is
    negative or not below ``2**56`` (longer than :data:`MAX_BYTES`, which the readers refuse)."""
    out = np.empty(MAX_BYTES * values.shape[0], np.uint8)
    pos = 0
    for v in values:
        if v < 0 or v >= np.int64(1) << (7 * MAX_BYTES):
            return None
        pos = put(out, pos, v)
    return out[:pos]


@njit(inline="always")
def size(v):
    """Bytes of the varint of ``v`` (>= 0)."""
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


@njit(inline="always")
def get(buf, pos, end):
    """Read a varint from ``buf[pos:end]``: ``(value, position after it)``; value -1 when the
    bytes end first or it is longer than :data:`MAX_BYTES`."""
    v = np.int64(0)
    shift = 0
    while pos < end and shift < 7 * MAX_BYTES:
        b = buf[pos]
        pos += 1
        v |= np.int64(b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
    return np.int64(-1), pos


@njit(nogil=True, cache=True)
def get_many(buf, pos, end, n):
    """``n`` varints from ``buf[pos:end]`` (int64): ``(values, position after them)``; position
    -1 when one is malformed (see :func:`get`)."""
    out = np.zeros(n, np.int64)
    for i in range(n):
        v, pos = get(buf, pos, end)
        if v < 0:
            return out, -1
        out[i] = v
    return out, pos
