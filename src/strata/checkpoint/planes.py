"""Bit reordering and byte grouping of tensor data (after ZipNN, Hershcovitch et al.,
arXiv:2411.05239, Sec. 3, and LMC, Waddington & Constantinescu, arXiv:2505.09810).

A floating-point element ``[sign | exponent | mantissa]`` is rotated left by one bit to
``[exponent | mantissa | sign]``: for bfloat16, float32 and float64 the top byte then holds
exponent bits only, whose distribution is narrow (a few dozen values), and the sign joins the
noise-like mantissa bits in the lowest byte. The rotated elements are split into byte planes,
most significant first: plane ``k`` holds byte ``k`` of every element. Integer and other
elements are split into planes without rotation (the high bytes of small integers are zero).

Both directions are vectorized integer operations on little-endian elements; the round trip
is bit-exact for every pattern (NaN payloads, -0.0, subnormals, infinities).
"""
from __future__ import annotations

import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def split(data: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Byte planes (uint8 ``(itemsize, n)``, most significant byte first) of ``data`` (uint8,
    whole little-endian elements of ``itemsize`` bytes); ``rotate`` first moves the sign bit
    to the least significant position."""
    if itemsize == 1:
        return data.reshape(1, -1)
    if itemsize not in _UINT:
        return np.ascontiguousarray(data.reshape(-1, itemsize)[:, ::-1].T)
    u = data.view(_UINT[itemsize])
    t = u.dtype.type
    if rotate:
        u = (u << t(1)) | (u >> t(8 * itemsize - 1))
    out = np.empty((itemsize, u.size), np.uint8)
    for k in range(itemsize):
        out[k] = (u >> t(8 * (itemsize - 1 - k))).astype(np.uint8)
    return out


def merge(planes: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Inverse of :func:`split`: the element bytes (uint8, ``n * itemsize``)."""
    if itemsize == 1:
        return np.ascontiguousarray(planes.reshape(-1))
    if itemsize not in _UINT:
        return np.ascontiguousarray(planes[::-1].T).reshape(-1)
    t = _UINT[itemsize]
    u = planes[0].astype(t)
    for k in range(1, itemsize):
        u <<= t(8)
        u |= planes[k]
    if rotate:
        u = (u >> t(1)) | (u << t(8 * itemsize - 1))
    return u.view(np.uint8)
