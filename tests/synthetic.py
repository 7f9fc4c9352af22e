"""Synthetic fields for the tests, the fuzzer's bases and the golden streams; a bit-exact
comparison of arrays."""
from __future__ import annotations

import numpy as np


def waves(shape, seed=0, dtype=np.float32, fmax=0.6, noise=0.0):
    """A smooth field: a sum of four products of sines of random frequencies (up to ``fmax``
    radians per point) and phases, plus ``noise`` times white noise."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    a = np.zeros(shape)
    for _ in range(4):
        phase, freq = rng.uniform(0, 6, len(shape)), rng.uniform(0.05, fmax, len(shape))
        a += np.prod([np.sin(freq[d] * grids[d] + phase[d]) for d in range(len(shape))], axis=0)
    if noise:
        a += noise * rng.standard_normal(shape)
    return a.astype(dtype)


def same_bits(x, y) -> bool:
    """Same shape, dtype and bits (NaN payloads and signed zeros included)."""
    x, y = np.asarray(x), np.asarray(y)
    return (x.shape == y.shape and x.dtype == y.dtype
            and np.array_equal(x.view(f"u{x.dtype.itemsize}"), y.view(f"u{y.dtype.itemsize}")))
