"""The missing-value mask coder (strata.lossy.mask) and its binary model
(strata.entropy.binary): bit-exact round trips per level and chunk, region decodes that read
only their chunk boxes, and damaged bytes refused with CorruptStreamError."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from strata.container import check_crc
from strata.entropy import binary, rans
from strata.errors import CorruptStreamError
from strata.lossy import mask
from strata.lossy.partition import Partition, as_3d_shape
from strata.lossy.plan import level_geometry


def _blobs(shape, seed, share):
    """A coherent random mask (thresholded smooth noise) with about ``share`` missing."""
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(shape)
    for ax in range(f.ndim):
        f = np.cumsum(f, axis=ax)
    return f > np.quantile(f, 1 - share) if 0 < share < 1 else np.full(shape, share >= 1)


def _tiles(part, halve):
    t = part.default_tile()
    return [t if lv == 0 or not halve else max(1, t // 2) for lv in range(part.num_levels)]


def _encode(m, halve=False):
    """Every level of mask ``m``: ``(part, tiles, flat mask, [(index, payload), ...])``."""
    part = Partition.get(as_3d_shape(m.shape))
    tiles = _tiles(part, halve)
    flat = np.ascontiguousarray(m, np.uint8).reshape(-1)
    return part, tiles, flat, [mask.encode_level(flat, *level_geometry(part, lv, tiles[lv]))
                               for lv in range(part.num_levels)]


def _decode_level(part, lv, tile, index, payload, out, ids=None):
    """Decode chunks ``ids`` (all by default) of a level into ``out``, checking CRCs as the
    reader does."""
    geo = level_geometry(part, lv, tile)
    offsets, crcs = mask.parse_index(index, len(payload), geo[4].shape[0])
    ids = np.arange(geo[4].shape[0]) if ids is None else np.asarray(ids, np.int64)
    for c in ids:
        check_crc(payload[offsets[c]:offsets[c + 1]], crcs[c], f"mask chunk {c}")
    buf = np.zeros(len(payload) + mask.PAD, np.uint8)
    buf[:len(payload)] = np.frombuffer(payload, np.uint8)
    mask.decode_chunks(buf, offsets[ids], offsets[ids + 1], ids, out, *geo)


def _round_trip(m, halve=False):
    part, tiles, flat, levels = _encode(m, halve)
    out = np.full_like(flat, 7)
    for lv, (index, payload) in enumerate(levels):
        _decode_level(part, lv, tiles[lv], index, payload, out)
    np.testing.assert_array_equal(out, flat)
    return sum(len(i) + len(p) for i, p in levels)


SHAPES = [(1,), (7,), (300,), (40, 33), (200, 130), (5, 17, 33), (70, 20, 24), (3, 4, 9, 10), (2, 3, 40, 50)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("halve", [False, True])
def test_round_trip_shapes_and_tiles(shape, halve):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    for m in (np.zeros(shape, bool), np.ones(shape, bool), rng.random(shape) < 0.3, _blobs(shape, 1, 0.4)):
        _round_trip(m, halve)


def test_uniform_masks_cost_one_byte_per_chunk():
    for fill in (False, True):
        part, tiles, flat, levels = _encode(np.full((70, 20, 24), fill))
        for lv, (_, payload) in enumerate(levels):
            n = level_geometry(part, lv, tiles[lv])[4].shape[0]
            assert payload == bytes([mask.ALL_MISSING if fill else mask.ALL_VALID]) * n


def test_repeated_mask_is_nearly_free():
    """A land mask repeated along axis 0 costs little more than its first slices."""
    land = _blobs((33, 49), 3, 0.3)
    m = np.broadcast_to(land, (400, 33, 49))
    size = _round_trip(m)
    assert 8 * size / m.size < 0.03
    assert 8 * size / m.size < 0.5 * 8 * _round_trip(np.random.default_rng(0).permutation(m.reshape(-1)).reshape(
        m.shape)) / m.size


@pytest.mark.parametrize("halve", [False, True])
def test_region_decode_reads_only_its_chunk_boxes(halve):
    """Chunks of a level decode from the coarser bits inside their boxes alone: every other
    point of the array holds garbage, and their points come out as in a full decode."""
    m = _blobs((60, 40, 52), 5, 0.4)
    part, tiles, flat, levels = _encode(m, halve)
    rng = np.random.default_rng(2)
    for lv in range(1, part.num_levels):
        shape, stride, refined, base, boxes = level_geometry(part, lv, tiles[lv])
        ids = np.sort(rng.choice(boxes.shape[0], size=max(1, boxes.shape[0] // 3), replace=False))
        out = rng.integers(0, 2, flat.size).astype(np.uint8)  # garbage
        grid = out.reshape(part.shape)[::stride[0], ::stride[1], ::stride[2]]
        want = flat.reshape(part.shape)[::stride[0], ::stride[1], ::stride[2]]
        level_pts = np.ones(grid.shape, bool)
        if not base:
            coarse = np.ones(grid.shape, bool)
            for a in range(3):
                if refined[a]:
                    sl = [slice(None)] * 3
                    sl[a] = slice(1, None, 2)
                    coarse[tuple(sl)] = False
            level_pts = ~coarse
        for c in ids:  # the coarser points inside the chosen boxes hold their true bits
            box = tuple(slice(boxes[c, 2 * a], boxes[c, 2 * a + 1]) for a in range(3))
            grid[box][~level_pts[box]] = want[box][~level_pts[box]]
        _decode_level(part, lv, tiles[lv], *levels[lv], out, ids)
        for c in ids:
            box = tuple(slice(boxes[c, 2 * a], boxes[c, 2 * a + 1]) for a in range(3))
            np.testing.assert_array_equal(grid[box], want[box])


def test_progressive_then_region():
    """Levels 0..k decoded in full, then a few chunks of the finest level."""
    m = _blobs((12, 90, 100), 9, 0.5)
    part, tiles, flat, levels = _encode(m)
    out = np.zeros_like(flat)
    last = part.num_levels - 1
    for lv in range(last):
        _decode_level(part, lv, tiles[lv], *levels[lv], out)
    boxes = level_geometry(part, last, tiles[last])[4]
    ids = np.array([0, boxes.shape[0] - 1])
    _decode_level(part, last, tiles[last], *levels[last], out, ids)
    full = out.copy()
    _decode_level(part, last, tiles[last], *levels[last], full)
    np.testing.assert_array_equal(full, flat)
    for c in ids:
        box = tuple(slice(boxes[c, 2 * a], boxes[c, 2 * a + 1]) for a in range(3))
        np.testing.assert_array_equal(out.reshape(part.shape)[box], flat.reshape(part.shape)[box])


@given(shape=st.lists(st.integers(1, 24), min_size=1, max_size=4).map(tuple), seed=st.integers(0, 2**16),
       share=st.sampled_from([0.0, 0.02, 0.3, 0.7, 1.0]), coherent=st.booleans(), halve=st.booleans())
def test_random_masks_round_trip(shape, seed, share, coherent, halve):
    m = _blobs(shape, seed, share) if coherent else np.random.default_rng(seed).random(shape) < share
    _round_trip(m, halve)


# ---------------------------------------------------------------------------- damage
@pytest.mark.parametrize("section", ["index", "payload"])
def test_every_damaged_byte_is_refused(section):
    m = _blobs((20, 30, 40), 4, 0.3)
    part, tiles, flat, levels = _encode(m)
    lv = part.num_levels - 1
    index, payload = levels[lv]
    data = index if section == "index" else payload
    rng = np.random.default_rng(1)
    for pos in rng.choice(len(data), size=min(len(data), 60), replace=False):
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(8))
        args = (bytes(bad), payload) if section == "index" else (index, bytes(bad))
        with pytest.raises(CorruptStreamError):
            _decode_level(part, lv, tiles[lv], *args, np.zeros_like(flat))


def test_index_inconsistencies_are_refused():
    m = _blobs((20, 30, 40), 4, 0.3)
    part, tiles, flat, levels = _encode(m)
    index, payload = levels[-1]
    n = level_geometry(part, part.num_levels - 1, tiles[-1])[4].shape[0]
    with pytest.raises(CorruptStreamError):
        mask.parse_index(index, len(payload) + 1, n)
    with pytest.raises(CorruptStreamError):
        mask.parse_index(index, len(payload), n + 1)
    for cut in (0, 3, 4, len(index) - 1):
        with pytest.raises(CorruptStreamError):
            mask.parse_index(index[:cut], len(payload), n)
    from strata.container import Writer, crc32
    body = index[:-4] + b"\x00"  # a trailing byte, CRC recomputed
    with pytest.raises(CorruptStreamError):
        mask.parse_index(body + crc32(body).to_bytes(4, "little"), len(payload), n)
    body = Writer().varint(1).varint(0).u32(0).getvalue()  # an empty chunk
    with pytest.raises(CorruptStreamError):
        mask.parse_index(body + crc32(body).to_bytes(4, "little"), 0, 1)


def _hostile(geo, chunk, missing):
    buf = np.frombuffer(chunk, np.uint8).copy()
    buf = np.concatenate([buf, np.zeros(mask.PAD, np.uint8)])
    mask.decode_chunks(buf, np.array([0]), np.array([len(chunk)]), np.array([0]), missing, *geo)


@pytest.mark.parametrize("last", [False, True])
def test_hostile_chunks_raise_corrupt_stream_error_only(last):
    """Chunks whose CRC matched but whose bytes are wrong (the encoder's bug or a collision):
    CorruptStreamError, or a decode that stays in bounds."""
    part = Partition.get((1, 100, 90))
    geo = level_geometry(part, part.num_levels - 1 if last else 0)
    miss = np.zeros(9000, np.uint8)
    for chunk in (b"", b"\x03", b"\xff", b"\x00\x00", b"\x01\x05", b"\x02", b"\x02\x00\x80", b"\x02" + b"\xff" * 4):
        with pytest.raises(CorruptStreamError):
            _hostile(geo, chunk, miss)
    rng = np.random.default_rng(0)
    for _ in range(300):
        chunk = bytes([mask.CODED]) + rng.integers(0, 256, int(rng.integers(0, 40)), np.uint8).tobytes()
        try:
            _hostile(geo, chunk, miss)
        except CorruptStreamError:
            pass


# ---------------------------------------------------------------------------- binary model
@njit(cache=True)
def _code_bits_with(bits, ctxs, initial, enc):
    n = bits.shape[0]
    model = initial.copy()
    freqs = np.empty(n, np.int64)
    for i in range(n):
        freqs[i] = binary.freq_of(model, ctxs[i])
        binary.update(model, ctxs[i], bits[i])
    buf = np.zeros(2 * n + 8, np.uint8)
    state, pos = np.int64(1 << 15), buf.shape[0]
    for i in range(n - 1, -1, -1):
        state, pos = binary.encode_bit(state, buf, pos, bits[i], freqs[i], enc)
    pos = rans.encode_flush(state, buf, pos)
    binary.reset(model, initial)
    state, rpos = rans.decode_init(buf, pos, buf.shape[0])
    out = np.empty(n, np.uint8)
    for i in range(n):
        bit, state, rpos = binary.decode_bit(state, binary.freq_of(model, ctxs[i]), buf, rpos, buf.shape[0])
        binary.update(model, ctxs[i], bit)
        out[i] = bit
    return out, buf.shape[0] - pos, state == (1 << 15) and rpos == buf.shape[0]


def _code_bits(bits, ctxs, n_ctx):
    """Encode then decode ``bits`` with contexts ``ctxs``: ``(decoded, n_bytes, ok)``."""
    return _code_bits_with(bits, ctxs, binary.new_model(n_ctx), binary.encoder_constants())


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**16), p=st.sampled_from([0.0, 0.001, 0.1, 0.5, 0.97, 1.0]))
def test_binary_model_round_trip(n, seed, p):
    rng = np.random.default_rng(seed)
    bits = (rng.random(n) < p).astype(np.uint8)
    ctxs = rng.integers(0, 3, n)
    out, _, ok = _code_bits(bits, ctxs, 3)
    assert ok
    np.testing.assert_array_equal(out, bits)


def test_binary_model_adapts():
    rng = np.random.default_rng(0)
    bits = (rng.random(100_000) < 0.05).astype(np.uint8)
    _, nbytes, _ = _code_bits(bits, np.zeros(len(bits), np.int64), 1)
    entropy = -(0.05 * np.log2(0.05) + 0.95 * np.log2(0.95))
    assert 8 * nbytes / len(bits) < 1.05 * entropy  # (the floor rate 1/48 trades some for tracking)
    _, nbytes, _ = _code_bits(np.zeros(100_000, np.uint8), np.zeros(100_000, np.int64), 1)
    assert 8 * nbytes / 100_000 < 0.002  # the 1/2048 floor: 0.0007 bit
    with pytest.raises(ValueError):
        binary.cell(0.0)
    assert binary.cell(0.5) == binary.INITIAL
