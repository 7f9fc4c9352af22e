"""Decoder of a level's quantization codes, chunk by chunk (:mod:`strata.lossy.chunks` has the
coders, contexts and layout): the level head (:func:`parse_level_head`), then each chunk's symbols
decoded and placed as codes (:func:`decode`: :data:`~strata.lossy.chunks.CODER_SERIAL` one rANS
state, :data:`~strata.lossy.chunks.CODER_LANES` four).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .. import varint
from .._numba import serial_runner
from ..entropy import rans, tables
from ..entropy.binning import ALPHABET, DIRECT, ESCAPE, SYMBOL_BASE, SYMBOL_EXTRA_BITS, unzigzag
from .chunks import (
    CODER_LANES,
    LANES,
    PREFETCH_ROW_STEP,
    chunk_box,
    grid_steps,
    magnitude_grid,
    prefetch_row,
    row_start,
    table_of,
    table_weights,
)
from .quantize import NARROW_RADIUS, RADIUS, UNPREDICTABLE, code_radius

_SLOT_MASK = tables.SCALE - 1


@njit(inline="always")
def _symbol(ctx, sa, payload, rpos, r_end, symbols, info, zero):
    """Decode one symbol of context ``ctx`` with state ``sa``: ``(symbol, state, rpos)``.

    Symbol 0 owns the first ``zero[ctx]`` slots of its table: where it is the common case
    (``zero`` is all 0 otherwise), a well-predicted branch settles it without a table load,
    which takes the table off the dependency chain. The other path has no data-dependent
    branch. A symbol above ``ESCAPE`` comes only from an unused table of a corrupted stream:
    the caller rejects the chunk; meanwhile every index stays in bounds (slots are masked,
    reads clamped to ``r_end``, which the padded ``payload`` extends past)."""
    slot = sa & _SLOT_MASK
    z = zero[ctx]
    if slot < z:  # symbol 0: rarely needs a word, so a branch (well predicted) is cheapest
        sa = z * (sa >> tables.SCALE_BITS) + slot
        if sa < rans.RANS_L:
            q = np.uint64(min(rpos, r_end))
            sa = (sa << 16) | np.int64(payload[q]) | (np.int64(payload[q + np.uint64(1)]) << 8)
            rpos += 2
        return np.uint8(0), sa, rpos
    sym, inf = rans.decode_lookup(sa, symbols, info, ctx)
    sa, rpos = rans.decode_step_select(sa, inf, payload, rpos, r_end)
    return sym, sa, rpos


#: Where a chunk's three sections lie in the payload: rANS bytes ``[r_pos, r_end)``, raw bits
#: ``[r_end, x_end)``, unpredictable values ``[x_end, end)``; ``dense``: the raw bits are at
#: least :data:`RAW_DENSE` a point of the chunk's box.
Sections = namedtuple("Sections", "r_pos r_end x_end end dense")

#: Raw bits per point of a chunk's box (``8 * raw bytes / box points``) from which the decoder
#: places codes without a branch on the symbol's kind (:func:`_put_code_flat`): one thread,
#: era5_t2m at 1e-4 (2 raw bits a point) 10.5 -> 8.3 ns/value, ns3d at 1e-4 (1 bit) 8.9 -> 7.4;
#: below it (era5_t2m at 1e-3: 0.2 bits) the branch is predicted and cheaper.
RAW_DENSE = 0.5
#: ``q`` of each symbol below ``DIRECT`` (no raw bits).
_DIRECT_Q = [(z + 1) >> 1 if z & 1 else -(z >> 1) for z in range(DIRECT)]
#: Code of each symbol below ``DIRECT``, for int32 and for narrow codes (:func:`_direct_code`).
_DIRECT_CODES = np.array([RADIUS + q for q in _DIRECT_Q], np.int32)
_DIRECT_CODES_NARROW = np.array([NARROW_RADIUS + q for q in _DIRECT_Q], np.uint16)


def _direct_code(codes, sym):
    """The code of symbol ``sym`` (below ``DIRECT``) in the representation of ``codes``
    (:func:`strata.lossy.quantize.code_radius`): a load from the table of that representation."""
    return (_DIRECT_CODES_NARROW if codes.dtype == np.uint16 else _DIRECT_CODES)[sym]


@overload(_direct_code, inline="always")
def _direct_code_compiled(codes, sym):
    table = _DIRECT_CODES_NARROW if codes.dtype == types.uint16 else _DIRECT_CODES

    def impl(codes, sym):
        return table[sym]

    return impl


@njit(inline="always")
def _put_stored(idx, codes, payload, u_pos, end, out_bytes, itemsize):
    """An unpredictable value at ``idx``: ``UNPREDICTABLE`` in ``codes``, its stored bytes (from
    ``u_pos``) copied to ``out_bytes``; returns the next ``u_pos``, past ``end`` (nothing
    copied) when the value is missing from the stream."""
    codes[idx] = UNPREDICTABLE
    if u_pos + itemsize > end:
        return end + 1
    o = idx * np.uint64(itemsize)
    for j in range(itemsize):
        out_bytes[o + np.uint64(j)] = payload[np.uint64(u_pos + j)]
    return u_pos + itemsize


@njit(inline="always")
def _put_code(sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize):
    """The code of a decoded symbol at ``codes[idx]``: with its raw bits (the bit reader
    ``acc, nacc, x_pos``; ``payload`` padded by 4 bytes past ``x_end``) or, for an
    unpredictable value, its stored bytes (from ``u_pos``) copied to ``out_bytes``. Returns
    ``(acc, nacc, x_pos, u_pos)``; ``u_pos`` passes ``end`` when a stored value is missing
    (nothing is copied then)."""
    if sym < DIRECT:
        codes[idx] = _direct_code(codes, sym)
    elif sym < ESCAPE:
        acc, nacc, x_pos = rans.bits_refill(acc, nacc, payload, x_pos, x_end)
        nb = SYMBOL_EXTRA_BITS[sym]
        z = SYMBOL_BASE[sym] + (acc & ((np.int64(1) << nb) - 1))
        acc >>= nb
        nacc -= nb
        codes[idx] = code_radius(codes) + unzigzag(z)
    else:
        u_pos = _put_stored(idx, codes, payload, u_pos, end, out_bytes, itemsize)
    return acc, nacc, x_pos, u_pos


@njit(inline="always")
def _put_code_flat(sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize):
    """:func:`_put_code` without a branch on whether the symbol has raw bits (a symbol below
    ``DIRECT`` reads 0 of them): for chunks where raw bits are common, where that branch
    would be mispredicted. The bit reader is topped up by a select, from ``min(x_pos, x_end)``."""
    need = nacc < 32
    q = np.uint64(min(x_pos, x_end))
    acc |= (_read_u32(payload, q) << nacc) if need else np.int64(0)
    nacc += 32 if need else 0
    x_pos += 4 if need else 0
    nb = SYMBOL_EXTRA_BITS[sym]
    z = SYMBOL_BASE[sym] + (acc & ((np.int64(1) << nb) - 1))
    acc >>= nb
    nacc -= nb
    odd = z & 1
    if sym < ESCAPE:
        codes[idx] = code_radius(codes) + ((z + odd) >> 1) * (2 * odd - 1)
        return acc, nacc, x_pos, u_pos
    return acc, nacc, x_pos, _put_stored(idx, codes, payload, u_pos, end, out_bytes, itemsize)


@njit(inline="always")
def _put(flat, sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize):
    """:func:`_put_code_flat` if ``flat``, else :func:`_put_code`."""
    if flat:
        return _put_code_flat(sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize)
    return _put_code(sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize)


@njit(nogil=True, _nrt=False)
def _decode_serial(payload, sec, symbols, info, zero, mags, missing, codes, out_bytes, itemsize, g):
    """Decode a :data:`CODER_SERIAL` chunk (box ``g``, sections ``sec``): its symbols in raster
    order, each one's code straight to ``codes`` (:func:`_put`), a missing point's that of
    ``q = 0``.

    ``mags`` is the chunk's grid with a zero border on the low side of each axis, shape
    ``(h0 + 1) * (h1 + 1) * (h2 + 1)``, pre-filled with the magnitude classes of coarser
    points; contexts are read from it and each decoded point's class is written to it.
    ``symbols``/``info`` are the split decode tables of the 27 contexts, ``zero`` the slots
    of symbol 0 per context where the fast path is on (see :func:`_symbol`). Missing points
    (``missing``, the flat uint8 mask, empty without one) have no symbol and keep class 0.
    Returns ``(status, rpos, raw bits consumed, u_pos)``: status 2 on an invalid symbol, 3 when
    the final state is not the encoder's initial one. In levels whose rows lie
    ``PREFETCH_ROW_STEP`` points apart or more, the codes ``ROWS_AHEAD`` rows ahead are
    prefetched (:func:`~strata.lossy.chunks.prefetch_row`).

    The loop touches only chunk-local buffers, the tables and the chunk's codes, with
    ``uint64`` indices (no negative-index wraparound code) and no reference counting
    (``_nrt=False``).
    """
    p1 = g.h2 + 1
    p0 = (g.h1 + 1) * p1
    up0 = np.uint64(p0)
    up1 = np.uint64(p1)
    has_missing = missing.shape[0] > 0
    far = g.d1 >= PREFETCH_ROW_STEP
    r_end, x_end, end, dense = sec.r_end, sec.x_end, sec.end, sec.dense
    sa, rpos = rans.decode_init(payload, sec.r_pos, r_end)
    if sa < rans.RANS_L:
        return 2, rpos, 0, 0
    acc, nacc, x_pos, u_pos = np.int64(0), np.int64(0), r_end, x_end
    top = np.uint8(0)
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, p, idx, step = row_start(g, a, b, p0, p1)
            if st == 0:
                continue
            if far:
                prefetch_row(codes, idx, g.h2, g.d1, g.d2)
            if has_missing:
                # the general loop, skipping missing points (the two below assume none)
                for _ in range(f, g.lo2 + g.h2, st):
                    if missing[idx] == 0:
                        ctx = np.uint64(9) * mags[p - up0] + np.uint64(3) * mags[p - up1] + mags[p - np.uint64(1)]
                        sym, sa, rpos = _symbol(ctx, sa, payload, rpos, r_end, symbols, info, zero)
                        top = max(top, sym)
                        mags[p] = (sym > 0) + (sym > 2)
                        acc, nacc, x_pos, u_pos = _put(dense, sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos,
                                                            end, out_bytes, itemsize)
                    else:
                        codes[idx] = code_radius(codes)  # (a missing value's code: q = 0)
                    p += np.uint64(st)
                    idx += step
            # The two loops differ only in where the previous point's class comes from: a
            # register (st == 1) keeps a store-to-load round trip off the serial dependency
            # chain; for st == 2 the previous point is coarser and in the grid.
            elif st == 1:
                prev = np.uint64(0)
                for _ in range(f, g.lo2 + g.h2):
                    ctx = np.uint64(9) * mags[p - up0] + np.uint64(3) * mags[p - up1] + prev
                    sym, sa, rpos = _symbol(ctx, sa, payload, rpos, r_end, symbols, info, zero)
                    top = max(top, sym)
                    prev = np.uint64((sym > 0) + (sym > 2))
                    mags[p] = prev
                    acc, nacc, x_pos, u_pos = _put(dense, sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos,
                                                        end, out_bytes, itemsize)
                    p += np.uint64(1)
                    idx += step
            else:
                for _ in range(f, g.lo2 + g.h2, 2):
                    ctx = np.uint64(9) * mags[p - up0] + np.uint64(3) * mags[p - up1] + mags[p - np.uint64(1)]
                    sym, sa, rpos = _symbol(ctx, sa, payload, rpos, r_end, symbols, info, zero)
                    top = max(top, sym)
                    mags[p] = (sym > 0) + (sym > 2)
                    acc, nacc, x_pos, u_pos = _put(dense, sym, idx, codes, payload, acc, nacc, x_pos, x_end, u_pos,
                                                        end, out_bytes, itemsize)
                    p += np.uint64(2)
                    idx += step
            if top > ESCAPE:
                return 2, rpos, 0, 0
    return (0 if sa == rans.RANS_L else 3), rpos, 8 * (x_pos - r_end) - nacc, u_pos


@njit(inline="always")
def _read_u32(buf, pos):
    return (np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8) | (np.int64(buf[pos + 2]) << 16)
            | (np.int64(buf[pos + 3]) << 24))


@njit(nogil=True, _nrt=False)
def _decode_lanes(payload, sec, packed, cmap, mags, row, tcol, pcol, icol, missing, codes, out_bytes, itemsize, g):
    """:func:`_decode_serial` for :data:`CODER_LANES`, row by row: first the table of each of
    the row's points (its context, from the row above, the slice before and coarser points:
    nothing the row decodes), then the symbols through ``LANES`` rANS states taken in turn
    (their updates independent, only the stream position shared) into ``row``, then their
    classes into ``mags`` and their codes into ``codes``. ``packed`` is the level's
    :func:`~strata.entropy.tables.packed_decode_table`, ``cmap`` the table of each context;
    ``row`` (uint8), ``tcol``, ``pcol``, ``icol`` (int64) scratch of ``h2``. Prefetches and
    returns what :func:`_decode_serial` does; stream reads stay below ``r_end + 8`` (``payload``
    is padded)."""
    p1 = g.h2 + 1
    p0 = (g.h1 + 1) * p1
    up0 = np.uint64(p0)
    up1 = np.uint64(p1)
    has_missing = missing.shape[0] > 0
    far = g.d1 >= PREFETCH_ROW_STEP
    rpos, r_end, x_end, end, dense = sec.r_pos, sec.r_end, sec.x_end, sec.end, sec.dense
    if r_end - rpos < rans.STATE_BYTES * LANES:
        return 2, rpos, 0, 0
    s0 = _read_u32(payload, rpos)
    s1 = _read_u32(payload, rpos + 4)
    s2 = _read_u32(payload, rpos + 8)
    s3 = _read_u32(payload, rpos + 12)
    rpos += rans.STATE_BYTES * LANES
    if min(min(s0, s1), min(s2, s3)) < rans.RANS_L:
        return 2, rpos, 0, 0
    acc, nacc, x_pos, u_pos = np.int64(0), np.int64(0), r_end, x_end
    top = np.uint8(0)
    w = table_weights(cmap)
    for a in range(g.h0):
        for b in range(g.h1):
            f, st, p, idx, step = row_start(g, a, b, p0, p1)
            if st == 0:
                continue
            if far:
                prefetch_row(codes, idx, g.h2, g.d1, g.d2)
            ust = np.uint64(st)
            third = up1 - np.uint64(1) if st == 1 else np.uint64(1)
            n = 0
            if has_missing:
                for _ in range(f, g.lo2 + g.h2, st):
                    if missing[idx] == 0:
                        pcol[n] = p
                        icol[n] = idx
                        t = table_of(mags[p - up0], mags[p - up1], mags[p - third], w)
                        tcol[n] = np.int64(t) << tables.SCALE_BITS
                        n += 1
                    else:
                        codes[idx] = code_radius(codes)  # (a missing value's code: q = 0)
                    p += ust
                    idx += step
            else:
                n = (g.lo2 + g.h2 - 1 - f) // st + 1
                for i in range(n):
                    q = p + np.uint64(i) * ust
                    t = table_of(mags[q - up0], mags[q - up1], mags[q - third], w)
                    tcol[i] = np.int64(t) << tables.SCALE_BITS
            j = 0
            while j + LANES <= n:
                if rpos > r_end:
                    return 2, rpos, 0, 0
                e0 = np.int64(packed[np.uint64(tcol[j] | (s0 & _SLOT_MASK))])
                e1 = np.int64(packed[np.uint64(tcol[j + 1] | (s1 & _SLOT_MASK))])
                e2 = np.int64(packed[np.uint64(tcol[j + 2] | (s2 & _SLOT_MASK))])
                e3 = np.int64(packed[np.uint64(tcol[j + 3] | (s3 & _SLOT_MASK))])
                s0, rpos = rans.decode_step_packed(s0, e0, payload, rpos)
                s1, rpos = rans.decode_step_packed(s1, e1, payload, rpos)
                s2, rpos = rans.decode_step_packed(s2, e2, payload, rpos)
                s3, rpos = rans.decode_step_packed(s3, e3, payload, rpos)
                o = np.uint64(j)
                row[o] = e0 & 0xFF
                row[o + np.uint64(1)] = e1 & 0xFF
                row[o + np.uint64(2)] = e2 & 0xFF
                row[o + np.uint64(3)] = e3 & 0xFF
                j += LANES
            if j < n:  # the row's last symbols: lanes 0, 1, 2 as needed
                if rpos > r_end:
                    return 2, rpos, 0, 0
                e0 = np.int64(packed[np.uint64(tcol[j] | (s0 & _SLOT_MASK))])
                s0, rpos = rans.decode_step_packed(s0, e0, payload, rpos)
                row[np.uint64(j)] = e0 & 0xFF
                if j + 1 < n:
                    e1 = np.int64(packed[np.uint64(tcol[j + 1] | (s1 & _SLOT_MASK))])
                    s1, rpos = rans.decode_step_packed(s1, e1, payload, rpos)
                    row[np.uint64(j + 1)] = e1 & 0xFF
                if j + 2 < n:
                    e2 = np.int64(packed[np.uint64(tcol[j + 2] | (s2 & _SLOT_MASK))])
                    s2, rpos = rans.decode_step_packed(s2, e2, payload, rpos)
                    row[np.uint64(j + 2)] = e2 & 0xFF
            if has_missing:
                for i in range(n):
                    sym = row[np.uint64(i)]
                    top = max(top, sym)
                    mags[np.uint64(pcol[i])] = (sym > 0) + (sym > 2)
                for i in range(n):
                    acc, nacc, x_pos, u_pos = _put(dense, row[np.uint64(i)], np.uint64(icol[i]), codes, payload, acc,
                                                        nacc, x_pos, x_end, u_pos, end, out_bytes, itemsize)
            else:
                for i in range(n):
                    sym = row[np.uint64(i)]
                    top = max(top, sym)
                    mags[p + np.uint64(i) * ust] = (sym > 0) + (sym > 2)
                for i in range(n):  # (idx is still the row's first point: the context loop kept it)
                    acc, nacc, x_pos, u_pos = _put(dense, row[np.uint64(i)], idx, codes, payload, acc, nacc, x_pos,
                                                        x_end, u_pos, end, out_bytes, itemsize)
                    idx += step
            if top > ESCAPE:
                return 2, rpos, 0, 0
    ok = s0 == rans.RANS_L and s1 == rans.RANS_L and s2 == rans.RANS_L and s3 == rans.RANS_L
    return (0 if ok else 3), rpos, 8 * (x_pos - r_end) - nacc, u_pos


@njit(parallel=True, nogil=True, cache=True)
def decode(loaded, codes, out_bytes, itemsize, missing, geometry, tables, errors, n_workers):
    """Decode the chunks ``loaded = (payload, starts, ends, chunk_ids)`` of a level (its
    :data:`~strata.lossy.plan.LevelGeometry`) into ``codes`` (int32, or uint16 narrow codes:
    :func:`strata.lossy.quantize.code_radius`; and unpredictable values into ``out_bytes``, the
    output array's bytes, values of ``itemsize`` bytes) with the level's ``tables = (coder,
    cmap, symbols, info, zero, packed)`` (:func:`parse_level_head`). ``missing`` is the flat
    uint8 mask (empty without one), known for the chunks' points before their codes.

    Chunk ``chunk_ids[j]`` occupies ``payload[starts[j]:ends[j]]``; ``symbols``/``info`` hold
    the level's split decode tables (:func:`strata.entropy.tables.split_decode_tables`) for
    each of the 27 contexts, and ``zero`` (int64, 27) the slots of symbol 0 of each where the
    decoder takes its fast path for that symbol (:func:`parse_level_head`), for
    :data:`CODER_SERIAL`; for :data:`CODER_LANES`, ``packed`` and ``cmap`` (the table of each
    context). ``codes`` must
    hold the codes of the coarser levels inside the chunks (they give the contexts).
    ``errors[j]`` is set to a non-zero reason when the chunk is inconsistent: 1 bad lengths,
    2 invalid symbol or missing value, 3 rANS stream not consumed exactly, 4 raw bits or
    stored values not consumed exactly.
    """
    payload, starts, ends, chunk_ids = loaded
    shape, stride, refined, base, boxes = geometry
    coder, cmap, symbols, info, zero, packed = tables
    d0, d1, d2 = grid_steps(shape, stride)
    # chunks differ in cost: each worker takes every n_workers-th chunk
    for w in prange(n_workers):
        for j in range(w, chunk_ids.shape[0], n_workers):
            g = chunk_box(boxes[chunk_ids[j]], d0, d1, d2, refined, base)
            end = ends[j]
            n_r, pos = varint.get(payload, starts[j], end)
            n_x, pos = varint.get(payload, pos, end)
            # (compared by difference: lengths up to 2**63 must not wrap the sum around)
            if n_r < rans.STATE_BYTES or n_x < 0 or n_r > end - pos or n_x > end - pos - n_r:
                errors[j] = 1
                continue
            sec = Sections(pos, pos + n_r, pos + n_r + n_x, end, 8 * n_x >= RAW_DENSE * (g.h0 * g.h1 * g.h2))
            mags = magnitude_grid(codes, g)
            if coder == CODER_LANES:
                row = np.empty(g.h2, np.uint8)
                tcol = np.empty(g.h2, np.int64)
                pcol = np.empty(g.h2, np.int64)
                icol = np.empty(g.h2, np.int64)
                status, rpos, x_bits, u_pos = _decode_lanes(payload, sec, packed, cmap, mags, row, tcol, pcol, icol,
                                                            missing, codes, out_bytes, itemsize, g)
            else:
                status, rpos, x_bits, u_pos = _decode_serial(payload, sec, symbols, info, zero, mags, missing, codes,
                                                             out_bytes, itemsize, g)
            if status:
                errors[j] = status
            elif rpos != sec.r_end:
                errors[j] = 3
            elif u_pos > end:
                errors[j] = 2
            elif (x_bits + 7) // 8 != n_x or u_pos != end:
                errors[j] = 4


#: Share of zero codes (symbol 0) in a level above which the decoder settles them with a
#: predicted branch instead of a table load (:func:`_symbol`).
ZERO_FAST_PATH = 0.7

#: Errors of :func:`parse_level_head`, by status.
HEAD_ERRORS = {1: "unknown context grouping or coder", 2: "chunk edge out of range", 3: "malformed frequency tables",
               4: "invalid frequency table", 5: "truncated or malformed chunk lengths",
               6: "chunk lengths do not add up to the payload", 7: "truncated chunk checksums or trailing bytes"}


@njit(nogil=True, cache=True)
def parse_level_head(head, payload_len, groups, zero_fast_path):
    """Parse a level head (``u8 coder << 4 | grouping | u8 log2 chunk edge | varint table length |
    tables | varint n_chunks | n_chunks varint lengths | n_chunks u32 CRC-32``, its own CRC
    removed; version 2 streams have coder 0).

    Returns ``(status, grouping, coder, log2 chunk edge, symbols, info, zero, packed, offsets,
    crcs, max_z)``: ``status`` 0 or a key of :data:`HEAD_ERRORS`; for :data:`CODER_SERIAL` the split
    decode tables of the 27 contexts and ``zero``, the slots of symbol 0 per context where the
    decoder's fast path is on (when zero codes are more than ``zero_fast_path`` of the level, a
    decoder-side choice); for :data:`CODER_LANES` the packed decode tables (``packed``); the
    chunk offsets in the payload (``n_chunks + 1``), the chunks' CRC-32, and the largest zig-zag
    value a code of the level can decode to (from the symbols its tables give a frequency;
    :func:`strata.lossy.quantize.narrow_fits`).
    """
    n_ctx = groups.shape[1]
    symbols = np.zeros(0, np.uint8)
    info = np.zeros(0, np.uint32)
    zero = np.zeros(n_ctx, np.int64)
    packed = np.zeros(0, np.uint32)
    offsets = np.zeros(1, np.int64)
    crcs = np.zeros(0, np.int64)
    max_z = np.int64(0)
    end = head.shape[0]
    if end < 2:
        return 5, 0, 0, 0, symbols, info, zero, packed, offsets, crcs, max_z
    group, coder, tile_log2 = np.int64(head[0] & 0x0F), np.int64(head[0] >> 4), np.int64(head[1])
    if group >= groups.shape[0] or coder > CODER_LANES:
        return 1, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    if tile_log2 > 20:
        return 2, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    cmap = groups[group]
    tlen, pos = varint.get(head, 2, end)
    if tlen < 0 or tlen > end - pos:
        return 3, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    n_tables = 0
    for t in cmap:
        n_tables = max(n_tables, t + 1)
    codes, st = tables.deserialize_codes(head[pos:pos + tlen], n_tables, ALPHABET)
    if st != 0:
        return 3, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    counts = tables.approx_value(codes)
    freq = tables.normalize(counts)
    for t in range(n_tables):
        if freq[t, 0] < 0:
            return 4, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
        for s_ in range(min(freq.shape[1], ESCAPE)):
            if freq[t, s_] > 0:  # (the largest zig-zag value a code of the level can have)
                max_z = max(max_z, SYMBOL_BASE[s_] + (1 << SYMBOL_EXTRA_BITS[s_]) - 1)
    if coder == CODER_LANES:
        packed = tables.packed_decode_table(freq)
    else:
        symbols, info = tables.split_decode_tables(freq, cmap)
        total, zeros = 0, 0
        for t in range(n_tables):
            zeros += counts[t, 0]
            for s_ in range(counts.shape[1]):
                total += counts[t, s_]
        if total > 0 and zeros >= zero_fast_path * total:
            for c in range(n_ctx):
                zero[c] = info[c * tables.SPLIT_SYMBOLS] & 0xFFF
    pos += tlen
    n_chunks, pos = varint.get(head, pos, end)
    if n_chunks < 0 or n_chunks > end:
        return 5, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    offsets = np.zeros(n_chunks + 1, np.int64)
    for c in range(n_chunks):
        v, pos = varint.get(head, pos, end)
        if v < 0:
            return 5, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
        if v > payload_len - offsets[c]:  # (before adding: no wrap-around)
            return 6, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
        offsets[c + 1] = offsets[c] + v
    if offsets[n_chunks] != payload_len:
        return 6, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    if pos + 4 * n_chunks != end:
        return 7, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z
    crcs = np.empty(n_chunks, np.int64)
    for c in range(n_chunks):
        q = pos + 4 * c
        crcs[c] = (np.int64(head[q]) | np.int64(head[q + 1]) << 8 | np.int64(head[q + 2]) << 16
                   | np.int64(head[q + 3]) << 24)
    return 0, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z


#: :func:`decode` or its serial variant (a single chunk).
runner = serial_runner(decode)

__all__ = ["HEAD_ERRORS", "RAW_DENSE", "ZERO_FAST_PATH", "decode", "parse_level_head", "runner"]
