"""Values stored bit-exactly apart from the coded ones: +-Inf, and missing values whose bits
differ from the stream's fill pattern (a NaN with another payload, a second fill value).

The error bound applies to the valid values; these are restored with their exact bit
pattern (signs and NaN payloads included) after decoding (see :mod:`strata.lossy.missing`
for the whole missing-value contract).

Section layout: ``varint count | varint gaps between successive flat positions | raw values
(dtype, little-endian) | u32 CRC-32``.
"""
from __future__ import annotations

import struct

import numpy as np

from ..container import Reader, Writer, checked_body, crc32
from ..errors import CorruptStreamError


def section(flat: np.ndarray, positions: np.ndarray) -> bytes:
    """The section storing ``flat[positions]`` (``positions`` increasing flat indices);
    empty when there are none."""
    if positions.size == 0:
        return b""
    w = Writer().varint(len(positions))
    prev = 0
    for p in positions.tolist():
        w.varint(p - prev)
        prev = p
    w.raw(flat[positions].tobytes())
    body = w.getvalue()
    return body + struct.pack("<I", crc32(body))


def read(data, size: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, values)`` of a section, for an array of ``size`` values of ``dtype``.

    Raises:
        CorruptStreamError: checksum mismatch or inconsistent section.
    """
    body = checked_body(data, "exact-value section")
    r = Reader(body, "exact-value section")
    n = r.varint(size)
    if n > len(body):
        raise CorruptStreamError("exact-value section lists more values than it holds")
    gaps = np.fromiter((r.varint(size) for _ in range(n)), dtype=np.int64, count=n)
    pos = np.cumsum(gaps)
    # (positions compared, not gaps: a sum of gaps past 2**63 wraps around to negative ones)
    if n and (pos[-1] >= size or (n > 1 and not (pos[1:] > pos[:-1]).all())):
        raise CorruptStreamError("exact-value positions outside the array or not increasing")
    vals = np.frombuffer(r.raw(n * np.dtype(dtype).itemsize), dtype=dtype)
    r.done()
    return pos, vals


def restore(data, out_flat: np.ndarray) -> None:
    """Write the stored values into ``out_flat`` (flat array of the stream's shape and dtype).

    Raises:
        CorruptStreamError: checksum mismatch or inconsistent section.
    """
    pos, vals = read(data, out_flat.size, out_flat.dtype)
    out_flat[pos] = vals
