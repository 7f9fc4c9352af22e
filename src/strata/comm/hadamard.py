"""Blockwise 32-point Hadamard transform, used to smooth gradients before quantization.

SDP4Bit (Jia et al., NeurIPS 2024, arXiv:2410.15526, "two-level gradient smooth quantization", TLq-HS)
multiplies every block of 32 consecutive gradient values by the unnormalised Sylvester Hadamard matrix ``H``
(order 5, entries +-1): an outlier is spread over its 32-block, so the group absmax, hence the quantization bin, shrinks
for the other values. ``H`` is symmetric and ``H @ H = 32 I``, so the inverse is ``H x / 32``; the
transform is linear, so sums of transformed gradients (the reduction) are transforms of the sum.

The transform is one ``(-1, 32) @ (32, 32)`` matrix product: on CPUs (BLAS) and GPUs (tensor cores)
that is faster than a radix-2 butterfly written as separate tensor passes (``log2(32) = 5`` memory
passes); the Megatron reference fuses a butterfly into its CUDA quantization kernels instead.
"""
from __future__ import annotations

import functools

import torch

from ..errors import InvalidInputError, UnsupportedDtypeError

BLOCK = 32


@functools.lru_cache(maxsize=32)
def _matrix(n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h.to(dtype=dtype, device=device)


def hadamard_matrix(n: int = BLOCK, *, dtype: torch.dtype = torch.float32, device="cpu") -> torch.Tensor:
    """The unnormalised Sylvester Hadamard matrix of order ``n`` (a power of two): entries +-1, ``H H = n I``.

    Raises:
        InvalidInputError: ``n`` is not a positive power of two.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1):
        raise InvalidInputError(f"Hadamard order must be a positive power of two, got {n!r}")
    return _matrix(n, dtype, str(torch.device(device))).clone()


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidInputError(f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise UnsupportedDtypeError(f"the Hadamard transform needs fp32 or fp64, got {x.dtype}")
    if x.numel() % block:
        raise InvalidInputError(f"length {x.numel()} is not a multiple of the Hadamard block {block}; pad first")
    return x.reshape(-1, block)


def hadamard32(x: torch.Tensor) -> torch.Tensor:
    """Forward transform ``H y`` of every block of 32 consecutive elements of ``x`` (read flat).

    Args:
        x: fp32 or fp64 tensor, any shape and device, ``x.numel() % 32 == 0``.

    Returns:
        A new tensor of the shape and dtype of ``x``.

    Raises:
        InvalidInputError: ``x.numel()`` is not a multiple of 32.
        UnsupportedDtypeError: ``x`` is not fp32/fp64.
    """
    b = _blocks(x, BLOCK)
    return (b @ _matrix(BLOCK, x.dtype, str(x.device))).reshape(x.shape)


def inverse_hadamard32(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`hadamard32`: ``H y / 32`` per block of 32 (same arguments, shape and errors)."""
    b = _blocks(x, BLOCK)
    return (b @ _matrix(BLOCK, x.dtype, str(x.device))).mul_(1.0 / BLOCK).reshape(x.shape)
