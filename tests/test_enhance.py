"""strata.enhance (NeurLZ online enhancement): the 1x/2x bounds on every valid value, the plain
decode unchanged, deterministic decoding on any number of threads, region reads and previews,
missing values, the "never worse" decision, field sets (cross-field), and bad or damaged input
refused with ``strata.errors`` types.

Most tests store the network whatever it gains (:func:`stored_always`): whether a network pays
is the encoder's decision (tested on its own, :func:`test_network_is_stored_when_it_pays`), while
the decoder's guarantees must hold for every stored network.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import struct
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import strata
import strata.enhance
from strata import metrics
from strata.container import KIND_FIELDS, KIND_LOSSY, Source, Writer, crc32, pack, unpack_header
from strata.enhance import EnhanceOptions, compress_fields, decompress_fields, network
from strata.enhance import codec as enhance_codec
from strata.enhance.fields import open_fields, pack_fields
from strata.enhance.section import Enhancement
from strata.errors import (
    CorruptStreamError,
    FormatError,
    InvalidInputError,
    MissingDependencyError,
    StrataError,
    TruncatedStreamError,
    UnsupportedDtypeError,
)
from strata.lossy import LossyReader
from strata.lossy import codec as lossy_codec
from strata.lossy.header import LossyHeader

from .synthetic import same_bits, waves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Fast training: a fraction of a second per field.
OPTS = EnhanceOptions(steps=30, batch_points=4000, progress=False)
#: Enough training for the network to pay on :func:`waves` at rel 1e-2 (2x).
PAYS = EnhanceOptions(steps=100, batch_points=2000, progress=False)
REL = 1e-2
SHAPES = {1: (3000,), 2: (60, 72), 3: (12, 30, 40), 4: (3, 4, 20, 30)}


@contextlib.contextmanager
def training_threads():
    """Compress on one thread (numba's setting, which strata.enhance also gives torch): these
    tests train many tiny networks, and on a loaded 2-core machine torch's OpenMP threads
    beside other processes' made each training step 10-100x slower."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


@contextlib.contextmanager
def stored_always():
    """Store the network whether or not it pays (its size estimate of a plain stream of the
    enhanced PSNR made huge)."""
    with pytest.MonkeyPatch.context() as mp, training_threads():
        mp.setattr(enhance_codec, "_plain_bytes_at", lambda *args, **kwargs: 1 << 40)
        yield


def forced(a, mode="2x", **kw):
    kw.setdefault("rel_error", REL)
    with stored_always():
        return strata.compress(a, enhance=mode, enhance_options=kw.pop("options", OPTS), **kw)


def split(blob: bytes) -> tuple[bytes, bytes]:
    """``(the stream without its enhancement section, the section)``."""
    raw, off = unpack_header(Source(blob), KIND_LOSSY)
    h = LossyHeader.from_bytes(raw, len(blob))
    n = h.enhance_len
    assert n > 0
    h.enhance_len = 0
    return pack(KIND_LOSSY, h.to_bytes(), [blob[off:len(blob) - n]]), blob[len(blob) - n:]


def with_section(blob: bytes, section: bytes) -> bytes:
    """``blob`` (enhanced or not) with ``section`` as its enhancement section."""
    plain = split(blob)[0] if LossyReader(blob).header.enhance_len else blob
    return lossy_codec.with_enhancement(plain, section)


def recrc(body: bytes) -> bytes:
    return bytes(body) + struct.pack("<I", crc32(bytes(body)))


def build_section(e: Enhancement, *, version=1, mode=None, stored=None, n_inputs=None, names=None, count=None,
                  scales=None, params_blob=None, fallback_count=None, fallback_blob=None, trailing=b"") -> bytes:
    """The section of ``e`` written from the layout of docs/format.md section 7, any field
    overridable (raw values; the CRC is computed)."""
    from strata.entropy import bytecoder

    w = Writer().u8(version).u8(e.mode if mode is None else mode).u8(int(e.stored) if stored is None else stored)
    w.f32(e.psnr_plain).f32(e.psnr_enhanced).varint(e.plain_equivalent_bytes)
    if e.stored:
        w.u8(e.width).u8(len(e.inputs) if n_inputs is None else n_inputs)
        for i, f in enumerate(e.inputs):
            name = names[i] if names is not None else f.name.encode()
            w.blob(name).f32(f.center).f32(f.value_scale).f32(f.detail_scale).u8(f.features)
        w.varint(e.quantized.size if count is None else count)
        w.raw((e.scales if scales is None else np.asarray(scales, np.float32)).astype("<f4").tobytes())
        w.blob(bytecoder.encode(e.quantized.view(np.uint8)) if params_blob is None else params_blob)
        if e.mode == 1:
            w.varint(e.fallback_count if fallback_count is None else fallback_count)
            w.blob(e.fallback_coded if fallback_blob is None else fallback_blob)
    return recrc(w.getvalue() + trailing)


def check_bound(a, y, eb, missing=None):
    """Every valid value within ``eb`` (float64); missing points and +-Inf bit-exact."""
    missing = np.zeros(a.shape, bool) if missing is None else missing
    assert same_bits(y[missing], a[missing])
    valid = ~missing & np.isfinite(a)
    err = np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64))
    assert not err.size or err.max() <= eb, (err.max(), eb)
    inf = ~missing & np.isinf(a)
    assert same_bits(y[inf], a[inf])
    return err


@pytest.fixture(scope="module")
def cache():
    return {}


def stream(cache, key, make):
    if key not in cache:
        cache[key] = make()
    return cache[key]


def enhanced_3d(cache, mode="2x"):
    return stream(cache, ("3d", mode), lambda: forced(waves(SHAPES[3]), mode))


def enhanced_4d(cache):
    return stream(cache, ("4d", "2x"), lambda: forced(waves(SHAPES[4], seed=4)))


# ---------------------------------------------------------------------------- the bounds
@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["1x", "2x"])
def test_bound_and_plain_decode(ndim, dtype, mode):
    a = waves(SHAPES[ndim], seed=ndim, dtype=dtype)
    blob = forced(a, mode)
    plain = strata.compress(a, rel_error=REL)
    with strata.open(blob) as r:
        e = r.enhancement
        eb = r.error_bound
        assert e.stored and e.mode_name == mode
        assert r.guaranteed_error == (2 * eb if mode == "2x" else eb)
        y = r.read()
        y_plain = r.read(enhance=False)
        fb = e.fallback(a.shape)
    assert y.dtype == a.dtype and y.shape == a.shape
    check_bound(a, y, 2 * eb if mode == "2x" else eb)
    # the plain decode is the plain stream's, bit for bit: the stream is the plain one plus a section
    assert split(blob)[0] == plain
    assert same_bits(y_plain, strata.decompress(plain))
    assert same_bits(strata.decompress(blob, enhance=False), y_plain)
    assert not np.array_equal(y, y_plain)  # the network changed something
    assert np.abs(y.astype(np.float64) - y_plain).max() <= eb  # the correction is at most eb
    if mode == "1x" and fb is not None:
        fb = fb.reshape(a.shape)
        assert e.fallback_count == int(fb.sum())
        assert same_bits(y[fb], y_plain[fb])


def test_network_is_stored_when_it_pays():
    """Not forced: the encoder keeps the network (it pays on this field at rel 1e-2: up to 1 radian
    a point, where interpolation leaves structure for the network; on the smoother default
    waves multi-dimensional interpolation leaves too little since it joined the tuner), the
    stream is smaller than the plain stream of the same PSNR it estimated, and the enhanced
    decode has the better PSNR, as recorded."""
    a = waves((24, 40, 48), fmax=1.0)
    with training_threads():
        blob = strata.compress(a, rel_error=REL, enhance="2x", enhance_options=PAYS)
    with strata.open(blob) as r:
        e = r.enhancement
        assert e.stored, e
        y, y_plain = r.read(), r.read(enhance=False)
        eb = r.error_bound
    p_enh, p_plain = metrics.psnr(a, y), metrics.psnr(a, y_plain)
    assert p_enh >= p_plain
    assert p_plain == pytest.approx(e.psnr_plain, abs=1e-3) and p_enh == pytest.approx(e.psnr_enhanced, abs=1e-3)
    assert len(blob) < e.plain_equivalent_bytes
    check_bound(a, y, 2 * eb)


# ---------------------------------------------------------------------------- determinism
def test_decoding_is_the_same_on_one_thread_and_on_all(cache):
    for blob in (enhanced_3d(cache), enhanced_4d(cache), enhanced_3d(cache, "1x")):
        many = strata.decompress(blob)
        region = (slice(1, 3), slice(2, 17))
        many_region = strata.decompress(blob, region=region)
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            one = strata.decompress(blob)
            one_region = strata.decompress(blob, region=region)
        finally:
            numba.set_num_threads(before)
        assert same_bits(one, many) and same_bits(one_region, many_region)


def test_compressing_twice_gives_the_same_stream():
    a = waves((8, 24, 32), seed=9)
    with stored_always():
        first = strata.compress(a, rel_error=REL, enhance="1x", enhance_options=OPTS)
        second = strata.compress(a, rel_error=REL, enhance="1x", enhance_options=OPTS)
    assert first == second
    fields = {"u": a, "v": waves((8, 24, 32), seed=10)}
    with stored_always():
        assert compress_fields(fields, rel_error=REL, options=OPTS) == compress_fields(fields, rel_error=REL,
                                                                                        options=OPTS)


def test_decoding_needs_no_torch_and_one_thread_agrees(cache, tmp_path):
    """A process that cannot import torch, with numba on one thread, decodes an enhanced stream
    (and a field set) to the same bytes as this one."""
    blob = enhanced_4d(cache)
    path = tmp_path / "e.strata"
    path.write_bytes(blob)
    fields = stream(cache, "fields2", lambda: _fields_set(2, True))
    fpath = tmp_path / "f.strata"
    fpath.write_bytes(fields)
    prog = textwrap.dedent(f"""
        import hashlib, sys
        sys.modules["torch"] = None  # import torch raises ImportError
        import strata, strata.enhance
        try:
            import torch
        except ImportError:
            pass
        else:
            raise SystemExit("torch importable")
        y = strata.decompress({str(path)!r})
        print(hashlib.sha256(y.tobytes()).hexdigest())
        out = strata.enhance.decompress_fields({str(fpath)!r})
        print(hashlib.sha256(b"".join(v.tobytes() for v in out.values())).hexdigest())
        print("torch" in sys.modules and sys.modules["torch"] is None)
    """)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "src"))
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.split()
    assert lines[0] == hashlib.sha256(strata.decompress(blob).tobytes()).hexdigest()
    out = decompress_fields(fields)
    assert lines[1] == hashlib.sha256(b"".join(v.tobytes() for v in out.values())).hexdigest()
    assert lines[2] == "True"


TINY = EnhanceOptions(steps=3, batch_points=500, progress=False)


@settings(max_examples=30)
@given(shape=st.sampled_from([(5, 1, 40), (1, 1, 50), (1, 30), (30, 1), (3, 2, 2), (2, 7, 1, 9), (40,), (1,), (2, 2),
                              (6, 9, 11), (4, 3, 1, 1, 8)]),
       dtype=st.sampled_from([np.float32, np.float64]), scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e6, 1e30]),
       rel=st.sampled_from([1e-1, 1e-2, 1e-5, 1e-7]), mode=st.sampled_from(["1x", "2x"]),
       seed=st.integers(0, 2**16), nan=st.booleans(), inf=st.booleans())
def test_bound_on_odd_shapes_and_magnitudes(shape, dtype, scale, rel, mode, seed, nan, inf):
    """Any shape (axes of 1, 5-D), any magnitude: the bound holds (with any network: a barely
    trained one here), regions equal the full read."""
    rng = np.random.default_rng(seed)
    a = (np.cumsum(rng.standard_normal(shape), axis=-1) * scale + rng.choice([0.0, 1e3, -1e7]) * scale).astype(dtype)
    if nan:
        a.reshape(-1)[rng.integers(a.size)] = np.nan
    if inf:
        a.reshape(-1)[rng.integers(a.size)] = np.inf
    with stored_always():
        blob = strata.compress(a, rel_error=rel, enhance=mode, enhance_options=TINY)
    with strata.open(blob) as r:
        y = r.read()
        assert r.guaranteed_error == r.error_bound * (2 if mode == "2x" and r.enhancement.stored else 1)
        check_bound(a, y, r.guaranteed_error, np.isnan(a))
    region = tuple(slice(n // 3, max(1, n // 2) + 1) for n in shape)
    assert same_bits(strata.decompress(blob, region=region), y[region])


def test_missing_values_beside_huge_values_round_trip():
    """The first point's prediction (the mean of the valid values when some are missing) must
    not overflow: 40 values of 1e307 and a NaN make a stream the reader refuses ("invalid
    prediction of the first point") -- strata.lossy, plain or enhanced."""
    a = np.full(40, 1e307)
    a[12] = np.nan
    y = strata.decompress(strata.compress(a, rel_error=1e-5))
    assert same_bits(y[np.isnan(a)], a[np.isnan(a)]) and np.array_equal(y[~np.isnan(a)], a[~np.isnan(a)])
    b = waves((6, 20, 24), dtype=np.float64) * 1e306 + 1e307
    b[1, 2, 3] = np.nan
    with strata.open(forced(b)) as r:
        check_bound(b, r.read(), r.guaranteed_error, np.isnan(b))


# ---------------------------------------------------------------------------- regions and previews
REGIONS = [
    (slice(0, 1),), (slice(-1, None),), (5,), (-1, slice(None), 0), (slice(2, 9), slice(11, 23), slice(17, 31)),
    (slice(None, None, 2), slice(1, None, 3), slice(None, None, -1)), (slice(3, 7), 29, slice(0, 40, 7)),
    (slice(0, 12), slice(0, 5)), (slice(0, 12), slice(25, 30), slice(35, 40)), (slice(5, 6), slice(6, 5)),
]
REGIONS_4D = [
    (1,), (slice(1, 3), slice(2, 4)), (slice(0, 2), slice(3, 4), slice(0, 2)), (2, 3, slice(18, 20), slice(28, 30)),
    (slice(None), 0, slice(4, 15), slice(None, None, 4)), (0, slice(1, 4), 19), (slice(None, None, -1), slice(None, 3)),
]


@pytest.mark.parametrize("region", REGIONS)
def test_region_of_an_enhanced_stream_3d(cache, region):
    for mode in ("2x", "1x"):
        blob = enhanced_3d(cache, mode)
        full = strata.decompress(blob)
        assert same_bits(strata.decompress(blob, region=region), full[region])


@pytest.mark.parametrize("region", REGIONS_4D)
def test_region_of_an_enhanced_stream_4d(cache, region):
    """Leading axes merge into the internal axis 0: regions across its slice boundaries."""
    blob = enhanced_4d(cache)
    full = strata.decompress(blob)
    assert same_bits(strata.decompress(blob, region=region), full[region])


def _index(n):
    def one(draw):
        kind = draw(st.sampled_from(["int", "slice", "full"]))
        if kind == "int":
            return draw(st.integers(-n, n - 1))
        if kind == "full":
            return slice(None)
        return slice(draw(st.integers(-n - 2, n + 2)), draw(st.integers(-n - 2, n + 2)),
                     draw(st.sampled_from([None, 1, 2, 3, -1, -2])))
    return st.composite(lambda draw: one(draw))()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_regions_equal_the_full_read(cache, data):
    which = data.draw(st.sampled_from(["3d", "4d"]))
    blob = enhanced_3d(cache) if which == "3d" else enhanced_4d(cache)
    shape = SHAPES[3] if which == "3d" else SHAPES[4]
    k = data.draw(st.integers(1, len(shape)))
    region = tuple(data.draw(_index(n)) for n in shape[:k])
    full = stream(cache, ("full", which), lambda: strata.decompress(blob))
    with strata.open(blob) as r:
        got = r.read(region=region, masked=True)
    assert same_bits(got.data, full[region])
    assert not np.ma.getmaskarray(got).any()


def test_previews_are_the_plain_streams(cache):
    a = waves(SHAPES[3])
    plain = strata.compress(a, rel_error=REL)
    for mode in ("2x", "1x"):
        blob = enhanced_3d(cache, mode)
        with strata.open(blob) as r, strata.open(plain) as p:
            last = len(r.levels) - 1
            assert last >= 1
            for k in range(last):
                assert same_bits(strata.decompress(blob, level=k), strata.decompress(plain, level=k))
                assert same_bits(r.read(level=k, full_resolution=False), p.read(level=k, full_resolution=False))
            # the last level's grid is the plain data; a full-resolution read of it is enhanced
            assert same_bits(r.read(level=last, full_resolution=False), p.read())
            assert same_bits(strata.decompress(blob, level=last), strata.decompress(blob))


# ---------------------------------------------------------------------------- missing values
def _with_missing(dtype):
    a = waves(SHAPES[3], seed=7, dtype=dtype)
    miss = np.zeros(a.shape, bool)
    a[2:5, 3:12, 4:20] = np.nan
    miss[2:5, 3:12, 4:20] = True
    payload = np.array([0x7FC12345], np.uint32).view(np.float32)[0] if dtype == np.float32 else \
        np.array([0x7FF8000000000ABC], np.uint64).view(np.float64)[0]
    a[0, 0, 0] = payload
    miss[0, 0, 0] = True
    a[7, 10, 10] = np.inf
    a[8, 29, 39] = -np.inf
    return a, miss


@pytest.mark.parametrize("kind", ["nan", "fill", "mask", "ma"])
@pytest.mark.parametrize("mode", ["1x", "2x"])
def test_missing_values_keep_their_bits(kind, mode):
    dtype = np.float64 if kind in ("fill", "ma") else np.float32
    a, miss = _with_missing(dtype)
    kw = {}
    if kind == "fill":
        a[9:12, 20:30, 30:40] = -999.0
        miss[9:12, 20:30, 30:40] = True
        kw["fill_value"] = -999.0
    elif kind == "mask":
        land = np.zeros(a.shape[1:], bool)
        land[15:25, 0:8] = True
        a[:, land] = 12345.0  # (values under the mask: kept bit for bit)
        miss |= land
        kw["mask"] = land  # broadcast along axis 0
    data = np.ma.MaskedArray(a, mask=miss) if kind == "ma" else a
    blob = forced(data, mode, **kw)
    with strata.open(blob) as r:
        assert r.enhancement.stored
        assert r.missing_count == int(miss.sum())
        y = r.read(masked=True)
        eb = r.error_bound
        y_plain = r.read(enhance=False)
    assert np.array_equal(np.ma.getmaskarray(y), miss)
    check_bound(a, y.data, 2 * eb if mode == "2x" else eb, miss)
    assert not np.array_equal(y.data[~miss & np.isfinite(a)], y_plain[~miss & np.isfinite(a)])
    # a region through the missing block and the infinities
    region = (slice(1, 9), slice(2, 14), slice(3, 22))
    assert same_bits(strata.decompress(blob, region=region), y.data[region])


# ---------------------------------------------------------------------------- never worse
@pytest.mark.parametrize("mode", ["1x", "2x"])
def test_a_network_that_cannot_pay_is_not_stored(mode, tmp_path):
    a = np.random.default_rng(3).standard_normal((40, 40)).astype(np.float32)
    with training_threads():
        blob = strata.compress(a, rel_error=1e-3, enhance=mode, enhance_options=OPTS)
    plain = strata.compress(a, rel_error=1e-3)
    with strata.open(blob) as r:
        e = r.enhancement
        assert e is not None and e.stored is False and e.mode_name == mode
        assert r.guaranteed_error == r.error_bound
    assert split(blob)[0] == plain
    y = strata.decompress(blob)
    assert same_bits(y, strata.decompress(plain)) and same_bits(y, strata.decompress(blob, enhance=False))
    assert same_bits(strata.decompress(blob, region=(slice(3, 9), 7)), y[3:9, 7])


def _info(path) -> list[str]:
    from click.testing import CliRunner

    from strata.cli import main

    res = CliRunner().invoke(main, ["info", str(path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return [line for line in res.output.splitlines() if "enhancement" in line]


def test_cli_info_shows_the_enhancement(cache, tmp_path):
    a = np.random.default_rng(3).standard_normal((40, 40)).astype(np.float32)
    declined = tmp_path / "declined.strata"
    with training_threads():
        declined.write_bytes(strata.compress(a, rel_error=1e-3, enhance="2x", enhance_options=OPTS))
    lines = _info(declined)
    assert lines and any("2x" in line and "not stored" in line for line in lines), lines
    stored = tmp_path / "stored.strata"
    stored.write_bytes(enhanced_3d(cache))
    lines = _info(stored)
    assert lines and any("2x" in line and "stored" in line and "not stored" not in line for line in lines), lines
    one = tmp_path / "one.strata"
    one.write_bytes(enhanced_3d(cache, "1x"))
    assert any("1x" in line and "stored" in line for line in _info(one))
    plain = tmp_path / "plain.strata"
    plain.write_bytes(strata.compress(a, rel_error=1e-3))
    assert not _info(plain)


# ---------------------------------------------------------------------------- field sets
def _fields(n, shape=(8, 24, 32), dtypes=None):
    u = waves(shape, seed=21)
    v = (0.6 * u + 0.4 * waves(shape, seed=22)).astype(np.float32)
    p = (u * v + waves(shape, seed=23, fmax=0.3)).astype(np.float32)
    out = dict(list({"u": u, "v": v, "pressure": p}.items())[:n])
    for name, dt in (dtypes or {}).items():
        out[name] = out[name].astype(dt)
    return out


def _fields_set(n, cross, mode="2x", **kw):
    with stored_always():
        return compress_fields(_fields(n), rel_error=kw.pop("rel_error", REL), enhance=mode, cross_field=cross,
                               options=OPTS, **kw)


@pytest.mark.parametrize("n, cross, mode", [(2, True, "2x"), (3, True, "1x"), (3, False, "2x"), (2, False, "1x")])
def test_fields_round_trip(cache, n, cross, mode):
    fields = _fields(n, dtypes={"v": np.float64})
    bounds = {"u": 0.02, "v": 0.05, "pressure": 0.01}
    with stored_always():
        blob = compress_fields(fields, abs_error={k: bounds[k] for k in fields}, enhance=mode, cross_field=cross,
                               options=OPTS)
    out = decompress_fields(blob)
    plain = decompress_fields(blob, enhance=False)
    assert list(out) == list(fields) == list(plain)
    readers = open_fields(blob)
    for name, a in fields.items():
        r = readers[name]
        e = r.enhancement
        assert e.stored and e.mode_name == mode and r.error_bound == bounds[name]
        assert [f.name for f in e.inputs] == [""] + ([o for o in fields if o != name] if cross else [])
        assert out[name].dtype == a.dtype
        check_bound(a, out[name], (2 if mode == "2x" else 1) * bounds[name])
        assert same_bits(plain[name], strata.decompress(strata.compress(a, abs_error=bounds[name])))
        assert not np.array_equal(out[name], plain[name])
        if not cross:  # a field that reads no other field decodes alone
            assert same_bits(r.read(), out[name])
        r.close()
    for region in [(slice(2, 5), slice(3, 20), 7), (0,), (slice(None, None, -2), slice(20, 24), slice(-6, None))]:
        got = decompress_fields(blob, region=region)
        for name in fields:
            assert same_bits(got[name], out[name][region])


def test_fields_plain_when_enhance_is_none():
    fields = _fields(3)
    blob = compress_fields(fields, rel_error={"u": 1e-2, "v": 1e-3, "pressure": 3e-3}, enhance=None)
    readers = open_fields(blob)
    out = decompress_fields(blob)
    for name, a in fields.items():
        r = readers[name]
        assert r.header.enhance_len == 0 and r.enhancement is None
        rel = {"u": 1e-2, "v": 1e-3, "pressure": 3e-3}[name]
        assert bytes(r._src.read(0, r._src.size)) == strata.compress(a, rel_error=rel)
        assert same_bits(out[name], strata.decompress(strata.compress(a, rel_error=rel)))
        r.close()


def test_fields_with_missing_values():
    fields = _fields(2)
    fields["u"][0:3, 0:10, 0:10] = np.nan
    land = np.zeros(fields["v"].shape, bool)
    land[:, 20:, 25:] = True
    with stored_always():
        blob = compress_fields(fields, rel_error=REL, enhance="2x", masks={"v": land}, fill_values={"u": None},
                               options=OPTS)
    out = decompress_fields(blob)
    readers = open_fields(blob)
    for name, miss in (("u", np.isnan(fields["u"])), ("v", land)):
        assert readers[name].enhancement.stored
        check_bound(fields[name], out[name], 2 * readers[name].error_bound, miss)
        readers[name].close()


def test_a_cross_field_stream_alone_needs_its_field_set(cache):
    blob = stream(cache, "fields2", lambda: _fields_set(2, True))
    readers = open_fields(blob)
    r = readers["u"]
    with pytest.raises(InvalidInputError, match="decompress_fields"):
        r.read()
    with pytest.raises(InvalidInputError):
        r.read(region=(slice(0, 2),))
    assert same_bits(r.read(enhance=False), decompress_fields(blob, enhance=False)["u"])
    # the same stream copied out of the set, read by strata.decompress
    raw = bytes(r._src.read(0, r._src.size))
    with pytest.raises(InvalidInputError):
        strata.decompress(raw)
    assert same_bits(strata.decompress(raw, enhance=False), r.read(enhance=False))
    for x in readers.values():
        x.close()
    # a set missing a field another one reads
    with pytest.raises(StrataError):
        decompress_fields(pack_fields(["u"], [raw]))


def test_field_set_is_not_a_lossy_stream(cache):
    blob = stream(cache, "fields2", lambda: _fields_set(2, True))
    with pytest.raises(FormatError, match="decompress_fields"):
        strata.decompress(blob)
    with pytest.raises(FormatError, match="decompress_fields"):
        strata.open(blob)
    with pytest.raises(FormatError):
        decompress_fields(strata.compress(waves((20, 20)), rel_error=REL))


# ---------------------------------------------------------------------------- bad input
def test_bad_fields_are_refused():
    a, b = waves((10, 12)), waves((10, 13))
    with pytest.raises(InvalidInputError):
        compress_fields({"a": a, "b": b}, rel_error=REL, enhance=None)
    for bad in ({}, [], None, [("a", a)]):
        with pytest.raises(InvalidInputError):
            compress_fields(bad, rel_error=REL, enhance=None)
    for name in (1, "", "x" * 256, b"a", None):
        with pytest.raises(InvalidInputError):
            compress_fields({name: a}, rel_error=REL, enhance=None)
    with pytest.raises(InvalidInputError):
        compress_fields({"a": a, "b": a}, rel_error={"a": REL}, enhance=None)
    with pytest.raises(InvalidInputError):
        compress_fields({"a": a}, rel_error=REL, abs_error=0.1, enhance=None)
    with pytest.raises(UnsupportedDtypeError):
        compress_fields({"a": np.arange(10)}, rel_error=REL, enhance=None)


@pytest.mark.parametrize("mode", ["3x", "1X", "", " 2x", 2, 1, True, b"2x", 2.0, ["2x"]])
def test_bad_modes_are_refused(mode):
    a = waves((10, 12))
    with pytest.raises(InvalidInputError):
        strata.compress(a, rel_error=REL, enhance=mode)
    with pytest.raises(InvalidInputError):
        strata.enhance.compress(a, rel_error=REL, enhance=mode)
    with pytest.raises(InvalidInputError):
        compress_fields({"a": a}, rel_error=REL, enhance=mode)


@pytest.mark.parametrize("kw", [dict(steps=0), dict(steps=1.5), dict(batch_points=0),
                                dict(steps=-1), dict(patch=0), dict(width=0), dict(width=65), dict(width=4.0),
                                dict(slice_share=0.0), dict(slice_share=1.5), dict(slice_share=math.nan),
                                dict(learning_rate=0.0), dict(learning_rate=-1e-3), dict(learning_rate=math.inf),
                                dict(learning_rate=math.nan)])
def test_bad_options_are_refused(kw):
    with pytest.raises(InvalidInputError):
        EnhanceOptions(**kw)


@pytest.mark.parametrize("kw", [dict(learning_rate="0.1"), dict(slice_share="all"), dict(steps="30")])
def test_options_of_the_wrong_type_are_refused(kw):
    """Options of the wrong type: InvalidInputError, not a TypeError from a comparison."""
    with pytest.raises(InvalidInputError):
        EnhanceOptions(**kw)


def test_options_must_be_enhance_options():
    a = waves((10, 12))
    with pytest.raises(InvalidInputError):
        strata.compress(a, rel_error=REL, enhance_options=OPTS)  # without enhance
    for bad in ({"steps": 5}, "fast", 30):
        with pytest.raises(InvalidInputError):
            strata.compress(a, rel_error=REL, enhance="2x", enhance_options=bad)
        with pytest.raises(InvalidInputError):
            compress_fields({"a": a}, rel_error=REL, options=bad)


def test_missing_torch_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    a = waves((10, 12))
    for call in (lambda: strata.compress(a, rel_error=REL, enhance="2x"),
                 lambda: strata.enhance.compress(a, rel_error=REL, enhance="1x"),
                 lambda: compress_fields({"a": a, "b": a}, rel_error=REL, enhance="2x")):
        with pytest.raises(MissingDependencyError, match=r"strata\[torch\]") as info:
            call()
        assert isinstance(info.value, ImportError)
    # plain field sets and every decode need no torch
    blob = compress_fields({"a": a, "b": a}, rel_error=REL, enhance=None)
    assert list(decompress_fields(blob)) == ["a", "b"]


# ---------------------------------------------------------------------------- damaged sections
def test_flipped_section_bytes_are_caught_by_the_crc(cache):
    for mode in ("2x", "1x"):
        blob = enhanced_3d(cache, mode)
        plain, sec = split(blob)
        y_plain = strata.decompress(plain)
        for i in range(len(sec)):
            bad = bytearray(sec)
            bad[i] ^= 1 << (i % 8)
            data = with_section(blob, bytes(bad))
            with pytest.raises(CorruptStreamError, match="checksum"):
                strata.decompress(data)
            with pytest.raises(CorruptStreamError, match="checksum"):
                strata.open(data).enhancement  # noqa: B018
            if i % 16 == 0:  # previews and plain decodes never read the section
                assert same_bits(strata.decompress(data, enhance=False), y_plain)
                assert same_bits(strata.decompress(data, level=0), strata.decompress(plain, level=0))


def test_truncated_enhanced_streams_are_refused(cache):
    blob = enhanced_3d(cache, "1x")
    _, sec = split(blob)
    for cut in sorted({1, 2, 4, 5, len(sec) // 2, len(sec) - 1, len(sec)}):
        with pytest.raises(TruncatedStreamError):
            strata.decompress(blob[:-cut])
    with pytest.raises(CorruptStreamError):
        strata.decompress(with_section(blob, b"\x01\x02\x03"))
    # extension bit 3 with a length of 0 (the writer leaves the length out at 0: set by hand)
    plain, sec = split(blob)
    raw, off = unpack_header(Source(plain), KIND_LOSSY)
    h = LossyHeader.from_bytes(raw, len(plain))
    h.enhance_len = 1
    body = bytearray(h.to_bytes())
    h.enhance_len = 2
    i = next(k for k, (x, y) in enumerate(zip(body, h.to_bytes())) if x != y)  # (the length's byte)
    assert body[i] == 1
    body[i] = 0
    with pytest.raises(CorruptStreamError, match="empty enhancement"):
        strata.decompress(pack(KIND_LOSSY, bytes(body), [plain[off:]]))


def _sections(cache):
    out = {}
    for mode in ("2x", "1x"):
        blob = enhanced_3d(cache, mode)
        sec = split(blob)[1]
        out[mode] = (blob, Enhancement.from_bytes(sec, math.prod(SHAPES[3])), sec)
    return out


def test_section_builder_follows_the_documented_layout(cache):
    for _blob, e, sec in _sections(cache).values():
        assert build_section(e) == sec == e.to_bytes()
    assert _sections(cache)["1x"][1].fallback_count > 0


def _corrupt(blob, section, match=None):
    data = with_section(blob, section)
    with pytest.raises(CorruptStreamError, match=match):
        strata.decompress(data)
    with pytest.raises(CorruptStreamError, match=match):
        with strata.open(data) as r:
            _ = r.enhancement
            r.read()


def test_crafted_sections_are_refused(cache):
    s = _sections(cache)
    blob2, e2, _ = s["2x"]
    blob1, e1, _ = s["1x"]
    for blob, e in ((blob2, e2), (blob1, e1)):
        _corrupt(blob, build_section(e, version=0), "version")
        _corrupt(blob, build_section(e, version=2), "version")
        for mode in (0, 3, 255):
            _corrupt(blob, build_section(e, mode=mode), "mode")
        _corrupt(blob, build_section(e, stored=2))
        _corrupt(blob, build_section(dataclasses.replace(e, width=0)), "network")
        _corrupt(blob, build_section(dataclasses.replace(e, width=65)), "network")
        _corrupt(blob, build_section(e, n_inputs=0))
        _corrupt(blob, build_section(e, n_inputs=2))  # one input listed
        _corrupt(blob, build_section(e, count=e.quantized.size - 1), "parameters")
        _corrupt(blob, build_section(e, count=e.quantized.size + 1), "parameters")
        _corrupt(blob, build_section(e, count=1 << 40))
        for bad in (np.inf, -np.inf, np.nan, -1.0):
            scales = e.scales.copy()
            scales[3] = bad
            _corrupt(blob, build_section(e, scales=scales), "non-finite")
        _corrupt(blob, build_section(e, names=[b"\xff\xfe"]), "UTF-8")
        _corrupt(blob, build_section(e, names=[b"other"]), "first")
        for features in (0, 16):
            inputs = [dataclasses.replace(e.inputs[0], features=features)]
            _corrupt(blob, build_section(dataclasses.replace(e, inputs=inputs)))
        inputs = [dataclasses.replace(e.inputs[0], center=math.inf)]
        _corrupt(blob, build_section(dataclasses.replace(e, inputs=inputs)))
        _corrupt(blob, build_section(e, trailing=b"\x00"), "trailing")
        _corrupt(blob, build_section(e, params_blob=b""))
        _corrupt(blob, build_section(e, params_blob=b"\x00" + bytes(e.quantized.size - 1)))  # raw, one short
        _corrupt(blob, build_section(e, params_blob=b"\x07\x00"))  # unknown byte-plane model
        # a second input that is the field itself (name "")
        two = [e.inputs[0], dataclasses.replace(e.inputs[0], features=3)]
        e_two = dataclasses.replace(e, inputs=two)
        e_two.set_params(np.zeros(network.weight_count(e_two.channels, e.width), np.float32))
        _corrupt(blob, build_section(e_two), "first")
    # 1x: the fallback count and its bitmap must agree
    n = e1.fallback_count
    _corrupt(blob1, build_section(e1, fallback_count=n + 1), "fallback")
    _corrupt(blob1, build_section(e1, fallback_count=n - 1), "fallback")
    _corrupt(blob1, build_section(e1, fallback_count=math.prod(SHAPES[3]) + 1))
    _corrupt(blob1, build_section(e1, fallback_blob=b""), "fallback")
    size = math.prod(SHAPES[3])
    from strata.entropy import bytecoder

    ones = np.packbits(np.ones(size + 5, bool), bitorder="little")  # padding bits set
    _corrupt(blob1, build_section(e1, fallback_count=size + 5, fallback_blob=bytecoder.encode(ones)))


def test_fallback_count_zero_with_no_bitmap_decodes(cache):
    """A 1x section listing no fallback point is valid (the values then within 2 eb only: the
    encoder would have listed the points that break eb)."""
    blob1, e1, _ = _sections(cache)["1x"]
    data = with_section(blob1, build_section(dataclasses.replace(e1, fallback_count=0, fallback_coded=b"")))
    a = waves(SHAPES[3])
    with strata.open(data) as r:
        check_bound(a, r.read(), 2 * r.error_bound)


def test_weights_that_overflow_float32_are_refused(cache):
    """Finite scales whose products with the 8-bit weights overflow float32 (3e38 x 127): the
    section promises that weights decoding to non-finite values are refused."""
    blob, e, _ = _sections(cache)["2x"]
    scales = e.scales.copy()
    scales[:] = np.float32(3e38)
    q = e.quantized.copy()
    q[:] = 127
    hostile = dataclasses.replace(e, scales=scales, quantized=q)
    assert not np.isfinite(hostile.params).all()
    _corrupt(blob, build_section(hostile), "non-finite")


def test_hostile_finite_weights_keep_the_2x_bound(cache):
    """Huge (finite) weights and inputs scales: the network's output overflows to inf or NaN; the
    regulation keeps every value within twice the bound (here: the plain value or a clipped
    correction)."""
    blob, e, _ = _sections(cache)["2x"]
    a = waves(SHAPES[3])
    rng = np.random.default_rng(0)
    for scale in (1e30, 1e-30, 1.0):
        scales = np.full(network.N_TENSORS, scale, np.float32)
        q = rng.integers(-127, 128, e.quantized.size).astype(np.int8)
        inputs = [dataclasses.replace(e.inputs[0], value_scale=1e38, detail_scale=-1e38)]
        for h in (dataclasses.replace(e, scales=scales, quantized=q),
                  dataclasses.replace(e, scales=scales, quantized=q, inputs=inputs)):
            data = with_section(blob, build_section(h))
            with strata.open(data) as r:
                y = r.read()
                check_bound(a, y, 2 * r.error_bound)
                assert same_bits(r.read(region=(slice(3, 5),)), y[3:5])


# ---------------------------------------------------------------------------- damaged field sets
def test_damaged_field_sets_are_refused(cache):
    blob = stream(cache, "fields2", lambda: _fields_set(2, True))
    readers = open_fields(blob)
    streams = {n: bytes(r._src.read(0, r._src.size)) for n, r in readers.items()}
    for r in readers.values():
        r.close()
    u, v = streams["u"], streams["v"]
    for cut in range(0, len(blob), max(1, len(blob) // 97)):
        with pytest.raises(StrataError):
            decompress_fields(blob[:cut])
    with pytest.raises(CorruptStreamError, match="repeated"):
        decompress_fields(pack_fields(["u", "u"], [u, v]))
    with pytest.raises(CorruptStreamError):
        decompress_fields(pack_fields(["u", ""], [u, v]))

    def raw_set(entries, body):
        w = Writer().varint(len(entries) if not isinstance(entries, tuple) else entries[0])
        for name, length in (entries if not isinstance(entries, tuple) else entries[1]):
            w.blob(name).varint(length)
        return pack(KIND_FIELDS, w.getvalue(), [body])

    with pytest.raises(TruncatedStreamError):
        decompress_fields(raw_set([(b"u", len(u)), (b"v", len(v) + 1)], u + v))
    with pytest.raises((TruncatedStreamError, CorruptStreamError)):
        decompress_fields(raw_set([(b"u", 1 << 40)], u))
    with pytest.raises(CorruptStreamError):
        decompress_fields(raw_set((3, [(b"u", len(u)), (b"v", len(v))]), u + v))  # count beyond the entries
    with pytest.raises(CorruptStreamError):
        decompress_fields(raw_set((1025, []), b""))
    with pytest.raises(CorruptStreamError, match="UTF-8"):
        decompress_fields(raw_set([(b"\xff", len(u))], u))
    with pytest.raises(CorruptStreamError):  # a name over 255 bytes
        decompress_fields(raw_set([(b"x" * 256, len(u))], u))
    with pytest.raises(StrataError):  # lengths that cut the streams elsewhere
        decompress_fields(raw_set([(b"u", len(u) - 7), (b"v", len(v) + 7)], u + v))
    with pytest.raises(FormatError):  # a stream that is not a lossy stream
        decompress_fields(raw_set([(b"u", len(u)), (b"v", 20)], u + b"\x00" * 20))
    with pytest.raises(FormatError):  # a field set inside a field set
        decompress_fields(raw_set([(b"u", len(blob))], blob))
    # the streams swapped under their names: decodes (each network reads the other plainly)
    out = decompress_fields(pack_fields(["u", "v"], [v, u]))
    assert set(out) == {"u", "v"}
    # a header with trailing bytes
    w = Writer().varint(1).blob(b"u").varint(len(u)).u8(0)
    with pytest.raises(CorruptStreamError):
        decompress_fields(pack(KIND_FIELDS, w.getvalue(), [u]))


def test_fields_of_other_shapes_in_one_set():
    """A set whose cross-field input has another shape: refused or decoded, never another error."""
    with stored_always():
        small = compress_fields({"a": waves((6, 20, 24)), "b": waves((6, 20, 24), seed=2)}, rel_error=REL,
                                options=OPTS)
        big = compress_fields({"a": waves((8, 24, 32)), "b": waves((8, 24, 32), seed=2)}, rel_error=REL,
                              options=OPTS)
    rs, rb = open_fields(small), open_fields(big)
    a_small = bytes(rs["a"]._src.read(0, rs["a"]._src.size))
    b_big = bytes(rb["b"]._src.read(0, rb["b"]._src.size))
    for r in (*rs.values(), *rb.values()):
        r.close()
    with pytest.raises(StrataError):  # "b" reads "a" beyond a's shape
        decompress_fields(pack_fields(["a", "b"], [a_small, b_big]))



# ---------------------------------------------------------------------------- warnings and memory
def test_infinities_raise_no_runtime_warning():
    """+-Inf and NaN in the data: the plain codec is silent, so is the enhanced one (the
    regulation and the training targets subtract inf - inf where the points are not used)."""
    import warnings

    a = waves((8, 20, 24))
    a[2, 3, 4], a[5, 6, 7], a[3, 3, 3] = np.inf, -np.inf, np.nan
    blob = forced(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        strata.decompress(blob)
        strata.decompress(blob, region=(slice(1, 4),))
        forced(a, "1x")


def _peak(call) -> int:
    """Peak bytes numpy allocated during ``call()`` (tracemalloc; numba's own allocations are not
    counted)."""
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_max_output_bytes_bounds_an_enhanced_read():
    """``max_output_bytes`` promises ResourceLimitError before a read allocates more: an enhanced
    read must count the network's working arrays (inputs stacked as float32, the prediction,
    the float64 regulation), not only the plain decode's."""
    from strata.errors import ResourceLimitError

    a = waves((8, 64, 64), seed=31)
    blob = forced(a)
    limit = 16 * a.size  # the plain read needs about 9.4 bytes a value
    strata.decompress(blob, enhance=False, max_output_bytes=limit)
    strata.decompress(blob)  # (warm)
    try:
        peak = _peak(lambda: strata.decompress(blob, max_output_bytes=limit))
    except ResourceLimitError:
        return
    assert peak <= limit, f"read allocated {peak / a.size:.1f} bytes a value under a limit of {limit / a.size:.0f}"


def test_region_read_of_a_1x_stream_does_not_decode_the_whole_fallback_mask():
    """A region read holds about the region in memory; a 1x stream's fallback bitmap is decoded
    whole (``Enhancement.fallback(size)``: a bool per value of the array) for any region."""
    a = waves((8, 256, 256), seed=32)
    one, two = forced(a, "1x"), forced(a, "2x")
    assert strata.open(one).enhancement.fallback_count > 0
    region = (slice(3, 5), slice(100, 110), slice(100, 110))
    for blob in (one, two):
        strata.decompress(blob, region=region)  # (warm)
    p1 = _peak(lambda: strata.decompress(one, region=region))
    p2 = _peak(lambda: strata.decompress(two, region=region))
    n = a.size
    assert p1 <= p2 + n // 16, (p1, p2, n)


def test_a_field_set_decodes_each_field_plainly_once(cache, monkeypatch):
    """decompress_fields "decodes the fields plainly first, then enhances them": each field's
    plain decode should serve its own network and the others' (not F + F (F - 1) decodes)."""
    from strata.lossy import reader

    blob = stream(cache, "fields3", lambda: _fields_set(3, True))
    calls = []
    for name in ("_read_whole", "_read_window"):
        orig = getattr(reader.LossyReader, name)

        def counted(self, *args, _orig=orig, **kwargs):
            calls.append(self.shape)
            return _orig(self, *args, **kwargs)

        monkeypatch.setattr(reader.LossyReader, name, counted)
    decompress_fields(blob)
    assert len(calls) <= 3, f"{len(calls)} plain decodes for 3 fields"
    calls.clear()
    decompress_fields(blob, region=(slice(1, 3), slice(5, 9)))
    assert len(calls) <= 3, f"{len(calls)} plain decodes of a region of 3 fields"


def _whole_slice_inference(e, blocks, eb, fallback=None):
    """The enhancement as it ran before tiles (the reference): the network on every whole slice
    of the stacked inputs, then the regulation of the whole block."""
    from strata.enhance import apply, regulate

    values, miss = blocks[0]
    fields = apply.stack_inputs(blocks, [f.center for f in e.inputs])
    weights = tuple(network.unpack(np.ascontiguousarray(e.params, np.float32), e.channels, e.width))
    r = np.empty(fields.shape[1:], np.float32)
    network._predict_slices(fields, e.spec(), weights, r, 0, fields.shape[1])
    out = regulate.corrected(values, r, eb, ~miss & np.isfinite(values))
    if fallback is not None:
        np.copyto(out, values, where=fallback)
    return out


def test_tiles_give_the_values_of_whole_slices(cache):
    """The network runs in tiles with its receptive field's halo (bounded working memory): the
    values are those of whole slices, bit for bit, for any tile edge and number of threads; a
    trained 1x network (fallback points) and a random one on slices larger than a tile."""
    from strata.enhance import apply

    rng = np.random.default_rng(40)
    a = waves((3, 97, 110), seed=41)
    a[1, 10:20, 30:35] = np.nan
    e = Enhancement(2, True, 30.0, 31.0, 10 ** 6, 8, [strata.enhance.section.InputField("", float(a[0, 0, 0]), 0.3,
                                                                                         2.0, 15)])
    e.set_params(rng.standard_normal(network.weight_count(e.channels, e.width)).astype(np.float32) * 0.4)
    random_net = lossy_codec.with_enhancement(strata.compress(a, rel_error=REL), e.to_bytes())
    for blob in (random_net, enhanced_3d(cache, "1x")):
        r = strata.open(blob)
        x, m = r.read_block((0, 0, 0), r._part.shape)
        fb = r.enhancement.fallback(r._part.shape)
        want = _whole_slice_inference(r.enhancement, [(x, m)], r.error_bound, fb)
        for edge in (1, 7, 32, 10 ** 6):
            for threads in (1, 2):
                before = numba.get_num_threads()
                numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
                try:
                    got = apply.enhance_block(r.enhancement, [(x, m)], r.error_bound, fb, edge)
                finally:
                    numba.set_num_threads(before)
                assert same_bits(got, want), (edge, threads)
        assert same_bits(r.read().reshape(r._part.shape), want)


def test_an_enhanced_read_holds_what_it_accounts_for():
    """The network's working memory was not counted against max_output_bytes: a 512^2 field with
    a network of width 16 read under a 24 MB limit (about 14 MB counted: the plain read and 40
    bytes a value) held about 60 MB, four float32 feature maps of 16 channels over the whole
    slice. The network now runs in tiles sized to the limit's share per thread, counted."""
    from tests import crafted, rss

    blob = crafted.enhanced_zero_stream((512, 512), 16)
    r = strata.open(blob)
    limit = 24_000_000
    strata.open(crafted.enhanced_zero_stream((64, 64), 16)).read()  # (warm)
    added, out = rss.peak_added(lambda: r.read(max_output_bytes=limit))
    assert out.shape == (512, 512) and added <= limit, added
    assert same_bits(out, r.read(max_output_bytes=0))  # (tiles of TILE_BYTES: the same values)
