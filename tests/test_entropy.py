"""The shared entropy layer: binning, tables, rANS, the byte-string coder (exact round trips,
near-entropy sizes, damaged records refused)."""
from __future__ import annotations

import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from strata.container import Writer
from strata.entropy import bytecoder, rans, tables
from strata.entropy.binning import (
    ALPHABET,
    DIRECT,
    ESCAPE,
    MAX_OCTAVE,
    from_symbol,
    to_symbol,
    to_symbol_flat,
    to_symbol_reference,
    unzigzag,
    zigzag,
)
from strata.errors import CorruptStreamError, InvalidInputError


@njit
def _bin_all(z):
    sym = np.empty(z.size, np.int64)
    nb = np.empty(z.size, np.int64)
    ex = np.empty(z.size, np.int64)
    back = np.empty(z.size, np.int64)
    for i in range(z.size):
        sym[i], nb[i], ex[i] = to_symbol(z[i])
        back[i] = from_symbol(sym[i], ex[i])
    return sym, nb, ex, back


@njit
def _zz(q):
    out = np.empty(q.size, np.int64)
    for i in range(q.size):
        out[i] = unzigzag(zigzag(q[i]))
    return out


@given(st.lists(st.integers(0, 2**MAX_OCTAVE - 1), min_size=1, max_size=200))
def test_binning_round_trip(zs):
    z = np.array(zs, dtype=np.int64)
    sym, nb, ex, back = _bin_all(z)
    assert np.array_equal(back, z)
    assert sym.max() < ESCAPE
    assert np.all(ex < (1 << nb))
    ref_sym, ref_nb, ref_ex = to_symbol_reference(z)
    assert np.array_equal(sym, ref_sym) and np.array_equal(nb, ref_nb) and np.array_equal(ex, ref_ex)


@njit
def _bin_flat_differences(n):
    """Values below ``n`` where the branch-free binning differs from :func:`to_symbol`."""
    bad = 0
    for z in range(n):
        a = to_symbol(z)
        b = to_symbol_flat(np.int64(z))
        bad += a[0] != b[0] or a[1] != b[1] or a[2] != b[2]
    return bad


def test_branch_free_binning_is_the_binning():
    """The chunk analysis bins dense chunks by arithmetic alone; every value the binning takes
    (below 2**MAX_OCTAVE) gets the same symbol, raw bit count and raw bits as to_symbol."""
    assert _bin_flat_differences(1 << MAX_OCTAVE) == 0


def test_binning_small_values_are_direct():
    z = np.arange(DIRECT, dtype=np.int64)
    sym, nb, _, _ = _bin_all(z)
    assert np.array_equal(sym, z) and not nb.any()


@given(st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=100))
def test_zigzag_round_trip(qs):
    q = np.array(qs, dtype=np.int64)
    assert np.array_equal(_zz(q), q)


@given(st.lists(st.lists(st.integers(0, 10**9), min_size=ALPHABET, max_size=ALPHABET), min_size=1, max_size=5))
def test_normalize_properties(rows):
    counts = np.array(rows, dtype=np.int64)
    freq = tables.normalize(tables.quantized(counts))
    for c, f in zip(counts, freq):
        if c.sum() == 0:
            assert not f.any()
        else:
            assert f.sum() == tables.SCALE
            assert np.all((f > 0) == (c > 0))


@given(st.lists(st.lists(st.integers(0, 10**12), min_size=ALPHABET, max_size=ALPHABET), min_size=1, max_size=6),
       st.sampled_from([ALPHABET, 256]))
def test_table_serialization_round_trip(rows, n_symbols):
    counts = np.zeros((len(rows), n_symbols), np.int64)
    counts[:, n_symbols - ALPHABET:] = np.array(rows, dtype=np.int64)
    buf = tables.serialize(counts)
    back = tables.deserialize(buf, counts.shape[0], n_symbols)
    assert np.array_equal(back, tables.quantized(counts))


@njit
def _encode(syms, ctx, freq, cum, buf):
    state = np.int64(rans.RANS_L)
    pos = buf.size
    for k in range(syms.size - 1, -1, -1):
        state, pos = rans.encode_put(state, buf, pos, cum[ctx[k], syms[k]], freq[ctx[k], syms[k]])
    return rans.encode_flush(state, buf, pos)


@njit
def _decode(buf, pos, ctx, symbols, info, out):
    end = buf.size
    state, pos = rans.decode_init(buf, pos, end)
    for k in range(out.size):
        sym, i = rans.decode_lookup(state, symbols, info, ctx[k])
        out[k] = sym
        state, pos = rans.decode_step(state, i, buf, pos, end)
    return state, pos


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 20000), st.integers(0, 2**32 - 1), st.floats(0.0, 3.0))
def test_rans_round_trip_with_contexts(n, seed, skew):
    rng = np.random.default_rng(seed)
    n_ctx = 3
    ctx = rng.integers(0, n_ctx, n)
    # geometric-ish symbols whose spread depends on the context
    syms = np.minimum(rng.geometric(np.exp(-skew * (ctx + 1) / 3) * 0.9 + 0.05) - 1, ALPHABET - 1).astype(np.int64)
    counts = np.zeros((n_ctx, ALPHABET), np.int64)
    np.add.at(counts, (ctx, syms), 1)
    freq = tables.normalize(tables.quantized(counts))
    cum = tables.cumulative(freq)
    buf = np.zeros(2 * n + 8, np.uint8)
    pos = _encode(syms, ctx, freq, cum, buf)
    out = np.empty(n, np.int64)
    state, end = _decode(buf, pos, ctx, *tables.split_decode_tables(freq, np.arange(n_ctx)), out)
    assert np.array_equal(out, syms)
    assert state == rans.RANS_L and end == buf.size
    # within 1% + a few bytes of the empirical conditional entropy
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.nansum(np.where(counts > 0, counts * np.log2(counts.sum(1, keepdims=True) / counts), 0))
    assert (buf.size - pos) * 8 <= h * 1.01 + 8 * 16 + 0.02 * n


def test_rans_codes_highly_probable_symbols_below_one_bit():
    n = 100000
    syms = np.zeros(n, np.int64)
    syms[::500] = 1
    ctx = np.zeros(n, np.int64)
    counts = np.zeros((1, ALPHABET), np.int64)
    np.add.at(counts, (ctx, syms), 1)
    freq = tables.normalize(tables.quantized(counts))
    buf = np.zeros(2 * n + 8, np.uint8)
    pos = _encode(syms, ctx, freq, tables.cumulative(freq), buf)
    assert (buf.size - pos) * 8 / n < 0.03  # Huffman would need at least 1 bit per symbol


def test_decode_tables_mark_unused_tables_invalid():
    freq = np.zeros((2, ALPHABET), np.int64)
    freq[0, 0] = tables.SCALE - 3
    freq[0, 5] = 3
    symbols, info = tables.split_decode_tables(freq, np.arange(2))
    n = tables.SPLIT_SYMBOLS
    # symbols in increasing order: symbol 0 owns the first slots
    assert np.all(symbols[:tables.SCALE - 3] == 0) and np.all(symbols[tables.SCALE - 3:tables.SCALE] == 5)
    assert rans.info_valid(info[0]) and rans.info_valid(info[5]) and info[5] >> 12 == tables.SCALE - 3
    assert not rans.info_valid(info[1])
    # the unused table: every slot invalid
    assert np.all(symbols[tables.SCALE:] == tables.INVALID_ENTRY)
    assert not any(rans.info_valid(v) for v in info[n:])


def _byte_string(kind, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.integers(0, 256, n).astype(np.uint8)
    if kind == "narrow":  # an exponent plane
        return np.clip(rng.normal(120, 2, n), 0, 255).astype(np.uint8)
    if kind == "walk":  # correlated with the previous byte
        return np.cumsum(rng.integers(0, 3, n)).astype(np.uint8)
    if kind == "halves":  # statistics change along the string (not with the previous byte)
        x = np.clip(rng.normal(120, 1.5, n), 0, 255).astype(np.uint8)
        x[n // 2:] = rng.integers(112, 128, n - n // 2)
        return x
    return np.full(n, 7, np.uint8)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["uniform", "narrow", "walk", "halves", "const"]),
       st.integers(0, 3 * bytecoder.SPLIT_PARTS * bytecoder.MIN_PART_BYTES), st.integers(0, 2**32 - 1))
def test_bytecoder_round_trip(kind, n, seed):
    x = _byte_string(kind, n, seed)
    rec = bytecoder.encode(x)
    assert np.array_equal(bytecoder.decode(rec, n), x)
    assert len(rec) <= n + 1 + (n >= bytecoder.SPLIT_PARTS * bytecoder.MIN_PART_BYTES) * 16


def test_bytecoder_picks_each_model_and_splits_changing_strings():
    n = 2 * bytecoder.SPLIT_PARTS * bytecoder.MIN_PART_BYTES
    models = {kind: bytecoder.encode(_byte_string(kind, n, 1))[0]
              for kind in ("uniform", "narrow", "walk", "halves", "const")}
    assert models == {"uniform": bytecoder.RAW, "narrow": bytecoder.ORDER0, "walk": bytecoder.PREV,
                      "halves": bytecoder.SPLIT, "const": bytecoder.CONST}
    # the split record is smaller than coding the two halves' mixture with one table
    x = _byte_string("halves", n, 1)
    whole = bytecoder.estimate_bits(x) / 8
    assert len(bytecoder.encode(x)) < 0.95 * whole


@pytest.mark.parametrize("kind", ["narrow", "walk", "halves"])
def test_bytecoder_refuses_damaged_records(kind):
    n = 2 * bytecoder.SPLIT_PARTS * bytecoder.MIN_PART_BYTES
    x = _byte_string(kind, n, 2)
    rec = bytecoder.encode(x)
    for cut in (1, 2, 5, len(rec) // 2, len(rec) - 1):  # truncated
        with pytest.raises(CorruptStreamError):
            bytecoder.decode(rec[:cut], n)
    rng = np.random.default_rng(3)
    caught = 0
    for _ in range(20):  # flipped bytes: refused, or decoded without leaving the buffers
        bad = bytearray(rec)
        bad[int(rng.integers(1, len(bad)))] ^= 1 << int(rng.integers(0, 8))
        try:
            bytecoder.decode(bytes(bad), n)
        except CorruptStreamError:
            caught += 1
    assert caught >= 15


@given(st.lists(st.integers(0, 2**56 - 1), max_size=50), st.binary(max_size=300), st.data())
def test_varints_and_part_checksums_match_the_one_at_a_time_writer(values, data, draw):
    """Writer.varints is Writer.varint after Writer.varint (the compiled varint.put_many), and
    Writer.crcs the CRC-32 of each part, little-endian, as Writer.u32 writes them: the chunk
    indexes of the lossy levels and masks are written these ways."""
    one = Writer()
    for v in values:
        one.varint(v)
    assert Writer().varints(values).getvalue() == one.getvalue()
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=8)))
    offsets = [0, *cuts, len(data)]
    one = Writer()
    for a, b in zip(offsets, offsets[1:]):
        one.u32(zlib.crc32(data[a:b]))
    assert Writer().crcs(data, np.array(offsets)).getvalue() == one.getvalue()
    for bad in (-1, 2**56):
        with pytest.raises(ValueError):
            Writer().varints([1, bad])


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=5000), st.data())
def test_part_checksums_are_zlib_crc32_of_every_part(data, draw):
    """checksum.crc32_parts (zlib's crc32 called from compiled code, the parts spread over
    threads; a few parts from Python) gives zlib.crc32 of each part, empty parts too, for few
    parts, for some (the compiled loop on one thread) and for many (the parallel loop), from
    bytes and from arrays; the Python fallback gives the same."""
    from strata import checksum

    many = draw.draw(st.booleans())
    cuts = draw.draw(st.lists(st.integers(0, len(data)), min_size=checksum.SERIAL_PARTS if many else 0,
                              max_size=2 * checksum.SERIAL_PARTS if many else 30))
    offsets = np.array([0, *sorted(cuts), len(data)], np.int64)
    want = [zlib.crc32(data[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    for src in (data, np.frombuffer(data, np.uint8)):
        got = checksum.crc32_parts(src, offsets)
        assert got.dtype == np.uint32 and got.tolist() == want
    assert checksum._linked() == (sys.platform != "win32")  # the compiled path is the one tested here
    checksum._state["ok"] = False  # the fallback
    try:
        assert checksum.crc32_parts(data, offsets).tolist() == want
    finally:
        checksum._state.clear()
    for bad in ([0, len(data) + 1], [1, 0, len(data)], [-1, len(data)]):
        with pytest.raises(InvalidInputError):
            checksum.crc32_parts(data, np.array(bad))
