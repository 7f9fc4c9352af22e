"""Entropy coding of a byte string (one byte plane of a chunk), with the best of three models.

* ``RAW``: the bytes as they are (planes of near-random mantissa bits);
* ``CONST``: one byte repeated (all-zero planes of XOR deltas);
* ``ORDER0``: rANS with one static table and two interleaved states (even and odd bytes), so
  that decoding runs two independent dependency chains (exponent planes, sparse deltas);
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
    for k in range(data.shape[0] - 1, -1, -1):
        t = (np.int64(data[k - 1]) >> shift) if k > 0 else 0
        state, pos = rans.encode_put_fast(state, buf, pos, enc[t, data[k]])
    return rans.encode_flush(state, buf, pos)


@njit(nogil=True, cache=True)
def _encode2(data, enc, buf):
    """Order-0 rANS with two interleaved states (state ``k & 1`` codes byte ``k``), backwards
    into the end of ``buf``; returns the start of the coded bytes."""
    sa = np.int64(rans.RANS_L)
    sb = np.int64(rans.RANS_L)
    pos = buf.shape[0]
    for k in range(data.shape[0] - 1, -1, -1):
        if k & 1:
            sb, pos = rans.encode_put_fast(sb, buf, pos, enc[0, data[k]])
        else:
            sa, pos = rans.encode_put_fast(sa, buf, pos, enc[0, data[k]])
    pos = rans.encode_flush(sb, buf, pos)
    return rans.encode_flush(sa, buf, pos)


@njit(nogil=True, cache=True)
def _decode2(payload, pos, end, dtab, out):
    """Inverse of :func:`_encode2`; False if the stream is inconsistent."""
    sa, pos = rans.decode_init(payload, pos, end)
    sb, pos = rans.decode_init(payload, pos, end)
    if sa < rans.RANS_L or sb < rans.RANS_L:
        return False
    n = out.shape[0]
    for k in range(0, n - 1, 2):
        ea = np.int64(dtab[0, rans.decode_slot(sa)])
        eb = np.int64(dtab[0, rans.decode_slot(sb)])
        if not (rans.entry_valid(ea) and rans.entry_valid(eb)):
            return False
        sa, pos = rans.decode_advance(sa, payload, pos, end, ea)
        sb, pos = rans.decode_advance(sb, payload, pos, end, eb)
        out[k] = rans.entry_symbol(ea)
        out[k + 1] = rans.entry_symbol(eb)
    if n & 1:
        ea = np.int64(dtab[0, rans.decode_slot(sa)])
        if not rans.entry_valid(ea):
            return False
        sa, pos = rans.decode_advance(sa, payload, pos, end, ea)
        out[n - 1] = rans.entry_symbol(ea)
    return pos == end and sa == rans.RANS_L and sb == rans.RANS_L


@njit(nogil=True, cache=True)
def _decode(payload, pos, end, dtab, shift, out):
    """Decode ``out.size`` bytes coded by :func:`_encode`; returns False if the stream is
    inconsistent (invalid slot, not consumed exactly, wrong final state)."""
    state, pos = rans.decode_init(payload, pos, end)
    if state < rans.RANS_L:
        return False
    prev = 0
    for k in range(out.shape[0]):
        entry = np.int64(dtab[prev >> shift, rans.decode_slot(state)])
        if not rans.entry_valid(entry):
            return False
        state, pos = rans.decode_advance(state, payload, pos, end, entry)
        prev = rans.entry_symbol(entry)
        out[k] = prev
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
    buf = np.empty(2 * n + 16, np.uint8)
    enc = rans.encoder_table(freq)
    start = _encode2(data, enc, buf) if model == ORDER0 else _encode(data, enc, shift, buf)
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
    tlen, pos = tables._get_varint(mv, 1)
    if pos + tlen > len(mv):
        raise CorruptStreamError("byte-plane tables truncated")
    n_tables = 1 if model == ORDER0 else _N_PREV
    counts = tables.deserialize(mv[pos:pos + tlen], n_tables, 256)
    freq = tables.normalize(counts)
    if freq.min(initial=0) < 0:
        raise CorruptStreamError("invalid byte-plane table")
    dtab = tables.decode_table(freq, np.arange(n_tables, dtype=np.int64))
    payload = np.frombuffer(mv, np.uint8)
    ok = (_decode2(payload, pos + tlen, len(mv), dtab, out) if model == ORDER0
          else _decode(payload, pos + tlen, len(mv), dtab, _PREV_SHIFT, out))
    if not ok:
        raise CorruptStreamError("byte-plane entropy-coded data inconsistent")
    return out
