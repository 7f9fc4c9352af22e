"""SDP4Bit's quantization stages on one GPU (issue 38): the fused kernels' rates at the paper's configuration, and
what they add to a training step of a GPT of about 330 M parameters (bf16), with the throughput model fed with the
measured rates.

1. **Kernels**: every kernel the ``sdp4bit`` and ``qwz_qgz`` arms run (``sdp4bit_link.kernel_ops``: the weight
   difference quantized, the replica updated, Hadamard + int8 quantization, the sum of the received copies
   re-quantized, the last sum and inverse Hadamard), at the data-parallel geometry of the paper's speed test
   (GPT 6.7B on 128 GPUs, tensor parallel 4: 32 data-parallel ranks, 2 per node), on ``--numel`` values: GB/s of
   fp32 input, beside a device-to-device copy of the same values measured in the same run.
2. **Training step** (``benchmarks/gpu_gpt.py``; fp32 master weights and AdamW state in one flat vector, the bf16
   replica the model's parameters are views of, gradients flattened to fp32 in every arm), medians of ``--steps``
   steps after warm-up, the arms interleaved: ``baseline`` (the replica copied from the master), ``sdp4bit fused``
   (a world of 1 still runs every kernel: Hadamard + int8 quantization of the gradients, re-quantization to int4,
   dequantization and inverse Hadamard back into the gradients; after the optimizer step the weight difference
   quantized to int4 and added into the replica) and ``sdp4bit torch`` (the same stages as PyTorch ops).
3. **Model**: ``strata.comm.model.paper_setting("h800")`` with ``quant_gbps`` the single rate equivalent to the
   measured kernels (``sdp4bit_link.effective_quant_gbps``): SDP4Bit's projected speedup.

Writes ``OUT/sdp4bit_gpu_step.{json,md}``; ``--smoke`` runs it small on the CPU (numba kernels) to check the
script::

    python benchmarks/sdp4bit_gpu_step.py --out $OUT [--steps 10] [--numel 268435456] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmarks.gpu_gpt import device_for, gpt, loss_fn  # noqa: E402
from benchmarks.sdp4bit_link import effective_quant_gbps, kernel_ops  # noqa: E402

from strata.atomic import atomic_write  # noqa: E402
from strata.comm import CommConfig, dequantize, hadamard32, inverse_hadamard32, kernels, quantize  # noqa: E402
from strata.comm.model import paper_setting, speedup, step_time  # noqa: E402

#: The data-parallel geometry of the paper's speed test (128 GPUs, 8 a node, tensor parallel 4).
WORLD, PER_NODE = 32, 2
ALIGN = 2048  # the flat vectors are padded to whole weight groups


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int) -> float:
    """Median seconds of ``fn()`` (to the end of the device's work) after one warm-up call."""
    fn()
    ts = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def kernel_table(args, device) -> dict:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(args.numel, generator=gen) * 0.02).to(device)
    dst = torch.empty_like(x)
    copy = 4 * args.numel / timed(lambda: dst.copy_(x), device, args.repeats) / 1e9
    configs = [CommConfig.arm(a, ranks_per_node=PER_NODE) for a in ("sdp4bit", "qwz_qgz")]
    rates = {name: 4 * args.numel / timed(op, device, args.repeats) / 1e9
             for name, op in kernel_ops(configs, x, gen, PER_NODE, WORLD).items()}
    for name, r in rates.items():
        print(f"{name:70s} {r:8.1f} GB/s ({100 * r / copy:5.1f} % of copy)", flush=True)
    return {"copy_gbps": copy, "kernels_gbps": rates}


class Trainer:
    """The GPT with its parameters as views of one flat bf16 replica, fp32 master weights and AdamW state."""

    def __init__(self, device, smoke: bool):
        self.device = device
        self.model, vocab = gpt(device, smoke)
        params = list(self.model.parameters())
        self.n = sum(p.numel() for p in params)
        padded = -(-self.n // ALIGN) * ALIGN
        self.replica = torch.zeros(padded, dtype=torch.bfloat16, device=device)
        self.grads = torch.zeros(padded, dtype=torch.float32, device=device)
        self.views, off = [], 0
        for p in params:
            k = p.numel()
            self.replica[off:off + k].copy_(p.detach().reshape(-1))
            p.data = self.replica[off:off + k].view_as(p)
            self.views.append((p, self.grads[off:off + k]))
            off += k
        self.master = self.replica.float().requires_grad_(True)
        self.opt = torch.optim.AdamW([self.master], lr=1e-4)
        batch, seq = (2, 64) if smoke else (8, 512)
        self.tokens = batch * seq
        self.loss = loss_fn(self.model, vocab, batch, seq, device, torch.Generator(device=device).manual_seed(1))
        self.gen = torch.Generator(device=device).manual_seed(2)

    def step(self, arm: str) -> None:
        for p, _ in self.views:
            p.grad = None
        self.loss().backward()
        for p, g in self.views:
            g.copy_(p.grad.reshape(-1))
        if arm == "sdp4bit fused":  # the gradient stages, then the weight difference
            q1 = kernels.quantize(self.grads, 8, 128, seed=self.gen, hadamard=True)
            q2 = kernels.requantize_sum(q1.codes.view(1, -1), q1.scales.view(1, -1), q1.numel, 8, 128, 4, 128,
                                        seed=self.gen)
            kernels.dequantize_add(q2.codes.view(1, -1), q2.scales.view(1, -1), q2.numel, 4, 128, self.grads,
                                   inverse_hadamard=True, accumulate=False)
        elif arm == "sdp4bit torch":
            q1 = quantize(hadamard32(self.grads), 8, 128, generator=self.gen, nonfinite="propagate")
            q2 = quantize(dequantize(q1), 4, 128, generator=self.gen, nonfinite="propagate")
            self.grads.copy_(inverse_hadamard32(dequantize(q2)))
        self.master.grad = self.grads
        self.opt.step()
        with torch.no_grad():
            if arm == "sdp4bit fused":
                q = kernels.quantize(self.master, 4, ALIGN, seed=self.gen, subtract=self.replica,
                                     round_to=torch.bfloat16)
                kernels.dequantize_add(q.codes.view(1, -1), q.scales.view(1, -1), q.numel, 4, ALIGN, self.replica,
                                       round_to=torch.bfloat16)
            elif arm == "sdp4bit torch":
                diff = self.master.to(torch.bfloat16).float() - self.replica.float()
                q = quantize(diff, 4, ALIGN, generator=self.gen, nonfinite="propagate")
                self.replica.copy_((dequantize(q) + self.replica.float()).to(torch.bfloat16))
            else:
                self.replica.copy_(self.master)


ARMS = ("baseline", "sdp4bit fused", "sdp4bit torch")


def step_table(args, device) -> dict:
    t = Trainer(device, args.smoke)
    for arm in ARMS:
        t.step(arm)
    times = {arm: [] for arm in ARMS}
    for _ in range(args.steps):
        for arm in ARMS:  # (interleaved: drift shows in every arm alike)
            sync(device)
            t0 = time.perf_counter()
            t.step(arm)
            sync(device)
            times[arm].append(time.perf_counter() - t0)
    base = statistics.median(times["baseline"])
    rows = {}
    for arm, ts in times.items():
        med = statistics.median(ts)
        rows[arm] = {"step_s": med, "min_s": min(ts), "max_s": max(ts), "tokens_per_s": t.tokens / med,
                     "added": med / base - 1}
        print(f"{arm:16s} {1e3 * med:8.1f} ms/step  {100 * (med / base - 1):+6.1f} %", flush=True)
    return {"params": t.n, "tokens_per_step": t.tokens, "arms": rows}


def model_table(kernel_rates: dict) -> dict:
    cluster, work = paper_setting("h800")
    p = work.params / work.tensor_parallel
    out = {}
    for arm in ("sdp4bit", "qwz_qgz"):
        cfg = CommConfig.arm(arm, ranks_per_node=PER_NODE)
        q = effective_quant_gbps(cfg, p, WORLD, PER_NODE, kernel_rates)
        fast = replace(cluster, quant_gbps=q)
        out[arm] = {"quant_gbps": q, "speedup": speedup(fast, work, cfg),
                    "quant_s": step_time(fast, work, cfg).quant, "step_s": step_time(fast, work, cfg).total}
    return out


def render(report: dict) -> str:
    k = report["kernels"]
    lines = [f"SDP4Bit's stages on {report['device']}, torch {report['torch']}", "",
             f"Fused kernels ({report['numel']} fp32 values a call, median of {report['repeats']}; a device-to-device "
             f"copy of the same values: {k['copy_gbps']:.1f} GB/s):", "",
             "| kernel | GB/s of fp32 input | % of copy |", "|---|---|---|"]
    lines += [f"| {name} | {r:.1f} | {100 * r / k['copy_gbps']:.1f} |" for name, r in k["kernels_gbps"].items()]
    s = report["step"]
    lines += ["", f"Training step, GPT of {s['params'] / 1e6:.0f} M parameters (bf16), {s['tokens_per_step']} tokens "
              f"a step, median of {report['steps']} steps (arms interleaved):", "",
              "| arm | ms / step | min-max | tokens/s | added to the step |", "|---|---|---|---|---|"]
    lines += [f"| {arm} | {1e3 * r['step_s']:.1f} | {1e3 * r['min_s']:.1f}-{1e3 * r['max_s']:.1f} | "
              f"{r['tokens_per_s']:.0f} | {100 * r['added']:+.1f} % |" for arm, r in s["arms"].items()]
    lines += ["", "strata.comm.model, the paper's speed test (GPT 6.7B, 128 H800, nominal links) with the measured "
              "kernels:", "", "| arm | effective quant GB/s | quant ms / step | projected speedup |",
              "|---|---|---|---|"]
    lines += [f"| {arm} | {m['quant_gbps']:.0f} | {1e3 * m['quant_s']:.1f} | {m['speedup']:.2f}x |"
              for arm, m in report["model"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--numel", type=int, default=1 << 28, help="values per kernel call (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="small sizes on the CPU (checks the script)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.numel, args.repeats, args.steps = 1 << 16, 2, 2
    device = device_for(args.smoke, "sdp4bit_gpu_step.py")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)",
              "torch": torch.__version__, "numel": args.numel, "repeats": args.repeats, "steps": args.steps}
    report["kernels"] = kernel_table(args, device)
    report["step"] = step_table(args, device)
    report["model"] = model_table(report["kernels"]["kernels_gbps"])
    name = "sdp4bit_gpu_step_smoke" if args.smoke else "sdp4bit_gpu_step"
    atomic_write(args.out / f"{name}.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / f"{name}.md", render(report))
    print(render(report))
    return report


if __name__ == "__main__":
    main()
