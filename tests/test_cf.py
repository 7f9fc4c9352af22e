"""CF conventions: NetCDF variables with missing values and packing, read, compressed and
written back as NetCDF that xarray sees as it saw the source (strata.cf)."""
from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import strata
from strata.cf import FORMAT, parse_metadata, read_variable, to_netcdf, write_netcdf
from strata.errors import CorruptStreamError, InvalidInputError, UnsupportedDtypeError

from .conftest import SHARED

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")

BASIN = SHARED / "data" / "masks" / "basin_mask_33x180x360.nc"
VARIANTS = ("fill", "nan", "missing_value", "valid_range", "packed")


def surface_land(grid=(180, 360)) -> np.ndarray:
    """Land (True) on a lat x lon grid: the basin mask's surface on 180x360 when present, else
    made-up continents."""
    if BASIN.exists() and grid == (180, 360):
        with netCDF4.Dataset(BASIN) as ds:
            b = ds["basin"]
            b.set_auto_maskandscale(False)
            return np.asarray(b[0]) == b.missing_value
    lat, lon = np.meshgrid(np.linspace(-1, 1, grid[0]), np.linspace(-1, 1, grid[1]), indexing="ij")
    return (np.sin(5 * lon) * np.cos(4 * lat) > 0.4) | (lat > 0.9)


def make_sst(path, variant: str = "fill", nt: int = 2, grid=(180, 360)):
    """A CF sea-surface temperature file ``tos(time, lat, lon)`` on a global ``grid`` with
    land missing.

    Variants: land as ``_FillValue = 1e20`` ("fill"), NaN ("nan"), ``missing_value = [-999, -888]``
    ("missing_value"), 1e20 plus spikes outside ``valid_range`` ("valid_range"), int16 packed
    with ``scale_factor``/``add_offset`` and ``_FillValue``/``missing_value`` ("packed").
    Returns the ``(nt, *grid)`` float64 field and its missing mask.
    """
    land = surface_land(grid)
    lat = np.linspace(-90 + 90 / grid[0], 90 - 90 / grid[0], grid[0], dtype=np.float32)
    lon = np.linspace(180 / grid[1], 360 - 180 / grid[1], grid[1], dtype=np.float32)
    t = np.arange(nt, dtype=np.float64)
    sst = (28 * np.cos(np.deg2rad(lat))[None, :, None] ** 2 - 1.5
           + 2 * np.sin(np.deg2rad(2 * lon))[None, None, :] * np.cos(t)[:, None, None])
    missing = np.broadcast_to(land, sst.shape).copy()
    with netCDF4.Dataset(path, "w") as ds:
        ds.Conventions = "CF-1.8"
        ds.title = f"test SST ({variant})"
        ds.createDimension("time", None)
        ds.createDimension("lat", grid[0])
        ds.createDimension("lon", grid[1])
        tv = ds.createVariable("time", "f8", ("time",))
        tv.units, tv.calendar, tv.axis = "days since 2000-01-01", "standard", "T"
        tv[:] = t
        for name, values, units in (("lat", lat, "degrees_north"), ("lon", lon, "degrees_east")):
            c = ds.createVariable(name, "f4", (name,), fill_value=np.float32(np.nan))
            c.units, c.standard_name = units, {"lat": "latitude", "lon": "longitude"}[name]
            c.axis = {"lat": "Y", "lon": "X"}[name]
            c[:] = values
        if variant == "packed":
            v = ds.createVariable("tos", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
            v.scale_factor, v.add_offset = np.float32(0.01), np.float32(10.0)
            v.missing_value = np.int16(-32000)
            v.valid_range = np.array([-1500, 2500], np.int16)
            stored = np.rint((sst - 10.0) / 0.01).astype(np.int16)
            stored[missing] = -32767
            stored[-1, land] = -32000  # both markers in use (with nt > 1)
            sst = (stored.astype(np.float32) * np.float32(0.01) + np.float32(10.0)).astype(np.float64)
        else:
            fill = {"fill": 1e20, "nan": np.nan, "valid_range": 1e20}.get(variant)
            v = ds.createVariable("tos", "f4", ("time", "lat", "lon"),
                                  fill_value=np.float32(fill) if fill is not None else None)
            stored = sst.astype(np.float32)
            stored[missing] = -999.0 if variant == "missing_value" else fill
            if variant == "missing_value":
                v.missing_value = np.array([-999.0, -888.0], np.float32)
                stored[-1, land] = -888.0
            if variant == "valid_range":
                v.valid_range = np.array([-5, 40], np.float32)
                spikes = (np.arange(stored.size).reshape(stored.shape) % 997 == 0) & ~missing
                stored[spikes] = 55.0
                missing |= spikes
            sst = stored.astype(np.float64)
        v.standard_name, v.long_name, v.units = "sea_surface_temperature", "Sea Surface Temperature", "degC"
        v.cell_methods = "time: mean"
        v.set_auto_maskandscale(False)
        v[:] = stored
    return sst, missing


def _same(a, b) -> bool:
    """Same dtype, shape and bits (so NaN equals the same NaN); None only equals None."""
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _same_attrs(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        _same(a[k], b[k]) if isinstance(a[k], (np.ndarray, np.generic)) else a[k] == b[k] for k in a)


def assert_like_source(src, out, var: str, eb: float):
    """What xarray sees in ``out`` is what it sees in ``src`` for ``var``: dims, coordinates
    (bit-identical), attributes, ``_FillValue`` and packing encoding, missing points; valid
    values within ``eb``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's note on several fill values
        with xr.open_dataset(src) as a, xr.open_dataset(out) as b:
            va, vb = a[var], b[var]
            assert va.dims == vb.dims and va.shape == vb.shape
            assert list(va.coords) == list(vb.coords)
            for c in va.coords:
                assert _same(a[c].values, b[c].values), c
                assert _same_attrs(a[c].attrs, b[c].attrs), c
                assert _same(a[c].encoding.get("_FillValue"), b[c].encoding.get("_FillValue")), c
            assert _same_attrs(va.attrs, vb.attrs)
            assert _same_attrs(a.attrs, b.attrs)
            for key in ("_FillValue", "missing_value", "scale_factor", "add_offset", "dtype"):
                assert _same(va.encoding.get(key), vb.encoding.get(key)), key
            x, y = va.values.astype(np.float64), vb.values.astype(np.float64)
            miss = np.isnan(x)
            assert np.array_equal(miss, np.isnan(y))
            assert np.abs(x - y)[~miss].max() <= eb


def valid_eb(sst, missing, rel):
    valid = sst[~missing]
    return rel * float(valid.max() - valid.min())


@pytest.mark.parametrize("variant", VARIANTS)
def test_api_round_trip_to_netcdf(tmp_path, variant):
    src, out = tmp_path / "sst.nc", tmp_path / "out.nc"
    sst, missing = make_sst(src, variant)
    v = read_variable(src, "tos")
    assert v.data.dtype == np.float32 and v.data.shape == (2, 180, 360)
    assert np.array_equal(v.mask, missing)
    assert v.metadata["name"] == "tos" and v.metadata["dims"] == ["time", "lat", "lon"]
    blob = v.compress(rel_error=1e-3)
    eb = valid_eb(sst, missing, 1e-3)
    with strata.open(blob) as r:
        # the original bug: a 1e20 fill counted in the range gave a bound of 1e17
        assert r.header.bound_mode == 1 and r.header.eb <= eb * (1 + 1e-9)
        assert variant == "packed" or r.header.eb == pytest.approx(eb, rel=1e-6)
        assert r.missing_count == int(missing.sum())
        assert np.array_equal(r.read_mask(), missing)
    to_netcdf(blob, out)
    assert_like_source(src, out, "tos", eb)
    with netCDF4.Dataset(src) as a, netCDF4.Dataset(out) as b:
        for ds in (a, b):
            ds["tos"].set_auto_maskandscale(False)
        assert _same(a["tos"][:][missing], b["tos"][:][missing])  # missing points: stored values kept


def test_packed_bound_survives_repacking(tmp_path):
    src = tmp_path / "p.nc"
    sst, missing = make_sst(src, "packed")
    v = read_variable(src, "tos")
    assert v.packing is not None and v.data.dtype == np.float32 and v.fill_value is None
    assert np.isnan(v.data[missing]).all() and not np.isnan(v.data[~missing]).any()
    for eb, lossless in ((0.004, True), (0.0123, False), (0.05, False)):
        out = tmp_path / f"p{eb}.nc"
        blob = v.compress(abs_error=eb)
        with strata.open(blob) as r:
            assert r.header.eb <= eb
        to_netcdf(blob, out)
        assert_like_source(src, out, "tos", eb)
        with netCDF4.Dataset(src) as a, netCDF4.Dataset(out) as b:
            for ds in (a, b):
                ds["tos"].set_auto_maskandscale(False)
            pa, pb = a["tos"][:], b["tos"][:]
            assert pb.dtype == np.int16 and np.array_equal(pa[missing], pb[missing])
            assert np.array_equal(pa, pb) == lossless


def test_stream_without_metadata_writes_plain_variable(tmp_path):
    a = np.linspace(0, 1, 600, dtype=np.float64).reshape(20, 30)
    a[3, :7] = -1.0
    a[5, 5] = np.nan
    write_netcdf(tmp_path / "d.nc", np.ma.MaskedArray(a, mask=a == -1.0), None, fill_value=-1.0)
    with xr.open_dataset(tmp_path / "d.nc") as ds:
        assert list(ds.data_vars) == ["data"] and ds["data"].dims == ("dim_0", "dim_1")
        assert ds["data"].encoding["_FillValue"] == -1.0
        assert np.isnan(ds["data"].values).sum() == 8
    blob = strata.compress(np.where(np.isnan(a), 0.5, a), abs_error=1e-3, fill_value=-1.0)
    to_netcdf(blob, tmp_path / "e.nc")
    with xr.open_dataset(tmp_path / "e.nc") as ds:
        assert np.isnan(ds["data"].values).sum() == 7


def test_netcdf_output_replaces_only_when_asked(tmp_path):
    """The CLI's "never an existing file without --force" holds for .nc outputs at the write
    itself (checked again at the rename), not only by a check before decoding."""
    a = np.linspace(0, 1, 60, dtype=np.float32).reshape(6, 10)
    out = tmp_path / "d.nc"
    out.write_bytes(b"keep me")
    with pytest.raises(FileExistsError):
        write_netcdf(out, a, None, replace=False)
    assert out.read_bytes() == b"keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["d.nc"]
    write_netcdf(out, a, None)
    with xr.open_dataset(out) as ds:
        assert np.array_equal(ds["data"].values, a)


def test_hdf5_reading_follows_the_same_rules(tmp_path):
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "sst.nc"
    make_sst(src, "packed")
    shutil.copy(src, tmp_path / "sst.h5")  # a netCDF-4 file is an HDF5 file
    a, b = read_variable(src, "tos"), read_variable(tmp_path / "sst.h5", "tos")
    assert _same(a.data, b.data) and np.array_equal(a.mask, b.mask) and a.packing == b.packing
    assert b.metadata["dims"] == a.metadata["dims"] and b.metadata["coords"] == a.metadata["coords"]
    assert b.metadata["attrs"] == a.metadata["attrs"]
    # a plain HDF5 dataset: h5py's implicit fill value (0) is not a missing marker; a fill value
    # set when the dataset was made is, and so is a _FillValue attribute (which wins)
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        d = f.create_dataset("g/x", data=np.arange(12, dtype=np.float32).reshape(3, 4))
        d.attrs["units"] = "m"
        f.create_dataset("g/y", data=np.array([1, -999, 3, -999], np.float32), fillvalue=-999)
    v = read_variable(tmp_path / "plain.h5", "g/x")
    assert v.mask is None and v.metadata["dims"] == ["dim_0", "dim_1"] and v.metadata["name"] == "x"
    y = read_variable(tmp_path / "plain.h5", "g/y")
    assert y.mask.tolist() == [False, True, False, True] and y.fill_value == -999
    with h5py.File(tmp_path / "plain.h5", "a") as f:
        f["g/x"].attrs["_FillValue"] = np.float32(0)
        f["g/y"].attrs["_FillValue"] = np.float32(3)
    assert read_variable(tmp_path / "plain.h5", "g/x").mask.sum() == 1
    assert read_variable(tmp_path / "plain.h5", "g/y").mask.tolist() == [False, False, True, False]


def test_no_cf_keeps_what_cf_refuses(tmp_path):
    src = tmp_path / "f.nc"
    with netCDF4.Dataset(src, "w") as ds:
        ds.createDimension("x", 50)
        v = ds.createVariable("u", "f4", ("x",))
        v.scale_factor = np.float32(2.0)  # packing of float data: legal CF, not supported
        v.set_auto_maskandscale(False)
        v[:] = np.linspace(0, 1, 50, dtype=np.float32)
    with pytest.raises(UnsupportedDtypeError, match="on float32 data"):
        read_variable(src, "u")
    to_netcdf(read_variable(src, "u", cf=False).compress(abs_error=1e-3), tmp_path / "o.nc")
    assert_like_source(src, tmp_path / "o.nc", "u", 2e-3)  # xarray unpacks both: twice the bound


def test_real_basin_mask_file(tmp_path):
    if not BASIN.exists():
        pytest.skip(f"{BASIN} not present")
    with pytest.raises(UnsupportedDtypeError, match="int8 data without scale_factor"):
        read_variable(BASIN, "basin")
    with pytest.raises(UnsupportedDtypeError):
        read_variable(BASIN, "basin", cf=False)
    v = read_variable(BASIN, "Y")  # float32 coordinate with a NaN _FillValue
    assert v.metadata["coords"] == {} and v.metadata["dims"] == ["Y"]
    to_netcdf(v.compress(abs_error=0.0), tmp_path / "y.nc")
    assert_like_source(BASIN, tmp_path / "y.nc", "Y", 0.0)


def test_bad_inputs(tmp_path):
    src = tmp_path / "sst.nc"
    make_sst(src, "fill", nt=1)
    with pytest.raises(InvalidInputError, match="no variable 'sst'"):
        read_variable(src, "sst")
    with pytest.raises(InvalidInputError, match="not a NetCDF"):
        read_variable(tmp_path / "x.grib", "sst")
    (tmp_path / "junk.nc").write_bytes(b"not a netcdf file")
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_variable(tmp_path / "junk.nc", "x")
    with netCDF4.Dataset(src, "a") as ds:
        ds.createVariable("flags", "i4", ("lat", "lon"))[:] = 1
        ds["tos"].history = "x" * (5 << 20)
    with pytest.raises(UnsupportedDtypeError, match="int32 data without"):
        read_variable(src, "flags")
    with pytest.raises(InvalidInputError, match="exceeds the limit"):
        read_variable(src, "tos").compress(rel_error=1e-3)


def _corruptions(obj, path=()):
    """Every (path, bad value) pair for the nodes of a JSON tree."""
    bad = (None, 3, -1, 1.5, "x", [], {}, [1], {"a": 1}, True)
    yield from ((path, b) for b in bad)
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _corruptions(v, (*path, k))


def _replaced(obj, path, value):
    if not path:
        return value
    out = json.loads(json.dumps(obj))
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def test_corrupted_metadata_is_a_clean_error(tmp_path):
    src = tmp_path / "sst.nc"
    make_sst(src, "packed", nt=1, grid=(6, 8))
    v = read_variable(src, "tos")
    meta = v.metadata
    assert meta["format"] == FORMAT and parse_metadata(meta).name == "tos"
    data = np.ma.MaskedArray(v.data, mask=v.mask)
    outcomes = set()
    for path, value in _corruptions(meta):
        bad = _replaced(meta, path, value)
        try:
            parse_metadata(bad)
        except CorruptStreamError:
            outcomes.add("corrupt")
            continue
        outcomes.add("ok")
        try:  # what parses either writes or fails cleanly
            write_netcdf(tmp_path / "m.nc", data, bad)
        except (CorruptStreamError, InvalidInputError):
            outcomes.add("write refused")
    assert outcomes == {"ok", "corrupt", "write refused"}
    assert not list(tmp_path.glob(".m.nc.*"))  # no temporary file left behind
    assert parse_metadata({"something": "else"}) is None  # a user's own metadata
    # a stream whose metadata does not fit its data: a clean error from the CLI
    from tests.test_cli import run

    bad = dict(meta, dims=["time", "lat"])
    (tmp_path / "bad.strata").write_bytes(strata.compress(v.data, abs_error=0.1, metadata=bad))
    res = run("decompress", tmp_path / "bad.strata", "-o", tmp_path / "bad.nc")
    assert res.exit_code != 0 and "CorruptStreamError" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "bad.nc").exists()
    blob = bytearray(v.compress(abs_error=0.1))
    at = blob.index(b'"name":"tos"')
    blob[at + 9] ^= 1  # flip one bit of the JSON text: its checksum no longer matches
    (tmp_path / "flip.strata").write_bytes(bytes(blob))
    res = run("decompress", tmp_path / "flip.strata", "-o", tmp_path / "flip.nc")
    assert res.exit_code != 0 and "CorruptStreamError" in res.output


_FULL_DISK_CHILD = """
import json, os, resource, sys
import numpy as np
import xarray  # noqa: F401  (imported before the limit: nothing but the outputs is written under it)
from strata.cf import write_netcdf
from strata.convert import zarr_to_netcdf

folder, store, mode = sys.argv[1:4]
if mode == "fsize":
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
values = np.random.default_rng(0).random((300, 300)).astype(np.float32)
results = []
for name, write in (("cf.nc", lambda p: write_netcdf(p, values)), ("convert.nc", lambda p: zarr_to_netcdf(store, p))):
    try:
        write(os.path.join(folder, name))
        results.append([name, None, ""])
    except OSError as exc:
        results.append([name, exc.errno, str(exc)])
print(json.dumps({"results": results, "left": sorted(os.listdir(folder))}))
"""


@pytest.mark.parametrize("mode", ["fsize", "tmpfs"])
def test_full_disk_is_an_oserror_naming_the_output(tmp_path, mode):
    """A NetCDF output that does not fit (a 64 KiB tmpfs: ENOSPC; a 64 KiB file size limit:
    EFBIG) raises OSError naming the output, not netCDF-C's bare "NetCDF: HDF error", and
    leaves no file. A fresh process: the limit is process-wide, the tmpfs is mounted in a user
    namespace of its own (skipped where the system allows none)."""
    import errno
    import subprocess
    import sys

    store = tmp_path / "src.zarr"
    xr.Dataset({"t": (("y", "x"), np.random.default_rng(1).random((300, 300)).astype(np.float32))}).to_zarr(
        store, zarr_format=3, consolidated=False)
    folder = tmp_path / "out"
    folder.mkdir()
    args = [sys.executable, "-c", _FULL_DISK_CHILD, str(folder), str(store), mode]
    if mode == "tmpfs":
        if shutil.which("unshare") is None:
            pytest.skip("no unshare command")
        args = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1" && shift && exec "$@"', "sh",
                str(folder), *args]
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if mode == "tmpfs" and res.returncode != 0 and ("unshare" in res.stderr or "mount" in res.stderr):
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    expected = errno.EFBIG if mode == "fsize" else errno.ENOSPC
    for name, code, message in report["results"]:
        assert code == expected, (name, message)
        assert str(folder / name) in message and "NetCDF: HDF error" in message, message
    assert report["left"] == []
