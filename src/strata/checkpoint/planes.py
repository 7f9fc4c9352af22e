"""Bit reordering and byte grouping of tensor data (after ZipNN, Hershcovitch et al.,
arXiv:2411.05239, Sec. 3, and LMC, Waddington & Constantinescu, arXiv:2505.09810).

A floating-point element ``[sign | exponent | mantissa]`` is rotated left by one bit to
``[exponent | mantissa | sign]``: for bfloat16, float32 and float64 the top byte then holds
exponent bits only, whose distribution is narrow (a few dozen values), and the sign joins the
noise-like mantissa bits in the lowest byte. The rotated elements are split into byte planes,
most significant first: plane ``k`` holds byte ``k`` of every element. Integer and other
elements are split into planes without rotation (the high bytes of small integers are zero).

Both directions are compiled loops over little-endian elements of 1, 2, 4 or 8 bytes; the
round trip is bit-exact for every pattern (NaN payloads, -0.0, subnormals, infinities).
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
        out[0, :] = data[:n]
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
def merge_into(planes, itemsize, rotate, out):
    """Inverse of :func:`split_into`: the element bytes into ``out`` (uint8, ``n * itemsize``)."""
    n = planes.shape[1]
    if itemsize == 1:
        out[:n] = planes[0]
    elif itemsize == 2:
        u = out[:2 * n].view(np.uint16)
        for i in range(n):
            v = (np.uint64(planes[0, i]) << np.uint64(8)) | np.uint64(planes[1, i])
            u[i] = _rotr(v, 16, _MASK16, rotate)
    elif itemsize == 4:
        u = out[:4 * n].view(np.uint32)
        for i in range(n):
            v = ((np.uint64(planes[0, i]) << np.uint64(24)) | (np.uint64(planes[1, i]) << np.uint64(16))
                 | (np.uint64(planes[2, i]) << np.uint64(8)) | np.uint64(planes[3, i]))
            u[i] = _rotr(v, 32, _MASK32, rotate)
    else:
        u = out[:8 * n].view(np.uint64)
        for i in range(n):
            v = np.uint64(0)
            for k in range(8):
                v = (v << np.uint64(8)) | np.uint64(planes[k, i])
            u[i] = _rotr(v, 64, _MASK64, rotate)


def split(data: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Byte planes (uint8 ``(itemsize, n)``) of ``data`` (see :func:`split_into`)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty((itemsize, data.size // itemsize), np.uint8)
    split_into(data, itemsize, rotate, out)
    return out


def merge(planes: np.ndarray, itemsize: int, rotate: bool) -> np.ndarray:
    """Inverse of :func:`split`: the element bytes (uint8, ``n * itemsize``)."""
    planes = np.ascontiguousarray(planes, dtype=np.uint8)
    out = np.empty(planes.shape[1] * itemsize, np.uint8)
    merge_into(planes, itemsize, rotate, out)
    return out
