"""Lossless coding of the missing-value mask, per level and chunk.

The mask bits of a level's points are coded in chunks: boxes of the level's grid at the
default chunk edge (:func:`strata.lossy.plan.level_geometry` without a tile; the codes may use
half that edge), so a progressive or region read decodes only the mask chunks it touches.
Within a chunk the level's points are visited in raster order
(:func:`strata.lossy.chunks.level_row`), and each bit is coded with an adaptive
binary model (:mod:`strata.entropy.binary`, rANS) in a context made of the neighbours the
decoder knows: inside the chunk box, and either points of coarser levels (decoded with
earlier levels) or earlier points of the chunk; any other neighbour counts as unknown.

**Contexts.** Per axis, the two neighbours at grid distance 1 give a state -- none known,
all known valid, all known missing, mixed -- (``minus | plus`` with unknown 0, valid 1,
missing 2). Real masks are coastlines (neighbours mostly agree: spatial coherence, as in
JBIG's context modelling of bilevel images, ITU-T T.82) and repeat along the slowest axis
(a land mask is the same at every time step; a depth mask grows monotonically with depth).
So the context is a small tree (76 contexts):

* axis 0 known (state 1..3): that state times the state of the four in-plane neighbours
  together (12 contexts). Where the mask repeats, the bit is then nearly certain and costs
  about a thousandth of a bit; the in-plane state catches where land grows.
* axis 0 unknown (the first slice of a chunk, 2-D arrays): the states of axes 1 and 2 and
  of the four in-plane diagonal neighbours together (64 contexts), for coastline shapes.

Measured on a depth-varying basin mask (33x180x360), a 2-D coastline (823x726) and three
time-invariant coastlines repeated 744 times (744x33x49), against one context per triple of
axis states (64 contexts): 4-23 % more; the in-plane states kept apart where axis 0 is known:
up to 20 % more (more contexts to learn in each chunk); axis 0 split into its two sides:
1 % less on the depth mask, 5-7 % more on the others; counts of known valid and missing
neighbours over the in-plane 3x3 square: 3 % less in 2-D, 20-150 % more in 3-D. Every chunk
starts its model afresh from fixed priors: a context whose known neighbours all agree starts
at probability 1/64 of the other value, as if 8 bits had been seen (starting at 1/2 costs
1-16 % more).

What a chunk costs beyond its bits: its first slice along axis 0, coded without axis 0, and
about 11 bytes of framing (length and CRC-32 in the index, mode byte, rANS state): halving
the chunk edge would roughly triple the mask of a time-invariant coastline, which is why the
mask keeps the default edge.

Chunk layout: one mode byte -- ``ALL_VALID``, ``ALL_MISSING`` (nothing follows) or ``CODED``
-- then, for ``CODED``, the rANS bytes (final state first).

Index of a level's mask (its own section): ``varint n_chunks | n_chunks varint chunk lengths
| n_chunks u32 CRC-32 of each chunk | u32 CRC-32 of the index before it``.
"""
from __future__ import annotations

import struct

import numpy as np
from numba import njit, prange

from .. import varint
from .._numba import serial_runner, workers
from ..container import Writer, checked_body, crc32
from ..entropy import binary, rans
from ..errors import CorruptStreamError
from .chunks import chunk_box, grid_steps, level_row, row_start

#: Chunk modes (the first byte of a chunk).
ALL_VALID, ALL_MISSING, CODED = 0, 1, 2
#: Contexts of the binary model: 12 with axis 0 known, 64 without.
N_CONTEXTS = 76
#: Prior of a context whose known neighbours all agree: probability of the other value, and
#: the number of bits it weighs as.
PRIOR_P, PRIOR_COUNT = 1 / 64, 8
#: Bytes of zero padding :func:`decode_chunks` needs after the last chunk of its payload.
PAD = 0
#: Work of fewer grid points is coded on one thread (waking the workers costs more).
SERIAL_POINTS = 1 << 15
#: Errors of :func:`decode_chunks`, by status.
CHUNK_ERRORS = {1: "empty chunk", 2: "bad mode byte", 3: "bad length", 4: "rANS data not consumed exactly"}

# Values of a chunk's neighbour grid: 0 unknown (outside the box or not decoded yet).
_VALID, _MISSING = 1, 2
_AXIS0_CONTEXTS = 12


def _priors() -> np.ndarray:
    """Initial model of every chunk (int32 ``(N_CONTEXTS,)``, see the module docstring)."""
    out = np.empty(N_CONTEXTS, np.int32)
    for ctx in range(N_CONTEXTS):
        if ctx < _AXIS0_CONTEXTS:
            known = (ctx // 4 + 1) | (ctx % 4)
        else:
            c = ctx - _AXIS0_CONTEXTS
            known = (c >> 4) | ((c >> 2) & 3) | (c & 3)
        if known == _VALID:
            out[ctx] = binary.cell(PRIOR_P, PRIOR_COUNT)
        elif known == _MISSING:
            out[ctx] = binary.cell(1 - PRIOR_P, PRIOR_COUNT)
        else:
            out[ctx] = binary.INITIAL
    return out


#: Initial model of every chunk.
PRIORS = _priors()


@njit(nogil=True, _nrt=False)
def _fill_coarser(grid, missing, g):
    """Write the mask of the coarser points inside the chunk box into ``grid`` (uint8, the box
    with a one-point border on both sides of each axis, zeroed): ``_VALID`` or
    ``_MISSING`` at each, level points and border left 0 (chunk ``g``,
    :data:`~strata.lossy.chunks.ChunkBox`)."""
    if g.base:
        return
    p1 = g.h2 + 2
    p0 = (g.h1 + 2) * p1
    for a in range(g.h0):
        for b in range(g.h1):
            f, st = level_row(g.lo0 + a, g.lo1 + b, g.lo2, g.r0, g.r1, g.r2, g.base)
            if st == 1:
                continue
            row = (g.lo0 + a) * g.d0 + (g.lo1 + b) * g.d1
            q = (a + 1) * p0 + (b + 1) * p1 + 1 - g.lo2
            g_first = g.lo2 + ((g.lo2 & 1) if st == 2 else 0)
            for g2 in range(g_first, g.lo2 + g.h2, 2 if st == 2 else 1):
                grid[np.uint64(q + g2)] = _VALID + (missing[np.uint64(row + g2 * g.d2)] != 0)


@njit(inline="always")
def _context(grid, p, u0, u1):
    """Context (``0 .. N_CONTEXTS - 1``) of the point at ``grid[p]`` (``u0``, ``u1``: grid
    steps along axes 0 and 1). An axis's state is ``minus | plus`` of its two neighbours (0
    none known, 1 all known valid, 2 all known missing, 3 mixed); see the module docstring."""
    one = np.uint64(1)
    s0 = np.uint64(grid[p - u0] | grid[p + u0])
    s1 = np.uint64(grid[p - u1] | grid[p + u1])
    s2 = np.uint64(grid[p - one] | grid[p + one])
    if s0 != 0:
        return ((s0 - one) << np.uint64(2)) | s1 | s2
    d = np.uint64(grid[p - u1 - one] | grid[p - u1 + one] | grid[p + u1 - one] | grid[p + u1 + one])
    return np.uint64(_AXIS0_CONTEXTS) + ((s1 << np.uint64(4)) | (s2 << np.uint64(2)) | d)


@njit(nogil=True, _nrt=False)
def _count_missing(missing, g):
    """``(level points, missing ones)`` of the chunk ``g``."""
    n = 0
    m = 0
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, _, idx, step = row_start(g, a, b, 0, 0)
            if st == 0:
                continue
            for _ in range(f, g.lo2 + g.h2, st):
                m += missing[idx] != 0
                n += 1
                idx += step
    return n, m


@njit(parallel=True, nogil=True, cache=True)
def count(missing, shape, stride, refined, base, boxes, n_points, n_missing, n_workers):
    """Level points and missing ones of every chunk (int64 ``n_points``, ``n_missing``)."""
    d0, d1, d2 = grid_steps(shape, stride)
    for w in prange(n_workers):
        for c in range(w, boxes.shape[0], n_workers):
            n_points[c], n_missing[c] = _count_missing(missing, chunk_box(boxes[c], d0, d1, d2, refined, base))


@njit(nogil=True, _nrt=False)
def _model_chunk(missing, grid, model, bits, freqs, g):
    """Encoder's forward pass over a chunk: each level point's bit (``bits``, uint8) and the
    frequency of bit 1 it is coded with (``freqs``, uint16), in raster order; returns their
    number. ``grid`` holds the coarser points (:func:`_fill_coarser`) and receives the
    chunk's bits as they are modelled, as in the decoder (chunk ``g``)."""
    p1 = g.h2 + 2
    p0 = (g.h1 + 2) * p1
    u0, u1 = np.uint64(p0), np.uint64(p1)
    k = np.uint64(0)
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, p, idx, step = row_start(g, a, b, p0, p1)
            if st == 0:
                continue
            ust = np.uint64(st)
            for _ in range(f, g.lo2 + g.h2, st):
                ctx = _context(grid, p, u0, u1)
                bit = np.uint8(missing[idx] != 0)
                freqs[k] = binary.freq_of(model, ctx)
                bits[k] = bit
                binary.update(model, ctx, bit)
                grid[p] = _VALID + bit
                k += np.uint64(1)
                p += ust
                idx += step
    return np.int64(k)


@njit(nogil=True, _nrt=False)
def _encode_bits(bits, freqs, n, buf, enc):
    """rANS-code ``bits[:n]`` backwards into the end of ``buf``; returns the bytes written."""
    end = buf.shape[0]
    pos = end
    state = np.int64(rans.RANS_L)
    for i in range(n):
        k = np.uint64(n - 1 - i)
        state, pos = binary.encode_bit(state, buf, pos, bits[k], np.int64(freqs[k]), enc)
    pos = rans.encode_flush(state, buf, pos)
    return end - pos


@njit(parallel=True, nogil=True, cache=True)
def encode(missing, shape, stride, refined, base, boxes, modes, buf, buf_offsets, n_bytes, enc, n_workers):
    """Code every chunk of mode ``CODED``: its rANS bytes end at ``buf[buf_offsets[c + 1]]``,
    ``n_bytes[c]`` receives their number (``buf_offsets`` leaves ``2 * points + 8`` bytes per
    coded chunk)."""
    d0, d1, d2 = grid_steps(shape, stride)
    for w in prange(n_workers):
        model = np.empty(N_CONTEXTS, np.int32)
        for c in range(w, boxes.shape[0], n_workers):
            if modes[c] != CODED:
                continue
            g = chunk_box(boxes[c], d0, d1, d2, refined, base)
            grid = np.zeros((g.h0 + 2) * (g.h1 + 2) * (g.h2 + 2), np.uint8)
            _fill_coarser(grid, missing, g)
            bits = np.empty(g.h0 * g.h1 * g.h2, np.uint8)
            freqs = np.empty(g.h0 * g.h1 * g.h2, np.uint16)
            binary.reset(model, PRIORS)
            n = _model_chunk(missing, grid, model, bits, freqs, g)
            n_bytes[c] = _encode_bits(bits, freqs, n, buf[:buf_offsets[c + 1]], enc)


@njit(nogil=True, _nrt=False)
def _decode_chunk(payload, pos, end, missing, grid, model, g):
    """Decode a ``CODED`` chunk's bits (rANS bytes ``payload[pos:end]``) into ``missing``;
    True if the stream was consumed exactly and ended in the encoder's initial state."""
    state, pos = rans.decode_init(payload, pos, end)
    if state < rans.RANS_L:
        return False
    p1 = g.h2 + 2
    p0 = (g.h1 + 2) * p1
    u0, u1 = np.uint64(p0), np.uint64(p1)
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, p, idx, step = row_start(g, a, b, p0, p1)
            if st == 0:
                continue
            ust = np.uint64(st)
            for _ in range(f, g.lo2 + g.h2, st):
                ctx = _context(grid, p, u0, u1)
                bit, state, pos = binary.decode_bit(state, binary.freq_of(model, ctx), payload, pos, end)
                binary.update(model, ctx, bit)
                grid[p] = _VALID + bit
                missing[idx] = bit
                p += ust
                idx += step
    return state == rans.RANS_L and pos == end


@njit(nogil=True, _nrt=False)
def _fill_chunk(missing, value, g):
    """Set every level point of the chunk ``g`` to ``value``."""
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, _, idx, step = row_start(g, a, b, 0, 0)
            if st == 0:
                continue
            for _ in range(f, g.lo2 + g.h2, st):
                missing[idx] = value
                idx += step


@njit(parallel=True, nogil=True, cache=True)
def decode(payload, starts, ends, chunk_ids, missing, shape, stride, refined, base, boxes, errors, n_workers):
    """Decode chunks ``chunk_ids`` (at ``payload[starts[j]:ends[j]]``) into ``missing``;
    ``errors[j]`` receives a key of :data:`CHUNK_ERRORS` for an inconsistent chunk."""
    d0, d1, d2 = grid_steps(shape, stride)
    for w in prange(n_workers):
        model = np.empty(N_CONTEXTS, np.int32)
        for j in range(w, chunk_ids.shape[0], n_workers):
            g = chunk_box(boxes[chunk_ids[j]], d0, d1, d2, refined, base)
            start, end = starts[j], ends[j]
            if end <= start:
                errors[j] = 1
                continue
            mode = payload[start]
            if mode == CODED:
                grid = np.zeros((g.h0 + 2) * (g.h1 + 2) * (g.h2 + 2), np.uint8)
                _fill_coarser(grid, missing, g)
                binary.reset(model, PRIORS)
                if not _decode_chunk(payload, start + 1, end, missing, grid, model, g):
                    errors[j] = 4
            elif mode > CODED:
                errors[j] = 2
            elif end != start + 1:
                errors[j] = 3
            else:
                _fill_chunk(missing, mode, g)


@njit(nogil=True, cache=True)
def _assemble(modes, buf, buf_offsets, n_bytes, out, out_offsets):
    """Each chunk's final bytes (mode byte, then its rANS bytes) to ``out[out_offsets[c]:]``."""
    for c in range(modes.shape[0]):
        p = out_offsets[c]
        out[p] = modes[c]
        q = buf_offsets[c + 1] - n_bytes[c]
        for k in range(n_bytes[c]):
            out[p + 1 + k] = buf[q + k]


_runner = serial_runner(count, encode, decode)


def encode_level(missing: np.ndarray, shape, stride, refined, base, boxes) -> tuple[bytes, bytes]:
    """Code the mask bits of one level's points.

    Args:
        missing: flat uint8 mask of the full-resolution internal 3D array (1 = missing).
        shape, stride, refined, base, boxes: the level's geometry
            (:func:`strata.lossy.plan.level_geometry`).

    Returns:
        ``(index, payload)``: the level's mask index (see the module docstring) and its
        chunks, concatenated.
    """
    missing = np.ascontiguousarray(missing, dtype=np.uint8).reshape(-1)
    n_chunks = boxes.shape[0]
    n_workers = workers(n_chunks)
    n_points = np.zeros(n_chunks, np.int64)
    n_missing = np.zeros(n_chunks, np.int64)
    small = int(np.prod(-(-shape // stride))) < SERIAL_POINTS  # (grid points: the work to do)
    _runner(count, small)(missing, shape, stride, refined, base, boxes, n_points, n_missing, n_workers)
    modes = np.full(n_chunks, CODED, np.uint8)
    modes[n_missing == 0] = ALL_VALID
    modes[(n_missing == n_points) & (n_points > 0)] = ALL_MISSING
    coded = modes == CODED
    buf_offsets = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(np.where(coded, 2 * n_points + 8, 0), out=buf_offsets[1:])
    buf = np.empty(int(buf_offsets[-1]), np.uint8)
    n_bytes = np.zeros(n_chunks, np.int64)
    if coded.any():
        _runner(encode, small)(missing, shape, stride, refined, base, boxes, modes, buf, buf_offsets, n_bytes,
                               binary.encoder_constants(), n_workers)
    lens = 1 + n_bytes
    out_offsets = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(lens, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), np.uint8)
    _assemble(modes, buf, buf_offsets, n_bytes, out, out_offsets)
    payload = out.tobytes()
    index = Writer().varint(n_chunks).varints(lens).crcs(payload, out_offsets).getvalue()
    return index + struct.pack("<I", crc32(index)), payload


def parse_index(index_bytes, payload_len: int, n_chunks_expected: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate and parse a level's mask index.

    Args:
        index_bytes: the index section (bytes-like), its CRC-32 last.
        payload_len: length of the level's mask payload.
        n_chunks_expected: number of chunks of the level (from its geometry).

    Returns:
        ``(offsets, crcs)``: int64 ``(n_chunks + 1,)`` chunk offsets in the payload, and the
        CRC-32 of each chunk (int64 ``(n_chunks,)``).

    Raises:
        CorruptStreamError: CRC mismatch, wrong chunk count, lengths not adding up to
            ``payload_len``, truncated or trailing bytes.
    """
    body = np.frombuffer(checked_body(bytes(index_bytes), "mask index", 1), np.uint8)
    head, pos = varint.get_many(body, 0, body.shape[0], 1)
    n = int(head[0])
    if pos < 0 or n != n_chunks_expected:
        raise CorruptStreamError(f"mask index lists {n if pos >= 0 else '?'} chunks, the level has "
                                 f"{n_chunks_expected}")
    if n > len(body):
        raise CorruptStreamError("mask index too short for its chunks")
    lens, pos = varint.get_many(body, pos, body.shape[0], n)
    if pos < 0:
        raise CorruptStreamError("truncated or malformed mask chunk lengths")
    if np.any(lens < 1):
        raise CorruptStreamError("empty mask chunk")
    if np.any(lens > payload_len):  # (no sum of lengths can then wrap around to it)
        raise CorruptStreamError(f"a mask chunk is longer than the mask payload ({payload_len} bytes)")
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] != payload_len:
        raise CorruptStreamError(f"mask chunk lengths add up to {int(offsets[-1])}, the payload has {payload_len}")
    if pos + 4 * n != len(body):
        raise CorruptStreamError("truncated mask chunk checksums or trailing bytes in the mask index")
    crcs = np.frombuffer(body[pos:].tobytes(), "<u4").astype(np.int64)
    return offsets, crcs


def decode_chunks(payload: np.ndarray, starts, ends, chunk_ids, missing: np.ndarray, shape, stride, refined, base,
                  boxes) -> None:
    """Decode the mask bits of some chunks of a level into ``missing``.

    Args:
        payload: uint8 array holding the chunks (their CRCs already checked), followed by
            :data:`PAD` bytes.
        starts, ends: int64 ``(n,)``: chunk ``chunk_ids[j]`` is ``payload[starts[j]:ends[j]]``.
        chunk_ids: int64 ``(n,)`` chunk indices into ``boxes``.
        missing: flat uint8 mask of the full-resolution internal 3D array, written at the
            level points of the chunks (0 or 1); it must hold the bits of the coarser points
            inside those chunk boxes.
        shape, stride, refined, base, boxes: the level's geometry
            (:func:`strata.lossy.plan.level_geometry`).

    Raises:
        CorruptStreamError: a chunk is inconsistent (empty, bad mode byte, wrong length, rANS
            data not consumed exactly or ending in the wrong state).
        ValueError: arguments out of range (a caller's bug, not the stream's).
    """
    payload = np.asarray(payload, np.uint8)
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    chunk_ids = np.asarray(chunk_ids, np.int64)
    n = len(chunk_ids)
    if n == 0:
        return
    if not (len(starts) == len(ends) == n and missing.dtype == np.uint8 and missing.size == int(np.prod(shape))):
        raise ValueError("decode_chunks: inconsistent argument shapes")
    if (chunk_ids.min() < 0 or chunk_ids.max() >= boxes.shape[0] or starts.min() < 0
            or np.any(ends < starts) or ends.max() + PAD > len(payload)):
        raise ValueError("decode_chunks: chunk ids or byte ranges out of range")
    errors = np.zeros(n, np.int64)
    n_workers = workers(n)
    sel = boxes[chunk_ids]
    small = n == 1 or int(np.prod(sel[:, 1::2] - sel[:, ::2], axis=1).sum()) < SERIAL_POINTS
    _runner(decode, small)(payload, starts, ends, chunk_ids, missing, shape, stride, refined, base, boxes, errors,
                            n_workers)
    if errors.any():
        j = int(np.flatnonzero(errors)[0])
        raise CorruptStreamError(f"mask chunk {int(chunk_ids[j])}: {CHUNK_ERRORS[int(errors[j])]}")


__all__ = ["ALL_MISSING", "ALL_VALID", "CODED", "N_CONTEXTS", "PAD", "decode_chunks", "encode_level", "parse_index"]
