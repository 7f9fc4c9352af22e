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
    r = strata.open(tmp_path / "x.st")
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
    res = CliRunner().invoke(main, ["compress", str(tmp_path / "f.nc"), "--abs", "1"])
    assert res.exit_code != 0 and "--var" in res.output


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
