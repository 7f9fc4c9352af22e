"""Entropy coding of a byte string (one byte plane of a chunk), with the best of four models.

* ``RAW``: the bytes as they are (planes of near-random mantissa bits);
* ``CONST``: one byte repeated (all-zero planes of XOR deltas);
* ``ORDER0``: rANS with one static table (exponent planes, sparse deltas);
* ``PREV``: rANS with 16 tables chosen by the high nibble of the previous byte (planes whose
  bytes are correlated with their neighbour's: exponents of smooth tensors, low mantissa
  bytes).

Both use four interleaved states (byte ``k`` uses state ``k mod 4``), so that decoding runs
four dependency chains side by side.

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

from ..errors import CorruptStreamError
from . import rans, tables

RAW, ORDER0, PREV, CONST, SPLIT = 0, 1, 2, 3, 4
#: Coding must save at least this fraction of the raw size.
MIN_GAIN = 0.01
#: Bytes sampled to store a long near-uniform string raw without a full histogram.
SAMPLE_BYTES = 1 << 16
#: Bits a coded record spends besides its symbols and tables: the four final rANS states and
#: the table length (estimates that leave them out pick a coded model for a few bytes that
#: stored raw are smaller).
_STATE_BITS = 8.0 * (4 * rans.STATE_BYTES + 1)
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


def max_record_bytes(n: int) -> int:
    """Largest record :func:`encode_into` writes for ``n`` bytes."""
    return n + 1 + 2 * n + SPLIT_PARTS * (_TABLE_ROOM + 48) + 32


@njit(nogil=True, cache=True)
def _histograms(data):
    """Counts of each byte overall (``(1, 256)``) and after each previous high nibble
    (``(16, 256)``)."""
    h0 = np.zeros((1, 256), np.int64)
    hp = np.zeros((_N_PREV, 256), np.int64)
    prev = np.uint64(0)
    for k in range(data.shape[0]):
        b = np.uint64(data[k])
        h0[0, b] += 1
        hp[prev >> np.uint64(_PREV_SHIFT), b] += 1
        prev = b
    return h0, hp


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


@njit(nogil=True, cache=True)
def encode_into(data, out, pos):
    """Code ``data`` (uint8) with the model that makes it smallest, as a record written to
    ``out[pos:]`` (room: :func:`max_record_bytes`); returns the position after it.

    A string of at least ``SPLIT_PARTS * MIN_PART_BYTES`` bytes is stored as ``SPLIT_PARTS``
    records of its equal parts when their estimated sizes add up to less than the whole's."""
    n = data.shape[0]
    if n >= 4 * SAMPLE_BYTES and _sample_is_noise(data):
        out[pos] = RAW
        out[pos + 1:pos + 1 + n] = data
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
        return _encode_simple(data, h0, hp, 0.0, 0.0, out, pos)
    c0, cp = tables.cost_bits(h0), tables.cost_bits(hp)
    # splitting cannot pay much where the whole is near-random (mixing only adds entropy)
    if n_parts > 1 and min(c0, cp) <= (1 - MIN_GAIN) * 8.0 * n:
        costs = np.empty((n_parts, 2))
        split_bits = 8.0 * (2 + 3 * n_parts)
        for p in range(n_parts):
            costs[p, 0], costs[p, 1] = tables.cost_bits(h0s[p]), tables.cost_bits(hps[p])
            split_bits += min(8.0 * (n * (p + 1) // n_parts - n * p // n_parts),
                              min(costs[p, 0], costs[p, 1]) + _STATE_BITS) + 8
        if split_bits < min(c0, cp) + 8:
            out[pos] = SPLIT
            out[pos + 1] = n_parts
            tmp = np.empty(out.shape[0] - pos, np.uint8)
            ends = np.zeros(n_parts + 1, np.int64)
            for p in range(n_parts):
                a, b = n * p // n_parts, n * (p + 1) // n_parts
                ends[p + 1] = _encode_simple(data[a:b], h0s[p], hps[p], costs[p, 0], costs[p, 1], tmp, ends[p])
            q = pos + 2
            for p in range(n_parts - 1):
                q = tables._put_varint(out, q, ends[p + 1] - ends[p])
            out[q:q + ends[n_parts]] = tmp[:ends[n_parts]]
            return q + ends[n_parts]
    return _encode_simple(data, h0, hp, c0, cp, out, pos)


@njit(nogil=True, cache=True)
def _encode_simple(data, h0, hp, c0, cp, out, pos):
    """A record of ``data`` that is not split, from its histograms (:func:`_histograms`)
    and their estimated sizes ``c0``, ``cp`` (:func:`strata.entropy.tables.cost_bits`)."""
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
        out[pos + 1:pos + 1 + n] = data
        return pos + 1 + n
    order0 = c0 <= cp
    counts = h0 if order0 else hp
    freq = tables.normalize(tables.approx_value(tables.approx_code(counts)))
    tab = np.empty(counts.shape[0] * (counts.shape[1] + 8), np.uint8)
    tlen = tables._serialize_into(tables.approx_code(counts), tab)
    buf = np.empty(2 * n + 32, np.uint8)
    enc = rans.encoder_table(freq)
    flat = enc.ravel()
    start = _encode_order0(data, flat, buf) if order0 else _encode_prev(data, flat, buf)
    out[pos] = ORDER0 if order0 else PREV
    p = tables._put_varint(out, pos + 1, tlen)
    out[p:p + tlen] = tab[:tlen]
    p += tlen
    m = buf.shape[0] - start
    out[p:p + m] = buf[start:]
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
    head = buf[:end]
    ps = np.empty(SPLIT_PARTS + 1, np.int64)
    p = pos + 2
    for j in range(SPLIT_PARTS - 1):
        ln, p = tables._get_varint(head, p)
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
        out[:] = buf[pos + 1:end]
        return 0
    if model == CONST:
        if end - pos != 2:
            return 3
        out[:] = buf[pos + 1]
        return 0
    if model != ORDER0 and model != PREV:
        return 4
    tlen, p = tables._get_varint(buf[:end], pos + 1)
    if tlen < 0 or p + tlen > end:
        return 5
    n_tables = 1 if model == ORDER0 else _N_PREV
    codes, st = tables._deserialize(buf[p:p + tlen], n_tables, 256)
    if st != 0:
        return 5
    freq = tables.normalize(tables.approx_value(codes))
    for t in range(n_tables):
        if freq[t, 0] < 0:
            return 6
    if model == ORDER0 and freq[0].sum() != tables.SCALE:  # an empty table: no slot is valid
        return 6
    symbols, info = tables.split_decode_tables(freq, np.arange(n_tables))
    ok = (_decode_order0(buf, p + tlen, end, symbols, info, out) if model == ORDER0
          else _decode_prev(buf, p + tlen, end, symbols, info, out))
    return 0 if ok else 7


def encode(data: np.ndarray) -> bytes:
    """Code a byte string (uint8 array) with the model that makes it smallest."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    out = np.empty(max_record_bytes(data.size), np.uint8)
    return out[:encode_into(data, out, 0)].tobytes()


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
