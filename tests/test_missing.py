"""Missing values (NaN, fill values, masks): the bound on every valid value, every missing
point bit-exact, the mask coded per level and read per region, and bad input refused."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import strata
from strata.container import Source, pack, unpack_header
from strata.errors import CorruptStreamError, InvalidInputError, StrataError
from strata.lossy.header import LossyHeader
from strata.lossy.metadata import MAX_METADATA_BYTES
from strata.lossy.missing import finite_range

from .conftest import SCI, repack_header


def _check(a, y, missing, eb):
    """Bound on every valid value (float64), exact bits on every missing point."""
    bits = f"u{a.dtype.itemsize}"
    assert np.array_equal(a[missing].view(bits), y[missing].view(bits))
    valid = ~missing & np.isfinite(a)
    if valid.any():
        assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= eb
    inf = ~missing & np.isinf(a)
    assert np.array_equal(a[inf], y[inf])


def _smooth(shape, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    for ax in range(a.ndim):
        a = np.cumsum(a, axis=ax)
    return a.astype(dtype)


def _blobs(shape, seed, share):
    """A coherent random mask (thresholded smooth noise) with about ``share`` missing."""
    f = _smooth(shape, seed, np.float64)
    return f > np.quantile(f, 1 - share) if share > 0 else np.zeros(shape, bool)


shapes = st.sampled_from([(1,), (37,), (5, 9), (40, 33), (3, 17, 20), (12, 16, 16), (2, 3, 9, 11), (1, 1, 1)])


@given(shape=shapes, seed=st.integers(0, 2**16), share=st.sampled_from([0.0, 0.05, 0.3, 0.9, 1.0]),
       kind=st.sampled_from(["nan", "fill", "mask", "ma", "payloads"]), dtype=st.sampled_from([np.float32, np.float64]),
       coherent=st.booleans(), rel=st.sampled_from([1e-2, 1e-4, 0.0]))
def test_random_masks_round_trip(shape, seed, share, kind, dtype, coherent, rel):
    rng = np.random.default_rng(seed)
    a = _smooth(shape, seed, dtype)
    miss = _blobs(shape, seed + 1, share) if coherent else rng.random(shape) < share
    kwargs = {}
    if kind == "nan":
        a[miss] = np.nan
    elif kind == "fill":
        a[miss] = dtype(1e20)
        kwargs["fill_value"] = 1e20
    elif kind == "mask":
        kwargs["mask"] = miss
    elif kind == "payloads":  # NaN with several payloads and signs, and a fill value
        bits = np.array([0x7FC00000, 0xFFC00001, 0x7F812345], np.uint32) if dtype == np.float32 else \
            np.array([0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000123], np.uint64)
        pat = bits.view(dtype)[rng.integers(0, 3, a.shape)]
        a[miss] = pat[miss]
        a.reshape(-1)[::7][miss.reshape(-1)[::7]] = dtype(-999.0)
        kwargs["fill_value"] = -999.0
    valid_vals = a[~miss] if kind in ("mask", "ma") else a[~miss]
    eb = rel * (float(valid_vals.max()) - float(valid_vals.min())) if valid_vals.size else 0.0
    x = np.ma.MaskedArray(a, mask=miss) if kind == "ma" else a
    blob = strata.compress(x, rel_error=rel, **kwargs)
    r = strata.open(blob)
    assert r.missing_count == int(miss.sum())
    assert r.error_bound == pytest.approx(eb, rel=1e-12, abs=0)
    y = r.read()
    _check(a, y, miss, eb)
    assert np.array_equal(r.read_mask(), miss)
    ym = r.read(masked=True)
    assert np.array_equal(np.ma.getmaskarray(ym), miss)
    # a region is the same selection of a full decode, mask included
    region = tuple(slice(n // 3, max(n // 3 + 1, 2 * n // 3)) for n in shape)
    assert np.array_equal(r.read(region=region).view(f"u{a.dtype.itemsize}"), y[region].view(f"u{a.dtype.itemsize}"))
    assert np.array_equal(r.read_mask(region=region), miss[region])
    # a preview keeps missing points missing, at their exact bits
    if len(r.levels) > 1:
        p = r.read(level=len(r.levels) - 2)
        assert np.array_equal(p[miss].view(f"u{a.dtype.itemsize}"), a[miss].view(f"u{a.dtype.itemsize}"))


@given(st.sampled_from([np.float32, np.float64]), st.integers(1, 200_000), st.integers(0, 2**32 - 1),
       st.integers(-30, 30), st.sampled_from(["any", "positive", "negative", "signed zero"]),
       st.sampled_from([None, np.inf, -np.inf, np.nan]))
def test_finite_range_is_numpys_min_and_max(dtype, n, seed, scale, sign, bad):
    """The one-pass range over the values' bits (serial below 65536 values, in blocks above)
    gives numpy's min and max, or None for both as soon as one value is not finite."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10.0 ** scale).astype(dtype)
    if sign == "positive":
        x = np.abs(x)
    elif sign == "negative":
        x = -np.abs(x)
    elif sign == "signed zero":
        x[rng.integers(n, size=3)] = -0.0
        x[rng.integers(n)] = 0.0
    if bad is not None:
        x[rng.integers(n)] = bad
        assert finite_range(x) == (None, None)
        return
    lo, hi = finite_range(x)
    assert (lo, hi) == (float(x.min()), float(x.max()))
    assert type(lo) is float and type(hi) is float


def test_rel_bound_is_relative_to_the_valid_range():
    # the original bug: a 1e20 fill made the bound 1e17
    a = _smooth((40, 60), 1) * np.float32(0.01) + np.float32(290.0)
    land = _blobs(a.shape, 2, 0.3)
    a[land] = np.float32(1e20)
    r = strata.open(strata.compress(a, rel_error=1e-3, fill_value=1e20))
    lo, hi = float(a[~land].min()), float(a[~land].max())
    assert r.valid_range == (lo, hi)
    assert r.error_bound == pytest.approx(1e-3 * (hi - lo))
    _check(a, r.read(), land, r.error_bound)


def test_infinities_stay_exact_and_out_of_the_range():
    a = _smooth((30, 30), 3)
    a[3, 4], a[20, 1] = np.inf, -np.inf
    a[10:12, 10:15] = np.nan
    r = strata.open(strata.compress(a, rel_error=1e-3))
    fin = np.isfinite(a)
    assert r.valid_range == (float(a[fin].min()), float(a[fin].max()))
    _check(a, r.read(), np.isnan(a), r.error_bound)


def test_mask_broadcasts_along_time():
    a = _smooth((50, 24, 30), 4)
    land = _blobs((24, 30), 5, 0.4)
    r = strata.open(strata.compress(a, abs_error=0.01, mask=land))
    full = np.broadcast_to(land, a.shape)
    assert r.missing_count == full.sum()
    _check(a, r.read(), full, 0.01)


def test_all_missing_is_exact_and_tiny():
    a = np.full((30, 40, 50), 1e20, np.float32)
    blob = strata.compress(a, rel_error=1e-2, fill_value=1e20)
    r = strata.open(blob)
    assert r.error_bound == 0 and r.valid_range is None and r.fill_value == np.float32(1e20)
    assert np.array_equal(r.read().view(np.uint32), a.view(np.uint32))
    assert len(blob) < 2000


def test_nan_fill_value_means_nan():
    a = _smooth((20, 20), 6)
    a[5:9, 5:9] = np.nan
    y = strata.decompress(strata.compress(a, abs_error=0.1, fill_value=float("nan")))
    _check(a, y, np.isnan(a), 0.1)


@pytest.mark.parametrize("kwargs", [
    {"mask": np.zeros((3, 3), bool)},            # wrong shape
    {"mask": np.full((20, 20), 0.5)},            # not boolean
    {"mask": np.full((20, 20), 2, np.int8)},     # integers other than 0/1
    {"fill_value": 1e300},                        # overflows float32
    {"fill_value": 1e-50},                        # underflows float32
    {"fill_value": "land"},
    {"fill_value": [1.0, 2.0]},
    {"metadata": {"x": float("nan")}},           # not strict JSON
    {"metadata": {"x": object()}},
    {"metadata": ["not", "a", "dict"]},
    {"metadata": {"x": "a" * (MAX_METADATA_BYTES + 1)}},
])
def test_bad_missing_value_arguments(kwargs):
    with pytest.raises(InvalidInputError):
        strata.compress(np.zeros((20, 20), np.float32), abs_error=0.1, **kwargs)


def test_integer_mask_of_zeros_and_ones_is_accepted():
    a = _smooth((20, 20), 7)
    m = np.zeros((20, 20), np.uint8)
    m[3:6, 2:9] = 1
    y = strata.decompress(strata.compress(a, abs_error=0.1, mask=m))
    _check(a, y, m.astype(bool), 0.1)


def test_metadata_round_trip_and_checksum():
    meta = {"name": "tos", "dims": ["lat", "lon"], "attrs": {"units": "K", "note": "é"}}
    a = _smooth((16, 16), 8)
    blob = strata.compress(a, abs_error=0.1, metadata=meta)
    r = strata.open(blob)
    assert r.metadata == meta
    off = bytes(blob).index(b'"units"')
    bad = bytearray(blob)
    bad[off + 2] ^= 1
    r = strata.open(bytes(bad))
    r.read()  # the data do not need the metadata
    with pytest.raises(CorruptStreamError, match="metadata"):
        _ = r.metadata


def test_damaged_mask_is_detected():
    a = _smooth((30, 40, 50), 9)
    miss = _blobs(a.shape, 10, 0.3)
    blob = strata.compress(a, abs_error=0.01, mask=miss)
    r = strata.open(blob)
    lv = r.header.levels[-1]
    start = r.levels[-1].offset + lv.head_len
    for where in (start + 1, start + lv.mask_index_len + lv.mask_len // 2):
        bad = bytearray(blob)
        bad[where] ^= 0x10
        with pytest.raises(CorruptStreamError):
            strata.decompress(bytes(bad))
        with pytest.raises(CorruptStreamError):
            strata.open(bytes(bad)).read_mask()
    rng = np.random.default_rng(11)
    for pos in rng.integers(0, len(blob), 60).tolist():
        bad = bytearray(blob)
        bad[pos] ^= 0x04
        with pytest.raises(StrataError):
            strata.decompress(bytes(bad))


def test_streams_without_the_header_extension_still_decode():
    # a stream as written before missing values existed: no extension byte in the header (and
    # every step interpolated dimension by dimension, as then)
    from strata.lossy.codec import compress
    from strata.lossy.tune import Settings

    a = _smooth((20, 30, 40), 12)
    blob = compress(a, abs_error=0.01, settings=Settings())
    raw, off = unpack_header(Source(blob), 1)
    h = LossyHeader.from_bytes(raw, len(blob))
    assert h.predictors is None
    h.valid_range = None
    old = h.to_bytes()[:-1]
    y = strata.decompress(pack(1, old, [blob[off:]]))
    assert np.array_equal(y, strata.decompress(blob))


def test_mask_never_costs_more_than_filling():
    # real coastline (sea where the shared topography is below 0), sea values kept
    path = SCI / "sscand_elevation_823x726.f32"
    if not path.exists():
        pytest.skip("../shared/data/sci not present")
    elev = np.fromfile(path, "<f4").reshape(823, 726)
    land = elev >= 0
    a = np.where(land, np.float32(1e20), elev)
    for eb in (1.0, 10.0):
        masked = strata.compress(a, abs_error=eb, fill_value=1e20)
        filled = strata.compress(np.where(land, elev[~land].mean(dtype=np.float64).astype(np.float32), elev),
                                 abs_error=eb)
        assert len(masked) < len(filled)
        _check(a, strata.decompress(masked), land, eb)


def test_values_under_a_mask_are_kept():
    # a mask over real values: they come back bit for bit too (stored apart)
    a = _smooth((20, 25), 13)
    m = _blobs(a.shape, 14, 0.2)
    y = strata.decompress(strata.compress(a, abs_error=0.1, mask=m))
    _check(a, y, m, 0.1)


def test_region_reads_with_small_code_chunks_and_default_mask_chunks():
    # noisy data at a tight bound: the finer levels' codes use half-size chunks, the mask keeps
    # the default edge; every region read must match the full decode, mask included
    rng = np.random.default_rng(15)
    a = (_smooth((40, 72, 72), 16) + rng.standard_normal((40, 72, 72)) * 5).astype(np.float32)
    miss = _blobs(a.shape, 17, 0.35)
    a[miss] = np.nan
    r = strata.open(strata.compress(a, abs_error=1e-3))
    tiles = {r._level_tables(lv.index).tile for lv in r.levels[1:]}
    assert min(tiles) < r._part.default_tile()
    full = r.read()
    _check(a, full, miss, 1e-3)
    for region in [(slice(0, 9), slice(30, 41), slice(50, 72)), (5, slice(None), slice(10, 12)),
                   (slice(20, 40), slice(0, 72, 7), 33)]:
        assert np.array_equal(r.read(region=region).view(np.uint32), full[region].view(np.uint32))
        assert np.array_equal(r.read_mask(region=region), miss[region])
        assert np.array_equal(r.read(level=len(r.levels) - 2, region=region).view(np.uint32),
                              r.read(level=len(r.levels) - 2)[region].view(np.uint32))


def test_inconsistent_missing_value_fields_are_refused():
    # a header that announces missing values its sections do not hold, and the reverse
    a = _smooth((10, 20, 30), 18)
    plain = strata.compress(a, abs_error=0.01)
    miss = _blobs(a.shape, 19, 0.3)
    masked = strata.compress(a, abs_error=0.01, mask=miss)

    def announce(h):
        h.missing_count, h.fill_bits, h.origin_pred = 7, b"\0\0\xc0\x7f", 0.0

    def drop(h):
        h.missing_count = 0
        for lv in h.levels:
            lv.mask_index_len = lv.mask_len = 0

    def shift(h):
        h.levels[-1].mask_index_len += 1
        h.levels[-1].payload_len -= 1

    for blob, mutate in ((plain, announce), (masked, drop), (masked, shift)):
        with pytest.raises(CorruptStreamError):
            strata.decompress(repack_header(blob, mutate))


def test_level_grids_and_fortran_order_with_a_mask():
    a = np.asfortranarray(_smooth((24, 40, 36), 20))
    miss = _blobs(a.shape, 21, 0.4)
    r = strata.open(strata.compress(np.ma.MaskedArray(a, mask=miss), abs_error=0.05))
    _check(np.ascontiguousarray(a), r.read(), miss, 0.05)
    for lv in r.levels:
        sl = tuple(slice(None, None, q) for q in lv.stride)
        g = r.read(level=lv.index, full_resolution=False, masked=True)
        assert g.shape == lv.shape
        assert np.array_equal(np.ma.getmaskarray(g), miss[sl])
        _check(a[sl], g.data, miss[sl], lv.error_bound)


def test_a_missing_count_that_disagrees_with_the_mask_is_refused():
    """Issue 35: a header whose missing_count is off by one from its mask was accepted, and
    ``strata info`` reported the header's number. Whole reads, the whole mask and the reader's
    attribute now check it (a region read decodes part of the mask and cannot)."""
    a = _smooth((12, 30, 40), 20)
    miss = _blobs(a.shape, 21, 0.3)
    a[miss] = np.nan
    blob = strata.compress(a, abs_error=0.01)
    assert strata.open(blob).missing_count == miss.sum()
    for delta in (1, -1):
        def off(h, delta=delta):
            h.missing_count += delta

        bad = repack_header(blob, off)
        for call in (lambda r: r.read(), lambda r: r.read_mask(), lambda r: r.missing_count,
                     lambda r: r.read(level=len(r.levels) - 2), lambda r: r.read(enhance=False, masked=True)):
            with pytest.raises(CorruptStreamError, match="missing"):
                call(strata.open(bad))
        region = (slice(2, 5), slice(3, 9), slice(4, 20))  # (what it decodes is right)
        assert np.array_equal(strata.open(bad).read_mask(region=region), miss[region])


def test_exact_values_where_the_contract_puts_none_are_refused():
    """An exact value (kept bit for bit apart from the coded values) is +-Inf at a valid point
    or a missing point's other bit pattern: a finite one at a valid point, or one with the fill
    pattern at a missing point, is a damaged exact-value section (its CRC recomputed)."""
    from tests import fuzzing as fz

    a = _smooth((6, 20, 30), 22)
    a[0, 0, 3] = np.inf
    a[2, 5, 7:9] = np.nan  # (the fill pattern)
    a.view(np.uint32)[3, 3, 3] = 0x7FC00001  # a NaN of another payload: an exact value
    blob = strata.compress(a, abs_error=0.01)
    y = strata.decompress(blob)
    assert np.isinf(y[0, 0, 3]) and y.view(np.uint32)[3, 3, 3] == 0x7FC00001
    inf, fill = np.float32(np.inf), np.float32(np.nan)
    for values in ([np.float32(1.5), a[3, 3, 3]], [fill, a[3, 3, 3]], [inf, fill]):
        root = fz.parse_lossy(blob)
        fz._find(root, "exact: values")[0].value = np.array(values, np.float32).tobytes()
        with pytest.raises(CorruptStreamError, match="exact value"):
            strata.decompress(fz.serialize(root))
