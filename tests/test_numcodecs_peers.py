"""numcodecs' own codec checks (``numcodecs.tests.common``) applied to strata.numcodecs.Strata:
every memory order and byte order numcodecs hands over, exact at bound 0 and within the bound
otherwise; ``out`` checked before decoding; the errors numcodecs' helpers expect."""
from __future__ import annotations

import array
import importlib.util
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

numcodecs = pytest.importorskip("numcodecs")
common = pytest.importorskip("numcodecs.tests.common")

from strata.errors import CorruptStreamError, InvalidInputError, UnsupportedDtypeError  # noqa: E402
from strata.numcodecs import Strata  # noqa: E402

LAYOUT_FORMAT = "strata.numcodecs/1"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _smooth(shape=(24, 17, 9), dtype=np.float32, seed=0):
    g = np.random.default_rng(seed)
    t = sum(np.linspace(0, 2 + i, n).reshape([-1 if a == i else 1 for a in range(len(shape))])
            for i, n in enumerate(shape))
    return (280 + 5 * np.sin(t) + 0.05 * g.standard_normal(shape)).astype(dtype)


def _layouts(a):
    """``a`` in every layout numcodecs and zarr v2 hand a codec: C, Fortran, big-endian in each
    order, and a non-contiguous view."""
    big = a.dtype.newbyteorder(">")
    return {"C": np.ascontiguousarray(a), "F": np.asfortranarray(a), "C>": a.astype(big, order="C"),
            "F>": a.astype(big, order="F"), "view": a[::2, 1:, ::-1]}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "C>", "F>", "view"])
def test_check_encode_decode_array_exact_at_bound_0(layout, dtype):
    a = _layouts(_smooth(dtype=dtype))[layout]
    a[1, 2, 3] = np.nan
    common.check_encode_decode_array(a, Strata(abs_error=0))
    dec = Strata(abs_error=0).decode(Strata(abs_error=0).encode(a))
    assert dec.dtype == a.dtype and dec.shape == a.shape
    assert dec.flags.f_contiguous == (a.flags.f_contiguous and not a.flags.c_contiguous)


@pytest.mark.parametrize("layout", ["C", "F", "C>", "F>", "view"])
def test_encode_decode_within_the_bound(layout):
    """numcodecs' check_encode_decode paths with strata's bound for a tolerance (its
    ``precision`` is decimal places, looser than the bound): the stream decoded from bytes,
    bytearray, array.array and a uint8 array, into a new array, an ``empty_like`` array and a
    bytearray read in the array's memory order, as ``compare_arrays`` reads it."""
    eb = 0.01
    a = _layouts(_smooth())[layout]
    codec = Strata(abs_error=eb)
    enc = codec.encode(a)
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    dest = np.empty_like(a)
    raw = bytearray(a.nbytes)
    decoded = [codec.decode(enc), codec.decode(bytearray(enc)), codec.decode(array.array("b", enc)),
               codec.decode(np.frombuffer(enc, "u1")), codec.decode(enc, out=dest),
               np.frombuffer(codec.decode(enc, out=raw), a.dtype).reshape(a.shape, order=order)]
    assert decoded[4] is dest
    for dec in decoded:
        assert dec.shape == a.shape and dec.dtype == a.dtype
        assert np.abs(dec.astype(np.float64) - a.astype(np.float64)).max() <= eb
        assert np.array_equal(dec, decoded[0])


def test_check_config_and_repr(monkeypatch):
    for codec in (Strata(abs_error=0.1), Strata(abs_error=0.0, fill_value=-9999.0),
                  Strata.for_array(_smooth(), rel_error=1e-3)):
        common.check_config(codec)
    # check_repr evaluates the statement in its module, which has numcodecs' own codecs only
    monkeypatch.setattr(common, "Strata", Strata, raising=False)
    common.check_repr("Strata(abs_error=0.1)")
    common.check_repr("Strata(abs_error=0.5, fill_value=-9999.0)")
    common.check_repr("Strata(abs_error=0.25, rel_error=0.001, valid_range=[1.0, 251.0])")


def test_check_backwards_compatibility(monkeypatch):
    """Streams written by an earlier strata (tests/golden/make_golden_numcodecs.py) decode with
    numcodecs' helper: exactly (same bytes, dtype and memory order) at bound 0, within the
    lossy codec's precision otherwise."""
    spec = importlib.util.spec_from_file_location("make_golden_numcodecs", GOLDEN / "make_golden_numcodecs.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    fixture = script.HERE / "fixture" / "strata"
    codecs, n = script.codecs(), len(script.arrays())
    expected = {f"array.{i:02d}.npy" for i in range(n)} | {
        f"codec.{j:02d}/{f}" for j in range(len(codecs)) for f in ["config.json"] + [f"encoded.{i:02d}.dat"
                                                                                      for i in range(n)]}
    # every fixture present, so the helper compares rather than writes
    assert {str(p.relative_to(fixture)) for p in fixture.rglob("*") if p.is_file()} == expected
    monkeypatch.chdir(script.HERE)
    common.check_backwards_compatibility("strata", [], codecs, precision=script.PRECISION)


def test_check_err_encode_object_buffer():
    common.check_err_encode_object_buffer(Strata(abs_error=0.1))


def test_object_out_is_refused_with_type_error():
    """numcodecs' check_err_decode_object_buffer, with a float chunk: the helper itself encodes
    np.arange(10), an int64 array the lossy codec refuses by design."""
    enc = Strata(abs_error=0.1).encode(np.arange(10, dtype=np.float32))
    with pytest.raises(TypeError):
        Strata(abs_error=0.1).decode(enc, out=np.empty(10, dtype=object))


def test_encode_takes_what_ensure_ndarray_takes():
    codec = Strata(abs_error=0)
    with pytest.raises(TypeError):                      # numcodecs raises TypeError for a list
        codec.encode([1.0, 2.0, 3.0])
    values = np.array([1.5, -2.25, 3.0], np.float32)
    for buf in (memoryview(values), array.array("f", values.tolist())):
        assert np.array_equal(codec.decode(codec.encode(buf)), values)
    square = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert np.array_equal(codec.decode(codec.encode(memoryview(square))), square)
    for flat in (values.tobytes(), bytearray(values.tobytes()), array.array("b", values.tobytes())):
        with pytest.raises(UnsupportedDtypeError, match="flat bytes"):
            codec.encode(flat)
    with pytest.raises(UnsupportedDtypeError, match="lossless"):
        codec.encode(np.arange(10))
    with pytest.raises(UnsupportedDtypeError):
        codec.encode(np.ones(4, np.float16))


def test_out_is_checked_against_the_header_before_decoding():
    """A small stream of a large chunk: a wrong ``out`` is refused before anything is decoded
    (the decoded chunk would be 2 MiB; the peak stays far below it)."""
    codec = Strata(abs_error=0.1)
    enc = codec.encode(np.zeros((512, 1024), np.float32))
    for out in (np.empty(256, np.float32), np.empty((512, 1024), np.float64), np.empty((512, 1024), np.int32),
                bytearray(1000)):
        tracemalloc.start()
        try:
            with pytest.raises(InvalidInputError, match=r"cannot hold the chunk \(float32, shape \(512, 1024\)\)"):
                codec.decode(enc, out=out)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 256 << 10, peak
    with pytest.raises(InvalidInputError, match="read-only"):
        codec.decode(enc, out=np.frombuffer(bytes(512 * 1024 * 4), np.float32))
    with pytest.raises(InvalidInputError, match="not contiguous"):
        codec.decode(enc, out=np.empty(512 * 1024 * 2, np.float32)[::2])


def test_out_of_every_accepted_kind():
    a = _smooth((6, 7, 5))
    codec = Strata(abs_error=0)
    for enc_layout, src in _layouts(a).items():
        enc = codec.encode(src)
        for out in (np.empty(src.shape, ">f4"), np.empty(src.shape, np.float32, order="F"),
                    np.empty((src.shape[0] * 2,) + src.shape[1:], np.float32)[::2]):
            assert np.array_equal(codec.decode(enc, out=out), src), enc_layout   # by element
        order = "F" if src.flags.f_contiguous and not src.flags.c_contiguous else "C"
        flat = codec.decode(enc, out=np.empty(src.size, np.float32))
        assert np.array_equal(flat, src.ravel(order=order))                       # memory order, by value
        raw = codec.decode(enc, out=np.empty(src.nbytes, np.uint8))
        assert raw.tobytes() == np.asarray(src, order=order).tobytes(order=order)  # bytes as encoded


def test_layout_record_is_validated():
    from strata.lossy import compress

    a = _smooth((4, 5))
    for meta in ({"format": LAYOUT_FORMAT, "descr": ">f8", "fortran_order": False},
                 {"format": LAYOUT_FORMAT, "descr": ">f4", "fortran_order": "yes"},
                 {"format": LAYOUT_FORMAT, "descr": "<i4", "fortran_order": False},
                 {"format": LAYOUT_FORMAT, "descr": ">f4", "fortran_order": False, "x": 1}):
        with pytest.raises(CorruptStreamError, match="layout"):
            Strata(abs_error=0).decode(compress(a, abs_error=0, metadata=meta))
    other = compress(a, abs_error=0, metadata={"format": "someone else's"})   # not ours: plain C order
    assert np.array_equal(Strata(abs_error=0).decode(other), a)
    assert len(Strata(abs_error=0).encode(np.asfortranarray(a))) - len(Strata(abs_error=0).encode(a)) < 80
