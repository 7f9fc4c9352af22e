"""Quantized collectives of sharded data parallelism on torch.distributed, with wire-byte accounting.

* Weight all-gather (:class:`WeightAllGather`): every rank owns a contiguous shard of the flat parameter
  vector and sends it to all ranks. ``plain`` sends the values in ``param_dtype``; ``direct`` sends them
  group-quantized (ZeRO++ qwZ, Wang et al. arXiv:2306.10209); ``qwd`` sends the quantized *difference*
  between the new shard and the replica weights used in the last forward, and every rank adds the
  dequantized differences of all shards to its replica (SDP4Bit, Jia et al. arXiv:2410.15526, "quantization
  on weight differences"): the replicas stay bit-identical and the quantization error of one step is part of
  the next difference, so it does not accumulate.
* Gradient reduce-scatter: :func:`reduce_scatter_plain` (one flat reduce-scatter) and
  :func:`reduce_scatter_two_level` (SDP4Bit, "two-level gradient smooth quantization": TLq / TLq-HS;
  ZeRO++ qgZ with 4 bits in both stages): optional 32-point Hadamard smoothing, quantization, all-to-all
  inside each node, dequantize-sum-requantize, all-to-all across nodes, dequantize-sum, inverse Hadamard.
  With one node only the intra-node stage runs, with one rank per node only the inter-node stage.
* :func:`build_topology` makes the intra-node and inter-node process groups from the world size and
  ``ranks_per_node`` (ranks numbered node-major).
* :class:`CommStats` counts the bytes each rank hands to torch.distributed for other ranks, per collective and
  per link class (peer on the same node or on another node), with the number of values those bytes carry.

Conventions: a *shard* is ``S`` consecutive elements; the flat vector of ``W * S`` elements holds rank ``r``'s
shard at ``[r * S, (r + 1) * S)``. Averaging over ranks is done once, by the caller, before the reduce-scatter
(as Megatron does), so the collectives here only sum.

Non-finite values never make a collective raise: the plain paths carry them as they are, the quantized paths
send a quantization group holding NaN or Inf as NaN (scale NaN, see :func:`strata.comm.quantize.quantize`), so
an fp16 overflow shows up as NaN or Inf in the output (at least in the owner's shard) for a loss scaler to see.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import InvalidInputError
from . import kernels
from .config import CommConfig
from .hadamard import hadamard32, inverse_hadamard32
from .quantize import QuantizedTensor, dequantize, quantize

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


# ----------------------------------------------------------------------------------------------------------------
# Topology
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """Where this rank sits: ``num_nodes`` nodes of ``ranks_per_node`` ranks, numbered node-major.

    ``intra_group`` holds this rank's node (``None`` with one rank per node); ``inter_group`` holds the ranks
    with the same local rank on every node (``None`` with one node). All collectives here use the default
    (world) group for flat operations.
    """

    rank: int
    world_size: int
    ranks_per_node: int
    intra_group: object | None = None
    inter_group: object | None = None

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.ranks_per_node

    @property
    def node(self) -> int:
        return self.node_of(self.rank)

    @property
    def local_rank(self) -> int:
        return self.rank % self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node


def build_topology(ranks_per_node: int | None = None) -> Topology:
    """Make the intra-node and inter-node process groups; every rank must call this, in the same order.

    Args:
        ranks_per_node: ranks per (simulated) node; ``None`` means all ranks on one node.

    Raises:
        InvalidInputError: torch.distributed is not initialized, or the world size is not a multiple of
            ``ranks_per_node``.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidInputError("torch.distributed must be initialized (init_process_group) first")
    world, rank = dist.get_world_size(), dist.get_rank()
    per_node = world if ranks_per_node is None else ranks_per_node
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node <= 0 or world % per_node:
        raise InvalidInputError(f"world size {world} is not a multiple of ranks_per_node={ranks_per_node!r}")
    nodes = world // per_node
    intra = inter = None
    if per_node > 1:
        for n in range(nodes):
            ranks = list(range(n * per_node, (n + 1) * per_node))
            g = dist.new_group(ranks) if nodes > 1 else dist.group.WORLD
            if rank in ranks:
                intra = g
    if nodes > 1:
        for j in range(per_node):
            ranks = list(range(j, world, per_node))
            g = dist.new_group(ranks) if per_node > 1 else dist.group.WORLD
            if rank in ranks:
                inter = g
    return Topology(rank, world, per_node, intra, inter)


# ----------------------------------------------------------------------------------------------------------------
# Byte accounting
# ----------------------------------------------------------------------------------------------------------------


class CommStats:
    """Bytes this rank handed to torch.distributed for other ranks, per collective name and link class.

    For each call the payload destined to each peer is counted once per peer (what a point-to-point
    implementation puts on the wire; ring or tree algorithms forward some bytes more than once, which is not
    counted). ``elements`` is how many full-precision values those bytes carry, so
    ``8 * bytes / elements`` is the wire cost in bits per value.
    """

    LINKS = ("intra", "inter")

    def __init__(self) -> None:
        self._data: dict[str, dict[str, int]] = defaultdict(
            lambda: {"calls": 0, "intra_bytes": 0, "inter_bytes": 0, "intra_elements": 0, "inter_elements": 0})

    def record(self, name: str, *, bytes_per_peer: int, elements_per_peer: int, intra_peers: int,
               inter_peers: int) -> None:
        d = self._data[name]
        d["calls"] += 1
        d["intra_bytes"] += bytes_per_peer * intra_peers
        d["inter_bytes"] += bytes_per_peer * inter_peers
        d["intra_elements"] += elements_per_peer * intra_peers
        d["inter_elements"] += elements_per_peer * inter_peers

    def reset(self) -> None:
        self._data.clear()

    def summary(self) -> dict[str, dict[str, int]]:
        """``{name: {calls, intra_bytes, inter_bytes, intra_elements, inter_elements}}`` (a copy)."""
        return {k: dict(v) for k, v in self._data.items()}

    def bits_per_element(self, name: str, link: str | None = None) -> float:
        """Wire bits per carried value of collective ``name`` on ``link`` (``"intra"``, ``"inter"`` or both);
        NaN when nothing was sent."""
        d = self._data.get(name)
        links = self.LINKS if link is None else (link,)
        if d is None:
            return float("nan")
        b = sum(d[f"{k}_bytes"] for k in links)
        e = sum(d[f"{k}_elements"] for k in links)
        return 8.0 * b / e if e else float("nan")


def _peers(group, topo: Topology) -> tuple[int, int, int]:
    """(group size, peers on this node, peers on other nodes) of ``group`` (one of the topology's groups, or the
    world group for ``None``) as seen from this rank."""
    if group is not None and group is topo.intra_group:
        return topo.ranks_per_node, topo.ranks_per_node - 1, 0
    if group is not None and group is topo.inter_group:
        return topo.num_nodes, 0, topo.num_nodes - 1
    size = dist.get_world_size(group)
    if size != topo.world_size:
        raise InvalidInputError(f"group of {size} ranks is neither the world ({topo.world_size}) nor a topology group")
    return size, topo.ranks_per_node - 1, topo.world_size - topo.ranks_per_node


def _collective(name: str, before_2_13: str):
    """torch.distributed's collective ``name``, which torch before 2.13 calls ``before_2_13`` (that name is
    deprecated from 2.13 on; CUDA builds of earlier torch versions are common on GPU machines)."""
    return getattr(dist, name, None) or getattr(dist, before_2_13)


def all_gather_single(out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
    """Every rank's equal-sized ``inp`` into ``out`` (``world * inp.numel()`` elements, in rank order)."""
    _collective("all_gather_single", "all_gather_into_tensor")(out, inp, group=group)


def all_gather_counted(out: torch.Tensor, inp: torch.Tensor, group, topo: Topology, stats: CommStats | None,
                       name: str, elements: int) -> None:
    """:func:`all_gather_single` of ``inp`` into ``out``, recording ``inp``'s bytes once per peer (carrying
    ``elements`` values)."""
    all_gather_single(out, inp, group=group)
    if stats is not None:
        _, intra, inter = _peers(group, topo)
        stats.record(name, bytes_per_peer=inp.numel() * inp.element_size(), elements_per_peer=elements,
                     intra_peers=intra, inter_peers=inter)


def all_to_all_counted(out: torch.Tensor, inp: torch.Tensor, group, topo: Topology, stats: CommStats | None,
                       name: str, elements_per_chunk: int) -> None:
    """``dist.all_to_all_single`` with equal splits; records one chunk per peer (the rank's own chunk stays local)."""
    dist.all_to_all_single(out, inp, group=group)
    if stats is not None:
        size, intra, inter = _peers(group, topo)
        stats.record(name, bytes_per_peer=inp.numel() * inp.element_size() // size,
                     elements_per_peer=elements_per_chunk, intra_peers=intra, inter_peers=inter)


# ----------------------------------------------------------------------------------------------------------------
# Wire format: codes and scales of each destination chunk in one uint8 row
# ----------------------------------------------------------------------------------------------------------------


def _to_wire(q: QuantizedTensor, chunks: int) -> torch.Tensor:
    """uint8 ``(chunks, code_bytes + scale_bytes)``: row ``i`` holds chunk ``i``'s codes then its fp32 scales."""
    codes = q.codes.view(torch.uint8).view(chunks, -1)
    scales = q.scales.contiguous().view(torch.uint8).view(chunks, -1)
    return torch.cat([codes, scales], dim=1)


def _from_wire(buf: torch.Tensor, chunks: int, elements_per_chunk: int, bits: int, group_size: int
               ) -> QuantizedTensor:
    """Inverse of :func:`_to_wire` for ``chunks`` rows of ``elements_per_chunk`` values each."""
    code_bytes = (elements_per_chunk * bits + 7) // 8
    rows = buf.view(chunks, -1)
    codes = rows[:, :code_bytes].reshape(-1)
    scales = rows[:, code_bytes:].reshape(-1).view(torch.float32)
    if bits == 8:
        codes = codes.view(torch.int8)
    return QuantizedTensor(codes, scales, chunks * elements_per_chunk, bits, group_size)


def _wire_rows(buf: torch.Tensor, chunks: int, elements_per_chunk: int, bits: int, group_size: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of a wire buffer for the fused kernels: codes ``(chunks, code_bytes)`` (a view; int8 for 8 bits)
    and fp32 scales ``(chunks, n_groups)``."""
    code_bytes = (elements_per_chunk * bits + 7) // 8
    rows = buf.view(chunks, -1)
    codes = rows[:, :code_bytes]
    return (codes.view(torch.int8) if bits == 8 else codes), rows[:, code_bytes:].contiguous().view(torch.float32)


def _quantize(x: torch.Tensor, bits: int, group_size: int, cfg: CommConfig, generator, fused: str | None,
              hadamard: bool = False) -> QuantizedTensor:
    """``x`` (with ``hadamard``: its 32-point Hadamard transform) quantized by the fused kernels of backend
    ``fused`` or (``None``) PyTorch's ops."""
    if fused and kernels.supports(bits, group_size, hadamard=hadamard):
        return kernels.quantize(x, bits, group_size, stochastic=cfg.stochastic, seed=generator, hadamard=hadamard,
                                backend=fused)
    if hadamard:
        x = hadamard32(x)
    if fused and kernels.supports(bits, group_size):
        return kernels.quantize(x, bits, group_size, stochastic=cfg.stochastic, seed=generator, backend=fused)
    return quantize(x, bits, group_size, stochastic=cfg.stochastic, generator=generator, nonfinite="propagate")


def _all_to_all_quantized(q: QuantizedTensor, chunks: int, group, topo: Topology, stats: CommStats | None,
                          name: str) -> torch.Tensor:
    """All-to-all of ``q`` (``chunks`` equal chunks, chunk ``i`` for group rank ``i``): the received wire rows,
    uint8 ``(chunks, row_bytes)``, row ``i`` from group rank ``i``."""
    wire = _to_wire(q, chunks)
    recv = torch.empty_like(wire)
    all_to_all_counted(recv, wire, group, topo, stats, name, q.numel // chunks)
    return recv


def _sum_requantize(recv: torch.Tensor, k: int, per: int, cfg: CommConfig, generator, fused: str | None
                    ) -> QuantizedTensor:
    """TLq stage 2: the sum of the ``k`` received intra-node rows of ``per`` values, quantized for the inter-node
    all-to-all."""
    bits_in, group_in = cfg.grad_bits_intra, cfg.grad_group_size_intra
    bits, group = cfg.grad_bits_inter, cfg.grad_group_size_inter
    if fused and kernels.supports(bits, group):
        codes, scales = _wire_rows(recv, k, per, bits_in, group_in)
        return kernels.requantize_sum(codes, scales, per, bits_in, group_in, bits, group, stochastic=cfg.stochastic,
                                      seed=generator, backend=fused)
    partial = dequantize(_from_wire(recv, k, per, bits_in, group_in)).view(k, per).sum(dim=0)
    return quantize(partial, bits, group, stochastic=cfg.stochastic, generator=generator, nonfinite="propagate")


def _sum_dequantize(recv: torch.Tensor, k: int, per: int, bits: int, group_size: int, inverse_hadamard: bool,
                    fused: str | None) -> torch.Tensor:
    """The last stage: fp32 ``(per,)``, the sum of the ``k`` received rows (inverse-Hadamard transformed)."""
    if fused:
        codes, scales = _wire_rows(recv, k, per, bits, group_size)
        out = torch.empty(per, dtype=torch.float32, device=recv.device)
        return kernels.dequantize_add(codes, scales, per, bits, group_size, out, copies=k,
                                      inverse_hadamard=inverse_hadamard, accumulate=False, backend=fused)
    out = dequantize(_from_wire(recv, k, per, bits, group_size)).view(k, per).sum(dim=0)
    return inverse_hadamard32(out) if inverse_hadamard else out


# ----------------------------------------------------------------------------------------------------------------
# Gradient reduce-scatter
# ----------------------------------------------------------------------------------------------------------------


def _check_flat(flat: torch.Tensor, topo: Topology, align: int) -> int:
    if not isinstance(flat, torch.Tensor) or flat.dim() != 1 or not flat.is_floating_point():
        raise InvalidInputError("the reduce-scatter input must be a 1-D floating-point tensor")
    if flat.numel() % (topo.world_size * align):
        raise InvalidInputError(f"length {flat.numel()} is not a multiple of world size x alignment "
                                f"({topo.world_size} x {align}); pad the flat buffer")
    return flat.numel() // topo.world_size


def reduce_scatter_plain(flat: torch.Tensor, topo: Topology, cfg: CommConfig, stats: CommStats | None = None,
                         name: str = "grad_reduce_scatter") -> torch.Tensor:
    """Sum of every rank's ``flat`` restricted to this rank's shard, by one reduce-scatter in ``cfg.grad_dtype``
    (with gloo, whose reduce-scatter is an all-reduce -- twice the bytes --, a ring of ``W - 1`` sends and adds:
    :func:`ring_reduce_scatter`).

    Args:
        flat: 1-D float tensor of ``W * S`` elements (the same length on every rank).

    Returns:
        fp32 ``(S,)``.

    Raises:
        InvalidInputError: ``flat`` is not 1-D floating point or its length is not a multiple of the world size.
    """
    s = _check_flat(flat, topo, 1)
    x = flat.to(torch_dtype(cfg.grad_dtype)).contiguous()
    if dist.get_backend() == "gloo":
        out = ring_reduce_scatter(x, topo.rank, topo.world_size)
    else:
        out = torch.empty(s, dtype=x.dtype, device=x.device)
        _collective("reduce_scatter_single", "reduce_scatter_tensor")(out, x, op=dist.ReduceOp.SUM)
    if stats is not None:
        _, intra, inter = _peers(None, topo)
        stats.record(name, bytes_per_peer=s * x.element_size(), elements_per_peer=s, intra_peers=intra,
                     inter_peers=inter)
    return out.to(torch.float32)


def ring_reduce_scatter(x: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Reduce-scatter over the ranks of the default group in a ring (the bandwidth-optimal algorithm NCCL runs; gloo
    implements ``reduce_scatter_tensor`` as an all-reduce, which sends twice as many bytes): in step ``k`` of
    ``world - 1``, rank ``r`` sends its partial sum of chunk ``r - k - 1`` to rank ``r + 1`` and adds its own values
    of chunk ``r - k - 2`` to the partial sum it receives from rank ``r - 1``. Each rank sends ``(world - 1) / world``
    of ``x``'s bytes, as the throughput model counts.

    Args:
        x: 1-D tensor of ``world * S`` elements, the same length on every rank.

    Returns:
        ``(S,)`` of ``x``'s dtype: the sum over the ranks of chunk ``rank`` (summed in ring order from rank
        ``rank + 1``).
    """
    chunks = x.view(world, -1)
    part = chunks[(rank - 1) % world].clone()
    for k in range(world - 1):
        recv = torch.empty_like(part)
        ops = [dist.P2POp(dist.isend, part, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        part = recv.add_(chunks[(rank - k - 2) % world])
    return part


def reduce_scatter_two_level(flat: torch.Tensor, topo: Topology, cfg: CommConfig, stats: CommStats | None = None,
                             generator: torch.Generator | None = None, name: str = "grad_reduce_scatter"
                             ) -> torch.Tensor:
    """Two-level quantized reduce-scatter (SDP4Bit, "two-level gradient smooth quantization": TLq,
    or TLq-HS with ``cfg.hadamard``).

    With ``M`` nodes of ``L`` ranks and shards of ``S`` elements: (1) optional Hadamard transform of every
    32-block; (2) the vector is reordered so that chunk ``j`` holds the ``M`` shards of the ranks with local
    rank ``j``, quantized to ``cfg.grad_bits_intra`` bits (groups of ``cfg.grad_group_size_intra``) and
    exchanged by an all-to-all inside the node; (3) the ``L`` received copies are dequantized and summed in
    fp32, re-quantized to ``cfg.grad_bits_inter`` bits and exchanged by an all-to-all across nodes; (4) the
    ``M`` received copies are dequantized, summed and inverse-transformed. One node: only step 2 (its sum is
    the result); one rank per node: only step 3.

    Args:
        flat: 1-D float tensor of ``W * S`` elements, ``S`` a multiple of ``cfg.grad_alignment``.
        generator: random source of the stochastic rounding (distinct per rank).

    Returns:
        fp32 ``(S,)``: this rank's shard of the sum. Each element is within one quantization bin of every
        quantization applied on its path (see ``docs/comm.md``) of the exact sum.

    Raises:
        InvalidInputError: bad input length or dtype.
    """
    s = _check_flat(flat, topo, cfg.grad_alignment)
    per_node, nodes = topo.ranks_per_node, topo.num_nodes
    x = flat.to(torch.float32)
    if topo.world_size == 1:  # nothing to exchange
        return inverse_hadamard32(hadamard32(x)) if cfg.hadamard else x
    fused = kernels.use_fused(cfg.kernels, x)
    first = (cfg.grad_bits_intra, cfg.grad_group_size_intra) if per_node > 1 else (cfg.grad_bits_inter,
                                                                                     cfg.grad_group_size_inter)
    fuse_hadamard = cfg.hadamard and fused and kernels.supports(*first, hadamard=True)
    if cfg.hadamard and not fuse_hadamard:
        x = hadamard32(x)
    if per_node > 1:
        swizzled = x.view(nodes, per_node, s).transpose(0, 1).reshape(-1)  # chunk j: shards of local rank j
        q = _quantize(swizzled, *first, cfg, generator, fused, fuse_hadamard)
        recv = _all_to_all_quantized(q, per_node, topo.intra_group, topo, stats, name)
        k, bits, group = per_node, cfg.grad_bits_intra, cfg.grad_group_size_intra
        if nodes > 1:  # this node's sum of the shards of every node's local rank j, re-quantized
            q = _sum_requantize(recv, per_node, nodes * s, cfg, generator, fused)
            recv = _all_to_all_quantized(q, nodes, topo.inter_group, topo, stats, name)
            k, bits, group = nodes, cfg.grad_bits_inter, cfg.grad_group_size_inter
    else:
        q = _quantize(x, *first, cfg, generator, fused, fuse_hadamard)
        recv = _all_to_all_quantized(q, nodes, topo.inter_group, topo, stats, name)
        k, bits, group = nodes, cfg.grad_bits_inter, cfg.grad_group_size_inter
    return _sum_dequantize(recv, k, s, bits, group, cfg.hadamard, fused)


def reduce_scatter(flat: torch.Tensor, topo: Topology, cfg: CommConfig, stats: CommStats | None = None,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The gradient reduce-scatter chosen by ``cfg.grad_mode`` (see the two functions above)."""
    if cfg.grad_mode == "plain":
        return reduce_scatter_plain(flat, topo, cfg, stats)
    return reduce_scatter_two_level(flat, topo, cfg, stats, generator)


# ----------------------------------------------------------------------------------------------------------------
# Weight all-gather
# ----------------------------------------------------------------------------------------------------------------


class WeightAllGather:
    """All-gather of the updated weight shards into every rank's replica, as ``cfg.weight_mode`` says.

    Args:
        cfg: the configuration (``weight_mode``, ``weight_bits``, ``weight_group_size``, ``param_dtype``).
        topo: this rank's topology.
        stats: where to count the bytes (name ``"weight_allgather"``), or ``None``.
        generator: random source of the stochastic rounding (distinct per rank).
    """

    name = "weight_allgather"

    def __init__(self, cfg: CommConfig, topo: Topology, stats: CommStats | None = None,
                 generator: torch.Generator | None = None) -> None:
        self.cfg, self.topo, self.stats, self.generator = cfg, topo, stats, generator

    def __call__(self, shard: torch.Tensor, replica: torch.Tensor) -> None:
        """Update ``replica`` in place from every rank's new ``shard``.

        Args:
            shard: fp32 ``(S,)``, this rank's updated (master) weights.
            replica: ``(W * S,)`` float tensor, the weights every forward uses; identical on all ranks before
                the call and bit-identical after it. Its values are rounded to ``cfg.param_dtype``.

        Raises:
            InvalidInputError: the lengths do not match.
        """
        w, s = self.topo.world_size, shard.numel()
        if replica.dim() != 1 or replica.numel() != w * s:
            raise InvalidInputError(f"replica has {replica.numel()} elements, expected {w} x {s}")
        cfg = self.cfg
        pdt = torch_dtype(cfg.param_dtype)
        if cfg.weight_mode == "plain":
            out = torch.empty(w * s, dtype=pdt, device=shard.device)
            all_gather_counted(out, shard.detach().to(pdt).contiguous(), None, self.topo, self.stats, self.name, s)
            replica.copy_(out)
            return
        mine = replica[self.topo.rank * s:(self.topo.rank + 1) * s]
        fused = kernels.use_fused(cfg.kernels, replica)
        if fused and kernels.supports(cfg.weight_bits, cfg.weight_group_size) and replica.is_contiguous():
            self._gather_fused(shard.detach(), mine, replica, pdt, fused)
            return
        new = shard.detach().to(pdt)
        if cfg.weight_mode == "qwd":
            payload = new.to(torch.float32) - mine.to(torch.float32)
        else:
            payload = new.to(torch.float32)
        deq = self._gather_quantized(payload)
        if cfg.weight_mode == "qwd":
            deq.add_(replica.to(torch.float32))
        replica.copy_(deq.to(pdt))

    def _gather_quantized(self, payload: torch.Tensor) -> torch.Tensor:
        cfg, w, s = self.cfg, self.topo.world_size, payload.numel()
        q = quantize(payload, cfg.weight_bits, cfg.weight_group_size, stochastic=cfg.stochastic,
                     generator=self.generator, nonfinite="propagate")
        out = self._all_gather(q)
        padded = q.scales.numel() * cfg.weight_group_size
        if padded * cfg.weight_bits % 8 == 0:  # every row's codes are whole bytes: dequantize all rows at once
            deq = dequantize(_from_wire(out, w, padded, cfg.weight_bits, cfg.weight_group_size)).view(w, padded)
            return deq[:, :s].reshape(-1)
        parts = [dequantize(_from_wire(row, 1, padded, cfg.weight_bits, cfg.weight_group_size))[:s]
                 for row in out.view(w, -1)]
        return torch.cat(parts)

    def _gather_fused(self, shard: torch.Tensor, mine: torch.Tensor, replica: torch.Tensor, pdt: torch.dtype,
                      backend: str) -> None:
        """The fused kernels' all-gather (of ``backend``): the shard rounded to ``pdt`` (minus ``mine`` for qWD)
        quantized in one pass; every received shard dequantized into (qWD: added to) ``replica`` in one pass."""
        cfg, w, s = self.cfg, self.topo.world_size, shard.numel()
        bits, group = cfg.weight_bits, cfg.weight_group_size
        qwd = cfg.weight_mode == "qwd"
        q = kernels.quantize(shard, bits, group, stochastic=cfg.stochastic, seed=self.generator,
                             subtract=mine if qwd else None, round_to=pdt, backend=backend)
        codes, scales = _wire_rows(self._all_gather(q), w, q.scales.numel() * group, bits, group)
        kernels.dequantize_add(codes, scales, s, bits, group, replica, accumulate=qwd, round_to=pdt, backend=backend)

    def _all_gather(self, q: QuantizedTensor) -> torch.Tensor:
        """Every rank's codes and scales of ``q``: uint8 ``(world * row_bytes,)``, rank ``r``'s row ``r``."""
        wire = _to_wire(q, 1).view(-1)
        out = torch.empty(self.topo.world_size * wire.numel(), dtype=torch.uint8, device=wire.device)
        all_gather_counted(out, wire, None, self.topo, self.stats, self.name, q.numel)
        return out
