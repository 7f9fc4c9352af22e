"""Quality and size metrics of lossy compression, in one place (tests, demo, benchmarks).

All errors are computed in float64 over the values that are finite in the original.
The value range is ``max - min`` of those values, as in SDRBench and SZ3's reports.
"""
from __future__ import annotations

import math

import numpy as np


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


def psnr(original, decoded) -> float:
    """Peak signal-to-noise ratio in dB: ``20 log10(range) - 10 log10(MSE)`` (inf if exact)."""
    e = mse(original, decoded)
    r = value_range(original)
    if e == 0:
        return math.inf
    if r == 0:
        return -math.inf
    return 20 * math.log10(r) - 10 * math.log10(e)


def nrmse(original, decoded) -> float:
    """Root-mean-square error divided by the value range."""
    r = value_range(original)
    e = math.sqrt(mse(original, decoded))
    return e / r if r else (0.0 if e == 0 else math.inf)


def compression_ratio(original_bytes: int, compressed_bytes: int) -> float:
    """Original size over compressed size."""
    return original_bytes / compressed_bytes


def bit_rate(n_values: int, compressed_bytes: int) -> float:
    """Compressed bits per value."""
    return 8 * compressed_bytes / n_values
