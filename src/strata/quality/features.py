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
* **Sampled values** (``STD_SAMPLES`` at random places, plus a strided sample as strata's
  lattice search takes): their standard deviation, the share of exact zeros and of the most
  common value (sparse fields: mostly-zero volumes, dry radar pixels), and the lattice strata
  would find (:mod:`strata.lossy.predictors.lattice`: its guess from its strided sample, checked on the
  sampled values instead of every value), which tells whether strata codes lattice indices at
  a bound, losslessly below half a step.
* **Mask edges**: in the sampled windows, the share of neighbour pairs along each axis of which
  one point is missing and the other not (the cost of strata's context-coded mask grows with
  its boundary).
* Global statistics: size, dtype, long axes, share of missing values, value range (a full
  pass: the relative bound needs it).

:meth:`Features.at` turns them into the per-bound estimates the predictors correct: the
quantized entropy of the residuals with the closed-loop noise of reconstructed neighbours,
the mean squared error of that quantization (hence a PSNR) and an SSIM from the window
variances and that error; for strata as its encoder would code the field: on the lattice when
:func:`strata.lossy.predictors.lattice.choose`'s rule takes it at that bound, with the level-wise bounds
(:data:`strata.lossy.tune.LEVEL_FACTORS`) when they shrink the estimate as the tuner asks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from numba import njit

from ..errors import InvalidInputError
from ..lossy import tune
from ..lossy.encoder import level_chunks
from ..lossy.partition import Partition, as_3d_shape
from ..lossy.predictors import lattice as lattice_rules

#: Bytes of framing a chunk of a level costs: its length and CRC-32 in the level head and its
#: rANS state (about 10-12 bytes).
CHUNK_FRAMING_BYTES = 11
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
            (:func:`strata.lossy.tune.flat_candidates`); the first refines no axis first.
        window_var: float64 (WINDOWS,): variances of the sampled SSIM windows in units of the
            value range squared (computed on values in range units), NaN where a window held a missing value.
        value_min: min of the valid values (data unit).
        zero_share: share of exact zeros among the sampled valid values.
        mode_share: share of the most common value among the sampled valid values.
        lattice: float64 (2,): ``(offset, step)`` of the lattice every sampled valid value lies
            on exactly (:mod:`strata.lossy.predictors.lattice`), ``(0, 0)`` when none.
        mask_edges: float64 (3,): along each axis of the 3D view, the share of sampled
            neighbour pairs of which exactly one point is missing (0 without missing values or
            where the axis is 1 long).
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
    value_min: float
    zero_share: float
    mode_share: float
    lattice: np.ndarray
    mask_edges: np.ndarray

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
                      flat=kw["flat"].astype(np.bool_), window_var=kw["window_var"].astype(np.float64),
                      value_min=float(kw["value_min"]), zero_share=float(kw["zero_share"]),
                      mode_share=float(kw["mode_share"]), lattice=kw["lattice"].astype(np.float64),
                      mask_edges=kw["mask_edges"].astype(np.float64))
        except Exception as exc:  # (zip, npy, missing keys, wrong kinds: all mean "not a feature file")
            raise InvalidInputError(f"{path} is not a strata.quality feature file (or one of an older "
                                    f"layout): {exc}") from exc
        if (out.residuals.shape != (len(STRIDES), 3, SAMPLES_PER_GROUP) or out.flat.ndim != 2 or out.flat.shape[1] != 3
                or not len(out.flat) or out.window_var.shape != (WINDOWS,) or out.itemsize not in (4, 8)
                or not math.isfinite(out.value_range) or out.value_range < 0 or not 0 <= out.missing_share <= 1
                or any(n < 0 for n in out.shape) or not math.isfinite(out.value_min)
                or not 0 <= out.zero_share <= 1 or not 0 <= out.mode_share <= 1
                or out.lattice.shape != (2,) or not np.isfinite(out.lattice).all() or out.lattice[1] < 0
                or out.mask_edges.shape != (3,) or not ((out.mask_edges >= 0) & (out.mask_edges <= 1)).all()):
            raise InvalidInputError(f"{path}: a feature file of another layout or with values out of range")
        return out

    @property
    def n_values(self) -> int:
        return math.prod(self.shape)

    def on_lattice(self, eb: float):
        """The :class:`strata.lossy.predictors.lattice.Lattice` strata would code the field on at the
        absolute bound ``eb`` (its rule, :func:`strata.lossy.predictors.lattice.choose`, applied to the
        sampled lattice), or None."""
        if not self.lattice[1] > 0 or not math.isfinite(eb):
            return None
        dtype = np.dtype(np.float32 if self.itemsize == 4 else np.float64)
        lo = self.value_min
        return lattice_rules.usable((float(self.lattice[0]), float(self.lattice[1])), eb, dtype,
                                     (lo, lo + self.value_range))

    def at(self, eb: float, strata: bool = True) -> dict:
        """Model-free estimates at the absolute error bound ``eb`` (data unit, > 0).

        Returns a dict: ``bits`` (estimated bits/value of the quantization codes, order-0
        entropy plus unpredictable values, over the valid values), ``ctx_bits`` (the same with
        each code's entropy conditioned on the magnitude of the previous code of its line, as
        strata's context coder sees it), ``zero_share`` (share of codes in the zero bin),
        ``nmse`` (estimated mean squared error over the value range squared), ``psnr`` (dB;
        inf when the field decodes exactly), ``ssim`` (mean SSIM from the window variances and
        the error), ``lattice_m`` (with ``strata``: the steps of error strata allows on the
        lattice it codes on, 0 = lossless; -1 off a lattice) and ``level_factors`` (whether the
        level-wise bounds were taken). Where the compressor's tuner may refine a short, rough
        axis first (``flat``), the smaller of the estimates is taken; with ``strata`` the
        encoder's lattice rule and level-wise bounds (:data:`strata.lossy.tune.LEVEL_FACTORS`,
        kept when they shrink the estimate by :data:`strata.lossy.tune.LEVEL_MARGIN`) apply.
        """
        on = self.on_lattice(eb) if strata else None
        scale = self.value_range if self.value_range > 0 else 1.0
        if on is not None:  # (lattice indices coded with the bound m + 1/2 - slack steps)
            s = on.step / scale
            e, noise = on.coding_bound * s, on.m * s
        else:
            e = eb / self.value_range if self.value_range > 0 else 1.0
            noise = e
        best, levels = self._estimate(e, noise, np.ones(len(STRIDES)))
        level = False
        if strata:
            for alpha8, beta8 in tune.LEVEL_FACTORS:
                f = np.array([min((alpha8 / 8) ** j, beta8 / 8) for j in range(len(STRIDES))])
                est, lv = self._estimate(e, noise, f)
                if est[0] >= (1 - tune.LEVEL_MARGIN) * best[0]:
                    break
                best, levels, level = est, lv, True
        bits, nmse, zero, ctx_bits = (float(v) for v in best)
        if on is not None:  # (decoded indices rounded: errors of 0..m whole steps)
            nmse = on.m * (on.m + 1) / 3 * (on.step / scale) ** 2
        psnr = -10 * math.log10(nmse) if nmse > 0 else math.inf
        framing = self._framing(levels) if strata else 0.0
        return dict(bits=bits, ctx_bits=ctx_bits, zero_share=zero, nmse=nmse, psnr=psnr,
                    ssim=self.ssim_at(nmse) if nmse > 0 else 1.0, lattice_m=-1 if on is None else on.m,
                    level_factors=level, framing_bits=framing)

    def _framing(self, levels) -> float:
        """Bits per value of strata's chunk framing (:data:`CHUNK_FRAMING_BYTES` a chunk) under
        the encoder's chunk-edge rule (:func:`strata.lossy.encoder.choose_tile`), each level's
        size estimated from ``levels`` (bits per point at each sampled stride; the coarsest
        stride's rate for every coarser level); 0 without an estimate."""
        if levels is None or self.n_values <= 0:
            return 0.0
        part = Partition.get(as_3d_shape(self.shape))
        valid = 1 - self.missing_share
        total = 0
        for level in range(1, part.num_levels):
            stride = max(part.level_stride(level))
            si = min(int(math.log2(stride)), len(STRIDES) - 1)
            est_bytes = levels[si] * part.level_points(level) * valid / 8
            total += CHUNK_FRAMING_BYTES * level_chunks(part, level, est_bytes)
        return 8 * total / self.n_values

    def _estimate(self, e: float, noise: float, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``(bits, nmse, zero share, context bits)`` with bound ``e / factors[s]`` at stride
        ``s`` (range units) and reconstructed neighbours off by ``noise / factors[s]``, under the
        flat axes and pass order the tuner would take; and the bits per point at each sampled
        stride (None when nothing was sampled)."""
        group = _group_estimates(self.residuals, e / factors, noise / factors, 8 * self.itemsize,
                                 _closed_loop_noise())  # (S, 3, 4)
        sampled = np.isfinite(group[..., 0])
        shape3 = as_3d_shape(self.shape)

        def weighed(flat, order):
            w = _weights(shape3, flat, order) * sampled
            if w.sum() == 0:
                return None, None
            # bits per point at each stride: its axes' estimates weighed by their shares of its points
            share = w.sum(axis=1)
            per_point = (np.where(sampled, group[..., 0], 0.0) * w).sum(axis=1) / np.where(share > 0, share, 1.0)
            return (np.where(sampled[..., None], group, 0.0) * w[..., None]).sum(axis=(0, 1)) / w.sum(), per_point

        best, best_flat, levels = None, None, None
        for flat in self.flat:
            flat = tuple(bool(f) for f in flat)
            est, lv = weighed(flat, (0, 1, 2))
            if est is not None and (best is None or est[0] < best[0]):
                best, best_flat, levels = est, flat, lv
        if best is None:  # nothing sampled (tiny or almost all missing): every value its own bin
            return np.array([8.0 * self.itemsize, e * e / 3, 0.0, 8.0 * self.itemsize]), None
        # the tuner's pass-order rule on the best flat setting
        if sum(n > 1 for n in shape3) > 1:
            first = best[0]
            for order in tune.ORDERS:
                est, lv = weighed(best_flat, order)
                if est is not None and est[0] < (1 - tune.ORDER_MARGIN) * first and est[0] < best[0]:
                    best, levels = est, lv
        return best, levels

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
    flats = np.array(tune.flat_candidates(a3, m3 if miss.size else None), np.bool_)
    window_var = np.full(WINDOWS, np.nan)
    edges = np.zeros((3, 2))
    _windows(a3, m3, miss.size > 0, float(lo), unit, rng.random((WINDOWS, 3)), window_var, edges, n_missing > 0)
    vals = _sample_values(a3, m3, miss.size > 0, rng.random((STD_SAMPLES, 3)))
    std = math.sqrt(_variance((vals - float(lo)) / unit)) if vals.size >= 2 else 0.0  # (in range units)
    zero_share, mode_share = _shares(vals)
    found = _lattice(flat, miss, vals)
    residuals /= unit
    long_axes = sum(n > 1 for n in a3.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        mask_edges = np.where(edges[:, 1] > 0, edges[:, 0] / np.maximum(edges[:, 1], 1), 0.0)
    return Features(shape=tuple(a.shape), itemsize=a.dtype.itemsize, long_axes=long_axes, n_valid=n_valid,
                    missing_share=n_missing / a.size, value_range=vrange, std=std, residuals=residuals,
                    flat=flats, window_var=window_var, value_min=float(lo), zero_share=zero_share,
                    mode_share=mode_share, lattice=np.array(found if found is not None else (0.0, 0.0), np.float64),
                    mask_edges=mask_edges)


def _shares(vals: np.ndarray) -> tuple[float, float]:
    """``(share of exact zeros, share of the most common value)`` of sampled values."""
    if not vals.size:
        return 0.0, 0.0
    _, counts = np.unique(vals, return_counts=True)
    return float(np.count_nonzero(vals == 0)) / vals.size, float(counts.max()) / vals.size


def _lattice(flat: np.ndarray, miss: np.ndarray, vals: np.ndarray):
    """``(offset, step)`` of the lattice strata would find (:func:`strata.lossy.predictors.lattice.choose`),
    or None: its guess from its own strided sample, checked on the sampled valid values ``vals``
    (float64) instead of every value; integers whose strided sample overstates the step get the
    step of ``vals`` and the strided sample together (strata takes every value's)."""
    itemsize = flat.dtype.itemsize
    with np.errstate(all="ignore"):
        strided = lattice_rules.sample(flat, miss)
        guess = lattice_rules.guess(strided, itemsize)
    check = np.ascontiguousarray(np.concatenate([vals, strided]).astype(flat.dtype))
    if not check.size:
        return None
    if guess is not None and not _on(check, guess) and float(guess[1]).is_integer():
        with np.errstate(all="ignore"):
            guess = lattice_rules.guess(np.unique(check.astype(np.float64)), itemsize)
    if guess is None or not _on(check, guess):
        return None
    big = max(abs(float(np.min(check))), abs(float(np.max(check)))) if check.size else 0.0
    if (big + abs(guess[0])) / guess[1] >= lattice_rules.EXACT_INTEGER[itemsize]:
        return None  # (indices beyond the dtype's exact integers: strata never codes them)
    return guess


def _on(values: np.ndarray, guess) -> bool:
    offset, step = guess
    if not (step > 0 and math.isfinite(step) and math.isfinite(offset)):
        return False
    return lattice_rules.exact(values, np.zeros(0, np.uint8), offset, step)


@lru_cache(maxsize=256)
def _weights(shape, flat, order=(0, 1, 2)) -> np.ndarray:
    """Share of the points predicted at each sampled stride along each axis: a step of
    stride ``s`` refines the axes in ``order`` (each pass doubles the points), the coarsest
    sampled stride takes every coarser step too; a flat axis is not interpolated along (its
    slices are coded as unlike 2D fields)."""
    w = np.zeros((len(STRIDES), 3))
    long = [d for d in order if shape[d] > 1 and not flat[d]]
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
def _windows(a3, m3, has_missing, lo, unit, starts, out, edges, count_edges):
    """Sample variance (as skimage's SSIM) of ``WINDOW`` x ``WINDOW`` windows in the last
    two axes (the whole extent of a shorter axis), of the values in units of the range
    (``(x - lo) / unit``); NaN where a window holds a missing value. ``edges[d]`` (float64
    (3, 2)) accumulates, along axis ``d``, the neighbour pairs of the windows' points (along
    axis 0: each point and the next slice's) of which exactly one is missing, and all pairs
    (with ``count_edges``: only where some value is missing)."""
    n = a3.shape
    w1, w2 = min(WINDOW, n[1]), min(WINDOW, n[2])
    m = w1 * w2
    e0 = e1 = e2 = p0 = p1 = p2 = 0
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
                if not count_edges:
                    continue
                here = (has_missing and m3[i, j, k] != 0) or not np.isfinite(v)
                if i + 1 < n[0]:
                    e0 += here != ((has_missing and m3[i + 1, j, k] != 0) or not np.isfinite(a3[i + 1, j, k]))
                    p0 += 1
                if j + 1 < j0 + w1:
                    e1 += here != ((has_missing and m3[i, j + 1, k] != 0) or not np.isfinite(a3[i, j + 1, k]))
                    p1 += 1
                if k + 1 < k0 + w2:
                    e2 += here != ((has_missing and m3[i, j, k + 1] != 0) or not np.isfinite(a3[i, j, k + 1]))
                    p2 += 1
        if not ok:
            continue
        mean = total / m
        sq = 0.0
        for j in range(j0, j0 + w1):
            for k in range(k0, k0 + w2):
                d = (a3[i, j, k] - lo) / unit - mean
                sq += d * d
        out[r] = sq / max(1, m - 1)
    edges[0, 0] += e0
    edges[0, 1] += p0
    edges[1, 0] += e1
    edges[1, 1] += p1
    edges[2, 0] += e2
    edges[2, 1] += p2


@njit(nogil=True, cache=True)
def _variance(v):
    """Population variance, two passes (values far from 0 keep their small spread)."""
    mean = v.mean()
    return float(((v - mean) ** 2).mean())


@njit(nogil=True, cache=True)
def _sample_values(a3, m3, has_missing, starts):
    """The valid values (float64, the data's unit) at the sampled places ``starts``."""
    n = a3.shape
    q = np.zeros(3, np.int64)
    vals = np.empty(starts.shape[0])
    c = 0
    for r in range(starts.shape[0]):
        for e in range(3):
            q[e] = int(starts[r, e] * n[e])
        ok, v = _at(a3, m3, has_missing, q)
        if ok:
            vals[c] = v
            c += 1
    return vals[:c]


#: Entropy (bits) up to which the plug-in estimate of ``SAMPLES_PER_GROUP`` codes is trusted;
#: beyond, the codes are binned 2, 4, ... times coarser until their entropy is below it, and each
#: halving adds a bit (a sample of 512 cannot show more than 9 bits: fine bounds would be
#: underestimated).
SAFE_BITS = 5.0


@njit(nogil=True, cache=True)
def _group_estimates(residuals, e, scale, raw_bits, noise):
    """``(S, 3, 4)``: bits/value, mean squared error, zero-bin share and context bits/value of
    each sampled (stride, axis) group quantized with bound ``e[stride]`` (residuals and bounds
    in units of the value range; NaN for a group without samples). Reconstructed neighbours
    carry the quantization error: ``noise`` (units of ``scale[stride]``, the largest error of a
    reconstructed value) is added to each residual. Context bits: the entropy of each code given
    the magnitude class (0, 1, 2 or more; unknown at the start of a run or after a missing point)
    of the previous code of its run, as strata's context coder conditions on coded neighbours.
    A residual of exactly 0 (a constant stencil) gets no noise with the probability that its
    stencil's points had residuals of exactly 0 at the next coarser stride. Entropies above
    :data:`SAFE_BITS` are taken from coarser bins (see there)."""
    s_n, d_n, n = residuals.shape
    out = np.full((s_n, d_n, 4), np.nan)
    q = np.empty(n)
    key = np.empty(n)
    rcs = np.empty(n)
    ctx = np.empty(n, np.int64)
    # share of exact-zero residuals per stride: the reconstructed stencil of a zero residual at
    # stride s is exact when its points' own residuals (stride 2s) were exactly 0 too
    zeros = np.zeros(s_n)
    for si in range(s_n):
        cnt = 0
        for d in range(d_n):
            for k in range(n):
                r = residuals[si, d, k]
                if np.isfinite(r):
                    cnt += 1
                    zeros[si] += r == 0
        zeros[si] = zeros[si] / cnt if cnt else 0.0
    # (a stencil point is exact when its own stencil was: the shares multiply up the strides)
    exacts = np.ones(s_n)
    for si in range(s_n - 2, -1, -1):
        exacts[si] = (min(1.0, zeros[si + 1] / zeros[si]) if zeros[si] > 0 else 0.0) * exacts[si + 1]
    for si in range(s_n):
        es = e[si]
        exact = exacts[si]
        for d in range(d_n):
            c = 0
            sq = 0.0
            zero = 0
            big = 0
            prev = -1  # (magnitude class of the previous code of the run, -1 unknown)
            for k in range(n):
                if k % RUN == 0:
                    prev = -1
                r = residuals[si, d, k]
                if not np.isfinite(r):
                    prev = -1
                    continue
                # (a residual of exactly 0 comes from a constant stencil -- a run of zeros, a
                # flat background -- whose reconstructed neighbours are exact, no noise, for the
                # share ``exact`` of them: the sampled places k / n spread it evenly)
                rc = r + scale[si] * noise[k] if r != 0 or (k + 0.5) / n >= exact else 0.0
                b = np.rint(rc / (2 * es))
                if abs(b) > RADIUS - 1:  # an unpredictable value: stored whole, no error
                    big += 1
                    prev = 2
                    continue
                err = rc - 2 * es * b
                sq += err * err
                zero += b == 0
                rcs[c] = rc
                ctx[c] = prev + 1
                prev = min(int(abs(b)), 2)
                c += 1
            m = c + big
            if m == 0:
                continue
            h, hc = 0.0, 0.0
            for j in range(40):  # (coarser bins while the entropy is beyond what the sample shows)
                width = 2 * es * 2.0 ** j
                for k in range(c):
                    q[k] = np.rint(rcs[k] / width)
                    key[k] = ctx[k] * 4.0 * RADIUS + q[k]
                h = _entropy(np.sort(q[:c]), m)
                if h <= SAFE_BITS or j == 39:
                    # conditional: the entropy of the (context, code) pairs less that of the contexts
                    hc = _entropy(np.sort(key[:c]), m) - _entropy(np.sort(ctx[:c].astype(np.float64)), m)
                    h += j
                    hc += j
                    break
            out[si, d, 0] = h + big / m * raw_bits
            out[si, d, 1] = sq / m
            out[si, d, 2] = zero / m
            out[si, d, 3] = min(hc, h) + big / m * raw_bits
    return out


@njit(nogil=True, cache=True)
def _entropy(srt, m):
    """Plug-in entropy (bits) of sorted symbols ``srt`` as shares of ``m`` draws, with the
    Miller-Madow correction (the plug-in entropy of m draws is low by about (bins - 1) / (2 m ln 2))."""
    c = srt.size
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
    return h + max(0, bins - 1) / (2 * m * np.log(2.0))


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
