"""Group-wise symmetric int4/int8 quantization with unbiased stochastic rounding (torch, any device).

After SDP4Bit (Jia et al., NeurIPS 2024, arXiv:2410.15526, methods; the reference kernels
``tools/jet_quant_cuda`` of its Megatron-LM fork, which derive from DeepSpeed's): a flat tensor is
cut into consecutive *groups* of ``group_size`` elements; each group has one fp32 scale
``s = absmax / qmax`` with ``qmax = 2**(bits-1) - 1`` (7 for 4 bits, 127 for 8 bits), so the codes
use the symmetric levels ``-qmax..qmax`` only (the paper's kernels leave -8 unused: using all 16
levels hurt late-phase convergence). A value ``x`` is mapped to ``y = x / s`` and rounded
*stochastically* to ``floor(y + u)`` with ``u ~ U[0, 1)``: it goes to the upper neighbour with
probability ``y - floor(y)``, so ``E[q] = y`` (unbiased) and ``|x - q s| < s`` (one quantization
bin). Deterministic round-to-nearest (``|x - q s| <= s / 2``, biased) is available for comparison.

Groups whose values are all zero get ``s = 0`` and codes 0 (exact). Inputs whose length is not a
multiple of the group size are zero-padded; ``numel`` keeps the true length. NaN or Inf raise by
default; with ``nonfinite="propagate"`` (what the collectives use, so that an fp16 overflow reaches
the loss scaler instead of crashing the step) a group holding one gets the scale NaN and codes 0, so
every value of that group decodes to NaN: the overflow is flagged, never hidden. 4-bit codes are
packed two per byte (element ``2i`` in the low nibble, ``2i + 1`` in the high nibble, two's
complement), 8-bit codes are int8.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import InvalidInputError, NonFiniteValueError, UnsupportedDtypeError

SUPPORTED_BITS = (4, 8)
NONFINITE_MODES = ("raise", "propagate")
_FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class QuantizedTensor(NamedTuple):
    """A group-quantized flat tensor.

    Attributes:
        codes: int8 ``(padded,)`` for 8 bits; uint8 ``(ceil(padded / 2),)`` (two codes per byte) for 4 bits,
            where ``padded = n_groups * group_size``.
        scales: fp32 ``(n_groups,)`` dequantization scales (``absmax / qmax`` per group; 0 for all-zero groups).
        numel: number of values represented (the input length, without padding).
        bits: 4 or 8.
        group_size: elements per scale.
    """

    codes: torch.Tensor
    scales: torch.Tensor
    numel: int
    bits: int
    group_size: int

    @property
    def nbytes(self) -> int:
        """Bytes of codes plus scales (what a collective carries)."""
        return self.codes.numel() * self.codes.element_size() + self.scales.numel() * self.scales.element_size()


def check_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in SUPPORTED_BITS:
        raise InvalidInputError(f"bits must be one of {SUPPORTED_BITS}, got {bits!r}")
    return bits


def check_group_size(group_size: int, name: str = "group_size") -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise InvalidInputError(f"{name} must be a positive int, got {group_size!r}")
    return group_size


def qmax(bits: int) -> int:
    """Largest code magnitude: 7 for 4 bits, 127 for 8 bits (symmetric levels -qmax..qmax)."""
    return (1 << (check_bits(bits) - 1)) - 1


def wire_bits_per_element(bits: int, group_size: int) -> float:
    """Bits on the wire per quantized element: ``bits + 32 / group_size`` (codes plus one fp32 scale per group)."""
    return check_bits(bits) + 32.0 / check_group_size(group_size)


def _check_tensor(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidInputError(f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise UnsupportedDtypeError(f"quantize needs a floating-point tensor (fp32/fp64/bf16/fp16), got {x.dtype}")
    return x


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Pack int8 codes in ``[-8, 7]`` two per byte: uint8 ``(ceil(n / 2),)``.

    Element ``2i`` goes to the low nibble of byte ``i`` and element ``2i + 1`` to the high nibble, as
    4-bit two's complement; an odd length is padded with one zero code.

    Raises:
        UnsupportedDtypeError: ``codes`` is not int8.
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.int8:
        raise UnsupportedDtypeError(f"pack_int4 needs int8 codes, got {getattr(codes, 'dtype', type(codes))}")
    flat = codes.reshape(-1)
    if flat.numel() % 2:
        flat = torch.cat([flat, flat.new_zeros(1)])
    u = flat.view(torch.uint8).view(-1, 2) & 0x0F
    return u[:, 0] | (u[:, 1] << 4)


def unpack_int4(packed: torch.Tensor, numel: int | None = None) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: int8 codes ``(numel,)`` (default ``2 * packed.numel()``), sign-extended.

    Raises:
        UnsupportedDtypeError: ``packed`` is not uint8.
        InvalidInputError: ``numel`` is negative or larger than ``2 * packed.numel()``.
    """
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise UnsupportedDtypeError(f"unpack_int4 needs uint8 bytes, got {getattr(packed, 'dtype', type(packed))}")
    n = 2 * packed.numel() if numel is None else numel
    if n < 0 or n > 2 * packed.numel():
        raise InvalidInputError(f"numel={n} does not fit in {packed.numel()} packed bytes")
    p = packed.reshape(-1)
    out = torch.stack([p & 0x0F, p >> 4], dim=1).view(-1).view(torch.int8)
    out = out - ((out & 8) << 1)  # sign-extend the 4-bit two's complement values
    return out[:n]


def quantize(
    x: torch.Tensor,
    bits: int,
    group_size: int,
    *,
    stochastic: bool = True,
    generator: torch.Generator | None = None,
    nonfinite: str = "raise",
) -> QuantizedTensor:
    """Group-wise symmetric quantization of ``x`` (any shape, read flat) to ``bits`` bits.

    Args:
        x: floating-point tensor (fp32, fp64, bf16 or fp16), any shape and device; read in fp32.
        bits: 4 (levels -7..7, packed two per byte) or 8 (levels -127..127).
        group_size: elements per fp32 scale; the last group is zero-padded.
        stochastic: unbiased stochastic rounding (default, as in SDP4Bit) or round-to-nearest.
        generator: random source for stochastic rounding (on ``x.device``); ``None`` uses torch's default.
        nonfinite: what a group holding NaN or +-Inf does: ``"raise"`` (default) or ``"propagate"``: its
            scale is NaN and its codes 0, so all its values decode to NaN (the other groups are unaffected,
            and the random draws are the same as for finite input).

    Returns:
        :class:`QuantizedTensor`; ``dequantize`` gives back ``numel`` fp32 values, each within one
        quantization bin (``scale`` of its group; half a bin for round-to-nearest) of the input.

    Raises:
        InvalidInputError: ``x`` is not a tensor, ``bits`` not in {4, 8}, ``group_size`` not a positive int,
            ``nonfinite`` not ``"raise"`` or ``"propagate"``.
        UnsupportedDtypeError: ``x`` is not floating point.
        NonFiniteValueError: ``x`` holds NaN or Inf and ``nonfinite="raise"``.
    """
    _check_tensor(x)
    check_bits(bits)
    check_group_size(group_size)
    if nonfinite not in NONFINITE_MODES:
        raise InvalidInputError(f"nonfinite must be one of {NONFINITE_MODES}, got {nonfinite!r}")
    flat = x.reshape(-1)
    n = flat.numel()
    n_groups = -(-n // group_size)
    pad = n_groups * group_size - n
    xf = flat.to(torch.float32)
    if pad:
        xf = torch.cat([xf, xf.new_zeros(pad)])
    xg = xf.view(n_groups, group_size)
    absmax = xg.abs().amax(dim=1) if n_groups else xf.new_zeros(0)
    bad = None
    finite = torch.isfinite(absmax)
    if not bool(finite.all()):
        if nonfinite == "raise":
            raise NonFiniteValueError("cannot quantize NaN or Inf values")
        bad = ~finite  # such groups: codes 0, scale NaN (decode to NaN)
        absmax = absmax.masked_fill(bad, 0.0)
    q = float(qmax(bits))
    scales = absmax / q
    inv = torch.where(absmax > 0, q / torch.where(absmax > 0, absmax, 1.0), 0.0)
    y = xg * inv[:, None]
    if bad is not None:
        y.masked_fill_(bad[:, None], 0.0)
        scales.masked_fill_(bad, float("nan"))
    if stochastic:
        y.add_(torch.rand(y.shape, generator=generator, device=y.device, dtype=torch.float32)).floor_()
    else:
        y.round_()
    codes = y.clamp_(-q, q).to(torch.int8).view(-1)
    if bits == 4:
        codes = pack_int4(codes)
    return QuantizedTensor(codes, scales, n, bits, group_size)


def dequantize(q: QuantizedTensor) -> torch.Tensor:
    """fp32 values ``codes * scale`` of a :class:`QuantizedTensor`: a flat tensor of ``q.numel`` elements.

    Raises:
        InvalidInputError: the codes and scales do not match ``bits``, ``group_size`` and ``numel``.
    """
    check_bits(q.bits)
    check_group_size(q.group_size)
    n_groups = q.scales.numel()
    padded = n_groups * q.group_size
    if q.numel > padded or q.numel <= padded - q.group_size and n_groups:
        raise InvalidInputError(f"{n_groups} groups of {q.group_size} do not hold {q.numel} values")
    if q.bits == 4:
        if q.codes.dtype != torch.uint8 or q.codes.numel() != (padded + 1) // 2:
            raise InvalidInputError("4-bit codes must be uint8 with two codes per byte")
        codes = unpack_int4(q.codes, padded)
    else:
        if q.codes.dtype != torch.int8 or q.codes.numel() != padded:
            raise InvalidInputError("8-bit codes must be int8, one per value")
        codes = q.codes
    y = codes.view(n_groups, q.group_size).to(torch.float32) * q.scales.to(torch.float32)[:, None]
    return y.view(-1)[: q.numel]
