"""NaN and +-Inf: stored bit-exactly apart from the compressed finite values.

Contract: every non-finite value is restored with its exact bit pattern (NaN payloads and
signs included); the error bound applies to the finite values. For prediction, non-finite
values are replaced by the mean of the finite ones (0 if there are none), which keeps them
from spoiling their neighbours' predictions.

Section layout: ``varint count | varint gaps between successive positions | raw values |
u32 CRC-32``.
"""
from __future__ import annotations

import struct

import numpy as np

from ..container import Reader, Writer, check_crc, crc32
from ..errors import CorruptStreamError


def split(flat: np.ndarray) -> tuple[bytes, np.ndarray]:
    """``(section, values for prediction)``; the section is empty when all values are finite."""
    bad = ~np.isfinite(flat)
    if not bad.any():
        return b"", flat
    pos = np.flatnonzero(bad)
    good = flat[~bad]
    fill = good.astype(np.float64).mean() if good.size else 0.0
    filled = flat.copy()
    filled[bad] = fill
    w = Writer().varint(len(pos))
    prev = 0
    for p in pos.tolist():
        w.varint(p - prev)
        prev = p
    w.raw(flat[pos].tobytes())
    body = w.getvalue()
    return body + struct.pack("<I", crc32(body)), filled


def restore(section, out_flat: np.ndarray) -> None:
    """Write the stored non-finite values into ``out_flat``.

    Raises:
        CorruptStreamError: checksum mismatch or inconsistent section.
    """
    section = memoryview(section).cast("B")
    if len(section) < 4:
        raise CorruptStreamError("non-finite section too short")
    body = section[:-4]
    check_crc(body, struct.unpack("<I", section[-4:])[0], "non-finite section")
    r = Reader(body, "non-finite section")
    n = r.varint(out_flat.size)
    gaps = np.fromiter((r.varint(out_flat.size) for _ in range(n)), dtype=np.int64, count=n)
    pos = np.cumsum(gaps)
    if n and pos[-1] >= out_flat.size:
        raise CorruptStreamError("non-finite position outside the array")
    vals = np.frombuffer(r.raw(n * out_flat.itemsize), dtype=out_flat.dtype)
    r.done()
    out_flat[pos] = vals
