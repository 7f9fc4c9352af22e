"""Checkpointing GPU training with strata (issue 37): how long ``save()`` blocks the loop, how long
until the file is written, and the training throughput with a checkpoint every 10 steps, for
each method side by side in one run; then the segment codec's encode/decode speed on 1..16
threads beside ZipNN. Runs where torch sees a GPU (``--smoke`` runs it small on the CPU, to
check the script).

1. **A training state on the GPU** (default 2.5 GB: 100 bf16 weight tensors of 2.5 M values
   and fp32 ``exp_avg``/``exp_avg_sq`` of the same shapes), saved ``--saves`` times by each
   method; blocked = wall time of the call that starts the save, written = until the file is
   complete (medians, after one warm-up save each):
   ``pinned copy`` (preallocated pinned host buffers, ``copy_(non_blocking=True)``, then
   synchronize: the floor), ``torch.save`` (synchronous, to disk), DCP ``async_save`` (torch's
   FileSystemWriter), strata ``AsyncCheckpointer`` eager and lazy (lazy: ``save()`` returns once
   the copies are issued; the capture is waited for before the state changes).
2. **Training**: a GPT of about 300 M parameters (bf16, AdamW), ``--steps`` steps per method
   after warm-up, a checkpoint of model and optimizer every 10 steps; tokens/s against the same
   loop without checkpoints, measured in the same run (lazy: the optimizer hook of
   ``guard()`` waits for a capture still running).
3. **Codec threads**: strata's segment codec (``strata.checkpoint.codec``) on ``--codec-mib``
   MiB of bf16 weights and of fp32 values taken from the state, GiB/s of original bytes on 1,
   2, 4, 8, 16 threads (medians of 3), with ZipNN (``zipnn``, if installed) beside it.

Writes ``OUT/checkpoint_gpu.{json,md}``::

    python benchmarks/checkpoint_gpu.py --out $OUT [--state-gb 2.5] [--steps 40] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.gpu_gpt import device_for, gpt, loss_fn  # noqa: E402

import strata.checkpoint as sc  # noqa: E402
from strata.checkpoint import codec  # noqa: E402

EVERY = 10  # steps between checkpoints in the training loop


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_state(gb: float, device) -> dict:
    """100 (or fewer) bf16 weights and their fp32 Adam moments, ``gb`` GB in all."""
    per = 10  # bytes per value: bf16 weight + two fp32 moments
    n_tensors = 100
    numel = max(1, int(gb * 1e9 / per / n_tensors))
    g = torch.Generator(device=device).manual_seed(0)
    state = {"model": {}, "optim": {}}
    for i in range(n_tensors):
        w = torch.randn(numel, device=device, generator=g) * 0.02
        state["model"][f"layer{i}.weight"] = w.bfloat16()
        state["optim"][f"layer{i}"] = {"exp_avg": w * 1e-3, "exp_avg_sq": (w * 1e-3).square()}
    return state


def tensors_of(state) -> list:
    out = []
    for v in state.values():
        out += tensors_of(v) if isinstance(v, dict) else [v] if isinstance(v, torch.Tensor) else []
    return out


class Method:
    """A way to save: ``start(state, path)`` returns when the loop may go on (or, lazy, when the
    state may not change yet: ``before_change()``); ``finish()`` waits until the file is written."""

    def __init__(self, name, device, folder):
        self.name, self.device, self.folder = name, device, folder
        self.pending = None
        if name == "pinned copy":
            self.host = None
        elif name.startswith("strata"):
            self.ckpt = sc.AsyncCheckpointer(full_every=1, lazy=name.endswith("lazy"))

    def start(self, state, i):
        path = self.folder / f"{self.name.replace(' ', '_')}_{i % 2}"
        if self.name == "pinned copy":
            ts = tensors_of(state)
            if self.host is None:
                self.host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=self.device.type == "cuda") for t in ts]
            for h, t in zip(self.host, ts):
                h.copy_(t, non_blocking=True)
            sync(self.device)
        elif self.name == "torch.save":
            torch.save(state, path)
        elif self.name == "dcp async_save":
            import torch.distributed.checkpoint as dcp

            self.pending = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(str(path)))
        else:
            self.ckpt.save(state, path.with_suffix(".strata"))

    def before_change(self):
        if self.name.startswith("strata"):
            self.ckpt.wait_for_capture()

    def finish(self):
        if self.pending is not None:
            self.pending.result()
            self.pending = None
        if self.name.startswith("strata"):
            self.ckpt.wait()

    def close(self):
        self.finish()
        if self.name.startswith("strata"):
            self.ckpt.close()


METHODS = ("pinned copy", "torch.save", "dcp async_save", "strata eager", "strata lazy")


def blocking_table(args, device, folder) -> list[dict]:
    state = training_state(args.state_gb, device)
    nbytes = sum(t.numel() * t.element_size() for t in tensors_of(state))
    rows = []
    for name in METHODS:
        m = Method(name, device, folder)
        blocked, written = [], []
        for i in range(args.saves + 1):
            sync(device)
            t0 = time.perf_counter()
            m.start(state, i)
            t1 = time.perf_counter()
            m.before_change()
            m.finish()
            t2 = time.perf_counter()
            if i:  # (the first save allocates)
                blocked.append(t1 - t0)
                written.append(t2 - t0)
        m.close()
        rows.append(dict(method=name, state_bytes=nbytes, blocked_s=statistics.median(blocked),
                         written_s=statistics.median(written), saves=len(blocked)))
        print(f"{name:16s} blocks {rows[-1]['blocked_s'] * 1e3:9.2f} ms   written after {rows[-1]['written_s']:.3f} s",
              flush=True)
    return rows


def training_table(args, device, folder) -> list[dict]:
    model, vocab = gpt(device, args.smoke)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n_params = sum(p.numel() for p in model.parameters())
    batch, seq = (2, 64) if args.smoke else (8, 512)
    loss_of = loss_fn(model, vocab, batch, seq, device, torch.Generator(device=device).manual_seed(1))

    def step():
        loss = loss_of()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    rows = []
    for name in ("no checkpoint",) + METHODS[1:] + ("no checkpoint, again",):
        m = None if name.startswith("no checkpoint") else Method(name, device, folder)
        hook = m.ckpt.guard(opt) if m is not None and name == "strata lazy" else None
        if m is not None and name.startswith("strata"):  # (pinned buffers allocated before the loop, as DCP's
            m.ckpt.reserve({"model": model.state_dict(), "optim": opt.state_dict()})  # stager does on its first)
        sync(device)
        t0 = time.perf_counter()
        for s in range(args.steps):
            if m is not None and s % EVERY == 0:
                if name == "dcp async_save":
                    m.finish()  # (one DCP save in flight at a time)
                m.start({"model": model.state_dict(), "optim": opt.state_dict()}, s // EVERY)
            step()  # (strata lazy: the optimizer hook waits for a capture still running)
        sync(device)
        elapsed = time.perf_counter() - t0
        if m is not None:
            m.close()
        if hook is not None:
            hook.remove()
        rows.append(dict(method=name, params=n_params, steps=args.steps, seconds=elapsed,
                         tokens_per_s=args.steps * batch * seq / elapsed))
        print(f"{name:16s} {rows[-1]['tokens_per_s']:10.0f} tokens/s", flush=True)
    base = (rows[0]["tokens_per_s"] + rows[-1]["tokens_per_s"]) / 2  # (first and last: drift shows)
    for r in rows:
        r["share_of_no_checkpoint"] = r["tokens_per_s"] / base
    return rows


def codec_table(args, device) -> list[dict]:
    state = training_state(max(args.codec_mib * 3 / 1e3, 0.01), device)
    ts = tensors_of(state)
    bf16 = torch.cat([t.reshape(-1) for t in ts if t.dtype == torch.bfloat16]).cpu().view(torch.uint8).numpy()
    fp32 = torch.cat([t.reshape(-1) for t in ts if t.dtype == torch.float32]).cpu().view(torch.uint8).numpy()
    n = args.codec_mib << 20
    data = {"bf16": (bf16[:n], "BF16"), "fp32": (fp32[:n], "F32")}
    try:
        import zipnn
    except ImportError:
        zipnn = None
    rows = []
    for label, (raw, dtype) in data.items():
        for threads in args.threads:
            enc, dec = [], []
            for _ in range(3):
                t0 = time.perf_counter()
                blob = codec.encode(raw, dtype, workers=threads)
                t1 = time.perf_counter()
                codec.decode(blob, workers=threads)
                t2 = time.perf_counter()
                enc.append(t1 - t0)
                dec.append(t2 - t1)
            row = dict(data=label, threads=threads, bytes=int(raw.size), ratio=raw.size / len(blob),
                       encode_gib_s=raw.size / statistics.median(enc) / 2**30,
                       decode_gib_s=raw.size / statistics.median(dec) / 2**30)
            if zipnn is not None:
                z = zipnn.ZipNN(bytearray_dtype="bfloat16" if label == "bf16" else "float32", threads=threads)
                ze, zd = [], []
                for _ in range(3):
                    t0 = time.perf_counter()
                    zb = z.compress(raw.tobytes())
                    t1 = time.perf_counter()
                    z.decompress(zb)
                    ze.append(t1 - t0)
                    zd.append(time.perf_counter() - t1)
                row.update(zipnn_ratio=raw.size / len(zb), zipnn_encode_gib_s=raw.size / statistics.median(ze) / 2**30,
                           zipnn_decode_gib_s=raw.size / statistics.median(zd) / 2**30)
            rows.append(row)
            z = f"  zipnn {row['zipnn_encode_gib_s']:.2f} / {row['zipnn_decode_gib_s']:.2f}" if zipnn else ""
            print(f"{label} {threads:2d} threads: encode {row['encode_gib_s']:.2f} decode {row['decode_gib_s']:.2f} "
                  f"GiB/s{z}", flush=True)
    return rows


def render(report) -> str:
    train = report["training"]
    lines = ["# Checkpointing on a GPU (`benchmarks/checkpoint_gpu.py`)", "",
             f"{report['device']}, {report['cpus']} CPUs, torch {report['torch']}; state "
             f"{report['blocking'][0]['state_bytes'] / 1e9:.2f} GB.", "",
             "| method | save() blocks (ms) | written after (s) |", "|---|---|---|"]
    lines += [f"| {r['method']} | {r['blocked_s'] * 1e3:.2f} | {r['written_s']:.3f} |" for r in report["blocking"]]
    lines += ["", f"Training, GPT of {train[0]['params'] / 1e6:.0f} M parameters (bf16, AdamW), a checkpoint every "
              f"{EVERY} steps (share: of the mean of the two runs without):", "",
              "| method | tokens/s | share of no checkpoint |", "|---|---|---|"]
    lines += [f"| {r['method']} | {r['tokens_per_s']:.0f} | {r['share_of_no_checkpoint']:.3f} |" for r in train]
    lines += ["", "Segment codec, GiB/s of original bytes (medians of 3):", "",
              "| data | threads | strata encode | decode | ratio | ZipNN encode | decode | ratio |",
              "|---|---|---|---|---|---|---|---|"]
    for r in report["codec"]:
        z = "- | - | -"
        if "zipnn_ratio" in r:
            z = f"{r['zipnn_encode_gib_s']:.2f} | {r['zipnn_decode_gib_s']:.2f} | {r['zipnn_ratio']:.4f}"
        lines.append(f"| {r['data']} | {r['threads']} | {r['encode_gib_s']:.2f} | {r['decode_gib_s']:.2f} | "
                     f"{r['ratio']:.4f} | {z} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--state-gb", type=float, default=2.5)
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--codec-mib", type=int, default=512)
    ap.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16])
    ap.add_argument("--smoke", action="store_true", help="small sizes on the CPU (checks the script)")
    args = ap.parse_args()
    if args.smoke:
        args.state_gb, args.steps, args.codec_mib, args.threads = 0.01, 20, 4, [1, 2]
    device = device_for(args.smoke, "checkpoint_gpu.py")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        folder = Path(tmp)
        report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)",
                  "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__, "smoke": args.smoke}
        report["blocking"] = blocking_table(args, device, folder)
        report["training"] = training_table(args, device, folder)
        report["codec"] = codec_table(args, device)
    name = "checkpoint_gpu_smoke" if args.smoke else "checkpoint_gpu"
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{name}.md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
