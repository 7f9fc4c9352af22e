#!/usr/bin/env python3
"""strata.lossy beside SZ3 (pysz, default INTERP_LORENZO) and ZFP (zfpy, fixed accuracy), in one
process, on every field of ../shared/data/sci, at value-range-relative bounds (default 1e-2,
1e-3, 1e-4), the way ../shared/bench/anchors_lossy.py measures them. Then progressive and
region decoding on the largest field.

Prints tables (ratio, bits/value, PSNR, max error / bound, MB/s; peak memory in fresh processes) and writes
benchmarks/results/lossy_vs_anchors.{md,json}. Exit status 1 if any strata row breaks its bound.

    .venv/bin/python benchmarks/lossy_vs_anchors.py [--eb 1e-2,1e-3,1e-4] [--repeats 5] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, fresh_peak, geomean, machine, timed  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.inputs import read_array  # noqa: E402


def codecs():
    import zfpy
    from pysz import sz, szConfig, szErrorBoundMode

    def sz3_c(a, eb):
        cfg = szConfig()
        cfg.errorBoundMode = szErrorBoundMode.ABS
        cfg.absErrorBound = float(eb)
        return sz.compress(a, cfg)[0].tobytes()

    def sz3_d(blob, a):
        return sz.decompress(np.frombuffer(blob, dtype=np.uint8), a.dtype, a.shape)[0]

    return {
        "sz3": (sz3_c, sz3_d, 1),
        "zfp": (lambda a, eb: zfpy.compress_numpy(a, tolerance=float(eb)), lambda b, a: zfpy.decompress_numpy(b), 1),
        "strata": (lambda a, eb: strata.compress(a, abs_error=float(eb)), lambda b, a: strata.decompress(b),
                   numba.config.NUMBA_NUM_THREADS),
    }


def measure(name, fns, a, rel, repeats):
    comp, decomp, threads = fns
    vr = metrics.value_range(a)
    eb = rel * vr
    tc, blob = timed(lambda: comp(a, eb), repeats)
    td, y = timed(lambda: decomp(blob, a), repeats)
    y = np.asarray(y).reshape(a.shape)
    err = metrics.max_abs_error(a, y)
    row = dict(field=None, codec=name, threads=threads, rel_eb=rel, abs_eb=eb, bytes=len(blob),
               ratio=a.nbytes / len(blob), bits_per_value=8 * len(blob) / a.size, psnr=metrics.psnr(a, y),
               nrmse=metrics.nrmse(a, y), err_over_eb=err / eb, bound_ok=bool(err <= eb),
               comp_MBps=a.nbytes / 1e6 / tc, decomp_MBps=a.nbytes / 1e6 / td, comp_s=tc, decomp_s=td)
    return row


def memory(path, rel):
    """Peak memory added by each codec's compression and decompression (fresh processes)."""
    out = {}
    for name in ("sz3", "zfp", "strata"):
        out[name] = {op: fresh_peak(path, name, op, rel) / 1e6 for op in ("comp", "decomp")}
    return out


def streaming(path: Path, rels, repeats):
    """Full vs region vs progressive decode times on one field."""
    a = read_array(path)
    out = []
    for rel in rels:
        blob = strata.compress(a, rel_error=rel)
        r = strata.open(blob)
        t_full, full = timed(r.read, repeats)
        q = [max(1, n // 4) for n in a.shape]
        boxes = {"center": tuple(slice(n // 2 - w // 2, n // 2 - w // 2 + w) for n, w in zip(a.shape, q)),
                 "corner": tuple(slice(0, w) for w in q)}
        rng = np.random.default_rng(0)
        for i in range(3):
            boxes[f"random{i}"] = tuple(slice(o, o + w) for o, w in
                                        ((int(rng.integers(0, n - w + 1)), w) for n, w in zip(a.shape, q)))
        rows = dict(field=path.name, rel_eb=rel, full_decode_s=t_full, stream_bytes=len(blob), regions={},
                    levels=[])
        for name, box in boxes.items():
            src = _Counting(blob)
            rr = strata.open(src)
            t, part = timed(lambda rr=rr, box=box: rr.read(region=box), repeats)
            assert np.array_equal(part, full[box]), "region differs from full decode"
            rows["regions"][name] = dict(time_s=t, fraction_of_full=t / t_full,
                                         bytes_read=src.read_bytes // repeats, volume_fraction=part.size / a.size)
        for lv in r.levels:
            src = _Counting(blob)
            rr = strata.open(src)
            t, grid = timed(lambda rr=rr, lv=lv: rr.read(level=lv.index, full_resolution=False), repeats)
            s = lv.stride
            err = metrics.max_abs_error(a[tuple(slice(None, None, k) for k in s)], grid)
            tp, prev = timed(lambda rr=rr, lv=lv: rr.read(level=lv.index), repeats)
            rows["levels"].append(dict(level=lv.index, shape=list(lv.shape), stride=list(lv.stride),
                                       error_bound=lv.error_bound, grid_max_error=err,
                                       bound_ok=bool(err <= lv.error_bound), preview_psnr=metrics.psnr(a, prev),
                                       grid_time_s=t, preview_time_s=tp, bytes_read=src.read_bytes // (2 * repeats),
                                       prefix_bytes=lv.offset + lv.compressed_bytes))
        out.append(rows)
    return out


class _Counting:
    """Seekable file object over bytes that counts the bytes read."""

    def __init__(self, data):
        import io
        self._f = io.BytesIO(data)
        self.read_bytes = 0

    def read(self, n=-1):
        b = self._f.read(n)
        self.read_bytes += len(b)
        return b

    def seek(self, *a):
        return self._f.seek(*a)

    def tell(self):
        return self._f.tell()


def fmt_table(rows):
    head = "| field | codec | bound | ratio | bits/value | PSNR dB | max err/bound | comp MB/s | decomp MB/s |"
    lines = [head, "|---" * 9 + "|"]
    for r in rows:
        lines.append(f"| {r['field']} | {r['codec']} | {r['rel_eb']:.0e} | {r['ratio']:.2f} | "
                     f"{r['bits_per_value']:.3f} | {r['psnr']:.2f} | {r['err_over_eb']:.4f} | {r['comp_MBps']:.0f} | "
                     f"{r['decomp_MBps']:.0f} |")
    return "\n".join(lines)


def summary(rows, rels):
    lines = ["| bound | ratio strata/SZ3 (geomean) | strata/ZFP | comp speed strata/SZ3 (geomean) |"
             " decomp speed strata/SZ3 (geomean) | comp MB/s strata / SZ3 (all data) |"
             " decomp MB/s strata / SZ3 (all data) |",
             "|---" * 7 + "|"]
    out = {}
    for rel in rels:
        by = {}
        for r in rows:
            if r["rel_eb"] == rel:
                by.setdefault(r["field"], {})[r["codec"]] = r
        f = [v for v in by.values() if {"sz3", "strata", "zfp"} <= set(v)]
        ratio = geomean(v["strata"]["ratio"] / v["sz3"]["ratio"] for v in f)
        ratio_zfp = geomean(v["strata"]["ratio"] / v["zfp"]["ratio"] for v in f)
        cs = geomean(v["strata"]["comp_MBps"] / v["sz3"]["comp_MBps"] for v in f)
        ds = geomean(v["strata"]["decomp_MBps"] / v["sz3"]["decomp_MBps"] for v in f)
        nbytes = {k: sum(v[k]["ratio"] * v[k]["bytes"] for v in f) for k in ("sz3", "strata")}
        agg_c = {k: nbytes[k] / 1e6 / sum(v[k]["comp_s"] for v in f) for k in ("sz3", "strata")}
        agg_d = {k: nbytes[k] / 1e6 / sum(v[k]["decomp_s"] for v in f) for k in ("sz3", "strata")}
        out[rel] = dict(ratio_vs_sz3=ratio, ratio_vs_zfp=ratio_zfp, comp_speed_vs_sz3=cs, decomp_speed_vs_sz3=ds,
                        comp_MBps_all=agg_c, decomp_MBps_all=agg_d)
        lines.append(f"| {rel:.0e} | {ratio:.3f} | {ratio_zfp:.2f} | {cs:.2f} | {ds:.2f} | "
                     f"{agg_c['strata']:.0f} / {agg_c['sz3']:.0f} | {agg_d['strata']:.0f} / {agg_d['sz3']:.0f} |")
    return "\n".join(lines), out


def fmt_streaming(st):
    lines = []
    for s in st:
        lines.append(f"\n{s['field']} at {s['rel_eb']:.0e}: full decode {s['full_decode_s'] * 1e3:.1f} ms, "
                     f"stream {s['stream_bytes']} bytes")
        lines.append("| box (1/64 of the volume) | time ms | fraction of full decode | bytes read |")
        lines.append("|---|---|---|---|")
        for name, r in s["regions"].items():
            lines.append(f"| {name} | {r['time_s'] * 1e3:.2f} | {r['fraction_of_full']:.3f} | {r['bytes_read']} |")
        lines.append("| level | grid shape | stride | error bound | grid max error | preview PSNR dB | grid ms |"
                     " preview ms | bytes read | levels 0..k bytes |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for lv in s["levels"]:
            lines.append(f"| {lv['level']} | {tuple(lv['shape'])} | {tuple(lv['stride'])} | {lv['error_bound']:.4g} | "
                         f"{lv['grid_max_error']:.4g} | {lv['preview_psnr']:.1f} | {lv['grid_time_s'] * 1e3:.2f} | "
                         f"{lv['preview_time_s'] * 1e3:.2f} | {lv['bytes_read']} | {lv['prefix_bytes']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data" / "sci")
    ap.add_argument("--eb", default="1e-2,1e-3,1e-4")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 repeats, no memory, no streaming section")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lossy_vs_anchors")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    rels = [float(v) for v in args.eb.split(",")]
    repeats = 3 if args.quick else args.repeats
    files = sorted(args.data.glob("*.f32")) + sorted(args.data.glob("*.f64"))
    if not files:
        print(f"no fields in {args.data}", file=sys.stderr)
        return 2
    cs = codecs()
    # compile strata's kernels before timing anything
    for dt in (np.float32, np.float64):
        w = np.random.default_rng(0).standard_normal((40, 40, 40)).astype(dt)
        strata.decompress(strata.compress(w, rel_error=1e-3), region=(slice(0, 3),))
        strata.open(strata.compress(w, rel_error=1e-3)).read(level=0)
    print(f"machine: {machine()}; strata threads: {numba.config.NUMBA_NUM_THREADS}; SZ3/ZFP: 1 thread")
    rows = []
    for path in files:
        a = read_array(path)
        for rel in rels:
            for name, fns in cs.items():
                r = measure(name, fns, a, rel, repeats)
                r["field"] = path.name.rsplit("_", 1)[0] + "_" + "x".join(map(str, a.shape))
                rows.append(r)
                print(f"{r['field'][:28]:28s} {name:6s} {rel:.0e} ratio {r['ratio']:8.2f} PSNR {r['psnr']:6.2f} "
                      f"err/eb {r['err_over_eb']:.4f} comp {r['comp_MBps']:6.0f} decomp {r['decomp_MBps']:6.0f} MB/s",
                      flush=True)
    table = fmt_table(rows)
    summ, summ_data = summary(rows, rels)
    largest = max(files, key=lambda p: p.stat().st_size)
    st = [] if args.quick else streaming(largest, rels, repeats)
    mem = {} if args.quick else memory(largest, 1e-3)
    text = (f"Machine: {machine()}. strata on {numba.config.NUMBA_NUM_THREADS} threads, SZ3 and ZFP on 1 "
            f"(their wheels have no OpenMP). Medians of {repeats} runs.\n\n## Summary\n\n{summ}\n\n"
            f"## Every field\n\n{table}\n")
    if mem:
        text += (f"\n## Peak memory on {largest.name} ({largest.stat().st_size / 1e6:.1f} MB) at 1e-3\n\n"
                 "Resident memory an operation adds in a fresh process (output included), beyond its input:\n\n"
                 "| codec | compress MB | decompress MB |\n|---|---|---|\n"
                 + "".join(f"| {k} | {v['comp']:.1f} | {v['decomp']:.1f} |\n" for k, v in mem.items()))
    if st:
        text += f"\n## Progressive and region decoding\n{fmt_streaming(st)}\n"
    print("\n" + text)
    atomic_write(args.out.with_suffix(".md"), text)
    report = dict(machine=machine(), rows=rows, summary={str(k): v for k, v in summ_data.items()},
                  streaming=st, peak_memory_MB=mem)
    atomic_write(args.out.with_suffix(".json"), json.dumps(report, indent=1, default=float))
    bad = [r for r in rows if r["codec"] == "strata" and not r["bound_ok"]]
    bad += [lv for s in st for lv in s["levels"] if not lv["bound_ok"]]
    if bad:
        print(f"BOUND VIOLATED in {len(bad)} row(s)", file=sys.stderr)
    return 1 if bad or any(math.isnan(v["ratio_vs_sz3"]) for v in summ_data.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
