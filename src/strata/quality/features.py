"""Stage 1 of the quality predictor: features of a field, computed once on a sample.

DeepCQ (Liu et al., arXiv 2512.21433, Sec. III) decouples an expensive feature-extraction
stage, run once per field, from light per-metric predictors. Our features are hand-crafted
and cheap (DeepCQ's learned encoder is replaced by what an interpolation compressor's rate
and distortion depend on), computed on a fixed-size sample so their cost does not grow with
the field:

* **Interpolation residuals** at strides 1, 2, 4 and 8 along each long axis: the open-loop
  error of the cubic interpolation ``(-x[i-3s] + 9x[i-s] + 9x[i+s] - x[i+3s]) / 16`` that
  SZ3 and strata use (Zhao et al., ICDE'21, Sec. IV), at ``SAMPLES_PER_GROUP`` points per
  (stride, axis), in short runs at random places; points whose stencil holds a missing or
  non-finite value are left out.
* **Local variances** of ``WINDOW`` x ``WINDOW`` windows in the last two axes (the windows
  of SSIM, Wang et al., IEEE TIP 2004), at ``WINDOWS`` random places.
* Global statistics: size, dtype, long axes, share of missing values, value range (a full
  pass: the relative bound needs it), standard deviation of the sampled values.

:meth:`Features.at` turns them into the per-bound estimates the predictors correct: the
quantized entropy of the residuals with the closed-loop noise of reconstructed neighbours,
the mean squared error of that quantization (hence a PSNR) and an SSIM from the window
variances and that error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from numba import njit

from ..errors import InvalidInputError
from ..lossy import tune
from ..lossy.partition import as_3d_shape

#: Strides of the sampled residuals (the finest interpolation levels; coarser ones share
#: the last stride's residuals).
STRIDES = (1, 2, 4, 8)
#: Residuals sampled per (stride, axis).
SAMPLES_PER_GROUP = 512
#: Consecutive predicted points of one run (spacing 2 x stride).
RUN = 16
#: SSIM window edge and number of sampled windows (skimage's default window is 7).
WINDOW = 7
WINDOWS = 512
#: Values sampled for the standard deviation.
STD_SAMPLES = 2048
#: SSIM's stabilizing constants as shares of the value range (Wang et al. 2004, Eq. 7).
K1, K2 = 0.01, 0.03
#: Quantization bins of the entropy estimate (beyond: unpredictable values).
RADIUS = 32768
#: Sample seed (features of an array are deterministic).
SEED = 20251223
#: Largest array the features accept (values).
MAX_VALUES = 1 << 40


@dataclass(frozen=True)
class Features:
    """Features of one field (:func:`features`); cheap to keep, save (:meth:`save`) and reuse
    for every bound and compressor.

    Attributes:
        shape: the array's shape.
        itemsize: 4 (float32) or 8 (float64).
        long_axes: number of axes longer than 1 (of the 3D view, :func:`as_3d_shape`).
        n_valid: number of valid (finite, non-missing) values.
        missing_share: share of missing values (NaN, fill value, mask) in [0, 1].
        value_range: max - min of the valid values (data unit).
        std: standard deviation of the sampled valid values, in units of the value range.
        residuals: float64 array (len(STRIDES), 3, SAMPLES_PER_GROUP): open-loop cubic
            interpolation residuals in units of the value range (the features do not depend
            on the data's unit), NaN where no point was sampled.
        flat: bool array (k, 3): the flat-axis settings the compressor's tuner would try
            (:func:`_flat_candidates`); the first refines no axis first.
        window_var: float64 (WINDOWS,): variances of the sampled SSIM windows in units of the
            value range squared (computed on values in range units), NaN where a window held a missing value.
    """

    shape: tuple
    itemsize: int
    long_axes: int
    n_valid: int
    missing_share: float
    value_range: float
    std: float
    residuals: np.ndarray
    flat: np.ndarray
    window_var: np.ndarray

    def save(self, path) -> None:
        """Write the features to ``path`` (an ``.npz`` archive of plain arrays, at exactly
        that path), atomically."""
        import io

        from ..atomic import atomic_write

        buf = io.BytesIO()
        np.savez(buf, **{f.name: np.asarray(getattr(self, f.name)) for f in fields(self)})
        atomic_write(path, buf.getvalue())

    @classmethod
    def load(cls, path) -> Features:
        """Read features written by :meth:`save`.

        Raises:
            InvalidInputError: the file is missing or is not such a feature file.
        """
        try:
            with np.load(path, allow_pickle=False) as z:
                kw = {f.name: np.asarray(z[f.name]) for f in fields(cls)}
            out = cls(shape=tuple(int(n) for n in kw["shape"].astype(np.int64)), itemsize=int(kw["itemsize"]),
                      long_axes=int(kw["long_axes"]), n_valid=int(kw["n_valid"]),
                      missing_share=float(kw["missing_share"]), value_range=float(kw["value_range"]),
                      std=float(kw["std"]), residuals=kw["residuals"].astype(np.float64),
                      flat=kw["flat"].astype(np.bool_), window_var=kw["window_var"].astype(np.float64))
        except Exception as exc:  # (zip, npy, missing keys, wrong kinds: all mean "not a feature file")
            raise InvalidInputError(f"{path} is not a strata.quality feature file: {exc}") from exc
        if (out.residuals.shape != (len(STRIDES), 3, SAMPLES_PER_GROUP) or out.flat.ndim != 2 or out.flat.shape[1] != 3
                or not len(out.flat) or out.window_var.shape != (WINDOWS,) or out.itemsize not in (4, 8)
                or not math.isfinite(out.value_range) or out.value_range < 0 or not 0 <= out.missing_share <= 1
                or any(n < 0 for n in out.shape)):
            raise InvalidInputError(f"{path}: a feature file of another layout or with values out of range")
        return out

    @property
    def n_values(self) -> int:
        return math.prod(self.shape)

    def at(self, eb: float) -> dict:
        """Model-free estimates at the absolute error bound ``eb`` (data unit, > 0).

        Returns a dict: ``bits`` (estimated bits/value of the quantization codes, order-0
        entropy plus unpredictable values, over the valid values), ``zero_share`` (share of
        codes in the zero bin), ``nmse`` (estimated mean squared error over the value range
        squared), ``psnr`` (dB), ``ssim`` (mean SSIM from the window variances and the error).
        Where the compressor's tuner may refine a short, rough axis first (``flat``), the
        smaller of the two estimates is taken.
        """
        e = eb / self.value_range if self.value_range > 0 else 1.0
        group = _group_estimates(self.residuals, e, 8 * self.itemsize, _closed_loop_noise())  # (S, 3, 3)
        sampled = np.isfinite(group[..., 0])
        best = None
        for flat in self.flat:
            w = _weights(as_3d_shape(self.shape), tuple(bool(f) for f in flat)) * sampled
            if w.sum() == 0:
                continue
            est = (np.where(sampled[..., None], group, 0.0) * w[..., None]).sum(axis=(0, 1)) / w.sum()
            if best is None or est[0] < best[0]:
                best = est
        if best is None:  # nothing sampled (tiny or almost all missing): every value its own bin
            best = np.array([8.0 * self.itemsize, e * e / 3, 0.0])
        bits, nmse, zero = (float(v) for v in best)
        psnr = -10 * math.log10(nmse) if nmse > 0 else math.inf
        return dict(bits=bits, zero_share=zero, nmse=nmse, psnr=psnr, ssim=self.ssim_at(nmse))

    def ssim_at(self, nmse: float) -> float:
        """SSIM of the windows if each got independent errors of mean square ``nmse`` (over the
        value range squared): with ``sy^2 = sx^2 + nmse`` and ``sxy = sx^2`` the
        contrast-structure term is ``(2 sx^2 + C2) / (2 sx^2 + nmse + C2)``, ``C2 = K2^2``;
        the luminance term is taken as 1."""
        v = self.window_var[np.isfinite(self.window_var)]
        if not v.size:
            return 1.0
        c2 = K2 * K2
        return float(np.mean((2 * v + c2) / (2 * v + nmse + c2)))


def features(array, *, mask=None, fill_value=None) -> Features:
    """Features of ``array`` (stage 1 of :mod:`strata.quality`), on a fixed-size sample.

    Args:
        array: float32 or float64 array, any shape; NaN, values equal to ``fill_value``,
            ``mask == True`` and a masked array's masked points are missing (left out, as
            :func:`strata.lossy.compress` treats them).
        mask, fill_value: as for :func:`strata.compress`.

    Returns:
        :class:`Features` (deterministic for a given array).

    Raises:
        UnsupportedDtypeError: not float32/float64.
        InvalidInputError: an empty array, no valid value, a bad mask or fill value.
    """
    from ..lossy import missing
    from ..lossy.codec import validate_array

    data, ma_mask = missing.split_masked(array)
    a = validate_array(data)
    if a.size == 0:
        raise InvalidInputError("cannot predict the compression of an empty array")
    if a.size > MAX_VALUES:
        raise InvalidInputError(f"array of {a.size} values is beyond {MAX_VALUES}")
    flat = a.reshape(-1)
    if mask is not None or fill_value is not None or ma_mask is not None:
        miss = missing.find(a, mask, fill_value)
        if ma_mask is not None:
            miss |= ma_mask.reshape(-1)
        miss = miss.view(np.uint8)
    else:
        miss = missing.NO_MISSING
    lo = hi = math.nan
    if not miss.size:  # (numpy's vectorized min/max; NaN or inf in the data: the scan below)
        lo, hi = float(flat.min()), float(flat.max())
    if math.isfinite(lo) and math.isfinite(hi):
        n_valid = a.size
    else:
        n_valid, lo, hi = _scan(flat, miss)
    if n_valid == 0:
        raise InvalidInputError("every value is missing: nothing to predict")
    n_missing = a.size - n_valid
    vrange = float(hi) - float(lo)
    if not math.isfinite(vrange):
        raise InvalidInputError("the valid values' range overflows float64")
    unit = vrange if vrange > 0 else 1.0
    a3 = a.reshape(as_3d_shape(a.shape))
    m3 = miss.reshape(a3.shape) if miss.size else np.zeros((1, 1, 1), np.uint8)
    rng = np.random.default_rng(SEED)
    residuals = np.full((len(STRIDES), 3, SAMPLES_PER_GROUP), np.nan)
    starts = rng.random((len(STRIDES), 3, SAMPLES_PER_GROUP // RUN, 3))
    _residuals(a3, m3, miss.size > 0, np.array(STRIDES, np.int64), starts, residuals)
    flats = _flat_candidates(a3.shape, residuals)
    window_var = np.full(WINDOWS, np.nan)
    _windows(a3, m3, miss.size > 0, float(lo), unit, rng.random((WINDOWS, 3)), window_var)
    std = _sample_std(a3, m3, miss.size > 0, float(lo), unit, rng.random((STD_SAMPLES, 3)))  # (in range units)
    residuals /= unit
    long_axes = sum(n > 1 for n in a3.shape)
    return Features(shape=tuple(a.shape), itemsize=a.dtype.itemsize, long_axes=long_axes, n_valid=n_valid,
                    missing_share=n_missing / a.size, value_range=vrange, std=std, residuals=residuals,
                    flat=flats, window_var=window_var)


def _flat_candidates(shape, residuals: np.ndarray) -> np.ndarray:
    """The flat-axis settings strata's tuner would try (:func:`strata.lossy.tune.candidates`:
    a short axis across which the data vary ``ROUGH_RATIO`` times more than along the others),
    judged by the mean absolute stride-1 residual along each axis: bool (k, 3), first row
    none flat."""
    with np.errstate(invalid="ignore"):
        rough = [float(np.nanmean(np.abs(residuals[0, d]))) if np.isfinite(residuals[0, d]).any() else math.nan
                 for d in range(3)]
    out = [(False, False, False)]
    for d, n in enumerate(shape):
        others = [rough[e] for e in range(3) if e != d and shape[e] > 1 and math.isfinite(rough[e])]
        if 2 <= n <= tune.FLAT_MAX and math.isfinite(rough[d]) and others \
                and rough[d] > tune.ROUGH_RATIO * max(others):
            out.append(tuple(e == d for e in range(3)))
    return np.array(out, np.bool_)


@lru_cache(maxsize=256)
def _weights(shape, flat) -> np.ndarray:
    """Share of the points predicted at each sampled stride along each axis: a step of
    stride ``s`` refines the axes in order 0, 1, 2 (each pass doubles the points), the
    coarsest sampled stride takes every coarser step too; a flat axis is not interpolated
    along (its slices are coded as unlike 2D fields)."""
    w = np.zeros((len(STRIDES), 3))
    long = [d for d in range(3) if shape[d] > 1 and not flat[d]]
    if not long:
        return w
    k = len(long)
    per_pass = np.array([2.0 ** j for j in range(k)]) / (2.0 ** k - 1)  # pass j: 2^j of 2^k - 1
    remaining = 1.0
    for si in range(len(STRIDES)):
        share = remaining * (1 - 2.0 ** -k) if si < len(STRIDES) - 1 else remaining
        w[si, long] = share * per_pass
        remaining -= share
    return w


_NOISE = None


def _closed_loop_noise() -> np.ndarray:
    """Fixed draws of the error a cubic interpolation inherits from its four reconstructed
    neighbours, each off by a uniform share of the bound: ``sum w_k u_k``, in units of eb."""
    global _NOISE
    if _NOISE is None:
        u = np.random.default_rng(SEED + 1).uniform(-1, 1, (SAMPLES_PER_GROUP, 4))
        _NOISE = u @ np.array([-1, 9, 9, -1]) / 16
    return _NOISE


@njit(nogil=True, cache=True)
def _at(a3, m3, has_missing, q):
    """``(valid, value)`` of point ``q`` (an int64 array of 3 indexes)."""
    i, j, k = q[0], q[1], q[2]
    if (has_missing and m3[i, j, k]) or not np.isfinite(a3[i, j, k]):
        return False, 0.0
    return True, float(a3[i, j, k])


@njit(nogil=True, cache=True)
def _residuals(a3, m3, has_missing, strides, starts, out):
    """Open-loop cubic (linear near the ends) interpolation residuals in runs of ``RUN``
    points along each axis at each stride; ``starts`` (uniform [0, 1)) place the runs."""
    n = a3.shape
    q = np.zeros(3, np.int64)
    for si in range(strides.size):
        s = strides[si]
        for d in range(3):
            if n[d] <= 2 * s:
                continue
            slots = (n[d] - s + 2 * s - 1) // (2 * s)  # points at odd multiples of s
            for r in range(starts.shape[2]):
                first = int(starts[si, d, r, d] * slots)
                for t in range(RUN):
                    slot = first + t
                    c = s + 2 * s * slot
                    if slot >= slots or c + s >= n[d]:
                        break  # (the last point of a line is extrapolated by the compressor)
                    for e in range(3):
                        q[e] = int(starts[si, d, r, e] * n[e])
                    q[d] = c
                    ok, x = _at(a3, m3, has_missing, q)
                    q[d] = c - s
                    ok1, x1 = _at(a3, m3, has_missing, q)
                    q[d] = c + s
                    ok2, x2 = _at(a3, m3, has_missing, q)
                    if not (ok and ok1 and ok2):
                        continue
                    pred = 0.5 * (x1 + x2)
                    if c - 3 * s >= 0 and c + 3 * s < n[d]:
                        q[d] = c - 3 * s
                        ok0, x0 = _at(a3, m3, has_missing, q)
                        q[d] = c + 3 * s
                        ok3, x3 = _at(a3, m3, has_missing, q)
                        if ok0 and ok3:
                            pred = (-x0 + 9.0 * x1 + 9.0 * x2 - x3) / 16.0
                    out[si, d, r * RUN + t] = x - pred


@njit(nogil=True, cache=True)
def _windows(a3, m3, has_missing, lo, unit, starts, out):
    """Sample variance (as skimage's SSIM) of ``WINDOW`` x ``WINDOW`` windows in the last
    two axes (the whole extent of a shorter axis), of the values in units of the range
    (``(x - lo) / unit``); NaN where a window holds a missing value."""
    n = a3.shape
    w1, w2 = min(WINDOW, n[1]), min(WINDOW, n[2])
    m = w1 * w2
    for r in range(starts.shape[0]):
        i = int(starts[r, 0] * n[0])
        j0 = int(starts[r, 1] * (n[1] - w1 + 1))
        k0 = int(starts[r, 2] * (n[2] - w2 + 1))
        total = 0.0
        ok = True
        for j in range(j0, j0 + w1):  # (two passes: values far from 0 keep their small spread)
            for k in range(k0, k0 + w2):
                v = a3[i, j, k]
                if (has_missing and m3[i, j, k]) or not np.isfinite(v):
                    ok = False
                total += (v - lo) / unit
        if not ok:
            continue
        mean = total / m
        sq = 0.0
        for j in range(j0, j0 + w1):
            for k in range(k0, k0 + w2):
                d = (a3[i, j, k] - lo) / unit - mean
                sq += d * d
        out[r] = sq / max(1, m - 1)


@njit(nogil=True, cache=True)
def _variance(v):
    """Population variance, two passes (values far from 0 keep their small spread)."""
    mean = v.mean()
    return float(((v - mean) ** 2).mean())


@njit(nogil=True, cache=True)
def _sample_std(a3, m3, has_missing, lo, unit, starts):
    n = a3.shape
    q = np.zeros(3, np.int64)
    vals = np.empty(starts.shape[0])
    c = 0
    for r in range(starts.shape[0]):
        for e in range(3):
            q[e] = int(starts[r, e] * n[e])
        ok, v = _at(a3, m3, has_missing, q)
        if ok:
            vals[c] = (v - lo) / unit
            c += 1
    return np.sqrt(_variance(vals[:c])) if c >= 2 else 0.0


@njit(nogil=True, cache=True)
def _group_estimates(residuals, e, raw_bits, noise):
    """``(S, 3, 3)``: bits/value, mean squared error and zero-bin share of each sampled
    (stride, axis) group quantized with bound ``e`` (residuals and ``e`` in units of the value
    range; NaN for a group without samples). Reconstructed neighbours carry the quantization
    error: ``noise`` (units of the bound) is added to each residual."""
    s_n, d_n, n = residuals.shape
    out = np.full((s_n, d_n, 3), np.nan)
    q = np.empty(n)
    for si in range(s_n):
        for d in range(d_n):
            c = 0
            sq = 0.0
            zero = 0
            big = 0
            for k in range(n):
                r = residuals[si, d, k]
                if not np.isfinite(r):
                    continue
                rc = r + e * noise[k]
                b = np.rint(rc / (2 * e))
                if abs(b) > RADIUS - 1:  # an unpredictable value: stored whole, no error
                    big += 1
                    continue
                err = rc - 2 * e * b
                sq += err * err
                zero += b == 0
                q[c] = b
                c += 1
            m = c + big
            if m == 0:
                continue
            srt = np.sort(q[:c])
            h = 0.0
            run = 1
            bins = 0
            for k in range(1, c + 1):
                if k < c and srt[k] == srt[k - 1]:
                    run += 1
                    continue
                p = run / m
                h -= p * np.log2(p)
                run = 1
                bins += 1
            # Miller-Madow: the plug-in entropy of m draws is low by about (bins - 1) / (2 m ln 2)
            h += max(0, bins - 1) / (2 * m * np.log(2.0))
            out[si, d, 0] = h + big / m * raw_bits
            out[si, d, 1] = sq / m
            out[si, d, 2] = zero / m
    return out


@njit(nogil=True, cache=True)
def _scan(flat, miss):
    """``(number of valid values, min, max)``: finite and not marked in ``miss`` (uint8, empty:
    nothing marked)."""
    n = 0
    lo = np.inf
    hi = -np.inf
    has_missing = miss.size > 0
    for i in range(flat.size):
        v = flat[i]
        if (has_missing and miss[i]) or not np.isfinite(v):
            continue
        n += 1
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    return n, lo, hi
