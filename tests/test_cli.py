"""The command line: compress, info, decompress, extract, on raw, .npy, NetCDF and HDF5 inputs."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import strata
from strata.cli import main, parse_region


def field(shape=(12, 30, 40), dtype=np.float32):
    rng = np.random.default_rng(7)
    return np.cumsum(np.cumsum(rng.standard_normal(shape), axis=-1), axis=-2).astype(dtype)


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return res


def test_raw_round_trip_with_shape_from_name(tmp_path):
    a = field()
    src = tmp_path / "vx_12x30x40.f32"
    a.astype("<f4").tofile(src)
    res = run("compress", src, "--rel", "1e-3")
    assert res.exit_code == 0, res.output
    out = tmp_path / "vx_12x30x40.f32.strata"
    assert out.exists() and "ratio" in res.output
    res = run("info", out)
    assert res.exit_code == 0 and "(12, 30, 40)" in res.output and "level" in res.output
    res = run("decompress", out, "-o", tmp_path / "back.f32")
    assert res.exit_code == 0, res.output
    back = np.fromfile(tmp_path / "back.f32", dtype="<f4").reshape(a.shape)
    eb = 1e-3 * float(np.ptp(a))
    assert np.abs(back.astype(np.float64) - a).max() <= eb


def test_npy_f64_and_extract(tmp_path):
    a = field((100, 128), np.float64)
    src = tmp_path / "x.npy"
    np.save(src, a)
    assert run("compress", src, "--abs", "0.01", "-o", tmp_path / "x.st").exit_code == 0
    full = strata.decompress(tmp_path / "x.st")
    assert run("extract", tmp_path / "x.st", "-o", tmp_path / "r.npy", "--region", "10:20,5:").exit_code == 0
    assert np.array_equal(np.load(tmp_path / "r.npy"), full[10:20, 5:])
    assert run("extract", tmp_path / "x.st", "-o", tmp_path / "g.npy", "--level", "1", "--grid").exit_code == 0
    with strata.open(tmp_path / "x.st") as r:
        assert np.load(tmp_path / "g.npy").shape == r.levels[1].shape
    assert run("decompress", tmp_path / "x.st", "--level", "0", "-o", tmp_path / "p.npy").exit_code == 0
    assert np.load(tmp_path / "p.npy").shape == a.shape


def test_raw_needs_a_shape(tmp_path):
    src = tmp_path / "noshape.f32"
    field().tofile(src)
    res = CliRunner().invoke(main, ["compress", str(src), "--rel", "1e-2"])
    assert res.exit_code != 0 and "--shape" in res.output
    res = run("compress", src, "--rel", "1e-2", "--shape", "12x30x40")
    assert res.exit_code == 0


def test_bad_stream_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.strata"
    bad.write_bytes(b"STRA" + b"\x01" * 30)
    res = CliRunner().invoke(main, ["info", str(bad)])
    assert res.exit_code != 0 and "Error" in res.output and "Traceback" not in res.output


def test_hdf5_and_netcdf_variables(tmp_path):
    h5py = pytest.importorskip("h5py")
    netCDF4 = pytest.importorskip("netCDF4")
    a = field((8, 20, 24))
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("group/temp", data=a)
    with netCDF4.Dataset(tmp_path / "f.nc", "w") as ds:
        for name, n in zip(("t", "y", "x"), a.shape):
            ds.createDimension(name, n)
        ds.createVariable("u", "f4", ("t", "y", "x"))[:] = a
    for src, var in ((tmp_path / "f.h5", "group/temp"), (tmp_path / "f.nc", "u")):
        out = tmp_path / (src.name + ".strata")
        res = run("compress", src, "--var", var, "--abs", "0.05", "-o", out)
        assert res.exit_code == 0, res.output
        assert np.abs(strata.decompress(out).astype(np.float64) - a).max() <= 0.05
    res = CliRunner().invoke(main, ["compress", str(tmp_path / "f.nc"), "--abs", "1", "-o", str(tmp_path / "n.st")])
    assert res.exit_code == 2 and "--var" in res.output


def test_parse_region():
    assert parse_region("10:20,:,5") == (slice(10, 20), slice(None), 5)
    assert parse_region("::2, -1") == (slice(None, None, 2), -1)
    assert parse_region(None) is None


def test_progress_bar_on_large_inputs(tmp_path, monkeypatch, capsys):
    import strata.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_BYTES", 1)  # every input counts as large
    a = field((16, 64, 64))
    src = tmp_path / "big_16x64x64.f32"
    a.tofile(src)
    calls = []
    original = cli._Bar.__call__

    def spy(self, done, total):
        calls.append((done, total))
        original(self, done, total)

    monkeypatch.setattr(cli._Bar, "__call__", spy)
    assert run("compress", src, "--rel", "1e-3").exit_code == 0
    assert calls and calls[-1][0] == calls[-1][1]
    calls.clear()
    assert run("decompress", str(src) + ".strata", "-o", tmp_path / "o.npy").exit_code == 0
    assert calls and calls[-1][0] == calls[-1][1]


# ------------------------------------------------------------------ NetCDF with the CF conventions
def cf():
    """The NetCDF helpers of tests.test_cf (skips without netCDF4 or xarray)."""
    pytest.importorskip("netCDF4")
    pytest.importorskip("xarray")
    from tests import test_cf

    return test_cf


def test_cli_round_trip_and_info(tmp_path):
    t = cf()
    src = tmp_path / "sst.nc"
    sst, missing = t.make_sst(src, "fill")
    res = run("compress", src, "--var", "tos", "--rel", "1e-3", "-o", tmp_path / "t.strata")
    assert res.exit_code == 0, res.output
    assert f"{int(missing.sum())} missing" in res.output
    eb = t.valid_eb(sst, missing, 1e-3)
    res = run("info", tmp_path / "t.strata")
    assert res.exit_code == 0, res.output
    assert f"missing values {int(missing.sum())} ({100 * missing.mean():.2f} %)" in res.output
    assert "fill value 1e+20" in res.output and "mask " in res.output
    assert f"valid range [{sst[~missing].min():.6g}, {sst[~missing].max():.6g}]" in res.output
    assert f"0.001 of the valid range -> {eb:.6g}" in res.output
    assert "variable tos(time, lat, lon) stored as float32" in res.output
    res = run("decompress", tmp_path / "t.strata", "-o", tmp_path / "t.nc")
    assert res.exit_code == 0, res.output
    t.assert_like_source(src, tmp_path / "t.nc", "tos", eb)
    # .npy keeps the original bits of the missing points
    assert run("decompress", tmp_path / "t.strata", "-o", tmp_path / "t.npy").exit_code == 0
    back = np.load(tmp_path / "t.npy")
    assert back.dtype == np.float32 and np.all(back[missing] == np.float32(1e20))
    assert np.abs(back[~missing] - sst[~missing]).max() <= eb


def test_cli_no_cf_reads_stored_values(tmp_path):
    t = cf()
    src = tmp_path / "sst.nc"
    sst, missing = t.make_sst(src, "fill")
    v = t.read_variable(src, "tos", cf=False)
    assert v.mask is None and v.fill_value is None and np.array_equal(v.data, sst.astype(np.float32))
    res = run("compress", src, "--var", "tos", "--rel", "1e-3", "--no-cf", "-o", tmp_path / "raw.strata")
    assert res.exit_code == 0, res.output
    with strata.open(tmp_path / "raw.strata") as r:
        assert r.missing_count == 0 and r.header.eb > 1e16  # the fill is data here
    res = run("info", tmp_path / "raw.strata")
    assert "missing values" not in res.stdout
    assert "--fill-value 1e+20" in res.stderr  # the land's 1e20 dominates the range: info says so
    # the file written back is still the source's: the fill value is kept, xarray masks it
    assert run("decompress", tmp_path / "raw.strata", "-o", tmp_path / "raw.nc").exit_code == 0
    t.assert_like_source(src, tmp_path / "raw.nc", "tos", 1e-3 * float(sst.max() - sst.min()))
    packed = tmp_path / "packed.nc"
    t.make_sst(packed, "packed")
    with pytest.raises(t.UnsupportedDtypeError, match="packed data"):
        t.read_variable(packed, "tos", cf=False)


def test_region_preview_and_grid_outputs_slice_coordinates(tmp_path):
    t = cf()
    src = tmp_path / "sst.nc"
    t.make_sst(src, "fill", nt=3)
    stream = tmp_path / "t.strata"
    stream.write_bytes(t.read_variable(src, "tos").compress(abs_error=0.01))
    res = run("decompress", stream, "--region", "1,10:50,::3", "-o", tmp_path / "r.nc")
    assert res.exit_code == 0, res.output
    with t.xr.open_dataset(src) as a, t.xr.open_dataset(tmp_path / "r.nc") as b:
        sel = a["tos"].isel(time=slice(1, 2), lat=slice(10, 50), lon=slice(None, None, 3))
        assert b["tos"].dims == sel.dims and b["tos"].shape == (1, 40, 120)
        for c in sel.coords:
            assert t._same(sel[c].values, b[c].values)
        assert np.array_equal(np.isnan(sel.values), np.isnan(b["tos"].values))
    with strata.open(stream) as r:
        lv = r.levels[1]
    assert run("extract", stream, "--level", "1", "--grid", "-o", tmp_path / "g.nc").exit_code == 0
    with t.xr.open_dataset(src) as a, t.xr.open_dataset(tmp_path / "g.nc") as b:
        assert b["tos"].shape == lv.shape
        assert t._same(a["lat"].values[::lv.stride[1]], b["lat"].values)
    assert run("decompress", stream, "--level", "0", "-o", tmp_path / "p.nc").exit_code == 0
    with t.xr.open_dataset(tmp_path / "p.nc") as b:
        assert b["tos"].shape == (3, 180, 360)


def test_cli_errors_are_clean(tmp_path):
    t = cf()
    src = tmp_path / "sst.nc"
    t.make_sst(src, "fill", nt=1)
    with t.netCDF4.Dataset(src, "a") as ds:
        ds.createVariable("flags", "i1", ("lat", "lon"))[:] = 1
    for args, message in ((("--var", "nope"), "no variable 'nope'"),
                          (("--var", "flags"), "UnsupportedDtypeError"),
                          ((), "--var")):
        res = run("compress", src, "--rel", "1e-3", *args)
        assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output
