"""Entropy coding of one level's quantization codes, chunk by chunk.

Each chunk (a box of a level's grid, see :mod:`strata.lossy.partition`) is coded on its own
with the shared rANS coder (:mod:`strata.entropy.rans`). A code ``q`` is binned into a symbol
plus raw bits (:mod:`strata.entropy.binning`); unpredictable values get the ``ESCAPE`` symbol
and their exact bytes. Symbols are coded in raster order of the chunk with a *context*: the
magnitudes (0, 1, 2 or more) of the codes of the three neighbours one grid step back along
each axis, inside the chunk -- either earlier points of the same level or points of coarser
levels, known to the decoder in both cases. That gives 27 contexts; per level the encoder
merges them into fewer tables when the table bytes would outweigh the gain
(:data:`CONTEXT_GROUPS`). Runs of zero codes in smooth regions then cost a few hundredths of
a bit each, the role zstd plays after Huffman coding in SZ3.

Levels of big chunks take the *lanes* coder (format version 3, :data:`CODER_LANES`): four
interleaved rANS states and contexts that need nothing from the row being decoded, so the
decoder keeps four symbols in flight instead of waiting on each (interleaving after F.
Giesen, "Interleaved entropy coders", arXiv:1402.3392, 2014).

Chunk layout: ``varint n_rans | varint n_raw | rANS bytes | raw bits | unpredictable values``
(little-endian, dtype of the data).

This module holds what encoder and decoder share: the coders, the context model and the chunk
geometry; :mod:`strata.lossy.chunk_encoder` codes a level's chunks, :mod:`strata.lossy.chunk_decoder`
parses a level head and decodes chunks.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from .._numba import prefetch_line
from ..entropy.binning import ALPHABET
from .quantize import UNPREDICTABLE, code_radius

N_CONTEXTS = 27

#: Level coders (the high nibble of a level head's first byte). ``CODER_SERIAL``: one rANS
#: state; the third context neighbour is the previous point along axis 2 (version 2 streams).
#: ``CODER_LANES``: ``LANES`` interleaved states, symbol ``j`` of a row (its coded points, in
#: order) in lane ``j % LANES``, and every context known before the row is decoded (the third
#: neighbour of a point whose previous point is of the same level is the next point of the row
#: above), so the decoder keeps several symbols in flight.
CODER_SERIAL, CODER_LANES = 0, 1
LANES = 4
#: ``ctxs`` of the encoder hold ``context + lane * LANE_UNIT``.
LANE_SHIFT = 5
LANE_UNIT = 1 << LANE_SHIFT
#: Estimated coded bytes per chunk from which a level takes :data:`CODER_LANES` (its three
#: extra states cost 12 bytes a chunk, 1.2 % at most; 1024 rather than 2048 lets the finest
#: level at fine bounds, which is chunked on half the default edge, decode about 40 % faster).
LANES_MIN_CHUNK_BYTES = 1024


def _group_maps():
    ctx = np.arange(N_CONTEXTS)
    m = np.stack([ctx // 9, (ctx // 3) % 3, ctx % 3])
    s = m.sum(axis=0)
    return [
        np.zeros(N_CONTEXTS, np.int64),                      # one table
        np.minimum(s, 2),                                    # 0, 1, >=2 neighbour weight
        s,                                                   # neighbour weight 0..6
        ctx,                                                 # all 27 contexts
    ]


#: Context groupings: for each, the table index of each of the 27 contexts.
CONTEXT_GROUPS = _group_maps()
#: The same, one row per grouping (int64 ``(4, 27)``).
GROUPS = np.stack(CONTEXT_GROUPS).astype(np.int64)


@njit(inline="always")
def table_weights(cmap):
    """``(w0, w1, w2, t_max)`` (uint8) of a grouping ``cmap`` (a row of :data:`GROUPS`): each
    grouping maps the context of neighbour classes ``m0, m1, m2`` to the table
    ``min(w0 m0 + w1 m1 + w2 m2, t_max)`` (:func:`table_of`), arithmetic a compiled loop
    vectorizes, where a lookup in ``cmap`` does not."""
    return np.uint8(cmap[9]), np.uint8(cmap[3]), np.uint8(cmap[1]), np.uint8(cmap[26])


@njit(inline="always")
def table_of(m0, m1, m2, w):
    """The table of the context of classes ``m0, m1, m2`` (uint8) under the weights ``w``
    (:func:`table_weights`): ``cmap[9 m0 + 3 m1 + m2]``."""
    return min(w[0] * m0 + w[1] * m1 + w[2] * m2, w[3])


@njit(inline="always")
def _mag(c, radius):
    if c == UNPREDICTABLE:
        return 2
    m = abs(np.int64(c) - radius)
    return 2 if m > 2 else m


@njit(inline="always")
def level_row(g0, g1, lo2, r0, r1, r2, base):
    """First index and step along axis 2 of the level's points in row ``(g0, g1)``;
    step 0 means the row holds none."""
    if base or (r0 and (g0 & 1)) or (r1 and (g1 & 1)):
        return lo2, 1
    if r2:
        return lo2 | 1, 2
    return 0, 0


#: A chunk as the chunk loops see it: ``h0, h1, h2`` points of the level's grid from ``lo0, lo1,
#: lo2`` along each axis, memory steps ``d0, d1, d2`` between grid points in the arrays, the
#: axes the level refines ``r0, r1, r2`` and whether it is the base level.
ChunkBox = namedtuple("ChunkBox", "h0 h1 h2 lo0 lo1 lo2 d0 d1 d2 r0 r1 r2 base")


@njit(inline="always")
def chunk_box(box, d0, d1, d2, refined, base):
    """:data:`ChunkBox` of the chunk ``box`` (a row ``lo0, hi0, lo1, hi1, lo2, hi2`` of the
    level's boxes), the arrays' steps ``d0, d1, d2`` (:func:`grid_steps`)."""
    lo0, hi0, lo1, hi1, lo2, hi2 = box
    return ChunkBox(hi0 - lo0, hi1 - lo1, hi2 - lo2, lo0, lo1, lo2, d0, d1, d2, refined[0], refined[1], refined[2],
                    base)


@njit(inline="always")
def row_start(g, a, b, p0, p1):
    """Row ``(a, b)`` of the chunk ``g`` (:data:`ChunkBox`): ``(f, st, p, idx, step)``, its first
    index and step along axis 2 (:func:`level_row`; ``st`` 0: no point of the level), the first
    point's place in a chunk-local grid with a one-point low border (planes ``p0``, rows ``p1``
    apart) and in the arrays, and the arrays' step between its points (``uint64``)."""
    f, st = level_row(g.lo0 + a, g.lo1 + b, g.lo2, g.r0, g.r1, g.r2, g.base)
    p = np.uint64((a + 1) * p0 + (b + 1) * p1 + 1 + (f - g.lo2))
    idx = np.uint64((g.lo0 + a) * g.d0 + (g.lo1 + b) * g.d1 + f * g.d2)
    return f, st, p, idx, np.uint64(st * g.d2)


#: Rows of a chunk (along axis 1) ahead of the row being coded whose codes the chunk coders
#: prefetch (:func:`prefetch_row`): a chunk's rows lie far apart in the codes array, too far
#: apart for the hardware prefetchers, and each row of the finest levels reads (encoder) or
#: writes (decoder) its own cache lines. Encoder, ns3d192 at 1e-3, one thread: the finest
#: level's analysis 21.8-30.5 -> 18.5-19.2 ms, the next level's 4.1-5.4 -> 2.7 ms (the whole
#: compression 3-6 % faster on the large fields). Decoder, levels whose rows are at least
#: :data:`PREFETCH_ROW_STEP` points apart, caches cold as in a decompression, minima of 3
#: rounds in alternating processes: ns3d192 at 1e-2 5.30-5.59 -> 4.57-4.80 ns/value, at 1e-3
#: 5.75-5.91 -> 5.18-5.27, ns3d at 1e-3 5.43-6.26 -> 5.14-5.55.
ROWS_AHEAD = 4
#: Row step (points) from which the decoders prefetch: era5_t2m's finest level (rows 49 points
#: apart, the hardware prefetchers keep up) decodes 2-5 % slower with it.
PREFETCH_ROW_STEP = 128


@njit(inline="always")
def prefetch_row(codes, idx, h2, d1, d2):
    """Prefetch the codes of the row ``ROWS_AHEAD`` rows after the one whose first point is at
    ``idx`` (``h2`` points ``d2`` apart, rows ``d1`` apart; past the chunk's last row it
    prefetches lines the chunk does not touch, which costs nothing but the hint)."""
    first = idx + np.uint64(ROWS_AHEAD * d1)
    for k in range(0, h2 * d2, max(16, d2)):
        prefetch_line(codes, first + np.uint64(k))


@njit(inline="always")
def grid_steps(shape, stride):
    """Memory steps ``(d0, d1, d2)`` between neighbouring points of a level's grid (``shape``,
    grid points apart by ``stride`` along each axis, C order)."""
    return stride[0] * shape[1] * shape[2], stride[1] * shape[2], stride[2]


@njit(nogil=True, cache=True)
def chunk_sizes(boxes, refined, base):
    """Number of level points in each chunk box."""
    n = boxes.shape[0]
    out = np.zeros(n, np.int64)
    r0, r1, r2 = refined[0], refined[1], refined[2]
    for c in range(n):
        lo0, hi0, lo1, hi1, lo2, hi2 = boxes[c]
        t = 0
        for g0 in range(lo0, hi0):
            for g1 in range(lo1, hi1):
                f, st = level_row(g0, g1, lo2, r0, r1, r2, base)
                if st > 0 and f < hi2:
                    t += (hi2 - 1 - f) // st + 1
        out[c] = t
    return out


@njit(nogil=True, cache=True)
def magnitude_grid(codes, g):
    """The grid of magnitude classes of the chunk ``g`` (:data:`ChunkBox`) with a zero border on
    the low side of each axis (``(h0 + 1) * (h1 + 1) * (h2 + 1)``, uint8), holding the classes of
    the coarser points inside the chunk; contexts read from it, encoder and decoder alike."""
    p1 = g.h2 + 1
    p0 = (g.h1 + 1) * p1
    mags = np.zeros((g.h0 + 1) * p0, np.uint8)
    if g.base:
        return mags
    for a in range(g.h0):
        for b in range(g.h1):
            f, st = level_row(g.lo0 + a, g.lo1 + b, g.lo2, g.r0, g.r1, g.r2, g.base)
            if st == 1:
                continue
            row = (g.lo0 + a) * g.d0 + (g.lo1 + b) * g.d1
            q = (a + 1) * p0 + (b + 1) * p1 + 1
            g_first = g.lo2 + ((g.lo2 & 1) if st == 2 else 0)
            for g2 in range(g_first, g.lo2 + g.h2, 2 if st == 2 else 1):
                mags[q + g2 - g.lo2] = _mag(codes[row + g2 * g.d2], code_radius(codes))
    return mags


#: Levels of fewer points run on one thread when encoding, as does decoding a single chunk:
#: waking the workers costs more than they save.
SERIAL_POINTS = 1 << 15

__all__ = ["ALPHABET", "CODER_LANES", "CODER_SERIAL", "CONTEXT_GROUPS", "GROUPS", "LANES", "LANES_MIN_CHUNK_BYTES",
           "N_CONTEXTS", "PREFETCH_ROW_STEP", "ROWS_AHEAD", "SERIAL_POINTS", "ChunkBox", "chunk_box", "chunk_sizes",
           "grid_steps", "level_row", "magnitude_grid", "prefetch_row", "row_start", "table_of", "table_weights"]
