"""Data on a lattice (strata.lossy.predictors.lattice): integer and fixed-step measurements are coded as their
lattice index, losslessly below half a step and with bins aligned to the lattice above."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strata
from strata.container import KIND_LOSSY, Source, pack, unpack_header
from strata.errors import CorruptStreamError
from strata.lossy import header as header_mod
from strata.lossy.header import LossyHeader
from strata.lossy.predictors import lattice

from .conftest import SHARED

ZOO = SHARED / "data" / "zoo"


def counts(shape, seed=0, scale=40.0):
    """Smooth integer counts (a camera's or a radar's), float32."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    for ax in range(a.ndim):
        a = np.cumsum(a, axis=ax)
    return np.rint(a / np.abs(a).max() * scale + 3 * scale).astype(np.float32)


def plain_bytes(monkeypatch, a, **kw) -> int:
    """The size of the stream coded without the lattice."""
    with monkeypatch.context() as m:
        m.setattr(lattice, "choose", lambda *args: None)
        return len(strata.compress(a, **kw))


def test_integers_below_half_a_step_are_lossless_and_smaller(monkeypatch):
    a = counts((20, 40, 48))
    a[3:6, 10:20, 5:9] = np.nan
    for eb, smaller in ((0.0, 0.2), (0.2, 0.8), (0.45, 1.0)):
        blob = strata.compress(a, abs_error=eb)
        with strata.open(blob) as r:
            assert (r.header.lattice.step, r.header.lattice.m) == (1.0, 0)
            y = r.read()
        assert np.array_equal(y.view(np.uint32), a.view(np.uint32))  # bit for bit, NaN included
        assert len(blob) < smaller * plain_bytes(monkeypatch, a, abs_error=eb)


def test_bins_aligned_with_the_lattice_above_half_a_step(monkeypatch):
    a = counts((30, 50, 40), seed=1, scale=300.0)
    for eb in (1.02, 2.2, 3.1):
        blob = strata.compress(a, abs_error=eb)
        with strata.open(blob) as r:
            assert r.header.lattice.m == int(eb) and r.levels[-1].error_bound <= eb
        y = strata.decompress(blob)
        err = np.abs(y.astype(np.float64) - a)
        assert err.max() <= int(eb) and np.array_equal(y, np.rint(y))  # within m steps, on the lattice
        assert len(blob) < plain_bytes(monkeypatch, a, abs_error=eb)


def test_decimal_steps_are_found_and_kept():
    """0.01 dB steps stored as float32 (a satellite radar's reflectivity)."""
    rng = np.random.default_rng(2)
    k = np.cumsum(rng.integers(-3, 4, 20000)) + 2000
    a = (k * 0.01).astype(np.float32)
    assert lattice.find(a, None) == (0.0, 0.01)
    blob = strata.compress(a, abs_error=0.004)
    with strata.open(blob) as r:
        assert r.header.lattice.m == 0
    assert np.array_equal(strata.decompress(blob), a)
    y = strata.decompress(strata.compress(a, abs_error=0.0105))
    assert np.abs(y.astype(np.float64) - a).max() <= 0.0105


@pytest.mark.parametrize("eb, m", [(0.0, 0), (0.3, 0), (0.47, 0), (0.7, None), (1.02, 1), (1.4, 1), (1.45, None),
                                   (2.3, 2), (7.05, 7), (7.9, None), (9.0, None)])
def test_the_rule_follows_the_bin_widths(eb, m):
    """The lattice is used when its bins (2m + 1 steps) are wider than plain coding's (2 eb) by
    1/16 at least."""
    a = counts((8, 30, 30), seed=3)
    got = lattice.choose(a.reshape(-1), None, eb, (float(a.min()), float(a.max())))
    assert (got.m if got is not None else None) == m
    if m is not None:
        assert 2 * m + 1 >= (1 + lattice.GAIN) * 2 * eb


def test_fields_off_any_lattice_are_coded_as_before(monkeypatch):
    rng = np.random.default_rng(4)
    a = np.cumsum(rng.standard_normal((40, 60)), axis=1).astype(np.float32)
    assert lattice.find(a.reshape(-1), None) is None
    blob = strata.compress(a, rel_error=1e-3)
    with monkeypatch.context() as m:
        m.setattr(lattice, "choose", lambda *args: None)
        assert strata.compress(a, rel_error=1e-3) == blob
    big = np.array([2.0 ** 25, 2.0 ** 25 + 2, 2.0 ** 25 + 8], np.float32)  # (beyond float32's exact integers)
    assert lattice.choose(big, None, 0.0, (float(big.min()), float(big.max()))) is None


def test_regions_levels_and_previews_on_a_lattice():
    a = counts((24, 40, 36), seed=5)
    a[0, :5, :5] = np.inf
    blob = strata.compress(a, abs_error=0.3)
    whole = strata.decompress(blob)
    assert np.array_equal(whole, a)
    box = (slice(3, 17), slice(8, 31), 7)
    assert np.array_equal(strata.decompress(blob, region=box), whole[box])
    with strata.open(blob) as r:
        for lv in r.levels:
            grid = r.read(level=lv.index, full_resolution=False)
            q = lv.stride
            ref = a[::q[0], ::q[1], ::q[2]]
            fin = np.isfinite(ref)
            assert np.abs(grid[fin].astype(np.float64) - ref[fin]).max() <= lv.error_bound
            assert np.array_equal(grid[fin], np.rint(grid[fin]))
        preview = r.read(level=1)
        assert preview.shape == a.shape and np.array_equal(preview[np.isfinite(preview)],
                                                          np.rint(preview[np.isfinite(preview)]))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([1.0, 0.25, 2.0, 0.125, 10.0]), st.integers(-1000, 1000), st.floats(0, 3.2))
def test_every_value_within_the_bound_on_any_lattice(seed, dtype, step, offset_steps, eb_steps):
    rng = np.random.default_rng(seed)
    k = np.cumsum(rng.integers(-4, 5, (6, 9, 11)), axis=2) + rng.integers(-50, 50)
    a = (offset_steps * step + k * step).astype(dtype)
    a[rng.random(a.shape) < 0.05] = np.nan
    eb = eb_steps * step
    blob = strata.compress(a, abs_error=eb)
    y = strata.decompress(blob)
    valid = np.isfinite(a)
    assert np.array_equal(np.isnan(y), ~valid)
    assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= eb
    with strata.open(blob) as r:
        if r.header.lattice is not None and r.header.lattice.m == 0:
            assert np.array_equal(y[valid], a[valid])


def test_a_forged_lattice_is_refused():
    a = counts((10, 20, 20), seed=6)
    blob = strata.compress(a, abs_error=1.05)
    src = Source(blob)
    raw, off = unpack_header(src, KIND_LOSSY)
    h = LossyHeader.from_bytes(raw, src.size)
    assert h.lattice.m == 1
    h.lattice = lattice.Lattice(h.lattice.offset, h.lattice.step, 2)  # 2 steps > the bound
    forged = pack(KIND_LOSSY, h.to_bytes(), [blob[off:]])
    with pytest.raises(CorruptStreamError, match="invalid lattice"):
        strata.decompress(forged)


def test_a_reader_older_than_the_lattice_refuses_it(monkeypatch):
    blob = strata.compress(counts((6, 10, 12), seed=7), abs_error=0.2)
    monkeypatch.setattr(header_mod, "EXT_KNOWN", 32)
    with pytest.raises(CorruptStreamError, match="unknown header extension flags .*later version"):
        strata.decompress(blob)


def test_integer_fields_of_the_zoo():
    """Real integer measurements (a knee MRI slice, 16-bit): lossless below half a step."""
    path = ZOO / "mri_knee_512x512.f32"
    if not path.exists():
        pytest.skip(f"{path} not present")
    a = np.fromfile(path, "<f4").reshape(512, 512)
    assert lattice.find(a.reshape(-1), None) == (0.0, 1.0)
    blob = strata.compress(a, abs_error=0.4)
    assert np.array_equal(strata.decompress(blob), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_negative_zero_keeps_its_sign_below_half_a_step(dtype):
    """-0.0 is on every lattice through 0 but decodes from it as +0.0: at bound 0 (bit for bit
    asked) the encoder codes such a field off the lattice; under any bound > 0 the lattice still
    serves (+0.0 is within it of -0.0)."""
    a = np.tile(np.array([3.0, -0.0, 1.0, 2.0, 5.0, 0.0], dtype), 50).reshape(15, 20)
    blob = strata.compress(a, abs_error=0.0)
    assert strata.open(blob).header.lattice is None
    y = strata.decompress(blob)
    assert np.array_equal(a.view(f"u{a.itemsize}"), y.view(f"u{a.itemsize}"))
    for eb in (0.4, 1.0):
        blob = strata.compress(a, abs_error=eb)
        assert strata.open(blob).header.lattice is not None
        assert np.abs(strata.decompress(blob).astype(np.float64) - a).max() <= eb
