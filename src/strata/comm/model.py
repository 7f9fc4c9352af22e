"""A throughput model of sharded data-parallel training with quantized collectives.

It projects one optimizer step's time from bandwidths and compute rates (all parameters of :class:`Cluster`
and :class:`Workload`) for any :class:`~strata.comm.config.CommConfig`, and the speedup of one configuration
over another; :func:`paper_setting` gives the setting of SDP4Bit's speed test (Jia et al., arXiv:2410.15526,
evaluation: GPT 6.7B on 128 GPUs, TP 4, micro-batch 1, global batch = DP size, sequence 2048; the released
speed scripts ``sample_scripts/speed/Exp1/6_7B_*.sh``).

Model (per step, per data-parallel group of ``D`` ranks, ``L = gpus_per_node / tp`` of them per node,
``M = D / L`` nodes, ``P = params / (tp * pp)`` parameters per rank, shard ``P / D``):

* compute: ``flops_per_token * tokens / (gpus * flops)``;
* a single-level collective (ring all-gather or reduce-scatter, NCCL style) of ``b`` bits per value: every
  node sends ``(D - 1) / D * P * b / 8`` bytes per DP group across its network links (``tp`` DP groups share a
  node's NICs) and every GPU about as much over NVLink; time = the slower of the two;
* the two-level all-to-all: intra-node stage ``(L - 1) / L * P * b_intra / 8`` bytes per GPU over NVLink,
  inter-node stage ``(M - 1) / M * P * b_inter / 8`` bytes per DP group per node; the stages add up, or with
  ``k`` pipeline chunks overlap to ``max + min / k``;
* quantization kernels: every value quantized, dequantized or Hadamard-transformed costs 4 bytes of fp32 at
  ``quant_gbps``;
* wire bits per value: ``bits + 32 / group_size`` for quantized data.

Communication does not overlap compute in this model (Megatron's distributed optimizer of the paper's
version gathers weights after the step and reduce-scatters after backward). What it leaves out is listed in
``docs/comm.md``: tensor-parallel all-reduces, latency terms, overlap, congestion and NCCL protocol
efficiency, pipeline bubbles, kernel launch overheads and optimizer time.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..errors import InvalidInputError
from .config import CommConfig

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Cluster:
    """Hardware rates (all one direction; GB = 1e9 bytes).

    Attributes:
        gpus: total GPUs.
        gpus_per_node: GPUs per node.
        intra_node_gbps: NVLink bandwidth per GPU, GB/s.
        inter_node_gbps: network bandwidth per node (all NICs together), GB/s.
        flops: sustained training FLOP/s per GPU (peak times model FLOPs utilisation).
        quant_gbps: fp32 GB/s a GPU's (de)quantization / Hadamard kernels process.
    """

    gpus: int = 128
    gpus_per_node: int = 8
    intra_node_gbps: float = 200.0
    inter_node_gbps: float = 400.0
    flops: float = 989e12 * 0.35
    quant_gbps: float = 1000.0

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if not v > 0:
                raise InvalidInputError(f"{k} must be positive, got {v!r}")
        if self.gpus % self.gpus_per_node:
            raise InvalidInputError("gpus must be a multiple of gpus_per_node")


@dataclass(frozen=True)
class Workload:
    """What one step computes and communicates.

    Attributes:
        params: model parameters.
        tokens_per_step: global batch in tokens.
        flops_per_token: training FLOPs per token (default ``6 * params``; :func:`paper_setting` adds attention).
        tensor_parallel, pipeline_parallel: model-parallel sizes (TP inside a node).
        pipeline_chunks: chunks of the two-level gradient all-to-all pipeline (SDP4Bit's
            ``--gradient-alltoall-pipeline``; 1 = stages one after the other).
    """

    params: float = 6.7e9
    tokens_per_step: float = 32 * 2048
    flops_per_token: float | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    pipeline_chunks: int = 1

    def __post_init__(self) -> None:
        if not (self.params > 0 and self.tokens_per_step > 0):
            raise InvalidInputError("params and tokens_per_step must be positive")
        if self.flops_per_token is not None and not self.flops_per_token > 0:
            raise InvalidInputError("flops_per_token must be positive")
        for k in ("tensor_parallel", "pipeline_parallel", "pipeline_chunks"):
            if not (isinstance(getattr(self, k), int) and getattr(self, k) >= 1):
                raise InvalidInputError(f"{k} must be an int >= 1")


@dataclass(frozen=True)
class StepTime:
    """Projected seconds per step: ``total = compute + weight_comm + grad_comm + quant``."""

    compute: float
    weight_comm: float
    grad_comm: float
    quant: float
    weight_bits: float
    grad_bits_intra: float
    grad_bits_inter: float

    @property
    def total(self) -> float:
        return self.compute + self.weight_comm + self.grad_comm + self.quant


def _geometry(cluster: Cluster, work: Workload) -> tuple[int, int, int, float]:
    tp, pp = work.tensor_parallel, work.pipeline_parallel
    if cluster.gpus_per_node % tp or cluster.gpus % (tp * pp):
        raise InvalidInputError("tensor_parallel must divide gpus_per_node and tp * pp must divide gpus")
    d = cluster.gpus // (tp * pp)
    per_node = cluster.gpus_per_node // tp
    if d % per_node:
        raise InvalidInputError("the data-parallel size is not a multiple of its ranks per node")
    return d, per_node, d // per_node, work.params / (tp * pp)


def wire_bits(config: CommConfig) -> tuple[float, float, float]:
    """(weight all-gather, intra-node gradient, inter-node gradient) bits per value of ``config``."""
    if config.weight_mode == "plain":
        w = 8.0 * _BYTES[config.param_dtype]
    else:
        w = config.weight_bits + 32.0 / config.weight_group_size
    if config.grad_mode == "plain":
        gi = ge = 8.0 * _BYTES[config.grad_dtype]
    else:
        gi = config.grad_bits_intra + 32.0 / config.grad_group_size_intra
        ge = config.grad_bits_inter + 32.0 / config.grad_group_size_inter
    return w, gi, ge


def step_time(cluster: Cluster, work: Workload, config: CommConfig) -> StepTime:
    """Projected time of one training step (see the module docstring for the model).

    Raises:
        InvalidInputError: inconsistent parallel sizes.
    """
    d, per_node, nodes, p = _geometry(cluster, work)
    tp = work.tensor_parallel
    fpt = work.flops_per_token or 6.0 * work.params
    compute = fpt * work.tokens_per_step / (cluster.gpus * cluster.flops)
    gb = 1e9
    w_bits, gi_bits, ge_bits = wire_bits(config)

    def single_level(bits: float) -> float:
        nvlink = (d - 1) / d * p * bits / 8 / (cluster.intra_node_gbps * gb)
        network = (d - 1) / d * p * bits / 8 * tp / (cluster.inter_node_gbps * gb) if nodes > 1 else 0.0
        return max(nvlink, network)

    weight_comm = single_level(w_bits)
    quant_values = 0.0
    if config.weight_mode != "plain":
        quant_values += p / d + p  # quantize the own shard, dequantize every shard
    if config.grad_mode == "plain":
        grad_comm = single_level(ge_bits)
    else:
        intra = (per_node - 1) / per_node * p * gi_bits / 8 / (cluster.intra_node_gbps * gb)
        inter = (nodes - 1) / nodes * p * ge_bits / 8 * tp / (cluster.inter_node_gbps * gb)
        k = work.pipeline_chunks
        grad_comm = max(intra, inter) + min(intra, inter) / k
        if per_node > 1 and nodes > 1:  # quantize P, dequantize L x P/L, requantize P/L, dequantize M x P/D
            quant_values += 2 * p + 2 * p / per_node
        else:  # single stage: quantize P, dequantize P
            quant_values += 2 * p
        if config.hadamard:
            quant_values += p + p / d
    quant = quant_values * 4 / (cluster.quant_gbps * gb)
    return StepTime(compute, weight_comm, grad_comm, quant, w_bits, gi_bits, ge_bits)


def speedup(cluster: Cluster, work: Workload, config: CommConfig, baseline: CommConfig | None = None) -> float:
    """``step_time(baseline).total / step_time(config).total`` (baseline: :class:`CommConfig` defaults)."""
    base = step_time(cluster, work, baseline or CommConfig())
    return base.total / step_time(cluster, work, config).total


CLUSTERS = {
    # H800 SXM: NVLink 400 GB/s bidirectional; 8 x 400 Gb/s InfiniBand = 3.2 Tb/s per node; 989 TFLOP/s dense bf16
    "h800": {"gpus_per_node": 8, "intra_node_gbps": 200.0, "inter_node_gbps": 400.0, "flops": 989e12 * 0.35},
    # A100 SXM: NVLink 600 GB/s bidirectional; 100 Gb/s Slingshot per node; 312 TFLOP/s dense bf16
    "a100": {"gpus_per_node": 4, "intra_node_gbps": 300.0, "inter_node_gbps": 12.5, "flops": 312e12 * 0.35},
}


def paper_setting(cluster: str = "h800", **cluster_overrides) -> tuple[Cluster, Workload]:
    """SDP4Bit's speed test with GPT 6.7B (32 layers, hidden 4096, sequence 2048, vocabulary 50257) on 128 GPUs:
    TP 4, micro-batch 1 and gradient accumulation 1 (global batch = data-parallel size = 32 sequences), 8 all-to-all
    pipeline chunks (the released ``sample_scripts/speed/Exp1/6_7B_QWG.sh``).

    ``cluster`` is ``"h800"`` (8 GPUs per node) or ``"a100"`` (4 per node). Their rates in :data:`CLUSTERS` are
    *nominal link speeds and peak FLOP/s at 35 % utilisation*, taken from vendor specifications and a secondary
    description of the paper's clusters (see ``docs/comm.md``): the model's bandwidths are effective ones, so
    override them (keyword arguments of :class:`Cluster`) to explore.

    Raises:
        InvalidInputError: unknown cluster name.
    """
    if cluster not in CLUSTERS:
        raise InvalidInputError(f"cluster must be one of {sorted(CLUSTERS)}, got {cluster!r}")
    layers, hidden, seq, vocab = 32, 4096, 2048, 50257
    params = 12 * layers * hidden**2 * (1 + 13 / (12 * hidden)) + (vocab + seq) * hidden
    fpt = 6 * params + 12 * layers * hidden * seq  # weights (fwd + bwd) plus attention scores
    work = Workload(params=params, tokens_per_step=32 * seq, flops_per_token=fpt, tensor_parallel=4,
                    pipeline_parallel=1, pipeline_chunks=8)
    return replace(Cluster(**CLUSTERS[cluster]), **cluster_overrides), work
