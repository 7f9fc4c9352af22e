"""Property tests of the error bound on hostile values: near overflow, subnormals, constants,
huge dynamic range, NaN and Inf mixed in; every value within the bound or restored exactly."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import strata

_EXTREME = {np.float32: 3e38, np.float64: 1e300}


@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9 if nd > 2 else 40), min_size=nd, max_size=nd)))
    n = int(np.prod(shape))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["extreme", "subnormal", "constant", "dynamic", "smooth"]))
    big = _EXTREME[dtype]
    tiny = float(np.finfo(dtype).smallest_subnormal)
    if kind == "extreme":
        a = rng.choice([-big, big, -big / 3, big / 7, 0.0], n)
    elif kind == "subnormal":
        a = rng.integers(-50, 50, n) * tiny
    elif kind == "constant":
        a = np.full(n, draw(st.sampled_from([0.0, -0.0, 1.5, -big, tiny])))
    elif kind == "dynamic":
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    else:
        a = np.cumsum(rng.standard_normal(n))
    a = a.astype(dtype)
    if draw(st.booleans()):  # non-finite values mixed in
        k = rng.integers(0, n, max(1, n // 10))
        a[k] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype), k.size)
    return a.reshape(shape)


@settings(max_examples=150)
@given(arrays(), st.sampled_from([("abs", 0.0), ("abs", 1e-3), ("abs", 1e30), ("rel", 1e-2), ("rel", 1e-6),
                                  ("rel", 0.0)]))
def test_every_value_within_the_bound_or_exact(a, bound):
    mode, value = bound
    blob = strata.compress(a, **{f"{mode}_error": value})
    r = strata.open(blob)
    y = r.read()
    assert y.shape == a.shape and y.dtype == a.dtype
    finite = np.isfinite(a)
    bits = f"u{a.dtype.itemsize}"
    assert np.array_equal(y[~finite].view(bits), a[~finite].view(bits))
    if finite.any():
        err = np.abs(y[finite].astype(np.float64) - a[finite].astype(np.float64))
        assert err.max() <= r.error_bound
        if r.error_bound == 0:
            assert np.array_equal(y[finite].view(bits), a[finite].view(bits))
    # a region of the stream is the same selection of the full decode
    region = tuple(slice(n // 2, n) for n in a.shape)
    assert np.array_equal(r.read(region=region).view(bits), y[region].view(bits))
