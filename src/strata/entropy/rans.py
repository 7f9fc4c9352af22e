"""Range asymmetric numeral systems (rANS) coder primitives, compiled with numba.

An rANS coder with a 31-bit state, 16-bit renormalization and static frequency tables of
``2**SCALE_BITS`` slots (Duda, "Asymmetric numeral systems: entropy coding combining speed of
Huffman coding with compression rate of arithmetic coding", arXiv:1311.2540, 2013; the
division-free encoder follows F. Giesen's public-domain ``rans_byte.h``). The state stays in
``[RANS_L, 2**31)`` with ``RANS_L = 2**15``: after any symbol one 16-bit word at most restores
it, so decoding needs a single select (no loop, no mispredicted branch), and the coded size
stays within a few hundred-thousandths of a bit per symbol of the table's entropy (measured
against byte-wise renormalization with ``RANS_L = 2**23``: the same to 1e-4 bit), including
symbols far more probable than 1/2, where Huffman coding spends at least one bit.

rANS is last-in first-out: the encoder walks the symbols backwards and writes its bytes
backwards, so the decoder reads forwards. These functions are inlined into the coding loops
of each subsystem (they choose the table -- the context -- per symbol); see
:mod:`strata.lossy.chunks` for the lossy quantization codes.

State lives in int64 variables holding values below ``2**32``; words are little-endian. Buffers are indexed through
``uint64`` casts: numba then emits no negative-index wraparound code on the hot paths.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .tables import PACKED_BIAS_SHIFT as _PACKED_BIAS_SHIFT
from .tables import PACKED_FREQ_SHIFT as _PACKED_FREQ_SHIFT
from .tables import SCALE_BITS

#: Lower bound of the normalized state interval ``[RANS_L, 2**16 * RANS_L)``.
RANS_L = 1 << 15
#: Bytes the final state occupies.
STATE_BYTES = 4
#: Most bytes one symbol can emit (one 16-bit word).
MAX_BYTES_PER_SYMBOL = 2

_MASK = (1 << SCALE_BITS) - 1
#: Constants per symbol in :func:`encoder_table`.
ENC_FIELDS = 5
_SCALE_SHIFT = np.uint64(SCALE_BITS)
_XMAX_UNIT = (RANS_L >> SCALE_BITS) << 16


@njit(inline="always")
def _emit(state, buf, pos, x_max):
    """Encoder renormalization: one 16-bit word out (little-endian, before ``pos``) if the
    state is at least ``x_max``; one always suffices (``state < 2**31``, ``x_max >= 2**20``)."""
    if state >= x_max:
        pos -= 2
        buf[np.uint64(pos)] = state & 0xFF
        buf[np.uint64(pos + 1)] = (state >> 8) & 0xFF
        state >>= 16
    return state, pos


@njit(inline="always")
def encode_put(state, buf, pos, start, freq):
    """Push one symbol (cumulative frequency ``start``, frequency ``freq``).

    Words go to ``buf[pos-2:pos], buf[pos-4:pos-2], ...``; returns the new ``(state, pos)``.
    """
    state, pos = _emit(state, buf, pos, _XMAX_UNIT * freq)
    return ((state // freq) << SCALE_BITS) + (state % freq) + start, pos


@njit(inline="always")
def encode_put_fast(state, buf, pos, enc, j):
    """:func:`encode_put` with the division replaced by a multiplication, from the packed
    per-symbol constants ``enc[j:j + 5]`` (``x_max, rcp, shift, bias, cmpl``) of
    :func:`encoder_table` (flattened; ``j`` a ``uint64`` offset)."""
    state, pos = _emit(state, buf, pos, enc[j])
    return _push(state, enc, j), pos


@njit(inline="always")
def _push(state, enc, j):
    """The state after pushing the symbol whose constants are ``enc[j:j + 5]`` (renormalized
    ``state``): ``(state // f) << SCALE_BITS | state % f`` plus its cumulative frequency,
    with the division done by the reciprocal."""
    q = ((state * enc[j + np.uint64(1)]) >> 32) >> enc[j + np.uint64(2)]
    return state + enc[j + np.uint64(3)] + q * enc[j + np.uint64(4)]


@njit(inline="always")
def encode_put_select(state, buf, pos, enc, j):
    """:func:`encode_put_fast` with renormalization as a select, no data-dependent branch
    (faster where words come out every few symbols and unpredictably, e.g. exponent bytes):
    the word is always stored at ``buf[pos-2:pos]`` and kept only if it is needed, so the
    caller's buffer must hold two bytes below any ``pos`` it passes."""
    need = np.int64(state >= enc[j])
    p = np.uint64(pos - 2)
    buf[p] = state & 0xFF
    buf[p + np.uint64(1)] = (state >> 8) & 0xFF
    return _push(state >> (16 * need), enc, j), pos - 2 * need


@njit(inline="always")
def encoder_offset(table, sym, n_symbols):
    """Offset of the constants of ``sym`` in table ``table`` of a flattened
    :func:`encoder_table` with ``n_symbols`` symbols per table."""
    return (np.uint64(table) * np.uint64(n_symbols) + np.uint64(sym)) * np.uint64(ENC_FIELDS)


@njit(nogil=True, cache=True)
def encoder_table(freq):
    """Per-(table, symbol) constants for :func:`encode_put_fast`, int64 ``(n_tables, n_symbols, 5)``,
    from normalized frequencies.

    With ``state < 2**31`` (byte-wise rANS, ``RANS_L = 2**23``) and a reciprocal below
    ``2**32`` the product fits in 63 bits (F. Giesen's division-free encoder). Symbols of
    frequency 0 get unusable constants.
    """
    n_t, n_s = freq.shape
    out = np.zeros((n_t, n_s, ENC_FIELDS), np.int64)
    for t in range(n_t):
        cum = 0
        for s in range(n_s):
            f = freq[t, s]
            out[t, s, 0] = _XMAX_UNIT * f
            if f < 2:
                out[t, s, 1] = (1 << 32) - 1
                out[t, s, 2] = 0
                out[t, s, 3] = cum + (1 << SCALE_BITS) - 1
            else:
                shift = 0
                while f > (1 << shift):
                    shift += 1
                out[t, s, 1] = ((1 << (shift + 31)) + f - 1) // f
                out[t, s, 2] = shift - 1
                out[t, s, 3] = cum
            out[t, s, 4] = (1 << SCALE_BITS) - f
            cum += f
    return out


@njit(inline="always")
def encode_flush(state, buf, pos):
    """Write the final state (4 bytes, little-endian, before ``pos``); returns the new ``pos``."""
    for _ in range(STATE_BYTES):
        pos -= 1
    for k in range(STATE_BYTES):
        buf[pos + k] = (state >> (8 * k)) & 0xFF
    return pos


@njit(inline="always")
def decode_init(buf, pos, end):
    """Read the initial state at ``buf[pos:]``; returns ``(state, pos)``, state 0 if truncated."""
    if pos + STATE_BYTES > end:
        return 0, end
    state = 0
    for k in range(STATE_BYTES):
        state |= buf[pos + k] << (8 * k)
    return state, pos + STATE_BYTES


@njit(inline="always")
def decode_lookup(state, symbols, info, table):
    """Symbol of ``state``'s slot in decode table ``table`` and its info word, from split
    decode tables (:func:`~strata.entropy.tables.split_decode_tables`). The info word is 0
    (see :func:`info_valid`) for the slots of an unused table."""
    t = np.uint64(table)
    sym = symbols[(t << _SCALE_SHIFT) | np.uint64(state & _MASK)]
    return sym, info[(t << np.uint64(8)) | np.uint64(sym)]


@njit(inline="always")
def info_valid(info):
    """False for a slot that no symbol owns (an unused table)."""
    return (info & 0xFFF) != 0


@njit(inline="always")
def decode_step(state, info, buf, pos, end):
    """Consume the symbol of ``state``'s slot, given its split-table ``info``
    (``frequency | cumulative frequency << 12``, see :func:`decode_lookup`).

    Returns ``(state, pos)``; reading past ``end`` feeds zero bytes (the caller checks
    that the stream was consumed exactly).
    """
    state = np.int64(info & 0xFFF) * (state >> SCALE_BITS) + (state & _MASK) - np.int64(info >> 12)
    if state < RANS_L:
        lo = np.int64(buf[np.uint64(pos)]) if pos < end else 0
        hi = np.int64(buf[np.uint64(pos + 1)]) if pos + 1 < end else 0
        state = (state << 16) | lo | (hi << 8)
        pos += 2
    return state, pos


@njit(inline="always")
def _shift_in(state, buf, q):
    """``(state, n)``: the 16-bit word at ``buf[q:q + 2]`` shifted in if the state fell below
    ``RANS_L`` (``n = 2`` bytes used, else 0), as a select: no data-dependent branch. After a
    valid symbol the state is at least ``RANS_L >> SCALE_BITS``, so one word suffices."""
    need = state < RANS_L
    v = np.int64(buf[q]) | (np.int64(buf[q + np.uint64(1)]) << 8)
    return ((state << 16) | v) if need else state, 2 * np.int64(need)


@njit(inline="always")
def decode_step_packed(state, entry, buf, pos):
    """Consume the symbol of ``state``'s slot given its packed table entry (int64, see
    :func:`strata.entropy.tables.packed_decode_table`), then renormalize from ``buf[pos:pos + 2]``
    (which must exist) as a select; returns ``(state, pos)``."""
    f = ((entry >> _PACKED_FREQ_SHIFT) & _MASK) + 1
    state = f * (state >> SCALE_BITS) + (entry >> _PACKED_BIAS_SHIFT)
    state, n = _shift_in(state, buf, np.uint64(pos))
    return state, pos + n


@njit(inline="always")
def renormalize(state, buf, pos, end):
    """Decoder renormalization without a data-dependent branch (:func:`_shift_in`), reading
    at ``min(pos, end)``: ``buf`` must hold a byte after ``end`` (padding); a valid stream
    never needs bytes from ``end`` on. Returns ``(state, pos)``."""
    state, n = _shift_in(state, buf, np.uint64(min(pos, end)))
    return state, pos + n


@njit(inline="always")
def decode_step_select(state, info, buf, pos, end):
    """:func:`decode_step` with :func:`renormalize`: no branch to mispredict when symbols
    carry a few bits each. ``info`` must be valid."""
    state = np.int64(info & 0xFFF) * (state >> SCALE_BITS) + (state & _MASK) - np.int64(info >> 12)
    return renormalize(state, buf, pos, end)


@njit(inline="always")
def decode_step_unchecked(state, info, buf, pos):
    """:func:`decode_step_select` for a caller that knows ``buf[pos:pos + 2]`` exists."""
    state = np.int64(info & 0xFFF) * (state >> SCALE_BITS) + (state & _MASK) - np.int64(info >> 12)
    state, n = _shift_in(state, buf, np.uint64(pos))
    return state, pos + n


@njit(inline="always")
def bits_put(acc, nacc, buf, pos, value, nbits):
    """Append ``nbits`` (<= 32) raw bits, least significant first; returns ``(acc, nacc, pos)``.
    The accumulator holds fewer than 32 bits between calls and goes out 4 bytes at a time
    (:func:`bits_flush` writes the rest): one rarely taken branch instead of a byte loop whose
    exit is mispredicted at every call (the same bytes)."""
    acc |= value << nacc
    nacc += nbits
    if nacc >= 32:
        q = np.uint64(pos)
        buf[q] = acc & 0xFF
        buf[q + np.uint64(1)] = (acc >> 8) & 0xFF
        buf[q + np.uint64(2)] = (acc >> 16) & 0xFF
        buf[q + np.uint64(3)] = (acc >> 24) & 0xFF
        pos += 4
        acc >>= 32
        nacc -= 32
    return acc, nacc, pos


@njit(inline="always")
def bits_flush(acc, nacc, buf, pos):
    """Write out the bits :func:`bits_put` still holds (whole bytes, the last one padded with
    zeros); returns the next ``pos``."""
    while nacc > 0:
        buf[pos] = acc & 0xFF
        pos += 1
        acc >>= 8
        nacc -= 8
    return pos


@njit(inline="always")
def bits_refill(acc, nacc, buf, pos, end):
    """Top up a bit reader (``acc`` holding ``nacc`` unread bits, least significant first)
    with the 4 bytes at ``pos`` if it holds fewer than 32 bits; returns ``(acc, nacc, pos)``.
    Reads start at ``min(pos, end)`` and ``buf`` must have 4 bytes after ``end``: past the end
    the bits are padding, never consumed by a valid stream; ``pos`` still advances, so bits
    consumed = ``8 * (pos - start) - nacc``."""
    if nacc < 32:
        q = np.uint64(min(pos, end))
        w = (np.int64(buf[q]) | (np.int64(buf[q + np.uint64(1)]) << 8) | (np.int64(buf[q + np.uint64(2)]) << 16)
             | (np.int64(buf[q + np.uint64(3)]) << 24))
        acc |= w << nacc
        nacc += 32
        pos += 4
    return acc, nacc, pos
