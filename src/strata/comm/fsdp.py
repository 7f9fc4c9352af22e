"""SDP4Bit collectives as FSDP2 custom communication (``FSDPModule.set_custom_all_gather`` /
``set_custom_reduce_scatter``, torch >= 2.9; the base classes live in the private module
``torch.distributed.fsdp._fully_shard._fsdp_api``).

* :class:`QuantizedReduceScatter` runs the two-level gradient reduce-scatter (TLq / TLq-HS / qgZ) on the flat
  reduce-scatter buffer FSDP2 builds for one FSDP unit; ``ReduceOp.AVG`` is applied as one division before the
  quantized exchange, ``ReduceOp.SUM`` as no division.
* :class:`QuantizedAllGather` replaces the parameter all-gather with qWD (SDP4Bit, "quantization on weight
  differences") or direct quantization (ZeRO++ qwZ). qWD needs the weights of the previous gather on every
  rank, so each instance keeps a full fp32 copy of its unit's unsharded parameters: the memory of ZeRO-1/2, not of
  ZeRO-3. Use it with ``reshard_after_forward=False`` (one gather per step); with resharding, the backward
  re-gather sends a second, smaller correction (correct, but twice the traffic and slightly different weights
  in forward and backward).

Limits (see ``docs/comm.md``): synchronous collectives (``async_op`` is ignored, no overlap with compute); a 1-D
mesh over the whole world only (the FSDP group must be the world group of the :class:`Topology`); the first
gather of each unit is sent unquantized in the unit's parameter dtype (it initialises the replicas).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..errors import InvalidInputError
from .collectives import CommStats, Topology, WeightAllGather, all_gather_counted, reduce_scatter_two_level
from .config import CommConfig

try:  # the ABCs FSDP2's custom comm hooks are typed with (private module in torch 2.13)
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGatherBase
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterBase
except ImportError:  # pragma: no cover - other torch versions: duck typing is enough for FSDP2
    _AllGatherBase = _ReduceScatterBase = object


def _check_group(group, topo: Topology) -> None:
    if dist.get_world_size(group) != topo.world_size or dist.get_rank(group) != topo.rank:
        raise InvalidInputError("the FSDP2 hooks need a 1-D mesh over all ranks (group = world, same rank order)")


class QuantizedReduceScatter(_ReduceScatterBase):
    """FSDP2 ``ReduceScatter`` running :func:`strata.comm.collectives.reduce_scatter_two_level`.

    Each rank's chunk of the input (``S = output.numel()`` elements) is zero-padded to a multiple of
    ``config.grad_alignment`` before the exchange. Wire bytes go to ``stats`` under ``"grad_reduce_scatter"``.
    """

    def __init__(self, config: CommConfig, topology: Topology, stats: CommStats | None = None,
                 generator: torch.Generator | None = None) -> None:
        if config.grad_mode != "two_level":
            raise InvalidInputError("QuantizedReduceScatter needs grad_mode='two_level' (keep FSDP's own otherwise)")
        self.config, self.topology, self.stats, self.generator = config, topology, stats, generator

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    @torch.no_grad()
    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group, op,
                 async_op: bool = False):
        _check_group(group, self.topology)
        w, s = self.topology.world_size, output_tensor.numel()
        if input_tensor.numel() != w * s:
            raise InvalidInputError(f"reduce-scatter input has {input_tensor.numel()} elements, expected {w} x {s}")
        x = input_tensor.reshape(w, s).to(torch.float32)
        if op == dist.ReduceOp.AVG:
            x = x / w
        elif op != dist.ReduceOp.SUM:
            raise InvalidInputError(f"unsupported reduce op {op}: only SUM and AVG")
        align = self.config.grad_alignment
        padded = -(-s // align) * align
        if padded != s:
            x = torch.nn.functional.pad(x, (0, padded - s))
        out = reduce_scatter_two_level(x.reshape(-1), self.topology, self.config, self.stats, self.generator)
        output_tensor.copy_(out[:s])
        return None


class QuantizedAllGather(_AllGatherBase):
    """FSDP2 ``AllGather`` sending quantized weight differences (qWD) or quantized weights (direct).

    Wire bytes go to ``stats`` under ``"weight_allgather"``. See the module docstring for the memory cost and
    the ``reshard_after_forward=False`` requirement of qWD.
    """

    def __init__(self, config: CommConfig, topology: Topology, stats: CommStats | None = None,
                 generator: torch.Generator | None = None) -> None:
        if config.weight_mode == "plain":
            raise InvalidInputError("QuantizedAllGather needs weight_mode 'qwd' or 'direct' (keep FSDP's own)")
        self.config, self.topology, self.stats = config, topology, stats
        self._gather = WeightAllGather(config, topology, stats, generator)
        self.replica: torch.Tensor | None = None  # qWD: the last gathered weights (flat, output layout)

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    @torch.no_grad()
    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group, async_op: bool = False):
        _check_group(group, self.topology)
        w, s = self.topology.world_size, input_tensor.numel()
        if output_tensor.numel() != w * s:
            raise InvalidInputError(f"all-gather output has {output_tensor.numel()} elements, expected {w} x {s}")
        if not input_tensor.is_floating_point():
            raise InvalidInputError("QuantizedAllGather needs floating-point parameters (no uint8 all-gather inputs)")
        cfg = self.config
        if cfg.weight_mode == "qwd" and self.replica is None:
            all_gather_counted(output_tensor, input_tensor.contiguous(), group, self.topology, self.stats,
                               WeightAllGather.name, s)
            self.replica = output_tensor.reshape(-1).to(torch.float32).clone()
            return None
        replica = self.replica if cfg.weight_mode == "qwd" else torch.zeros(w * s, device=input_tensor.device)
        # the replica's values are rounded to the output dtype: the weights every rank uses in its forward
        self._gather.cfg = cfg.replace(param_dtype=_dtype_name(output_tensor.dtype))
        self._gather(input_tensor.reshape(-1).to(torch.float32), replica)
        output_tensor.copy_(replica.view_as(output_tensor))
        return None


def _dtype_name(dtype: torch.dtype) -> str:
    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    if dtype not in names:
        raise InvalidInputError(f"unsupported parameter dtype {dtype} for the quantized all-gather")
    return names[dtype]


def apply_fsdp2_comm(modules, config: CommConfig, topology: Topology, stats: CommStats | None = None,
                     seed: int = 0) -> list:
    """Install the quantized all-gather and/or reduce-scatter on every FSDP2 module of ``modules``.

    Args:
        modules: FSDP2 modules (results of ``fully_shard``), e.g. every transformer block and the root.
        config: ``weight_mode`` other than ``"plain"`` installs :class:`QuantizedAllGather`; ``grad_mode`` equal
            to ``"two_level"`` installs :class:`QuantizedReduceScatter`; FSDP2's own collectives stay otherwise.
        topology: from :func:`strata.comm.collectives.build_topology` (same ranks as the FSDP mesh).
        stats: where to count wire bytes.
        seed: seed of the stochastic rounding (mixed with the rank and the module index).

    Returns:
        The installed comm objects (all-gathers and reduce-scatters), in module order.

    Raises:
        InvalidInputError: a module is not an FSDP2 module.
    """
    from torch.distributed.fsdp import FSDPModule

    installed = []
    for i, m in enumerate(modules):
        if not isinstance(m, FSDPModule):
            raise InvalidInputError(f"module {i} ({type(m).__name__}) is not an FSDP2 module (call fully_shard)")
        dev = next((p.device for p in m.parameters()), torch.device("cpu"))
        gen = torch.Generator(device=dev).manual_seed((seed * 1_000_003 + topology.rank) * 4099 + i)
        if config.weight_mode != "plain":
            ag = QuantizedAllGather(config, topology, stats, gen)
            m.set_custom_all_gather(ag)
            installed.append(ag)
        if config.grad_mode == "two_level":
            rs = QuantizedReduceScatter(config, topology, stats, gen)
            m.set_custom_reduce_scatter(rs)
            installed.append(rs)
    return installed
