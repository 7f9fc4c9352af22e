"""Entropy coding of a byte string (one byte plane of a chunk), with the best of four models.

* ``RAW``: the bytes as they are (planes of near-random mantissa bits);
* ``CONST``: one byte repeated (all-zero planes of XOR deltas);
* ``ORDER0``: rANS with one static table (exponent planes, sparse deltas);
* ``PREV``: rANS with 16 tables chosen by the high nibble of the previous byte (planes whose
  bytes are correlated with their neighbour's: exponents of smooth tensors, low mantissa
  bytes).

Both use four interleaved states (byte ``k`` uses state ``k mod 4``), so that decoding runs
four dependency chains side by side. ``ORDER0_64`` is ``ORDER0`` with 64 states (byte ``k``
uses state ``k mod 64``), coded in SIMD registers (:mod:`strata.entropy.rans64`): on an exponent
plane it decodes about 5x as fast as ``ORDER0_8`` (eight scalar states, written by format
version 3 and still read) for 240 more bytes of final states than ``ORDER0``'s. Encoders ask for it
(``wide=True``, checkpoint segment records of format version 4) and get it for strings of at
least ``WIDE_MIN_BYTES``; ``PREV`` keeps four states (its decoder's chain runs through every
symbol's table choice, which more states do not shorten). Every model decodes wherever it
appears.

The encoder histograms the bytes under both models, estimates each coded size (tables
included) and keeps the smallest, unless it saves less than ``MIN_GAIN`` of the raw size, in
which case raw bytes are cheaper to decode. A string of 64 KiB or more may instead be stored
``SPLIT`` into four equal parts, each its own record with its own model and tables, when the
parts' estimated sizes add up to less than the whole's: a plane whose statistics change along
it (the tensors sharing a chunk, the query/key/value blocks of one attention weight) gets
tables that follow them, at the granularity ZipNN codes (256 KiB of a 1 MiB chunk).
The histograms are taken per part and summed, so the choice costs no extra pass.

Layout: ``u8 model | payload`` where the payload is the raw bytes, the repeated byte,
``varint table length | tables | rANS bytes`` (:mod:`strata.entropy.tables`,
:mod:`strata.entropy.rans`), or for ``SPLIT`` ``u8 4 | 3 x varint part record length | the
part records``. The number of bytes is known to the caller (it is part of its own index).

The cores (:func:`encode_into`, :func:`decode_from`) are compiled and write into / read from
caller buffers, so a caller can code many planes in one compiled call; :func:`encode` and
:func:`decode` wrap them for bytes.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import varint
from ..errors import CorruptStreamError
from . import rans, rans64, tables

RAW, ORDER0, PREV, CONST, SPLIT, ORDER0_8, ORDER0_64 = 0, 1, 2, 3, 4, 5, 6
#: Coding must save at least this fraction of the raw size.
MIN_GAIN = 0.01
#: Bytes sampled to store a long near-uniform string raw without a full histogram.
SAMPLE_BYTES = 1 << 16
#: Bits a coded record spends besides its symbols and tables: the four final rANS states and
#: the table length (estimates that leave them out pick a coded model for a few bytes that
#: stored raw are smaller).
_STATE_BITS = 8.0 * (4 * rans.STATE_BYTES + 1)
#: Fewest bytes a string needs for ``ORDER0_64`` (its 60 extra states cost 240 bytes).
WIDE_MIN_BYTES = 1 << 16
_WIDE_STATE_BITS = _STATE_BITS + 8.0 * (rans64.LANES - 4) * rans.STATE_BYTES
_SLOT_MASK = tables.SCALE - 1
#: ``PREV`` is taken only where it codes the bytes this fraction smaller than order-0 (tables
#: included; ``ORDER0_64``'s extra final states not, which would hand small records to ``PREV``):
#: its decoder is scalar and serial (1.5-2 ns a byte), ``ORDER0_64``'s vectorized (about 0.3),
#: and on exponent planes the two models often code within a fraction of a percent of each other.
PREV_MIN_GAIN = 0.01
#: Parts of a split string, and the fewest bytes per part.
SPLIT_PARTS = 4
MIN_PART_BYTES = 1 << 14
_PREV_SHIFT = 4
_N_PREV = 256 >> _PREV_SHIFT
#: Room :func:`encode_into` may need for ``n`` bytes: ``max_record_bytes(n)``.
_TABLE_ROOM = _N_PREV * (256 + 8) + 8

#: Errors of :func:`decode_from`, by status.
ERRORS = {1: "empty byte-plane record", 2: "raw byte plane of the wrong length",
          3: "constant byte plane of the wrong length", 4: "unknown byte-plane model",
          5: "byte-plane tables truncated or malformed", 6: "invalid byte-plane table",
          7: "byte-plane entropy-coded data inconsistent", 8: "malformed split byte-plane record"}


@njit(cache=True)
def max_record_bytes(n: int) -> int:
    """Largest record :func:`encode_into` writes for ``n`` bytes."""
    return n + 1 + 2 * n + SPLIT_PARTS * (_TABLE_ROOM + 48) + 32


def work_bytes(n: int) -> int:
    """Bytes of the work area :func:`encode_into` needs for ``n`` bytes: a split record's parts
    (:func:`max_record_bytes`) and the rANS coder's buffer of the largest of them."""
    return max_record_bytes(n) + 2 * n + rans64.STATE_BYTES + 16


@njit(inline="always")
def copy_into(dst, src):
    """``dst[:len(src)] = src`` (1-D arrays), as a loop LLVM compiles to a memory copy: numba's
    slice assignment guards against overlap and copies byte by byte, 20x slower (0.23 against
    0.01 ns a byte)."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@njit(nogil=True, cache=True)
def _histograms(data):
    """Counts of each byte overall (``(1, 256)``) and after each previous high nibble
    (``(16, 256)``). Even and odd bytes count into two tables, summed at the end: a run of
    equal bytes (an exponent plane) then alternates between two counters instead of waiting
    on one; the overall counts are the sums of the contexts' (about 1.7x as fast as counting
    both per byte on an exponent plane)."""
    lanes = np.zeros((2, _N_PREV * 256), np.int64)
    n = data.shape[0]
    shift = np.uint64(_PREV_SHIFT)
    prev = np.uint64(0)
    for k in range(0, n - 1, 2):
        b0 = np.uint64(data[k])
        b1 = np.uint64(data[k + 1])
        lanes[0, ((prev >> shift) << np.uint64(8)) | b0] += 1
        lanes[1, ((b0 >> shift) << np.uint64(8)) | b1] += 1
        prev = b1
    if n & 1:
        lanes[0, ((prev >> shift) << np.uint64(8)) | np.uint64(data[n - 1])] += 1
    hp = (lanes[0] + lanes[1]).reshape(_N_PREV, 256)
    return hp.sum(axis=0).reshape(1, 256), hp


# The coding loops allocate nothing: compiled without reference counting (``_nrt=False``),
# which numba would otherwise emit around the inlined rANS helpers in the loop.
def _interleaved_coders(order0):
    """rANS coder and decoder with four interleaved states (state ``k & 3`` codes byte
    ``k``) for one model, compiled with its context rule as a constant: one table
    (``order0``), or the table of the previous byte's high nibble (0 for the first byte).
    The four states are four dependency chains; with the previous-byte model the decoder's
    chains meet only where a symbol picks the next symbol's table."""

    @njit(inline="always")
    def ctx(prev):
        return 0 if order0 else np.int64(prev) >> _PREV_SHIFT

    @njit(inline="always")
    def put(state, buf, pos, flat, data, k):
        t = ctx(data[np.uint64(k - 1)]) if k > 0 else 0
        return rans.encode_put_select(state, buf, pos, flat, rans.encoder_offset(t, data[np.uint64(k)], 256))

    @njit(nogil=True, _nrt=False)
    def encode(data, flat, buf):
        """Code ``data`` backwards into the end of ``buf`` (``2 n + 32`` bytes: room for a
        word per symbol, the states, and the select's spare word); returns the start of the
        coded bytes (the four final states first, state 0 first)."""
        s0 = s1 = s2 = s3 = np.int64(rans.RANS_L)
        pos = buf.shape[0]
        k = data.shape[0] - 1
        while k >= 0 and (k & 3) != 3:  # the last n % 4 bytes first, each with its own state
            j = k & 3
            if j == 0:
                s0, pos = put(s0, buf, pos, flat, data, k)
            elif j == 1:
                s1, pos = put(s1, buf, pos, flat, data, k)
            else:
                s2, pos = put(s2, buf, pos, flat, data, k)
            k -= 1
        while k >= 3:  # then whole groups of four, states 3, 2, 1, 0
            s3, pos = put(s3, buf, pos, flat, data, k)
            s2, pos = put(s2, buf, pos, flat, data, k - 1)
            s1, pos = put(s1, buf, pos, flat, data, k - 2)
            s0, pos = put(s0, buf, pos, flat, data, k - 3)
            k -= 4
        pos = rans.encode_flush(s3, buf, pos)
        pos = rans.encode_flush(s2, buf, pos)
        pos = rans.encode_flush(s1, buf, pos)
        return rans.encode_flush(s0, buf, pos)

    @njit(nogil=True, _nrt=False)
    def decode(payload, pos, end, symbols, info, out):
        """Inverse of ``encode``; False if the stream is inconsistent (an invalid slot, not
        consumed exactly, a wrong final state). While eight bytes remain, renormalization
        has no data-dependent branch and reads unchecked
        (:func:`strata.entropy.rans.decode_step_unchecked`); the end runs a checked loop."""
        s0, pos = rans.decode_init(payload, pos, end)
        s1, pos = rans.decode_init(payload, pos, end)
        s2, pos = rans.decode_init(payload, pos, end)
        s3, pos = rans.decode_init(payload, pos, end)
        if min(s0, s1, s2, s3) < rans.RANS_L:
            return False
        n = np.uint64(out.shape[0])  # (uint64 against uint64: no float comparison)
        k = np.uint64(0)
        y3 = np.uint8(0)
        valid = True
        safe = end - 8  # four symbols read at most eight bytes
        while k + np.uint64(3) < n and pos <= safe:
            y0, i0 = rans.decode_lookup(s0, symbols, info, ctx(y3))
            y1, i1 = rans.decode_lookup(s1, symbols, info, ctx(y0))
            y2, i2 = rans.decode_lookup(s2, symbols, info, ctx(y1))
            y3, i3 = rans.decode_lookup(s3, symbols, info, ctx(y2))
            if not order0:  # (an order-0 table is complete: every slot valid)
                valid &= rans.info_valid(i0) & rans.info_valid(i1) & rans.info_valid(i2) & rans.info_valid(i3)
            s0, pos = rans.decode_step_unchecked(s0, i0, payload, pos)
            s1, pos = rans.decode_step_unchecked(s1, i1, payload, pos)
            s2, pos = rans.decode_step_unchecked(s2, i2, payload, pos)
            s3, pos = rans.decode_step_unchecked(s3, i3, payload, pos)
            out[k] = y0
            out[k + np.uint64(1)] = y1
            out[k + np.uint64(2)] = y2
            out[k + np.uint64(3)] = y3
            k += np.uint64(4)
        while k < n:  # states 0..3 in turn, reads checked against the end
            j = k & np.uint64(3)
            st = s0 if j == 0 else (s1 if j == 1 else (s2 if j == 2 else s3))
            y, i = rans.decode_lookup(st, symbols, info, ctx(out[k - np.uint64(1)]) if k > 0 else 0)
            if not rans.info_valid(i):
                return False
            st, pos = rans.decode_step(st, i, payload, pos, end)
            if j == 0:
                s0 = st
            elif j == 1:
                s1 = st
            elif j == 2:
                s2 = st
            else:
                s3 = st
            out[k] = y
            k += np.uint64(1)
        return (valid and pos == end and s0 == rans.RANS_L and s1 == rans.RANS_L and s2 == rans.RANS_L
                and s3 == rans.RANS_L)

    return encode, decode


_encode_order0, _decode_order0 = _interleaved_coders(True)
_encode_prev, _decode_prev = _interleaved_coders(False)


@njit(inline="always")
def _get0(state, tab, payload, pos):
    """One symbol of ``state`` from the packed table ``tab``, renormalizing unchecked from
    ``payload[pos:pos + 2]``; returns ``(symbol, state, pos)``."""
    e = np.int64(tab[np.uint64(state & _SLOT_MASK)])
    state, pos = rans.decode_step_packed(state, e, payload, pos)
    return np.uint8(e & 0xFF), state, pos


@njit(nogil=True, cache=True, _nrt=False)
def _decode_order0_8(payload, pos, end, tab, st, out):
    """Inverse of :func:`_encode_order0_8` from the packed table ``tab`` of a complete order-0
    table (every slot valid); False if the stream is inconsistent (not consumed exactly, a
    wrong final state). While sixteen bytes remain, renormalization reads unchecked; the end
    runs a checked loop (:func:`strata.entropy.rans.decode_step`)."""
    for j in range(8):
        st[j], pos = rans.decode_init(payload, pos, end)
        if st[j] < rans.RANS_L:
            return False
    s0, s1, s2, s3, s4, s5, s6, s7 = st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7]
    n = np.uint64(out.shape[0])
    k = np.uint64(0)
    safe = end - 16  # eight symbols read at most sixteen bytes
    while k + np.uint64(7) < n and pos <= safe:
        y0, s0, pos = _get0(s0, tab, payload, pos)
        y1, s1, pos = _get0(s1, tab, payload, pos)
        y2, s2, pos = _get0(s2, tab, payload, pos)
        y3, s3, pos = _get0(s3, tab, payload, pos)
        y4, s4, pos = _get0(s4, tab, payload, pos)
        y5, s5, pos = _get0(s5, tab, payload, pos)
        y6, s6, pos = _get0(s6, tab, payload, pos)
        y7, s7, pos = _get0(s7, tab, payload, pos)
        out[k] = y0
        out[k + np.uint64(1)] = y1
        out[k + np.uint64(2)] = y2
        out[k + np.uint64(3)] = y3
        out[k + np.uint64(4)] = y4
        out[k + np.uint64(5)] = y5
        out[k + np.uint64(6)] = y6
        out[k + np.uint64(7)] = y7
        k += np.uint64(8)
    st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7] = s0, s1, s2, s3, s4, s5, s6, s7
    while k < n:  # states in turn, reads checked against the end
        j = k & np.uint64(7)
        s = st[j]
        e = np.int64(tab[np.uint64(s & _SLOT_MASK)])
        bias = e >> tables.PACKED_BIAS_SHIFT
        info = ((e >> tables.PACKED_FREQ_SHIFT) & _SLOT_MASK) + 1 | (((s & _SLOT_MASK) - bias) << 12)
        st[j], pos = rans.decode_step(s, info, payload, pos, end)
        out[k] = e & 0xFF
        k += np.uint64(1)
    ok = pos == end
    for j in range(8):
        ok &= st[j] == rans.RANS_L
    return ok


@njit(nogil=True, cache=True)
def _estimate(data):
    h0, hp = _histograms(data)
    return min(8.0 * data.shape[0], tables.cost_bits(h0), tables.cost_bits(hp)) + 8


def estimate_bits(data: np.ndarray) -> float:
    """Estimated size in bits of :func:`encode` output for ``data`` (uint8 array)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    return 8.0 if data.size == 0 else float(_estimate(data))


@njit(nogil=True, cache=True)
def _sample_is_noise(data):
    """True if four pieces of ``SAMPLE_BYTES / 4`` bytes spread over ``data`` would code no
    better than ``1 - MIN_GAIN / 4`` of their raw size (tables included): the string is
    then stored raw without histogramming all of it. A sample's empirical entropy is lower
    than the whole's, and its tables weigh more, so a near-uniform sample means a
    near-uniform string (the low mantissa bytes of most tensors)."""
    n = data.shape[0]
    m = SAMPLE_BYTES // 4
    h0 = np.zeros((1, 256), np.int64)
    hp = np.zeros((_N_PREV, 256), np.int64)
    for j in range(4):
        a, b = _histograms(data[n * j // 4:n * j // 4 + m])
        h0 += a
        hp += b
    return min(tables.cost_bits(h0), tables.cost_bits(hp)) > (1 - MIN_GAIN / 4) * 8.0 * 4 * m


@njit(inline="always")
def _recontext(hp, data, k):
    """Move byte ``k``'s count in ``hp`` from context 0 to its previous byte's context."""
    s = data[k]
    hp[0, s] -= 1
    hp[np.int64(data[k - 1]) >> _PREV_SHIFT, s] += 1


@njit(inline="always")
def _wide_bits(n, wide):
    """Bits that ``ORDER0_64`` adds to an order-0 record of ``n`` bytes (0 where it is not used)."""
    return _WIDE_STATE_BITS - _STATE_BITS if wide and n >= WIDE_MIN_BYTES else 0.0


@njit(nogil=True, cache=True)
def encode_into(data, out, pos, wide, work):
    """Code ``data`` (uint8) with the model that makes it smallest, as a record written to
    ``out[pos:]`` (room: :func:`max_record_bytes`); returns the position after it. ``work``
    (uint8, :func:`work_bytes`) is the coder's scratch: a caller coding many strings passes
    the same one each time, so the kernel maps and zeroes no new pages for each.

    A string of at least ``SPLIT_PARTS * MIN_PART_BYTES`` bytes is stored as ``SPLIT_PARTS``
    records of its equal parts when their estimated sizes add up to less than the whole's.
    ``wide``: order-0 records (the whole's, or a part's) of at least ``WIDE_MIN_BYTES`` bytes
    are ``ORDER0_64``, their 240 extra bytes counted in the choice."""
    n = data.shape[0]
    if n >= 4 * SAMPLE_BYTES and _sample_is_noise(data):
        out[pos] = RAW
        copy_into(out[pos + 1:], data)
        return pos + 1 + n
    n_parts = SPLIT_PARTS if n >= SPLIT_PARTS * MIN_PART_BYTES else 1
    h0s = np.zeros((n_parts, 1, 256), np.int64)
    hps = np.zeros((n_parts, _N_PREV, 256), np.int64)
    for p in range(n_parts):
        h0s[p], hps[p] = _histograms(data[n * p // n_parts:n * (p + 1) // n_parts])
    h0 = h0s.sum(axis=0)
    hp = hps.sum(axis=0)
    for p in range(1, n_parts):  # in the whole string, a part's first byte has a context
        _recontext(hp, data, n * p // n_parts)
    if n == 0 or h0[0, data[0]] == n:
        return _encode_simple(data, h0, hp, 0.0, 0.0, out, pos, wide, work)
    c0, cp = tables.cost_bits(h0) + _wide_bits(n, wide), tables.cost_bits(hp)
    # splitting cannot pay much where the whole is near-random (mixing only adds entropy)
    if n_parts > 1 and min(c0, cp) <= (1 - MIN_GAIN) * 8.0 * n:
        costs = np.empty((n_parts, 2))
        split_bits = 8.0 * (2 + 3 * n_parts)
        for p in range(n_parts):
            m = n * (p + 1) // n_parts - n * p // n_parts
            costs[p, 0], costs[p, 1] = tables.cost_bits(h0s[p]) + _wide_bits(m, wide), tables.cost_bits(hps[p])
            split_bits += min(8.0 * m, min(costs[p, 0], costs[p, 1]) + _STATE_BITS) + 8
        if split_bits < min(c0, cp) + 8:
            out[pos] = SPLIT
            out[pos + 1] = n_parts
            room = max_record_bytes(n)
            tmp, rest = work[:room], work[room:]
            ends = np.zeros(n_parts + 1, np.int64)
            for p in range(n_parts):
                a, b = n * p // n_parts, n * (p + 1) // n_parts
                ends[p + 1] = _encode_simple(data[a:b], h0s[p], hps[p], costs[p, 0], costs[p, 1], tmp, ends[p],
                                             wide, rest)
            q = pos + 2
            for p in range(n_parts - 1):
                q = varint.put(out, q, ends[p + 1] - ends[p])
            copy_into(out[q:], tmp[:ends[n_parts]])
            return q + ends[n_parts]
    return _encode_simple(data, h0, hp, c0, cp, out, pos, wide, work)


@njit(nogil=True, cache=True)
def _encode_simple(data, h0, hp, c0, cp, out, pos, wide, work):
    """A record of ``data`` that is not split, from its histograms (:func:`_histograms`)
    and their estimated sizes ``c0``, ``cp`` (:func:`strata.entropy.tables.cost_bits`, ``c0``
    with :func:`_wide_bits`); the rANS coder writes into ``work`` first."""
    n = data.shape[0]
    if n == 0:
        out[pos] = RAW
        return pos + 1
    if h0[0, data[0]] == n:
        out[pos] = CONST
        out[pos + 1] = data[0]
        return pos + 2
    if min(c0, cp) + _STATE_BITS > (1 - MIN_GAIN) * 8.0 * n:
        out[pos] = RAW
        copy_into(out[pos + 1:], data)
        return pos + 1 + n
    wide_bits = _wide_bits(n, wide)
    order0 = cp > (1 - PREV_MIN_GAIN) * (c0 - wide_bits)
    counts = h0 if order0 else hp
    codes = tables.approx_code(counts)
    freq = tables.normalize(tables.approx_value(codes))
    tab = np.empty(counts.shape[0] * (counts.shape[1] + 8), np.uint8)
    tlen = tables.serialize_into(codes, tab)
    buf = work[:2 * n + rans64.STATE_BYTES + 16]  # (the coders write from its end)
    enc = rans.encoder_table(freq)
    flat = enc.ravel()
    lanes64 = order0 and wide_bits > 0
    if lanes64:
        start = rans64.encode_fast(data.ctypes.data, n, flat.ctypes.data, buf.ctypes.data, buf.shape[0])
        if start < 0:
            start = rans64.encode(data, flat, np.empty(rans64.LANES, np.int64), buf)
    else:
        start = _encode_order0(data, flat, buf) if order0 else _encode_prev(data, flat, buf)
    out[pos] = ORDER0_64 if lanes64 else (ORDER0 if order0 else PREV)
    p = varint.put(out, pos + 1, tlen)
    copy_into(out[p:], tab[:tlen])
    p += tlen
    m = buf.shape[0] - start
    copy_into(out[p:], buf[start:])
    return p + m


@njit(nogil=True, cache=True)
def decode_from(buf, pos, end, out):
    """Decode the record ``buf[pos:end]`` into ``out`` (uint8, its known length); returns 0 or
    an error status (a key of :data:`ERRORS`). Every read stays inside ``buf[pos:end]``."""
    n = out.shape[0]
    if end <= pos:
        return 1
    if buf[pos] != SPLIT:
        return _decode_simple(buf, pos, end, out)
    if end - pos < 2 or buf[pos + 1] != SPLIT_PARTS or n < SPLIT_PARTS * MIN_PART_BYTES:
        return 8
    ps = np.empty(SPLIT_PARTS + 1, np.int64)
    p = pos + 2
    for j in range(SPLIT_PARTS - 1):
        ln, p = varint.get(buf, p, end)
        if ln < 0:
            return 8
        ps[j + 1] = ln
    ps[0] = p
    for j in range(1, SPLIT_PARTS):
        ps[j] += ps[j - 1]
    ps[SPLIT_PARTS] = end
    for j in range(SPLIT_PARTS):
        a, b = ps[j], ps[j + 1]
        if b <= a or b > end or buf[a] == SPLIT:
            return 8
        status = _decode_simple(buf, a, b, out[n * j // SPLIT_PARTS:n * (j + 1) // SPLIT_PARTS])
        if status:
            return status
    return 0


@njit(nogil=True, cache=True)
def _decode_simple(buf, pos, end, out):
    """Decode a record that is not split; returns 0 or an error status."""
    n = out.shape[0]
    if end <= pos:
        return 1
    model = buf[pos]
    if model == RAW:
        if end - pos - 1 != n:
            return 2
        copy_into(out, buf[pos + 1:end])
        return 0
    if model == CONST:
        if end - pos != 2:
            return 3
        out[:] = buf[pos + 1]
        return 0
    if model != ORDER0 and model != PREV and model != ORDER0_8 and model != ORDER0_64:
        return 4
    tlen, p = varint.get(buf, pos + 1, end)
    if tlen < 0 or p + tlen > end:
        return 5
    n_tables = _N_PREV if model == PREV else 1
    codes, st = tables.deserialize_codes(buf[p:p + tlen], n_tables, 256)
    if st != 0:
        return 5
    freq = tables.normalize(tables.approx_value(codes))
    for t in range(n_tables):
        if freq[t, 0] < 0:
            return 6
    if model != PREV and freq[0].sum() != tables.SCALE:  # an empty table: no slot is valid
        return 6
    if model == ORDER0_8:
        ok = _decode_order0_8(buf, p + tlen, end, tables.packed_decode_table(freq), np.empty(8, np.int64), out)
        return 0 if ok else 7
    if model == ORDER0_64:
        q = p + tlen
        tab = tables.packed_decode_table(freq)
        return 7 if rans64.decode(buf.ctypes.data + q, end - q, tab.ctypes.data, out.ctypes.data, n) else 0
    symbols, info = tables.split_decode_tables(freq, np.arange(n_tables))
    ok = (_decode_order0(buf, p + tlen, end, symbols, info, out) if model == ORDER0
          else _decode_prev(buf, p + tlen, end, symbols, info, out))
    return 0 if ok else 7


def encode(data: np.ndarray, wide: bool = False) -> bytes:
    """Code a byte string (uint8 array) with the model that makes it smallest (``wide``: see
    :func:`encode_into`)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty(max_record_bytes(data.size), np.uint8)
    return out[:encode_into(data, out, 0, wide, np.empty(work_bytes(data.size), np.uint8))].tobytes()


def decode(buf, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """Decode ``n`` bytes coded by :func:`encode` from ``buf`` (bytes-like), into ``out`` if
    given (uint8, length ``n``).

    Raises:
        CorruptStreamError: unknown model, truncated or inconsistent data.
    """
    out = np.empty(n, np.uint8) if out is None else out
    b = np.frombuffer(buf, np.uint8)
    status = decode_from(b, 0, b.size, out)
    if status:
        raise CorruptStreamError(ERRORS[status])
    return out
