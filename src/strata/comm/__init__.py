"""strata.comm: SDP4Bit, ~4-bit weight and gradient communication for sharded data-parallel training.

After Jia et al., "SDP4Bit: Toward 4-bit Communication Quantization in Sharded Data Parallelism for LLM
Training" (NeurIPS 2024, arXiv:2410.15526), with ZeRO++ (arXiv:2306.10209) baselines, on torch.distributed
(gloo on CPU, nccl on GPU):

* :mod:`~strata.comm.quantize` - group-wise symmetric int4/int8 quantization with stochastic rounding, packing;
* :mod:`~strata.comm.hadamard` - the blockwise 32-point Hadamard transform;
* :mod:`~strata.comm.collectives` - qWD / direct / plain weight all-gather, TLq / TLq-HS / qgZ / plain gradient
  reduce-scatter, process groups from ``ranks_per_node``, wire-byte accounting;
* :mod:`~strata.comm.sharded` - :class:`ShardedOptimizer`, the ZeRO-style sharded optimizer wrapper (per-rank
  checkpoints with exact resume, fp16 loss scaling with overflow skipping);
* :mod:`~strata.comm.fsdp` - the same collectives as FSDP2 custom all-gather / reduce-scatter;
* :mod:`~strata.comm.model` - a throughput model projecting step time and speedup.

``CommConfig.arm(name, ranks_per_node=...)`` switches between the arms ``baseline``, ``qwz_qgz``, ``qwd``,
``tlq``, ``tlq_hs``, ``sdp4bit`` and ``direct4``. This package needs PyTorch (``pip install 'strata[torch]'``);
``import strata`` does not import it.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("strata.comm needs PyTorch: pip install 'strata[torch]'") from e

from .collectives import (
    CommStats,
    Topology,
    WeightAllGather,
    build_topology,
    reduce_scatter,
    reduce_scatter_plain,
    reduce_scatter_two_level,
)
from .config import ARMS, CommConfig
from .hadamard import hadamard32, hadamard_matrix, inverse_hadamard32
from .quantize import QuantizedTensor, dequantize, pack_int4, quantize, unpack_int4, wire_bits_per_element
from .sharded import ShardedOptimizer

_LAZY = {"QuantizedAllGather", "QuantizedReduceScatter", "apply_fsdp2_comm"}  # importing FSDP2 costs ~1 s


def __getattr__(name: str):
    if name in _LAZY:
        from . import fsdp

        return getattr(fsdp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ARMS",
    "CommConfig",
    "CommStats",
    "QuantizedAllGather",
    "QuantizedReduceScatter",
    "QuantizedTensor",
    "ShardedOptimizer",
    "Topology",
    "WeightAllGather",
    "apply_fsdp2_comm",
    "build_topology",
    "dequantize",
    "hadamard32",
    "hadamard_matrix",
    "inverse_hadamard32",
    "pack_int4",
    "quantize",
    "reduce_scatter",
    "reduce_scatter_plain",
    "reduce_scatter_two_level",
    "unpack_int4",
    "wire_bits_per_element",
]
