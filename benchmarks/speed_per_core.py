#!/usr/bin/env python3
"""Speed per core of strata.lossy beside SZ3 (pysz, one thread), in one process, on the same data.

Tables (ns per value, medians of ``--repeats`` rounds; each round runs every codec once, so
load drifts hit all sides alike):

1. the three largest shared fields at value-range-relative bounds 1e-2, 1e-3, 1e-4 (the
   absolute bound ``rel * range`` given to both): SZ3 on 1 thread, strata on 1 thread and on
   2 threads, speed ratios against SZ3 (geomean over the cases), compression ratios;
2. two threads against one on the fields of 8 MB and more;
3. the fixed cost of a call on the smallest shared field (49 KB), one thread;
4. compressed size against format version 2 (``results/lossy_sizes_v2.json``) on every
   shared field and bound.

Writes ``benchmarks/results/speed_per_core.{md,json}``.

    .venv/bin/python benchmarks/speed_per_core.py [--repeats 7] [--quick]
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numba

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, geomean, machine  # noqa: E402
from lossy_vs_anchors import codecs  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.inputs import read_array  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCI = SHARED / "data" / "sci"


def sz3():
    """SZ3's compress and decompress calls, as benchmarks/lossy_vs_anchors.py makes them."""
    return codecs()["sz3"][:2]


def with_threads(n, fn):
    def run():
        numba.set_num_threads(n)
        return fn()
    return run


def rounds(fns: dict, repeats: int, collect: bool = True) -> dict:
    """Median seconds of each of ``fns`` (name -> callable), interleaved round by round;
    ``collect``: a garbage collection before each call (caches cold, as after other work)."""
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if collect:
                gc.collect()
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return {k: statistics.median(v) for k, v in times.items()}


def field_cases(path: Path, rels):
    """``(comp, decomp, a, cases)``: SZ3's calls, the field ``path`` and, per value-range-relative
    bound, ``(rel, eb, SZ3's stream)`` with the absolute bound ``eb = rel * value range``."""
    comp, decomp = sz3()
    a = read_array(path)
    vr = metrics.value_range(a)
    return comp, decomp, a, [(rel, rel * vr, comp(a, rel * vr)) for rel in rels]


def per_field(path: Path, rels, repeats: int) -> list[dict]:
    comp, decomp, a, cases = field_cases(path, rels)
    rows = []
    for rel, eb, s_blob in cases:
        blob = strata.compress(a, abs_error=eb)
        y = strata.decompress(blob)
        assert metrics.max_abs_error(a, y) <= eb, (path.name, rel)

        def c(eb=eb):
            return strata.compress(a, abs_error=eb)

        def d(blob=blob):
            return strata.decompress(blob)

        t = rounds({"sz3_c": lambda eb=eb: comp(a, eb), "sz3_d": lambda s_blob=s_blob: decomp(s_blob, a),
                    "s1_c": with_threads(1, c), "s1_d": with_threads(1, d),
                    "s2_c": with_threads(2, c), "s2_d": with_threads(2, d)}, repeats)
        ns = {k: v / a.size * 1e9 for k, v in t.items()}
        rows.append(dict(field=path.stem, values=int(a.size), MB=a.nbytes / 1e6, rel_eb=rel,
                         ratio_strata=a.nbytes / len(blob), ratio_sz3=a.nbytes / len(s_blob), ns=ns,
                         c1=ns["sz3_c"] / ns["s1_c"], d1=ns["sz3_d"] / ns["s1_d"],
                         c2=ns["sz3_c"] / ns["s2_c"], d2=ns["sz3_d"] / ns["s2_d"],
                         scale_c=ns["s1_c"] / ns["s2_c"], scale_d=ns["s1_d"] / ns["s2_d"]))
        print(f"{path.stem[:16]:16s} {rel:.0e}  SZ3 {ns['sz3_c']:6.2f}/{ns['sz3_d']:5.2f}  strata 1t "
              f"{ns['s1_c']:6.2f}/{ns['s1_d']:5.2f}  2t {ns['s2_c']:6.2f}/{ns['s2_d']:5.2f} ns/value  "
              f"1t vs SZ3 {rows[-1]['c1']:.2f}x/{rows[-1]['d1']:.2f}x", flush=True)
    return rows


def fixed_cost(path: Path, repeats: int) -> dict:
    comp, decomp = sz3()
    a = read_array(path)
    eb = 1e-3 * metrics.value_range(a)
    blob, s_blob = strata.compress(a, abs_error=eb), comp(a, eb)
    numba.set_num_threads(1)
    fns = {"strata_c": lambda: strata.compress(a, abs_error=eb), "strata_d": lambda: strata.decompress(blob),
           "sz3_c": lambda: comp(a, eb), "sz3_d": lambda: decomp(s_blob, a)}
    cold = rounds(fns, repeats)
    warm = {}
    for k, fn in fns.items():  # back to back, each call after the same call (caches warm)
        numba.set_num_threads(1)  # (rounds() restores the default at its end)
        warm[k] = rounds({k: fn}, repeats, collect=False)[k]
    return dict(field=path.stem, KB=a.nbytes / 1e3, **{k: v * 1e3 for k, v in cold.items()},
                **{k + "_warm": v * 1e3 for k, v in warm.items()})


def sizes_vs_v2(rels) -> list[dict]:
    ref = json.loads((RESULTS / "lossy_sizes_v2.json").read_text())["bytes"]
    out = []
    for path in sorted(SCI.iterdir()):
        a = read_array(path)
        vr = metrics.value_range(a)
        for rel in rels:
            key = f"{path.name}:{rel}"
            if key in ref:
                n = len(strata.compress(a, abs_error=rel * vr))
                out.append(dict(field=path.stem, rel_eb=rel, bytes=n, bytes_v2=ref[key], change=n / ref[key] - 1))
    return out


def markdown(res: dict) -> str:
    m = [f"Machine: {res['machine']}. SZ3 (pysz) on 1 thread; strata on 1 thread (`numba.set_num_threads(1)`) "
         f"and on 2; medians of {res['repeats']} interleaved rounds; ns per value; absolute bound = rel x value "
         "range for both.", "",
         "| field | rel. bound | SZ3 comp / decomp | strata 1 thread | strata 2 threads | 1 thread vs SZ3 "
         "(comp / decomp) | 2 threads vs SZ3 | ratio strata / SZ3 |", "|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        ns = r["ns"]
        m.append(f"| {r['field']} | {r['rel_eb']:.0e} | {ns['sz3_c']:.2f} / {ns['sz3_d']:.2f} | "
                 f"{ns['s1_c']:.2f} / {ns['s1_d']:.2f} | {ns['s2_c']:.2f} / {ns['s2_d']:.2f} | "
                 f"{r['c1']:.2f}x / {r['d1']:.2f}x | {r['c2']:.2f}x / {r['d2']:.2f}x | "
                 f"{r['ratio_strata']:.2f} / {r['ratio_sz3']:.2f} |")
    g = res["geomean"]
    m += ["", f"Geomean over the cases, strata on 1 thread vs SZ3 on 1: compress {g['c1']:.2f}x, decompress "
          f"{g['d1']:.2f}x (lowest case {g['min_c1']:.2f}x / {g['min_d1']:.2f}x); strata on 2 threads vs SZ3 on 1: "
          f"{g['c2']:.2f}x / {g['d2']:.2f}x.", "",
          "Two threads against one (fields of 8 MB and more): " + "; ".join(
              f"{r['field']} {r['rel_eb']:.0e} {r['scale_c']:.2f}x / {r['scale_d']:.2f}x" for r in res["cases"]
              if r["MB"] >= 8), ""]
    f = res["fixed_cost"]
    m += [f"Fixed cost of a call, {f['field']} ({f['KB']:.0f} KB), 1e-3, one thread, ms, after a garbage "
          f"collection (cold caches): strata compress {f['strata_c']:.3f}, decompress {f['strata_d']:.3f}; SZ3 "
          f"{f['sz3_c']:.3f} / {f['sz3_d']:.3f}. Back to back (warm caches): strata {f['strata_c_warm']:.3f} / "
          f"{f['strata_d_warm']:.3f}; SZ3 {f['sz3_c_warm']:.3f} / {f['sz3_d_warm']:.3f}.", ""]
    worst = max(res["sizes"], key=lambda r: abs(r["change"]))
    m += [f"Compressed size against format version 2, every shared field at 1e-2..1e-4 ({len(res['sizes'])} "
          f"cases): largest change {100 * worst['change']:+.2f} % ({worst['field']} {worst['rel_eb']:.0e}); "
          f"median {100 * statistics.median(r['change'] for r in res['sizes']):+.2f} %.", ""]
    return "\n".join(m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="one field, 3 rounds")
    args = ap.parse_args(argv)
    rels = [1e-2, 1e-3, 1e-4]
    files = sorted(SCI.iterdir(), key=lambda p: -p.stat().st_size)
    big = files[:1] if args.quick else files[:3]
    repeats = 3 if args.quick else args.repeats
    print(f"machine: {machine()}; numba threads available: {numba.config.NUMBA_NUM_THREADS}")
    cases = [r for p in big for r in per_field(p, rels, repeats)]
    res = dict(machine=machine(), repeats=repeats, cases=cases,
               geomean=dict(c1=geomean(r["c1"] for r in cases), d1=geomean(r["d1"] for r in cases),
                            c2=geomean(r["c2"] for r in cases), d2=geomean(r["d2"] for r in cases),
                            min_c1=min(r["c1"] for r in cases), min_d1=min(r["d1"] for r in cases)),
               fixed_cost=fixed_cost(files[-1], 51), sizes=sizes_vs_v2(rels))
    text = markdown(res)
    print(text)
    if not args.quick:
        atomic_write(RESULTS / "speed_per_core.md", text.encode())
        atomic_write(RESULTS / "speed_per_core.json", json.dumps(res, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
