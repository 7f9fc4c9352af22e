"""Entropy coding of a byte string (one byte plane of a chunk), with the best of three models.

* ``RAW``: the bytes as they are (planes of near-random mantissa bits);
* ``CONST``: one byte repeated (all-zero planes of XOR deltas);
* ``ORDER0``: rANS with one static table and four interleaved states (byte ``k`` uses state
  ``k mod 4``), so that decoding runs four independent dependency chains (exponent planes,
  sparse deltas);
* ``PREV``: rANS with 16 tables chosen by the high nibble of the previous byte (planes whose
  bytes are correlated with their neighbour's, e.g. the low mantissa bytes of smooth tensors).

The encoder histograms the bytes under both models, estimates each coded size (tables
included) and keeps the smallest, unless it saves less than ``MIN_GAIN`` of the raw size, in
which case raw bytes are cheaper to decode. Layout: ``u8 model | payload`` where the payload is
the raw bytes, the repeated byte, or ``varint table length | tables | rANS bytes``
(:mod:`strata.entropy.tables`, :mod:`strata.entropy.rans`). The number of bytes is known to
the caller (it is part of its own index).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..container import Reader
from ..errors import CorruptStreamError
from . import rans, tables

RAW, ORDER0, PREV, CONST = 0, 1, 2, 3
#: Coding must save at least this fraction of the raw size.
MIN_GAIN = 0.01
_PREV_SHIFT = 4
_N_PREV = 256 >> _PREV_SHIFT


@njit(nogil=True, cache=True)
def _histograms(data):
    """Counts of each byte overall (``(1, 256)``) and after each previous high nibble
    (``(16, 256)``)."""
    h0 = np.zeros((1, 256), np.int64)
    hp = np.zeros((_N_PREV, 256), np.int64)
    prev = 0
    for k in range(data.shape[0]):
        b = data[k]
        h0[0, b] += 1
        hp[prev >> _PREV_SHIFT, b] += 1
        prev = b
    return h0, hp


@njit(nogil=True, cache=True)
def _encode(data, enc, shift, buf):
    """rANS-code ``data`` backwards into the end of ``buf``; table ``data[k-1] >> shift``
    (``shift = 8`` gives one table). Returns the start of the coded bytes in ``buf``."""
    state = np.int64(rans.RANS_L)
    pos = buf.shape[0]
    flat = enc.ravel()
    n_s = enc.shape[1]
    for k in range(data.shape[0] - 1, -1, -1):
        t = (np.int64(data[k - 1]) >> shift) if k > 0 else 0
        state, pos = rans.encode_put_fast(state, buf, pos, flat, rans.encoder_offset(t, data[k], n_s))
    return rans.encode_flush(state, buf, pos)


@njit(nogil=True, cache=True)
def _encode4(data, enc, buf):
    """Order-0 rANS with four interleaved states (state ``k & 3`` codes byte ``k``), backwards
    into the end of ``buf``; returns the start of the coded bytes."""
    st = np.full(4, rans.RANS_L, np.int64)
    pos = buf.shape[0]
    flat = enc.ravel()
    n_s = enc.shape[1]
    for k in range(data.shape[0] - 1, -1, -1):
        j = k & 3
        st[j], pos = rans.encode_put_fast(st[j], buf, pos, flat, rans.encoder_offset(0, data[k], n_s))
    for j in range(3, -1, -1):
        pos = rans.encode_flush(st[j], buf, pos)
    return pos


@njit(nogil=True, cache=True)
def _decode4(payload, pos, end, symbols, info, out):
    """Inverse of :func:`_encode4`: four independent dependency chains; False if the stream
    is inconsistent."""
    s0, pos = rans.decode_init(payload, pos, end)
    s1, pos = rans.decode_init(payload, pos, end)
    s2, pos = rans.decode_init(payload, pos, end)
    s3, pos = rans.decode_init(payload, pos, end)
    if min(s0, s1, s2, s3) < rans.RANS_L:
        return False
    n = out.shape[0]
    k = np.uint64(0)
    while k + np.uint64(3) < n:
        y0, i0 = rans.decode_lookup(s0, symbols, info, 0)
        y1, i1 = rans.decode_lookup(s1, symbols, info, 0)
        y2, i2 = rans.decode_lookup(s2, symbols, info, 0)
        y3, i3 = rans.decode_lookup(s3, symbols, info, 0)
        if not (rans.info_valid(i0) and rans.info_valid(i1) and rans.info_valid(i2) and rans.info_valid(i3)):
            return False
        s0, pos = rans.decode_step(s0, i0, payload, pos, end)
        s1, pos = rans.decode_step(s1, i1, payload, pos, end)
        s2, pos = rans.decode_step(s2, i2, payload, pos, end)
        s3, pos = rans.decode_step(s3, i3, payload, pos, end)
        out[k] = y0
        out[k + np.uint64(1)] = y1
        out[k + np.uint64(2)] = y2
        out[k + np.uint64(3)] = y3
        k += np.uint64(4)
    while k < n:  # the last n % 4 bytes, states 0.. in turn
        j = k & np.uint64(3)
        st = s0 if j == 0 else (s1 if j == 1 else s2)
        y, i = rans.decode_lookup(st, symbols, info, 0)
        if not rans.info_valid(i):
            return False
        st, pos = rans.decode_step(st, i, payload, pos, end)
        if j == 0:
            s0 = st
        elif j == 1:
            s1 = st
        else:
            s2 = st
        out[k] = y
        k += np.uint64(1)
    return pos == end and s0 == rans.RANS_L and s1 == rans.RANS_L and s2 == rans.RANS_L and s3 == rans.RANS_L


@njit(nogil=True, cache=True)
def _decode(payload, pos, end, symbols, info, shift, out):
    """Decode ``out.size`` bytes coded by :func:`_encode`; returns False if the stream is
    inconsistent (invalid slot, not consumed exactly, wrong final state)."""
    state, pos = rans.decode_init(payload, pos, end)
    if state < rans.RANS_L:
        return False
    prev = np.uint64(0)
    for k in range(out.shape[0]):
        y, i = rans.decode_lookup(state, symbols, info, prev >> np.uint64(shift))
        if not rans.info_valid(i):
            return False
        state, pos = rans.decode_step(state, i, payload, pos, end)
        prev = np.uint64(y)
        out[k] = y
    return pos == end and state == rans.RANS_L


def estimate_bits(data: np.ndarray) -> float:
    """Estimated size in bits of :func:`encode` output for ``data`` (uint8 array)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if data.size == 0:
        return 8.0
    h0, hp = _histograms(data)
    return min(8.0 * data.size, tables.cost_bits(h0), tables.cost_bits(hp)) + 8


def encode(data: np.ndarray) -> bytes:
    """Code a byte string (uint8 array) with the model that makes it smallest."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    n = data.shape[0]
    if n == 0:
        return bytes([RAW])
    h0, hp = _histograms(data)
    if h0[0, data[0]] == n:
        return bytes([CONST, int(data[0])])
    raw_bits = 8.0 * n
    c0 = tables.cost_bits(h0)
    cp = tables.cost_bits(hp)
    model, counts, shift = (ORDER0, h0, 8) if c0 <= cp else (PREV, hp, _PREV_SHIFT)
    if min(c0, cp) > (1 - MIN_GAIN) * raw_bits:
        return bytes([RAW]) + data.tobytes()
    freq = tables.normalize(tables.quantized(counts))
    table_bytes = tables.serialize(counts)
    buf = np.empty(2 * n + 32, np.uint8)
    enc = rans.encoder_table(freq)
    start = _encode4(data, enc, buf) if model == ORDER0 else _encode(data, enc, shift, buf)
    head = bytearray([model])
    tables._varint(head, len(table_bytes))
    return bytes(head) + table_bytes + buf[start:].tobytes()


def decode(buf, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """Decode ``n`` bytes coded by :func:`encode` from ``buf`` (bytes-like), into ``out`` if
    given (uint8, length ``n``).

    Raises:
        CorruptStreamError: unknown model, truncated or inconsistent data.
    """
    mv = memoryview(buf).cast("B")
    out = np.empty(n, np.uint8) if out is None else out
    if len(mv) < 1:
        raise CorruptStreamError("empty byte-plane record")
    model = mv[0]
    if model == RAW:
        if len(mv) != n + 1:
            raise CorruptStreamError(f"raw byte plane of {len(mv) - 1} bytes, expected {n}")
        out[:] = np.frombuffer(mv, np.uint8, n, 1)
        return out
    if model == CONST:
        if len(mv) != 2:
            raise CorruptStreamError("constant byte plane of the wrong length")
        out[:] = mv[1]
        return out
    if model not in (ORDER0, PREV):
        raise CorruptStreamError(f"unknown byte-plane model {model}")
    r = Reader(mv, "byte-plane record")
    r.pos = 1
    tlen = r.varint(len(mv))
    pos = r.pos
    if pos + tlen > len(mv):
        raise CorruptStreamError("byte-plane tables truncated")
    n_tables = 1 if model == ORDER0 else _N_PREV
    counts = tables.deserialize(mv[pos:pos + tlen], n_tables, 256)
    freq = tables.normalize(counts)
    if freq.min(initial=0) < 0:
        raise CorruptStreamError("invalid byte-plane table")
    symbols, info = tables.split_decode_tables(freq, np.arange(n_tables, dtype=np.int64))
    payload = np.frombuffer(mv, np.uint8)
    ok = (_decode4(payload, pos + tlen, len(mv), symbols, info, out) if model == ORDER0
          else _decode(payload, pos + tlen, len(mv), symbols, info, _PREV_SHIFT, out))
    if not ok:
        raise CorruptStreamError("byte-plane entropy-coded data inconsistent")
    return out
