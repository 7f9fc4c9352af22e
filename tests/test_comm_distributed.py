"""strata.comm on real torch.distributed process groups: 2 and 4 gloo ranks spawned by the test (file rendezvous
in tmp_path, a collective timeout and a hard deadline, so nothing can hang).

Every quantized collective is compared with the exact collective element by element against its worst-case
error bound (one quantization bin per quantization on the element's path, computed from all ranks' inputs),
and its mean over repetitions against a Hoeffding bound (unbiasedness). Sharded training checks that all
replicas hold bit-identical weights after every step, in every arm, through the ZeRO-style wrapper and FSDP2.
"""
from __future__ import annotations

import math
import os
import pickle
import sys
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

from strata.comm import (  # noqa: E402
    ARMS,
    CommConfig,
    CommStats,
    ShardedOptimizer,
    WeightAllGather,
    apply_fsdp2_comm,
    build_topology,
    hadamard32,
    reduce_scatter,
    reduce_scatter_two_level,
)
from strata.comm.fsdp import QuantizedAllGather, QuantizedReduceScatter  # noqa: E402
from strata.comm.model import wire_bits  # noqa: E402
from strata.comm.quantize import qmax  # noqa: E402

DEADLINE_S = 240  # per spawned test; a collective that waits longer than 60 s raises in the workers
GRACE_S = 10.0  # the other ranks' time to finish (and write their tracebacks) once one has failed


def _entry(rank: int, fn, world: int, rdzv: str, args: tuple, backend: str) -> None:
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        fn(rank, world, *args)
        # every rank out of its last collective before any tears the group down: gloo aborts
        # (SIGABRT, "terminate called without an active exception") a rank whose peer closed its
        # sockets while it still finished a collective, a barrier included; so after the barrier
        # the ranks meet again through files
        dist.barrier()
        done = os.path.join(os.path.dirname(rdzv), "done.{}")
        open(done.format(rank), "w").close()
        deadline = time.monotonic() + 60
        while (not all(os.path.exists(done.format(r)) for r in range(world))
               and time.monotonic() < deadline):
            time.sleep(0.01)
    except BaseException:
        dist.destroy_process_group()
        raise
    dist.destroy_process_group()
    # a rank that passed leaves without the interpreter's teardown: two fresh-clone suite runs
    # (2026-11-24, 2026-11-27) saw a rank abort there ("terminate called without an active
    # exception", no Python error, every check of the test passed) -- C++ threads of torch's
    # process groups still joinable as the process's static objects are destroyed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn, world: int, tmp_path, *args, backend: str = "gloo") -> None:
    """Run ``fn(rank, world, *args)`` on ``world`` ranks of a ``backend`` process group (nccl: one GPU per rank)."""
    ctx = mp.start_processes(_entry, args=(fn, world, str(tmp_path / "rdzv"), args, backend), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        # raises ProcessRaisedException with the worker's traceback; the others get GRACE_S to finish first
        while not ctx.join(timeout=1.0, grace_period=GRACE_S):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                pytest.fail(f"{fn.__name__} with {world} ranks did not finish in {DEADLINE_S} s")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        # a rank that raises tears its process group down, and a peer still inside a collective then
        # fails too (gloo: "Connection closed by peer", or SIGABRT); join reports whichever rank ends
        # first, so show what the others raised
        raised = [t for i, f in enumerate(ctx.error_files) if i != e.error_index and (t := _raised(f))]
        if raised:
            pytest.fail(f"{fn.__name__}: {e}\n\n-- the other ranks raised (what may have made rank "
                        f"{e.error_index} fail):\n" + "\n".join(raised))
        raise


def _raised(error_file: str) -> str:
    """The traceback a spawned rank wrote to its ``error_file`` (torch.multiprocessing), or ''."""
    if not os.path.exists(error_file) or os.path.getsize(error_file) == 0:
        return ""
    with open(error_file, "rb") as f:
        return pickle.load(f)


# ----------------------------------------------------------------------------------------------------------------
# helpers run inside the workers
# ----------------------------------------------------------------------------------------------------------------


def gather_all(t: torch.Tensor) -> torch.Tensor:
    """(world, *t.shape): every rank's tensor (an exact, uncounted all-gather)."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return torch.stack(out)


def group_bin(v: torch.Tensor, group: int, bits: int) -> torch.Tensor:
    """Per-element quantization bin (group absmax / qmax) of v (..., S), groups along the last axis."""
    s = v.shape[-1]
    a = v.abs().reshape(*v.shape[:-1], s // group, group).amax(-1, keepdim=True)
    return (a.expand(*v.shape[:-1], s // group, group) / qmax(bits)).reshape(v.shape)


def two_level_bound(inputs: torch.Tensor, rank: int, per_node: int, cfg: CommConfig) -> torch.Tensor:
    """Worst-case |error| of each element of ``rank``'s reduce-scatter output (fp64 ``(S,)``).

    ``inputs`` (world, world * S) are every rank's (averaged) inputs. In the Hadamard domain the error of the
    sum gathers, for every node, the intra-node bins of its ranks' values and the inter-node bin of the node's
    partial sum (whose group absmax is at most that of |exact partial| + intra error); the inverse transform
    averages 32 errors with signs, so its error is at most their mean magnitude.
    """
    world = inputs.shape[0]
    s = inputs.shape[1] // world
    nodes = world // per_node
    t = inputs.double()
    if cfg.hadamard:
        t = hadamard32(t)
    mine = t[:, rank * s:(rank + 1) * s]  # (world, S): what every rank contributes to this shard
    total = torch.zeros(s, dtype=torch.float64)
    for n in range(nodes):
        part = mine[n * per_node:(n + 1) * per_node]
        e1 = group_bin(part, cfg.grad_group_size_intra, cfg.grad_bits_intra).sum(0) if per_node > 1 else 0 * total
        e2 = 0 * total
        if nodes > 1:
            e2 = group_bin(part.sum(0).abs() + e1, cfg.grad_group_size_inter, cfg.grad_bits_inter)
        total += e1 + e2
    if cfg.hadamard:
        total = total.view(-1, 32).mean(1, keepdim=True).expand(-1, 32).reshape(-1)
    return total


def grad_like_inputs(rank: int, world: int, s: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + rank)
    x = torch.randn(world * s, generator=g) * (1 + rank)
    spikes = torch.randint(0, world * s, (world * s // 50,), generator=g)
    x[spikes] *= 40.0  # outliers, which the Hadamard transform smooths
    return x


def check_reduce_scatters(rank: int, world: int, per_node: int, s: int = 384) -> None:
    topo = build_topology(per_node)
    x = grad_like_inputs(rank, world, s, per_node) / world
    allx = gather_all(x)
    exact = allx.double().sum(0)[rank * s:(rank + 1) * s]

    plain = CommConfig(ranks_per_node=per_node)
    stats = CommStats()
    out = reduce_scatter(x, topo, plain, stats)
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-6)
    assert stats.bits_per_element("grad_reduce_scatter") == 32.0

    for arm in ("tlq", "tlq_hs", "qwz_qgz"):
        cfg = CommConfig.arm(arm, ranks_per_node=per_node)
        bound = two_level_bound(allx, rank, per_node, cfg)
        gen = torch.Generator().manual_seed(17 * rank + 1)
        stats = CommStats()
        trials = 48
        mean = torch.zeros(s, dtype=torch.float64)
        for _ in range(trials):
            out = reduce_scatter_two_level(x, topo, cfg, stats, gen).double()
            err = (out - exact).abs()
            assert bool((err <= bound * (1 + 1e-4) + 1e-6).all()), (arm, float((err / bound).max()))
            mean += out / trials
        # unbiased: each trial's error has mean zero and magnitude <= bound, so (Hoeffding + union bound over
        # the S elements, failure probability < 1e-6) the mean of the trials is within this of the exact sum
        t = bound * math.sqrt(2 * math.log(2 * s / 1e-6) / trials)
        assert bool(((mean - exact).abs() <= t + 1e-6).all()), arm
        _, gi, ge = wire_bits(cfg)
        if per_node > 1:
            assert stats.bits_per_element("grad_reduce_scatter", "intra") == gi
        if topo.num_nodes > 1:
            assert stats.bits_per_element("grad_reduce_scatter", "inter") == ge
        assert stats.summary()["grad_reduce_scatter"]["calls"] == trials * ((per_node > 1) + (topo.num_nodes > 1))


def check_weight_all_gathers(rank: int, world: int, per_node: int, s: int = 1024) -> None:
    topo = build_topology(per_node)
    g = torch.Generator().manual_seed(5 + rank)
    shard = torch.randn(s, generator=g) * 0.02
    shard[:64] += 1.0  # a LayerNorm-like block of weights near 1
    exact = gather_all(shard).reshape(-1)

    # plain: bit-exact in fp32, exact bf16 rounding in bf16
    for dtype, tdtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        rep = torch.zeros(world * s)
        WeightAllGather(CommConfig(param_dtype=dtype), topo)(shard, rep)
        assert torch.equal(rep, exact.to(tdtype).float())

    # direct: every value within one bin of its group, identical replicas
    for bits in (4, 8):
        cfg = CommConfig(weight_mode="direct", weight_bits=bits, weight_group_size=256, param_dtype="float32")
        rep = torch.zeros(world * s)
        stats = CommStats()
        WeightAllGather(cfg, topo, stats, torch.Generator().manual_seed(rank))(shard, rep)
        bound = group_bin(exact.view(world, s).double(), 256, bits).reshape(-1)
        assert bool(((rep.double() - exact.double()).abs() <= bound * (1 + 1e-5)).all())
        assert bool((gather_all(rep) == rep).all())
        assert stats.bits_per_element("weight_allgather") == bits + 32 / 256

    # qWD: replicas start equal; each step sends the difference to the replica; error within one bin of the
    # difference, never accumulating; with a fixed target the error shrinks by >= qmax per step
    cfg = CommConfig(weight_mode="qwd", weight_bits=4, weight_group_size=256, param_dtype="float32")
    stats = CommStats()
    gather = WeightAllGather(cfg, topo, stats, torch.Generator().manual_seed(rank))
    rep = exact.clone()
    new = shard.clone()
    for step in range(6):
        new = new + 1e-3 * torch.randn(s, generator=g)
        before = rep.clone()
        gather(new, rep)
        target = gather_all(new).reshape(-1).double()
        bound = group_bin((target - before.double()).view(world, s), 256, 4).reshape(-1)
        assert bool(((rep.double() - target).abs() <= bound * (1 + 1e-5) + 1e-9).all()), step
        assert bool((gather_all(rep) == rep).all()), step
    errors = []
    for _ in range(5):
        gather(new, rep)
        errors.append(float((rep.double() - target).abs().max()))
    ulp = 4 * torch.finfo(torch.float32).eps * float(target.abs().max())  # fp32 rounding of the replica
    assert errors[0] > 100 * ulp and all(b <= a / 7 + ulp for a, b in zip(errors, errors[1:])), errors
    assert stats.bits_per_element("weight_allgather") == 4 + 32 / 256


# ----------------------------------------------------------------------------------------------------------------
# workers
# ----------------------------------------------------------------------------------------------------------------


def worker_collectives(rank: int, world: int) -> None:
    # ranks_per_node = world: one node (intra-node 8-bit stage only); 1: one rank per node (inter-node only)
    for per_node in sorted({world, world // 2, 1}, reverse=True):
        check_reduce_scatters(rank, world, per_node)
        check_weight_all_gathers(rank, world, per_node)


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Linear(12, 48)
        self.norm = torch.nn.LayerNorm(48)
        self.head = torch.nn.Linear(48, 5, bias=False)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.norm(self.emb(x))))


def make_net_and_optimizer(lr: float = 3e-2, device: str = "cpu"):
    torch.manual_seed(123)
    net = TinyNet().to(device)
    decay = [p for p in net.parameters() if p.dim() >= 2]
    no_decay = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    return net, opt


def batch(step: int, size: int = 16):
    g = torch.Generator().manual_seed(step)
    return torch.randn(size, 12, generator=g), torch.randint(0, 5, (size,), generator=g)


def worker_sharded_training(rank: int, world: int) -> None:
    topo = build_topology(2)
    per_rank = 16 // world

    def local_loss(net, x, y):  # this rank's share of the global batch
        share = slice(rank * per_rank, (rank + 1) * per_rank)
        return torch.nn.functional.cross_entropy(net(x[share]), y[share])

    # (1) the exact arm (fp32 weights and gradients) equals single-process training on the global batch
    net, opt = make_net_and_optimizer()
    ref_net, ref_opt = make_net_and_optimizer()
    sdp = ShardedOptimizer(net, opt, CommConfig(ranks_per_node=2, param_dtype="float32"), topology=topo,
                           max_grad_norm=0.5)
    for step in range(4):
        x, y = batch(step)
        loss = local_loss(net, x, y)
        sdp.zero_grad()
        loss.backward()
        norm = sdp.step()
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ref_net(x), y).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref_net.parameters(), 0.5)
        ref_opt.step()
        assert norm == pytest.approx(float(ref_norm), rel=1e-5)
        for p, q in zip(net.parameters(), ref_net.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    # (2) every arm: bit-identical replicas after every step, parameters are views of the replica, the master
    # shard and the replica agree within the arm's error, wire bits as configured
    for arm in ARMS:
        net, opt = make_net_and_optimizer()
        cfg = CommConfig.arm(arm, ranks_per_node=2, weight_group_size=256)
        sdp = ShardedOptimizer(net, opt, cfg, topology=topo, seed=3)
        losses = []
        for step in range(5):
            x, y = batch(step)
            loss = local_loss(net, x, y)
            sdp.zero_grad()
            loss.backward()
            sdp.step()
            losses.append(loss.item())
            replicas = gather_all(sdp.replica)
            assert bool((replicas == sdp.replica).all()), (arm, step)
        assert net.emb.weight.data_ptr() == sdp.replica.data_ptr()
        mine = sdp.replica[rank * sdp.shard_numel:(rank + 1) * sdp.shard_numel].double()
        master_bf16 = sdp.master.to(torch.bfloat16).double()
        if cfg.weight_mode == "plain":
            assert torch.equal(mine, master_bf16), arm
        else:
            assert float((mine - master_bf16).abs().max()) < 0.5, arm
        w, gi, ge = wire_bits(cfg)
        assert sdp.stats.bits_per_element("weight_allgather") == w, arm
        assert sdp.stats.bits_per_element("grad_reduce_scatter", "intra") == gi, arm
        assert sdp.stats.bits_per_element("grad_reduce_scatter", "inter") == ge, arm
        assert all(math.isfinite(v) for v in losses)


def worker_fsdp2(rank: int, world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    topo = build_topology(2)
    cfg = CommConfig.arm("sdp4bit", ranks_per_node=2, weight_group_size=64)

    # the comm objects alone, on FSDP2's buffer layout: unaligned shards are padded, AVG divides once
    s = 100
    x = grad_like_inputs(rank, world, s, 9)
    allx = gather_all(x)
    exact = allx.double().mean(0)[rank * s:(rank + 1) * s]
    out = torch.empty(s)
    rs = QuantizedReduceScatter(cfg, topo, CommStats(), torch.Generator().manual_seed(rank))
    assert rs(out, x, dist.group.WORLD, dist.ReduceOp.AVG) is None
    padded = torch.nn.functional.pad((allx / world).view(world, world, s), (0, 28)).reshape(world, -1)
    bound = two_level_bound(padded, rank, 2, cfg)[:s]
    assert bool(((out.double() - exact).abs() <= bound * (1 + 1e-4) + 1e-6).all())

    # end to end: fully_shard every layer, install the hooks, train; replicas (forward outputs and the qWD
    # replica of every unit) must be bit-identical on all ranks after every step
    torch.manual_seed(0)
    net = TinyNet()
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # a CPU mesh named explicitly: by default fully_shard places the module on the GPU where one is visible
    mesh = init_device_mesh("cpu", (world,))
    for m in (net.emb, net.head):
        fully_shard(m, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=False)
    fully_shard(net, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=False)
    stats = CommStats()
    comms = apply_fsdp2_comm([net.emb, net.head, net], cfg, topo, stats, seed=1)
    assert sum(isinstance(c, QuantizedAllGather) for c in comms) == 3
    assert sum(isinstance(c, QuantizedReduceScatter) for c in comms) == 3
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    probe = torch.randn(4, 12, generator=torch.Generator().manual_seed(99))
    first = None
    x, y = batch(0)
    xs, ys = x.view(world, -1, 12)[rank], y.view(world, -1)[rank]
    for step in range(5):
        loss = torch.nn.functional.cross_entropy(net(xs).float(), ys)
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            o = net(probe).float()
        assert bool((gather_all(o) == o).all()), step
        for c in comms:
            if isinstance(c, QuantizedAllGather) and c.replica is not None:
                assert bool((gather_all(c.replica) == c.replica).all()), step
        first = first if first is not None else float(loss)
    assert float(loss) < first
    summary = stats.summary()
    assert summary["weight_allgather"]["calls"] >= 5 * 2
    assert stats.bits_per_element("grad_reduce_scatter", "inter") == 4.25


# ----------------------------------------------------------------------------------------------------------------
# tests: spawning processes costs several seconds (each imports torch), so the 4-rank checks share one spawn and
# each part leaves a marker file per rank when it passes
# ----------------------------------------------------------------------------------------------------------------

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

FOUR_RANK_PARTS = {"collectives": worker_collectives, "sharded": worker_sharded_training, "fsdp2": worker_fsdp2}


def worker_four_ranks(rank: int, world: int, outdir: str) -> None:
    for name, fn in FOUR_RANK_PARTS.items():
        fn(rank, world)
        open(os.path.join(outdir, f"{name}.{rank}.ok"), "w").close()


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("comm4")
    error = None
    try:
        spawn(worker_four_ranks, 4, tmp, str(tmp))
    except Exception as e:  # reported by the tests of the parts that did not pass
        error = f"{type(e).__name__}: {e}"
    return tmp, error


def check_part(four_ranks, name: str) -> None:
    tmp, error = four_ranks
    missing = [r for r in range(4) if not (tmp / f"{name}.{r}.ok").exists()]
    if missing:
        pytest.fail(f"part {name!r} did not pass on ranks {missing}: {error}")


@pytest.mark.timeout(DEADLINE_S + 30)
def test_quantized_collectives_2_ranks(tmp_path):
    spawn(worker_collectives, 2, tmp_path)


@pytest.mark.timeout(DEADLINE_S + 30)
def test_quantized_collectives_4_ranks(four_ranks):
    check_part(four_ranks, "collectives")


@pytest.mark.timeout(DEADLINE_S + 30)
def test_sharded_optimizer_every_arm_keeps_replicas_identical(four_ranks):
    check_part(four_ranks, "sharded")


@pytest.mark.timeout(DEADLINE_S + 30)
def test_fsdp2_hooks_keep_replicas_identical(four_ranks):
    check_part(four_ranks, "fsdp2")


@pytest.mark.timeout(120)
def test_spawn_reports_worker_failure(tmp_path):
    with pytest.raises(Exception, match="boom"):
        spawn(_failing_worker, 1, tmp_path)


def _failing_worker(rank: int, world: int) -> None:
    raise RuntimeError("boom")
