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

from .. import varint
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
    Each frequency is ``counts * SCALE / total`` rounded down, then the slots left over go one
    each to the symbols with the largest remainders (ties to the lower symbol), which keeps
    near-uniform tables of many symbols close to their counts. Integer arithmetic and a stable
    sort only: encoder and decoder agree on every platform. A row with more than ``SCALE``
    present symbols is an error (returned as all -1).
    """
    n_t, n_s = counts.shape
    freq = np.zeros((n_t, n_s), np.int64)
    rem = np.empty(n_s, np.int64)
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
        for s in range(n_s):
            c = counts[t, s]
            rem[s] = -1 - total  # absent symbols: never chosen
            if c > 0:
                f = max(1, (c * SCALE) // total)
                freq[t, s] = f
                acc += f
                rem[s] = c * SCALE - f * total  # < 0 for symbols raised to 1
        diff = SCALE - acc
        if diff > 0:
            order = np.argsort(-rem, kind="mergesort")
            for j in range(diff):
                freq[t, order[j]] += 1
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


def serialize(counts: np.ndarray) -> bytes:
    """Approximate, serialized form of ``counts`` (int64 ``(n_tables, n_symbols)``,
    ``n_symbols <= 256``). Per table: varint ``(span << 1) | has_first``, varint ``first`` if
    ``has_first``, then ``span`` bytes: the codes of symbols ``first .. first + span - 1``."""
    codes = approx_code(np.asarray(counts, dtype=np.int64))
    out = np.empty(codes.shape[0] * (codes.shape[1] + 8), np.uint8)
    return out[:serialize_into(codes, out)].tobytes()


@njit(nogil=True, cache=True)
def serialize_into(codes, out):
    """The serialized tables (see :func:`serialize`) of the table codes ``codes``
    (:func:`approx_code`) into the uint8 array ``out``; returns the bytes written."""
    pos = 0
    for t in range(codes.shape[0]):
        first, last = -1, 0
        for s_ in range(codes.shape[1]):
            if codes[t, s_] != 0:
                if first < 0:
                    first = s_
                last = s_ + 1
        first = max(first, 0)
        span = last - first
        pos = varint.put(out, pos, (span << 1) | (first > 0))
        if first > 0:
            pos = varint.put(out, pos, first)
        for s_ in range(first, last):
            out[pos] = codes[t, s_]
            pos += 1
    return pos


_TABLE_ERRORS = {1: "truncated or malformed frequency tables",
                 2: "frequency table larger than the alphabet or truncated",
                 3: "trailing bytes after the frequency tables"}


def deserialize(buf, n_tables: int, n_symbols: int) -> np.ndarray:
    """Approximate counts (int64 ``(n_tables, n_symbols)``) from :func:`serialize` output.

    Raises:
        CorruptStreamError: the bytes do not hold ``n_tables`` tables of that alphabet.
    """
    codes, status = deserialize_codes(np.frombuffer(buf, np.uint8), n_tables, n_symbols)
    if status:
        raise CorruptStreamError(_TABLE_ERRORS[status])
    return approx_value(codes)


@njit(nogil=True, cache=True)
def deserialize_codes(buf, n_tables, n_symbols):
    """Codes of :func:`serialize_into` output, and a status (0 ok, else a key of ``_TABLE_ERRORS``)."""
    codes = np.zeros((n_tables, n_symbols), np.int64)
    pos = 0
    n = buf.shape[0]
    for t in range(n_tables):
        h, pos = varint.get(buf, pos, n)
        if h < 0:
            return codes, 1
        first = 0
        if h & 1:
            first, pos = varint.get(buf, pos, n)
            if first < 0:
                return codes, 1
        span = h >> 1
        if first + span > n_symbols or pos + span > n:
            return codes, 2
        for s_ in range(span):
            codes[t, first + s_] = buf[pos + s_]
        pos += span
    return codes, (3 if pos != n else 0)


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


@njit(inline="always")
def _in_use(freq, t):
    """Whether table ``t``'s frequencies add up to ``SCALE`` (else it is unused: its slots decode
    to the invalid symbol)."""
    total = 0
    for s in range(freq.shape[1]):
        total += freq[t, s]
    return total == SCALE


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
    n_s = freq.shape[1]
    n_c = cmap.shape[0]
    symbols = np.full(n_c * SCALE, INVALID_ENTRY, np.uint8)
    info = np.zeros(n_c * SPLIT_SYMBOLS, np.uint32)
    for c in range(n_c):
        t = cmap[c]
        if not _in_use(freq, t):
            continue
        slot = 0
        for s in range(n_s):
            f = freq[t, s]
            info[c * SPLIT_SYMBOLS + s] = f | (slot << 12)
            symbols[c * SCALE + slot:c * SCALE + slot + f] = s
            slot += f
    return symbols, info


#: Bit fields of a packed decode entry (:func:`packed_decode_table`).
PACKED_FREQ_SHIFT = 8
PACKED_BIAS_SHIFT = 8 + SCALE_BITS


@njit(nogil=True, cache=True)
def packed_decode_table(freq):
    """Decode tables with one 32-bit entry per slot, for decoders that keep several rANS states
    in flight (one load per symbol instead of two dependent ones).

    Args:
        freq: normalized frequencies, int64 ``(n_tables, n_symbols)``, ``n_symbols <= 256``.

    Returns:
        uint32 ``(n_tables * SCALE,)`` indexed by ``table << SCALE_BITS | slot``: the slot's
        symbol in bits 0-7, its frequency minus one from bit :data:`PACKED_FREQ_SHIFT` and
        ``slot - cumulative frequency`` from bit :data:`PACKED_BIAS_SHIFT` (11 bits each), so
        the next state is ``(f - 1 + 1) * (state >> SCALE_BITS) + bias``. The slots of a table
        whose frequencies do not add up to ``SCALE`` (unused) hold symbol 255 (invalid), frequency 1.
    """
    n_t, n_s = freq.shape
    out = np.full(n_t * SCALE, INVALID_ENTRY, np.uint32)
    for t in range(n_t):
        if not _in_use(freq, t):
            continue
        slot = 0
        for s in range(n_s):
            for k in range(freq[t, s]):
                out[t * SCALE + slot] = s | ((freq[t, s] - 1) << PACKED_FREQ_SHIFT) | (k << PACKED_BIAS_SHIFT)
                slot += 1
    return out
