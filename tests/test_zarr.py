"""strata in zarr v3 (serializer), numcodecs and xarray: bounds per value, missing values,
partial decoding equal to a full decode, configuration validation, damaged chunks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

from strata.chunk_codec import ChunkConfig, resolve_rel_error  # noqa: E402
from strata.errors import (  # noqa: E402
    CorruptStreamError,
    FormatError,
    InvalidInputError,
    StrataError,
    UnsupportedDtypeError,
)
from strata.numcodecs import Strata  # noqa: E402
from strata.zarr import NAME, StrataCodec  # noqa: E402

from .conftest import SCI  # noqa: E402
from .zarr_stores import CountingStore  # noqa: E402


def _field(shape=(40, 33, 49), seed=0):
    path = SCI / "era5_t2m_744x33x49.f32"
    if path.exists() and shape[1:] == (33, 49):
        return np.fromfile(path, "<f4").reshape(744, 33, 49)[:shape[0]].copy()
    g = np.random.default_rng(seed)
    t = np.linspace(0, 6, shape[0])[:, None, None] + np.linspace(0, 3, shape[1])[None, :, None]
    return (280 + 5 * np.sin(t + np.linspace(0, 2, shape[2])) + 0.05 * g.standard_normal(shape)).astype(np.float32)


def _array(data, chunks, codec, fill_value=np.nan, store=None):
    store = zarr.storage.MemoryStore() if store is None else store
    z = zarr.create_array(store, shape=data.shape, chunks=chunks, dtype=data.dtype, serializer=codec,
                          compressors=None, fill_value=fill_value)
    z[:] = data
    return z, store


def _check_bound(x, y, eb, missing):
    assert np.array_equal(np.isnan(y), np.isnan(x))
    ok = ~missing & np.isfinite(x)
    err = np.abs(x[ok].astype(np.float64) - y[ok].astype(np.float64))
    assert err.max(initial=0) <= eb
    assert np.array_equal(x[missing].view(np.uint32 if x.itemsize == 4 else np.uint64),
                          y[missing].view(np.uint32 if x.itemsize == 4 else np.uint64))


def test_round_trip_edges_holes_and_fill_values():
    x = _field()
    x[:, :4, :6] = np.nan                 # a hole
    x[3, 10, 10:20] = -9999.0             # CF _FillValue given in the codec config
    x[5, 20, 1:3] = -1.0                  # the zarr array's own fill value
    codec = StrataCodec(abs_error=0.02, fill_value=-9999.0)
    z, store = _array(x, (16, 20, 30), codec, fill_value=-1.0)  # chunks do not divide the shape
    y = z[:]
    missing = np.isnan(x) | (x == -9999.0) | (x == -1.0)
    _check_bound(x, y, 0.02, missing)
    assert z.metadata.to_dict()["codecs"][0] == {"name": NAME, "configuration": {
        "abs_error": 0.02, "fill_value": -9999.0, "version": 1}}
    # reopened from its metadata alone: the codec comes back through the zarr.codecs entry point
    z2 = zarr.open_array(store, mode="r")
    assert isinstance(z2.serializer, StrataCodec) and z2.serializer == codec
    assert np.array_equal(z2[:], y, equal_nan=True)


def test_float64_and_unwritten_chunks():
    x = np.cumsum(np.random.default_rng(1).standard_normal((30, 50)), axis=1)
    z = zarr.create_array(zarr.storage.MemoryStore(), shape=(60, 50), chunks=(30, 25), dtype="f8",
                          serializer=StrataCodec(abs_error=1e-6), compressors=None, fill_value=0.5)
    z[:30] = x
    y = z[:]
    assert np.abs(y[:30] - x).max() <= 1e-6
    assert np.all(y[30:] == 0.5)


def _full_and_array():
    x = _field((40, 33, 49), seed=2)
    x[7:9, 3:30, 5] = np.nan
    z, _ = _array(x, (16, 20, 30), StrataCodec(abs_error=0.05))
    return x, z, z[:]


@pytest.fixture(scope="module")
def decoded():
    return _full_and_array()


def test_partial_reads_equal_full_decode(decoded):
    _, z, full = decoded
    sels = [(slice(3, 9), slice(2, 5), slice(0, 49)), (5, slice(None), 7), (slice(1, 39, 3), 4, slice(10, 40, 2)),
            (slice(15, 17), slice(19, 21), slice(29, 31)), (-1, -1, -1)]
    for sel in sels:
        assert np.array_equal(z[sel], full[sel], equal_nan=True), sel
    idx = ([1, 5, 30, 17], [0, 32], [3, 48, 29])
    assert np.array_equal(z.oindex[idx], full[np.ix_(*idx)], equal_nan=True)
    pts = (np.array([0, 39, 16, 16]), np.array([0, 32, 19, 20]), np.array([0, 48, 29, 30]))
    assert np.array_equal(z.vindex[pts], full[pts], equal_nan=True)
    sel = np.zeros(40, bool)
    sel[[2, 18, 33]] = True
    assert np.array_equal(z.oindex[sel, :, 4], full[sel, :, 4], equal_nan=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_partial_reads_property(decoded, data):
    _, z, full = decoded
    sel = []
    for n in full.shape:
        a = data.draw(st.integers(0, n - 1))
        b = data.draw(st.integers(a + 1, n))
        step = data.draw(st.integers(1, 3))
        sel.append(a if data.draw(st.booleans()) and b - a == 1 else slice(a, b, step))
    assert np.array_equal(z[tuple(sel)], full[tuple(sel)], equal_nan=True)


def test_box_reads_one_chunk_per_chunk_it_touches(decoded):
    x, _, _ = decoded
    base = zarr.storage.MemoryStore()
    _array(x, (16, 20, 30), StrataCodec(abs_error=0.05), store=base)
    counting = CountingStore(base)
    z = zarr.open_array(counting, mode="r")
    for sel, touched in [((slice(2, 4), slice(2, 4), slice(2, 4)), 1),
                         ((slice(14, 18), slice(2, 4), slice(2, 4)), 2),
                         ((slice(14, 18), slice(18, 22), slice(28, 32)), 8)]:
        CountingStore.keys.clear()
        z[sel]
        chunk_reads = CountingStore.chunk_reads()
        assert len(chunk_reads) == len(set(chunk_reads)) == touched


def test_damaged_chunk_names_the_chunk(decoded):
    x, _, _ = decoded
    z, store = _array(x, (16, 20, 30), StrataCodec(abs_error=0.05))
    key = "c/1/0/1"
    proto = zarr.core.buffer.default_buffer_prototype()
    blob = bytearray(zarr.core.sync.sync(store.get(key, proto)).to_bytes())
    good = np.array(z[16:32, 0:20, 30:49])
    for pos in (len(blob) // 2, len(blob) - 3, 20):
        bad = bytearray(blob)
        bad[pos] ^= 0x40
        zarr.core.sync.sync(store.set(key, proto.buffer.from_bytes(bytes(bad))))
        with pytest.raises(StrataError, match=key):
            z[16:32, 0:20, 30:49]
        with pytest.raises(StrataError, match=key):
            z[20, 5, 35]
    zarr.core.sync.sync(store.set(key, proto.buffer.from_bytes(bytes(blob[: len(blob) // 3]))))
    with pytest.raises(FormatError, match=key):
        z[:]
    zarr.core.sync.sync(store.set(key, proto.buffer.from_bytes(bytes(blob))))
    assert np.array_equal(z[16:32, 0:20, 30:49], good, equal_nan=True)


def test_chunk_of_another_shape_or_dtype_is_refused():
    x = _field((16, 33, 49))
    z, store = _array(x, (16, 20, 30), StrataCodec(abs_error=0.05))
    proto = zarr.core.buffer.default_buffer_prototype()
    for wrong in (StrataCodec(abs_error=0.05).config.encode(x[:16, :20, :29]),
                  StrataCodec(abs_error=0.05).config.encode(x[:16, :20, :30].astype(np.float64))):
        zarr.core.sync.sync(store.set("c/0/0/0", proto.buffer.from_bytes(wrong)))
        with pytest.raises(CorruptStreamError, match="c/0/0/0"):
            z[:]


@pytest.mark.parametrize("dtype", ["i4", "u2", "bool", "f2"])
def test_non_float_arrays_are_refused(dtype):
    with pytest.raises(UnsupportedDtypeError):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(10, 10), chunks=(5, 5), dtype=dtype,
                          serializer=StrataCodec(abs_error=0.1), compressors=None)


@pytest.mark.parametrize("config, message", [
    ({"abs_error": 0.1, "level": 3}, "unknown"),
    ({"abs_error": 0.1, "version": 2}, "version"),
    ({"abs_error": 0.1, "version": True}, "version"),
    ({"rel_error": 1e-3}, "whole array"),
    ({}, "abs_error"),
    ({"abs_error": -1.0}, ">= 0"),
    ({"abs_error": float("nan")}, "finite"),
    ({"abs_error": "0.1"}, "number"),
    ({"abs_error": 0.1, "valid_range": [1.0]}, "valid_range"),
    ({"abs_error": 0.1, "objective": "ssim"}, "objective"),
    ({"abs_error": 0.1, "objective": 1}, "objective"),
])
def test_bad_configurations(config, message):
    with pytest.raises(InvalidInputError, match=message):
        ChunkConfig.from_json(config)
    with pytest.raises(InvalidInputError, match=message):
        StrataCodec.from_dict({"name": NAME, "configuration": config})
    with pytest.raises(InvalidInputError, match=message):
        numcodecs.get_codec({"id": "strata", **config})
    with pytest.raises(InvalidInputError):
        StrataCodec.from_dict({"name": NAME, "configuration": {"abs_error": 0.1}, "extra": 1})


def test_relative_bound_resolved_over_the_whole_array():
    x = _field((40, 33, 49))
    x[:20] -= 50.0                        # the two halves have different ranges
    codec = StrataCodec.for_array(x, rel_error=1e-3)
    lo, hi = float(x.min()), float(x.max())
    assert codec.config.valid_range == (lo, hi)
    assert codec.config.abs_error == pytest.approx(1e-3 * (hi - lo))
    da = pytest.importorskip("dask.array")
    lazy = StrataCodec.for_array(da.from_array(x, chunks=(10, 33, 49)), rel_error=1e-3)
    assert lazy == codec
    with pytest.raises(InvalidInputError, match="no valid values|has none"):
        resolve_rel_error(np.full((4, 4), np.nan, np.float32), 1e-3)
    with pytest.raises(InvalidInputError, match="has none"):
        resolve_rel_error(np.full((4, 4), -9999.0, np.float32), 1e-3, fill_value=-9999.0)


# ---------------------------------------------------------------------- numcodecs
def test_numcodecs_codec():
    codec = numcodecs.get_codec({"id": "strata", "abs_error": 0.1})
    assert isinstance(codec, Strata) and codec.get_config() == {"id": "strata", "abs_error": 0.1, "version": 1}
    assert numcodecs.get_codec(codec.get_config()) == codec
    x = _field((20, 33, 49))
    view = x[:, ::2, 3:]                  # a non-contiguous view keeps its shape
    blob = codec.encode(view)
    y = codec.decode(blob)
    assert y.shape == view.shape and y.dtype == view.dtype and np.abs(y - view).max() <= 0.1
    out = np.empty(view.shape, view.dtype)
    assert codec.decode(blob, out=out) is out and np.array_equal(out, y)
    with pytest.raises(UnsupportedDtypeError, match="flat bytes"):
        codec.encode(x.tobytes())
    with pytest.raises(InvalidInputError, match="out"):
        codec.decode(blob, out=np.empty(7, np.float32))
    with pytest.raises(UnsupportedDtypeError):
        codec.encode(np.arange(10))
    with pytest.raises(FormatError):
        codec.decode(b"not a strata stream at all")


def test_objective_travels_in_every_configuration(tmp_path):
    """The PSNR tuning objective in the codec configuration: written only when not the default
    (configurations as before otherwise), round-tripped by numcodecs, the zarr v3 codec and
    strata.xarray's encoding, and used for every chunk (a smooth field takes tighter
    coarse-level bounds than with the default: a higher PSNR), the bound held."""
    from strata.lossy import LossyReader

    x = _field((40, 33, 49))
    eb = 1e-2 * float(np.ptp(x))
    plain, rd = Strata(abs_error=eb), Strata(abs_error=eb, objective="psnr")
    assert "objective" not in plain.get_config() and rd.get_config()["objective"] == "psnr"
    assert numcodecs.get_codec(rd.get_config()) == rd
    assert StrataCodec.from_dict(StrataCodec(eb, objective="psnr").to_dict()).config.objective == "psnr"
    assert StrataCodec.for_array(x, rel_error=1e-2, objective="psnr").config.objective == "psnr"
    factors = {}
    for codec in (plain, rd):
        blob = codec.encode(x)
        y = codec.decode(blob)
        _check_bound(x, y, eb, np.zeros(x.shape, bool))
        h = LossyReader(bytes(blob)).header
        factors[codec.config.objective] = (h.alpha8, h.beta8)
    assert factors["psnr"] != factors["ratio"]
    z, _ = _array(x, (20, 33, 49), StrataCodec(eb, objective="psnr"))
    _check_bound(x, z[:], eb, np.zeros(x.shape, bool))
    xr = pytest.importorskip("xarray")
    from strata import xarray as sx

    ds = xr.Dataset({"t": (("time", "lat", "lon"), x)})
    enc = sx.encoding(ds, rel_error=1e-2, objective="psnr")
    assert enc["t"]["serializer"].config.objective == "psnr"
    with pytest.raises(InvalidInputError, match="objective"):
        sx.encoding(ds, rel_error=1e-2, objective="bits")


def _era5_or_random(name, shape=(48, 33, 49)):
    if name == "random":
        return np.random.default_rng(7).random(shape).astype(np.float32)
    path = SCI / "era5_t2m_744x33x49.f32"
    if not path.exists():
        pytest.skip("../shared/data/sci/era5_t2m_744x33x49.f32 not present")
    return np.fromfile(path, "<f4").reshape(744, 33, 49)[:shape[0]].copy()


@pytest.mark.parametrize("name", ["era5_t2m", "random"])
@pytest.mark.parametrize("eb", [0.0, 0.01])
@pytest.mark.parametrize("order", ["C", "F"])
def test_numcodecs_codec_in_a_zarr_v2_store(tmp_path, order, eb, name):
    """zarr v2 hands the compressor each chunk in the array's order and reads the decoded
    chunk's memory in that order: Fortran-ordered stores decode right (bit for bit at bound 0),
    edge chunks and NaN holes included."""
    x = _era5_or_random(name)
    x[2, :3, :3] = np.nan
    path = str(tmp_path / "v2.zarr")
    z = zarr.create_array(path, shape=x.shape, chunks=(20, 16, 49), dtype="f4", compressors=Strata(abs_error=eb),
                          filters=None, zarr_format=2, fill_value=np.nan, order=order)
    z[:] = np.asarray(x, order=order)
    back = zarr.open_array(path, mode="r")
    assert back.metadata.order == order
    y = back[:]
    if eb == 0:
        assert np.array_equal(y.view(np.uint32), x.view(np.uint32))
    _check_bound(x, y, eb, np.isnan(x))
    assert np.array_equal(back[5:25, 3:20, 40], y[5:25, 3:20, 40], equal_nan=True)


@pytest.mark.parametrize("dtype", [">f4", ">f8"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_big_endian_arrays(tmp_path, dtype, zarr_format):
    """Big-endian float arrays are compressed by value and read back in the dtype the store
    declares (zarr v3 stores ``float32``/``float64``: byte order is the serializer's business)."""
    x = _field((20, 33, 49)).astype(dtype)
    x[3, 4:9, 7] = np.nan
    codec = {"serializer": StrataCodec(abs_error=0.02), "compressors": None} if zarr_format == 3 else {
        "compressors": Strata(abs_error=0.02), "filters": None}
    path = str(tmp_path / "be.zarr")
    z = zarr.create_array(path, shape=x.shape, chunks=(8, 20, 30), dtype=dtype, zarr_format=zarr_format,
                          fill_value=np.nan, **codec)
    z[:] = x
    y = zarr.open_array(path, mode="r")[:]
    assert y.dtype == (np.dtype(dtype) if zarr_format == 2 else np.dtype(dtype).newbyteorder("="))
    _check_bound(x.astype(np.dtype(dtype).newbyteorder("=")), y.astype(y.dtype.newbyteorder("=")), 0.02,
                 np.isnan(x))


def test_sharded_partial_chunks_and_fill_values():
    """zarr v3 sharding with the strata serializer inside the shards: edge shards and chunks,
    chunks never written (the array's fill value), NaN and a CF fill value in the chunks."""
    x = _field((40, 33, 49))
    x[:, :3, :4] = np.nan
    x[30, 10, 5:9] = -9999.0
    z = zarr.create_array(zarr.storage.MemoryStore(), shape=(50, 33, 49), chunks=(8, 10, 16), shards=(16, 20, 32),
                          dtype="f4", serializer=StrataCodec(abs_error=0.05, fill_value=-9999.0), compressors=None,
                          fill_value=-1.0)
    z[:40] = x                            # time steps 40..49 never written
    y = z[:]
    assert np.all(y[40:] == -1.0)
    _check_bound(x, y[:40], 0.05, np.isnan(x) | (x == -9999.0))
    for sel in [(slice(3, 19), slice(9, 23), slice(15, 40)), (39, slice(None), 48), (slice(12, 45), 31, slice(0, 5))]:
        assert np.array_equal(z[sel], y[sel], equal_nan=True)


def test_stores_reopen_in_a_fresh_process(tmp_path):
    """A process that never imported strata reads zarr v2 (Fortran order) and v3 stores from
    their metadata alone: the codecs come back through the numcodecs and zarr entry points."""
    import subprocess
    import sys

    x = _field((24, 33, 49))
    x[4, :5, :5] = np.nan
    v2 = zarr.create_array(str(tmp_path / "v2.zarr"), shape=x.shape, chunks=(10, 33, 20), dtype="f4", order="F",
                           compressors=Strata(abs_error=0.01), filters=None, zarr_format=2, fill_value=np.nan)
    v2[:] = x
    v3, _ = _array(x, (10, 20, 30), StrataCodec(abs_error=0.01), store=str(tmp_path / "v3.zarr"))
    code = ("import sys, numpy as np, zarr\n"
            "assert not any(m.startswith('strata') for m in sys.modules)\n"
            "for name in ('v2', 'v3'):\n"
            "    np.save(f'{sys.argv[1]}/{name}.npy', zarr.open_array(f'{sys.argv[1]}/{name}.zarr', mode='r')[:])\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=300)
    for name, z in (("v2", v2), ("v3", v3)):
        y = np.load(tmp_path / f"{name}.npy")
        assert np.array_equal(y, z[:], equal_nan=True)
        _check_bound(x, y, 0.01, np.isnan(x))


# ---------------------------------------------------------------------- xarray
def _dataset():
    xr = pytest.importorskip("xarray")
    x = _field((48, 33, 49))
    x[:, :5, :5] = np.nan
    w = np.cumsum(np.random.default_rng(3).standard_normal((48, 33)), axis=1)
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), x, {"units": "K", "long_name": "2 m temperature"}),
                     "w": (("time", "lat"), w, {"units": "m s-1"}),
                     "count": (("time",), np.arange(48, dtype=np.int32))},
                    coords={"time": np.arange(48), "lat": np.linspace(58, 50, 33), "lon": np.linspace(-10, 2, 49)})
    ds.t2m.encoding["_FillValue"] = np.float32(-9999.0)
    return xr, ds


def test_xarray_encoding_round_trip(tmp_path):
    from strata import xarray as sx

    xr, ds = _dataset()
    ds.to_netcdf(tmp_path / "in.nc")
    src = xr.open_dataset(tmp_path / "in.nc", chunks={"time": 12})
    enc = sx.encoding(src, rel_error={"t2m": 1e-3, "w": 1e-4})
    assert set(enc) == {"t2m", "w"}                      # floats only; coords and ints lossless
    t2m = enc["t2m"]["serializer"].config
    valid = ds.t2m.values[np.isfinite(ds.t2m.values)]
    assert t2m.fill_value == -9999.0 and t2m.valid_range == (float(valid.min()), float(valid.max()))
    src.to_zarr(tmp_path / "out.zarr", encoding=enc, zarr_format=3, consolidated=False)
    back = xr.open_zarr(tmp_path / "out.zarr", consolidated=False)
    assert back.t2m.chunks is not None                   # lazy
    for name in ("t2m", "w"):
        eb = enc[name]["serializer"].config.abs_error
        _check_bound(ds[name].values, back[name].values, eb, np.isnan(ds[name].values))
        assert back[name].attrs == ds[name].attrs
    assert np.array_equal(back["count"].values, ds["count"].values)
    for c in ("time", "lat", "lon"):
        assert np.array_equal(back[c].values, ds[c].values)
    raw = zarr.open_array(str(tmp_path / "out.zarr" / "t2m"), mode="r")[:]
    assert np.count_nonzero(raw == -9999.0) == np.count_nonzero(np.isnan(ds.t2m.values))  # fill kept exactly


def test_xarray_encoding_bad_input():
    from strata import xarray as sx

    _, ds = _dataset()
    with pytest.raises(InvalidInputError, match="exactly one"):
        sx.encoding(ds)
    with pytest.raises(InvalidInputError, match="exactly one"):
        sx.encoding(ds, rel_error=1e-3, abs_error=0.1)
    with pytest.raises(InvalidInputError, match="no variable"):
        sx.encoding(ds, abs_error=0.1, variables=["nope"])
    with pytest.raises(InvalidInputError, match="int32"):
        sx.encoding(ds, abs_error=0.1, variables=["count"])
    with pytest.raises(InvalidInputError, match="no bound"):
        sx.encoding(ds, rel_error={"t2m": 1e-3})
    empty = ds.assign(t2m=ds.t2m * np.nan)
    with pytest.raises(InvalidInputError, match="'t2m'.*none"):
        sx.encoding(empty, rel_error=1e-3)
    v2 = sx.encoding(ds, abs_error=0.1, variables=["w"], zarr_format=2)
    assert isinstance(v2["w"]["compressors"], Strata)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["abs_error", "fill_value", "rel_error", "valid_range", "objective", "version",
                                        "x"]),
                       _json, max_size=5))
def test_hostile_configurations_raise_only_invalid_input(config):
    """Any JSON in a store's codec configuration either validates or raises InvalidInputError."""
    try:
        c = ChunkConfig.from_json(config)
    except InvalidInputError:
        return
    assert ChunkConfig.from_json(c.to_json()) == c
    assert c.abs_error >= 0 and np.isfinite(c.abs_error)
