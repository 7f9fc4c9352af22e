"""Precision layers (issue 39): one stream read at any bound from its coarsest layer to its finest,
every valid value within the bound asked, missing values bit for bit, at every level and region;
refinement reads only the layers it lacks; hostile layered headers raise strata.errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strata
from strata.container import KIND_LAYERS, Source, pack, unpack_header
from strata.errors import CorruptStreamError, FormatError, InvalidInputError, ResourceLimitError, TruncatedStreamError
from strata.lossy import LayeredReader, LossyReader
from strata.lossy.layers import layer_bounds, pack_header, parse_header

from .synthetic import same_bits, waves


def _field(shape, seed, dtype=np.float32, holes=True):
    a = waves(shape, seed, dtype, noise=0.02)
    if holes:
        a[tuple(slice(1, max(2, n // 3)) for n in shape)] = np.nan
    return a


def _check(y, a, bound):
    """Every valid value of ``y`` within ``bound`` of ``a``; the others bit for bit."""
    valid = np.isfinite(a)
    assert y.shape == a.shape and y.dtype == a.dtype
    assert same_bits(y[~valid], a[~valid])
    if valid.any():
        assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= bound


@pytest.fixture(scope="module")
def stream():
    a = _field((12, 20, 24), 3)
    return a, strata.compress(a, rel_error=1e-5, progressive="precision", metadata={"units": "K"})


def test_layers_and_bounds(stream):
    a, blob = stream
    vr = float(np.nanmax(a.astype(np.float64)) - np.nanmin(a.astype(np.float64)))
    with strata.open(blob) as r:
        assert isinstance(r, LayeredReader)
        bounds = [lay.error_bound for lay in r.layers]
        assert np.allclose(bounds, [1e-2 * vr, 1e-3 * vr, 1e-4 * vr, 1e-5 * vr], rtol=1e-5)
        assert 1e-5 * vr * (1 - 2e-6) <= r.error_bound <= 1e-5 * vr
        assert r.metadata == {"units": "K"} and r.missing_count == np.isnan(a).sum()
        # a bound computed the reader's own way (a float32 range) is served by its layer
        vr32 = float(np.nanmax(a) - np.nanmin(a))
        assert [r.layer_for(e * vr32) for e in (1e-2, 1e-3, 1e-4, 1e-5)] == [0, 1, 2, 3]
        assert r.layer_for(0.5 * vr) == 0 and r.layer_for(3e-3 * vr) == 1 and r.layer_for() == 3
        with pytest.raises(InvalidInputError, match="finest bound"):
            r.read(error_bound=1e-6 * vr)
        for e in (1.0 * vr, *bounds, 3e-3 * vr, 2e-5 * vr):
            _check(r.read(error_bound=e), a, e)
        # level grids and regions at every layer: within the bound, equal to the whole read's points
        for e in bounds:
            whole = r.read(error_bound=e)
            region = (slice(2, 9), 5, slice(None, None, 3))
            assert same_bits(r.read(region=region, error_bound=e), whole[region])
            lv = r.levels[1]
            grid = r.read(level=1, full_resolution=False, error_bound=e)
            assert same_bits(grid, whole[tuple(slice(None, None, q) for q in lv.stride)])
            masked = r.read(error_bound=e, masked=True)
            assert np.array_equal(np.ma.getmaskarray(masked), np.isnan(a))


def test_bytes_read_are_the_layers_needed(stream):
    """bytes_for is what a read fetches (counted at the source); a whole read at a layer's bound
    is a prefix of the stream; a region reads less; a refinement fetches the difference."""
    a, blob = stream
    with strata.open(blob) as r:
        layers = r.layers
    for k, lay in enumerate(layers):
        for kw in ({}, {"region": (slice(0, 4), slice(3, 9))}, {"level": 1, "full_resolution": False}):
            src = Source(blob)
            with LayeredReader(src) as r:
                want = r.bytes_for(error_bound=lay.error_bound, **kw)
            src = Source(blob)
            with LayeredReader(src) as r:
                r.read(error_bound=lay.error_bound, **kw)
                assert src.bytes_read == want
                if not kw:
                    assert want <= lay.offset + lay.compressed_bytes
                    assert k == 0 or want > layers[k - 1].offset + layers[k - 1].compressed_bytes
    src = Source(blob)
    with LayeredReader(src) as r:
        first = r.retrieve(error_bound=layers[0].error_bound, region=(slice(1, 10), 4))
        before = src.bytes_read
        finer = r.refine(first, error_bound=layers[2].error_bound)
        fetched = src.bytes_read - before
        cost = r.bytes_for(region=(slice(1, 10), 4), error_bound=layers[2].error_bound) \
            - r.bytes_for(region=(slice(1, 10), 4), error_bound=layers[0].error_bound)
        assert fetched == cost and finer.layers == 3 and first.layers == 1
        again = r.retrieve(error_bound=layers[2].error_bound, region=(slice(1, 10), 4))
        assert same_bits(finer.values, again.values) and finer.error_bound == layers[2].error_bound
        assert r.refine(finer, error_bound=layers[0].error_bound) is finer    # (nothing to add)
        _check(r.refine(finer).values, a[1:10, 4], r.error_bound)
        with pytest.raises(InvalidInputError):
            r.refine(finer.values, error_bound=0.1)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([np.float32, np.float64]), st.sampled_from(["rel", "abs"]),
       st.sampled_from([None, (3e-1, 1e-2), (2e-3,)]), st.booleans())
def test_every_layer_meets_its_bound(seed, dtype, mode, layers, fill):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 14, rng.integers(1, 4)))
    a = (waves(shape, seed % 1000, np.float64, noise=float(rng.choice([0.0, 0.1, 3.0])))
         * 10.0 ** rng.integers(-3, 6)).astype(dtype)
    kw = {}
    if a.size > 3:
        a.reshape(-1)[rng.integers(0, a.size, a.size // 4)] = -999.0 if fill else np.nan
        kw = {"fill_value": -999.0} if fill else {}
    valid = np.isfinite(a) & (a != -999.0)
    vr = float(np.ptp(a[valid].astype(np.float64))) if valid.any() else 0.0
    scale = 1.0 if mode == "rel" else max(vr, 1.0)
    layers = None if layers is None else tuple(b * scale for b in layers)
    blob = strata.compress(a, **{f"{mode}_error": 1e-4 * scale}, progressive="precision", layers=layers, **kw)
    with strata.open(blob) as r:
        for lay in r.layers:
            for e in (lay.error_bound, 1.7 * lay.error_bound):
                if e < r.error_bound:
                    continue
                y = r.read(error_bound=e)
                assert same_bits(y[~valid], a[~valid])
                if valid.any():
                    assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= e
                region = tuple(slice(n // 3, n) for n in a.shape)
                assert same_bits(r.read(region=region, error_bound=e), y[region])


def test_memory_and_byte_orders_read_the_same():
    a = _field((10, 14, 9), 5, np.float64)
    base = strata.compress(a, rel_error=1e-4, progressive="precision")
    for other in (np.asfortranarray(a), a.astype(">f8"), a[:, ::-1][:, ::-1]):
        assert strata.compress(other, rel_error=1e-4, progressive="precision") == base


def test_plain_streams_take_an_error_bound():
    a = _field((10, 14, 9), 6)
    blob = strata.compress(a, abs_error=0.01)
    assert same_bits(strata.decompress(blob, error_bound=0.5), strata.decompress(blob))
    with strata.open(blob) as r:
        assert isinstance(r, LossyReader) and r.read(error_bound=0.01).shape == a.shape
    with pytest.raises(InvalidInputError, match="cannot be read at"):
        strata.decompress(blob, error_bound=0.001)
    with pytest.raises(InvalidInputError):
        strata.decompress(blob, error_bound="fine")


def test_bad_arguments():
    a = _field((8, 9), 7)
    for kw in ({"progressive": "resolution"}, {"layers": (1e-2,)}, {"progressive": "precision", "layers": (1e-6,)},
               {"progressive": "precision", "layers": (1e-2, 1e-2)}, {"progressive": "precision", "layers": ("x",)},
               {"progressive": "precision", "enhance": "2x"}, {"progressive": "precision", "layers": [1e-1] * 70}):
        with pytest.raises(InvalidInputError):
            strata.compress(a, rel_error=1e-5, **kw)
    with pytest.raises(InvalidInputError):
        strata.compress(a, target_psnr=40, progressive="precision")
    assert layer_bounds(0.0, 1.0)[-1] == 0.0 and len(layer_bounds(0.0, 1.0)) == 6
    assert layer_bounds(1e-3, 0.0, relative=True) == [1e-3] and len(layer_bounds(1e-3, 0.0)) == 1  # (one value)


def test_edge_arrays():
    for a in (np.zeros((0, 4), np.float32), np.full((3, 5), np.nan, np.float32), np.full((4, 4), 2.5),
              np.array(1.25, np.float32)):
        blob = strata.compress(a, rel_error=1e-3, progressive="precision")
        with strata.open(blob) as r:
            assert len(r.layers) == 1
            assert same_bits(r.read(), a) or np.abs(r.read() - a).max() <= r.error_bound
    # lossless finest layer
    a = _field((6, 7, 8), 8)
    blob = strata.compress(a, abs_error=0.0, progressive="precision")
    with strata.open(blob) as r:
        assert r.error_bound == 0.0 and same_bits(r.read(), a)


def test_hostile_layered_streams(stream):
    a, blob = stream
    src = Source(blob)
    raw, off = unpack_header(src, KIND_LAYERS)
    entries, _ = parse_header(raw)
    bounds, lengths = [e for e, _ in entries], [n for _, n in entries]
    body = blob[off:]

    def remade(b=bounds, n=lengths, payload=body):
        return pack(KIND_LAYERS, pack_header(b, n), [payload])

    assert remade() == blob
    for bad in (remade(b=bounds[::-1]), remade(b=[bounds[0], bounds[0], *bounds[2:]]),
                remade(b=[float("nan"), *bounds[1:]]), remade(b=[bounds[0] / 1e9, *bounds[1:]])):
        with pytest.raises(CorruptStreamError):
            LayeredReader(bad).read()
    with pytest.raises(TruncatedStreamError):
        LayeredReader(remade(n=[lengths[0], lengths[1] + 10**6, *lengths[2:]]))
    with pytest.raises(TruncatedStreamError):
        LayeredReader(blob[:-10])
    # layers swapped: the residual layer first
    swapped = body[lengths[0]:lengths[0] + lengths[1]] + body[:lengths[0]] + body[lengths[0] + lengths[1]:]
    with pytest.raises(CorruptStreamError):
        LayeredReader(remade(n=[lengths[1], lengths[0], *lengths[2:]], payload=swapped)).read()
    # a layer of another array
    other = strata.compress(np.zeros((3, 4)), abs_error=bounds[1] / 2)
    spliced = remade(n=[lengths[0], len(other)], b=bounds[:2], payload=body[:lengths[0]] + other)
    with pytest.raises(CorruptStreamError):
        LayeredReader(spliced).read()
    with pytest.raises(FormatError, match="precision layers"):
        LossyReader(blob)
    with pytest.raises(ResourceLimitError):
        LayeredReader(blob).read(max_output_bytes=1000)
