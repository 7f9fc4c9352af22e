"""Train the tiny GPT of ``train_tiny_gpt.py`` with sharded data parallelism on 4 CPU processes (gloo) = 2 simulated
nodes x 2 ranks, once per communication arm, and compare losses and wire bytes.

Arms (``strata.comm.CommConfig.arm``): ``baseline`` (bf16 weight all-gather, fp32 gradient reduce-scatter),
``qwz_qgz`` (ZeRO++: int8 weights, int4 two-level gradients), ``qwd`` (SDP4Bit's 4-bit weight differences only),
``tlq`` (two-level 8-bit intra-node / 4-bit inter-node gradients), ``tlq_hs`` (TLq with the Hadamard transform),
``sdp4bit`` (qWD + TLq-HS) and ``direct4`` (4-bit direct weight quantization, the paper's ablation).

Every arm starts from the same weights (``torch.manual_seed(seed)``) and sees the same global batches in the same
order (one ``torch.Generator`` seeded with ``seed`` draws the global batch on every rank; rank ``r`` trains on its
slice). Evaluation batches come from separate fixed generators, identical for all arms, and are split over the
ranks. Wire bytes are counted by ``strata.comm.CommStats`` from the tensors handed to torch.distributed, split
into intra-node and inter-node peers, and reported as bits per parameter per step (padding of the flat buffer
charged to the real parameters). Evaluation and the gradient-norm all-reduce are not counted.

Outputs (written atomically to ``--out``, default ``benchmarks/results``): ``sdp4bit_training.json`` (per-arm final
train/validation loss, wall time, bits per parameter, bytes per step, loss history), ``sdp4bit_training.png``
(loss curves) and ``sdp4bit_training.md`` (table).

Run from the repository root (about 4-5 minutes per arm on 2 shared cores with the defaults)::

    .venv/bin/python benchmarks/sdp4bit_training.py
    .venv/bin/python benchmarks/sdp4bit_training.py --steps 20 --arms baseline sdp4bit --out scratch/sdp4bit
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.train_tiny_gpt import DEFAULT_DATA, GPT, GPTConfig, configure_optimizer, get_batch, load_corpus  # noqa: E402

from strata.atomic import atomic_write  # noqa: E402
from strata.comm import ARMS, CommConfig, CommStats, ShardedOptimizer, build_topology  # noqa: E402
from strata.comm.model import wire_bits  # noqa: E402

ARM_ORDER = ["baseline", "qwz_qgz", "qwd", "tlq", "tlq_hs", "sdp4bit", "direct4"]
assert set(ARM_ORDER) == set(ARMS)
DEFAULT_OUT = ROOT / "benchmarks" / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="character corpus (default: %(default)s)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder (default: %(default)s)")
    p.add_argument("--arms", nargs="+", default=ARM_ORDER, choices=ARM_ORDER, help="arms to run (default: all)")
    p.add_argument("--steps", type=int, default=400, help="optimizer steps per arm (default: %(default)s)")
    p.add_argument("--world", type=int, default=4, help="processes (default: %(default)s)")
    p.add_argument("--ranks-per-node", type=int, default=2, help="simulated ranks per node (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="global batch, sequences (default: %(default)s)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak AdamW learning rate (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=20, help="warmup steps, then cosine to lr/10 (default: %(default)s)")
    p.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1234, help="init, data order and rounding seed (default: %(default)s)")
    p.add_argument("--eval-every", type=int, default=50, help="validation interval (default: %(default)s)")
    p.add_argument("--eval-iters", type=int, default=8, help="batches per interim estimate (default: %(default)s)")
    p.add_argument("--final-eval-iters", type=int, default=48, help="batches per final estimate (default: %(default)s)")
    p.add_argument("--block-size", type=int, default=64, help="context length (default: %(default)s)")
    p.add_argument("--n-layer", type=int, default=4, help="(default: %(default)s)")
    p.add_argument("--n-head", type=int, default=4, help="(default: %(default)s)")
    p.add_argument("--n-embd", type=int, default=128, help="(default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default: %(default)s)")
    p.add_argument("--replot", action="store_true", help="only redraw the PNG and table from the JSON in --out")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per arm (default: %(default)s)")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------------------------
# one arm, one rank
# ----------------------------------------------------------------------------------------------------------------




def _distributed_loss(model, ids, args, iters: int, seed: int, rank: int, world: int) -> float:
    """Mean loss over ``iters`` fixed batches (same for every arm), split over the ranks."""
    gen = torch.Generator().manual_seed(seed)
    was = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for k in range(iters):
            x, y = get_batch(ids, args.batch_size // world, args.block_size, gen)
            if k % world == rank:
                total += torch.tensor([model(x, y)[1].item(), 1.0], dtype=torch.float64)
    model.train(was)
    dist.all_reduce(total)
    return float(total[0] / total[1])


def run_rank(rank: int, world: int, rdzv: str, args: argparse.Namespace, arm: str, result_path: str) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    try:
        _train(rank, world, args, arm, Path(result_path))
    finally:
        dist.destroy_process_group()


def _train(rank: int, world: int, args: argparse.Namespace, arm: str, result_path: Path) -> None:
    topo = build_topology(args.ranks_per_node)
    train_ids, val_ids, vocab = load_corpus(args.data)
    cfg = GPTConfig(vocab_size=len(vocab), block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                    n_embd=args.n_embd)
    torch.manual_seed(args.seed)
    model = GPT(cfg)
    comm = CommConfig.arm(arm, ranks_per_node=args.ranks_per_node)
    stats = CommStats()
    sdp = ShardedOptimizer(model, configure_optimizer(model, lr=args.lr), comm, topology=topo, stats=stats,
                           seed=args.seed, max_grad_norm=args.clip)

    def lr_factor(step: int) -> float:  # step counts optimizer steps already taken
        if step < args.warmup:
            return (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, t)))

    sched = torch.optim.lr_scheduler.LambdaLR(sdp.optimizer, lr_factor)
    gen = torch.Generator().manual_seed(args.seed)
    per_rank = args.batch_size // world
    history, batch_losses = [], []
    train_time = step_time = 0.0
    replicas_identical = True

    def evaluate(step: int, iters: int) -> dict:
        nonlocal replicas_identical
        reps = [torch.empty_like(sdp.replica) for _ in range(world)]
        dist.all_gather(reps, sdp.replica)
        replicas_identical &= all(torch.equal(reps[0], r) for r in reps)
        return {"step": step,
                "train_loss": _distributed_loss(model, train_ids, args, iters, args.seed + 1, rank, world),
                "val_loss": _distributed_loss(model, val_ids, args, iters, args.seed + 2, rank, world)}

    history.append(evaluate(0, args.eval_iters))
    t_start = time.perf_counter()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = get_batch(train_ids, args.batch_size, args.block_size, gen)
        _, loss = model(x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank])
        sdp.zero_grad()
        loss.backward()
        t1 = time.perf_counter()
        sdp.step()
        sched.step()
        t2 = time.perf_counter()
        train_time += t2 - t0
        step_time += t2 - t1
        bl = loss.detach().clone()
        dist.all_reduce(bl)
        batch_losses.append(float(bl) / world)
        if step % args.eval_every == 0 and step != args.steps:
            history.append(evaluate(step, args.eval_iters))
            if rank == 0:
                h = history[-1]
                print(f"[{arm}] step {step:4d}  train {h['train_loss']:.4f}  val {h['val_loss']:.4f}  "
                      f"({train_time / step * 1000:.0f} ms/step)", flush=True)
    final = evaluate(args.steps, args.final_eval_iters)
    history.append(final)
    wall = time.perf_counter() - t_start

    if rank != 0:
        return
    summary = stats.summary()
    pad = sdp.padded_numel / sdp.numel  # padding charged to the real parameters
    per_step = {name: {"intra_bytes": d["intra_bytes"] / args.steps, "inter_bytes": d["inter_bytes"] / args.steps}
                for name, d in summary.items()}

    def bits(name: str, link: str | None) -> float:
        return round(stats.bits_per_element(name, link) * pad, 4)

    result = {
        "arm": arm,
        "config": comm.to_dict(),
        "final_train_loss": final["train_loss"],
        "final_val_loss": final["val_loss"],
        "wall_s": round(train_time, 2),
        "wall_incl_eval_s": round(wall, 2),
        "comm_and_optimizer_s": round(step_time, 2),
        "bits_per_param": {"weight_allgather": bits("weight_allgather", None),
                           "grad_intra_node": bits("grad_reduce_scatter", "intra"),
                           "grad_inter_node": bits("grad_reduce_scatter", "inter")},
        "nominal_bits_per_value": dict(zip(("weight_allgather", "grad_intra_node", "grad_inter_node"),
                                           wire_bits(comm))),
        "bytes_per_step_per_rank": per_step,
        "replicas_identical": bool(replicas_identical),
        "params": sdp.numel,
        "padded_params": sdp.padded_numel,
        "history": history,
        "batch_loss": [round(v, 5) for v in batch_losses],
    }
    atomic_write(result_path, (json.dumps(result) + "\n").encode())
    print(f"[{arm}] final train {final['train_loss']:.4f}  val {final['val_loss']:.4f}  wall {train_time:.1f}s  "
          f"bits/param {result['bits_per_param']}", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------


def run_arm(args: argparse.Namespace, arm: str, workdir: Path) -> dict:
    rdzv = workdir / f"rdzv_{arm}"
    result = workdir / f"{arm}.json"
    ctx = mp.start_processes(run_rank, args=(args.world, str(rdzv), args, arm, str(result)), nprocs=args.world,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + args.timeout
    while not ctx.join(timeout=2.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"arm {arm} did not finish in {args.timeout} s")
    return json.loads(result.read_text())


def plot(results: dict, steps: int, path: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 4.8))
    base = results.get("baseline")
    for arm, r in results.items():
        h = r["history"]
        ax1.plot([e["step"] for e in h], [e["val_loss"] for e in h], marker="o", ms=3, label=arm)
        bl = torch.tensor(r["batch_loss"])
        k = max(1, min(25, len(bl) // 10))
        smooth = torch.nn.functional.avg_pool1d(bl[None, None], k, stride=1)[0, 0] if len(bl) >= k else bl
        ax2.plot(range(k, k + len(smooth)), smooth.tolist(), label=arm)
        if base is not None:
            b = {e["step"]: e["val_loss"] for e in base["history"]}
            pts = [(e["step"], 100 * (e["val_loss"] / b[e["step"]] - 1)) for e in h if e["step"] in b and e["step"]]
            ax3.plot([s for s, _ in pts], [v for _, v in pts], marker="o", ms=3, label=arm)
    ax1.set(xlabel="step", ylabel="validation loss", title="Validation loss (fixed batches)")
    ax2.set(xlabel="step", ylabel="training loss", title="Training batch loss (moving average)")
    lows = [min(e["val_loss"] for e in r["history"]) for r in results.values()]
    ax1.set_ylim(min(lows) - 0.05, min(lows) + 1.2)
    ax2.set_ylim(min(lows) - 0.15, min(lows) + 1.2)
    ax3.set(xlabel="step", ylabel="% of baseline", title="Validation loss relative to baseline")
    ax3.axhspan(-1, 1, color="0.9", label="+-1 %")
    ax3.set_yscale("symlog", linthresh=2)
    ticks = [-1, 0, 1, 2, 5, 10, 20, 50]
    ax3.set_yticks(ticks, [f"{t:+d} %" if t else "0" for t in ticks])
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Tiny GPT, 4 gloo ranks = 2 nodes x 2, {steps} steps: SDP4Bit arms")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def table(report: dict) -> str:
    base = report["arms"].get("baseline")
    lines = ["| arm | final train loss | final val loss | val vs baseline | weight all-gather bits/param | "
             "grad intra-node bits/param | grad inter-node bits/param | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, r in report["arms"].items():
        rel = f"{100 * (r['final_val_loss'] / base['final_val_loss'] - 1):+.2f} %" if base else "-"
        b = r["bits_per_param"]
        lines.append(f"| {arm} | {r['final_train_loss']:.4f} | {r['final_val_loss']:.4f} | {rel} | "
                     f"{b['weight_allgather']:.3f} | {b['grad_intra_node']:.3f} | {b['grad_inter_node']:.3f} | "
                     f"{r['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    if args.replot:
        report = json.loads((args.out / "sdp4bit_training.json").read_text())
        results = {a: {"history": report["history"][a], "batch_loss": report["batch_loss"][a]} for a in report["arms"]}
        plot(results, report["steps"], args.out / "sdp4bit_training.png")
        atomic_write(args.out / "sdp4bit_training.md", table(report).encode())
        return report
    if args.batch_size % args.world or args.world % args.ranks_per_node:
        raise SystemExit("--batch-size must be a multiple of --world, and --world of --ranks-per-node")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in args.arms:
            t0 = time.perf_counter()
            results[arm] = run_arm(args, arm, Path(tmp))
            print(f"[{arm}] done in {time.perf_counter() - t0:.0f} s", flush=True)
    first = next(iter(results.values()))
    report = {
        "steps": args.steps,
        "arms": {arm: {k: v for k, v in r.items() if k not in ("history", "batch_loss")} for arm, r in results.items()},
        "history": {arm: r["history"] for arm, r in results.items()},
        "batch_loss": {arm: r["batch_loss"] for arm, r in results.items()},
        "setup": {"world": args.world, "ranks_per_node": args.ranks_per_node, "global_batch": args.batch_size,
                  "block_size": args.block_size, "n_layer": args.n_layer, "n_head": args.n_head,
                  "n_embd": args.n_embd, "params": first["params"], "padded_params": first["padded_params"],
                  "lr": args.lr, "warmup": args.warmup, "schedule": "linear warmup, cosine to lr/10",
                  "clip": args.clip, "seed": args.seed, "eval_iters": args.eval_iters,
                  "final_eval_iters": args.final_eval_iters, "threads_per_process": args.threads,
                  "backend": "gloo", "torch": torch.__version__,
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores"},
    }
    if "baseline" in results:
        base = results["baseline"]["final_val_loss"]
        report["val_loss_vs_baseline"] = {arm: r["final_val_loss"] / base - 1 for arm, r in results.items()}
    out: Path = args.out
    atomic_write(out / "sdp4bit_training.json", (json.dumps(report, indent=1) + "\n").encode())
    md = table(report)
    atomic_write(out / "sdp4bit_training.md", md.encode())
    plot(results, args.steps, out / "sdp4bit_training.png")
    print(md)
    return report


if __name__ == "__main__":
    main()
