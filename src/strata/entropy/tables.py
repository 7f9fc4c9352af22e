"""Static frequency tables for the rANS coder: approximation, normalization, serialization.

A table holds, for one coding context, the frequency of each symbol, scaled to sum to
``2**SCALE_BITS``. Tables travel in the stream in an approximate form -- the counts of a
group of tables are scaled down together below ``2**19`` and each is rounded down to a
4-bit-mantissa "mini float" (exact below 16, otherwise within 1/16), one byte -- and both
encoder and decoder normalize that approximation with the same integer arithmetic, so they
agree bit for bit on every platform. The approximation costs a fraction of a percent of the
coded size; its benefit is a table of one byte per symbol.

Serialized form of a group of tables (see ``docs/format.md``): for each table, one byte
``k`` = one plus the largest present symbol (0 for an unused table), then ``k`` bytes, the
codes of the approximated counts.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import CorruptStreamError

SCALE_BITS = 11
SCALE = 1 << SCALE_BITS
#: Decode-table entry of an unused table's slots (symbol 127, frequency 0).
INVALID_ENTRY = 127
_MANT = 4  # mantissa bits of the approximate count
_MAX_COUNT_BITS = 19  # counts below 2**19 have codes below 256


def approx_code(counts: np.ndarray) -> np.ndarray:
    """Codes (0..255) of the approximate counts, 0 for an absent symbol; counts < 2**19."""
    c = np.asarray(counts, dtype=np.int64)
    e = np.maximum(_bit_length(c) - (_MANT + 1), 0)
    m = c >> e
    return np.where(e > 0, (e + 1) << _MANT | (m & ((1 << _MANT) - 1)), c)


def approx_value(code: np.ndarray) -> np.ndarray:
    """Approximate counts from :func:`approx_code` codes."""
    code = np.asarray(code, dtype=np.int64)
    e = code >> _MANT
    m = code & ((1 << _MANT) - 1)
    return np.where(e <= 1, code, ((1 << _MANT) | m) << np.maximum(e - 1, 0))


def _bit_length(c: np.ndarray) -> np.ndarray:
    out = np.zeros_like(c)
    v = c.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = v >= (1 << shift)
        out += np.where(big, shift, 0)
        v = np.where(big, v >> shift, v)
    return out + (v > 0)


def _scaled(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.int64)
    top = int(counts.max(initial=0))
    shift = max(0, top.bit_length() - _MAX_COUNT_BITS)
    return np.where(counts > 0, np.maximum(1, counts >> shift), 0)


def quantized(counts: np.ndarray) -> np.ndarray:
    """Counts as the decoder will see them (scaled, through :func:`approx_code`)."""
    return approx_value(approx_code(_scaled(counts)))


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


def serialize(counts: np.ndarray) -> bytes:
    """Approximate, serialized form of ``counts`` (int64 ``(n_tables, n_symbols)``,
    ``n_symbols <= 255``)."""
    codes = approx_code(_scaled(counts)).astype(np.uint8)
    present = codes != 0
    k = np.where(present.any(axis=1), codes.shape[1] - np.argmax(present[:, ::-1], axis=1), 0)
    return b"".join(bytes([int(kt)]) + codes[t, :kt].tobytes() for t, kt in enumerate(k))


def serialized_size(counts: np.ndarray) -> int:
    """Length of :func:`serialize` output, without building it."""
    present = np.asarray(counts) > 0
    k = np.where(present.any(axis=1), present.shape[1] - np.argmax(present[:, ::-1], axis=1), 0)
    return int(k.sum() + len(k))


def deserialize(buf, n_tables: int, n_symbols: int) -> np.ndarray:
    """Approximate counts (int64 ``(n_tables, n_symbols)``) from :func:`serialize` output.

    Raises:
        CorruptStreamError: the bytes do not hold ``n_tables`` tables of that alphabet.
    """
    codes = np.zeros((n_tables, n_symbols), dtype=np.int64)
    buf = memoryview(buf).cast("B")
    pos = 0
    for t in range(n_tables):
        if pos >= len(buf):
            raise CorruptStreamError("truncated frequency tables")
        k = buf[pos]
        pos += 1
        if k > n_symbols or pos + k > len(buf):
            raise CorruptStreamError("frequency table larger than the alphabet or truncated")
        codes[t, :k] = np.frombuffer(buf[pos:pos + k], dtype=np.uint8)
        pos += k
    if pos != len(buf):
        raise CorruptStreamError("trailing bytes after the frequency tables")
    return approx_value(codes)


def cost_bits(counts: np.ndarray) -> float:
    """Estimated coded size in bits of the symbols counted in ``counts`` (ideal
    adaptive-free entropy of each row), plus the serialized tables."""
    counts = np.asarray(counts, dtype=np.float64)
    tot = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = np.where(counts > 0, counts * np.log2(tot / np.maximum(counts, 1)), 0.0)
    return float(bits.sum()) + 8 * serialized_size(counts)


def cumulative(freq: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums of each row of ``freq``."""
    cum = np.zeros_like(freq)
    cum[:, 1:] = np.cumsum(freq, axis=1)[:, :-1]
    return cum


@njit(nogil=True, cache=True)
def decode_table(freq):
    """Packed decode table, uint32 ``(n_tables, SCALE)``: for each slot,
    ``symbol | frequency << 7 | (slot - cumulative frequency) << 20``. Symbols must be below
    127; the slots of an unused table hold symbol 127 with frequency 0 (invalid)."""
    n_t, n_s = freq.shape
    out = np.full((n_t, SCALE), INVALID_ENTRY, np.uint32)
    for t in range(n_t):
        total = 0
        for s in range(n_s):
            total += freq[t, s]
        if total != SCALE:
            continue
        slot = 0
        for s in range(n_s):
            for b in range(freq[t, s]):
                out[t, slot] = s | (freq[t, s] << 7) | (b << 20)
                slot += 1
    return out
