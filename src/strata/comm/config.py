"""Configuration of the quantized collectives: one small frozen dataclass and the named arms.

``CommConfig.arm("sdp4bit", ranks_per_node=8)`` is the one-line switch between the SDP4Bit arms
(Jia et al., NeurIPS 2024, arXiv:2410.15526, evaluation, ablation study) and the ZeRO++ baselines
(Wang et al., arXiv:2306.10209: qwZ and qgZ):

=============  ==========================================  ===========================================
arm            weight all-gather                           gradient reduce-scatter
=============  ==========================================  ===========================================
``baseline``   bf16 values                                 fp32 values, one flat reduce-scatter
``qwz_qgz``    int8 of the weights (direct), group 2048    int4 intra-node then int4 inter-node, no HT
``qwd``        int4 of the weight differences (qWD)        fp32 (as baseline)
``tlq``        bf16                                        int8 intra-node, int4 inter-node (TLq)
``tlq_hs``     bf16                                        TLq with the 32-point Hadamard (TLq-HS)
``sdp4bit``    qWD                                         TLq-HS
``direct4``    int4 of the weights (direct), group 2048    fp32 (as baseline)
=============  ==========================================  ===========================================
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import InvalidInputError
from .quantize import check_bits, check_group_size

WEIGHT_MODES = ("plain", "qwd", "direct")
GRAD_MODES = ("plain", "two_level")
DTYPES = ("float32", "bfloat16", "float16")
KERNELS = ("auto", "torch", "triton")


@dataclass(frozen=True)
class CommConfig:
    """How the weight all-gather and the gradient reduce-scatter of sharded data parallelism communicate.

    Attributes:
        weight_mode: ``"plain"`` (values in ``param_dtype``), ``"qwd"`` (quantized weight differences,
            SDP4Bit qWD) or ``"direct"`` (quantized weights, as ZeRO++ qwZ).
        weight_bits: 4 or 8, bits per quantized weight (difference).
        weight_group_size: elements per fp32 scale in the weight all-gather (paper default 2048).
        grad_mode: ``"plain"`` (one reduce-scatter in ``grad_dtype`` over all ranks) or ``"two_level"``
            (quantized all-to-all inside each node, then across nodes, SDP4Bit TLq).
        grad_bits_intra, grad_bits_inter: bits of the intra-node and inter-node stage (paper: 8 and 4).
        grad_group_size_intra, grad_group_size_inter: elements per scale in each stage (paper scripts: 128, 128).
        hadamard: smooth the gradients with the 32-point Hadamard transform (``two_level`` only).
        ranks_per_node: data-parallel ranks per node; ``None`` puts every rank on one node. Ranks are numbered
            node-major (rank ``r`` is on node ``r // ranks_per_node``).
        param_dtype: dtype of the replica weights' values (``"bfloat16"``: every forward uses bf16 values) and
            of the plain weight all-gather.
        grad_dtype: dtype of the plain gradient reduce-scatter (Megatron reduces bf16 models' gradients in fp32).
        stochastic: unbiased stochastic rounding (default) or round-to-nearest.
        kernels: what computes the quantization steps: ``"torch"`` (chains of PyTorch ops, the reference),
            ``"triton"`` (the fused kernels of :mod:`strata.comm.kernels` in Triton; CPU tensors through its
            interpreter) or ``"auto"`` (default: the fused kernels, in Triton for CUDA tensors when it is installed,
            else PyTorch's ops, and compiled by numba for CPU tensors). All round to nearest alike; the fused
            kernels draw the stochastic rounding's random numbers otherwise than PyTorch's ops (both backends
            alike).

    Raises:
        InvalidInputError: a mode, bit width, group size, dtype name or ``ranks_per_node`` is invalid, or
            ``hadamard`` is set without the two-level gradient path, or ``kernels`` is not one of :data:`KERNELS`.
    """

    weight_mode: str = "plain"
    weight_bits: int = 4
    weight_group_size: int = 2048
    grad_mode: str = "plain"
    grad_bits_intra: int = 8
    grad_bits_inter: int = 4
    grad_group_size_intra: int = 128
    grad_group_size_inter: int = 128
    hadamard: bool = False
    ranks_per_node: int | None = None
    param_dtype: str = "bfloat16"
    grad_dtype: str = "float32"
    stochastic: bool = True
    kernels: str = "auto"

    def __post_init__(self) -> None:
        if self.weight_mode not in WEIGHT_MODES:
            raise InvalidInputError(f"weight_mode must be one of {WEIGHT_MODES}, got {self.weight_mode!r}")
        if self.grad_mode not in GRAD_MODES:
            raise InvalidInputError(f"grad_mode must be one of {GRAD_MODES}, got {self.grad_mode!r}")
        for name in ("weight_bits", "grad_bits_intra", "grad_bits_inter"):
            try:
                check_bits(getattr(self, name))
            except InvalidInputError as e:
                raise InvalidInputError(f"{name}: {e}") from None
        for name in ("weight_group_size", "grad_group_size_intra", "grad_group_size_inter"):
            check_group_size(getattr(self, name), name)
        for name in ("param_dtype", "grad_dtype"):
            if getattr(self, name) not in DTYPES:
                raise InvalidInputError(f"{name} must be one of {DTYPES}, got {getattr(self, name)!r}")
        if self.ranks_per_node is not None:
            check_group_size(self.ranks_per_node, "ranks_per_node")
        if not isinstance(self.hadamard, bool) or not isinstance(self.stochastic, bool):
            raise InvalidInputError("hadamard and stochastic must be bools")
        if self.kernels not in KERNELS:
            raise InvalidInputError(f"kernels must be one of {KERNELS}, got {self.kernels!r}")
        if self.hadamard and self.grad_mode != "two_level":
            raise InvalidInputError("hadamard smoothing applies to grad_mode='two_level' only")

    @classmethod
    def arm(cls, name: str, **overrides) -> CommConfig:
        """The configuration of a named arm (see :data:`ARMS`), with ``overrides`` (e.g. ``ranks_per_node``).

        Raises:
            InvalidInputError: unknown arm name or invalid override.
        """
        if name not in ARMS:
            raise InvalidInputError(f"unknown arm {name!r}; choose one of {sorted(ARMS)}")
        return cls(**{**ARMS[name], **overrides})

    def replace(self, **changes) -> CommConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as a JSON-serializable dict."""
        return dataclasses.asdict(self)

    @property
    def grad_alignment(self) -> int:
        """Shard length multiple the gradient reduce-scatter needs (the least common multiple of the two-level
        group sizes, 2 for whole bytes of int4 codes and 32 with the Hadamard transform); 1 for the plain path."""
        if self.grad_mode != "two_level":
            return 1
        return math.lcm(self.grad_group_size_intra, self.grad_group_size_inter, 2, 32 if self.hadamard else 1)

    @property
    def alignment(self) -> int:
        """Shard alignment of the sharded optimizer (the least common multiple of :attr:`grad_alignment` and the
        weight group size when the weights are quantized, so that no group straddles two shards)."""
        return math.lcm(self.grad_alignment, self.weight_group_size if self.weight_mode != "plain" else 1)


#: The arms of the SDP4Bit ablation and the ZeRO++ baselines, as :class:`CommConfig` field overrides.
ARMS: dict[str, dict] = {
    "baseline": {},
    "qwz_qgz": {"weight_mode": "direct", "weight_bits": 8, "grad_mode": "two_level", "grad_bits_intra": 4,
                "grad_bits_inter": 4},
    "qwd": {"weight_mode": "qwd"},
    "tlq": {"grad_mode": "two_level"},
    "tlq_hs": {"grad_mode": "two_level", "hadamard": True},
    "sdp4bit": {"weight_mode": "qwd", "grad_mode": "two_level", "hadamard": True},
    "direct4": {"weight_mode": "direct", "weight_bits": 4},
}
