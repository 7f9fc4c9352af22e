"""Bit reordering and byte grouping of tensor data (after ZipNN, Hershcovitch et al.,
arXiv:2411.05239, Sec. 3, and LMC, Waddington & Constantinescu, arXiv:2505.09810).

A floating-point element ``[sign | exponent | mantissa]`` is rotated left by one bit to
``[exponent | mantissa | sign]``: for bfloat16, float32 and float64 the top byte then holds
exponent bits only, whose distribution is narrow (a few dozen values), and the sign joins the
noise-like mantissa bits in the lowest byte. The rotated elements are split into byte planes,
most significant first: plane ``k`` holds byte ``k`` of every element. Integer and other
elements are split into planes without rotation (the high bytes of small integers are zero).

Both directions are compiled loops over little-endian elements of 1, 2, 4 or 8 bytes; the
round trip is bit-exact for every pattern (NaN payloads, -0.0, subnormals, infinities). The
merge reads each plane from its own array (:func:`merge2`, :func:`merge4`, :func:`merge8`), so
a decoder hands it the raw planes where they lie in the stream, without copying them first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_MASK16 = np.uint64(0xFFFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def _rotl(v, bits, mask, rotate):
    """``v`` (``bits`` wide, ``mask`` its ones) rotated left by one bit if ``rotate``."""
    return ((v << np.uint64(1)) | (v >> np.uint64(bits - 1))) & mask if rotate else v


@njit(inline="always")
def _rotr(v, bits, mask, rotate):
    return ((v >> np.uint64(1)) | (v << np.uint64(bits - 1))) & mask if rotate else v


@njit(nogil=True, cache=True)
def split_into(data, itemsize, rotate, out):
    """Byte planes of ``data`` (uint8, whole little-endian elements of ``itemsize`` bytes: 1,
    2, 4 or 8) into ``out`` (uint8 ``(itemsize, n)``, most significant byte first); ``rotate``
    first moves the sign bit to the least significant position."""
    n = data.shape[0] // itemsize
    if itemsize == 1:
        for i in range(n):  # (a loop: numba's slice assignment copies byte by byte)
            out[0, i] = data[i]
    elif itemsize == 2:
        u = data[:2 * n].view(np.uint16)
        for i in range(n):
            v = _rotl(np.uint64(u[i]), 16, _MASK16, rotate)
            out[0, i] = v >> np.uint64(8)
            out[1, i] = v & np.uint64(0xFF)
    elif itemsize == 4:
        u = data[:4 * n].view(np.uint32)
        for i in range(n):
            v = _rotl(np.uint64(u[i]), 32, _MASK32, rotate)
            out[0, i] = v >> np.uint64(24)
            out[1, i] = (v >> np.uint64(16)) & np.uint64(0xFF)
            out[2, i] = (v >> np.uint64(8)) & np.uint64(0xFF)
            out[3, i] = v & np.uint64(0xFF)
    else:
        u = data[:8 * n].view(np.uint64)
        for i in range(n):
            v = _rotl(u[i], 64, _MASK64, rotate)
            for k in range(8):
                out[k, i] = (v >> np.uint64(8 * (7 - k))) & np.uint64(0xFF)


@njit(nogil=True, cache=True)
def merge2(p0, p1, rotate, out):
    """Inverse of :func:`split_into` for 2-byte elements: planes ``p0`` (most significant),
    ``p1`` (uint8, ``n`` each, any arrays) into ``out`` (uint8, ``2 n``)."""
    n = p0.shape[0]
    u = out[:2 * n].view(np.uint16)
    for i in range(n):
        v = (np.uint64(p0[i]) << np.uint64(8)) | np.uint64(p1[i])
        u[i] = _rotr(v, 16, _MASK16, rotate)


@njit(nogil=True, cache=True)
def merge4(p0, p1, p2, p3, rotate, out):
    """Inverse of :func:`split_into` for 4-byte elements: planes ``p0`` .. ``p3`` (uint8, ``n``
    each, most significant first) into ``out`` (uint8, ``4 n``)."""
    n = p0.shape[0]
    u = out[:4 * n].view(np.uint32)
    for i in range(n):
        v = ((np.uint64(p0[i]) << np.uint64(24)) | (np.uint64(p1[i]) << np.uint64(16))
             | (np.uint64(p2[i]) << np.uint64(8)) | np.uint64(p3[i]))
        u[i] = _rotr(v, 32, _MASK32, rotate)


@njit(nogil=True, cache=True)
def merge8(p0, p1, p2, p3, p4, p5, p6, p7, rotate, out):
    """Inverse of :func:`split_into` for 8-byte elements: planes ``p0`` .. ``p7`` (uint8, ``n``
    each, most significant first) into ``out`` (uint8, ``8 n``)."""
    n = p0.shape[0]
    u = out[:8 * n].view(np.uint64)
    for i in range(n):
        v = ((np.uint64(p0[i]) << np.uint64(56)) | (np.uint64(p1[i]) << np.uint64(48))
             | (np.uint64(p2[i]) << np.uint64(40)) | (np.uint64(p3[i]) << np.uint64(32))
             | (np.uint64(p4[i]) << np.uint64(24)) | (np.uint64(p5[i]) << np.uint64(16))
             | (np.uint64(p6[i]) << np.uint64(8)) | np.uint64(p7[i]))
        u[i] = _rotr(v, 64, _MASK64, rotate)


def split(data: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Byte planes (uint8 ``(itemsize, n)``) of ``data`` (see :func:`split_into`)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty((itemsize, data.size // itemsize), np.uint8)
    split_into(data, itemsize, rotate, out)
    return out


def merge(planes: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Inverse of :func:`split`: the element bytes (uint8, ``n * itemsize``) of ``planes``
    (uint8 ``(itemsize, n)``, ``itemsize`` 1, 2, 4 or 8)."""
    planes = np.ascontiguousarray(planes, dtype=np.uint8)
    out = np.empty(planes.shape[1] * itemsize, np.uint8)
    if itemsize == 1:
        out[:] = planes[0]
    else:
        {2: merge2, 4: merge4, 8: merge8}[itemsize](*planes, rotate, out)
    return out
