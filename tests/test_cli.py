"""The command line: compress, info, decompress, extract, on raw, .npy, NetCDF and HDF5 inputs."""
from __future__ import annotations

import os

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


# ------------------------------------------------------------------ issue 35: raw data, overwrites, errors
def invoke(*args):
    """Run the command line in-process; a crash (an exception other than SystemExit) fails."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    return res


def ocean_field(tmp_path, nt=2):
    """A raw sea-surface temperature in K, ``(nt, 45, 90)``, whose land holds 1e20 (the real
    basin mask's surface when the shared data are there, else made-up continents)."""
    land = cf().surface_land((180, 360))[::4, ::4]
    lat = np.linspace(-88, 88, land.shape[0])
    t = np.arange(nt)[:, None, None]
    sst = (271.5 + 30 * np.cos(np.deg2rad(lat))[None, :, None] ** 2 + 0.5 * np.sin(t + np.arange(90) / 9.0)
           + np.zeros((nt, *land.shape)))
    sst = sst.astype(np.float32)
    sst[:, land] = np.float32(1e20)
    src = tmp_path / f"sst_{nt}x{land.shape[0]}x{land.shape[1]}.f32"
    sst.tofile(src)
    return src, sst, np.broadcast_to(land, sst.shape)


def test_raw_fill_value_is_declared_and_a_dominated_range_is_told(tmp_path):
    """Issue 35: a raw ocean field whose land is 1e20 compressed with --rel 1e-3 to a bound of
    1e17 and decoded every ocean value to noise, silently; `quality` predicted 67 dB for it."""
    src, sst, land = ocean_field(tmp_path)
    ocean = ~land
    eb_ocean = 1e-3 * float(sst[ocean].max() - sst[ocean].min())
    # undeclared: the warning names the value and the flag
    res = invoke("compress", src, "--rel", "1e-3", "-o", tmp_path / "u.strata")
    assert res.exit_code == 0, res.output
    assert "warning" in res.stderr and "dominated by 1e+20" in res.stderr and "--fill-value 1e+20" in res.stderr
    assert f"{int(land.sum())} points" in res.stderr
    bad = strata.decompress(tmp_path / "u.strata")
    assert np.abs(bad[ocean].astype(np.float64) - sst[ocean]).max() > 1000 * eb_ocean  # what it warns about
    res = invoke("info", tmp_path / "u.strata")
    assert res.exit_code == 0 and "--fill-value 1e+20" in res.stderr and "warning" not in res.stdout
    res = invoke("quality", src, "--rel", "1e-3")
    assert res.exit_code == 0 and "--fill-value 1e+20" in res.stderr
    # declared: a fill value, or a mask (one 2-D land mask for every time step, .npy or raw bytes)
    np.save(tmp_path / "land.npy", land[0])
    land[0].astype(np.uint8).tofile(tmp_path / "land_45x90.u8")
    for how in (("--fill-value", "1e20"), ("--mask", tmp_path / "land.npy"), ("--mask", tmp_path / "land_45x90.u8")):
        out = tmp_path / f"d{len(list(tmp_path.iterdir()))}.strata"
        res = invoke("compress", src, "--rel", "1e-3", *how, "-o", out)
        assert res.exit_code == 0 and res.stderr == "", (how, res.output)
        assert f"{int(land.sum())} missing" in res.stdout
        back = strata.decompress(out)
        assert np.abs(back[ocean].astype(np.float64) - sst[ocean]).max() <= eb_ocean
        assert np.array_equal(back[land], sst[land])  # the land keeps its exact bits
        res = invoke("info", out)
        assert res.exit_code == 0 and res.stderr == "" and f"missing values {int(land.sum())}" in res.stdout
    res = invoke("quality", src, "--rel", "1e-3", "--fill-value", "1e20")
    assert res.exit_code == 0 and res.stderr == ""


def test_never_overwrites_an_input_nor_an_existing_file_without_force(tmp_path):
    """Issue 35: `strata decompress foo.npy.strata` overwrote the original foo.npy with the
    lossy copy; `strata compress x.f32 -o x.f32` replaced its own input."""
    a = field((6, 20, 24))
    src = tmp_path / "foo.npy"
    np.save(src, a)
    original = src.read_bytes()
    assert invoke("compress", src, "--rel", "1e-2").exit_code == 0
    stream = tmp_path / "foo.npy.strata"
    res = invoke("decompress", stream)  # default output: foo.npy, the original
    assert res.exit_code == 2 and "foo.npy exists" in res.output and "--force" in res.output
    assert src.read_bytes() == original
    res = invoke("compress", src, "--rel", "1e-3")  # the stream exists
    assert res.exit_code == 2 and "exists" in res.output
    raw = tmp_path / "x_6x20x24.f32"
    a.tofile(raw)
    (tmp_path / "link.f32").symlink_to(raw)
    os.link(raw, tmp_path / "hard.f32")
    for out in (raw, tmp_path / "link.f32", tmp_path / "hard.f32", tmp_path / "." / raw.name):
        for force in ((), ("--force",)):
            res = invoke("compress", raw, "--rel", "1e-3", "-o", out, *force)
            assert res.exit_code == 2 and "is the input" in res.output, (out, force, res.output)
    assert np.array_equal(np.fromfile(raw, "<f4").reshape(a.shape), a)
    res = invoke("decompress", stream, "-o", stream, "--force")
    assert res.exit_code == 2 and "is the input" in res.output
    res = invoke("extract", stream, "-o", src, "--level", "0")
    assert res.exit_code == 2 and src.read_bytes() == original
    # with --force an output that is no input is replaced
    res = invoke("decompress", stream, "--force")
    assert res.exit_code == 0 and np.abs(np.load(src) - a).max() <= 1e-2 * np.ptp(a) and src.read_bytes() != original
    assert not [p for p in tmp_path.iterdir() if ".strata-tmp." in p.name]


def test_ckpt_outputs_need_force_and_never_replace_an_input(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    m0, m1 = tmp_path / "m0.safetensors", tmp_path / "m1.safetensors"
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    save_file({"w": w}, m0)
    save_file({"w": w + 1e-3}, m1)
    c0 = tmp_path / "c0.strata"
    assert invoke("ckpt", "compress", m0, "-o", c0).exit_code == 0
    before = c0.read_bytes()
    for args in (("ckpt", "compress", m1, "-o", c0), ("ckpt", "compress", m1, "-o", c0, "--base", c0, "--force"),
                 ("ckpt", "compress", m1, "-o", m1, "--force"), ("ckpt", "decompress", c0, "-o", m0),
                 ("ckpt", "decompress", c0, "-o", c0, "--force")):
        res = invoke(*args)
        assert res.exit_code == 2 and ("exists" in res.output or "is the" in res.output), (args, res.output)
    assert c0.read_bytes() == before
    assert invoke("ckpt", "compress", m1, "-o", c0, "--force").exit_code == 0 and c0.read_bytes() != before
    assert invoke("ckpt", "decompress", c0, "-o", m0, "--force").exit_code == 0
    assert m0.read_bytes() == m1.read_bytes()


BAD_ARGUMENTS = [
    (("decompress", "{s}", "--region", "a:b,:,:", "-o", "{d}/o.npy"), "--region"),
    (("decompress", "{s}", "--region", "0:10:0", "-o", "{d}/o.npy"), "step cannot be zero"),
    (("decompress", "{s}", "--region", "0:1:9223372036854775808", "-o", "{d}/o.npy"), "out of range"),
    (("decompress", "{s}", "--region", ",", "-o", "{d}/o.npy"), "empty index"),
    (("decompress", "{s}", "--region", "0:2,0:2,0:2,0:2", "-o", "{d}/o.npy"), "4 entries"),
    (("decompress", "{s}", "--level", "-1", "-o", "{d}/o.npy"), "--level"),
    (("decompress", "{s}", "--level", "99", "-o", "{d}/o.npy"), "level must be"),
    (("decompress", "{s}", "-o", "{d}/o.txt"), "must be .npy"),
    (("decompress", "{s}", "-o", "{d}/missing_dir/o.npy"), "does not exist"),
    (("decompress", "{d}/missing.strata"), "does not exist"),
    (("decompress", "{d}"), "is a directory"),
    (("extract", "{s}", "-o", "{d}/g.npy", "--grid"), "--grid needs --level"),
    (("extract", "{s}", "-o", "{d}/g.npy", "--grid", "--level", "0", "--region", "0:1"), "does not combine"),
    (("compress", "{r}"), "give one of"),
    (("compress", "{r}", "--rel", "1e-3", "--abs", "1"), "give one of"),
    (("compress", "{r}", "--rel", "x"), "--rel"),
    (("compress", "{r}", "--rel", "-1", "-o", "{d}/o.st"), "error bound"),
    (("compress", "{r}", "--rel", "1e-3", "--shape", "2x2", "-o", "{d}/o.st"), "shape (2, 2)"),
    (("compress", "{r}", "--rel", "1e-3", "--shape", "ax2", "-o", "{d}/o.st"), "--shape"),
    (("compress", "{r}", "--rel", "1e-3", "--var", "v", "-o", "{d}/o.st"), "--var"),
    (("compress", "{r}", "--rel", "1e-3", "--no-cf", "-o", "{d}/o.st"), "--no-cf"),
    (("compress", "{r}", "--rel", "1e-3", "--fill-value", "1e300", "-o", "{d}/o.st"), "cannot be represented"),
    (("compress", "{r}", "--rel", "1e-3", "--mask", "{d}/m3.npy", "-o", "{d}/o.st"), "does not match"),
    (("compress", "{d}/empty.npy", "--rel", "1e-3", "-o", "{d}/o.st"), "not a valid .npy"),
    (("compress", "{d}/ints.npy", "--rel", "1e-3", "-o", "{d}/o.st"), "not floating point"),
    (("compress", "{d}/x.txt", "--rel", "1e-3", "-o", "{d}/o.st"), "unknown input format"),
    (("compress", "{r}", "--target-psnr", "-3", "-o", "{d}/o.st"), "> 0 dB"),
    (("quality", "{r}", "--rel", "1e-2", "--compressor", "lz4"), "unknown compressor"),
    (("quality", "{r}", "--rel", "1e-2,"), "--rel"),
    (("ckpt", "compress", "{d}/m.safetensors", "-o", "{d}/missing_dir/m.strata"), "missing_dir"),
    (("ckpt", "compress", "{d}/missing.safetensors"), "does not exist"),
    (("ckpt", "decompress", "{d}/c.strata", "-o", "{d}/missing_dir/m.safetensors"), "missing_dir"),
    (("convert", "{d}/missing.nc", "{d}/o.zarr", "--rel", "1e-3"), "does not exist"),
]


def test_every_bad_argument_is_one_line_and_exit_code_2(tmp_path):
    """Issue 35: tracebacks for --region "a:b,:,:", 0:10:0, 0:1:9223372036854775808 and for
    `ckpt compress ... -o missing_dir/m.strata`; any bad argument: a one-line message, exit 2."""
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    a = field((6, 20, 24))
    raw = tmp_path / "f_6x20x24.f32"
    a.tofile(raw)
    stream = tmp_path / "f.strata"
    stream.write_bytes(strata.compress(a, rel_error=1e-3))
    np.save(tmp_path / "m3.npy", np.zeros((3, 3), bool))
    np.save(tmp_path / "ints.npy", np.arange(4))
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "x.txt").write_text("x")
    save_file({"w": a[0]}, tmp_path / "m.safetensors")
    assert invoke("ckpt", "compress", tmp_path / "m.safetensors", "-o", tmp_path / "c.strata").exit_code == 0
    for args, message in BAD_ARGUMENTS:
        res = invoke(*(x.format(d=tmp_path, s=stream, r=raw) for x in args))
        errors = [line for line in res.output.splitlines() if line.startswith("Error")]
        assert res.exit_code == 2 and len(errors) == 1 and message in errors[0], (args, res.output)
        assert "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.strata", "empty.npy", "f.strata", "f_6x20x24.f32",
                                                           "ints.npy", "m.safetensors", "m3.npy", "x.txt"]


def test_damaged_data_exit_code_1(tmp_path):
    bad = tmp_path / "bad.strata"
    data = bytearray(strata.compress(field((6, 20, 24)), rel_error=1e-3))
    data[-10] ^= 0xFF
    bad.write_bytes(bytes(data))
    res = invoke("decompress", bad, "-o", tmp_path / "o.npy")
    assert res.exit_code == 1 and res.output.startswith("Error: CorruptStreamError") and len(
        res.output.splitlines()) == 1
    assert not (tmp_path / "o.npy").exists()


def file_size_limit(nbytes):
    """A context in which this process cannot write files past ``nbytes`` (EFBIG, as a full
    disk would give ENOSPC)."""
    import contextlib
    import resource

    @contextlib.contextmanager
    def limited():
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    return limited()


def test_a_full_disk_is_a_message_naming_the_output(tmp_path):
    """Issue 35: `ckpt compress`/`decompress` on a full disk raised an OSError traceback, and a
    message for an unwritable output named the temporary file."""
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    model = tmp_path / "m.safetensors"
    save_file({"w": np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)}, model)
    ckpt, back = tmp_path / "m.strata", tmp_path / "back.safetensors"
    assert invoke("ckpt", "compress", model, "-o", ckpt).exit_code == 0  # (compiles what the runs below need)
    assert invoke("ckpt", "decompress", ckpt, "-o", back).exit_code == 0
    src = tmp_path / "f_16x64x64.f32"
    field((16, 64, 64)).tofile(src)
    assert invoke("compress", src, "--abs", "0", "-o", tmp_path / "f.strata").exit_code == 0
    old = b"the previous file"
    for args, out in ((("ckpt", "compress", model, "-o", tmp_path / "c.strata", "--force"), tmp_path / "c.strata"),
                      (("ckpt", "decompress", ckpt, "-o", back, "--force"), back),
                      (("compress", src, "--abs", "0", "-o", tmp_path / "g.strata", "--force"), tmp_path / "g.strata"),
                      (("decompress", tmp_path / "f.strata", "-o", tmp_path / "f.npy"), tmp_path / "f.npy")):
        if "--force" in args:
            out.write_bytes(old)
        with file_size_limit(64 << 10):
            res = invoke(*args)
        assert res.exit_code == 1 and res.output == f"Error: {out}: File too large\n", (args, res.output)
        assert (out.read_bytes() == old) if out.exists() else out.name == "f.npy"
        assert not [p for p in tmp_path.iterdir() if ".strata-tmp." in p.name]


@pytest.mark.timeout(60)
def test_fifo_inputs_are_refused(tmp_path):
    """Issue 35: `strata info` on a FIFO hung."""
    fifo = tmp_path / "f_4x4.f32"
    os.mkfifo(fifo)
    for args in (("info", fifo), ("decompress", fifo, "-o", tmp_path / "o.npy"), ("compress", fifo, "--rel", "1e-3"),
                 ("quality", fifo, "--rel", "1e-3"), ("ckpt", "info", fifo), ("ckpt", "compress", fifo),
                 ("compress", tmp_path / "x_4x4.f32", "--rel", "1e-3", "--mask", fifo)):
        (tmp_path / "x_4x4.f32").write_bytes(np.zeros(16, "<f4").tobytes())
        res = invoke(*args)
        assert res.exit_code == 2 and "not a regular file" in res.output, (args, res.output)


def test_objective_psnr_from_the_command_line(tmp_path):
    """`--objective psnr` tunes for bits at equal PSNR: the bound holds, the stream records
    level-wise bound factors the "ratio" run did not take, and a target refuses it."""
    from .synthetic import waves

    a = waves((32, 40, 48), 3, np.float32)
    src = tmp_path / "w_32x40x48.f32"
    a.astype("<f4").tofile(src)
    got = {}
    for objective in ("ratio", "psnr"):
        out = tmp_path / f"{objective}.strata"
        res = run("compress", src, "--rel", "1e-2", "--objective", objective, "-o", out)
        assert res.exit_code == 0, res.output
        back = strata.decompress(out)
        assert np.abs(back.astype(np.float64) - a).max() <= 1e-2 * float(np.ptp(a))
        with strata.open(out) as r:
            got[objective] = (r.header.alpha8, r.header.beta8)
    assert got["psnr"] != got["ratio"]
    res = CliRunner().invoke(main, ["compress", str(src), "--target-psnr", "60", "--objective", "psnr",
                                    "-o", str(tmp_path / "t.strata")])
    assert res.exit_code == 2 and "--objective" in res.output


# ------------------------------------------------------------------ issue 39: precision layers
def test_precision_layers_from_the_command_line(tmp_path):
    """A newcomer's session: compress a raw field with a fill value into precision layers, look
    at the layers, read it at a coarse bound (whole, a region, a level's grid), at a bound finer
    than the stream holds (a clean error), and a plain stream at its own bound."""
    a = field()
    a[2, :5, :5] = np.float32(-999.0)
    src = tmp_path / "t_12x30x40.f32"
    a.tofile(src)
    valid = a != np.float32(-999.0)
    vr = float(a[valid].max() - a[valid].min())
    res = invoke("compress", src, "--rel", "1e-5", "--fill-value", "-999", "--progressive", "precision",
                 "--layers", "1e-1,1e-3", "-o", tmp_path / "t.strata")
    assert res.exit_code == 0 and "3 precision layers" in res.output, res.output
    res = invoke("info", tmp_path / "t.strata")
    assert res.exit_code == 0 and "3 precision layers" in res.output and "bytes read to it" in res.output
    assert "0.1 " in res.output and "0.001 " in res.output, res.output
    coarse = 0.1 * vr
    res = invoke("extract", tmp_path / "t.strata", "-o", tmp_path / "c.npy", "--error-bound", coarse)
    assert res.exit_code == 0, res.output
    c = np.load(tmp_path / "c.npy")
    assert np.abs(c[valid].astype(np.float64) - a[valid]).max() <= coarse and np.all(c[~valid] == -999.0)
    assert np.abs(c[valid].astype(np.float64) - a[valid]).max() > 1e-3 * vr      # (the first layer alone)
    res = invoke("extract", tmp_path / "t.strata", "-o", tmp_path / "r.npy", "--error-bound", 1e-3 * vr,
                 "--region", "2:9,:,4")
    assert res.exit_code == 0 and np.abs(np.load(tmp_path / "r.npy") - a[2:9, :, 4])[valid[2:9, :, 4]].max() \
        <= 1e-3 * vr
    res = invoke("extract", tmp_path / "t.strata", "-o", tmp_path / "g.npy", "--level", "1", "--grid",
                 "--error-bound", coarse)
    assert res.exit_code == 0 and np.load(tmp_path / "g.npy").ndim == 3
    res = invoke("decompress", tmp_path / "t.strata", "-o", tmp_path / "f.npy")
    assert res.exit_code == 0 and np.abs(np.load(tmp_path / "f.npy") - a)[valid].max() <= 1e-5 * vr
    res = invoke("decompress", tmp_path / "t.strata", "-o", tmp_path / "x.npy", "--error-bound", 1e-9)
    assert res.exit_code != 0 and "finest bound" in res.output and not (tmp_path / "x.npy").exists()
    res = invoke("compress", src, "--abs", "0.5", "-o", tmp_path / "p.strata")
    res = invoke("decompress", tmp_path / "p.strata", "-o", tmp_path / "p.npy", "--error-bound", "2")
    assert res.exit_code == 0
    res = invoke("compress", src, "--abs", "0.5", "--layers", "1", "-o", tmp_path / "q.strata")
    assert res.exit_code != 0 and "--progressive" in res.output
