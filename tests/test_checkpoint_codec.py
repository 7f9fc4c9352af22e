"""strata.checkpoint's segment codec (format versions 3 and 4) and the byte coder's 64-state
model (eight-state records of version 3 still decoding): bit-exact round trips at every
boundary, raw planes merged from the stream, CRC-32C checks, version-2 records still decoding.
NumPy only."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from strata.checkpoint import codec, planes
from strata.container import Reader, Writer
from strata.entropy import bytecoder, rans, rans64, tables
from strata.errors import CorruptStreamError, StrataError


def test_crc32c_is_castagnoli():
    assert codec.crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    data = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    assert codec.crc32c(data) == codec.crc32c(memoryview(data.tobytes())[:]) == codec.crc32c(bytearray(data))


def _skewed(n: int, seed: int) -> np.ndarray:
    """Exponent-like bytes: a dozen values, one dominant, about 3 bits each (order-0 beats the
    previous-byte model, also with the 240 bytes of final states of ``ORDER0_64``)."""
    rng = np.random.default_rng(seed)
    return (120 + rng.geometric(0.25, n).clip(max=12) * 17 % 13).astype(np.uint8)


@pytest.mark.parametrize("n", [bytecoder.WIDE_MIN_BYTES - 1, bytecoder.WIDE_MIN_BYTES, bytecoder.WIDE_MIN_BYTES + 1,
                               bytecoder.WIDE_MIN_BYTES + 7, 3 * bytecoder.WIDE_MIN_BYTES + 5, 1 << 18])
def test_64_state_model_round_trips_and_is_only_written_when_asked(n):
    x = _skewed(n, n)
    narrow, wide = bytecoder.encode(x), bytecoder.encode(x, wide=True)
    assert narrow[0] in (bytecoder.ORDER0, bytecoder.SPLIT) and bytecoder.ORDER0_64 not in _models(narrow)
    assert (bytecoder.ORDER0_64 in _models(wide)) == (n >= bytecoder.WIDE_MIN_BYTES)
    assert bytecoder.ORDER0_8 not in _models(wide)  # (written by version 3 only)
    assert len(wide) <= len(narrow) + 240 * bytecoder.SPLIT_PARTS  # 60 more final states a record
    for rec in (narrow, wide):
        assert np.array_equal(bytecoder.decode(rec, n), x)


def _order0_record(x: np.ndarray, model: int, lanes: int) -> bytes:
    """An order-0 record of ``x`` with ``lanes`` interleaved states (``rans64.encode``), as
    version 3 wrote ``ORDER0_8`` (``lanes`` 8) and version 4 writes ``ORDER0_64``."""
    h0, _ = bytecoder._histograms(x)
    codes = tables.approx_code(h0)
    tab = np.empty(512, np.uint8)
    tlen = tables.serialize_into(codes, tab)
    freq = tables.normalize(tables.approx_value(codes))
    buf = np.empty(2 * x.size + 4 * lanes + 16, np.uint8)
    start = rans64.encode(x, rans.encoder_table(freq).ravel(), np.empty(lanes, np.int64), buf)
    return bytes([model]) + Writer().varint(tlen).getvalue() + tab[:tlen].tobytes() + buf[start:].tobytes()


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, bytecoder.WIDE_MIN_BYTES + 3])
def test_eight_state_records_of_version_3_decode(n):
    x = _skewed(n, 3 * n)
    rec = _order0_record(x, bytecoder.ORDER0_8, 8)
    assert np.array_equal(bytecoder.decode(rec, n), x)
    with pytest.raises(CorruptStreamError):
        bytecoder.decode(rec[:-1], n)


def _models(rec: bytes) -> set[int]:
    if rec[0] != bytecoder.SPLIT:
        return {rec[0]}
    r = Reader(rec[2:], "split")
    lens = [r.varint() for _ in range(bytecoder.SPLIT_PARTS - 1)]
    starts = np.cumsum([2 + r.pos, *lens])
    return {rec[int(s)] for s in starts}


def test_64_state_records_that_lie_are_refused():
    x = _skewed(bytecoder.WIDE_MIN_BYTES + 3, 1)
    rec = bytearray(bytecoder.encode(x, wide=True))
    assert rec[0] == bytecoder.ORDER0_64
    for bad in (rec[:-1], rec[:40], rec + b"\0", rec[:-5] + bytes(5)):
        with pytest.raises(CorruptStreamError):
            bytecoder.decode(bytes(bad), x.size)
    flipped = bytearray(rec)
    flipped[len(rec) // 2] ^= 0x40  # a coded byte: refused, or other bytes (the CRCs catch it), never another error
    try:
        assert bytecoder.decode(bytes(flipped), x.size).size == x.size
    except CorruptStreamError:
        pass


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("rotate", [False, True])
def test_merge_from_separate_planes_inverts_split(itemsize, rotate):
    data = np.random.default_rng(itemsize).integers(0, 256, itemsize * 1001, dtype=np.uint8)
    ps = planes.split(data, itemsize, rotate)
    assert np.array_equal(planes.merge(ps, itemsize, rotate), data)


def _segment(dtype: str, n: int, seed: int) -> bytes:
    """Elements whose top plane codes and whose low planes are stored raw."""
    rng = np.random.default_rng(seed)
    itemsize = codec.DTYPES[dtype][0]
    x = (rng.standard_normal(n // itemsize) * 0.02).astype({2: np.float16, 4: np.float32, 8: np.float64}[itemsize])
    return x.tobytes()


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32", "F64", "C64"])
def test_segment_records_are_version_3_and_decode_from_any_buffer(dtype):
    data = _segment(dtype, codec.CHUNK_BYTES + 4096, 3)  # two chunks, the second short
    rec = codec.encode(data, dtype)
    assert codec.info(rec)["crc32c"] and not codec.info(rec)["delta"]
    for buf in (rec, bytearray(rec), memoryview(rec), np.frombuffer(rec, np.uint8)):
        assert codec.decode(buf, workers=2).tobytes() == data


def _as_version_2(rec: bytes) -> bytes:
    """The same segment as a version-2 writer stored it: zlib CRC-32s, no head checksum."""
    r = Reader(rec, "segment")
    n, code, flags, chunk_bytes, n_chunks = r.varint(), r.u8(), r.u8(), r.varint(), r.varint()
    lens = []
    for _ in range(n_chunks):
        lens.append(r.varint())
        r.u32()
    r.u32()
    w = Writer().varint(n).u8(code).u8(flags & ~codec.CRC32C).varint(chunk_bytes).varint(n_chunks)
    pos = r.pos
    for ln in lens:
        w.varint(ln).u32(zlib.crc32(rec[pos:pos + ln]))
        pos += ln
    return w.getvalue() + rec[r.pos:]


def test_version_2_records_decode_and_their_checksums_are_zlib_crc32():
    data = _segment("F32", 3 << 18, 4)
    rec = codec.encode(data, "F32")
    old = _as_version_2(rec)
    assert not codec.info(old)["crc32c"] and codec.head_checksum(old) is None
    assert codec.decode(old).tobytes() == data
    bad = bytearray(old)
    bad[-1] ^= 1
    with pytest.raises(CorruptStreamError, match="checksum mismatch in chunk"):
        codec.decode(bytes(bad))


def test_version_3_head_checksum_covers_the_dtype_and_chunk_index():
    data = _segment("F32", 1 << 16, 5)
    rec = codec.encode(data, "F32")
    end = codec.Record.from_bytes(rec).offsets[0]  # where the chunks start
    assert struct.unpack_from("<I", rec, end - 4)[0] == codec.head_checksum(rec) == codec.crc32c(rec[:end - 4])
    i32 = bytearray(rec)
    i32[len(Writer().varint(len(data)).getvalue())] = list(codec.DTYPES).index("I32")  # (v2 decoded it wrong)
    with pytest.raises(CorruptStreamError, match="segment head"):
        codec.decode(bytes(i32))
    for at in range(end):  # any change to the head is caught before a chunk is decoded
        bad = bytearray(rec)
        bad[at] ^= 0x01
        with pytest.raises(StrataError):
            codec.decode(bytes(bad))
