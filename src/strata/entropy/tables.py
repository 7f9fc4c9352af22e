"""Static frequency tables for the rANS coder: approximation, normalization, serialization.

A table holds, for one coding context, the frequency of each symbol, scaled to sum to
``2**SCALE_BITS``. Tables travel in the stream in an approximate form -- the counts of a
group of tables are scaled down together below ``2**19`` and each is rounded down to a
4-bit-mantissa "mini float" (exact below 16, otherwise within 1/16), one byte -- and both
encoder and decoder normalize that approximation with the same integer arithmetic, so they
agree bit for bit on every platform. The approximation costs a fraction of a percent of the
coded size; its benefit is a table of one byte per symbol.

Serialized form of a group of tables (see ``docs/format.md``): for each table, a varint
``(span << 1) | has_first``, the first present symbol as a varint if ``has_first``, then
``span`` bytes, the codes of the approximated counts of the symbols from the first one on.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import CorruptStreamError

SCALE_BITS = 11
SCALE = 1 << SCALE_BITS
#: Decode-table entry of an unused table's slots (symbol 255, frequency 0).
INVALID_ENTRY = 255
_MANT = 4  # mantissa bits of the approximate count
_MAX_COUNT_BITS = 19  # counts below 2**19 have codes below 256


@njit(nogil=True, cache=True)
def _bit_length(v):
    n = 0
    while v > 0:
        v >>= 1
        n += 1
    return n


@njit(nogil=True, cache=True)
def approx_code(counts):
    """Codes (0..255) of the approximate counts of a group of tables (int64 2D array); counts
    are first scaled together below ``2**19``. 0 marks an absent symbol."""
    top = 0
    for v in counts.ravel():
        top = max(top, v)
    shift = max(0, _bit_length(top) - _MAX_COUNT_BITS)
    out = np.zeros(counts.shape, np.int64)
    for t in range(counts.shape[0]):
        for s_ in range(counts.shape[1]):
            c = counts[t, s_]
            if c <= 0:
                continue
            c = max(1, c >> shift)
            e = max(0, _bit_length(c) - (_MANT + 1))
            out[t, s_] = ((e + 1) << _MANT | ((c >> e) & ((1 << _MANT) - 1))) if e > 0 else c
    return out


@njit(nogil=True, cache=True)
def approx_value(codes):
    """Approximate counts from :func:`approx_code` codes (int64 2D array)."""
    out = np.zeros(codes.shape, np.int64)
    for t in range(codes.shape[0]):
        for s_ in range(codes.shape[1]):
            code = codes[t, s_]
            e = code >> _MANT
            out[t, s_] = code if e <= 1 else ((1 << _MANT) | (code & ((1 << _MANT) - 1))) << (e - 1)
    return out


def quantized(counts: np.ndarray) -> np.ndarray:
    """Counts as the decoder will see them (scaled, through :func:`approx_code`)."""
    return approx_value(approx_code(np.asarray(counts, dtype=np.int64)))


@njit(nogil=True, cache=True)
def normalize(counts):
    """Scale each row of ``counts`` (int64 ``(n_tables, n_symbols)``) to sum to ``SCALE``.

    Every present symbol keeps a frequency of at least 1; rows with no counts stay zero.
    Integer arithmetic only. A row with more than ``SCALE`` present symbols is an error
    (returned as all -1).
    """
    n_t, n_s = counts.shape
    freq = np.zeros((n_t, n_s), np.int64)
    for t in range(n_t):
        total = 0
        present = 0
        for s in range(n_s):
            total += counts[t, s]
            present += counts[t, s] > 0
        if total == 0:
            continue
        if present > SCALE:
            freq[:] = -1
            return freq
        acc = 0
        big = 0
        for s in range(n_s):
            c = counts[t, s]
            if c > 0:
                f = max(1, (c * SCALE) // total)
                freq[t, s] = f
                acc += f
                if f > freq[t, big]:
                    big = s
        diff = SCALE - acc
        if diff >= 0 or freq[t, big] + diff >= 1:
            freq[t, big] += diff
            continue
        # too many forced ones: take from the largest frequencies in turn
        while diff < 0:
            j = 0
            for s in range(n_s):
                if freq[t, s] > freq[t, j]:
                    j = s
            take = min(freq[t, j] - 1, -diff, max(1, freq[t, j] // 2))
            freq[t, j] -= take
            diff += take
    return freq


def _spans(codes: np.ndarray):
    """Per row: (first, one past the last) present symbol; (0, 0) for an empty row."""
    present = codes != 0
    any_ = present.any(axis=1)
    first = np.where(any_, np.argmax(present, axis=1), 0)
    last = np.where(any_, codes.shape[1] - np.argmax(present[:, ::-1], axis=1), 0)
    return first, last


def serialize(counts: np.ndarray) -> bytes:
    """Approximate, serialized form of ``counts`` (int64 ``(n_tables, n_symbols)``,
    ``n_symbols <= 256``). Per table: varint ``(span << 1) | has_first``, varint ``first`` if
    ``has_first``, then ``span`` bytes: the codes of symbols ``first .. first + span - 1``."""
    codes = approx_code(np.asarray(counts, dtype=np.int64)).astype(np.uint8)
    first, last = _spans(codes)
    out = bytearray()
    for t in range(codes.shape[0]):
        f, span = int(first[t]), int(last[t] - first[t])
        _varint(out, (span << 1) | (f > 0))
        if f > 0:
            _varint(out, f)
        out += codes[t, f:f + span].tobytes()
    return bytes(out)


def _varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def deserialize(buf, n_tables: int, n_symbols: int) -> np.ndarray:
    """Approximate counts (int64 ``(n_tables, n_symbols)``) from :func:`serialize` output.

    Raises:
        CorruptStreamError: the bytes do not hold ``n_tables`` tables of that alphabet.
    """
    codes = np.zeros((n_tables, n_symbols), dtype=np.int64)
    buf = memoryview(buf).cast("B")
    pos = 0
    for t in range(n_tables):
        h, pos = _get_varint(buf, pos)
        first = 0
        if h & 1:
            first, pos = _get_varint(buf, pos)
        span = h >> 1
        if first + span > n_symbols or pos + span > len(buf):
            raise CorruptStreamError("frequency table larger than the alphabet or truncated")
        codes[t, first:first + span] = np.frombuffer(buf[pos:pos + span], dtype=np.uint8)
        pos += span
    if pos != len(buf):
        raise CorruptStreamError("trailing bytes after the frequency tables")
    return approx_value(codes)


def _get_varint(buf, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise CorruptStreamError("truncated or malformed frequency tables")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7


@njit(nogil=True, cache=True)
def cost_bits(counts):
    """Estimated coded size in bits of the symbols counted in ``counts`` (the empirical
    entropy of each row), plus the serialized tables."""
    bits = 0.0
    for t in range(counts.shape[0]):
        tot = 0
        first = -1
        k = 0
        for s_ in range(counts.shape[1]):
            tot += counts[t, s_]
            if counts[t, s_] > 0:
                k = s_ + 1
                if first < 0:
                    first = s_
        for s_ in range(k):
            c = counts[t, s_]
            if c > 0:
                bits += c * np.log2(tot / c)
        span = k - max(first, 0)
        bits += 8 * (span + 1 + (first > 0) + (span >= 64))
    return bits


def cumulative(freq: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums of each row of ``freq``."""
    cum = np.zeros_like(freq)
    cum[:, 1:] = np.cumsum(freq, axis=1)[:, :-1]
    return cum


#: Info entries per table of the split decode tables (any byte is a valid index).
SPLIT_SYMBOLS = 256


@njit(nogil=True, cache=True)
def split_decode_tables(freq, cmap):
    """Decode tables of each context, in split form: ``(symbols, info)``.

    Args:
        freq: normalized frequencies, int64 ``(n_tables, n_symbols)``, ``n_symbols <= 256``.
        cmap: table of each context, int64 ``(n_contexts,)``.

    Returns:
        ``symbols``: uint8 ``(n_contexts * SCALE,)``, the symbol owning each slot, indexed by
        ``context << SCALE_BITS | slot``; ``info``: uint32 ``(n_contexts * 256,)``, indexed by
        ``context << 8 | symbol``: ``frequency | cumulative frequency << 12``, 0 for a symbol
        that owns no slot. The slots of an unused table hold symbol 255 with info 0
        (invalid). Symbols are laid out in increasing order, so symbol 0 (if present) owns
        the first ``frequency`` slots of its table.

    The symbol table, a byte per slot, keeps the hot contexts in L1 cache; the info word
    is only needed to update the state (:func:`strata.entropy.rans.decode_step`).
    """
    n_t, n_s = freq.shape
    sym_rows = np.full((n_t, SCALE), INVALID_ENTRY, np.uint8)
    info_rows = np.zeros((n_t, SPLIT_SYMBOLS), np.uint32)
    for t in range(n_t):
        total = 0
        for s in range(n_s):
            total += freq[t, s]
        if total != SCALE:
            continue
        slot = 0
        for s in range(n_s):
            info_rows[t, s] = freq[t, s] | (slot << 12)
            for _ in range(freq[t, s]):
                sym_rows[t, slot] = s
                slot += 1
    n_c = cmap.shape[0]
    symbols = np.empty(n_c * SCALE, np.uint8)
    info = np.empty(n_c * SPLIT_SYMBOLS, np.uint32)
    for c in range(n_c):
        symbols[c * SCALE:(c + 1) * SCALE] = sym_rows[cmap[c]]
        info[c * SPLIT_SYMBOLS:(c + 1) * SPLIT_SYMBOLS] = info_rows[cmap[c]]
    return symbols, info
