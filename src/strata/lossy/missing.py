"""Missing values: which points are missing, and how every one comes back bit for bit.

Contract of :func:`strata.lossy.compress`:

* A point is *missing* when it is NaN (always), equal to ``fill_value`` (CF ``_FillValue`` /
  ``missing_value`` semantics; a NaN ``fill_value`` means NaN), ``True`` in ``mask``
  (numpy.ma convention; a mask may broadcast to the array, e.g. one land mask for every time
  step), or masked in a ``numpy.ma.MaskedArray`` passed as the array.
* ``+-Inf`` that are not missing are *exact values*: stored bit for bit at their positions
  (:mod:`strata.lossy.exact`); the prediction sees the mean of the valid values there.
* *Valid* values are the finite, non-missing ones: the error bound holds on each of them, and
  a value-range-relative bound is relative to their range. With no valid value the bound in
  force is 0 (nothing is lossy).
* Every missing point decodes to its original bit pattern: the most common pattern among the
  missing points (the *fill pattern*) is kept in the header, the others are exact values.

How missing points are coded (after the issue's design; compare SZ3 and ZFP, which take no
mask): the mask is coded losslessly per level and chunk (:mod:`strata.lossy.mask`), so the
decoder knows it before the codes. A missing point gets no symbol; it is reconstructed as
its own interpolated prediction, so the points that read it see a smooth continuation of
their valid neighbours, never a coastline jump to a fill value. The first point, when
missing, is predicted as the mean of the valid values (kept in the header) instead of 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from .._numba import pick, serial_variant
from ..errors import InvalidInputError

#: The compiled kernels' ``missing`` argument (flat uint8 mask) when nothing is missing.
NO_MISSING = np.zeros(0, np.uint8)


@dataclass
class Prepared:
    """What the encoder needs from :func:`prepare`.

    Attributes:
        work: flat copy of the data for prediction: missing points NaN (the quantizer's
            marker), non-missing infinities the mean of the valid values.
        missing: flat uint8 mask (1 = missing), or None when no point is missing.
        count: number of missing points.
        fill_bits: the fill pattern (``itemsize`` bytes; empty when nothing is missing).
        exact: increasing flat positions of the exact values.
        valid_mean: mean of the valid values (0.0 without any).
        valid_range: ``(min, max)`` of the valid values, or None without any.
    """

    work: np.ndarray
    missing: np.ndarray | None
    count: int
    fill_bits: bytes
    exact: np.ndarray
    valid_mean: float
    valid_range: tuple[float, float] | None


def split_masked(array):
    """``(data, mask)`` of a ``numpy.ma.MaskedArray`` (mask None if nothing is masked), else
    ``(array, None)``."""
    if not np.ma.isMaskedArray(array):
        return array, None
    m = np.ma.getmaskarray(array)
    return np.ma.getdata(array), (m if m.any() else None)


def _check_mask(mask, shape) -> np.ndarray:
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        if m.dtype.kind not in "iu" or (m.size and not np.isin(m, (0, 1)).all()):
            raise InvalidInputError(f"mask must be boolean (True = missing), not {m.dtype}")
        m = m.astype(np.bool_)
    try:
        return np.broadcast_to(m, shape)
    except ValueError as exc:
        raise InvalidInputError(f"mask of shape {m.shape} does not match the array's shape {shape}") from exc


def _check_fill(fill_value, dtype: np.dtype):
    """The fill value as a scalar of ``dtype``; None for none; NaN means NaN-missing."""
    if fill_value is None:
        return None
    if np.ndim(fill_value) != 0:
        raise InvalidInputError(f"fill_value must be a scalar, not {fill_value!r}")
    try:
        v = float(fill_value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"fill_value must be a number, not {fill_value!r}") from exc
    if math.isnan(v):
        return None  # NaN is always missing
    with np.errstate(over="ignore", under="ignore"):
        cast = dtype.type(v)
    # a value of the dtype, or the nearest one (1e20 for float32 data means float32(1e20));
    # not one that overflows, underflows or loses precision as a subnormal
    if math.isinf(v) != math.isinf(float(cast)) or abs(float(cast) - v) > abs(v) * float(np.finfo(dtype).eps):
        raise InvalidInputError(f"fill_value {fill_value!r} cannot be represented in {dtype}")
    return cast


def find(a: np.ndarray, mask=None, fill_value=None) -> np.ndarray:
    """Flat boolean array of the missing points of ``a`` (float array, C-contiguous).

    Raises:
        InvalidInputError: a mask that is not boolean or does not broadcast to ``a.shape``,
            a fill value that is not a number or not exactly representable in ``a.dtype``.
    """
    flat = a.reshape(-1)
    out = np.isnan(flat)
    fill = _check_fill(fill_value, a.dtype)
    if fill is not None:
        out |= flat == fill
    if mask is not None:
        out |= _check_mask(mask, a.shape).reshape(-1)
    return out


def prepare(a: np.ndarray, missing: np.ndarray | None = None) -> Prepared:
    """Split ``a`` (C-contiguous float array) into what is coded and what is kept apart, given
    its flat boolean ``missing`` (from :func:`find`; None: the NaN points, found here)."""
    flat = a.reshape(-1)
    bits = flat.view(f"u{flat.itemsize}")
    if flat.size and (missing is None or not missing.any()):
        # the common case in one vectorized pass over the bits, not the scan's serial sum, nor
        # a mask array
        lo, hi = finite_range(flat)
        if lo is not None:
            return Prepared(flat, None, 0, b"", np.zeros(0, np.int64), 0.0, (lo, hi))
    if missing is None:
        missing = find(a)
    miss = missing.view(np.uint8)
    n_valid, total, lo, hi, count, first, alike, n_inf = _scan(flat, bits, miss)
    valid_range = (float(lo), float(hi)) if n_valid else None
    if n_valid == flat.size:
        return Prepared(flat, None, 0, b"", np.zeros(0, np.int64), 0.0, valid_range)
    mean = total / n_valid if n_valid else 0.0
    if not math.isfinite(mean) or not math.isfinite(float(flat.dtype.type(mean))):
        mean = lo / 2 + hi / 2  # (the sum overflowed: values near the dtype's largest)
    work = np.empty_like(flat)
    _work(flat, miss, work, flat.dtype.type(mean))
    exact = np.flatnonzero(~np.isfinite(flat) & ~missing) if n_inf else np.zeros(0, np.int64)
    fill_bits = b""
    if count:
        main = bits[first]
        if not alike:  # several patterns (rare): the most common is the fill, the others exact
            pos = np.flatnonzero(missing)
            patterns, counts = np.unique(bits[pos], return_counts=True)
            main = patterns[np.argmax(counts)]
            exact = np.union1d(exact, pos[bits[pos] != main])
        fill_bits = np.array(main, dtype=f"<u{flat.itemsize}").tobytes()
    return Prepared(work, miss if count else None, count, fill_bits, exact, mean, valid_range)


def finite_range(flat: np.ndarray):
    """``(min, max)`` (Python floats) of ``flat`` (a 1-D float32/float64 array, not empty) when
    every value is finite, else ``(None, None)``: one pass over the bits, in parallel when it is
    large (the values' order is the order of their bits as signed integers with the magnitude
    bits of the negative ones flipped, so integer reductions do it, which compilers vectorize)."""
    ints_dtype, sign_shift, magnitude, exponent = _KEY_CONSTANTS[flat.itemsize]
    ints = flat.view(ints_dtype)
    n = flat.shape[0]
    kernel = pick(_key_range, _key_range_serial, n < _SERIAL_BELOW)
    lo, hi, n_inf = kernel(ints, sign_shift, magnitude, exponent, max(1, min(_BLOCKS, n // _SERIAL_BELOW)))
    if n_inf:
        return None, None
    keys = np.array([lo, hi], ints_dtype)
    lo, hi = (keys ^ ((keys >> sign_shift) & magnitude)).view(flat.dtype).tolist()
    return lo, hi


#: Per item size: the integer dtype of the bits, the sign bit's shift, the magnitude bits and
#: the exponent bits (all set: not finite), as that dtype's scalars.
_KEY_CONSTANTS = {4: (np.dtype(np.int32), np.int32(31), np.int32(0x7FFFFFFF), np.int32(0x7F800000)),
                  8: (np.dtype(np.int64), np.int64(63), np.int64(0x7FFFFFFFFFFFFFFF), np.int64(0x7FF0000000000000))}
#: Arrays this small take :func:`finite_range`'s serial kernel; larger ones are cut in at most
#: ``_BLOCKS`` blocks of at least this many values.
_SERIAL_BELOW = 1 << 16
_BLOCKS = 64


@njit(parallel=True, nogil=True, cache=True)
def _key_range(ints, sign_shift, magnitude, exponent, n_blocks):
    """Smallest and largest order key (``v ^ ((v >> sign_shift) & magnitude)``) of the values'
    bits ``ints``, and how many are not finite (exponent bits all set), over ``n_blocks`` blocks."""
    n = ints.shape[0]
    los = np.empty(n_blocks, ints.dtype)
    his = np.empty(n_blocks, ints.dtype)
    bad = np.zeros(n_blocks, np.int64)
    for b in prange(n_blocks):
        los[b], his[b], bad[b] = _block_range(ints, b * n // n_blocks, (b + 1) * n // n_blocks, sign_shift,
                                              magnitude, exponent)
    return los.min(), his.max(), bad.sum()


@njit(inline="always")
def _block_range(ints, i0, i1, sign_shift, magnitude, exponent):
    """:func:`_key_range` of ``ints[i0:i1]`` (unsigned indices: a signed one's wraparound check
    keeps the loop from vectorizing, 9x slower)."""
    lo = magnitude
    hi = ~magnitude
    k = 0
    for i in range(np.uint64(i0), np.uint64(i1)):
        v = ints[i]
        key = v ^ ((v >> sign_shift) & magnitude)
        lo = min(lo, key)
        hi = max(hi, key)
        k += (v & exponent) == exponent
    return lo, hi, k


_key_range_serial = serial_variant(_key_range)


@njit(nogil=True, cache=True)
def _scan(flat, bits, missing):
    """One pass: ``(valid values, their sum (float64), min, max, missing values, index of the
    first missing one, whether all missing ones hold its bits, non-missing infinities)``."""
    n_valid = 0
    n_missing = 0
    n_inf = 0
    first = -1
    alike = True
    total = 0.0
    lo = np.inf
    hi = -np.inf
    for i in range(flat.shape[0]):
        if missing[i]:
            if first < 0:
                first = i
            elif bits[i] != bits[first]:
                alike = False
            n_missing += 1
            continue
        v = np.float64(flat[i])
        if v - v != 0.0:  # +-Inf (NaN is always missing)
            n_inf += 1
            continue
        n_valid += 1
        total += v
        lo = min(lo, v)
        hi = max(hi, v)
    return n_valid, total, lo, hi, n_missing, first, alike, n_inf


@njit(nogil=True, cache=True)
def _work(flat, missing, work, mean):
    """The predictor's copy: missing points NaN, non-missing infinities ``mean``."""
    nan = work.dtype.type(np.nan)
    for i in range(flat.shape[0]):
        v = flat[i]
        if missing[i]:
            work[i] = nan
        elif v - v != 0:
            work[i] = mean
        else:
            work[i] = v


def fill_into(out_flat: np.ndarray, missing: np.ndarray, fill_bits: bytes | None):
    """Write the fill pattern ``fill_bits`` (None: nothing written) into the missing points of
    ``out_flat`` (a 1-D float32/float64 array; ``missing`` flat uint8, 1 = missing), and measure
    its other points, in one pass (in parallel when it is large, as :func:`finite_range`).

    Returns:
        ``(lo, hi, n_not_finite)``: the smallest and largest finite non-missing value (Python
        floats; None, None when there is none) and how many non-missing values are not finite
        (NaN or +-Inf).
    """
    ints_dtype, sign_shift, magnitude, exponent = _KEY_CONSTANTS[out_flat.itemsize]
    ints = out_flat.view(ints_dtype)
    fill = np.frombuffer(fill_bits, "<" + ints_dtype.str[1:])[0] if fill_bits is not None else ints_dtype.type(0)
    n = out_flat.shape[0]
    kernel = pick(_fill_range, _fill_range_serial, n < _SERIAL_BELOW)
    lo, hi, bad = kernel(ints, missing, fill, fill_bits is not None, sign_shift, magnitude, exponent,
                         max(1, min(_BLOCKS, n // _SERIAL_BELOW)))
    if lo > hi:
        return None, None, int(bad)
    keys = np.array([lo, hi], ints_dtype)
    lo, hi = (keys ^ ((keys >> sign_shift) & magnitude)).view(out_flat.dtype).tolist()
    return lo, hi, int(bad)


@njit(parallel=True, nogil=True, cache=True)
def _fill_range(ints, missing, fill, write, sign_shift, magnitude, exponent, n_blocks):
    """:func:`fill_into` on the values' bits ``ints``: order keys (:func:`_key_range`) of the
    finite non-missing ones, the non-finite non-missing ones counted, ``fill`` written to the
    missing ones if ``write``; branch-free selects, which compilers vectorize."""
    n = ints.shape[0]
    los = np.empty(n_blocks, ints.dtype)
    his = np.empty(n_blocks, ints.dtype)
    bad = np.zeros(n_blocks, np.int64)
    for b in prange(n_blocks):
        lo = magnitude
        hi = ~magnitude
        k = 0
        i0, i1 = np.uint64(b * n // n_blocks), np.uint64((b + 1) * n // n_blocks)
        if write:
            for i in range(i0, i1):
                v = ints[i]
                m = missing[i] != 0
                ints[i] = fill if m else v
                finite = (v & exponent) != exponent
                key = v ^ ((v >> sign_shift) & magnitude)
                use = finite & ~m
                lo = min(lo, key if use else magnitude)
                hi = max(hi, key if use else ~magnitude)
                k += ~(finite | m)
        else:
            for i in range(i0, i1):
                v = ints[i]
                m = missing[i] != 0
                finite = (v & exponent) != exponent
                key = v ^ ((v >> sign_shift) & magnitude)
                use = finite & ~m
                lo = min(lo, key if use else magnitude)
                hi = max(hi, key if use else ~magnitude)
                k += ~(finite | m)
        los[b], his[b], bad[b] = lo, hi, k
    return los.min(), his.max(), bad.sum()


_fill_range_serial = serial_variant(_fill_range)
