#!/usr/bin/env python3
"""Peak memory of the safetensors round trip: ``compress_safetensors`` and
``decompress_safetensors``, full and as a delta, each in a fresh process.

Models: the fp32 all-MiniLM-L6-v2 of ../shared/data/llm (if present) and a synthetic bf16
transformer (fp32 norms, an int64 buffer) of ``--synthetic-mb`` megabytes. For each, a
perturbed copy (a tenth of the weights nudged by one ulp, as a training step would) is
compressed as a delta against the strata file of the first. Each operation runs ``--repeats``
times, every time in a new Python process that first warms up on a tiny file (imports, compiled
kernels); its peak resident memory beyond that point (``VmHWM`` after resetting it through
``/proc/self/clear_refs``, minus the resident set before the call; page cache is not counted)
is divided by the size of the safetensors file. Prints a table and writes
benchmarks/results/checkpoint_memory.{md,json} (medians).

    .venv/bin/python benchmarks/checkpoint_memory.py [--synthetic-mb 256] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, SHARED, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402

MINILM = SHARED / "data" / "llm" / "all-MiniLM-L6-v2.fp32.safetensors"

_CHILD = """
import json, os, sys, time
from strata import checkpoint as ck

def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) * 1024

warm = {warm!r}
ck.compress_safetensors(warm + ".safetensors", warm + ".strata")
ck.decompress_safetensors(warm + ".strata", warm + ".out")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := the current resident set
before = status("VmRSS")
t = time.perf_counter()
if {op!r} == "compress":
    ck.compress_safetensors({src!r}, {dst!r}, base={base!r})
else:
    ck.decompress_safetensors({src!r}, {dst!r})
seconds = time.perf_counter() - t
print(json.dumps(dict(peak_added=status("VmHWM") - before, seconds=seconds)))
"""


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple, bytes]]) -> None:
    """A safetensors file of ``name -> (dtype name, shape, bytes)``, in that order."""
    meta, pos = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        meta[name] = dict(dtype=dtype, shape=list(shape), data_offsets=[pos, pos + len(data)])
        pos += len(data)
    head = json.dumps(meta, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for _, _, data in tensors.values():
            f.write(data)


def bf16(a: np.ndarray) -> bytes:
    """bf16 bytes of a float32 array (round to nearest even)."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def synthetic(path: Path, mb: int, seed: int = 0) -> None:
    """A bf16 transformer of about ``mb`` MB: d = 1024, layers of four attention and two MLP
    matrices (weights ~ N(0, 0.02)), fp32 layer norms, an int64 position buffer."""
    rng = np.random.default_rng(seed)
    d, tensors = 1024, {}
    tensors["embed.weight"] = ("BF16", (8192, d), bf16(rng.normal(0, 0.02, (8192, d))))
    tensors["position_ids"] = ("I64", (1, 512), np.arange(512, dtype="<i8").tobytes())
    layer, size = 0, 16 << 20
    while size < mb << 20:
        p = f"layers.{layer}."
        for m in ("q", "k", "v", "o"):
            tensors[p + m + ".weight"] = ("BF16", (d, d), bf16(rng.normal(0, 0.02, (d, d))))
        tensors[p + "up.weight"] = ("BF16", (4 * d, d), bf16(rng.normal(0, 0.02, (4 * d, d))))
        tensors[p + "down.weight"] = ("BF16", (d, 4 * d), bf16(rng.normal(0, 0.02, (d, 4 * d))))
        tensors[p + "norm.weight"] = ("F32", (d,), (1 + rng.normal(0, 0.05, d)).astype("<f4").tobytes())
        layer, size = layer + 1, size + 24 * d * d + 4 * d
    write_safetensors(path, tensors)


def perturbed(src: Path, dst: Path, seed: int = 1) -> None:
    """A copy of a safetensors file where a tenth of the 2- and 4-byte elements change by one
    in their lowest bit (a training step's small updates)."""
    data = bytearray(src.read_bytes())
    (n,) = struct.unpack_from("<Q", data, 0)
    meta = json.loads(data[8:8 + n])
    rng = np.random.default_rng(seed)
    for name, e in meta.items():
        if name == "__metadata__" or e["dtype"] not in ("BF16", "F16", "F32"):
            continue
        a, b = e["data_offsets"]
        size = 4 if e["dtype"] == "F32" else 2
        view = np.frombuffer(data, np.uint8, b - a, 8 + n + a)[::size]
        hit = rng.random(view.size) < 0.1
        view[hit] ^= 1
    dst.write_bytes(data)


def child(op: str, src: Path, dst: Path, base: Path | None, warm: Path) -> dict:
    code = _CHILD.format(op=op, src=str(src), dst=str(dst), base=None if base is None else str(base),
                         warm=str(warm))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synthetic-mb", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoint_memory")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        warm = tmp / "warm"
        write_safetensors(warm.with_suffix(".safetensors"),
                          {"w": ("BF16", (64, 64), bf16(np.ones((64, 64)))), "b": ("F32", (64,), bytes(256))})
        models = {}
        if MINILM.exists():
            models["all-MiniLM-L6-v2 fp32"] = MINILM
        models[f"synthetic bf16, {args.synthetic_mb} MB"] = tmp / "synthetic.safetensors"
        synthetic(tmp / "synthetic.safetensors", args.synthetic_mb)
        for label, src in models.items():
            step = tmp / "step.safetensors"
            perturbed(src, step)
            size = src.stat().st_size
            full, delta = tmp / "full.strata", tmp / "delta.strata"
            cases = [("compress", "full", src, full, None), ("decompress", "full", full, tmp / "out", None),
                     ("compress", "delta", step, delta, full), ("decompress", "delta", delta, tmp / "out", None)]
            for op, kind, a, b, base in cases:
                runs = [child(op, a, b, base, warm) for _ in range(args.repeats)]
                peak = statistics.median(r["peak_added"] for r in runs)
                secs = statistics.median(r["seconds"] for r in runs)
                if op == "decompress":
                    assert (tmp / "out").read_bytes() == (src if kind == "full" else step).read_bytes()
                rows.append(dict(model=label, file_MB=size / 1e6, op=op, kind=kind, peak_added_MB=peak / 1e6,
                                 ratio=peak / size, seconds=secs, strata_MB=(full if kind == "full" else delta)
                                 .stat().st_size / 1e6))
                r = rows[-1]
                print(f"{label:28s} {op:10s} {kind:5s} peak +{r['peak_added_MB']:7.1f} MB = {r['ratio']:.2f} x "
                      f"file   {secs:6.2f} s", flush=True)
    lines = [f"Machine: {machine()}. Each operation in a fresh process after a warm-up on a tiny file; peak "
             f"resident memory it adds (VmHWM reset before the call, page cache not counted) over the size of "
             f"the safetensors file; medians of {args.repeats} runs. Delta: the model with a tenth of its "
             f"float elements changed in the lowest bit, against the full snapshot.", "",
             "| model | file MB | operation | snapshot | peak added MB | x file size | seconds |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['file_MB']:.1f} | {r['op']} | {r['kind']} | {r['peak_added_MB']:.1f} | "
              f"{r['ratio']:.2f} | {r['seconds']:.2f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out.with_suffix(".md"), text)
    atomic_write(args.out.with_suffix(".json"), json.dumps(dict(machine=machine(), repeats=args.repeats, rows=rows),
                                                           indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
