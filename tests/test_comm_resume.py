"""Fault tolerance of strata.comm.ShardedOptimizer on 2 gloo ranks (spawned as in test_comm_distributed.py).

* Resume: a run killed after saving a checkpoint at step k, resumed in fresh processes, gives the same losses
  (==) and bit-identical final weights as an uninterrupted run, for a stochastic-rounding SDP4Bit arm with clipping
  and an LR schedule, and for fp16 parameters with a GradScaler and overflowing steps before and after k.
* Refusals, on every rank alike: other sharding or parameter dtype, missing manifest, files of two saves mixed,
  a damaged file, another world size.
* Overflow: with fp16 and torch.amp.GradScaler a step whose gradients overflow on one rank (loss scaled up, or one
  Inf that lands in the other rank's shard) is skipped on every rank (weights, master and optimizer state unchanged,
  scale halved) and training continues; without a scaler the step is skipped with a warning; the quantized
  collectives carry NaN/Inf as NaN groups instead of raising.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from strata.comm import CommConfig, ShardedOptimizer, build_topology, reduce_scatter_two_level  # noqa: E402
from strata.comm.sharded import MANIFEST, shard_file  # noqa: E402
from strata.errors import FormatError, InvalidInputError  # noqa: E402

from .test_comm_distributed import DEADLINE_S, TinyNet, batch, gather_all, spawn  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

N_STEPS, KILL_AT = 8, 4
CASES = ("sdp4bit", "fp16_scaler")


# ----------------------------------------------------------------------------------------------------------------
# one training setup, built the same way by the uninterrupted, the killed and the resumed run
# ----------------------------------------------------------------------------------------------------------------


def build(case: str, init_seed: int = 123, **overrides):
    torch.manual_seed(init_seed)
    net = TinyNet()
    if case == "fp16_scaler":
        net.half()
    decay = [p for p in net.parameters() if p.dim() >= 2]
    no_decay = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-2, betas=(0.9, 0.95))
    if case == "fp16_scaler":  # one node of 2: the 8-bit intra-node stage; fp16 replica, fp32 master
        cfg = CommConfig.arm("sdp4bit", ranks_per_node=2, weight_group_size=256, param_dtype="float16")
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    else:  # two nodes of 1: the 4-bit inter-node stage; bf16 replica values
        cfg = CommConfig.arm("sdp4bit", ranks_per_node=1, weight_group_size=256)
        scaler = None
    cfg = cfg.replace(**overrides)
    sdp = ShardedOptimizer(net, opt, cfg, topology=build_topology(cfg.ranks_per_node), seed=7, max_grad_norm=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(sdp.optimizer, lambda i: min(1.0, (i + 1) / 3))
    return net, sdp, sched, scaler


def overflow_on(case: str, step: int, rank: int) -> bool:
    """fp16 case: rank 0's gradients overflow at steps 1 and 5 (before and after the kill)."""
    return case == "fp16_scaler" and rank == 0 and step in (1, 5)


def train_step(case: str, step: int, net, sdp, sched, scaler) -> float:
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = batch(step)
    per = x.shape[0] // world
    share = slice(rank * per, (rank + 1) * per)
    dtype = next(net.parameters()).dtype
    loss = torch.nn.functional.cross_entropy(net(x[share].to(dtype)).float(), y[share])
    sdp.zero_grad()
    if scaler is None:
        loss.backward()
        sdp.step()
    else:
        scaler.scale(loss * (1e8 if overflow_on(case, step, rank) else 1.0)).backward()
        sdp.reduce_gradients()
        scaler.step(sdp)
        scaler.update()
    sched.step()
    return loss.item()


def save_result(outdir: str, name: str, losses: list[float], net, sdp) -> None:
    rank = dist.get_rank()
    with open(os.path.join(outdir, f"{name}.{rank}.json"), "w") as f:
        json.dump(losses, f)  # float repr round-trips exactly
    torch.save({"replica": sdp.replica.clone(), "master": sdp.master.clone(),
                "params": [p.detach().clone() for p in net.parameters()]}, os.path.join(outdir, f"{name}.{rank}.pt"))


def extra_state(step: int, sched, scaler) -> dict:
    return {"step": step, "scheduler": sched.state_dict(),
            "scaler": None if scaler is None else scaler.state_dict()}


# ----------------------------------------------------------------------------------------------------------------
# workers
# ----------------------------------------------------------------------------------------------------------------


def worker_run_and_die(rank: int, world: int, outdir: str) -> None:
    torch.manual_seed(1000 + rank)  # a per-rank global RNG, as real jobs have
    for case in CASES:
        net, sdp, sched, scaler = build(case)
        losses = [train_step(case, s, net, sdp, sched, scaler) for s in range(N_STEPS)]
        save_result(outdir, f"{case}.ref", losses, net, sdp)

        net, sdp, sched, scaler = build(case)
        losses = [train_step(case, s, net, sdp, sched, scaler) for s in range(KILL_AT)]
        sdp.save_checkpoint(os.path.join(outdir, case, f"step{KILL_AT}"), extra_state(KILL_AT, sched, scaler),
                            workers=1)
        with open(os.path.join(outdir, f"{case}.before_kill.{rank}.json"), "w") as f:
            json.dump(losses, f)
        for s in range(KILL_AT, KILL_AT + 2):  # work done after the checkpoint and lost with the process
            train_step(case, s, net, sdp, sched, scaler)
    dist.barrier()
    # every rank out of the barrier before any dies: a rank still inside a collective when its
    # peer vanishes gets std::terminate from gloo (SIGABRT), which is not what is tested here
    open(os.path.join(outdir, f"out_of_barrier.{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while (not all(os.path.exists(os.path.join(outdir, f"out_of_barrier.{r}")) for r in range(world))
           and time.monotonic() < deadline):
        time.sleep(0.01)
    os._exit(0)  # killed: no process-group teardown, no interpreter shutdown


def worker_resume(rank: int, world: int, outdir: str) -> None:
    torch.manual_seed(2000 + rank)
    for case in CASES:
        net, sdp, sched, scaler = build(case, init_seed=999)  # a restart need not re-seed the model's init
        extra = sdp.load_checkpoint(os.path.join(outdir, case, f"step{KILL_AT}"), workers=1)
        sched.load_state_dict(extra["scheduler"])
        if scaler is not None:
            scaler.load_state_dict(extra["scaler"])
        losses = [train_step(case, s, net, sdp, sched, scaler) for s in range(extra["step"], N_STEPS)]
        save_result(outdir, f"{case}.resumed", losses, net, sdp)
        assert bool((gather_all(sdp.replica) == sdp.replica).all())

    # refusals, on every rank alike, before anything changes
    ckpt = os.path.join(outdir, "sdp4bit", f"step{KILL_AT}")
    net, sdp, _, _ = build("sdp4bit", weight_group_size=2048)  # shards aligned to 2048 instead of 256
    before = sdp.replica.clone()
    with pytest.raises(InvalidInputError, match="sharding differs"):
        sdp.load_checkpoint(ckpt, workers=1)
    assert torch.equal(sdp.replica, before)
    net, sdp, _, _ = build("sdp4bit")
    with pytest.raises(InvalidInputError, match="saved with float32 parameters, these are float16"):
        build("fp16_scaler")[1].load_state_dict(sdp.state_dict())
    with pytest.raises(FormatError, match="no manifest.json"):
        sdp.load_checkpoint(os.path.join(outdir, "nowhere"), workers=1)
    # a folder holding rank 0's file of one save and rank 1's of another: rank 1 names its file, rank 0 points there
    mixed = os.path.join(outdir, "mixed")
    sdp.save_checkpoint(mixed, workers=1)
    dist.barrier()
    if rank == 1:
        shutil.copy(os.path.join(ckpt, shard_file(1, world)), os.path.join(mixed, shard_file(1, world)))
    dist.barrier()
    with pytest.raises(FormatError if rank == 1 else InvalidInputError,
                       match="another save" if rank == 1 else r"rank\(s\) \[1\]"):
        sdp.load_checkpoint(mixed, workers=1)
    # a damaged file (truncated on rank 0): rank 0 raises strata.checkpoint's error, rank 1 points to rank 0
    damaged = os.path.join(outdir, "damaged")
    if rank == 0:
        shutil.copytree(ckpt, damaged)
        with open(os.path.join(damaged, shard_file(0, world)), "r+b") as f:
            f.truncate(os.path.getsize(f.name) // 2)
    dist.barrier()
    with pytest.raises(FormatError if rank == 0 else InvalidInputError, match=None if rank == 0 else r"\[0\]"):
        sdp.load_checkpoint(damaged, workers=1)
    sdp.load_checkpoint(ckpt, workers=1)  # still usable after refusals
    open(os.path.join(outdir, f"resume.{rank}.ok"), "w").close()


def worker_other_world_size(rank: int, world: int, outdir: str) -> None:
    net, sdp, _, _ = build("sdp4bit")
    with pytest.raises(InvalidInputError, match="saved by 2 ranks and this run has 1"):
        sdp.load_checkpoint(os.path.join(outdir, "sdp4bit", f"step{KILL_AT}"), workers=1)
    state = json.loads(open(os.path.join(outdir, "sdp4bit", f"step{KILL_AT}", MANIFEST)).read())
    assert state["world_size"] == 2 and len(state["files"]) == 2
    open(os.path.join(outdir, "world1.ok"), "w").close()


def snapshot(sdp) -> dict:
    return {"replica": sdp.replica.clone(), "master": sdp.master.clone(),
            "optimizer": [{k: v.clone() for k, v in st.items()} for st in sdp.optimizer.state.values()]}


def same(a: dict, b: dict) -> bool:
    if not (torch.equal(a["replica"], b["replica"]) and torch.equal(a["master"], b["master"])):
        return False
    pairs = zip(a["optimizer"], b["optimizer"])
    return len(a["optimizer"]) == len(b["optimizer"]) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in pairs)


def scaler_case(rank: int, world: int, weight_group_size: int) -> None:
    """fp16 parameters, GradScaler, overflows injected on one rank; every rank must skip exactly those steps."""
    torch.manual_seed(123)
    net = TinyNet().half()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    cfg = CommConfig.arm("sdp4bit", ranks_per_node=2, weight_group_size=weight_group_size, param_dtype="float16")
    sdp = ShardedOptimizer(net, opt, cfg, topology=build_topology(2), seed=1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1000)
    s = sdp.shard_numel
    head_offset = sum(p.numel() for p in net.parameters()) - net.head.weight.numel()
    inf_lands_elsewhere = head_offset >= s  # head.weight lies in rank 1's shard
    losses = []
    for step in range(7):
        x, y = batch(step)
        xs, ys = x.view(world, -1, 12)[rank].half(), y.view(world, -1)[rank]
        loss = torch.nn.functional.cross_entropy(net(xs).float(), ys)
        losses.append(loss.item())
        sdp.zero_grad()
        big = step == 1 and rank == 0  # rank 0's fp16 gradients overflow
        scaler.scale(loss * (1e8 if big else 1.0)).backward()
        one_inf = step == 3 and rank == world - 1  # one Inf, in head.weight's gradient
        if one_inf:
            net.head.weight.grad[0, 0] = float("inf")
        before, scale = snapshot(sdp), scaler.get_scale()
        found = sdp.reduce_gradients()
        scaler.step(sdp)
        scaler.update()
        if step in (1, 3):
            assert found and sdp.grads_nonfinite, step
            assert same(snapshot(sdp), before), step  # weights, master, optimizer state unchanged
            assert scaler.get_scale() == scale / 2, step
        else:
            assert not found, step
            assert not torch.equal(sdp.replica, before["replica"]), step
            assert scaler.get_scale() == scale, step
        assert bool((gather_all(sdp.replica) == sdp.replica).all()), step
    assert all(math.isfinite(v) for v in losses), losses
    if weight_group_size > sdp.numel // world:  # rank 1 owns only padding: it stays zero
        assert rank == 0 or not bool(sdp.master.any())
    else:
        assert inf_lands_elsewhere  # so step 3 tested an Inf that rank 0 only sees through the flag

    # without reduce_gradients() the scaler finds no gradients and torch refuses, instead of a silent wrong step
    loss = torch.nn.functional.cross_entropy(net(xs).float(), ys)
    sdp.zero_grad()
    scaler.scale(loss).backward()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.step(sdp)


def worker_overflow(rank: int, world: int) -> None:
    scaler_case(rank, world, 256)  # both ranks own parameters; step 3's Inf is in rank 1's shard only
    scaler_case(rank, world, 2048)  # rank 1's shard is all padding

    # no scaler: a non-finite step is skipped on every rank with a warning, and training goes on
    torch.manual_seed(123)
    net = TinyNet()
    sdp = ShardedOptimizer(net, torch.optim.AdamW(net.parameters(), lr=1e-2), CommConfig.arm("tlq_hs"),
                           topology=build_topology(None))
    for step in range(3):
        x, y = batch(step)
        loss = torch.nn.functional.cross_entropy(net(x.view(world, -1, 12)[rank]), y.view(world, -1)[rank])
        sdp.zero_grad()
        loss.backward()
        if step == 1 and rank == 0:
            net.emb.bias.grad[3] = float("nan")
        before = snapshot(sdp)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sdp.step()
        skipped = [w for w in caught if issubclass(w.category, RuntimeWarning) and "skipped" in str(w.message)]
        assert len(skipped) == (step == 1), step
        assert same(snapshot(sdp), before) == (step == 1), step
        assert bool(torch.isfinite(sdp.replica).all())

    # the quantized reduce-scatter carries an Inf as its group's NaN; the other groups are untouched (same draws)
    cfg = CommConfig.arm("tlq", ranks_per_node=world)
    topo = build_topology(world)
    x = torch.randn(world * 256, generator=torch.Generator().manual_seed(rank))
    ref = reduce_scatter_two_level(x, topo, cfg, generator=torch.Generator().manual_seed(5 + rank))
    if rank == 0:
        x[256 + 130] = float("inf")  # in rank 1's shard, its second group of 128
    out = reduce_scatter_two_level(x, topo, cfg, generator=torch.Generator().manual_seed(5 + rank))
    if rank == 1:
        assert bool(out[128:].isnan().all()) and torch.equal(out[:128], ref[:128])
    else:
        assert torch.equal(out, ref)


# ----------------------------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------------------------


def _losses(tmp_path, name: str, rank: int) -> list[float]:
    return json.loads((tmp_path / f"{name}.{rank}.json").read_text())


@pytest.mark.timeout(3 * DEADLINE_S + 30)
def test_killed_and_resumed_run_matches_uninterrupted_run(tmp_path):
    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
    spawn(worker_run_and_die, 2, tmp_path / "a", str(tmp_path))
    assert sorted(p.name for p in (tmp_path / "sdp4bit" / f"step{KILL_AT}").iterdir()) == [
        MANIFEST, shard_file(0, 2), shard_file(1, 2)]
    spawn(worker_resume, 2, tmp_path / "b", str(tmp_path))  # fresh processes
    for case in CASES:
        for rank in range(2):
            ref = _losses(tmp_path, f"{case}.ref", rank)
            assert _losses(tmp_path, f"{case}.before_kill", rank) == ref[:KILL_AT], (case, rank)
            assert _losses(tmp_path, f"{case}.resumed", rank) == ref[KILL_AT:], (case, rank)
            a = torch.load(tmp_path / f"{case}.ref.{rank}.pt")
            b = torch.load(tmp_path / f"{case}.resumed.{rank}.pt")
            for key in ("replica", "master"):
                assert torch.equal(a[key], b[key]), (case, rank, key)
            assert all(torch.equal(p, q) for p, q in zip(a["params"], b["params"])), (case, rank)
    assert all((tmp_path / f"resume.{r}.ok").exists() for r in range(2))
    spawn(worker_other_world_size, 1, tmp_path / "c", str(tmp_path))
    assert (tmp_path / "world1.ok").exists()


@pytest.mark.timeout(DEADLINE_S + 30)
def test_overflow_steps_are_skipped_on_every_rank(tmp_path):
    spawn(worker_overflow, 2, tmp_path)
