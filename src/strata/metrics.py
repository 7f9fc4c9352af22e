"""Quality and size metrics of lossy compression, in one place (tests, demo, benchmarks).

All errors are computed in float64 over the values that are finite in the original.
The value range is ``max - min`` of those values, as in SDRBench and SZ3's reports.
"""
from __future__ import annotations

import math

import numpy as np

#: SSIM window edge (skimage's default, Wang et al. 2004 use an 11 x 11 Gaussian).
WINDOW = 7


def _pair(original, decoded):
    a = np.asarray(original)
    b = np.asarray(decoded)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    m = np.isfinite(a)
    if m.all():
        return a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    return a[m].astype(np.float64), b[m].astype(np.float64)


def value_range(original) -> float:
    """``max - min`` over the finite values (0 for none)."""
    a = np.asarray(original)
    f = a[np.isfinite(a)]
    return float(f.max()) - float(f.min()) if f.size else 0.0


def max_abs_error(original, decoded) -> float:
    """Largest ``|x - y|`` (same unit as the data)."""
    a, b = _pair(original, decoded)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def mse(original, decoded) -> float:
    a, b = _pair(original, decoded)
    return float(np.mean(np.square(a - b))) if a.size else 0.0


def _nmse(original, decoded) -> float:
    """Mean squared error over the value range squared, computed in units of the range (no
    overflow or underflow for data far from 1); inf for a constant original with errors."""
    a, b = _pair(original, decoded)
    if not a.size:
        return 0.0
    lo, hi = float(a.min()), float(a.max())
    m = max(abs(lo), abs(hi))
    if m == 0 or hi == lo:
        return 0.0 if np.array_equal(a, b) else math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        d = a / m - b / m  # (the range itself may overflow float64)
        return float(np.mean(np.square(d))) / (hi / m - lo / m) ** 2


def psnr(original, decoded) -> float:
    """Peak signal-to-noise ratio in dB: ``20 log10(range) - 10 log10(MSE)`` (inf if exact)."""
    e = _nmse(original, decoded)
    if e == 0:
        return math.inf
    return -10 * math.log10(e) if math.isfinite(e) else -math.inf


def nrmse(original, decoded) -> float:
    """Root-mean-square error divided by the value range."""
    return math.sqrt(_nmse(original, decoded))


def ssim(original, decoded, *, missing=None) -> float:
    """Mean structural similarity (SSIM, Wang et al., IEEE TIP 2004) of the 2D slices over the
    last two axes, by ``skimage.metrics.structural_similarity`` (7 x 7 uniform windows,
    sample covariances, ``data_range`` = the original's value range, K1 0.01, K2 0.03), averaged
    over every window of every slice (a 3D array of shape (n0, n1, n2) is n0 slices; more axes
    are folded into the first).

    Windows holding a non-finite value of the original or a point of ``missing`` (boolean, of
    the array's shape) are left out; at least one window must remain.

    Raises:
        InvalidInputError: shapes differ, fewer than two axes, a slice side shorter than 7,
            no complete window of valid values.
        MissingDependencyError: scikit-image is not installed (``strata[quality]``).
    """
    from .errors import InvalidInputError, MissingDependencyError

    try:
        from skimage.metrics import structural_similarity
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError("SSIM needs scikit-image: pip install 'strata[quality]'") from exc
    a = np.asarray(original)
    b = np.asarray(decoded)
    if a.shape != b.shape:
        raise InvalidInputError(f"shapes differ: {a.shape} vs {b.shape}")
    if a.ndim < 2 or min(a.shape[-2:]) < WINDOW:
        raise InvalidInputError(f"SSIM needs 2D slices of at least {WINDOW} x {WINDOW} values, not shape {a.shape}")
    shape = a.shape
    a = a.reshape((-1,) + a.shape[-2:])
    b = b.reshape(a.shape)
    bad = ~np.isfinite(a)
    if missing is not None:
        try:
            bad = bad | np.broadcast_to(np.asarray(missing, dtype=bool), shape).reshape(a.shape)
        except ValueError as exc:
            raise InvalidInputError(f"missing mask of shape {np.shape(missing)} does not fit shape {shape}") from exc
    r = value_range(np.where(bad, np.nan, a))
    if r == 0:
        r = 1.0  # (a constant field: SSIM compares against a unit range)
    pad = WINDOW // 2
    total, count = 0.0, 0
    for x, y, m in zip(a, b, bad):
        if not m.any():
            s = structural_similarity(x.astype(np.float64), y.astype(np.float64), data_range=r, win_size=WINDOW)
            n = (x.shape[0] - 2 * pad) * (x.shape[1] - 2 * pad)
            total, count = total + s * n, count + n
            continue
        x = np.where(m, 0.0, x.astype(np.float64))
        y = np.where(m | ~np.isfinite(y), 0.0, y.astype(np.float64))
        _, smap = structural_similarity(x, y, data_range=r, win_size=WINDOW, full=True)
        win_bad = _window_sum(m, WINDOW)[pad:-pad, pad:-pad] > 0
        inner = smap[pad:-pad, pad:-pad]
        total, count = total + float(inner[~win_bad].sum()), count + int((~win_bad).sum())
    if count == 0:
        raise InvalidInputError("SSIM: no 7 x 7 window of valid values")
    return total / count


def _window_sum(m: np.ndarray, w: int) -> np.ndarray:
    """Number of marked points in the ``w`` x ``w`` window centred on each point (0 outside)."""
    c = np.pad(m.astype(np.int64), ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    out = np.zeros(m.shape, np.int64)
    h = w // 2
    n0, n1 = m.shape
    i0, i1 = np.arange(n0), np.arange(n1)
    lo0, hi0 = np.clip(i0 - h, 0, n0), np.clip(i0 + h + 1, 0, n0)
    lo1, hi1 = np.clip(i1 - h, 0, n1), np.clip(i1 + h + 1, 0, n1)
    out[:] = (c[hi0][:, hi1] - c[lo0][:, hi1] - c[hi0][:, lo1] + c[lo0][:, lo1])
    return out


def compression_ratio(original_bytes: int, compressed_bytes: int) -> float:
    """Original size over compressed size."""
    return original_bytes / compressed_bytes


def bit_rate(n_values: int, compressed_bytes: int) -> float:
    """Compressed bits per value."""
    return 8 * compressed_bytes / n_values
