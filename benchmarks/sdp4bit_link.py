"""Measure SDP4Bit's training speedup over a bandwidth-limited link between two simulated nodes, beside the
projection of ``strata.comm.model`` for the same measured rates.

Setup (Linux, root: network namespaces and ``tc``):

* two network namespaces ``strata-sdp4bit-n0`` / ``-n1`` (the nodes), joined by one veth pair
  ``sdp4bit0`` (10.77.0.1/24, node 0) - ``sdp4bit1`` (10.77.0.2/24, node 1), loopback up in each;
* a token-bucket filter on *both* veth ends (egress, so each direction is limited):
  ``tc qdisc replace dev <veth> root tbf rate R burst B latency 20ms`` with ``B = max(256 KiB, R x 2 ms)``
  (a bucket of at least 2 ms of traffic: one 64 KiB GSO packet always fits, and the 10 Gbit/s limit is
  not starved by timer granularity) and a queue of 20 ms of traffic beyond the bucket;
* 2 ranks per node, each started inside its node's namespace with ``ip netns exec``, ``torch.distributed``
  with the gloo backend, ``MASTER_ADDR`` = node 0's veth address, ``GLOO_SOCKET_IFNAME`` = the node's veth.
  Gloo then binds every rank to its node's veth address; traffic between the two ranks of one node goes to
  a local address, which Linux routes over the namespace's loopback (``ip route get 10.77.0.1`` in node 0 says
  ``dev lo``), not through the rate-limited veth. The benchmark checks this: it records the veth's transmitted
  bytes during the intra-node bandwidth test (expected ~0) and during every training step.

Per link rate (one launch of the 4 workers each; the namespaces are kept, ``tc qdisc replace`` changes the rate):

1. bandwidth, iperf-style: a gloo ``send``/``recv`` of a large fp32 tensor from rank 0 (node 0) to rank 2
   (node 1) - the inter-node link - and from rank 0 to rank 1 (intra-node), median of 3 transfers each;
2. the quantization kernels each arm runs (strata.comm's fused kernels: numba on the CPU; :func:`kernel_ops`)
   timed in all 4 ranks at once (the ranks share this machine's cores as they do in training);
3. for each model and arm (``baseline``, ``qwz_qgz`` = ZeRO++ qwZ + qgZ, ``sdp4bit`` = qWD + TLq-HS): the
   ``ShardedOptimizer`` training loop of ``sdp4bit_training.py`` on the GPT of ``train_tiny_gpt.py`` (no
   gradient clipping, constant learning rate: no extra collectives), ``--warmup`` steps then ``--steps`` timed
   steps: per step the forward + backward time, the gradient reduce-scatter (``reduce_gradients``) and the
   optimizer step with the weight all-gather (``step``), and the veth bytes node 0 transmitted; afterwards the
   optimizer update alone (``sdp.optimizer.step()`` on zero gradients, no communication).

Models: ``tiny`` (the defaults of ``sdp4bit_training.py``: 4 layers, width 128, context 64, global batch 32
sequences) and ``large`` (4 layers, width 512, context 64, global batch 4 sequences: 12.7 M parameters and
little compute per step, so that at 1 Gbit/s the gradients and weights on the wire dominate the step).

Model projection (``strata.comm.model``; :func:`projection`): ``Cluster(gpus=4, gpus_per_node=2,
inter_node_gbps = measured inter-node GB/s, intra_node_gbps = measured intra-node GB/s, flops such that the
compute term equals the measured compute, quant_gbps = the measured kernel rates combined per arm)``,
``Workload(params = model parameters, tokens_per_step = global tokens, pipeline_chunks=1)`` (this
implementation runs the two all-to-all stages one after the other). Compute = forward + backward + the
optimizer update (the slowest rank's median). The model has no latency, no optimizer-time and no memory-copy
terms (flattening the gradients, dtype casts, the qWD difference): these show up as the gap between projected
and measured step times.

Outputs (written atomically to ``--out``, default ``benchmarks/results``): ``sdp4bit_link.json`` and
``sdp4bit_link.md``. Run from the repository root as root (about 4 minutes on 2 cores with the defaults; the
committed results add ``--rates 0.25gbit 1gbit 2.5gbit 10gbit --steps 8``, about 5 minutes)::

    sudo .venv/bin/python benchmarks/sdp4bit_link.py
    sudo .venv/bin/python benchmarks/sdp4bit_link.py --quick --out scratch/link     # one rate, 3 steps

The namespaces are removed at the end, on Ctrl-C and on errors; a run that was killed outright leaves them, and
the next run removes them (and the processes left inside them) first.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine  # noqa: E402
from benchmarks.sdp4bit_training import parse_args as training_defaults  # noqa: E402

from strata.atomic import atomic_write  # noqa: E402
from strata.comm import CommConfig  # noqa: E402
from strata.comm.model import Cluster, Workload, step_time, wire_bits  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results"
NAMESPACES = ("strata-sdp4bit-n0", "strata-sdp4bit-n1")
VETHS = ("sdp4bit0", "sdp4bit1")
ADDRS = ("10.77.0.1", "10.77.0.2")
PORT = 29731
RANKS_PER_NODE = 2
WORLD = 2 * RANKS_PER_NODE
ARMS = ("baseline", "qwz_qgz", "sdp4bit")
TBF_LATENCY_MS = 20
TBF_MIN_BURST = 256 * 1024
TBF_BURST_S = 0.002
_TINY = training_defaults([])
#: The models: GPT shape and global batch in sequences (``tiny`` is sdp4bit_training.py's default setup).
MODELS = {
    "tiny": {k: getattr(_TINY, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size")},
    "large": {"n_layer": 4, "n_head": 8, "n_embd": 512, "block_size": 64, "batch_size": 4},
}


# ----------------------------------------------------------------------------------------------------------------
# pure helpers (unit tested)
# ----------------------------------------------------------------------------------------------------------------

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate(text: str) -> float:
    """A link rate such as ``"1gbit"``, ``"2.5Gbit"``, ``"500mbit"`` or ``"1e9"`` (bits per second) -> bits/s.

    Raises:
        ValueError: not a positive rate in bit, kbit, mbit or gbit.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmg]?)(?:bit)?(?:/s|ps)?\s*", text.lower())
    if not m:
        raise ValueError(f"not a link rate: {text!r} (e.g. 1gbit, 2.5gbit, 500mbit)")
    bits = float(m.group(1)) * _UNITS[m.group(2)]
    if not bits > 0:
        raise ValueError(f"the link rate must be positive: {text!r}")
    return bits


def tbf_params(rate_bits: float) -> dict:
    """tc tbf arguments for ``rate_bits`` bits/s: ``rate`` (bit/s), ``burst`` (bytes: at least 256 KiB and 2 ms of
    traffic) and ``latency`` (ms of queue beyond the bucket)."""
    burst = max(TBF_MIN_BURST, int(rate_bits / 8 * TBF_BURST_S))
    return {"rate": f"{int(rate_bits)}bit", "burst": burst, "latency": f"{TBF_LATENCY_MS}ms"}


def model_quant_values(config: CommConfig, params: float, world: int, per_node: int) -> dict[str, float]:
    """Values per rank per step that ``strata.comm.model.step_time`` charges to the quantization kernels,
    by the unfused operation the model counts (names of ``comm_quant_throughput.operations``):
    weights: quantize the own shard ``P/D``, dequantize ``P``; two-level gradients: quantize ``P``,
    dequantize ``P``, requantize ``P/L``, dequantize ``P/L``; Hadamard: ``P`` forward, ``P/D`` inverse."""
    p, d, ell = float(params), world, per_node
    out: dict[str, float] = {}

    def add(op: str, n: float) -> None:
        out[op] = out.get(op, 0.0) + n

    if config.weight_mode != "plain":
        if config.weight_bits == 4:
            add("quantize int4 g2048 stochastic (qWD)", p / d)
            add("dequantize int4 g2048", p)
        else:  # int8 weights (qwZ): the int8 group-128 kernels stand in (no int8 g2048 timing)
            add("quantize int8 g128 stochastic", p / d)
            add("dequantize int8 g128", p)
    if config.grad_mode != "plain":
        first = f"int{config.grad_bits_intra} g128"
        add(f"quantize {first} stochastic", p)
        add(f"dequantize {first}", p)
        if ell > 1 and d // ell > 1:
            second = f"int{config.grad_bits_inter} g128"
            add(f"quantize {second} stochastic", p / ell)
            add(f"dequantize {second}", p / ell)
        if config.hadamard:
            add("hadamard32 forward", p)
            add("hadamard32 inverse", p / d)
    return out


def kernels_run(config: CommConfig, params: float, world: int, per_node: int) -> list[tuple[str, float, str, dict]]:
    """``(name, input values per rank per step, kind, layout)`` of each quantization kernel ``config`` runs with
    strata.comm's fused kernels: the weight all-gather quantizes the own shard ``P/D`` (``"quantize"``) and
    dequantizes every shard into the replica (``P``, ``"receive"``); the two-level reduce-scatter quantizes the whole
    vector ``P`` (with the Hadamard transform), sums the ``L`` received intra-node copies of ``P/L`` values into a
    re-quantization (``P``, ``"requantize"``, with more than one node), and sums the received copies of the own shard
    (``P/L`` with more than one node, ``"sum"``). ``layout`` holds the kernel's bits, group sizes and options."""
    p, d, ell = float(params), world, per_node
    nodes = d // ell
    out = []
    if config.weight_mode != "plain":
        b, g, qwd = config.weight_bits, config.weight_group_size, config.weight_mode == "qwd"
        out.append((f"weights: {'qWD difference + ' if qwd else ''}quantize int{b} g{g}", p / d, "quantize",
                    dict(bits=b, group=g, qwd=qwd, hadamard=False)))
        out.append((f"weights: dequantize int{b} g{g} {'+ add ' if qwd else ''}into the replica", p, "receive",
                    dict(bits=b, group=g, add=qwd)))
    if config.grad_mode != "plain":
        intra = (config.grad_bits_intra, config.grad_group_size_intra)
        inter = (config.grad_bits_inter, config.grad_group_size_inter)
        first = intra if ell > 1 else inter
        h = "hadamard + " if config.hadamard else ""
        out.append((f"grads: {h}quantize int{first[0]} g{first[1]}", p, "quantize",
                    dict(bits=first[0], group=first[1], qwd=False, hadamard=config.hadamard)))
        last, copies = (first, ell) if nodes == 1 else (inter, nodes)
        if ell > 1 and nodes > 1:
            out.append((f"grads: {ell}x dequantize int{intra[0]} g{intra[1]} + sum + quantize int{inter[0]} "
                        f"g{inter[1]}", p, "requantize", dict(copies=ell, rows=intra, out=inter)))
        inverse = " + inverse hadamard" if config.hadamard else ""
        out.append((f"grads: {copies}x dequantize int{last[0]} g{last[1]} + sum{inverse}", copies * p / d, "sum",
                    dict(copies=copies, rows=last, inverse=config.hadamard)))
    return out


def kernel_values(config: CommConfig, params: float, world: int, per_node: int) -> dict[str, float]:
    """Input values per rank per step of each kernel of :func:`kernels_run`, by name."""
    return {name: values for name, values, _, _ in kernels_run(config, params, world, per_node)}


def kernel_ops(configs, x: torch.Tensor, gen: torch.Generator, per_node: int, world: int) -> dict:
    """``{name: callable}``: each kernel of :func:`kernels_run` for ``configs``, by strata.comm's fused kernels
    (``strata.comm.kernels``: numba on the CPU, Triton on a GPU), on ``x.numel()`` input values (a multiple of 4096)
    on ``x``'s device; ``gen`` is a CPU generator."""
    from strata.comm import kernels

    n = x.numel()
    replica = (x + 1e-3 * torch.randn(n, generator=gen).to(x.device)).to(torch.bfloat16)
    out: dict = {}

    def quantized_rows(copies: int, bits: int, group: int):
        qs = [kernels.quantize(row, bits, group, seed=gen) for row in x.view(copies, -1)]
        return torch.stack([q.codes for q in qs]), torch.stack([q.scales for q in qs])

    for cfg in configs:
        for name, _, kind, k in kernels_run(cfg, n, world, per_node):
            if name in out:
                continue
            if kind == "quantize":
                out[name] = partial(kernels.quantize, x, k["bits"], k["group"], seed=gen, hadamard=k["hadamard"],
                                    subtract=replica if k["qwd"] else None,
                                    round_to=torch.bfloat16 if name.startswith("weights") else None)
            elif kind == "receive":
                out[name] = partial(kernels.dequantize_add, *quantized_rows(1, k["bits"], k["group"]), n, k["bits"],
                                    k["group"], replica, accumulate=k["add"], round_to=torch.bfloat16)
            elif kind == "requantize":
                c = k["copies"]
                out[name] = partial(kernels.requantize_sum, *quantized_rows(c, *k["rows"]), n // c, *k["rows"],
                                    *k["out"], seed=gen)
            else:
                c = k["copies"]
                out[name] = partial(kernels.dequantize_add, *quantized_rows(c, *k["rows"]), n // c, *k["rows"],
                                    torch.empty(n // c, device=x.device), copies=c, accumulate=False,
                                    inverse_hadamard=k["inverse"])
    return out


def effective_quant_gbps(config: CommConfig, params: float, world: int, per_node: int,
                         kernel_gbps: dict[str, float]) -> float | None:
    """The single ``Cluster.quant_gbps`` that makes the model's quantization time (``4`` bytes times the values of
    :func:`model_quant_values`, over ``quant_gbps``) equal to the time of the kernels ``config`` runs
    (:func:`kernel_values`) at the measured rates ``kernel_gbps`` (GB/s of fp32 input). ``None`` when the
    configuration quantizes nothing.

    Raises:
        KeyError: a kernel the configuration needs has no measured rate.
    """
    counts = kernel_values(config, params, world, per_node)
    if not counts:
        return None
    seconds = sum(4 * v / (kernel_gbps[op] * 1e9) for op, v in counts.items())
    return 4 * sum(model_quant_values(config, params, world, per_node).values()) / seconds / 1e9


def projection(*, params: float, tokens_per_step: float, compute_s: float, inter_gbps: float, intra_gbps: float,
               kernel_gbps: dict[str, float], arms=ARMS, world: int = WORLD,
               per_node: int = RANKS_PER_NODE) -> dict[str, dict]:
    """Projected step time of each arm (``strata.comm.model.step_time``) for measured quantities.

    Args:
        params: model parameters (``P``); tokens_per_step: global tokens per step.
        compute_s: measured compute seconds per step (the model's compute term is set to exactly this).
        inter_gbps: measured inter-node bandwidth, GB/s one direction; intra_gbps: measured intra-node GB/s.
        kernel_gbps: measured quantization kernel rates (GB/s of fp32 data) by kernel name.

    Returns:
        ``{arm: {"step_s", "compute_s", "weight_comm_s", "grad_comm_s", "quant_s", "quant_gbps",
        "speedup"}}`` with the speedup over ``arms[0]`` (the baseline).
    """
    fpt = 6.0 * params
    flops = fpt * tokens_per_step / (world * compute_s)
    work = Workload(params=params, tokens_per_step=tokens_per_step, flops_per_token=fpt, pipeline_chunks=1)
    out = {}
    for arm in arms:
        cfg = CommConfig.arm(arm, ranks_per_node=per_node)
        q = effective_quant_gbps(cfg, params, world, per_node, kernel_gbps)
        cluster = Cluster(gpus=world, gpus_per_node=per_node, intra_node_gbps=intra_gbps, inter_node_gbps=inter_gbps,
                          flops=flops, quant_gbps=q or 1.0)
        t = step_time(cluster, work, cfg)
        out[arm] = {"step_s": t.total, "compute_s": t.compute, "weight_comm_s": t.weight_comm,
                    "grad_comm_s": t.grad_comm, "quant_s": t.quant, "quant_gbps": q,
                    "wire_bits": list(wire_bits(cfg))}
    base = out[arms[0]]["step_s"]
    for r in out.values():
        r["speedup"] = base / r["step_s"]
    return out


def model_inter_bytes(arm: str, params: float, world: int = WORLD, per_node: int = RANKS_PER_NODE) -> float:
    """Bytes per step one node sends to the other node in the model's accounting (weights + gradients)."""
    cfg = CommConfig.arm(arm, ranks_per_node=per_node)
    w, _, ge = wire_bits(cfg)
    nodes = world // per_node
    weights = (world - 1) / world * params * w / 8
    grads = ((world - 1) / world if cfg.grad_mode == "plain" else (nodes - 1) / nodes) * params * ge / 8
    return weights + grads


def spread(values: list[float]) -> dict:
    """Median, min, max and the values (seconds), rounded."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": [round(v, 5) for v in values]}


# ----------------------------------------------------------------------------------------------------------------
# worker (one rank, inside its node's namespace)
# ----------------------------------------------------------------------------------------------------------------


def _tx_bytes(ifname: str) -> int:
    """Bytes this namespace's ``ifname`` transmitted so far (``ip netns exec`` mounts the namespace's sysfs)."""
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_bytes").read_text())


def _bandwidth(src: int, dst: int, nbytes: int, rank: int, ifname: str, repeats: int = 3) -> dict | None:
    """One-way gloo send/recv of ``nbytes`` from ``src`` to ``dst``: GB/s (median), and the bytes the sender's
    veth transmitted per transfer. Collective (every rank calls it); the result on ``src``."""
    import torch.distributed as dist

    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    times, veth = [], []
    for k in range(repeats + 1):  # the first transfer warms the connection up
        dist.barrier()
        tx0, t0 = _tx_bytes(ifname), time.perf_counter()
        if rank == src:
            dist.send(buf, dst)
            dist.recv(buf[:1], dst)  # acknowledgement: the receiver has every byte
        elif rank == dst:
            dist.recv(buf, src)
            dist.send(buf[:1], src)
        dt, tx = time.perf_counter() - t0, _tx_bytes(ifname) - tx0
        if k:
            times.append(dt)
            veth.append(tx)
    if rank != src:
        return None
    t = statistics.median(times)
    return {"gbps": nbytes / t / 1e9, "gbit_per_s": 8 * nbytes / t / 1e9, "bytes": nbytes,
            "seconds": [round(v, 5) for v in times], "sender_veth_tx_bytes": veth}


def _quant_rates(numel: int, repeats: int, arms) -> dict[str, float]:
    """GB/s of fp32 input of every kernel :func:`kernel_values` lists for ``arms``, timed here."""
    from benchmarks.common import timed

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(numel, generator=gen) * 0.02
    rates = {}
    configs = [CommConfig.arm(a, ranks_per_node=RANKS_PER_NODE) for a in arms]
    for name, op in kernel_ops(configs, x, gen, RANKS_PER_NODE, WORLD).items():
        op()
        t, _ = timed(op, repeats)
        rates[name] = 4 * numel / t / 1e9
    return rates


def _train_arm(spec: dict, model_name: str, arm: str, rank: int, topo, ids, vocab: int, ifname: str) -> dict:
    import torch.distributed as dist
    from benchmarks.train_tiny_gpt import GPT, GPTConfig, configure_optimizer, get_batch

    from strata.comm import ShardedOptimizer

    m = MODELS[model_name]
    cfg = GPTConfig(vocab_size=vocab, block_size=m["block_size"], n_layer=m["n_layer"], n_head=m["n_head"],
                    n_embd=m["n_embd"])
    torch.manual_seed(spec["seed"])
    model = GPT(cfg)
    comm = CommConfig.arm(arm, ranks_per_node=RANKS_PER_NODE)
    sdp = ShardedOptimizer(model, configure_optimizer(model, lr=spec["lr"]), comm, topology=topo, seed=spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    per_rank = m["batch_size"] // WORLD
    rows = []
    for step in range(spec["warmup"] + spec["steps"]):
        x, y = get_batch(ids, m["batch_size"], m["block_size"], gen)
        tx0 = _tx_bytes(ifname)
        t0 = time.perf_counter()
        _, loss = model(x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank])
        sdp.zero_grad()
        loss.backward()
        t1 = time.perf_counter()
        sdp.reduce_gradients()
        t2 = time.perf_counter()
        sdp.step()
        t3 = time.perf_counter()
        if step >= spec["warmup"]:
            rows.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2, _tx_bytes(ifname) - tx0))
    # the optimizer update alone (no communication): zero gradients on this rank's fragments
    opt_times = []
    for _ in range(3):
        for frag, _, _ in sdp._frag_ranges:
            frag.grad = torch.zeros_like(frag)
        t0 = time.perf_counter()
        sdp.optimizer.step()
        opt_times.append(time.perf_counter() - t0)
    dist.barrier()
    col = list(zip(*rows))
    return {"step_s": list(col[0]), "fwd_bwd_s": list(col[1]), "reduce_scatter_s": list(col[2]),
            "optimizer_allgather_s": list(col[3]), "veth_tx_bytes": list(col[4]),
            "optimizer_only_s": statistics.median(opt_times), "params": sdp.numel, "padded_params": sdp.padded_numel,
            "tokens_per_step": m["batch_size"] * m["block_size"], "final_loss": float(loss)}


def worker(spec_path: str, rank: int) -> None:
    import torch.distributed as dist
    from benchmarks.train_tiny_gpt import load_corpus

    from strata.comm import build_topology

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    node = rank // RANKS_PER_NODE
    ifname = VETHS[node]
    dist.init_process_group("gloo", init_method=f"tcp://{ADDRS[0]}:{spec['port']}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=spec["collective_timeout"]))
    try:
        topo = build_topology(RANKS_PER_NODE)
        result: dict = {"rank": rank}
        result["inter"] = _bandwidth(0, RANKS_PER_NODE, spec["inter_bytes"], rank, ifname)
        result["intra"] = _bandwidth(0, 1, spec["intra_bytes"], rank, ifname)
        dist.barrier()
        result["quant_gbps"] = _quant_rates(spec["quant_numel"], spec["quant_repeats"], spec["arms"])
        dist.barrier()
        train_ids, _, vocab = load_corpus(spec["data"])
        result["runs"] = {}
        for model_name in spec["models"]:
            for arm in spec["arms"]:
                result["runs"][f"{model_name}/{arm}"] = _train_arm(spec, model_name, arm, rank, topo, train_ids,
                                                                   len(vocab), ifname)
        gathered = [None] * WORLD
        dist.all_gather_object(gathered, result)
        if rank == 0:
            atomic_write(spec["result"], json.dumps(gathered) + "\n")
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------------
# namespaces and links (driver, root)
# ----------------------------------------------------------------------------------------------------------------


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30, check=check)


def remove_namespaces() -> None:
    """Remove the benchmark's namespaces (and the veth pair with them), ending the processes left inside them
    by an earlier run first."""
    existing = _run("ip", "netns", "list", check=False).stdout
    for ns in NAMESPACES:
        if not re.search(rf"^{re.escape(ns)}\b", existing, re.M):
            continue
        pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        _run("ip", "netns", "del", ns, check=False)


def create_namespaces() -> None:
    remove_namespaces()
    for ns in NAMESPACES:
        _run("ip", "netns", "add", ns)
    _run("ip", "link", "add", VETHS[0], "netns", NAMESPACES[0], "type", "veth", "peer", "name", VETHS[1],
         "netns", NAMESPACES[1])
    for ns, veth, addr in zip(NAMESPACES, VETHS, ADDRS):
        _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
        _run("ip", "-n", ns, "link", "set", veth, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")


def set_rate(rate_bits: float) -> dict:
    """Rate-limit both veth ends (egress) with tbf; the tc arguments used."""
    p = tbf_params(rate_bits)
    for ns, veth in zip(NAMESPACES, VETHS):
        _run("tc", "-n", ns, "qdisc", "replace", "dev", veth, "root", "tbf", "rate", p["rate"], "burst",
             str(p["burst"]), "latency", p["latency"])
    return p


def qdisc_stats() -> list[str]:
    return [_run("tc", "-n", ns, "-s", "qdisc", "show", "dev", veth, check=False).stdout.strip()
            for ns, veth in zip(NAMESPACES, VETHS)]


def launch(spec: dict, workdir: Path, timeout: float) -> list[dict]:
    """Start the 4 ranks in their namespaces, wait at most ``timeout`` s, return every rank's result."""
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "MASTER_ADDR": ADDRS[0], "MASTER_PORT": str(spec["port"]), "OMP_NUM_THREADS":
           str(spec["threads"]), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    procs = []
    try:
        for rank in range(WORLD):
            node = rank // RANKS_PER_NODE
            cmd = ["ip", "netns", "exec", NAMESPACES[node], sys.executable, str(Path(__file__).resolve()),
                   "--worker", str(spec_path), str(rank)]
            log = open(workdir / f"rank{rank}.log", "w")
            procs.append(subprocess.Popen(cmd, env={**env, "GLOO_SOCKET_IFNAME": VETHS[node]}, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
        deadline = time.monotonic() + timeout
        for rank, p in enumerate(procs):
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            if rc:
                log = (workdir / f"rank{rank}.log").read_text()[-3000:]
                raise RuntimeError(f"rank {rank} exited with {rc}:\n{log}")
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"the ranks did not finish in {timeout:.0f} s:\n"
                           f"{(workdir / 'rank0.log').read_text()[-3000:]}") from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    return json.loads(Path(spec["result"]).read_text())


# ----------------------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------------------


#: Kernel rate (GB/s of fp32 input) of the second projection: the fused GPU kernels' target on an H200 (30 % of
#: its device-to-device copy bandwidth), what the same link and compute would give with GPU-class kernels.
GPU_KERNEL_GBPS = 1300.0


def summarize(rate_bits: float, tbf: dict, ranks: list[dict], qdisc: list[str]) -> dict:
    r0 = ranks[0]
    inter, intra = r0["inter"], r0["intra"]
    # kernel rates: the median over the ranks, which ran them at the same time
    kernels = {op: statistics.median(r["quant_gbps"][op] for r in ranks) for op in r0["quant_gbps"]}
    entry = {"rate_limit_gbit": rate_bits / 1e9, "tbf": tbf, "inter_node": inter, "intra_node": intra,
             "quant_kernels_gbps": {k: round(v, 4) for k, v in kernels.items()}, "models": {}, "qdisc": qdisc}
    models = sorted({k.split("/")[0] for k in r0["runs"]}, key=list(MODELS).index)
    for name in models:
        arms = [k.split("/")[1] for k in r0["runs"] if k.startswith(name + "/")]
        runs = {arm: r0["runs"][f"{name}/{arm}"] for arm in arms}
        # compute = forward + backward + optimizer update; the slowest rank's medians, median over the arms
        compute = statistics.median(
            max(statistics.median(r["runs"][f"{name}/{arm}"]["fwd_bwd_s"]) + r["runs"][f"{name}/{arm}"]
                ["optimizer_only_s"] for r in ranks) for arm in arms)
        first = runs[arms[0]]
        proj = projection(params=first["params"], tokens_per_step=first["tokens_per_step"], compute_s=compute,
                          inter_gbps=inter["gbps"], intra_gbps=intra["gbps"], kernel_gbps=kernels, arms=arms)
        fast = projection(params=first["params"], tokens_per_step=first["tokens_per_step"], compute_s=compute,
                          inter_gbps=inter["gbps"], intra_gbps=intra["gbps"], arms=arms,
                          kernel_gbps=dict.fromkeys(kernels, GPU_KERNEL_GBPS))
        base = statistics.median(runs[arms[0]]["step_s"])
        table = {}
        for arm, run in runs.items():
            med = statistics.median(run["step_s"])
            table[arm] = {
                "step_s": spread(run["step_s"]),
                "tokens_per_s": run["tokens_per_step"] / med,
                "speedup": base / med,
                "fwd_bwd_s": statistics.median(run["fwd_bwd_s"]),
                "reduce_scatter_s": statistics.median(run["reduce_scatter_s"]),
                "optimizer_allgather_s": statistics.median(run["optimizer_allgather_s"]),
                "optimizer_only_s": run["optimizer_only_s"],
                "node0_veth_tx_bytes_per_step": statistics.median(run["veth_tx_bytes"]),
                "model_inter_bytes_per_step": model_inter_bytes(arm, run["params"]),
                "model": proj[arm],
                "speedup_measured_over_projected": (base / med) / proj[arm]["speedup"],
                "projected_speedup_gpu_kernels": fast[arm]["speedup"],
                "step_measured_over_projected": med / proj[arm]["step_s"],
                "final_loss": run["final_loss"],
            }
        entry["models"][name] = {"params": first["params"], "tokens_per_step": first["tokens_per_step"],
                                 "compute_s": compute, "arms": table}
    return entry


def _rows(report: dict):
    """``(rate entry, model name, model entry, arm, arm entry)`` of every row of the report, in order."""
    for e in report["rates"]:
        for name, m in e["models"].items():
            for arm, a in m["arms"].items():
                yield e, name, m, arm, a


def markdown(report: dict) -> str:
    s = report["setup"]
    lines = [f"SDP4Bit over a rate-limited link: 2 network namespaces x {RANKS_PER_NODE} gloo ranks, "
             f"{s['threads_per_rank']} torch thread(s) per rank, {s['machine']}, torch {s['torch']}; "
             f"{s['steps']} timed steps after {s['warmup']} warm-up steps per arm; step time median (min-max).", "",
             "| link limit | measured inter-node | intra-node | model | arm | step ms | tokens/s | speedup | "
             "projected step ms | projected speedup | measured / projected speedup | "
             f"projected speedup, kernels at {GPU_KERNEL_GBPS:g} GB/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e, name, m, arm, a in _rows(report):
        st = a["step_s"]
        lines.append(
            f"| {e['rate_limit_gbit']:g} Gbit/s | {e['inter_node']['gbit_per_s']:.2f} Gbit/s | "
            f"{e['intra_node']['gbps']:.2f} GB/s | {name} ({m['params'] / 1e6:.1f} M) | {arm} | "
            f"{1e3 * st['median']:.0f} ({1e3 * st['min']:.0f}-{1e3 * st['max']:.0f}) | "
            f"{a['tokens_per_s']:.0f} | {a['speedup']:.2f}x | {1e3 * a['model']['step_s']:.0f} | "
            f"{a['model']['speedup']:.2f}x | {a['speedup_measured_over_projected']:.2f} | "
            f"{a['projected_speedup_gpu_kernels']:.2f}x |")
    lines += ["", "Where the time goes (medians, ms per step; node-0 veth bytes per step vs the model's inter-node "
              "bytes):", "",
              "| link limit | model | arm | fwd+bwd | grad reduce-scatter | optimizer + weight all-gather | "
              "optimizer alone | model: compute / weights / grads / quant | veth MB/step | model MB/step |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for e, name, _, arm, a in _rows(report):
        p = a["model"]
        lines.append(
            f"| {e['rate_limit_gbit']:g} Gbit/s | {name} | {arm} | {1e3 * a['fwd_bwd_s']:.0f} | "
            f"{1e3 * a['reduce_scatter_s']:.0f} | {1e3 * a['optimizer_allgather_s']:.0f} | "
            f"{1e3 * a['optimizer_only_s']:.0f} | {1e3 * p['compute_s']:.0f} / {1e3 * p['weight_comm_s']:.0f}"
            f" / {1e3 * p['grad_comm_s']:.0f} / {1e3 * p['quant_s']:.0f} | "
            f"{a['node0_veth_tx_bytes_per_step'] / 1e6:.2f} | {a['model_inter_bytes_per_step'] / 1e6:.2f} |")
    lines += ["", "Intra-node traffic check: bytes node 0's veth sent during the intra-node bandwidth test "
              "(rank 0 -> rank 1, per transfer): " + "; ".join(
                  f"{e['rate_limit_gbit']:g} Gbit/s: {e['intra_node']['sender_veth_tx_bytes']}"
                  for e in report["rates"])]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rates", nargs="+", default=["1gbit", "2.5gbit", "10gbit"], type=parse_rate,
                   help="link rate limits (default: 1gbit 2.5gbit 10gbit)")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="(default: all)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), help="(default: all; the first is "
                   "the speedup's reference)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per arm (default: %(default)s)")
    p.add_argument("--steps", type=int, default=6, help="timed steps per arm (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default: %(default)s)")
    p.add_argument("--data", type=Path, default=None, help="character corpus (default: train_tiny_gpt's)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per link rate (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="1 Gbit/s only, 1 warm-up and 3 timed steps")
    p.add_argument("--worker", nargs=2, metavar=("SPEC", "RANK"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rates, args.warmup, args.steps = [1e9], 1, 3
    if args.warmup < 0 or args.steps < 1 or args.threads < 1 or args.timeout <= 0:
        p.error("--warmup >= 0, --steps >= 1, --threads >= 1 and --timeout > 0")
    return args


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return {}
    from benchmarks.train_tiny_gpt import DEFAULT_DATA

    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark creates network namespaces and tc rate limits")
    args.out.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    data = args.data or DEFAULT_DATA
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a shell's background job starts with it ignored
        signal.signal(sig, _interrupt)
    entries = []
    t_start = time.perf_counter()
    try:
        create_namespaces()
        with tempfile.TemporaryDirectory() as tmp:
            for i, rate in enumerate(args.rates):
                tbf = set_rate(rate)
                spec = {"port": PORT + i, "threads": args.threads, "seed": 1234, "lr": 1e-3, "data": str(data),
                        "models": args.models, "arms": args.arms, "warmup": args.warmup, "steps": args.steps,
                        "inter_bytes": int(min(256e6, max(32e6, rate / 8 * 0.5))), "intra_bytes": int(128e6),
                        "quant_numel": 1 << 22, "quant_repeats": 3, "collective_timeout": 120,
                        "result": str(Path(tmp) / f"result{i}.json")}
                t0 = time.perf_counter()
                ranks = launch(spec, Path(tmp), args.timeout)
                entries.append(summarize(rate, tbf, ranks, qdisc_stats()))
                e = entries[-1]
                print(f"[{rate / 1e9:g} Gbit/s] inter {e['inter_node']['gbit_per_s']:.2f} Gbit/s, intra "
                      f"{e['intra_node']['gbps']:.2f} GB/s, {time.perf_counter() - t0:.0f} s", flush=True)
                for name, m in e["models"].items():
                    for arm, a in m["arms"].items():
                        print(f"  {name:5s} {arm:8s} step {1e3 * a['step_s']['median']:7.0f} ms  speedup "
                              f"{a['speedup']:.2f}x  projected {a['model']['speedup']:.2f}x", flush=True)
    finally:
        remove_namespaces()
    report = {
        "setup": {"nodes": 2, "ranks_per_node": RANKS_PER_NODE, "backend": "gloo", "threads_per_rank": args.threads,
                  "warmup": args.warmup, "steps": args.steps, "models": {m: MODELS[m] for m in args.models},
                  "arms": args.arms, "lr": 1e-3, "grad_clip": None, "torch": torch.__version__, "machine": machine(),
                  "tbf": f"rate R, burst max({TBF_MIN_BURST} B, R x {TBF_BURST_S * 1e3:g} ms), latency "
                         f"{TBF_LATENCY_MS} ms, on both veth ends",
                  "wall_s": round(time.perf_counter() - t_start, 1)},
        "rates": entries,
    }
    atomic_write(args.out / "sdp4bit_link.json", json.dumps(report, indent=1) + "\n")
    md = markdown(report)
    atomic_write(args.out / "sdp4bit_link.md", md)
    print(md)
    return report


if __name__ == "__main__":
    main()
