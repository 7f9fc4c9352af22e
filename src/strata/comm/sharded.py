"""ZeRO-style sharded data-parallel optimizer wrapper: weights replicated, fp32 master weights and optimizer
state sharded, quantized weight all-gather and gradient reduce-scatter.

This is the setting SDP4Bit was designed for (Jia et al., arXiv:2410.15526, background and methods: Megatron-LM's
distributed optimizer, ZeRO stage 1/2): every rank holds the full model for forward and backward, and owns
one contiguous shard of a flat, padded parameter vector for which it keeps the fp32 master weights and the
optimizer state. One :meth:`ShardedOptimizer.step`:

1. flattens the model gradients (fp32, zero-padded) and divides them by the world size (the only averaging);
2. reduce-scatters them (plain, TLq, TLq-HS or qgZ, see :mod:`strata.comm.collectives`) to this rank's shard;
3. optionally clips by the global gradient norm (one scalar all-reduce, not counted as wire bytes);
4. runs the wrapped optimizer on the master shard;
5. all-gathers the new weights (plain, qWD or direct) into every replica.

See ``docs/comm.md`` for why this engine rather than FSDP2 hooks (:mod:`strata.comm.fsdp` has those too).
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InvalidInputError, UnsupportedDtypeError
from .collectives import CommStats, Topology, WeightAllGather, build_topology, reduce_scatter, torch_dtype
from .config import CommConfig


class ShardedOptimizer:
    """Wrap a freshly built torch optimizer of ``model`` into sharded data parallelism over all ranks.

    Every rank builds the same model and the same optimizer (e.g. ``torch.optim.AdamW(model.parameters())``
    or one with several parameter groups), wraps them, and then trains as usual::

        sdp = ShardedOptimizer(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                               CommConfig.arm("sdp4bit", ranks_per_node=8))
        for x, y in batches:                 # each rank its own slice of the global batch
            loss = loss_fn(model(x), y)
            sdp.zero_grad()
            loss.backward()
            sdp.step()

    The wrapper re-points every parameter of ``model`` into one flat replica buffer (``replica``), rebuilds the
    optimizer's class with the same hyperparameters over fp32 fragments of this rank's shard (``optimizer``;
    attach LR schedulers to it), and broadcasts rank 0's weights so that all replicas start identical.

    Args:
        model: any ``nn.Module``; its trainable parameters must all have one dtype (fp32, bf16 or fp16).
        optimizer: an optimizer over exactly the trainable parameters of ``model``, with no state yet, whose
            update is elementwise (SGD, Adam, AdamW, ...).
        config: the :class:`CommConfig` (default: the baseline arm).
        topology: from :func:`build_topology` (default: built here from ``config.ranks_per_node``).
        stats: where to count wire bytes (default: a new :class:`CommStats`, at ``self.stats``).
        seed: seed of this rank's stochastic-rounding generator (the rank is mixed in).
        max_grad_norm: clip the global gradient norm to this value (``None``: no clipping).

    Raises:
        InvalidInputError: torch.distributed not initialized, the optimizer has state or its parameters are not
            the model's trainable parameters, or a bad topology.
        UnsupportedDtypeError: the parameters are not all fp32, all bf16 or all fp16.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, config: CommConfig | None = None, *,
                 topology: Topology | None = None, stats: CommStats | None = None, seed: int = 0,
                 max_grad_norm: float | None = None) -> None:
        self.config = config = config or CommConfig()
        self.topology = topo = topology or build_topology(config.ranks_per_node)
        self.stats = stats if stats is not None else CommStats()
        self.max_grad_norm = max_grad_norm
        self.model = model

        params: list[nn.Parameter] = []
        seen: set[int] = set()
        for p in model.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise InvalidInputError("the model has no trainable parameters")
        opt_params = [p for g in optimizer.param_groups for p in g["params"]]
        if {id(p) for p in opt_params} != seen or len(opt_params) != len(params):
            raise InvalidInputError("the optimizer must hold exactly the model's trainable parameters, once each")
        if any(len(s) for s in optimizer.state.values()):
            raise InvalidInputError("wrap the optimizer before its first step (it already has state)")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.bfloat16, torch.float16):
            raise UnsupportedDtypeError(f"parameters must share one float dtype (fp32/bf16/fp16), got {dtypes}")
        dtype, device = params[0].dtype, params[0].device

        w = topo.world_size
        align = config.alignment
        n = sum(p.numel() for p in params)
        s = -(-n // (w * align)) * align
        self.numel, self.padded_numel, self.shard_numel = n, w * s, s
        self._params = params
        self._offsets: list[int] = []

        # 1. one flat replica buffer; parameters become views of it; rank 0's values everywhere
        replica = torch.zeros(w * s, dtype=dtype, device=device)
        off = 0
        with torch.no_grad():
            for p in params:
                self._offsets.append(off)
                replica[off:off + p.numel()].copy_(p.reshape(-1))
                p.data = replica[off:off + p.numel()].view_as(p)
                off += p.numel()
        dist.broadcast(replica, src=0)
        self._round_replica(replica)
        self.replica = replica

        # 2. fp32 master shard and its fragments (one per parameter overlapping the shard)
        lo, hi = topo.rank * s, (topo.rank + 1) * s
        self.master = replica[lo:hi].to(torch.float32).clone()
        self._grad = torch.zeros(s, dtype=torch.float32, device=device)
        frag_of: dict[int, nn.Parameter] = {}
        self._frag_ranges: list[tuple[nn.Parameter, int, int]] = []
        for p, o in zip(params, self._offsets):
            a, b = max(o, lo), min(o + p.numel(), hi)
            if a < b:
                frag = nn.Parameter(self.master[a - lo:b - lo], requires_grad=True)
                frag_of[id(p)] = frag
                self._frag_ranges.append((frag, a - lo, b - lo))
        groups = []
        for g in optimizer.param_groups:
            hyper = {k: v for k, v in g.items() if k != "params"}
            groups.append({**hyper, "params": [frag_of[id(p)] for p in g["params"] if id(p) in frag_of]})
        accepted = inspect.signature(type(optimizer).__init__).parameters
        self.optimizer = type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
        self.optimizer.defaults.update(optimizer.defaults)

        gen_seed = (seed * 1_000_003 + topo.rank) % (2**63)
        self.generator = torch.Generator(device=device).manual_seed(gen_seed)
        self._weights = WeightAllGather(config, topo, self.stats, self.generator)

    # ------------------------------------------------------------------------------------------------------------

    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups (learning rates etc. can be changed here)."""
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the model's gradients (the replicas' ``.grad``)."""
        self.model.zero_grad(set_to_none=set_to_none)

    def _round_replica(self, replica: torch.Tensor) -> None:
        pdt = torch_dtype(self.config.param_dtype)
        if replica.dtype != pdt:
            replica.copy_(replica.to(pdt))

    def _flat_grads(self) -> torch.Tensor:
        flat = torch.zeros(self.padded_numel, dtype=torch.float32, device=self.replica.device)
        for p, o in zip(self._params, self._offsets):
            if p.grad is not None:
                flat[o:o + p.numel()].copy_(p.grad.reshape(-1))
        return flat

    @torch.no_grad()
    def step(self) -> float | None:
        """Reduce-scatter the gradients, update this rank's shard, all-gather the weights into every replica.

        Every rank must call it after its backward pass (collective). Returns the global gradient norm when
        ``max_grad_norm`` is set (computed on the reduced gradients, before clipping), else ``None``.
        """
        topo = self.topology
        flat = self._flat_grads().div_(topo.world_size)
        self._grad.copy_(reduce_scatter(flat, topo, self.config, self.stats, self.generator))
        norm = None
        if self.max_grad_norm is not None:
            sq = self._grad.square().sum()
            dist.all_reduce(sq)
            norm = float(sq.sqrt())
            coef = self.max_grad_norm / (norm + 1e-6)
            if coef < 1.0:
                self._grad.mul_(coef)
        for frag, a, b in self._frag_ranges:
            frag.grad = self._grad[a:b]
        self.optimizer.step()
        self._weights(self.master, self.replica)
        return norm

    def state_dict(self) -> dict:
        """This rank's shard of the training state: ``{"master": fp32 (S,), "optimizer": ...}`` (sharded; every
        rank saves its own)."""
        return {"master": self.master.clone(), "optimizer": self.optimizer.state_dict(), "rank": self.topology.rank,
                "world_size": self.topology.world_size}
