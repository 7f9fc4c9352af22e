#!/usr/bin/env python3
"""strata.checkpoint beside zipnn, zstd (3, 19), bz2, lzma and byte grouping + zstd, measured by
the anchors' own harness (../shared/bench/anchors_lossless.py: same segmentation of every file
by dtype, same library calls, byte-identical rebuild checked) in one process, on:

* the real fp32 model all-MiniLM-L6-v2 (../shared/data/llm) and its bf16 conversion
  (round to nearest even);
* training snapshots of the tiny GPT (benchmarks/train_tiny_gpt.py; trained first if its
  snapshots are missing): fp32 weights + Adam states, and bf16 weight copies.

Then strata against zipnn on one and on two threads each (``threads_table``: the same
segments, both codecs in one process, runs interleaved, medians of at least 5), and
strata-only figures: XOR deltas between consecutive snapshots against no delta, peak memory
(fresh processes), and how long ``AsyncCheckpointer.save()`` blocks against a plain host copy
of the same state. Writes benchmarks/results/checkpoint_vs_anchors.{md,json}.

    .venv/bin/python benchmarks/checkpoint_vs_anchors.py [--repeats 3] [--snapshots 4]
    .venv/bin/python benchmarks/checkpoint_vs_anchors.py --threads-only   # the thread table alone, printed
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402,F401
from common import ROOT, SHARED, geomean, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.checkpoint import codec  # noqa: E402

METHODS = ["zipnn", "zstd-3", "zstd-19", "bz2-9", "lzma-6", "bg-zstd3"]
SNAPSHOTS = ROOT / "benchmarks" / "results" / "tiny_gpt_snapshots"


def harness():
    sys.path.insert(0, str(SHARED / "bench"))
    import anchors_lossless

    return anchors_lossless


def bf16_copy(src: Path, dst: Path) -> None:
    """The fp32 safetensors model with every F32 tensor rounded to bf16 (nearest even)."""
    import torch
    from safetensors.torch import load_file, save_file

    sd = load_file(src)
    save_file({k: (v.to(torch.bfloat16) if v.dtype == torch.float32 else v) for k, v in sd.items()}, dst)


def snapshots(n: int) -> list[Path]:
    files = sorted(SNAPSHOTS.glob("step_*.fp32.safetensors"))
    if len(files) < 2:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_tiny_gpt.py")], check=True)
        files = sorted(SNAPSHOTS.glob("step_*.fp32.safetensors"))
    picked = files[-n:]
    return picked + [Path(str(p).replace(".fp32.", ".bf16.")) for p in picked]


def segments(A, path: Path):
    item = A.load_item(path, "dtype")
    return {s.dtype: A.segment_bytes(item, s) for s in item.segments}


def deltas(A, files: list[Path], repeats: int) -> list[dict]:
    """strata on consecutive snapshots: each coded alone, and as the XOR against the previous."""
    rows = []
    for prev, cur in zip(files, files[1:]):
        a, b = segments(A, prev), segments(A, cur)
        n = sum(len(v) for v in b.values())
        full = sum(len(codec.encode(v, k if k != "HEADER" else "U8")) for k, v in b.items())
        t = []
        size = 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            size = sum(len(codec.encode(v, k if k != "HEADER" else "U8",
                                        base=a[k] if k in a and len(a[k]) == len(v) else None))
                       for k, v in b.items())
            t.append(time.perf_counter() - t0)
        rows.append(dict(base=prev.name, file=cur.name, bytes=n, ratio_full=n / full, ratio_delta=n / size,
                         delta_comp_GiBps=n / 2**30 / statistics.median(t)))
    return rows


def zipnn_method(A, threads: int):
    """The harness's zipnn method (ZipNN for BF16/F16/F32 segments with its defaults, zstd-3
    for the others) with ``threads`` threads: ``(compress, decompress)``."""
    from zipnn import ZipNN

    objs = {dt: ZipNN(input_format="byte", bytearray_dtype=z, threads=threads) for dt, z in A.ZIPNN_DTYPES.items()}
    zstd = A.make_method("zstd-3", threads)

    def compress(d, dt):  # ZipNN reorders bits in its input: callers pass a private copy
        return bytes(objs[dt].compress(d)) if dt in objs else zstd.compress(d, dt)

    def decompress(b, dt, n):
        return objs[dt].decompress(b) if dt in objs else zstd.decompress(b, dt, n)

    return compress, decompress


def threads_table(A, files: list[Path], repeats: int, threads=(1, 2)) -> list[dict]:
    """strata's segment codec and zipnn on the same segments, with the same number of threads
    each (strata: ``workers``; zipnn: ``ZipNN(threads=...)``, zstd's compression threads),
    interleaved run by run in this process; medians of ``repeats`` (at least 5) runs, GiB/s of
    original bytes, by the wall clock and by the process's CPU time (which a loaded machine
    disturbs less: on one thread it is the speed on an idle core). Every round trip is checked
    once."""
    rows = []
    for f in files:
        item = A.load_item(f, "dtype")
        segs = [(s.dtype, bytes(A.segment_bytes(item, s))) for s in item.segments]
        for t in threads:
            rows.append(_thread_row(A, f.name, segs, t, max(5, repeats)))
            r = rows[-1]
            print(f"{f.name} {t} thread(s): decode strata {r['s_dec_GiBps']:.3f} zipnn {r['z_dec_GiBps']:.3f} GiB/s "
                  f"(CPU {r['s_dec_cpu_GiBps']:.3f}, {r['z_dec_cpu_GiBps']:.3f}), encode strata {r['s_enc_GiBps']:.3f} "
                  f"zipnn {r['z_enc_GiBps']:.3f} GiB/s (CPU {r['s_enc_cpu_GiBps']:.3f}, {r['z_enc_cpu_GiBps']:.3f})",
                  flush=True)
    return rows


def _thread_row(A, name: str, segs: list, t: int, repeats: int) -> dict:
    zc, zd = zipnn_method(A, t)

    def s_enc():
        return [codec.encode(d, dt if dt in codec.DTYPES else "U8", workers=t) for dt, d in segs]

    def s_dec(blobs):
        return [codec.decode(b, workers=t) for b in blobs]

    def z_enc(copies):
        return [zc(c, dt) for (dt, _), c in zip(segs, copies)]

    def z_dec(blobs):
        return [zd(b, dt, len(d)) for (dt, d), b in zip(segs, blobs)]

    sb, zb = s_enc(), z_enc([bytearray(d) for _, d in segs])
    for (_, d), a, b in zip(segs, s_dec(sb), z_dec(zb)):
        if a.tobytes() != d or bytes(b) != d:
            raise SystemExit(f"{name}: round trip mismatch")
    keys = ("s_dec", "z_dec", "s_enc", "z_enc")
    wall, cpu = {k: [] for k in keys}, {k: [] for k in keys}
    for _ in range(repeats):
        copies = [bytearray(d) for _, d in segs]  # (untimed: ZipNN writes into its input)
        for key, run, arg in (("s_dec", s_dec, sb), ("z_dec", z_dec, zb), ("s_enc", s_enc, None),
                              ("z_enc", z_enc, copies)):
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            run() if arg is None else run(arg)
            wall[key].append(time.perf_counter() - t0)
            cpu[key].append(time.process_time() - c0)
    n = sum(len(d) for _, d in segs)
    return dict(file=name, threads=t, bytes=n, repeats=repeats, ratio_strata=n / sum(map(len, sb)),
                ratio_zipnn=n / sum(map(len, zb)),
                **{f"{k}_GiBps": n / 2**30 / statistics.median(v) for k, v in wall.items()},
                **{f"{k}_cpu_GiBps": n / 2**30 / statistics.median(v) for k, v in cpu.items()})


def threads_report(rows: list[dict]) -> str:
    def cell(r, op, clock=""):
        a, b = r[f"s_{op}{clock}_GiBps"], r[f"z_{op}{clock}_GiBps"]
        return f"{a:.3f} / {b:.3f} ({a / b:.2f})"

    lines = ["strata against zipnn with the same number of threads each side (strata: chunk workers; zipnn: "
             "ZipNN(threads=t) for float segments, zstd-3 with t compression threads and 1 decompression thread "
             f"for the rest), interleaved in one process, medians of {rows[0]['repeats'] if rows else 5} runs, "
             "GiB/s of original bytes by the wall clock and by CPU time (strata / zipnn, and their quotient):", "",
             "| file | threads | decode, wall | decode, CPU | encode, wall | encode, CPU | ratio strata / zipnn |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['file']} | {r['threads']} | {cell(r, 'dec')} | {cell(r, 'dec', '_cpu')} | "
                     f"{cell(r, 'enc')} | {cell(r, 'enc', '_cpu')} | "
                     f"{r['ratio_strata']:.4f} / {r['ratio_zipnn']:.4f} |")
    for t in sorted({r["threads"] for r in rows}):
        sel = [r for r in rows if r["threads"] == t]
        q = {k: geomean(r[f"s_{k}_GiBps"] / r[f"z_{k}_GiBps"] for r in sel)
             for k in ("dec", "dec_cpu", "enc", "enc_cpu")}
        lines.append(f"\nGeometric means on {t} thread(s), strata / zipnn: decode {q['dec']:.2f} "
                     f"(CPU {q['dec_cpu']:.2f}), encode {q['enc']:.2f} (CPU {q['enc_cpu']:.2f}), ratio "
                     f"{geomean(r['ratio_strata'] / r['ratio_zipnn'] for r in sel):.4f}.")
    return "\n".join(lines) + "\n"


def async_blocking(repeats: int) -> dict:
    """``AsyncCheckpointer.save()`` blocking time vs a plain host copy, on the tiny GPT's state."""
    import torch

    from strata.checkpoint import AsyncCheckpointer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import train_tiny_gpt as tg

    torch.manual_seed(0)
    model = tg.GPT(tg.GPTConfig(vocab_size=65))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, 65, (4, 32))
    logits, loss = model(x, x)
    loss.backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    copy_t, save_t = [], []
    with tempfile.TemporaryDirectory() as d, AsyncCheckpointer(full_every=4) as saver:
        for i in range(repeats):
            t0 = time.perf_counter()
            _ = {k: v.detach().clone() for k, v in model.state_dict().items()}
            _ = [{k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                 for s in opt.state_dict()["state"].values()]
            copy_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            saver.save(state, Path(d) / f"s{i}.strata")
            save_t.append(time.perf_counter() - t0)
            saver.wait()  # a training loop would keep going here; wait so runs do not overlap
    nbytes = sum(v.numel() * v.element_size() for v in model.state_dict().values()) * 3
    return dict(state_MB=nbytes / 1e6, host_copy_ms=1e3 * statistics.median(copy_t),
                save_blocking_ms=1e3 * statistics.median(save_t))


def peak(path: Path, method: str) -> tuple[float, float]:
    """Peak resident memory (MB) of compressing and decompressing ``path`` in a fresh process."""
    code = f"""
import sys
sys.path.insert(0, {str(SHARED / 'bench')!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
import anchors_lossless as A
def hwm(): return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])
item = A.load_item(__import__('pathlib').Path({str(path)!r}), 'dtype')
inputs = [bytes(A.segment_bytes(item, s)) for s in item.segments]
cand = 'strata=' + {str(ROOT / 'benchmarks' / 'candidates.py')!r} + ':Lossless'
m = A.make_candidate(cand) if {method!r} == 'strata' else A.make_method({method!r})
m.compress(bytearray(inputs[-1][:4096]), item.segments[-1].dtype)  # warm-up
base = hwm()
blobs = [m.compress(bytearray(d), s.dtype) for s, d in zip(item.segments, inputs)]
mid = hwm()
outs = [m.decompress(b, s.dtype, len(d)) for s, b, d in zip(item.segments, blobs, inputs)]
print(mid - base, hwm() - mid)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    c, d = out.stdout.split()[-2:]
    return int(c) / 1e3, int(d) / 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--snapshots", type=int, default=4, help="latest fp32 snapshots (and their bf16 copies)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoint_vs_anchors")
    ap.add_argument("--threads-only", action="store_true",
                    help="print the one- and two-thread table against zipnn (MiniLM fp32 and bf16, the latest "
                         "fp32 and bf16 snapshots) and stop; writes nothing")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    A = harness()
    model = SHARED / "data" / "llm" / "all-MiniLM-L6-v2.fp32.safetensors"
    tmp = Path(tempfile.mkdtemp())
    bf = tmp / "all-MiniLM-L6-v2.bf16.safetensors"
    bf16_copy(model, bf)
    snaps = snapshots(args.snapshots)
    files = [model, bf] + snaps
    if args.threads_only:
        print("\n" + threads_report(threads_table(A, [model, bf, snaps[len(snaps) // 2 - 1], snaps[-1]],
                                                   args.repeats)))
        return 0
    methods = [A.make_candidate(f"strata={ROOT / 'benchmarks' / 'candidates.py'}:Lossless")]
    methods += [A.make_method(m) for m in METHODS]
    print(f"machine: {machine()}")
    rows = []
    for f in files:
        item = A.load_item(f, "dtype")
        for m in methods:
            r = A.measure(item, m, args.repeats)
            rows.append(r)
            print(A.fmt_row(r), flush=True)
    thr = threads_table(A, files, args.repeats)
    fp32_snaps = [p for p in snaps if ".fp32." in p.name]
    bf16_snaps = [p for p in snaps if ".bf16." in p.name]
    dl = deltas(A, fp32_snaps, args.repeats) + deltas(A, bf16_snaps, args.repeats)
    asy = async_blocking(5)
    mem = {m: peak(model, m) for m in ("strata", "zipnn", "zstd-3")}
    text = report(rows, dl, asy, mem, files) + "\n" + threads_report(thr)
    print("\n" + text)
    atomic_write(args.out.with_suffix(".md"), text)
    report_data = dict(machine=machine(), rows=rows, threads=thr, deltas=dl, async_save=asy, peak_MB=mem)
    atomic_write(args.out.with_suffix(".json"), json.dumps(report_data, indent=1, default=float))
    bad = [r for r in rows if r.get("status") != "ok"]
    return 1 if bad else 0


def report(rows, dl, asy, mem, files) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["file"], {})[r["method"]] = r
    lines = [f"Machine: {machine()}. Medians; GiB/s of original bytes; strata and zipnn on all cores "
             "(zstd: 2 compression threads, 1 for decompression), as ../shared/bench/anchors_lossless.py runs them.",
             "", "| file | " + " | ".join(["strata"] + METHODS) + " |", "|---" * (len(METHODS) + 2) + "|"]
    for f in files:
        v = by.get(f.name, {})
        cells = [f"{v[m]['ratio']:.4f}" if m in v and "ratio" in v[m] else "-" for m in ["strata"] + METHODS]
        lines.append(f"| {f.name} (ratio) | " + " | ".join(cells) + " |")
    lines += ["", "| file | strata comp / decomp GiB/s | zipnn comp / decomp GiB/s | strata / zipnn ratio |",
              "|---|---|---|---|"]
    for f in files:
        v = by.get(f.name, {})
        s, z = v.get("strata", {}), v.get("zipnn", {})
        if "ratio" in s and "ratio" in z:
            lines.append(f"| {f.name} | {s['comp_GiBps']:.3f} / {s['decomp_GiBps']:.3f} | "
                         f"{z['comp_GiBps']:.3f} / {z['decomp_GiBps']:.3f} | {s['ratio'] / z['ratio']:.4f} |")
    sz = [(v["strata"], v["zipnn"]) for v in by.values() if "strata" in v and "zipnn" in v and "ratio" in v["zipnn"]]
    lines += ["", "Geometric means over the files, strata / zipnn: "
              f"ratio {geomean(s['ratio'] / z['ratio'] for s, z in sz):.4f}, "
              f"compression speed {geomean(s['comp_GiBps'] / z['comp_GiBps'] for s, z in sz):.2f}, "
              f"decompression speed {geomean(s['decomp_GiBps'] / z['decomp_GiBps'] for s, z in sz):.2f}.",
              "", "XOR deltas between consecutive snapshots (strata):", "",
              "| snapshot | base | ratio alone | ratio as delta | delta comp GiB/s |", "|---|---|---|---|---|"]
    for r in dl:
        lines.append(f"| {r['file']} | {r['base']} | {r['ratio_full']:.4f} | {r['ratio_delta']:.4f} | "
                     f"{r['delta_comp_GiBps']:.3f} |")
    lines += ["", f"AsyncCheckpointer on the tiny GPT's weights + Adam states ({asy['state_MB']:.1f} MB): "
              f"save() blocks {asy['save_blocking_ms']:.1f} ms; a plain host copy (clone) of the same state takes "
              f"{asy['host_copy_ms']:.1f} ms.",
              "", "Peak memory added (fresh process, the fp32 model, 91 MB): "
              + "; ".join(f"{k} {c:.0f} MB compressing, {d:.0f} MB decompressing" for k, (c, d) in mem.items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
