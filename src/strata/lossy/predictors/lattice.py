"""Data on a lattice: every valid value is ``offset + k * step`` for an integer ``k``.

Measurements are often stored as integers in a float array (MRI and CT intensities, DAS
counts, radar reflectivity codes, camera counts, elevations in whole metres) or on a fixed step
(reflectivity in 0.01 dB). A value-range-relative bound below half a step then asks for more
precision than the data hold, and one above it spends bins that straddle lattice points. So the
encoder looks for the lattice exactly -- each valid value must come back bit for bit from
``dtype(offset + step * k)`` computed in float64 -- and when it pays, codes ``k`` instead of the
values:

* the bound ``eb`` allows ``m = floor(eb / step)`` steps of error (less a rounding margin where
  ``offset + step * k`` is not exact in the dtype);
* ``k`` is predicted and quantized as any field, with the bound ``m + 1/2 - 2**-10`` in units of
  a step; the decoder rounds each decoded ``k`` to the nearest integer, which is then within
  ``m`` of the original one: every value is within ``m * step <= eb`` of the original, on the
  lattice, and bit-exact when ``m = 0`` (any bound below one step: lossless on the lattice);
* quantization bins are ``2m + 1`` steps wide. Plain coding's are ``2 * eb``; the lattice is used
  when its bins are wider by at least :data:`GAIN` (1/16: ``2m + 1 >= (1 + 1/16) * 2 * eb / step``),
  i.e. the bound is a little above a small multiple of the step -- always below half a step, and
  never at eight steps or more, where bins could gain at most 1/16 and decoding would pay a pass
  over the values for it.

No threshold is fitted to data: the rule follows from the bin widths. The lattice is found on the data
alone (integers: the greatest common divisor of the differences to the first valid value;
other steps: the smallest gap between distinct values of a sample, snapped to a decimal step when
it is one, then checked on every value), so a field either is on it exactly or is coded as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

#: Values sampled (strided) to guess the lattice before checking every value.
SAMPLE = 1024
#: The lattice is used when its bins are wider than plain coding's by at least this share (its
#: decoding pays one more pass over the values; from ``m = 9`` steps of error on, bins gain at most
#: ``1 / 2m``).
GAIN = 1 / 16
#: The decoded ``k`` is within ``m + 1/2 - SLACK`` of the original before rounding.
SLACK = 2.0 ** -10
#: Largest integer each dtype holds exactly (a lattice index or value beyond it is not used).
EXACT_INTEGER = {4: 2 ** 24, 8: 2 ** 53}


@dataclass(frozen=True)
class Lattice:
    """Valid values ``dtype(offset + step * k)``, ``k`` an integer, coded as ``k`` with at most
    ``m`` steps of error.

    Attributes:
        offset: the lattice's origin, in the data's unit (finite).
        step: its spacing, in the data's unit (finite, > 0).
        m: most steps a decoded value may be off (``m * step`` is within the stream's bound).
    """

    offset: float
    step: float
    m: int

    @property
    def coding_bound(self) -> float:
        """The bound ``k`` is coded with, in steps: below ``m + 1/2``, so that rounding the
        decoded ``k`` lands within ``m`` of the original."""
        return self.m + 0.5 - SLACK

    def data_bound(self, coding_bound: float, eb: float) -> float:
        """The bound, in the data's unit, of values decoded within ``coding_bound`` steps and
        rounded to the lattice (``eb``: the stream's bound): a value within ``j + 1/2`` of an
        integer rounds to within ``j`` of it, ``j = floor(coding_bound + 1/2)``, and mapping back
        to the dtype rounds by less than the margin ``eb - m * step``."""
        return self.step * math.floor(coding_bound + 0.5) + (eb - self.m * self.step)

    def to_steps(self, work: np.ndarray) -> np.ndarray:
        """``(work - offset) / step`` as a new array of ``work``'s dtype (1-D), valid values
        rounded to their integer ``k`` (NaN, the missing points' marker, stays NaN)."""
        out = np.empty_like(work)
        _to_steps(work, out, self.offset, self.step)
        return out

    def restore(self, x: np.ndarray, missing: np.ndarray) -> None:
        """In place, on the decoded ``k`` of ``x`` (1-D float array) at the points that are not
        missing (``missing``: flat uint8, 1 = missing, or empty when none is): round to the
        nearest integer and map back, ``dtype(offset + step * k)`` computed in float64."""
        _restore(x, missing, missing.size > 0, self.offset, self.step)


def find(flat: np.ndarray, missing: np.ndarray | None) -> tuple[float, float] | None:
    """``(offset, step)`` of the lattice every valid value of ``flat`` lies on exactly, or None.

    Args:
        flat: 1-D float32/float64 array (the data).
        missing: flat bool/uint8 mask (1 = missing) or None; NaN and +-Inf are never valid.

    Returns:
        ``(offset, step)`` with ``step > 0`` such that each valid ``x`` equals
        ``dtype(offset + step * round((x - offset) / step))`` computed in float64 (integers: the
        largest such step); None when there is no such lattice (or fewer than two distinct valid
        values).
    """
    miss = _mask(missing)
    first, step = _integer_step(flat, miss, miss.size > 0, float(EXACT_INTEGER[flat.itemsize]))
    if step > 0:
        return float(first), float(step)
    found = guess(sample(flat, miss), flat.itemsize) if step < 0 else None
    return found if found is not None and exact(flat, miss, *found) else None


def choose(flat: np.ndarray, missing: np.ndarray | None, eb: float, valid_range) -> Lattice | None:
    """The lattice to code ``flat`` on under the bound ``eb``, or None (no lattice, or plain
    coding's bins are wider).

    The lattice is guessed on a strided sample of :data:`SAMPLE` values and checked on every
    value only when it would be used, so a field off any lattice costs a sample's look.

    Args:
        flat, missing: as :func:`find`.
        eb: the absolute error bound (>= 0), in the data's unit.
        valid_range: ``(min, max)`` of the valid values, or None without any.
    """
    if valid_range is None or not math.isfinite(eb) or flat.size < 2:
        return None
    miss = _mask(missing)
    on = usable(guess(sample(flat, miss), flat.itemsize), eb, flat.dtype, valid_range)
    if on is not None and not exact(flat, miss, on.offset, on.step):
        # (integers whose steps the sample overstated: the whole array's)
        on = usable(find(flat, missing), eb, flat.dtype, valid_range) if float(on.step).is_integer() else None
    if on is not None and eb == 0 and _negative_zero(flat, miss, miss.size > 0):
        return None  # (-0.0 decodes from a lattice as +0.0: a lossless stream keeps its bits off it)
    return on


def _mask(missing) -> np.ndarray:
    return np.zeros(0, np.uint8) if missing is None else missing.view(np.uint8)


def exact(flat: np.ndarray, missing: np.ndarray, offset: float, step: float) -> bool:
    """Whether every valid value of ``flat`` (1-D float32/float64; ``missing``: flat uint8, 1 =
    missing, or empty) comes back bit for bit from ``dtype(offset + step * k)``, ``k`` the
    nearest integer to ``(x - offset) / step`` (float64)."""
    return _exact_kernel(flat, missing, missing.size > 0, offset, step, np.empty(1, flat.dtype))


def usable(found, eb: float, dtype: np.dtype, valid_range) -> Lattice | None:
    """The :class:`Lattice` of ``found`` under ``eb`` when its bins are wider than plain coding's
    by :data:`GAIN`, else None: ``m`` steps of error where ``m * step`` plus the dtype's rounding
    near the largest value (four units in the last place) stays within ``eb`` (no margin when
    ``m = 0``, or when every lattice point within ``m`` of the data is an integer the dtype holds
    exactly)."""
    if found is None:
        return None
    offset, step = found
    big = max(abs(valid_range[0]), abs(valid_range[1]))
    limit = EXACT_INTEGER[dtype.itemsize]
    if (big + abs(offset)) / step + eb / step + 1 >= limit:
        return None  # (indices the dtype cannot hold)
    m = math.floor(eb / step)
    if m and not (float(offset).is_integer() and float(step).is_integer() and big + (m + 1) * step < limit):
        margin = 4 * float(np.spacing(dtype.type(big + (m + 1) * step)))
        m = max(0, math.floor((eb - margin) / step))  # (m = 0 is exact: no margin)
    if 2 * m + 1 < (1 + GAIN) * 2 * eb / step:
        return None  # (plain coding's bins are wider, or hardly narrower)
    return Lattice(offset, step, m)


@njit(nogil=True, cache=True)
def _integer_step(flat, missing, has_missing, limit):
    """``(first valid value, gcd of the differences to it)`` when every valid value is an integer
    below ``limit`` in magnitude; the step is 0 when they are all equal, -1 when some value is not
    such an integer (``first`` NaN when no value is valid)."""
    first = np.nan
    g = np.int64(0)
    for i in range(flat.shape[0]):
        if has_missing and missing[i]:
            continue
        v = np.float64(flat[i])
        if v - v != 0:
            continue
        if not (abs(v) < limit and v == np.rint(v)):
            return first, np.int64(-1)
        if first != first:
            first = v
            continue
        d = abs(np.int64(v - first))
        while d:
            g, d = d, g % d
    return first, g


def sample(flat: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The distinct valid values of a strided sample of about :data:`SAMPLE` valid values,
    sorted (float64): where most points are missing, the stride shrinks (8 times at a time, at
    most 3 times) until a quarter of the sample's worth is valid.

    Args:
        flat: 1-D float32/float64 array.
        missing: flat uint8 mask (1 = missing), or empty when none is.
    """
    stride = max(1, flat.size // SAMPLE)
    for _ in range(4):
        with np.errstate(invalid="ignore"):  # (NaN payloads)
            s = flat[::stride].astype(np.float64)
        if missing.size:
            s = s[missing[::stride] == 0]
        s = s[np.isfinite(s)]
        if s.size >= SAMPLE // 4 or stride == 1:
            break
        stride = max(1, stride // 8)
    return np.unique(s)


def guess(u: np.ndarray, itemsize: int) -> tuple[float, float] | None:
    """A guess of ``(offset, step)`` from sorted distinct values ``u`` (at least three; e.g. of
    :func:`sample`), None when they are on no lattice: integers
    below the dtype's exact range give the greatest common divisor of their differences, offset
    the first; other values the smallest gap, snapped to 1, 2, 2.5 or 5 times a power of ten when
    within 1e-3 of one (the gaps of float32 values are off by their rounding), every other gap a
    whole number of steps."""
    if u.size < 3:
        return None
    if np.abs(u).max() < EXACT_INTEGER[itemsize] and np.array_equal(u, np.rint(u)):
        return float(u[0]), float(np.gcd.reduce((u[1:] - u[0]).astype(np.int64)))
    gaps = np.diff(u)
    step = float(gaps.min())
    if not step > 0:
        return None
    power = 10.0 ** math.floor(math.log10(step))
    for nice in (1.0, 2.0, 2.5, 5.0, 10.0) if power > 0 else ():  # (no snapping of subnormal steps)
        if abs(step / (nice * power) - 1) < 1e-3:
            step = nice * power
            break
    ratio = gaps / step
    if np.abs(ratio - np.rint(ratio)).max() > 1e-3:
        return None
    offset = float(u[0] - step * math.floor(u[0] / step + 0.5))
    return (0.0 if abs(offset) < 1e-3 * step else offset), step


@njit(nogil=True, cache=True)
def _exact_kernel(flat, missing, has_missing, offset, step, cast):
    """Whether every valid value comes back bit for bit from ``offset + step * k`` (``cast``: one
    element of ``flat``'s dtype, the rounding to it)."""
    for i in range(flat.shape[0]):
        if has_missing and missing[i]:
            continue
        v = flat[i]
        if v - v != 0:
            continue
        cast[0] = offset + step * np.rint((np.float64(v) - offset) / step)
        if cast[0] != v:
            return False
    return True


@njit(nogil=True, cache=True)
def _negative_zero(flat, missing, has_missing):
    """Whether a valid value is -0.0 (equal to 0, its sign bit set)."""
    for i in range(flat.shape[0]):
        if has_missing and missing[i]:
            continue
        v = flat[i]
        if v == 0 and math.copysign(1.0, v) < 0:
            return True
    return False


@njit(nogil=True, cache=True)
def _to_steps(work, out, offset, step):
    for i in range(work.shape[0]):
        k = (np.float64(work[i]) - offset) / step
        r = np.rint(k)
        out[i] = r if abs(k - r) < 1e-6 else k  # (valid values land on integers; NaN stays)


@njit(nogil=True, cache=True)
def _restore(x, missing, has_missing, offset, step):
    for i in range(x.shape[0]):
        if has_missing and missing[i]:
            continue
        x[i] = offset + step * np.rint(np.float64(x[i]))


__all__ = ["EXACT_INTEGER", "GAIN", "Lattice", "SAMPLE", "SLACK", "choose", "exact", "find", "guess", "sample",
           "usable"]
