"""The @triton.jit kernels of :mod:`strata.comm.kernels` (imported by it only, never by ``import strata.comm``).

A quantizing program handles ``ROWS`` quantization groups at once as a ``(ROWS, BLOCK)`` tile, ``BLOCK`` the group
size rounded up to a power of two (the extra columns and the padding past the input's end read as zeros). A
dequantizing program handles ``TILE`` consecutive values. Arithmetic follows :mod:`strata.comm.quantize` step by
step: ``scale = absmax / qmax`` (IEEE division) and ``inv = qmax * (1 / absmax)`` (what torch computes for
``qmax / absmax``), ``y = x * inv``, round half to even
or ``floor(y + u)`` with ``u`` from Philox (``tl.rand``) keyed by the seed and the value's index, clamp to
``-qmax..qmax``; a group holding NaN or Inf gets scale NaN and codes 0.
"""
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _hadamard32(x):
    """``x @ H`` for every row of 32 values of ``x`` (``(M, 32)`` fp32): the Sylvester matrix, entries
    ``(-1) ** popcount(i & j)``, built in registers; fp32 products and sums (no TF32)."""
    i = tl.arange(0, 32)
    bits = i[:, None] & i[None, :]
    parity = bits ^ (bits >> 1)
    parity = parity ^ (parity >> 2)
    parity = (parity ^ (parity >> 4)) & 1
    h = tl.where(parity == 0, 1.0, -1.0).to(tl.float32)
    return tl.dot(x, h, input_precision="ieee")


@triton.jit
def _round(y, DTYPE: tl.constexpr):
    """fp32 ``y`` rounded to nearest even in ``DTYPE``, as fp32. bf16 by integer arithmetic: Triton's interpreter
    truncates when it converts fp32 to bf16 (compiled kernels round to nearest even, as torch does)."""
    if DTYPE == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    else:
        return y.to(DTYPE).to(tl.float32)


@triton.jit
def _dequantize_row(codes_ptr, code_stride, scales_ptr, scale_stride, row, idx, mask, BITS: tl.constexpr,
                    GROUP: tl.constexpr):
    """fp32 ``code * scale`` at element indices ``idx`` of row ``row`` (zeros where ``mask`` is false): its codes
    start at ``codes_ptr + row * code_stride`` (int4 packed two a byte, or int8), its fp32 scales at
    ``scales_ptr + row * scale_stride``."""
    r = tl.cast(row, tl.int64)
    if BITS == 4:
        byte = tl.load(codes_ptr + r * code_stride + idx // 2, mask=mask, other=0).to(tl.int32)
        c = (byte >> ((idx & 1) * 4).to(tl.int32)) & 15
        c = c - ((c & 8) << 1)
    else:
        c = tl.load(codes_ptr + r * code_stride + idx, mask=mask, other=0).to(tl.int32)
    s = tl.load(scales_ptr + r * scale_stride + idx // GROUP, mask=mask, other=0.0)
    return c.to(tl.float32) * s


@triton.jit
def _dequantize_sum(codes_ptr, code_stride, scales_ptr, scale_stride, first_row, k, idx, mask,
                    BITS: tl.constexpr, GROUP: tl.constexpr):
    """Sum over rows ``first_row .. first_row + k - 1`` (``k >= 1``, in that order) of :func:`_dequantize_row`."""
    acc = _dequantize_row(codes_ptr, code_stride, scales_ptr, scale_stride, first_row, idx, mask, BITS, GROUP)
    for j in range(1, k):
        acc += _dequantize_row(codes_ptr, code_stride, scales_ptr, scale_stride, first_row + j, idx, mask, BITS,
                               GROUP)
    return acc


@triton.jit
def _quantize_store(y, gid, idx, n_groups, codes_ptr, scales_ptr, seed_ptr, GROUP: tl.constexpr,
                    BLOCK: tl.constexpr, ROWS: tl.constexpr, BITS: tl.constexpr, STOCHASTIC: tl.constexpr):
    """Quantize the ``(ROWS, BLOCK)`` fp32 tile ``y`` of groups ``gid`` (element indices ``idx`` in the padded
    vector) and store its codes and scales."""
    QMAX: tl.constexpr = (1 << (BITS - 1)) - 1
    col = tl.arange(0, BLOCK)
    finite = tl.abs(y) < float("inf")
    bad = tl.max(tl.where(finite, 0, 1), axis=1) > 0
    absmax = tl.max(tl.where(finite, tl.abs(y), 0.0), axis=1)
    q = tl.full((ROWS,), QMAX, tl.float32)
    scale = tl.where(bad, float("nan"), tl.math.div_rn(absmax, q))
    # qmax / absmax as torch computes a scalar over a tensor: qmax * (1 / absmax), two roundings
    inv = tl.where(absmax > 0, tl.math.div_rn(tl.full((ROWS,), 1.0, tl.float32), tl.where(absmax > 0, absmax, 1.0))
                   * QMAX, 0.0)
    v = tl.where(bad[:, None], 0.0, y * inv[:, None])
    if STOCHASTIC:
        seed = tl.load(seed_ptr)
        v = tl.floor(v + tl.rand(seed, idx))
    else:  # round half to even, exactly: v - floor(v) is exact in fp32 for |v| < 2**23
        f = tl.floor(v)
        d = v - f
        odd = (f - 2.0 * tl.floor(f * 0.5)) != 0.0
        v = f + tl.where((d > 0.5) | ((d == 0.5) & odd), 1.0, 0.0)
    c = tl.minimum(tl.maximum(v, -QMAX), QMAX).to(tl.int32)
    live = gid < n_groups
    tl.store(scales_ptr + gid, scale, mask=live)
    if BITS == 4:  # element 2i in the low nibble of byte i, element 2i + 1 in the high nibble
        lo, hi = tl.split(tl.reshape(c, (ROWS, BLOCK // 2, 2)))
        byte = ((lo & 15) | ((hi & 15) << 4)).to(tl.uint8)
        half = tl.arange(0, BLOCK // 2)
        dst = gid[:, None].to(tl.int64) * (GROUP // 2) + half[None, :]
        tl.store(codes_ptr + dst, byte, mask=live[:, None] & (2 * half < GROUP)[None, :])
    else:
        tl.store(codes_ptr + idx, c.to(tl.int8), mask=live[:, None] & (col < GROUP)[None, :])


@triton.jit
def quantize_kernel(x_ptr, ref_ptr, codes_ptr, scales_ptr, seed_ptr, n, n_groups,
                    GROUP: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, BITS: tl.constexpr,
                    STOCHASTIC: tl.constexpr, HAS_REF: tl.constexpr, ROUND_TO: tl.constexpr,
                    HADAMARD: tl.constexpr):
    """Codes and scales of ``x`` (minus ``ref`` with ``HAS_REF``, ``x`` first rounded to ``ROUND_TO``; through
    the 32-point Hadamard transform with ``HADAMARD``)."""
    gid = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    col = tl.arange(0, BLOCK)
    idx = gid[:, None].to(tl.int64) * GROUP + col[None, :]
    mask = (col < GROUP)[None, :] & (idx < n)
    y = _round(tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32), ROUND_TO)
    if HAS_REF:
        y = y - tl.load(ref_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    if HADAMARD:
        y = tl.reshape(_hadamard32(tl.reshape(y, (ROWS * BLOCK // 32, 32))), (ROWS, BLOCK))
    _quantize_store(y, gid, idx, n_groups, codes_ptr, scales_ptr, seed_ptr, GROUP, BLOCK, ROWS, BITS, STOCHASTIC)


@triton.jit
def requantize_kernel(in_codes_ptr, in_code_stride, in_scales_ptr, in_scale_stride, k, n, codes_ptr, scales_ptr,
                      seed_ptr, n_groups, IN_BITS: tl.constexpr, IN_GROUP: tl.constexpr, GROUP: tl.constexpr,
                      BLOCK: tl.constexpr, ROWS: tl.constexpr, BITS: tl.constexpr, STOCHASTIC: tl.constexpr):
    """Codes and scales of the sum of ``k`` dequantized copies of ``n`` values each."""
    gid = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    col = tl.arange(0, BLOCK)
    idx = gid[:, None].to(tl.int64) * GROUP + col[None, :]
    mask = (col < GROUP)[None, :] & (idx < n)
    y = _dequantize_sum(in_codes_ptr, in_code_stride, in_scales_ptr, in_scale_stride, 0, k, idx, mask,
                        IN_BITS, IN_GROUP)
    _quantize_store(y, gid, idx, n_groups, codes_ptr, scales_ptr, seed_ptr, GROUP, BLOCK, ROWS, BITS, STOCHASTIC)


@triton.jit
def dequantize_add_kernel(codes_ptr, code_stride, scales_ptr, scale_stride, k, n, out_ptr,
                          BITS: tl.constexpr, GROUP: tl.constexpr, TILE: tl.constexpr,
                          INVERSE_HADAMARD: tl.constexpr, ACCUMULATE: tl.constexpr, ROUND_TO: tl.constexpr):
    """Segment ``program_id(1)`` of ``out`` (``n`` values) gets the sum of its ``k`` dequantized copies
    (inverse-Hadamard transformed with ``INVERSE_HADAMARD``; added to what ``out`` holds with ``ACCUMULATE``),
    rounded to ``ROUND_TO`` and stored in ``out``'s dtype."""
    seg = tl.program_id(1)
    idx = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    mask = idx < n
    y = _dequantize_sum(codes_ptr, code_stride, scales_ptr, scale_stride, seg * k, k, idx, mask, BITS, GROUP)
    if INVERSE_HADAMARD:
        y = tl.reshape(_hadamard32(tl.reshape(y, (TILE // 32, 32))), (TILE,)) * (1.0 / 32)
    dst = out_ptr + seg.to(tl.int64) * n + idx
    if ACCUMULATE:
        y = y + tl.load(dst, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst, _round(y, ROUND_TO).to(out_ptr.dtype.element_ty), mask=mask)


#: Whether Triton runs these kernels in its interpreter (``TRITON_INTERPRET=1`` when it was imported).
INTERPRETED = isinstance(quantize_kernel, InterpretedFunction)
