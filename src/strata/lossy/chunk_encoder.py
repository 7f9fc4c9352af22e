"""Encoder of a level's quantization codes, chunk by chunk (:mod:`strata.lossy.chunks` has the
coders, contexts and layout): context analysis and histograms (:func:`analyze`), the context
grouping and tables (:func:`level_tables`), rANS coding of each chunk (:func:`encode`), and the
chunks' bytes assembled (:func:`assemble`, :func:`chunk_lengths`).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange

from .. import varint
from .._numba import serial_runner
from ..entropy import rans, tables
from ..entropy.binning import ALPHABET, DIRECT, ESCAPE, to_symbol, to_symbol_flat, zigzag
from ..entropy.bytecoder import copy_into
from ..errors import InvalidInputError
from .chunks import (
    CODER_LANES,
    GROUPS,
    LANE_SHIFT,
    LANE_UNIT,
    LANES,
    N_CONTEXTS,
    chunk_box,
    chunk_sizes,
    grid_steps,
    magnitude_grid,
    prefetch_row,
    row_start,
)
from .quantize import RADIUS, UNPREDICTABLE

#: Raw bits per symbol of a chunk from which :func:`analyze` bins the worker's next chunk
#: without a branch on whether a code has raw bits (about a tenth of the symbols having some).
#: One thread, the analysis of a level alone, branch -> arithmetic: era5_t2m at 1e-4, finest
#: level (1.75 raw bits a symbol) 5.9-6.2 -> 4.1-4.4 ns/point; ns3d at 1e-3, next-to-finest (0.32) 4.3 ->
#: 3.9; at 0.16 (ns3d192 1e-4, finest) the branch is cheaper, 3.5 against 4.2.
DENSE_RAW_BITS = 0.25

#: Unpredictable values per chunk whose places :func:`analyze` keeps for :func:`encode`, which
#: otherwise walks the chunk's codes again to find them (era5_t2m at 1e-4 has 10-28 in every
#: chunk of its finest level: the walk was a quarter of the rANS coding pass).
UNPRED_SLOTS = 32

#: Where each chunk of a level goes in the encoder's arrays (:func:`layout`): its symbols from
#: ``offsets[c]`` (``n_chunks + 1``), its raw bits from ``raw_offsets[c]``.
ChunkLayout = namedtuple("ChunkLayout", "offsets raw_offsets")

#: What :func:`analyze` finds in a level's chunks, for :func:`encode` and :func:`assemble` (the
#: arrays are described there).
Analysis = namedtuple("Analysis", "syms ctxs n_syms hist raw n_raw n_unpred unpred_at")

#: Where :func:`encode` writes each chunk: ``buf[buf_offsets[c]:buf_offsets[c + 1]]``
#: (:func:`buffer_layout`), ``n_rans[c]`` bytes of rANS at its end.
Coded = namedtuple("Coded", "buf buf_offsets n_rans")

# (The kernels take these, and :data:`~strata.lossy.plan.LevelGeometry`, as plain tuples,
# ``tuple(x)``: numba types a namedtuple argument in Python at every call, 0.7 us for eight
# arrays against 0.1 for a tuple, which a small array's levels would pay dozens of times.)


@njit(parallel=True, nogil=True, cache=True)
def analyze(codes, missing, geometry, layout, out, coder, n_workers):
    """Symbols, contexts, raw bits and histograms of every chunk of a level (encoder, pass 1):
    the level's :data:`~strata.lossy.plan.LevelGeometry`, its :data:`ChunkLayout`, the
    :data:`Analysis` arrays ``out`` filled.

    ``syms``/``ctxs`` (uint8, level points in chunk order, from ``offsets[c]``) receive each
    coded point's symbol and context (for :data:`CODER_LANES`, plus its lane times
    :data:`LANE_UNIT`), ``n_syms[c]`` the number of chunk ``c``'s symbols (its
    points less the missing ones: ``missing`` is the flat uint8 mask, empty without one);
    ``hist[w, ctx, sym]`` (int64, ``w < n_workers``) accumulates the counts of the
    chunks worker ``w`` handled; ``raw[raw_offsets[c]:]`` the raw bits of
    chunk ``c`` (``n_raw[c]`` bytes; room for 3 bytes per point); ``n_unpred[c]`` its number
    of unpredictable values and ``unpred_at[c]`` (int64, ``UNPRED_SLOTS``) the places in
    ``codes`` of the first of them, in coding order.
    """
    shape, stride, refined, base, boxes = geometry
    offsets, raw_offsets = layout
    syms, ctxs, n_syms, hist, raw, n_raw, n_unpred, unpred_at = out
    d0, d1, d2 = grid_steps(shape, stride)
    # chunks differ in cost: each worker takes every n_workers-th chunk
    for w in prange(n_workers):
        # the worker's counts, straight into its own histogram (rows kB apart: no false sharing)
        local = hist[w].reshape(N_CONTEXTS * ALPHABET)
        # raw bits common in the worker's previous chunk: bin the next one without a branch
        dense = False
        for c in range(w, boxes.shape[0], n_workers):
            g = chunk_box(boxes[c], d0, d1, d2, refined, base)
            k0 = offsets[c]
            mags = magnitude_grid(codes, g)
            # (True, False: literals, so each call gets its own compiled loop without the other's path)
            if dense:
                nu, n_out, ns = _analyze_chunk(codes, missing, mags, syms[k0:], ctxs[k0:], local,
                                               raw[raw_offsets[c]:], unpred_at[c], g, coder, True)
            else:
                nu, n_out, ns = _analyze_chunk(codes, missing, mags, syms[k0:], ctxs[k0:], local,
                                               raw[raw_offsets[c]:], unpred_at[c], g, coder, False)
            dense = 8 * n_out >= DENSE_RAW_BITS * ns
            n_syms[c] = ns
            n_raw[c] = n_out
            n_unpred[c] = nu


@njit(nogil=True, _nrt=False)
def _analyze_chunk(codes, missing, mags, syms, ctxs, local, raw, unpred_at, g, coder, dense):
    """One chunk of :func:`analyze` (box ``g``, :data:`~strata.lossy.chunks.ChunkBox`): returns
    ``(unpredictable values, raw bytes written, symbols)``; missing points get no symbol (their
    class stays 0). ``dense``: bin every code by arithmetic alone
    (:func:`~strata.entropy.binning.to_symbol_flat`) and write its raw bits (maybe none), where
    a branch on whether it has any would be mispredicted; the same bytes either way. ``uint64``
    indices (no wraparound code), no reference counting."""
    has_missing = missing.shape[0] > 0
    p1 = g.h2 + 1
    p0 = (g.h1 + 1) * p1
    up0 = np.uint64(p0)
    up1 = np.uint64(p1)
    nu = 0
    acc = np.int64(0)
    nacc = np.int64(0)
    pos = 0
    k = np.uint64(0)
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, p, idx, step = row_start(g, a, b, p0, p1)
            if st == 0:
                continue
            prefetch_row(codes, idx, g.h2, g.d1, g.d2)
            ust = np.uint64(st)
            # the third neighbour: the previous point along axis 2, unless the lanes coder
            # would then wait on it (same level): the next point of the row above instead
            third = up1 - np.uint64(1) if coder == CODER_LANES and st == 1 else np.uint64(1)
            lane = np.uint64(0)
            lane_step = np.uint64(1 if coder == CODER_LANES else 0)
            for _ in range(f, g.lo2 + g.h2, st):
                if has_missing and missing[idx]:
                    p += ust
                    idx += step
                    continue
                ctx = np.uint64(9) * mags[p - up0] + np.uint64(3) * mags[p - up1] + mags[p - third]
                code = np.int64(codes[idx])
                if code == UNPREDICTABLE:
                    sym = ESCAPE
                    if nu < unpred_at.shape[0]:
                        unpred_at[nu] = idx
                    nu += 1
                else:
                    z = zigzag(code - RADIUS)
                    if dense:
                        sym, nbits, extra = to_symbol_flat(z)
                        acc, nacc, pos = rans.bits_put(acc, nacc, raw, pos, extra, nbits)
                    elif z < DIRECT:
                        sym = z
                    else:
                        sym, nbits, extra = to_symbol(z)
                        acc, nacc, pos = rans.bits_put(acc, nacc, raw, pos, extra, nbits)
                mags[p] = (sym > 0) + (sym > 2)
                syms[k] = sym
                ctxs[k] = ctx + lane * np.uint64(LANE_UNIT)
                lane = (lane + lane_step) & np.uint64(LANES - 1)
                local[ctx * np.uint64(ALPHABET) + np.uint64(sym)] += 1
                k += np.uint64(1)
                p += ust
                idx += step
    pos = rans.bits_flush(acc, nacc, raw, pos)
    return nu, pos, np.int64(k)


@njit(parallel=True, nogil=True, cache=True)
def encode(codes, orig_bytes, itemsize, geometry, layout, analysis, ctxmap, enc, out, coder, n_workers):
    """rANS-code every chunk (encoder, pass 2): the level's geometry, layout and
    :data:`Analysis` (:func:`analyze`) in, the context grouping ``ctxmap`` and encoder constants
    ``enc`` (:func:`level_tables`), the :data:`Coded` arrays ``out`` filled; ``orig_bytes``: the
    data's bytes (values of ``itemsize`` bytes), for the unpredictable values.

    Chunk ``c`` is written to ``buf[buf_offsets[c]:buf_offsets[c + 1]]`` as
    ``unpredictable values | (gap) | rANS bytes``, the rANS bytes ending at the region's end;
    ``n_rans[c]`` receives their length (see :func:`assemble`). The unpredictable values are
    read at the places :func:`analyze` kept (``unpred_at``), or found again by a walk over the
    chunk's codes when there are more than ``UNPRED_SLOTS``.
    """
    shape, stride, refined, base, boxes = geometry
    offsets = layout[0]
    syms, ctxs, n_syms, _, _, _, n_unpred, unpred_at = analysis
    buf, buf_offsets, n_rans = out
    d0, d1, d2 = grid_steps(shape, stride)
    flat = enc.ravel()
    n_s = enc.shape[1]
    # chunks differ in cost: each worker takes every n_workers-th chunk
    for w in prange(n_workers):
        states = np.empty(LANES, np.int64)
        for c in range(w, boxes.shape[0], n_workers):
            pos = buf_offsets[c]
            if 0 < n_unpred[c] <= UNPRED_SLOTS:
                for u in range(n_unpred[c]):
                    pos = _put_value(buf, pos, orig_bytes, np.uint64(unpred_at[c, u]), itemsize)
            elif n_unpred[c] > 0:
                g = chunk_box(boxes[c], d0, d1, d2, refined, base)
                for a in range(g.h0):
                    for b in range(g.h1):
                        f, st, _, idx, step = row_start(g, a, b, 0, 0)
                        if st == 0:
                            continue
                        for _ in range(f, g.lo2 + g.h2, st):
                            if codes[idx] == UNPREDICTABLE:
                                pos = _put_value(buf, pos, orig_bytes, idx, itemsize)
                            idx += step
            k0 = offsets[c]
            k1 = k0 + n_syms[c]
            if coder == CODER_LANES:
                n_rans[c] = _encode_chunk_lanes(syms[k0:k1], ctxs[k0:k1], ctxmap, flat, n_s, buf[:buf_offsets[c + 1]],
                                                states)
            else:
                n_rans[c] = _encode_chunk(syms[k0:k1], ctxs[k0:k1], ctxmap, flat, n_s, buf[:buf_offsets[c + 1]])


@njit(inline="always")
def _put_value(buf, pos, orig_bytes, idx, itemsize):
    """Copy the bytes of the value at ``idx`` (``uint64``) of the data (``orig_bytes``, values of
    ``itemsize`` bytes) to ``buf[pos:]``; returns the position after them."""
    o = idx * np.uint64(itemsize)
    for j in range(itemsize):
        buf[pos] = orig_bytes[o + np.uint64(j)]
        pos += 1
    return pos


@njit(nogil=True, _nrt=False)
def _encode_chunk(syms, ctxs, ctxmap, enc, n_s, buf):
    """rANS-code the symbols of a chunk backwards into the end of ``buf``; returns the number
    of bytes written. ``uint64`` indices, no reference counting."""
    n = syms.shape[0]
    end = buf.shape[0]
    rpos = end
    state = np.int64(rans.RANS_L)
    for i in range(n):
        k = np.uint64(n - 1 - i)
        j = rans.encoder_offset(ctxmap[np.uint64(ctxs[k])], syms[k], n_s)
        state, rpos = rans.encode_put_fast(state, buf, rpos, enc, j)
    rpos = rans.encode_flush(state, buf, rpos)
    return end - rpos


@njit(nogil=True, _nrt=False)
def _encode_chunk_lanes(syms, ctxs, ctxmap, enc, n_s, buf, states):
    """:func:`_encode_chunk` for :data:`CODER_LANES`: symbol ``k`` goes through the state of
    its lane (``ctxs[k] // LANE_UNIT``), all lanes writing to one stream backwards; the final
    states are flushed last lane first, so the decoder reads lane 0's first. ``states`` is
    scratch (int64, ``LANES``). Renormalization is a select (:func:`strata.entropy.rans.encode_put_select`:
    ``buf`` has room below the lowest word), not a branch, which the lanes' levels -- a bit and
    more per symbol -- would mispredict: 2.9-3.1 -> 1.9-2.0 ns a symbol at 1e-4 (era5_t2m,
    ns3d192, ns3d), the same at 0.1 bytes a symbol (ns3d192 at 1e-3)."""
    n = syms.shape[0]
    end = buf.shape[0]
    rpos = end
    for j in range(LANES):
        states[j] = rans.RANS_L
    for i in range(n):
        k = np.uint64(n - 1 - i)
        c = np.uint64(ctxs[k])
        lane = c >> np.uint64(LANE_SHIFT)
        j = rans.encoder_offset(ctxmap[c & np.uint64(LANE_UNIT - 1)], syms[k], n_s)
        states[lane], rpos = rans.encode_put_select(states[lane], buf, rpos, enc, j)
    for j in range(LANES - 1, -1, -1):
        rpos = rans.encode_flush(states[j], buf, rpos)
    return end - rpos


@njit(parallel=True, nogil=True, cache=True)
def assemble(coded, analysis, layout, n_unpred_bytes, out, out_offsets):
    """Copy each chunk (:data:`Coded`, raw bits of the :data:`Analysis`, ``n_unpred_bytes[c]``
    bytes of unpredictable values) to ``out[out_offsets[c]:]`` in its final layout (by
    :func:`strata.entropy.bytecoder.copy_into`: a slice assignment compiled without
    ``parallel=True``, as in the serial variant, copies element by element, 8x slower)."""
    buf, buf_offsets, n_rans = coded
    _, _, _, _, raw, n_raw, _, _ = analysis
    raw_offsets = layout[1]
    for c in prange(buf_offsets.shape[0] - 1):
        p = varint.put(out, out_offsets[c], n_rans[c])
        p = varint.put(out, p, n_raw[c])
        r0 = buf_offsets[c + 1] - n_rans[c]
        copy_into(out[p:], buf[r0:r0 + n_rans[c]])
        p += n_rans[c]
        q = raw_offsets[c]
        copy_into(out[p:], raw[q:q + n_raw[c]])
        p += n_raw[c]
        s0 = buf_offsets[c]
        copy_into(out[p:], buf[s0:s0 + n_unpred_bytes[c]])


@njit(nogil=True, cache=True)
def grouped_counts(counts, cmap):
    """Counts ``(27, ALPHABET)`` merged into the tables of a context grouping."""
    n = 0
    for v in cmap:
        n = max(n, v + 1)
    out = np.zeros((n, counts.shape[1]), np.int64)
    for ctx in range(counts.shape[0]):
        for s_ in range(counts.shape[1]):
            out[cmap[ctx], s_] += counts[ctx, s_]
    return out


@njit(nogil=True, cache=True)
def _choose(counts, groups):
    best, best_bits = 0, -1.0
    for g in range(groups.shape[0]):
        bits = tables.cost_bits(grouped_counts(counts, groups[g]))
        if best_bits < 0 or bits < best_bits * 0.995:
            best, best_bits = g, bits
    return best


def level_tables(hist: np.ndarray, grouping: int = -1):
    """From histograms ``(n, 27, ALPHABET)`` (summed over ``n``): the grouping chosen (index
    into :data:`CONTEXT_GROUPS`, smallest estimated size, or ``grouping`` when it is one), its
    serialized tables (:func:`strata.entropy.tables.serialize`), and the encoder constants
    (:func:`strata.entropy.rans.encoder_table`; symbols up to the largest one present).
    ``benchmarks/speed_budget.py`` forces a grouping to measure what the context model costs.

    Raises:
        InvalidInputError: ``grouping`` is neither -1 (choose) nor an index of ``CONTEXT_GROUPS``.
    """
    if not -1 <= grouping < GROUPS.shape[0]:
        raise InvalidInputError(f"context grouping must be -1 or in 0..{GROUPS.shape[0] - 1}, got {grouping}")
    group, table_bytes, enc = _level_tables(hist, GROUPS, int(grouping))
    return group, table_bytes.tobytes(), enc


@njit(nogil=True, cache=True)
def _level_tables(hist, groups, grouping):
    # the symbols up to the largest one present (the same tables, in fewer columns)
    top = 1
    for w in range(hist.shape[0]):
        for ctx in range(hist.shape[1]):
            for s_ in range(top, hist.shape[2]):
                if hist[w, ctx, s_]:
                    top = s_ + 1
    counts = np.zeros((hist.shape[1], top), np.int64)
    for w in range(hist.shape[0]):
        counts += hist[w, :, :top]
    group = _choose(counts, groups) if grouping < 0 else grouping
    codes = tables.approx_code(grouped_counts(counts, groups[group]))
    out = np.empty(codes.shape[0] * (codes.shape[1] + 8), np.uint8)
    n = tables.serialize_into(codes, out)
    return group, out[:n], rans.encoder_table(tables.normalize(tables.approx_value(codes)))


@njit(nogil=True, cache=True)
def layout(boxes, refined, base):
    """Where each chunk's symbols go (``offsets``: ``n_chunks + 1``, the level's points in chunk
    order) and its raw bits (``raw_offsets``: room for 3 bytes a point and 8 more)."""
    sizes = chunk_sizes(boxes, refined, base)
    offsets = np.zeros(sizes.shape[0] + 1, np.int64)
    raw_offsets = np.zeros(sizes.shape[0] + 1, np.int64)
    for c in range(sizes.shape[0]):
        offsets[c + 1] = offsets[c] + sizes[c]
        raw_offsets[c + 1] = raw_offsets[c] + 3 * sizes[c] + 8
    return offsets, raw_offsets


@njit(nogil=True, cache=True)
def buffer_layout(n_unpred, n_syms, itemsize):
    """Bytes of each chunk's unpredictable values and where :func:`encode` writes each chunk
    (``buf_offsets``: room for the values, 2 bytes a symbol, the final states and 4 more)."""
    unpred_bytes = n_unpred * itemsize
    buf_offsets = np.zeros(n_unpred.shape[0] + 1, np.int64)
    for c in range(n_unpred.shape[0]):
        buf_offsets[c + 1] = buf_offsets[c] + unpred_bytes[c] + 2 * n_syms[c] + rans.STATE_BYTES * LANES + 4
    return unpred_bytes, buf_offsets


@njit(nogil=True, cache=True)
def chunk_lengths(n_rans, n_raw, unpred_bytes):
    """Bytes of each chunk: ``varint n_rans | varint n_raw | rANS bytes | raw bits |
    unpredictable values`` (int64 arrays of the chunks' section sizes), and where each one
    starts in the payload (``n_chunks + 1``)."""
    out = np.empty(n_rans.shape[0], np.int64)
    offsets = np.zeros(n_rans.shape[0] + 1, np.int64)
    for c in range(out.shape[0]):
        out[c] = varint.size(n_rans[c]) + varint.size(n_raw[c]) + n_rans[c] + n_raw[c] + unpred_bytes[c]
        offsets[c + 1] = offsets[c] + out[c]
    return out, offsets


#: :func:`analyze`, :func:`encode`, :func:`assemble` or their serial variants (small levels).
runner = serial_runner(analyze, encode, assemble)

__all__ = ["Analysis", "ChunkLayout", "Coded", "analyze", "assemble", "buffer_layout", "chunk_lengths", "encode",
           "grouped_counts", "layout", "level_tables", "runner"]
