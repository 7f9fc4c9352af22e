"""`strata convert`: NetCDF -> zarr v3 (float variables with strata, the rest lossless) -> NetCDF."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from strata.cli import main

xr = pytest.importorskip("xarray")
pytest.importorskip("netCDF4")
pytest.importorskip("zarr")
dask = pytest.importorskip("dask")

from strata import convert as cv  # noqa: E402  (needs xarray, zarr and dask)

from .conftest import SCI  # noqa: E402

ERA5 = SCI / "era5_t2m_744x33x49.f32"
FILL = np.float32(-9999.0)


def run(*args):
    """Invoke the CLI; an exception escaping click (a traceback for the user) fails the test."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def walk(shape, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return np.cumsum(np.cumsum(rng.standard_normal(shape), axis=-1), axis=-2).astype(dtype)


def make_dataset(t2m=None):
    """t2m float32 with NaN holes (_FillValue -9999 on disk), w float64, count int32, q packed
    int16, CF time / lat / lon coordinates, global attributes."""
    if t2m is None:
        t2m = walk((48, 33, 49), 1) + np.float32(280)
    t2m = t2m.copy()
    nt, ny, nx = t2m.shape
    t2m[:, :4, :6] = np.nan                       # a land mask
    t2m[5, 10:20, 20:30] = np.nan                 # and a hole in one step
    q = np.random.default_rng(2).uniform(0, 1, (ny, nx))
    q[0, 0] = np.nan
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
         "w": (("time", "lat"), walk((nt, ny), 3, np.float64), {"units": "m s-1", "long_name": "wind"}),
         "count": (("time",), np.arange(nt, dtype=np.int32) * 7 - 100, {"long_name": "count"}),
         "q": (("lat", "lon"), q, {"units": "1"})},
        coords={"time": ("time", np.arange(nt, dtype=np.int32), {"units": "hours since 2000-01-01 00:00:00",
                                                                  "calendar": "standard"}),
                "lat": ("lat", np.linspace(60, 50, ny), {"units": "degrees_north", "standard_name": "latitude"}),
                "lon": ("lon", np.linspace(-10, 2, nx), {"units": "degrees_east", "standard_name": "longitude"})},
        attrs={"title": "strata convert test", "Conventions": "CF-1.8"})
    return ds


def write_nc(ds, path):
    ds.to_netcdf(path, engine="netcdf4", encoding={
        "t2m": {"_FillValue": FILL, "chunksizes": (8,) + ds.t2m.shape[1:], "zlib": True},
        "q": {"dtype": "int16", "scale_factor": 0.001, "add_offset": 0.5, "_FillValue": np.int16(-32767)}})
    return path


@pytest.fixture
def nc(tmp_path):
    return write_nc(make_dataset(), tmp_path / "in.nc")


def codec_config(store, name):
    """The codecs of ``name`` in the store's metadata, as stored."""
    meta = json.loads((store / name / "zarr.json").read_text())
    return meta["codecs"], meta["chunk_grid"]["configuration"]["chunk_shape"]


def check_bound(orig, back, eb):
    """Missing points identical, every valid one within ``eb``."""
    orig, back = np.asarray(orig, np.float64), np.asarray(back, np.float64)
    assert np.array_equal(np.isnan(orig), np.isnan(back))
    valid = ~np.isnan(orig)
    err = np.abs(back[valid] - orig[valid]).max()
    assert err <= eb, (err, eb)
    return err


def raw(path, name, engine=None):
    """Stored values, no CF decoding."""
    if str(path).endswith(".zarr"):
        with xr.open_zarr(path, decode_cf=False, consolidated=False) as ds:
            return ds[name].values
    with xr.open_dataset(path, decode_cf=False) as ds:
        return ds[name].values


# ------------------------------------------------------------------------------- round trip
def test_round_trip_nc_zarr_nc(nc, tmp_path):
    out, back_nc = tmp_path / "out.zarr", tmp_path / "back.nc"
    res = run("convert", nc, out, "--rel", "1e-3")
    assert res.exit_code == 0, res.output
    assert "t2m: strata" in res.output and "w: strata" in res.output and "lossless" in res.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]       # no temporary left
    src = xr.open_dataset(nc)
    z = xr.open_zarr(out, consolidated=False)
    assert json.loads((out / "zarr.json").read_text())["zarr_format"] == 3
    for name in ("t2m", "w"):
        codecs, _ = codec_config(out, name)
        assert [c["name"] for c in codecs] == ["strata.lossy"]
        conf = codecs[0]["configuration"]
        valid = src[name].values[~np.isnan(src[name].values)].astype(np.float64)
        assert conf["rel_error"] == 1e-3 and conf["valid_range"] == [valid.min(), valid.max()]
        assert conf["abs_error"] == pytest.approx(1e-3 * (valid.max() - valid.min()), rel=1e-12)
        err = check_bound(src[name].values, z[name].values, conf["abs_error"])
        assert err > 0                                                           # it is lossy
        assert z[name].dtype == src[name].dtype
    assert z.t2m.encoding["_FillValue"] == FILL
    assert np.count_nonzero(raw(out, "t2m") == FILL) == np.count_nonzero(np.isnan(src.t2m.values))
    # lossless: coordinates (CF time included), int and packed-int variables, stored values exact
    for name in ("count", "q", "time", "lat", "lon"):
        assert "strata.lossy" not in [c["name"] for c in codec_config(out, name)[0]]
        assert np.array_equal(raw(out, name), raw(nc, name)), name
        assert raw(out, name).dtype == raw(nc, name).dtype, name
    assert z.q.encoding["scale_factor"] == 0.001 and z.q.encoding["_FillValue"] == -32767
    for name in src.variables:
        assert z[name].attrs == src[name].attrs, name
    assert z.attrs == src.attrs
    assert set(z.coords) == set(src.coords) and z.t2m.dims == src.t2m.dims

    res = run("convert", out, back_nc)
    assert res.exit_code == 0, res.output
    back = xr.open_dataset(back_nc)
    for name in src.variables:                   # floats as decoded from the store, the rest exact
        assert back[name].dtype == src[name].dtype, name
        assert np.array_equal(back[name].values, z[name].values, equal_nan=back[name].dtype.kind == "f"), name
        assert back[name].attrs == src[name].attrs, name
        assert back[name].dims == src[name].dims, name
    assert back.attrs == src.attrs
    assert back.t2m.encoding["_FillValue"] == FILL and back.t2m.encoding["dtype"] == np.float32
    assert np.count_nonzero(raw(back_nc, "t2m") == FILL) == np.count_nonzero(np.isnan(src.t2m.values))
    for name in ("count", "q", "time"):
        assert np.array_equal(raw(back_nc, name), raw(nc, name)) and raw(back_nc, name).dtype == raw(nc, name).dtype
    check_bound(src.t2m.values, back.t2m.values, codec_config(out, "t2m")[0][0]["configuration"]["abs_error"])


def test_store_has_consolidated_metadata(nc, tmp_path):
    """xr.open_zarr looks for consolidated metadata first and warns when there is none."""
    import warnings

    out = tmp_path / "out.zarr"
    assert run("convert", nc, out, "--abs", "0.1").exit_code == 0
    consolidated = json.loads((out / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert {"t2m", "w", "count", "q", "time", "lat", "lon"} <= set(consolidated)
    assert consolidated["t2m"]["codecs"][0]["name"] == "strata.lossy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = xr.open_zarr(out)
    check_bound(xr.open_dataset(nc).t2m.values, z.t2m.values, 0.1)


def test_big_endian_hdf5_dataset(tmp_path):
    """An HDF5 file of big-endian floats (as h5py writes them on request) converts: values
    compressed by value, read back native within the bound, and written back to NetCDF."""
    h5py = pytest.importorskip("h5py")
    t = walk((24, 17, 20), 4).astype(">f4") + np.float32(280)
    t[3, 2:5, 7] = np.nan
    w = walk((24, 17), 5, np.float64).astype(">f8")
    with h5py.File(tmp_path / "be.h5", "w") as f:
        f.create_dataset("t", data=t)
        f.create_dataset("w", data=w)
    out = tmp_path / "be.zarr"
    rep = cv.convert(tmp_path / "be.h5", out, abs_error=0.01)
    assert set(rep.lossy) == {"t", "w"}
    z = xr.open_zarr(out)
    assert z.t.dtype == np.float32 and z.w.dtype == np.float64
    check_bound(t, z.t.values, 0.01)
    check_bound(w, z.w.values, 0.01)
    cv.convert(out, tmp_path / "back.nc")
    back = xr.open_dataset(tmp_path / "back.nc")
    assert np.array_equal(back.t.values, z.t.values, equal_nan=True)


def test_var_selection_keeps_other_floats_lossless(nc, tmp_path):
    out = tmp_path / "w.zarr"
    res = run("convert", nc, out, "--abs", "0.05", "--var", "w")
    assert res.exit_code == 0, res.output
    assert [c["name"] for c in codec_config(out, "w")[0]] == ["strata.lossy"]
    assert codec_config(out, "w")[0][0]["configuration"] == {"abs_error": 0.05, "version": 1}
    assert "strata.lossy" not in [c["name"] for c in codec_config(out, "t2m")[0]]
    src, z = xr.open_dataset(nc), xr.open_zarr(out, consolidated=False)
    check_bound(src.w.values, z.w.values, 0.05)
    assert np.array_equal(raw(out, "t2m"), raw(nc, "t2m"), equal_nan=True)   # bit-exact, fill values included
    assert np.array_equal(z.t2m.values, src.t2m.values, equal_nan=True)
    # tuned for PSNR: the objective is in the configuration, the bound holds
    out_rd = tmp_path / "rd.zarr"
    assert run("convert", nc, out_rd, "--abs", "0.05", "--var", "w", "--objective", "psnr").exit_code == 0
    assert codec_config(out_rd, "w")[0][0]["configuration"] == {"abs_error": 0.05, "objective": "psnr", "version": 1}
    check_bound(src.w.values, xr.open_zarr(out_rd, consolidated=False).w.values, 0.05)
    res = run("convert", out_rd, tmp_path / "rd.nc", "--objective", "psnr")
    assert res.exit_code != 0 and "only for a NetCDF/HDF5 to zarr" in res.output
    # several at once, NAME,NAME or repeated
    out2 = tmp_path / "two.zarr"
    assert run("convert", nc, out2, "--abs", "0.05", "--var", "w,t2m").exit_code == 0
    assert all(codec_config(out2, n)[0][0]["name"] == "strata.lossy" for n in ("w", "t2m"))


def test_chunks(nc, tmp_path):
    assert run("convert", nc, tmp_path / "a.zarr", "--abs", "0.1", "--chunks", "time=12,lon=20").exit_code == 0
    assert codec_config(tmp_path / "a.zarr", "t2m")[1] == [12, 33, 20]
    assert codec_config(tmp_path / "a.zarr", "w")[1] == [12, 33]
    assert run("convert", nc, tmp_path / "b.zarr", "--abs", "0.1", "--chunks", "6,-1,25").exit_code == 0
    assert codec_config(tmp_path / "b.zarr", "t2m")[1] == [6, 33, 25]
    src, z = xr.open_dataset(nc), xr.open_zarr(tmp_path / "b.zarr", consolidated=False)
    check_bound(src.t2m.values, z.t2m.values, 0.1)
    # the small file is one chunk a variable by default
    assert run("convert", nc, tmp_path / "c.zarr", "--abs", "0.1").exit_code == 0
    assert codec_config(tmp_path / "c.zarr", "t2m")[1] == [48, 33, 49]


@pytest.mark.parametrize("shape, disk", [((8760, 721, 1440), None), ((8760, 721, 1440), (1, 721, 1440)),
                                         ((1000, 1000, 1000), None), ((744, 33, 49), None)])
def test_default_chunks_size(shape, disk):
    """About 1-8 MB a chunk (one chunk up to 8 MiB), equal chunks, multiples of the file's chunks."""
    import dask.array as da

    v = xr.Variable(("time", "lat", "lon"), da.zeros(shape, dtype=np.float32, chunks=-1))
    if disk is not None:
        v.encoding["chunksizes"] = disk
    ds = xr.Dataset({"t": v, "s": (("time",), da.zeros(shape[0], chunks=-1))})
    sizes = cv.chunk_sizes(ds)
    chunk = [sizes[d] for d in ("time", "lat", "lon")]
    nbytes = 4 * np.prod(chunk)
    if 4 * np.prod(shape) <= cv.MAX_SINGLE_CHUNK_BYTES:
        assert chunk == list(shape)
    else:
        assert 1 << 20 <= nbytes <= cv.MAX_SINGLE_CHUNK_BYTES, chunk
    for c, n in zip(chunk, shape):                # balanced: the last chunk is no bigger than the others
        assert -(-n // c) * c - n < c
    if disk is not None:
        assert all(c % d == 0 for c, d in zip(chunk, disk))


def test_real_field(tmp_path):
    if not ERA5.exists():
        pytest.skip("../shared/data/sci not present")
    a = np.fromfile(ERA5, dtype="<f4").reshape(744, 33, 49)[:96]
    nc = write_nc(make_dataset(a), tmp_path / "era5.nc")
    out = tmp_path / "era5.zarr"
    for rel in (1e-2, 1e-4):
        res = run("convert", nc, out, "--rel", rel, "--var", "t2m", "--force")
        assert res.exit_code == 0, res.output
        conf = codec_config(out, "t2m")[0][0]["configuration"]
        valid = a[:, 4:, :].astype(np.float64)                                 # make_dataset's mask
        assert conf["abs_error"] == pytest.approx(rel * (np.nanmax(valid) - np.nanmin(valid)), rel=1e-12)
        z = xr.open_zarr(out, consolidated=False)
        src = xr.open_dataset(nc)
        check_bound(src.t2m.values, z.t2m.values, conf["abs_error"])
    assert sum(p.stat().st_size for p in (out / "t2m").rglob("*") if p.is_file()) < a.nbytes / 2


# ------------------------------------------------------------------------------- errors
def test_bad_input_is_a_clean_error(nc, tmp_path):
    out = tmp_path / "o.zarr"
    cases = [
        (("convert", tmp_path / "missing.nc", out, "--rel", "1e-3"), "does not exist"),
        (("convert", nc, tmp_path / "o.npy", "--rel", "1e-3"), "cannot convert"),
        (("convert", nc, out, "--rel", "1e-3", "--var", "nope"), "no variable 'nope'"),
        (("convert", nc, out, "--rel", "1e-3", "--var", "count"), "int32"),
        (("convert", nc, out, "--rel", "1e-3", "--var", "q"), "packed"),
        (("convert", nc, out, "--rel", "1e-3", "--var", "lat"), "coordinate"),
        (("convert", nc, out), "exactly one of --rel and --abs"),
        (("convert", nc, out, "--rel", "1e-3", "--abs", "0.1"), "exactly one of --rel and --abs"),
        (("convert", nc, out, "--rel", "-1"), "rel_error must be >= 0"),
        (("convert", nc, out, "--abs", "0.1", "--chunks", "time=0"), "positive integer"),
        (("convert", nc, out, "--abs", "0.1", "--chunks", "depth=4"), "no dimension 'depth'"),
        (("convert", nc, out, "--abs", "0.1", "--chunks", "4,4"), "one per dimension"),
        (("convert", nc, out, "--abs", "0.1", "--chunks", "time=a"), "integers"),
    ]
    for args, message in cases:
        res = run(*args)
        assert res.exit_code != 0, args
        assert message in res.output, (args, res.output)
        assert "Traceback" not in res.output
        assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")], args
    # all missing: a relative bound means nothing
    ds = make_dataset()
    ds["t2m"] = ds.t2m * np.nan
    empty = write_nc(ds, tmp_path / "empty.nc")
    res = run("convert", empty, out, "--rel", "1e-3")
    assert res.exit_code != 0 and "'t2m'" in res.output and "no" in res.output and not out.exists()
    assert run("convert", empty, out, "--abs", "0.1").exit_code == 0                    # an absolute one does
    # not a NetCDF file
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"not a netcdf file at all" * 10)
    res = run("convert", bad, tmp_path / "bad.zarr", "--rel", "1e-3")
    assert res.exit_code != 0 and "Error" in res.output and not (tmp_path / "bad.zarr").exists()
    # the way back takes no bound
    res = run("convert", out, tmp_path / "b.nc", "--rel", "1e-3")
    assert res.exit_code != 0 and "only for a NetCDF/HDF5 to zarr" in res.output
    res = run("convert", tmp_path / "missing.zarr", tmp_path / "b.nc")
    assert res.exit_code != 0 and not (tmp_path / "b.nc").exists()


def test_existing_output_needs_force(nc, tmp_path):
    out, back = tmp_path / "o.zarr", tmp_path / "back.nc"
    assert run("convert", nc, out, "--abs", "1").exit_code == 0
    res = run("convert", nc, out, "--abs", "0.01")
    assert res.exit_code != 0 and "--force" in res.output
    assert codec_config(out, "t2m")[0][0]["configuration"]["abs_error"] == 1           # untouched
    assert run("convert", nc, out, "--abs", "0.01", "--force").exit_code == 0
    assert codec_config(out, "t2m")[0][0]["configuration"]["abs_error"] == 0.01
    back.write_bytes(b"old")
    res = run("convert", out, back)
    assert res.exit_code != 0 and "--force" in res.output and back.read_bytes() == b"old"
    assert run("convert", out, back, "--force").exit_code == 0
    assert xr.open_dataset(back).t2m.shape == (48, 33, 49)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_store_a_killed_replacement_left_aside_is_back_before_the_existence_check(nc, tmp_path):
    """Where the store could not be swapped in one exchange, a writer killed between its two
    renames leaves the old store aside: the next convert puts it back first, so it still needs
    --force and the old store is never lost."""
    import subprocess
    import sys

    from strata import atomic

    out = tmp_path / "o.zarr"
    assert run("convert", nc, out, "--abs", "1").exit_code == 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out.rename(tmp_path / f".o.zarr.strata-old.{gone.pid}.{atomic._HOST}.abc123")
    res = run("convert", nc, out, "--abs", "0.01")
    assert res.exit_code != 0 and "--force" in res.output
    assert codec_config(out, "t2m")[0][0]["configuration"]["abs_error"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_failure_leaves_no_partial_output(nc, tmp_path, monkeypatch):
    from strata.chunk_codec import ChunkConfig
    from strata.errors import InvalidInputError

    out = tmp_path / "o.zarr"
    assert run("convert", nc, out, "--abs", "1").exit_code == 0
    calls = []

    def fail(self, chunk, array_fill_value=None):
        calls.append(chunk.shape)
        if len(calls) > 2:
            raise InvalidInputError("simulated failure")
        return original(self, chunk, array_fill_value)

    original = ChunkConfig.encode
    monkeypatch.setattr(ChunkConfig, "encode", fail)
    # many writer threads: the chunks still being written when the failure is raised must not
    # recreate parts of the temporary store after its removal (in dask's shared pool, 8 of 12 such
    # conversions left it behind)
    for target, force in ((tmp_path / "new.zarr", ()), (out, ("--force",))):
        calls.clear()
        with dask.config.set(num_workers=16):
            res = run("convert", nc, target, "--abs", "0.01", "--chunks", "time=4", *force)
        assert res.exit_code != 0 and "simulated failure" in res.output and len(calls) > 2
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not (tmp_path / "new.zarr").exists()
    assert codec_config(out, "t2m")[0][0]["configuration"]["abs_error"] == 1          # the old store is intact
    monkeypatch.undo()
    assert xr.open_zarr(out, consolidated=False).t2m.shape == (48, 33, 49)
    # and back: a chunk that cannot be decoded leaves no NetCDF file
    import strata.chunk_codec

    def broken(*args, **kwargs):
        raise InvalidInputError("simulated decode failure")

    monkeypatch.setattr(strata.chunk_codec, "decode", broken)
    with dask.config.set(num_workers=16):
        res = run("convert", out, tmp_path / "back.nc")
    assert res.exit_code != 0 and "simulated decode failure" in res.output
    assert not (tmp_path / "back.nc").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_library_api_and_progress(nc, tmp_path, capsys):
    rep = cv.convert(nc, tmp_path / "o.zarr", rel_error={"t2m": 1e-3, "w": 1e-2}, progress_bytes=0)
    assert set(rep.lossy) == {"t2m", "w"} and rep.lossy["w"].rel_error == 1e-2
    assert set(rep.lossless) == {"count", "q", "time", "lat", "lon"}
    assert rep.chunks == {"time": 48, "lat": 33, "lon": 49} and 0 < rep.output_bytes < rep.nbytes
    err = capsys.readouterr().err
    assert "valid range" in err and "write o.zarr" in err                               # tqdm bars
    rep = cv.convert(tmp_path / "o.zarr", tmp_path / "o.nc")
    assert rep.lossy == {} and rep.output_bytes == (tmp_path / "o.nc").stat().st_size
    assert capsys.readouterr().err == ""                                                # no bar by default


def test_precision_layers_in_a_converted_store(nc, tmp_path):
    """`strata convert --layers`: every chunk holds precision layers; the store read at a coarser
    bound through strata.xarray.open_zarr is within it (and coarser than the finest), the plain
    read within the finest."""
    import strata.xarray as sx

    out = tmp_path / "layers.zarr"
    res = run("convert", nc, out, "--rel", "1e-5", "--layers", "1e-2,1e-3")
    assert res.exit_code == 0 and "precision layers at" in res.output, res.output
    conf = codec_config(out, "t2m")[0][0]["configuration"]
    span = conf["valid_range"][1] - conf["valid_range"][0]
    assert conf["layers"] == pytest.approx([1e-2 * span, 1e-3 * span], rel=1e-12)
    src = xr.open_dataset(nc)
    coarse = sx.open_zarr(out, rel_error=1e-2)
    assert check_bound(src.t2m.values, coarse.t2m.values, 1e-2 * span) > 1e-5 * span
    check_bound(src.t2m.values, xr.open_zarr(out).t2m.values, conf["abs_error"])
    res = run("convert", nc, tmp_path / "bad.zarr", "--rel", "1e-3", "--layers", "1e-4")
    assert res.exit_code != 0 and "layers must decrease and stay above abs_error" in res.output
