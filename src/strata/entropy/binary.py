"""Adaptive binary models coded with the shared rANS coder, compiled with numba.

A *model* is an int32 array with one cell per context. A cell holds the probability that the
next bit of its context is 1, as a 16-bit fraction ``p / 2**16`` (low 16 bits), and the
number of bits seen, capped at ``LIMIT`` (high bits). After each bit ``b`` the probability
moves towards it by ``(b - p) / (n + 2)``: while ``n < LIMIT`` that is, up to rounding, the
Krichevsky-Trofimov estimate ``(ones + 1/2) / (n + 1)`` (fast learning from a cold start; AV1's
symbol adaptation likewise slows its rate with the count, AV1 bitstream specification, sec.
8.2.6); from then on a fixed rate ``1 / (LIMIT + 2)``, an exponential forgetting that follows
slow drifts. The rate is a table of 16-bit reciprocals:
integer arithmetic only, so encoder and decoder agree bit for bit on every platform.

Coding: the probability is rounded to a frequency ``f1`` of ``2**SCALE_BITS = 2048`` slots,
clamped to ``[1, 2047]`` (so a bit of a context that always agrees costs
``-log2(2047 / 2048) = 0.0007`` bit); bit 0 owns slots ``[0, 2048 - f1)``, bit 1 the rest.
rANS (:mod:`strata.entropy.rans`; Duda, arXiv:1311.2540) is last-in first-out while the
model must run forwards, so an encoder first walks its bits forwards, recording each bit's
frequency (:func:`freq_of`, :func:`update`), then pushes them backwards (:func:`encode_bit`);
the decoder reads forwards (:func:`decode_bit`, then :func:`update`).

The functions are ``inline="always"`` primitives for the coding loops of other kernels
(:mod:`strata.lossy.mask`); a loop picks the context of each bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import rans
from .tables import SCALE, SCALE_BITS

#: Bits after which a context adapts at its floor rate ``1 / (LIMIT + 2)`` (46: the best of
#: 30..1000 on land and depth masks; slower floors track coastlines worse, faster ones are noisy).
LIMIT = 46
#: Probability of a fresh cell: one half, no bits seen.
INITIAL = 1 << 15
_PROB_BITS = 16
_PROB_MASK = (1 << _PROB_BITS) - 1
_ROUND_SHIFT = _PROB_BITS - SCALE_BITS
#: ``2**16 / (n + 2)`` per count ``n`` (rounded to nearest).
RATES = np.array([((1 << _PROB_BITS) + (n + 2) // 2) // (n + 2) for n in range(LIMIT + 1)], np.int32)


def cell(p_one: float, count: int = 0) -> int:
    """A model cell (int32 value) holding probability ``p_one`` of bit 1, as if ``count``
    bits (at most :data:`LIMIT`) had been seen: a prior, for initial tables."""
    if not (0.0 < p_one < 1.0 and 0 <= count <= LIMIT):
        raise ValueError(f"invalid prior ({p_one}, {count})")
    return min(_PROB_MASK, max(1, round(p_one * (1 << _PROB_BITS)))) | (count << _PROB_BITS)


def new_model(n_contexts: int) -> np.ndarray:
    """A fresh model: int32 ``(n_contexts,)``, every context at probability 1/2."""
    return np.full(n_contexts, INITIAL, np.int32)


@njit(inline="always")
def reset(model, initial):
    """Set ``model`` (int32 ``(n,)``) back to its initial cells ``initial`` (int32 ``(n,)``,
    e.g. :func:`new_model` or a table of :func:`cell` priors), in place."""
    for i in range(model.shape[0]):
        model[i] = initial[i]


@njit(inline="always")
def freq_of(model, ctx):
    """Frequency of bit 1 in context ``ctx``: ``round(p * 2048)`` clamped to ``[1, 2047]``."""
    p = np.int64(model[np.uint64(ctx)]) & _PROB_MASK
    f = (p + (1 << (_ROUND_SHIFT - 1))) >> _ROUND_SHIFT
    return min(max(f, 1), SCALE - 1)


@njit(inline="always")
def update(model, ctx, bit):
    """Adapt context ``ctx`` to having seen ``bit`` (0 or 1)."""
    i = np.uint64(ctx)
    s = np.int64(model[i])
    p = s & _PROB_MASK
    n = s >> _PROB_BITS
    p += ((np.int64(bit) << _PROB_BITS) - p) * np.int64(RATES[np.uint64(n)]) >> _PROB_BITS
    model[i] = np.int32(p | (min(n + 1, LIMIT) << _PROB_BITS))


def encoder_constants() -> np.ndarray:
    """The division-free encoder's constants for every frequency of bit 1 (flat int64, see
    :func:`strata.entropy.rans.encoder_table`: one two-symbol table per ``f1`` in
    ``0 .. 2047``, row 0 unused), for :func:`encode_bit`. Computed once per process."""
    global _ENCODER
    if _ENCODER is None:
        f1 = np.clip(np.arange(SCALE, dtype=np.int64), 1, SCALE - 1)
        _ENCODER = rans.encoder_table(np.stack([SCALE - f1, f1], axis=1)).ravel()
    return _ENCODER


_ENCODER = None


@njit(inline="always")
def encode_bit(state, buf, pos, bit, f1, enc):
    """Push ``bit`` coded with frequency ``f1`` of bit 1 (from :func:`freq_of`), as
    :func:`strata.entropy.rans.encode_put_fast` with the constants ``enc`` of
    :func:`encoder_constants` (a multiplication, not a division: 5 -> about 2 ns a bit):
    words go before ``pos``; returns ``(state, pos)``."""
    return rans.encode_put_fast(state, buf, pos, enc, rans.encoder_offset(f1, bit, 2))


@njit(inline="always")
def decode_bit(state, f1, buf, pos, end):
    """Pop one bit coded with frequency ``f1`` of bit 1: ``(bit, state, pos)``. Reads stay
    below ``end`` (zero bytes past it, as :func:`strata.entropy.rans.decode_step`)."""
    f0 = SCALE - f1
    slot = state & (SCALE - 1)
    bit = np.int64(slot >= f0)
    info = (f1 | (f0 << 12)) if bit else f0
    state, pos = rans.decode_step(state, info, buf, pos, end)
    return bit, state, pos


__all__ = ["INITIAL", "LIMIT", "cell", "decode_bit", "encode_bit", "encoder_constants", "freq_of", "new_model", "reset",
           "update"]
