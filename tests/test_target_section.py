"""The target section of a lossy stream (``strata.lossy.target``, ``docs/format.md`` section 9):
the record's layout and validation, ``with_target`` (after the levels, before an enhancement
section), ``LossyReader.target``, reads unaffected by the section, damaged or crafted sections
refused with ``strata.errors`` types, the header's extension flag 16 and ``strata info``."""
from __future__ import annotations

import dataclasses
import io
import math
import struct

import numpy as np
import pytest
from click.testing import CliRunner

import strata
from strata.cli import main
from strata.container import KIND_LOSSY, Source, crc32, pack, unpack_header
from strata.errors import CorruptStreamError, InvalidInputError, TruncatedStreamError
from strata.lossy import LossyReader
from strata.lossy import header as header_mod
from strata.lossy.codec import with_enhancement, with_target
from strata.lossy.header import LossyHeader
from strata.lossy.target import SIZE, TargetRecord

from .synthetic import same_bits, waves

RECORD = TargetRecord("psnr", 60.0, 60.3, 2)


@pytest.fixture(scope="module")
def plain():
    a = waves((8, 20, 24), 3, np.float32)
    return a, strata.compress(a, rel_error=1e-3)


@pytest.fixture(scope="module")
def missing():
    a = np.cumsum(np.random.default_rng(4).standard_normal((12, 40, 30)), axis=2)
    a[2:5, 10:20, 3:9] = np.nan
    a[7, 7, 7] = -999.0
    a[0, 0, 1] = np.inf
    return a, strata.compress(a, abs_error=1e-2, fill_value=-999.0, metadata={"units": "K"})


def parts(blob: bytes) -> tuple[LossyHeader, int]:
    raw, off = unpack_header(Source(blob), KIND_LOSSY)
    return LossyHeader.from_bytes(raw, len(blob)), off


def with_raw_section(stream: bytes, section: bytes, announced: int | None = None) -> bytes:
    """``stream`` (without a target or enhancement section) with ``section`` as its target
    section, whatever its bytes; the header announces ``announced`` bytes (default: its length)."""
    h, off = parts(stream)
    assert not h.target_len and not h.enhance_len
    h.target_len = len(section) if announced is None else announced
    return pack(KIND_LOSSY, h.to_bytes(), [stream[off:], section])


def section(version=1, code=1, target=60.0, achieved=60.3, compressions=2, crc=None, extra=b"") -> bytes:
    """A target section written from the documented layout (docs/format.md section 9)."""
    body = struct.pack("<BBddB", version, code, target, achieved, compressions) + extra
    return body + struct.pack("<I", crc32(body) if crc is None else crc)


# ---------------------------------------------------------------------------- the record
@pytest.mark.parametrize("record", [RECORD, TargetRecord("ratio", 20, 20.4, 1), TargetRecord("ssim", 0.99, 0.9912, 255),
                                    TargetRecord("psnr", 80.0, math.inf, 1), TargetRecord("ssim", -1, 1, 7)])
def test_record_bytes_follow_the_documented_layout(record):
    b = record.to_bytes()
    assert len(b) == SIZE == 23
    code = {"psnr": 1, "ratio": 2, "ssim": 3}[record.metric]
    assert b == section(1, code, record.target, record.achieved, record.compressions)
    back = TargetRecord.from_bytes(b)
    assert back == record and type(back.compressions) is int and type(back.target) is float


def test_record_normalizes_numbers_and_gives_units():
    r = TargetRecord("ratio", np.float32(20), np.int64(21), np.uint8(3))
    assert (r.target, r.achieved, r.compressions) == (20.0, 21.0, 3)
    assert type(r.target) is float and type(r.achieved) is float and type(r.compressions) is int
    assert RECORD.unit == "dB" and r.unit == "" and TargetRecord("ssim", 0.9, 0.95, 1).unit == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECORD.achieved = 61.0


@pytest.mark.parametrize("args, match", [
    (("mse", 1.0, 1.0, 1), "unknown target metric"),
    (("PSNR", 60.0, 60.0, 1), "unknown target metric"),
    ((1, 60.0, 60.0, 1), "metric must be a string"),
    (("psnr", "60", 60.0, 1), "target must be a real number"),
    (("psnr", 60.0, None, 1), "achieved must be a real number"),
    (("psnr", True, 60.0, 1), "target must be a real number"),
    (("psnr", math.nan, 60.0, 1), "target must be finite"),
    (("psnr", math.inf, 60.0, 1), "target must be finite"),
    (("psnr", 60.0, math.nan, 1), "finite or \\+inf"),
    (("psnr", 60.0, -math.inf, 1), "finite or \\+inf"),
    (("ratio", 20.0, math.inf, 1), "achieved ratio must be finite"),
    (("ssim", 0.9, math.inf, 1), "achieved ssim must be finite"),
    (("ratio", 0.0, 20.0, 1), "ratios must be > 0"),
    (("ratio", 20.0, -1.0, 1), "ratios must be > 0"),
    (("ssim", 1.5, 0.9, 1), "\\[-1, 1\\]"),
    (("ssim", 0.9, -1.01, 1), "\\[-1, 1\\]"),
    (("psnr", 60.0, 60.0, 0), "1..255"),
    (("psnr", 60.0, 60.0, 256), "1..255"),
    (("psnr", 60.0, 60.0, -1), "1..255"),
    (("psnr", 60.0, 60.0, 2.0), "1..255"),
    (("psnr", 60.0, 60.0, True), "1..255"),
])
def test_bad_records_are_refused_on_construction(args, match):
    with pytest.raises(InvalidInputError, match=match):
        TargetRecord(*args)


# ---------------------------------------------------------------------------- with_target and the reader
def test_round_trip_through_the_stream(plain):
    a, blob = plain
    out = with_target(blob, RECORD)
    h, _ = parts(out)
    assert h.target_len == SIZE and h.enhance_len == 0
    assert len(out) == len(blob) + SIZE + 1  # the section and its length's varint (the flags byte was there)
    assert out[-SIZE:] == RECORD.to_bytes()  # after the levels
    with strata.open(out) as r, strata.open(blob) as r0:
        assert r.target == RECORD and r0.target is None
        assert same_bits(r.read(), r0.read())
        assert r.error_bound == r0.error_bound and r.valid_range == r0.valid_range
        assert [lv.compressed_bytes for lv in r.levels] == [lv.compressed_bytes for lv in r0.levels]
        # the levels keep their place: the header grew by one byte
        assert [lv.offset - 1 for lv in r.levels] == [lv.offset for lv in r0.levels]
    assert np.abs(strata.decompress(out).astype(np.float64) - a).max() <= LossyReader(out).error_bound
    # from a file and a file object (the container's other sources)
    with LossyReader(io.BytesIO(out)) as r:
        assert r.target == RECORD


def test_round_trip_with_missing_values_and_metadata(missing, tmp_path):
    a, blob = missing
    rec = TargetRecord("ratio", 8.0, 8.25, 4)
    out = with_target(blob, rec)
    path = tmp_path / "t.strata"
    path.write_bytes(out)
    with strata.open(path) as r, strata.open(blob) as r0:
        assert r.target == rec
        assert r.missing_count == r0.missing_count > 0 and r.metadata == {"units": "K"}
        assert same_bits(r.read(), r0.read())
        y, y0 = r.read(masked=True), r0.read(masked=True)
        assert np.array_equal(y.mask, y0.mask) and same_bits(y.data, y0.data)
        assert np.array_equal(r.read_mask(), r0.read_mask())
        assert np.array_equal(r.read_mask(region=(slice(1, 6), 15)), r0.read_mask(region=(slice(1, 6), 15)))


def test_progressive_and_region_reads_are_unaffected(missing):
    _, blob = missing
    out = with_target(blob, TargetRecord("ssim", 0.999, 0.9995, 3))
    with strata.open(out) as r, strata.open(blob) as r0:
        for k in range(len(r0.levels)):
            assert same_bits(r.read(level=k), r0.read(level=k)), k
            assert same_bits(r.read(level=k, full_resolution=False), r0.read(level=k, full_resolution=False)), k
        for region in [(slice(2, 9), slice(5, 33), slice(None)), (4,), (slice(None), 17, slice(3, 28, 2)),
                       (slice(0, 0),), (-1, -1, -1)]:
            assert same_bits(r.read(region=region), r0.read(region=region)), region
        assert same_bits(r.read_block((1, 2, 3), (9, 30, 20))[0], r0.read_block((1, 2, 3), (9, 30, 20))[0])


def test_empty_array_and_scalar_streams(plain):
    for a in (np.zeros((0, 5), np.float32), np.array(3.5)):
        blob = strata.compress(a, abs_error=0.1)
        out = with_target(blob, RECORD)
        with strata.open(out) as r:
            assert r.target == RECORD
            y = r.read()
        assert y.shape == a.shape and np.abs(y - a).max(initial=0) <= 0.1


def test_a_second_target_section_and_other_inputs_are_refused(plain):
    _, blob = plain
    out = with_target(blob, RECORD)
    with pytest.raises(InvalidInputError, match="already has a target section"):
        with_target(out, TargetRecord("ratio", 5, 5.5, 1))
    with pytest.raises(InvalidInputError, match="must be a TargetRecord"):
        with_target(blob, ("psnr", 60.0, 60.3, 2))
    with pytest.raises(CorruptStreamError, match="unexpected bytes after"):
        with_target(blob + b"\x00", RECORD)
    h, off = parts(blob)
    short = pack(KIND_LOSSY, h.to_bytes(), [blob[off:-1]])  # (a valid header, one byte of the last level missing)
    with pytest.raises(TruncatedStreamError):
        with_target(short, RECORD)


# ---------------------------------------------------------------------------- with an enhancement section
@pytest.fixture(scope="module")
def enhanced():
    """A 2x stream whose network is stored whatever it gains (as tests/test_enhance.py does)."""
    pytest.importorskip("torch")
    import numba

    from strata.enhance import EnhanceOptions
    from strata.enhance import codec as enhance_codec

    a = waves((6, 24, 32), 7, np.float32, noise=0.02)
    before = numba.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(enhance_codec, "_plain_bytes_at", lambda *args, **kwargs: 1 << 40)
        numba.set_num_threads(1)
        try:
            blob = strata.compress(a, rel_error=1e-2, enhance="2x",
                                   enhance_options=EnhanceOptions(steps=20, batch_points=2000, progress=False, seed=1))
        finally:
            numba.set_num_threads(before)
    assert LossyReader(blob).enhancement.stored
    return a, blob


def test_target_goes_before_the_enhancement_section(enhanced):
    _, blob = enhanced
    out = with_target(blob, RECORD)
    h0, _ = parts(blob)
    h, _ = parts(out)
    n = h0.enhance_len
    assert h.enhance_len == n and h.target_len == SIZE
    assert out[-n:] == blob[-n:]  # the enhancement section stays last, unchanged
    assert out[-n - SIZE:-n] == RECORD.to_bytes()
    with strata.open(out) as r, strata.open(blob) as r0:
        assert r.target == RECORD
        e, e0 = r.enhancement, r0.enhancement
        assert (e.mode_name, e.stored, e.width, e.psnr_enhanced) == (e0.mode_name, e0.stored, e0.width,
                                                                      e0.psnr_enhanced)
        assert np.array_equal(e.quantized, e0.quantized)
        y = r.read()
        assert same_bits(y, r0.read())  # enhanced
        assert same_bits(r.read(enhance=False), r0.read(enhance=False))
        assert not same_bits(y, r.read(enhance=False))
        region = (slice(1, 4), slice(3, 17), slice(-10, None))
        assert same_bits(r.read(region=region), y[region])
        assert same_bits(r.read(level=0), r0.read(level=0))
        assert r.guaranteed_error == 2 * r.error_bound


def test_target_and_enhancement_in_either_order_give_the_same_stream(enhanced):
    _, blob = enhanced
    h, off = parts(blob)
    n = h.enhance_len
    h.enhance_len = 0
    bare, enh = pack(KIND_LOSSY, h.to_bytes(), [blob[off:len(blob) - n]]), blob[len(blob) - n:]
    first_target = with_enhancement(with_target(bare, RECORD), enh)
    assert first_target == with_target(with_enhancement(bare, enh), RECORD) == with_target(blob, RECORD)
    with pytest.raises(InvalidInputError, match="already has a target"):
        with_target(first_target, RECORD)


# ---------------------------------------------------------------------------- damaged and crafted sections
def test_every_flipped_byte_of_the_section_is_refused(plain):
    _, blob = plain
    out = with_target(blob, RECORD)
    expect = strata.decompress(blob)
    start = len(out) - SIZE
    for i in range(SIZE):
        for bit in (0, 7):
            bad = bytearray(out)
            bad[start + i] ^= 1 << bit
            with strata.open(bytes(bad)) as r:
                with pytest.raises(CorruptStreamError, match="checksum mismatch in target section"):
                    _ = r.target
                assert same_bits(r.read(), expect)  # (information only: the values still decode)


def test_crafted_sections_with_a_valid_crc_are_refused(plain):
    _, blob = plain
    cases = [
        (section(version=0), "version 0 is not supported"),
        (section(version=2), "version 2 is not supported"),
        (section(code=0), "unknown target metric code 0"),
        (section(code=4), "unknown target metric code 4"),
        (section(code=255), "unknown target metric code 255"),
        (section(target=math.nan), "target must be finite"),
        (section(target=math.inf), "target must be finite"),
        (section(target=-math.inf), "target must be finite"),
        (section(achieved=math.nan), "finite or \\+inf"),
        (section(achieved=-math.inf), "finite or \\+inf"),
        (section(code=2, target=20.0, achieved=math.inf), "achieved ratio must be finite"),
        (section(code=3, target=0.9, achieved=math.nan), "achieved ssim must be finite"),
        (section(code=2, target=-20.0, achieved=20.0), "ratios must be > 0"),
        (section(code=3, target=0.9, achieved=1.0000001), "\\[-1, 1\\]"),
        (section(compressions=0), "1..255"),
        (section(extra=b"\x00"), "24 bytes, version 1 has 23"),
        (section()[:-5] + struct.pack("<I", crc32(section()[:-5])), "22 bytes, version 1 has 23"),
        (b"\x01\x02\x03", "too short"),
    ]
    for sec, match in cases:
        with strata.open(with_raw_section(blob, sec)) as r:
            with pytest.raises(CorruptStreamError, match=match):
                _ = r.target
    # a lossless result: +inf is a valid achieved PSNR
    with strata.open(with_raw_section(blob, section(achieved=math.inf))) as r:
        assert r.target == TargetRecord("psnr", 60.0, math.inf, 2)


def test_section_lengths_in_the_header_are_checked(plain):
    _, blob = plain
    sec = RECORD.to_bytes()
    with pytest.raises(TruncatedStreamError):  # announced longer than the stream holds
        LossyReader(with_raw_section(blob, sec, announced=SIZE + 1))
    # extension bit 4 with a length of 0 (the writer leaves the length out at 0: set by hand)
    h, off = parts(blob)
    h.target_len = 1
    body = bytearray(h.to_bytes())
    h.target_len = 2
    i = next(k for k, (x, y) in enumerate(zip(body, h.to_bytes())) if x != y)  # (the length's byte)
    assert body[i] == 1
    body[i] = 0
    with pytest.raises(CorruptStreamError, match="empty target section"):
        LossyReader(pack(KIND_LOSSY, bytes(body), [blob[off:]]))


def _flags_index(h: LossyHeader) -> int:
    """Index of the extension flags byte in ``h.to_bytes()``."""
    bare = dataclasses.replace(h, levels=[dataclasses.replace(lv, mask_index_len=0, mask_len=0) for lv in h.levels],
                               missing_count=0, metadata_len=0, valid_range=None, enhance_len=0, target_len=0,
                               predictors=None)
    return len(bare.to_bytes()) - 1


def test_unknown_extension_flags_are_refused(plain):
    _, blob = plain
    out = with_target(blob, RECORD)
    h, off = parts(out)
    body = bytearray(h.to_bytes())
    i = _flags_index(h)
    assert body[i] & ~64 == 4 | 16  # valid range and target (and maybe step predictors)
    # (every bit of the flags byte is known now -- 32: the lattice, tests/test_lattice.py; 64: step
    # predictors, tests/test_multidim.py; 128: a residual layer's window -- so a reader refuses a
    # bit set without its field as a malformed header)
    body2 = bytearray(body)
    body2[i] |= 128
    with pytest.raises(CorruptStreamError, match="lossy header"):
        LossyReader(pack(KIND_LOSSY, bytes(body2), [out[off:]]))


def test_a_reader_older_than_the_section_refuses_it(plain, monkeypatch):
    """What a reader that knew bits 0-3 only (EXT_KNOWN 16) says of a stream with a target (a
    stream such a reader's writer made: every step interpolated dimension by dimension)."""
    from strata.lossy.codec import compress
    from strata.lossy.tune import Settings

    blob = compress(plain[0], rel_error=1e-3, settings=Settings())
    out = with_target(blob, RECORD)
    monkeypatch.setattr(header_mod, "EXT_KNOWN", 16)
    with pytest.raises(CorruptStreamError, match="unknown header extension flags 20"):
        LossyReader(out)
    assert LossyReader(blob).target is None  # (streams without it still open)


# ---------------------------------------------------------------------------- strata info
@pytest.mark.parametrize("record, line", [
    (RECORD, "target: psnr 60 dB, achieved 60.30 dB in 2 compressions"),
    (TargetRecord("ratio", 20, 20.4, 1), "target: ratio 20, achieved 20.40 in 1 compression"),
    (TargetRecord("ssim", 0.99, 0.99123, 3), "target: ssim 0.9900, achieved 0.9912 in 3 compressions"),
    (TargetRecord("psnr", 90, math.inf, 1), "target: psnr 90 dB, achieved inf dB (lossless) in 1 compression"),
])
def test_info_prints_the_target(plain, tmp_path, record, line):
    _, blob = plain
    path = tmp_path / "t.strata"
    path.write_bytes(with_target(blob, record))
    res = CliRunner().invoke(main, ["info", str(path)])
    assert res.exit_code == 0, res.output
    assert f"  {line}\n" in res.output
    path.write_bytes(blob)
    res = CliRunner().invoke(main, ["info", str(path)])
    assert res.exit_code == 0 and "target:" not in res.output


def test_info_reports_a_damaged_target_section(plain, tmp_path):
    _, blob = plain
    bad = bytearray(with_target(blob, RECORD))
    bad[-6] ^= 1
    path = tmp_path / "t.strata"
    path.write_bytes(bytes(bad))
    res = CliRunner().invoke(main, ["info", str(path)])
    assert res.exit_code != 0 and "CorruptStreamError" in res.output and "target section" in res.output
