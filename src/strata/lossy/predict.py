"""Hierarchical interpolation predictor: compiled passes over one interpolation stride.

Each point of a pass (see :mod:`strata.lossy.partition`) is predicted from the
*reconstructed* points at distances ``s`` and ``3s`` along the pass axis (closed loop), with
SZ3's 1D interpolators (Zhao et al., "Optimizing Error-Bounded Lossy Compression for
Scientific Data by Dynamic Spline Interpolation", ICDE'21, Sec. IV-B; the cubic weights are
STZ's ``(-1, 9, 9, -1)/16``):

===========================  =============================================  ==========
neighbours present           prediction                                     name
===========================  =============================================  ==========
i-3s, i-s, i+s, i+3s         (-x[i-3s] + 9 x[i-s] + 9 x[i+s] - x[i+3s])/16  cubic
i-s, i+s, i+3s               (3 x[i-s] + 6 x[i+s] - x[i+3s]) / 8            quadratic
i-3s, i-s, i+s               (-x[i-3s] + 6 x[i-s] + 3 x[i+s]) / 8           quadratic
i-s, i+s                     (x[i-s] + x[i+s]) / 2                          linear
i-5s, i-3s, i-s (last point) (3 x[i-5s] - 10 x[i-3s] + 15 x[i-s]) / 8       extrapolation
i-3s, i-s (last point)       (3 x[i-s] - x[i-3s]) / 2                       extrapolation
i-s (last point)             x[i-s]                                         copy
===========================  =============================================  ==========

With ``cubic=False`` the linear rules are used (two-point interpolation, linear
extrapolation, copy). Predictions are computed in float64 from values of the data dtype;
encoder and decoder run the same compiled code, so their predictions are bit-identical.

Three kernels share one loop: :func:`encode_pass` (predict, quantize, keep the
reconstruction), :func:`decode_pass` (predict, dequantize) and :func:`preview_pass` (predict
only: fills a finer grid from a coarser one for a progressive preview). They run over all
cores (numba ``prange``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .quantize import dequantize_into, quantize_into

#: Points per parallel work item along the fastest axis.
_BLOCK = 2048


@njit(inline="always")
def _predict(x, idx, i, n, s, st, cubic):
    """Prediction of ``x[idx]``, at index ``i`` of an axis of length ``n``, stride ``s`` and
    memory step ``st``."""
    d1 = s * st
    b = np.float64(x[idx - d1])
    if i + s < n:
        c = np.float64(x[idx + d1])
        if cubic:
            d3 = 3 * d1
            left = i >= 3 * s
            right = i + 3 * s < n
            if left and right:
                return (9.0 * (b + c) - np.float64(x[idx - d3]) - np.float64(x[idx + d3])) * 0.0625
            if right:
                return (3.0 * b + 6.0 * c - np.float64(x[idx + d3])) * 0.125
            if left:
                return (6.0 * b + 3.0 * c - np.float64(x[idx - d3])) * 0.125
        return 0.5 * (b + c)
    if cubic and i >= 5 * s:
        return (15.0 * b - 10.0 * np.float64(x[idx - 3 * d1]) + 3.0 * np.float64(x[idx - 5 * d1])) * 0.125
    if i >= 3 * s:
        return 1.5 * b - 0.5 * np.float64(x[idx - 3 * d1])
    return b


@njit(inline="always")
def _first(start, step, lo):
    """Smallest ``start + k*step >= lo`` (k >= 0)."""
    if lo <= start:
        return start
    return start + ((lo - start + step - 1) // step) * step


@njit(inline="always")
def _count(first, step, hi):
    if first >= hi:
        return 0
    return (hi - 1 - first) // step + 1


@njit(inline="always")
def _layout(shape, starts, steps, lo, hi):
    f0 = _first(starts[0], steps[0], lo[0])
    f1 = _first(starts[1], steps[1], lo[1])
    f2 = _first(starts[2], steps[2], lo[2])
    c0 = _count(f0, steps[0], hi[0])
    c1 = _count(f1, steps[1], hi[1])
    c2 = _count(f2, steps[2], hi[2])
    return f0, f1, f2, c0, c1, c2


@njit(parallel=True, nogil=True, cache=True)
def _sweep(mode, x, codes, orig, shape, axis, starts, steps, lo, hi, s, eb, cubic):
    """One pass. mode 0: encode, 1: decode, 2: preview."""
    n1, n2 = shape[1], shape[2]
    mem = (n1 * n2, n2, 1)
    f0, f1, f2, c0, c1, c2 = _layout(shape, starts, steps, lo, hi)
    if c0 == 0 or c1 == 0 or c2 == 0:
        return
    nb = (c2 + _BLOCK - 1) // _BLOCK
    n_axis = shape[axis]
    st = mem[axis]
    inv_bin = 0.5 / eb if eb > 0 else 0.0
    bin_width = 2.0 * eb
    for w in prange(c0 * c1 * nb):
        blk = w % nb
        r = w // nb
        i0 = f0 + (r // c1) * steps[0]
        i1 = f1 + (r % c1) * steps[1]
        k0 = blk * _BLOCK
        k1 = min(c2, k0 + _BLOCK)
        row = i0 * mem[0] + i1 * n2
        for k in range(k0, k1):
            i2 = f2 + k * steps[2]
            idx = row + i2
            if axis == 0:
                i = i0
            elif axis == 1:
                i = i1
            else:
                i = i2
            pred = _predict(x, idx, i, n_axis, s, st, cubic)
            if mode == 0:
                codes[idx] = quantize_into(x, idx, np.float64(orig[idx]), pred, eb, inv_bin, bin_width)
            elif mode == 1:
                dequantize_into(x, idx, codes[idx], pred, bin_width)
            else:
                x[idx] = pred


def _args(part, p):
    return (np.array(part.shape, np.int64), p.axis, np.array(p.starts, np.int64),
            np.array(p.steps, np.int64), np.array(p.box.lo, np.int64), np.array(p.box.hi, np.int64),
            p.stride)


_NO_CODES = np.empty(1, np.int32)


def encode_pass(x, codes, orig, part, p, eb, cubic):
    """Predict and quantize the points of pass ``p``.

    Args:
        x: flat working array (float32/float64); reconstructed values are written into it.
        codes: flat int32 array receiving the quantization codes.
        orig: flat original values (same dtype as ``x``).
        part: the :class:`~strata.lossy.partition.Partition`.
        p: a :class:`~strata.lossy.partition.Pass` of ``part``.
        eb: absolute error bound of the pass's step.
        cubic: cubic (True) or linear (False) interpolation.
    """
    shape, axis, starts, steps, lo, hi, s = _args(part, p)
    _sweep(0, x, codes, orig, shape, axis, starts, steps, lo, hi, s, eb, cubic)


def decode_pass(x, codes, part, p, eb, cubic):
    """Reconstruct the points of pass ``p`` from their codes (see :func:`encode_pass`)."""
    shape, axis, starts, steps, lo, hi, s = _args(part, p)
    _sweep(1, x, codes, x, shape, axis, starts, steps, lo, hi, s, eb, cubic)


def preview_pass(x, part, p, cubic):
    """Fill the points of pass ``p`` with their prediction (no residual)."""
    shape, axis, starts, steps, lo, hi, s = _args(part, p)
    _sweep(2, x, _NO_CODES, x, shape, axis, starts, steps, lo, hi, s, 0.0, cubic)


@njit(nogil=True, cache=True)
def _origin(x, codes, orig, eb):
    inv_bin = 0.5 / eb if eb > 0 else 0.0
    codes[0] = quantize_into(x, 0, np.float64(orig[0]), 0.0, eb, inv_bin, 2.0 * eb)


@njit(nogil=True, cache=True)
def _origin_decode(x, codes, eb):
    dequantize_into(x, 0, codes[0], 0.0, 2.0 * eb)


def encode_origin(x, codes, orig, eb):
    """Quantize the first point (the one-point starting grid) against a prediction of 0."""
    _origin(x, codes, orig, eb)


def decode_origin(x, codes, eb):
    """Reconstruct the first point (see :func:`encode_origin`)."""
    _origin_decode(x, codes, eb)
