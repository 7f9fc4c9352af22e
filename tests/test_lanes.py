"""The interleaved-lanes level coder (``strata.lossy.chunks.CODER_LANES``, format version 3):
the same quantization codes as the serial coder, so the same decoded values bit for bit; the
encoder picks it only for levels of big chunks; hostile level heads and chunks are refused."""
from __future__ import annotations

import functools
import struct

import numpy as np
import pytest
from numba import njit

import strata
from strata.container import crc32
from strata.errors import CorruptStreamError, InvalidInputError
from strata.lossy import chunk_decoder, chunk_encoder, chunks
from strata.lossy.reader import LossyReader


def _noisy(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    for ax in range(a.ndim):
        a = np.cumsum(a, axis=ax)
    return (a / np.abs(a).max() * 50 + rng.standard_normal(shape)).astype(dtype)


def _compress(monkeypatch, a, coder, **kw):
    """``a`` compressed with every level but the base coded by ``coder``."""
    monkeypatch.setattr(chunks, "LANES_MIN_CHUNK_BYTES", 0 if coder == chunks.CODER_LANES else float("inf"))
    return strata.compress(a, **kw)


def _coders(blob):
    r = LossyReader(blob)
    return [r._level_tables(lv).coder for lv in range(len(r.header.levels))]


# shapes beyond the base grid whose rows end on every tail of the 4 lanes, 1D to 4D
SHAPES = [(70001,), (150, 171), (41, 45, 50), (9, 70, 67), (3, 40, 45, 22), (66, 2, 129)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("holes", [False, True])
def test_lanes_decode_the_same_values_as_the_serial_coder(monkeypatch, shape, dtype, holes):
    a = _noisy(shape, dtype, len(shape) * 7 + holes)
    if holes:  # missing values: coded points of a row are not contiguous
        flat = a.reshape(-1)
        flat[np.random.default_rng(3).random(flat.size) < 0.15] = np.nan
        flat[7:40] = np.nan
    eb = 1e-3
    lanes = _compress(monkeypatch, a, chunks.CODER_LANES, abs_error=eb)
    serial = _compress(monkeypatch, a, chunks.CODER_SERIAL, abs_error=eb)
    assert _coders(lanes)[1:] and set(_coders(lanes)[1:]) == {chunks.CODER_LANES}
    assert set(_coders(serial)) == {chunks.CODER_SERIAL}
    y, z = strata.decompress(lanes), strata.decompress(serial)
    assert np.array_equal(y.view(f"u{a.itemsize}"), z.view(f"u{a.itemsize}"))
    valid = np.isfinite(a)
    assert np.abs(y[valid].astype(np.float64) - a[valid]).max() <= eb
    assert np.isnan(y[~valid]).all()
    # a region and a coarser level read through the lanes coder
    r = strata.open(lanes)
    region = tuple(slice(n // 3, n // 3 + max(1, n // 2)) for n in shape)
    assert np.array_equal(r.read(region=region).view(f"u{a.itemsize}"), y[region].view(f"u{a.itemsize}"))
    lv = len(r.levels) - 2
    if lv > 0:
        assert np.array_equal(r.read(level=lv).view(f"u{a.itemsize}"),
                              strata.open(serial).read(level=lv).view(f"u{a.itemsize}"))


def test_the_encoder_takes_lanes_for_big_chunks_only():
    big = _noisy((40, 64, 64), np.float32, 1)
    assert chunks.CODER_LANES in _coders(strata.compress(big, abs_error=1e-3))
    small = _noisy((6, 24, 48), np.float32, 2)
    assert set(_coders(strata.compress(small, rel_error=1e-2))) == {chunks.CODER_SERIAL}


def _patch_level(blob, lv, fn):
    """``blob`` with level ``lv``'s head body changed by ``fn`` (bytearray), its CRC recomputed."""
    r = LossyReader(blob)
    off, n = r._level_offsets[lv], r.header.levels[lv].head_len
    out = bytearray(blob)
    body = bytearray(out[off:off + n - 4])
    fn(body)
    out[off:off + n - 4] = body
    out[off + n - 4:off + n] = struct.pack("<I", crc32(bytes(body)))
    return bytes(out)


def test_unknown_coder_is_refused(monkeypatch):
    blob = _compress(monkeypatch, _noisy((41, 45, 50), np.float32, 4), chunks.CODER_LANES, abs_error=1e-3)

    def bad(body):
        body[0] = (body[0] & 0x0F) | 0x20

    with pytest.raises(CorruptStreamError, match="unknown context grouping or coder"):
        strata.decompress(_patch_level(blob, 1, bad))


@pytest.mark.parametrize("coder", [chunks.CODER_SERIAL, chunks.CODER_LANES])
def test_a_level_read_with_the_other_coder_is_refused(monkeypatch, coder):
    """Swapping the coder of a level (checksums valid) never decodes silently."""
    blob = _compress(monkeypatch, _noisy((41, 45, 50), np.float32, 5), coder, abs_error=1e-3)
    lv = len(LossyReader(blob).header.levels) - 1

    def swap(body):
        body[0] ^= 0x10

    with pytest.raises(CorruptStreamError, match=f"level {lv} chunk"):
        strata.decompress(_patch_level(blob, lv, swap))


@njit
def _place_all(dense, syms, payload, x_end, u_pos, end, itemsize):
    """Codes of ``syms`` placed one after another by the decoder's code placing (with or
    without the branch on the symbol's kind), and the raw bits and stored bytes consumed."""
    codes = np.zeros(syms.size, np.int32)
    out_bytes = np.zeros(syms.size * itemsize, np.uint8)
    acc, nacc, x_pos, u0 = np.int64(0), np.int64(0), np.int64(0), u_pos
    for i in range(syms.size):
        acc, nacc, x_pos, u_pos = chunk_decoder._put(dense, syms[i], np.uint64(i), codes, payload, acc, nacc, x_pos,
                                                     x_end, u_pos, end, out_bytes, itemsize)
    return codes, out_bytes, 8 * x_pos - nacc, u_pos - u0


@pytest.mark.parametrize("itemsize", [4, 8])
def test_code_placing_with_and_without_a_branch_agree(itemsize):
    """The two ways the decoder places codes (chosen per chunk by the density of its raw bits)
    give the same codes, stored values and consumption, whatever the symbols and raw bits."""
    rng = np.random.default_rng(itemsize)
    syms = rng.integers(0, chunk_decoder.ESCAPE + 1, 5000).astype(np.uint8)
    syms[rng.random(5000) < 0.5] = 0  # zero codes among them, as in real chunks
    n_unpred = int((syms == chunk_decoder.ESCAPE).sum())
    x_end = 8 * syms.size  # room for every raw bit
    payload = rng.integers(0, 256, x_end + n_unpred * itemsize + 8).astype(np.uint8)
    a = _place_all(False, syms, payload, x_end, x_end, x_end + n_unpred * itemsize, itemsize)
    b = _place_all(True, syms, payload, x_end, x_end, x_end + n_unpred * itemsize, itemsize)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2:] == b[2:]
    assert a[3] == n_unpred * itemsize and (a[0] == chunk_decoder.UNPREDICTABLE).sum() == n_unpred
    # a stored value missing from the stream is reported by both (u_pos past the end)
    short = x_end + max(0, n_unpred - 1) * itemsize
    if n_unpred:
        assert _place_all(False, syms, payload, x_end, x_end, short, itemsize)[3] > short - x_end
        assert _place_all(True, syms, payload, x_end, x_end, short, itemsize)[3] > short - x_end


@njit
def _tables_of(cmap):
    w = chunks.table_weights(cmap)
    out = np.empty(chunks.N_CONTEXTS, np.int64)
    for ctx in range(chunks.N_CONTEXTS):
        out[ctx] = chunks.table_of(np.uint8(ctx // 9), np.uint8((ctx // 3) % 3), np.uint8(ctx % 3), w)
    return out


@pytest.mark.parametrize("group", range(len(chunks.CONTEXT_GROUPS)))
def test_the_decoders_arithmetic_table_is_the_groupings_table(group):
    """The lanes decoder computes a context's table as ``min(w0 m0 + w1 m1 + w2 m2, t_max)``
    (a loop that vectorizes) instead of looking it up: the same table as the grouping's map
    for each of the 27 contexts, under every grouping a level head can name."""
    assert np.array_equal(_tables_of(chunks.GROUPS[group]), chunks.GROUPS[group])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unpredictable_values_in_few_and_in_many_per_chunk(dtype):
    """The coder copies a chunk's unpredictable values from the places the analysis kept, or,
    past UNPRED_SLOTS of them, finds them again by a walk over the chunk: both come back exact,
    every other value within the bound."""
    from strata.lossy.chunk_encoder import UNPRED_SLOTS

    rng = np.random.default_rng(7)
    a = np.cumsum(np.cumsum(rng.standard_normal((64, 64, 64)), axis=0), axis=2).astype(dtype)
    spikes = np.zeros(a.shape, bool)
    spikes[rng.integers(0, 32, 3), rng.integers(0, 32, 3), rng.integers(0, 32, 3)] = True  # one corner: few
    n_many = 4 * UNPRED_SLOTS
    spikes[rng.integers(33, 64, n_many), rng.integers(33, 64, n_many), rng.integers(33, 64, n_many)] = True
    a[spikes] = dtype(1e30)
    eb = 1e-3
    y = strata.decompress(strata.compress(a, abs_error=eb))
    assert np.array_equal(y[spikes], a[spikes])
    assert np.abs(y[~spikes].astype(np.float64) - a[~spikes].astype(np.float64)).max() <= eb


@pytest.mark.parametrize("group", range(len(chunks.CONTEXT_GROUPS)))
def test_a_forced_context_grouping_codes_the_same_values(monkeypatch, group):
    """``chunk_encoder.level_tables(..., grouping=g)`` (what benchmarks/speed_budget.py forces)
    codes every level under grouping ``g``: the level heads name it, and the stream decodes to
    the same values, bit for bit, as the grouping the encoder chooses (only the entropy coding
    of the same codes differs); a grouping that is not one is refused."""
    a = _noisy((41, 45, 50), np.float32, 11)
    chosen = strata.decompress(strata.compress(a, abs_error=1e-3))
    monkeypatch.setattr(chunk_encoder, "level_tables", functools.partial(chunk_encoder.level_tables, grouping=group))
    blob = strata.compress(a, abs_error=1e-3)
    r = LossyReader(blob)
    for lv in range(len(r.header.levels)):
        assert np.array_equal(r._level_tables(lv).cmap, chunks.CONTEXT_GROUPS[group])
    assert np.array_equal(strata.decompress(blob).view(np.uint32), chosen.view(np.uint32))
    hist = np.zeros((1, chunks.N_CONTEXTS, chunks.ALPHABET), np.int64)
    with pytest.raises(InvalidInputError):
        chunk_encoder.level_tables(hist, grouping=len(chunks.CONTEXT_GROUPS))
