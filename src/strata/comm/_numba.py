"""The compiled CPU kernels of :mod:`strata.comm.kernels` (numba): the same fused stages as the Triton kernels
of :mod:`strata.comm._triton`, with the same arithmetic, for CPU tensors.

Each kernel handles a range of quantization groups (or of values), so that the launcher can split a call over
threads (the kernels release the GIL). Arithmetic follows the Triton kernels step by step, in fp32: ``scale =
absmax / qmax``, ``inv = qmax * (1 / absmax)`` (two roundings, as torch computes ``qmax / absmax``), ``y = x * inv``,
round half to even or ``floor(y + u)`` with ``u`` the first output of Philox4x32-10 keyed by the seed and the
value's index, converted as Triton's ``tl.rand`` converts it (so stochastic codes equal the Triton kernels' bit for
bit), clamped to ``-qmax..qmax``; a group holding NaN or Inf gets scale NaN and codes 0. The 32-point Hadamard
transform is a radix-2 butterfly (the same values up to the rounding of its sums). bf16 values are passed as their
uint16 bit patterns; 8-bit codes as uint8 (two's complement).
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

_F32 = np.float32
_MASK = np.uint64(0xFFFFFFFF)
_KEY_A, _KEY_B = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_ROUND_A, _ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_TO_UNIT = _F32(4.6566127342e-10)  # tl.rand's scale of a non-negative int32 to [0, 1)
#: ``round_to`` codes: fp32 (nothing to round) and bf16.
ROUND_NONE, ROUND_BF16 = 0, 1


def _to_f32(v):
    """An element as fp32 (a uint16 is a bf16 bit pattern)."""


@overload(_to_f32, inline="always")
def _to_f32_impl(v):
    if isinstance(v, types.Integer):
        return lambda v: np.uint32(np.uint32(v) << np.uint32(16)).view(np.float32)
    return lambda v: np.float32(v)


def _from_f32(out, i, y):
    """Store fp32 ``y`` (already rounded to the element type) at ``out[i]``."""


@overload(_from_f32, inline="always")
def _from_f32_impl(out, i, y):
    if isinstance(out.dtype, types.Integer):
        def store(out, i, y):
            out[i] = np.uint16(np.float32(y).view(np.uint32) >> np.uint32(16))
        return store

    def store(out, i, y):
        out[i] = y
    return store


@njit(inline="always")
def _round(y, round_to):
    """fp32 ``y`` rounded to nearest even in bf16 (``round_to == ROUND_BF16``), as fp32."""
    if round_to != ROUND_BF16 or y != y:
        return y
    bits = np.uint64(np.float32(y).view(np.uint32))
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) << np.uint64(16)
    return np.uint32(bits & _MASK).view(np.float32)


@njit(inline="always")
def _uniform(seed, idx):
    """``tl.rand(seed, idx)``: the first word of Philox4x32-10 with counter ``(idx low, idx high, 0, 0)`` and key
    ``(seed low, seed high)``, as a float32 in ``[0, 1)``."""
    s = np.uint64(seed)
    k0, k1 = s & _MASK, (s >> np.uint64(32)) & _MASK
    i = np.uint64(idx)
    c0, c1, c2, c3 = i & _MASK, (i >> np.uint64(32)) & _MASK, np.uint64(0), np.uint64(0)
    for _ in range(10):
        p, q = _ROUND_B * c2, _ROUND_A * c0  # (32 x 32 -> 64-bit products)
        c0 = ((p >> np.uint64(32)) ^ c1 ^ k0) & _MASK
        c2 = ((q >> np.uint64(32)) ^ c3 ^ k1) & _MASK
        c1, c3 = p & _MASK, q & _MASK
        k0, k1 = (k0 + _KEY_A) & _MASK, (k1 + _KEY_B) & _MASK
    x = np.int32(np.uint32(c0).view(np.int32))
    if x < 0:
        x = ~x
    return np.float32(x) * _TO_UNIT


@njit(inline="always")
def _hadamard32(y, scale):
    """``H y`` (times ``scale``) of every 32 consecutive values of ``y`` (fp32, in place): the Sylvester matrix
    ``H``, as a radix-2 butterfly."""
    for b in range(0, y.size, 32):
        h = 1
        while h < 32:
            for a in range(b, b + 32, 2 * h):
                for j in range(a, a + h):
                    u, v = y[j], y[j + h]
                    y[j], y[j + h] = u + v, u - v
            h *= 2
        if scale != 1.0:
            for j in range(b, b + 32):
                y[j] *= scale


@njit(inline="always")
def _dequantize_row(y, codes, scales, bits, group, v0, add):
    """Values ``v0 .. v0 + y.size`` of a row (uint8 codes: int4 pairs or int8 bytes; fp32 scales per group of
    ``group``) dequantized into ``y`` (fp32), or added to it (``add``), group by group."""
    i, v1 = v0, v0 + y.size
    while i < v1:
        end = min(v1, (i // group + 1) * group)
        sc = scales[i // group]
        if bits == 4:
            for k in range(i, end):
                c = (np.int32(codes[k >> 1]) >> np.int32((k & 1) * 4)) & 15
                d = np.float32(c - ((c & 8) << 1)) * sc
                y[k - v0] = y[k - v0] + d if add else d
        else:
            for k in range(i, end):
                c = np.int32(codes[k])
                d = np.float32(c - ((c & 128) << 1)) * sc
                y[k - v0] = y[k - v0] + d if add else d
        i = end


@njit(inline="always")
def _quantize_store(y, g, codes, scales, seed, bits, stochastic):
    """Quantize the fp32 group ``y`` (group number ``g``; overwritten by its codes as fp32) and store its codes
    and scale. Each step is its own loop over the group, so that none holds a branch on the arguments."""
    fq = np.float32((1 << (bits - 1)) - 1)
    group = y.size
    bad, absmax = False, np.float32(0.0)
    for v in y:
        a = abs(v)
        if not a < np.inf:
            bad = True
        elif a > absmax:
            absmax = a
    if bad:
        absmax = np.float32(0.0)
    scales[g] = np.float32(np.nan) if bad else absmax / fq
    inv = np.float32(np.float32(1.0) / absmax) * fq if absmax > 0 else np.float32(0.0)
    base = np.int64(g) * group
    if bad:
        y[:] = 0.0
    elif stochastic:
        for j in range(group):
            y[j] = np.floor(y[j] * inv + _uniform(seed, base + j))
    else:  # round half to even, exactly: v - floor(v) is exact in fp32 for |v| < 2**23
        for j in range(group):
            v = y[j] * inv
            f = np.float32(np.floor(v))
            d = v - f
            odd = (f - np.float32(2.0) * np.float32(np.floor(f * np.float32(0.5)))) != 0
            y[j] = f + np.float32(1.0) if d > 0.5 or (d == 0.5 and odd) else f
    if bits == 4:  # element 2i in the low nibble of byte i, element 2i + 1 in the high nibble
        at = base >> 1
        for h in range(group >> 1):
            lo = np.int32(min(max(y[2 * h], -fq), fq))
            hi = np.int32(min(max(y[2 * h + 1], -fq), fq))
            codes[at + h] = np.uint8((lo & 15) | ((hi & 15) << 4))
    else:
        for j in range(group):
            codes[base + j] = np.uint8(np.int32(min(max(y[j], -fq), fq)) & 255)


@njit(nogil=True, cache=True)
def quantize_groups(x, ref, has_ref, round_to, n, group, bits, stochastic, seed, hadamard, codes, scales, g0, g1):
    """Groups ``g0 .. g1`` of ``x`` (fp32, ``n`` values; minus ``ref`` with ``has_ref``, ``x`` first rounded as
    ``round_to``; through the Hadamard transform with ``hadamard``) quantized to ``bits``: codes (uint8) and fp32
    scales. Each step is its own loop over the group."""
    y = np.empty(group, np.float32)
    for g in range(g0, g1):
        base = np.int64(g) * group
        m = max(0, min(group, n - base))  # (values of the group within x; the padding is zero)
        for j in range(m):
            y[j] = x[base + j]
        y[m:] = 0.0
        if round_to == ROUND_BF16:
            for j in range(m):
                y[j] = _round(y[j], round_to)
        if has_ref:
            for j in range(m):
                y[j] -= _to_f32(ref[base + j])
        if hadamard:
            _hadamard32(y, np.float32(1.0))
        _quantize_store(y, g, codes, scales, seed, bits, stochastic)


@njit(nogil=True, cache=True)
def requantize_groups(in_codes, in_scales, in_bits, in_group, n, group, bits, stochastic, seed, codes, scales,
                      g0, g1):
    """Groups ``g0 .. g1`` of the sum of the rows of ``in_codes`` (uint8 ``(k, row bytes)``) dequantized with
    ``in_scales`` (fp32 ``(k, groups)``), in row order, quantized to ``bits``."""
    y = np.empty(group, np.float32)
    for g in range(g0, g1):
        base = np.int64(g) * group
        m = max(0, min(group, n - base))  # (values of the group within the rows; the padding is zero)
        y[m:] = 0.0
        for r in range(in_codes.shape[0]):
            _dequantize_row(y[:m], in_codes[r], in_scales[r], in_bits, in_group, base, r > 0)
        _quantize_store(y, g, codes, scales, seed, bits, stochastic)


@njit(nogil=True, cache=True)
def dequantize_add_values(codes, scales, bits, group, copies, n, out, inverse_hadamard, accumulate, round_to,
                          v0, v1):
    """Values ``v0 .. v1`` (multiples of 32 apart from the end) of every segment of ``out`` (fp32, or uint16 for
    bf16; ``segments * n`` values): the sum of the segment's ``copies`` dequantized rows, inverse-Hadamard
    transformed with ``inverse_hadamard``, added to ``out`` with ``accumulate``, rounded as ``round_to``."""
    y = np.empty(v1 - v0, np.float32)
    for seg in range(codes.shape[0] // copies):
        for r in range(copies):
            row = seg * copies + r
            _dequantize_row(y, codes[row], scales[row], bits, group, v0, r > 0)
        if inverse_hadamard:
            _hadamard32(y, np.float32(1.0 / 32))
        at = np.int64(seg) * n + v0
        if accumulate:
            for j in range(v1 - v0):
                _from_f32(out, at + j, _round(y[j] + _to_f32(out[at + j]), round_to))
        else:
            for j in range(v1 - v0):
                _from_f32(out, at + j, _round(y[j], round_to))
