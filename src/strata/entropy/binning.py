"""Binning of signed integers into a small symbol alphabet plus raw extra bits.

Quantization codes span a wide range, but their distribution is narrow and smooth in the
tails. As in DEFLATE's length codes and JPEG's magnitude categories, an integer ``q`` is
zig-zag mapped to ``z >= 0`` (``0, 1, -1, 2, -2, ... -> 0, 1, 2, 3, 4, ...``); ``z < DIRECT``
is its own symbol, and larger ``z`` is coded as a symbol naming its octave and the two bits
after the leading one, followed by the remaining low bits, which are stored raw. The
alphabet stays below ``ESCAPE + 1 <= 128`` symbols whatever the range, which keeps entropy
coder tables small, and the raw bits cost next to nothing: within a quarter octave the tail
of the distribution is nearly flat.

``ESCAPE`` is an extra symbol for values coded outside this scheme (unpredictable values).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros  # LLVM's ctlz

#: Values ``z < DIRECT`` are symbols of their own.
DIRECT = 16
#: Largest supported ``z`` is ``2**MAX_OCTAVE - 1``.
MAX_OCTAVE = 22
#: Symbol reserved for values coded elsewhere.
ESCAPE = DIRECT + 4 * (MAX_OCTAVE - 4)
#: Alphabet size including ``ESCAPE``.
ALPHABET = ESCAPE + 1


@njit(inline="always")
def zigzag(q):
    return 2 * q - 1 if q > 0 else -2 * q


@njit(inline="always")
def unzigzag(z):
    return (z + 1) >> 1 if z & 1 else -(z >> 1)


@njit(inline="always")
def to_symbol(z):
    """``(symbol, n_extra_bits, extra_bits)`` of ``z`` (``0 <= z < 2**MAX_OCTAVE``)."""
    if z < DIRECT:
        return z, 0, 0
    e = 63 - leading_zeros(np.uint64(z))
    nb = e - 2
    return DIRECT + 4 * (e - 4) + ((z >> nb) & 3), nb, z & ((1 << nb) - 1)


@njit(inline="always")
def to_symbol_flat(z):
    """:func:`to_symbol` by arithmetic alone: ``(symbol, n_extra_bits, extra_bits)``; no
    select either, which compilers may turn back into a branch."""
    t = z >> 4  # (DIRECT = 16)
    big = (-t) >> 63  # all ones when z >= DIRECT, else 0
    e_t = 63 - leading_zeros(np.uint64(t | 1))
    nb = (e_t + 2) & big
    sym = ((DIRECT + 4 * e_t + ((z >> nb) & 3)) & big) | (z & ~big)
    return sym, nb, z & ((np.int64(1) << nb) - 1)


@njit(inline="always")
def extra_bits(sym):
    """Number of raw bits following ``sym``."""
    if sym < DIRECT:
        return 0
    return (sym - DIRECT) // 4 + 2


@njit(inline="always")
def from_symbol(sym, extra):
    """Inverse of :func:`to_symbol` given the raw bits ``extra``."""
    if sym < DIRECT:
        return sym
    nb = (sym - DIRECT) // 4 + 2
    return ((4 + ((sym - DIRECT) & 3)) << nb) | extra


def _tables():
    base = np.zeros(256, np.int64)
    nbits = np.zeros(256, np.int64)
    for sym in range(ESCAPE):
        nb = 0 if sym < DIRECT else (sym - DIRECT) // 4 + 2
        nbits[sym] = nb
        base[sym] = from_symbol(sym, 0) if sym >= DIRECT else sym
    return base, nbits


#: Per symbol (any byte): the smallest value it stands for and its number of raw bits, so that
#: ``z = SYMBOL_BASE[sym] + raw bits`` (0 for symbols from ``ESCAPE`` on).
SYMBOL_BASE, SYMBOL_EXTRA_BITS = _tables()


def to_symbol_reference(z: np.ndarray):
    """NumPy reference of :func:`to_symbol` for arrays of non-negative integers."""
    z = np.asarray(z, dtype=np.int64)
    e = np.floor(np.log2(np.maximum(z, 1))).astype(np.int64)
    nb = np.maximum(e - 2, 0)
    sym = np.where(z < DIRECT, z, DIRECT + 4 * (e - 4) + ((z >> nb) & 3))
    extra = np.where(z < DIRECT, 0, z & ((1 << nb) - 1))
    return sym, np.where(z < DIRECT, 0, nb), extra
