"""Fused Triton kernels of SDP4Bit's quantized collectives: each stage in one pass over memory.

SDP4Bit (Jia et al., NeurIPS 2024, arXiv:2410.15526, system implementation; its released code fuses the same stages
in ``tools/jet_quant_cuda``) computes, with :mod:`strata.comm.quantize`'s PyTorch ops, every step of a collective
as a separate pass over the data; the kernels here fuse them:

* :func:`quantize` with ``subtract`` (qWD): weight difference ``new - replica`` -> group absmax -> stochastic
  rounding -> int4 packing;
* :func:`quantize` with ``hadamard=True`` (TLq-HS stage 1): 32-point Hadamard transform -> int8 quantization;
* :func:`requantize_sum` (stage 2): dequantize the ``k`` copies received from the node's ranks -> sum -> int4
  quantization and packing;
* :func:`dequantize_add` (receiving side of the all-gather and of the reduce-scatter): unpack -> dequantize
  (-> sum of copies) (-> inverse Hadamard) -> add into (or write) the destination.

Codes and scales have :class:`strata.comm.quantize.QuantizedTensor`'s format and semantics (levels
``-qmax..qmax``, ``scale = absmax / qmax``, all-zero group: scale 0 and codes 0, zero padding of the last group,
a group holding NaN or Inf: scale NaN and codes 0, as ``nonfinite="propagate"``). Round-to-nearest gives the
PyTorch reference's codes and scales bit for bit (with the Hadamard transform, up to the fp32 rounding of the
transform's sums). Stochastic rounding draws ``u ~ U[0, 1)`` from Philox (``tl.rand``) keyed by a per-call seed and
the value's index, so equal seeds give equal bytes; the seed comes from ``seed`` (an int, or one draw from a
``torch.Generator``, which advances it). The PyTorch reference draws from the generator differently, so its
stochastic codes differ from the kernels' (both unbiased, within one quantization bin).

Two backends run them: ``"triton"`` (:mod:`strata.comm._triton`) for CUDA tensors, and ``"numba"``
(:mod:`strata.comm._numba`, the same arithmetic compiled for the CPU, its stochastic codes equal to Triton's bit for
bit) for CPU tensors, on ``torch.get_num_threads()`` threads. Triton is optional (``pip install 'strata[gpu]'``) and
imported on first use; it can also run its kernels on CPU tensors in its interpreter (slow: tests and checks only),
which Triton enables for the whole process when ``TRITON_INTERPRET=1`` is set before it is imported.
:func:`use_fused` decides between these backends and the PyTorch ops for a :class:`~strata.comm.config.CommConfig`.
"""
from __future__ import annotations

import functools
import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..errors import InvalidInputError, UnsupportedDtypeError
from .quantize import QuantizedTensor, check_bits, check_group_size

_TILE = 2048  # values per dequantizing program; values per quantizing program unless one group is larger
_SEED_HIGH = 1 << 62
# no fused multiply-add: products are rounded before they are summed, as the PyTorch reference does
_EXACT = {"enable_fp_fusion": False}


@functools.cache
def triton_available() -> bool:
    """Whether Triton can be imported (the fused kernels need it)."""
    return importlib.util.find_spec("triton") is not None


def _kernels(t: torch.Tensor):
    """The kernel module for a tensor on ``t``'s device. Triton decides once per process, when it is first
    imported, whether ``@triton.jit`` functions are compiled or run by its interpreter (``TRITON_INTERPRET=1``):
    CUDA tensors run either way, CPU tensors in the interpreter only."""
    if not triton_available():
        raise InvalidInputError("the fused kernels need Triton: pip install 'strata[gpu]'")
    from . import _triton

    if not t.is_cuda and not _triton.INTERPRETED:
        raise InvalidInputError(f"fused kernels on {t.device} tensors run in Triton's interpreter only: set "
                                "TRITON_INTERPRET=1 before triton is imported")
    return _triton


def _tl_dtype(dtype: torch.dtype):
    import triton.language as tl

    return {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
            torch.float64: tl.float64}[dtype]


def use_fused(mode: str, x: torch.Tensor) -> str | None:
    """The backend of the fused kernels for ``x`` (``"triton"`` or ``"numba"``), or ``None`` for PyTorch's ops:
    ``mode`` is ``CommConfig.kernels``: ``"torch"`` never fused, ``"triton"`` always Triton (CPU tensors through
    its interpreter), ``"auto"`` Triton for CUDA tensors when it imports (else PyTorch), numba for CPU tensors.

    Raises:
        InvalidInputError: ``mode`` is ``"triton"`` and Triton is not installed.
    """
    if mode == "torch":
        return None
    if mode == "triton":
        if not triton_available():
            raise InvalidInputError("kernels='triton' needs Triton: pip install 'strata[gpu]'")
        return "triton"
    if x.is_cuda:
        return "triton" if triton_available() else None
    return "numba" if x.device.type == "cpu" else None


def _backend(backend: str | None, t: torch.Tensor) -> str:
    """``backend``, or by default Triton for CUDA tensors and numba for CPU tensors."""
    if backend is None:
        return "triton" if t.is_cuda else "numba"
    if backend not in ("triton", "numba"):
        raise InvalidInputError(f"backend must be 'triton' or 'numba', got {backend!r}")
    if backend == "numba" and t.device.type != "cpu":
        raise InvalidInputError(f"the numba kernels run on CPU tensors, got one on {t.device}")
    return backend


_POOLS: dict[int, ThreadPoolExecutor] = {}  # by thread count, kept for the process
_POOLS_LOCK = threading.Lock()


def _split(n: int, run, align: int = 1) -> None:
    """``run(lo, hi)`` over ``0 .. n`` in parts on ``torch.get_num_threads()`` threads (the kernels release the
    GIL), each part's start a multiple of ``align``."""
    k = max(1, min(torch.get_num_threads(), -(-n // (align * 64))))
    if k == 1:
        run(0, n)
        return
    edges = [min(n, -(-n * i // k) // align * align) for i in range(k)] + [n]
    with _POOLS_LOCK:
        pool = _POOLS.get(k) or _POOLS.setdefault(k, ThreadPoolExecutor(k, thread_name_prefix="strata-comm"))
    for f in [pool.submit(run, lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]:
        f.result()


def _np(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor the numba kernels take: fp32 as is, bf16 as its uint16 bit patterns, int8 codes
    as uint8."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype == torch.int8:
        return t.numpy().view(np.uint8)
    return t.numpy()


def _numba_seed(seed) -> int:
    """The int64 seed of a numba launch (as :func:`_seed`, on the host)."""
    return int(_seed(seed, torch.device("cpu"))[0])


def supports(bits: int, group_size: int, *, hadamard: bool = False) -> bool:
    """Whether :func:`quantize` and :func:`requantize_sum` handle this layout: 4-bit codes need an even group size
    (whole bytes per group), the fused Hadamard transform a group size that is a multiple of 32."""
    return not (bits == 4 and group_size % 2) and not (hadamard and group_size % 32)


def _seed(seed, device: torch.device) -> torch.Tensor:
    """int64 ``(1,)`` on ``device``: ``seed`` itself, or one draw from a ``torch.Generator`` (``None``: torch's
    default generator of ``device``), without waiting for the device."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return torch.tensor([seed % _SEED_HIGH], dtype=torch.int64, device=device)
    if seed is not None and not isinstance(seed, torch.Generator):
        raise InvalidInputError(f"seed must be an int, a torch.Generator or None, got {type(seed).__name__}")
    where = seed.device if seed is not None else device
    return torch.randint(0, _SEED_HIGH, (1,), generator=seed, device=where, dtype=torch.int64).to(device)


def _check_float(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise UnsupportedDtypeError(f"{name} must be floating point (fp32/fp64/bf16/fp16), got {x.dtype}")
    return x.reshape(-1)


def _check_layout(bits: int, group_size: int, hadamard: bool = False) -> None:
    check_bits(bits)
    check_group_size(group_size)
    if not supports(bits, group_size, hadamard=hadamard):
        raise InvalidInputError(f"the fused kernels need an even group size for 4 bits and a multiple of 32 with "
                                f"the Hadamard transform, got {group_size} ({bits} bits)")


def _tiling(group_size: int) -> tuple[int, int, int]:
    """(BLOCK, ROWS, num_warps) of a quantizing program."""
    block = 1 << max(0, group_size - 1).bit_length()
    rows = max(1, _TILE // block)
    return block, rows, 8 if rows * block >= 4096 else 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _empty_codes(padded: int, bits: int, device) -> torch.Tensor:
    if bits == 4:
        return torch.empty((padded + 1) // 2, dtype=torch.uint8, device=device)
    return torch.empty(padded, dtype=torch.int8, device=device)


def quantize(x: torch.Tensor, bits: int, group_size: int, *, stochastic: bool = True, seed=None,
             subtract: torch.Tensor | None = None, round_to: torch.dtype | None = None,
             hadamard: bool = False, backend: str | None = None) -> QuantizedTensor:
    """Group-wise quantization of ``x`` (read flat) in one pass, as ``strata.comm.quantize.quantize`` with
    ``nonfinite="propagate"``: of ``x - subtract`` (qWD) or of the 32-point Hadamard transform of ``x`` (TLq-HS).

    Args:
        x: float tensor (fp32/fp64/bf16/fp16), ``n`` values, on CUDA or the CPU.
        bits: 4 (codes packed two per byte) or 8.
        group_size: values per fp32 scale; even for 4 bits, a multiple of 32 with ``hadamard``.
        stochastic: stochastic rounding (default) or round-to-nearest.
        seed: int or ``torch.Generator`` (one int64 drawn from it) keying the stochastic rounding; ``None``: torch's
            default generator.
        subtract: float tensor of ``n`` values on ``x``'s device, subtracted (in fp32) from ``x``.
        round_to: dtype ``x`` is rounded to before anything else (qWD: the master weights to the replica's dtype).
        hadamard: transform every 32 consecutive values by ``H`` first (``hadamard32``; ``n % 32 == 0``).
        backend: ``"triton"`` or ``"numba"`` (CPU tensors only); default: Triton for CUDA tensors, numba for CPU
            ones (Triton runs CPU tensors in its interpreter only).

    Returns:
        :class:`~strata.comm.quantize.QuantizedTensor` of ``n`` values.

    Raises:
        InvalidInputError: bad ``bits``, ``group_size``, ``seed``, lengths or devices, or Triton missing.
        UnsupportedDtypeError: ``x``, ``subtract`` or ``round_to`` not floating point.
    """
    flat = _check_float(x, "x")
    _check_layout(bits, group_size, hadamard)
    n = flat.numel()
    if hadamard and n % 32:
        raise InvalidInputError(f"length {n} is not a multiple of the Hadamard block 32; pad first")
    if subtract is not None:
        ref = _check_float(subtract, "subtract")
        if ref.numel() != n or ref.device != flat.device:
            raise InvalidInputError(f"subtract must hold {n} values on {flat.device}")
        ref = ref.contiguous()
    round_to = flat.dtype if round_to is None else round_to
    if round_to not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise UnsupportedDtypeError(f"round_to must be a floating-point dtype, got {round_to}")
    n_groups = -(-n // group_size)
    codes = _empty_codes(n_groups * group_size, bits, flat.device)
    scales = torch.empty(n_groups, dtype=torch.float32, device=flat.device)
    if n_groups and _backend(backend, flat) == "numba":
        flat = flat.float().contiguous()  # (as the Triton kernel reads it)
        if round_to == torch.float16:  # (the rounding done by torch)
            flat, round_to = flat.half().float(), torch.float32
        x32 = _np(flat)
        r = x32 if subtract is None else _np(ref if ref.dtype in (torch.float32, torch.bfloat16) else ref.float())
        k, c, sc = _numba(), _np(codes), scales.numpy()
        rnd, sd = k.ROUND_BF16 if round_to == torch.bfloat16 else k.ROUND_NONE, _numba_seed(seed)
        _split(n_groups, lambda g0, g1: k.quantize_groups(x32, r, subtract is not None, rnd, n, group_size, bits,
                                                            bool(stochastic), sd, bool(hadamard), c, sc, g0, g1))
    elif n_groups:
        block, rows, warps = _tiling(group_size)
        flat = flat.contiguous()
        _kernels(flat).quantize_kernel[(_cdiv(n_groups, rows),)](
            flat, ref if subtract is not None else flat, codes, scales, _seed(seed, flat.device), n, n_groups,
            GROUP=group_size, BLOCK=block, ROWS=rows, BITS=bits, STOCHASTIC=bool(stochastic),
            HAS_REF=subtract is not None, ROUND_TO=_tl_dtype(round_to), HADAMARD=bool(hadamard), num_warps=warps,
            **_EXACT)
    return QuantizedTensor(codes, scales, n, bits, group_size)


def _check_rows(codes: torch.Tensor, scales: torch.Tensor, per: int, bits: int, group_size: int) -> int:
    """Number of rows of a received buffer; raises InvalidInputError when the shapes do not hold ``per`` values."""
    check_bits(bits)
    check_group_size(group_size)
    want = torch.uint8 if bits == 4 else torch.int8
    if not isinstance(codes, torch.Tensor) or codes.dim() != 2 or codes.dtype != want or codes.stride(1) != 1:
        raise InvalidInputError(f"codes must be a 2-D {want} tensor with unit stride along its rows")
    k = codes.shape[0]
    n_groups = -(-per // group_size)
    if (not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32 or scales.shape != (k, n_groups)
            or codes.shape[1] < (per * bits + 7) // 8 or scales.device != codes.device):
        raise InvalidInputError(f"codes {tuple(codes.shape)} and scales {tuple(getattr(scales, 'shape', ()))} do "
                                f"not hold {k} rows of {per} values in groups of {group_size}")
    return k


def requantize_sum(codes: torch.Tensor, scales: torch.Tensor, per: int, in_bits: int, in_group_size: int,
                   bits: int, group_size: int, *, stochastic: bool = True, seed=None,
                   backend: str | None = None) -> QuantizedTensor:
    """Quantization of the sum of ``k`` dequantized rows in one pass (TLq stage 2: the copies one rank received from
    the ranks of its node, summed in row order, to ``bits`` for the inter-node all-to-all).

    Args:
        codes: ``(k, >= ceil(per * in_bits / 8))`` uint8 (4 bits, packed) or int8 (8 bits), unit stride along rows
            (a view into the receive buffer is fine).
        scales: fp32 ``(k, ceil(per / in_group_size))``.
        per: values per row.
        in_bits, in_group_size: the rows' quantization.
        bits, group_size, stochastic, seed, backend: the output's quantization, as in :func:`quantize`.

    Returns:
        :class:`~strata.comm.quantize.QuantizedTensor` of ``per`` values.

    Raises:
        InvalidInputError: the shapes, dtypes or layouts do not match, or Triton missing.
    """
    k = _check_rows(codes, scales, per, in_bits, in_group_size)
    _check_layout(bits, group_size)
    if k < 1:
        raise InvalidInputError("requantize_sum needs at least one row")
    n_groups = -(-per // group_size)
    out = _empty_codes(n_groups * group_size, bits, codes.device)
    out_scales = torch.empty(n_groups, dtype=torch.float32, device=codes.device)
    if n_groups and _backend(backend, codes) == "numba":
        k, rows, sc = _numba(), _np(codes), scales.contiguous().numpy()
        c, osc, sd = _np(out), out_scales.numpy(), _numba_seed(seed)
        _split(n_groups, lambda g0, g1: k.requantize_groups(rows, sc, in_bits, in_group_size, per, group_size, bits,
                                                              bool(stochastic), sd, c, osc, g0, g1))
    elif n_groups:
        block, rows, warps = _tiling(group_size)
        _kernels(codes).requantize_kernel[(_cdiv(n_groups, rows),)](
            codes, codes.stride(0), scales.contiguous(), scales.shape[1], k, per, out, out_scales,
            _seed(seed, codes.device), n_groups, IN_BITS=in_bits, IN_GROUP=in_group_size, GROUP=group_size,
            BLOCK=block, ROWS=rows, BITS=bits, STOCHASTIC=bool(stochastic), num_warps=warps, **_EXACT)
    return QuantizedTensor(out, out_scales, per, bits, group_size)


def dequantize_add(codes: torch.Tensor, scales: torch.Tensor, per: int, bits: int, group_size: int,
                   out: torch.Tensor, *, copies: int = 1, inverse_hadamard: bool = False, accumulate: bool = True,
                   round_to: torch.dtype | None = None, backend: str | None = None) -> torch.Tensor:
    """The receiving side in one pass: segment ``i`` of ``out`` (``per`` values) gets the sum of the dequantized rows
    ``i * copies .. (i + 1) * copies - 1`` (in that order), inverse-Hadamard transformed (``inverse_hadamard32``)
    if asked, added to ``out``'s values (``accumulate``, in fp32) or written, rounded to ``round_to`` then ``out``'s
    dtype. The all-gather of qWD is ``copies=1, accumulate=True`` (every shard's difference into the replica); the
    reduce-scatter's last stage ``copies=k, accumulate=False`` (and ``inverse_hadamard`` for TLq-HS).

    Args:
        codes, scales: the rows, as in :func:`requantize_sum` (``segments * copies`` rows of ``per`` values).
        out: contiguous float tensor of ``segments * per`` values on the rows' device, updated in place.
        copies: rows summed into each segment.
        round_to: dtype the result is rounded to before it is stored (default ``out.dtype``).
        backend: as in :func:`quantize`.

    Returns:
        ``out``.

    Raises:
        InvalidInputError: the shapes, dtypes or layouts do not match, ``per`` is not a multiple of 32 with
            ``inverse_hadamard``, or Triton missing.
        UnsupportedDtypeError: ``out`` or ``round_to`` not floating point.
    """
    k = _check_rows(codes, scales, per, bits, group_size)
    flat = _check_float(out, "out")
    if (isinstance(copies, bool) or not isinstance(copies, int) or copies < 1 or k % copies
            or flat.numel() != k // copies * per or not out.is_contiguous() or out.device != codes.device):
        raise InvalidInputError(f"{k} rows of {per} values in segments of {copies} copies do not fill a contiguous "
                                f"out of {flat.numel()} values on {codes.device}")
    if inverse_hadamard and per % 32:
        raise InvalidInputError(f"length {per} is not a multiple of the Hadamard block 32")
    round_to = out.dtype if round_to is None else round_to
    if round_to not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise UnsupportedDtypeError(f"round_to must be a floating-point dtype, got {round_to}")
    if per and k and _backend(backend, codes) == "numba":
        _dequantize_add_numba(codes, scales, per, bits, group_size, out, copies, inverse_hadamard, accumulate,
                              round_to)
    elif per and k:
        _kernels(codes).dequantize_add_kernel[(_cdiv(per, _TILE), k // copies)](
            codes, codes.stride(0), scales.contiguous(), scales.shape[1], copies, per, flat, BITS=bits,
            GROUP=group_size, TILE=_TILE, INVERSE_HADAMARD=bool(inverse_hadamard), ACCUMULATE=bool(accumulate),
            ROUND_TO=_tl_dtype(round_to), num_warps=8, **_EXACT)
    return out


def _numba():
    from . import _numba

    return _numba


def _dequantize_add_numba(codes, scales, per, bits, group_size, out, copies, inverse_hadamard, accumulate,
                          round_to) -> None:
    """:func:`dequantize_add` by the numba kernel, on ``out`` itself when it and ``round_to`` are fp32 or bf16 (a
    bf16 result is rounded to nearest even), else through an fp32 copy of ``out`` rounded by torch as asked."""
    k = _numba()
    direct = out.dtype in (torch.float32, torch.bfloat16) and round_to in (torch.float32, torch.bfloat16)
    work = out.view(-1) if direct else out.view(-1).float()
    rnd = k.ROUND_BF16 if direct and torch.bfloat16 in (round_to, out.dtype) else k.ROUND_NONE
    rows, sc, w = _np(codes), scales.contiguous().numpy(), _np(work)
    _split(per, lambda v0, v1: k.dequantize_add_values(rows, sc, bits, group_size, copies, per, w,
                                                       bool(inverse_hadamard), bool(accumulate), rnd, v0, v1),
           align=32)
    if not direct:
        out.view(-1).copy_(work.to(round_to))
