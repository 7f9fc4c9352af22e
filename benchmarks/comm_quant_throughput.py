"""Throughput of strata.comm's quantization kernels on this CPU or a GPU: PyTorch ops, and the fused kernels.

For each operation the median wall time over ``--repeats`` runs on ``--numel`` fp32 values is converted to GB/s of
fp32 data (``4 * numel / time``: the bytes a quantizer reads, or a dequantizer writes), so the figures plug into
``strata.comm.model.Cluster.quant_gbps``. Operations: stochastic and round-to-nearest quantization to int4 (group
2048, the weight path; group 128, the inter-node gradient path) and int8 (group 128, the intra-node gradient path),
dequantization, the 32-point Hadamard transform and its inverse, int4 packing and unpacking, and the two fused
steps of the two-level reduce-scatter done with these ops (Hadamard + int8 quantize; dequantize + sum + int4
requantize of 2 received copies).

Fused kernels (strata.comm.kernels: Triton with ``--device cuda``, numba on the CPU): each SDP4Bit stage timed as one
fused kernel and as the PyTorch chain it replaces
(qWD: bf16 rounding, difference, int4 g2048 quantization; TLq-HS stage 1: Hadamard + int8 g128; stage 2: 2 int8 g128
copies dequantized, summed, int4 g128 quantized; receiving side: int4 g2048 dequantized and added into a bf16 replica),
beside a device-to-device copy of ``numel`` fp32 values measured in the same run: GB/s (same unit) and % of the copy.

Writes ``comm_quant_throughput.json`` and ``.md`` to ``--out`` (atomically; ``comm_quant_throughput_cuda.*`` with
``--device cuda``, each timing up to the end of the GPU's work). Run from the repository root::

    .venv/bin/python benchmarks/comm_quant_throughput.py                 # 1 thread, 4M values
    .venv/bin/python benchmarks/comm_quant_throughput.py --threads 2 --numel 16777216
    .venv/bin/python benchmarks/comm_quant_throughput.py --device cuda --numel 268435456
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, timed  # noqa: E402

from strata.atomic import atomic_write  # noqa: E402
from strata.comm import dequantize, hadamard32, inverse_hadamard32, pack_int4, quantize, unpack_int4  # noqa: E402


def operations(x: torch.Tensor, gen: torch.Generator) -> dict:
    q4w = quantize(x, 4, 2048, generator=gen)
    q4g = quantize(x, 4, 128, generator=gen)
    q8g = quantize(x, 8, 128, generator=gen)
    codes = torch.randint(-7, 8, (x.numel(),), generator=gen, device=x.device).to(torch.int8)
    packed = pack_int4(codes)
    two = torch.cat([x, x])  # two received copies of a chunk

    def requant():
        s = dequantize(quantize(two, 8, 128, generator=gen)).view(2, -1).sum(0)
        return quantize(s, 4, 128, generator=gen)

    return {
        "quantize int4 g2048 stochastic (qWD)": lambda: quantize(x, 4, 2048, generator=gen),
        "quantize int4 g2048 nearest": lambda: quantize(x, 4, 2048, stochastic=False),
        "quantize int4 g128 stochastic": lambda: quantize(x, 4, 128, generator=gen),
        "quantize int8 g128 stochastic": lambda: quantize(x, 8, 128, generator=gen),
        "dequantize int4 g2048": lambda: dequantize(q4w),
        "dequantize int4 g128": lambda: dequantize(q4g),
        "dequantize int8 g128": lambda: dequantize(q8g),
        "hadamard32 forward": lambda: hadamard32(x),
        "hadamard32 inverse": lambda: inverse_hadamard32(x),
        "pack int4": lambda: pack_int4(codes),
        "unpack int4": lambda: unpack_int4(packed),
        "hadamard + quantize int8 g128 (TLq-HS stage 1)": lambda: quantize(hadamard32(x), 8, 128, generator=gen),
        "2x dequantize int8 + sum + quantize int4 (stage 2, per output value)": requant,
    }


def fused_operations(x: torch.Tensor, gen: torch.Generator) -> dict:
    """``{stage: (fused kernel, PyTorch chain)}``, callables on ``numel`` values (stage 2: ``numel`` outputs)."""
    from strata.comm import kernels

    replica = (x + 1e-3 * torch.randn(x.numel(), generator=gen, device=x.device)).to(torch.bfloat16)
    q8 = [quantize(x, 8, 128, generator=gen) for _ in range(2)]  # the two copies stage 2 receives
    codes8, scales8 = torch.stack([q.codes for q in q8]), torch.stack([q.scales for q in q8])
    q4w = quantize(x, 4, 2048, generator=gen)

    def receive_torch():
        replica.copy_((dequantize(q4w) + replica.float()).to(torch.bfloat16))

    def stage2_torch():
        return quantize(torch.stack([dequantize(q) for q in q8]).sum(0), 4, 128, generator=gen)

    return {
        "qWD: bf16 difference + quantize int4 g2048 stochastic": (
            lambda: kernels.quantize(x, 4, 2048, seed=gen, subtract=replica, round_to=torch.bfloat16),
            lambda: quantize(x.to(torch.bfloat16).float() - replica.float(), 4, 2048, generator=gen)),
        "TLq-HS stage 1: hadamard + quantize int8 g128 stochastic": (
            lambda: kernels.quantize(x, 8, 128, seed=gen, hadamard=True),
            lambda: quantize(hadamard32(x), 8, 128, generator=gen)),
        "stage 2: 2x dequantize int8 g128 + sum + quantize int4 g128": (
            lambda: kernels.requantize_sum(codes8, scales8, x.numel(), 8, 128, 4, 128, seed=gen),
            stage2_torch),
        "receive: dequantize int4 g2048 + add into bf16 replica": (
            lambda: kernels.dequantize_add(q4w.codes.view(1, -1), q4w.scales.view(1, -1), x.numel(), 4, 2048, replica),
            receive_torch),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--numel", type=int, default=1 << 22, help="fp32 values per call (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=7, help="timed runs per operation (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device of the data, e.g. cuda (default: %(default)s)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(args.numel, generator=gen, device=device) * 0.02
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def gbps_of(op) -> tuple[float, float]:
        def fn():
            out = op()
            sync()  # a GPU kernel is timed to its end, not to its launch
            return out
        fn()  # warm-up (and compilation)
        t, _ = timed(fn, args.repeats)
        return t, 4 * args.numel / t / 1e9

    rows = {}
    for name, op in operations(x, gen).items():
        t, gbps = gbps_of(op)
        rows[name] = {"seconds": t, "gb_per_s": round(gbps, 3), "values_per_s": round(args.numel / t)}
        print(f"{name:70s} {gbps:7.2f} GB/s  ({t * 1e3:.1f} ms)", flush=True)
    fused = {}
    if device.type in ("cuda", "cpu"):  # (the fused kernels: Triton on CUDA, numba on the CPU)
        dst = torch.empty_like(x)
        _, copy_gbps = gbps_of(lambda: dst.copy_(x))
        print(f"{'device-to-device copy of numel fp32 values':70s} {copy_gbps:7.2f} GB/s", flush=True)
        for name, (kernel, chain) in fused_operations(x, gen).items():
            (tf, ff), (tu, fu) = gbps_of(kernel), gbps_of(chain)
            fused[name] = {"fused_seconds": tf, "fused_gb_per_s": round(ff, 3), "torch_seconds": tu,
                           "torch_gb_per_s": round(fu, 3), "copy_gb_per_s": round(copy_gbps, 3),
                           "fused_pct_of_copy": round(100 * ff / copy_gbps, 2),
                           "torch_pct_of_copy": round(100 * fu / copy_gbps, 2), "speedup": round(tu / tf, 3)}
            print(f"{name:70s} fused {ff:7.2f} GB/s ({100 * ff / copy_gbps:5.1f} % of copy), torch {fu:7.2f} GB/s "
                  f"({100 * fu / copy_gbps:5.1f} %), x{tu / tf:.2f}", flush=True)
    where = "" if device.type == "cpu" else f", device {torch.cuda.get_device_name(device)}"
    report = {"numel": args.numel, "threads": args.threads, "device": str(device), "repeats": args.repeats,
              "machine": machine(),
              "torch": torch.__version__, "unit": "GB/s of fp32 values (4 bytes per value), median wall time",
              "operations": rows, "fused": fused}
    md = [f"Quantization kernels on {machine()}{where}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{args.numel} fp32 values per call (GB/s of fp32 data, median of {args.repeats}).", "",
          "| operation | GB/s | ms |", "|---|---|---|"]
    md += [f"| {k} | {v['gb_per_s']:.2f} | {v['seconds'] * 1e3:.1f} |" for k, v in rows.items()]
    if fused:
        copy = next(iter(fused.values()))["copy_gb_per_s"]
        md += ["", f"Fused kernels (strata.comm.kernels, {'numba' if device.type == 'cpu' else 'Triton'}) "
               f"against the PyTorch chains they replace; a device-to-device copy of the same {args.numel} fp32 "
               f"values ran at {copy:.2f} GB/s.", "",
               "| stage | fused GB/s | % of copy | PyTorch GB/s | % of copy | speedup |", "|---|---|---|---|---|---|"]
        md += [f"| {k} | {v['fused_gb_per_s']:.2f} | {v['fused_pct_of_copy']:.1f} | {v['torch_gb_per_s']:.2f} | "
               f"{v['torch_pct_of_copy']:.1f} | {v['speedup']:.2f} |" for k, v in fused.items()]
    stem = "comm_quant_throughput" + ("" if device.type == "cpu" else f"_{device.type}")
    atomic_write(args.out / f"{stem}.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / f"{stem}.md", "\n".join(md) + "\n")
    return report


if __name__ == "__main__":
    main()
