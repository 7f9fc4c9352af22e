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

from ..errors import CorruptStreamError

SCALE_BITS = 12
SCALE = 1 << SCALE_BITS
_MANT = 4  # mantissa bits of the approximate count


def approx_code(counts: np.ndarray) -> np.ndarray:
    """Codes of the approximate counts (0 for an absent symbol), int64 array."""
    c = np.asarray(counts, dtype=np.int64)
    e = np.zeros_like(c)
    big = c >= (1 << _MANT)
    # exponent such that (c >> e) has _MANT+1 bits
    e[big] = np.floor(np.log2(c[big])).astype(np.int64) - _MANT
    # guard against float log2 error on exact powers of two
    e[big] += (c[big] >> e[big]) >= (1 << (_MANT + 1))
    e[big] -= (c[big] >> e[big]) < (1 << _MANT)
    m = np.where(big, c >> e, c)
    return np.where(big, (e + 1) << _MANT | (m & ((1 << _MANT) - 1)), c)


def approx_value(code: np.ndarray) -> np.ndarray:
    """Approximate counts from :func:`approx_code` codes."""
    code = np.asarray(code, dtype=np.int64)
    e = code >> _MANT
    m = code & ((1 << _MANT) - 1)
    return np.where(e == 0, code, ((1 << _MANT) | m) << np.maximum(e - 1, 0))


def normalize(counts: np.ndarray) -> np.ndarray:
    """Scale each row of ``counts`` (int64 ``(n_tables, n_symbols)``) to sum to ``SCALE``.

    Every present symbol keeps a frequency of at least 1; rows with no counts stay zero.
    Integer arithmetic only.
    """
    counts = np.asarray(counts, dtype=np.int64)
    freq = np.zeros_like(counts)
    for t in range(counts.shape[0]):
        c = counts[t]
        total = int(c.sum())
        if total == 0:
            continue
        present = c > 0
        if int(present.sum()) > SCALE:
            raise ValueError("more symbols than table slots")
        f = np.where(present, np.maximum(1, (c * SCALE) // total), 0)
        diff = SCALE - int(f.sum())
        # give the remainder to (or take the excess from) the largest frequencies
        order = np.argsort(-f, kind="stable")
        i = 0
        while diff != 0:
            j = order[i % len(order)]
            if diff > 0:
                f[j] += diff
                diff = 0
            elif f[j] > 1:
                take = min(f[j] - 1, -diff)
                f[j] -= take
                diff += take
            i += 1
        freq[t] = f
    return freq


_MAX_COUNT_BITS = 19  # counts below 2**19 have codes below 256


def _scaled(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.int64)
    top = int(counts.max(initial=0))
    shift = max(0, top.bit_length() - _MAX_COUNT_BITS)
    return np.where(counts > 0, np.maximum(1, counts >> shift), 0)


def quantized(counts: np.ndarray) -> np.ndarray:
    """Counts as the decoder will see them (scaled, through :func:`approx_code`)."""
    return approx_value(approx_code(_scaled(counts)))


def serialize(counts: np.ndarray) -> bytes:
    """Approximate, serialized form of ``counts`` (int64 ``(n_tables, n_symbols)``,
    ``n_symbols <= 255``)."""
    codes = approx_code(_scaled(counts))
    out = bytearray()
    for row in codes:
        nz = np.nonzero(row)[0]
        k = int(nz[-1]) + 1 if len(nz) else 0
        out.append(k)
        out += row[:k].astype(np.uint8).tobytes()
    return bytes(out)


def deserialize(buf: bytes, n_tables: int, n_symbols: int) -> np.ndarray:
    """Approximate counts (int64 ``(n_tables, n_symbols)``) from :func:`serialize` output.

    Raises:
        CorruptStreamError: the bytes do not hold ``n_tables`` tables of that alphabet.
    """
    codes = np.zeros((n_tables, n_symbols), dtype=np.int64)
    buf = memoryview(buf)
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
    """Estimated coded size in bits of the symbols counted in ``counts``, plus the tables."""
    counts = np.asarray(counts, dtype=np.int64)
    freq = normalize(quantized(counts))
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = np.where(counts > 0, counts * (SCALE_BITS - np.log2(np.maximum(freq, 1))), 0.0)
    return float(bits.sum()) + 8 * len(serialize(counts))


def decode_lut(freq: np.ndarray) -> np.ndarray:
    """Slot-to-symbol lookup (uint8 ``(n_tables, SCALE)``) of normalized frequencies."""
    lut = np.zeros((freq.shape[0], SCALE), dtype=np.uint8)
    for t in range(freq.shape[0]):
        if freq[t].sum() == SCALE:
            lut[t] = np.repeat(np.arange(freq.shape[1], dtype=np.uint8), freq[t])
    return lut


def cumulative(freq: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums of each row of ``freq``."""
    cum = np.zeros_like(freq)
    cum[:, 1:] = np.cumsum(freq, axis=1)[:, :-1]
    return cum
