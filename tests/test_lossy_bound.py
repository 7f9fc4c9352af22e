"""The error bound is a promise: every decoded value is within it, on real and random data."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import strata
from strata.lossy import Settings
from strata.lossy import compress as lossy_compress
from strata.metrics import max_abs_error

from .conftest import load_field, sci_params


@pytest.mark.parametrize("path", sci_params())
@pytest.mark.parametrize("rel", [1e-2, 1e-3, 1e-4])
def test_bound_on_shared_fields(path, rel, field_cache):
    a = load_field(path, field_cache)
    eb = rel * (float(a.max()) - float(a.min()))
    blob = strata.compress(a, rel_error=rel)
    y = strata.decompress(blob)
    assert y.shape == a.shape and y.dtype == a.dtype
    assert max_abs_error(a, y) <= eb
    # and it compresses: the streams carry real information, not the raw array
    assert len(blob) < a.nbytes / 2


shapes = st.lists(st.integers(1, 37), min_size=1, max_size=4).filter(lambda s: np.prod(s) <= 40000)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), shape=shapes,
       rel=st.sampled_from([1e-1, 1e-2, 1e-3, 1e-5]), smooth=st.booleans())
def test_bound_random_arrays(data, dtype, shape, rel, smooth):
    seed = data.draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if smooth:  # a smooth field with noise: exercises long zero runs and the contexts
        a = np.cumsum(np.cumsum(a, axis=-1), axis=0) * 0.1 + rng.standard_normal(shape) * 0.01
    a = (a * data.draw(st.sampled_from([1e-30, 1e-3, 1.0, 1e5, 1e30]))).astype(dtype)
    eb = rel * (float(a.max()) - float(a.min()))
    y = strata.decompress(strata.compress(a, abs_error=eb))
    assert y.shape == a.shape and y.dtype == a.dtype
    assert max_abs_error(a, y) <= eb


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                  elements=st.floats(-1e6, 1e6, width=32)),
       st.sampled_from([0.0, 1e-6, 0.5, 100.0]))
@example(np.array([0.5, -0.0, 1.0], np.float32), 0.0)  # (on a lattice, with a negative zero: found here)
def test_bound_arbitrary_values(a, eb):
    """Any finite float32 content, including huge jumps and denormals, at any bound."""
    y = strata.decompress(strata.compress(a, abs_error=eb))
    assert max_abs_error(a, y) <= eb
    if eb == 0:
        assert np.array_equal(a.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("settings_", [Settings(cubic=False), Settings(flat=(True, False, False)),
                                       Settings(order=(2, 1, 0)), Settings(alpha8=12, beta8=24)])
def test_bound_every_predictor_setting(settings_):
    rng = np.random.default_rng(1)
    a = np.cumsum(rng.standard_normal((13, 40, 33)), axis=2).astype(np.float32)
    eb = 1e-3 * float(np.ptp(a))
    y = strata.decompress(lossy_compress(a, abs_error=eb, settings=settings_))
    assert max_abs_error(a, y) <= eb


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_constant_array(dtype):
    a = np.full((17, 5, 9), 3.25, dtype=dtype)
    blob = strata.compress(a, rel_error=1e-3)  # value range 0: the bound is 0, a lossless round trip
    assert np.array_equal(strata.decompress(blob), a)
    assert len(blob) < 200


@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1), ()])
def test_single_element(shape):
    a = np.full(shape, -7.5, dtype=np.float32)
    y = strata.decompress(strata.compress(a, abs_error=0.1))
    assert y.shape == a.shape and abs(float(y.reshape(-1)[0]) + 7.5) <= 0.1


@pytest.mark.parametrize("shape", [(0,), (3, 0, 5)])
def test_empty_array(shape):
    a = np.zeros(shape, dtype=np.float64)
    y = strata.decompress(strata.compress(a, abs_error=1.0))
    assert y.shape == a.shape and y.dtype == a.dtype


def test_zero_bound_is_lossless():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((20, 31)).astype(np.float64)
    y = strata.decompress(strata.compress(a, abs_error=0.0))
    assert np.array_equal(a.view(np.uint64), y.view(np.uint64))


def test_nonfinite_values_round_trip_bit_exact():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((9, 30, 30)).astype(np.float32)
    a[0, 0, 0] = np.nan
    a[3, 4, 5] = np.inf
    a[8, 29, 29] = -np.inf
    payload_nan = np.array([0x7FC12345], dtype=np.uint32).view(np.float32)[0]
    a[5, 5, 5] = payload_nan
    y = strata.decompress(strata.compress(a, rel_error=1e-3))
    bad = ~np.isfinite(a)
    assert np.array_equal(a[bad].view(np.uint32), y[bad].view(np.uint32))
    finite = a[~bad]
    eb = 1e-3 * (float(finite.max()) - float(finite.min()))
    assert max_abs_error(finite, y[~bad]) <= eb


def test_big_endian_and_fortran_inputs():
    a = np.asfortranarray(np.linspace(0, 1, 6 * 7 * 8).reshape(6, 7, 8)).astype(">f8")
    y = strata.decompress(strata.compress(a, abs_error=1e-4))
    assert y.shape == a.shape
    assert max_abs_error(a, y) <= 1e-4


def test_more_than_three_dimensions():
    rng = np.random.default_rng(5)
    a = np.cumsum(rng.standard_normal((3, 4, 10, 12)), axis=-1).astype(np.float32)
    r = strata.open(strata.compress(a, abs_error=1e-2))
    assert r.shape == a.shape
    assert max_abs_error(a, r.read()) <= 1e-2
    region = (slice(1, 3), 2, slice(3, 9), slice(None))
    assert np.array_equal(r.read(region=region), r.read()[region])


@pytest.mark.parametrize("spikes", [False, True])
def test_narrow_and_int32_codes_decode_alike(spikes, monkeypatch):
    """The decoder holds the codes of large streams as uint16 (``NARROW_RADIUS``) when the tables
    of every level it reads rule out ``|q| >= 2**15``, else as int32 (spikes of a million bins need them); a
    whole read, a region read and a coarser level decode bit-identically either way, within
    the bound."""
    from strata.lossy import reader
    from strata.lossy.reader import LossyReader

    rng = np.random.default_rng(7)
    g = np.meshgrid(*(np.linspace(0, 3, n) for n in (24, 40, 52)), indexing="ij")
    a = (np.sin(g[0]) * np.cos(g[1]) + 0.5 * g[2] + 0.01 * rng.standard_normal(g[0].shape)).astype(np.float32)
    if spikes:
        a[::7, ::11, ::13] += 1e3  # |q| about 5e5 at eb = 1e-3: quantized, not unpredictable
    eb = 1e-3
    blob = strata.compress(a, abs_error=eb)
    r = LossyReader(blob)
    top = len(r.levels) - 1
    assert r._codes_dtype(top) == np.int32  # (a small stream: its codes stay in cache)
    monkeypatch.setattr(reader, "NARROW_MIN_POINTS", 0)
    assert r._codes_dtype(top) == (np.int32 if spikes else np.uint16)
    reads = [dict(), dict(region=(slice(3, 17), slice(5, 33), slice(10, 50))), dict(level=top - 1)]
    narrow = [strata.decompress(blob, **kw) for kw in reads]
    monkeypatch.setattr(LossyReader, "_codes_dtype", lambda self, level: np.int32)
    wide = [strata.decompress(blob, **kw) for kw in reads]
    for y, z in zip(narrow, wide):
        assert y.dtype == z.dtype and np.array_equal(y.view(np.uint32), z.view(np.uint32))
    assert max_abs_error(a, narrow[0]) <= eb
    assert max_abs_error(a[3:17, 5:33, 10:50], narrow[1]) <= eb
