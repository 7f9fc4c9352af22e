#!/usr/bin/env python3
"""Scaling of strata.lossy with threads (1, 2, 4, ... up to the cores numba may use) beside SZ3 on one thread.

For the three largest shared fields at value-range-relative bounds 1e-2, 1e-3, 1e-4 (the absolute bound
``rel * range`` given to both), one process, the same data: SZ3 (pysz, built without OpenMP: one thread) and
strata at every thread count (``numba.set_num_threads``), medians of ``--repeats`` interleaved rounds (each round
runs every codec and thread count once, so load drifts hit all alike), ns per value. Every strata stream is
checked to be byte-identical at every thread count and every decoded value within the bound.

Writes ``benchmarks/results/speed_scaling_<N>t.{md,json}`` (N: the largest thread count). Meant for machines of
many cores (the project's 2-core CI machine gives only the 1- and 2-thread columns of speed_per_core.py). The
tables name the OpenMP wait policy and allocator settings in effect (on a virtual machine, OpenMP threads that
spin between parallel regions can get their virtual CPUs descheduled: ``OMP_WAIT_POLICY=PASSIVE``).

    .venv/bin/python benchmarks/speed_scaling.py [--repeats 5] [--threads 1,2,4,8,16]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numba

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import geomean, machine  # noqa: E402
from speed_per_core import RESULTS, SCI, field_cases, rounds, with_threads  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402


def per_field(path: Path, rels, threads: list[int], repeats: int) -> list[dict]:
    comp, decomp, a, cases = field_cases(path, rels)
    rows = []
    for rel, eb, s_blob in cases:
        blobs = {}
        for n in threads:
            numba.set_num_threads(n)
            blobs[n] = strata.compress(a, abs_error=eb)
            y = strata.decompress(blobs[n])
            assert metrics.max_abs_error(a, y) <= eb, (path.name, rel, n)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        blob = blobs[1]
        assert all(b == blob for b in blobs.values()), f"{path.name} {rel}: the stream depends on the threads"

        def c(eb=eb):
            return strata.compress(a, abs_error=eb)

        def d(blob=blob):
            return strata.decompress(blob)

        fns = {"sz3_c": lambda eb=eb: comp(a, eb), "sz3_d": lambda s_blob=s_blob: decomp(s_blob, a)}
        for n in threads:
            fns[f"{n}_c"], fns[f"{n}_d"] = with_threads(n, c), with_threads(n, d)
        ns = {k: v / a.size * 1e9 for k, v in rounds(fns, repeats).items()}
        rows.append(dict(field=path.stem, values=int(a.size), MB=a.nbytes / 1e6, rel_eb=rel,
                         ratio_strata=a.nbytes / len(blob), ratio_sz3=a.nbytes / len(s_blob), ns=ns))
        print(f"{path.stem[:16]:16s} {rel:.0e}  SZ3 {ns['sz3_c']:6.2f}/{ns['sz3_d']:5.2f}  " + "  ".join(
            f"{n}t {ns[f'{n}_c']:6.2f}/{ns[f'{n}_d']:5.2f}" for n in threads) + " ns/value", flush=True)
    return rows


def markdown(res: dict) -> str:
    threads = res["threads"]
    env = ", ".join(f"{k}={v}" for k, v in res["env"].items()) or "none set"
    m = [f"Machine: {res['machine']}; numba threading layer {res['layer']}; thread-related settings: {env}. "
         "SZ3 (pysz, no OpenMP in its build) on "
         f"1 thread; strata on {', '.join(map(str, threads))} threads (`numba.set_num_threads`); medians of "
         f"{res['repeats']} interleaved rounds; absolute bound = rel x value range for both; the same stream, byte "
         "for byte, at every thread count.", "",
         "Compress / decompress, ns per value:", "",
         "| field | rel. bound | SZ3 1 thread | " + " | ".join(f"strata {n}t" for n in threads) + " |",
         "|---|---|---|" + "---|" * len(threads)]
    for r in res["cases"]:
        ns = r["ns"]
        m.append(f"| {r['field']} | {r['rel_eb']:.0e} | {ns['sz3_c']:.2f} / {ns['sz3_d']:.2f} | " + " | ".join(
            f"{ns[f'{n}_c']:.2f} / {ns[f'{n}_d']:.2f}" for n in threads) + " |")
    m += ["", "Speed against SZ3 on 1 thread (compress / decompress, geomean over the cases) and against strata on "
          "1 thread (the scaling):", "",
          "| threads | vs SZ3 1 thread | vs strata 1 thread | parallel efficiency |", "|---|---|---|---|"]
    for n in threads:
        g = res["geomean"][str(n)]
        m.append(f"| {n} | {g['sz3_c']:.2f}x / {g['sz3_d']:.2f}x | {g['one_c']:.2f}x / {g['one_d']:.2f}x | "
                 f"{g['one_c'] / n:.0%} / {g['one_d'] / n:.0%} |")
    return "\n".join(m) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default: powers of two up to "
                    "the cores numba may use)")
    args = ap.parse_args(argv)
    top = numba.config.NUMBA_NUM_THREADS
    threads = sorted({int(t) for t in args.threads.split(",")} if args.threads
                     else {1 << k for k in range(top.bit_length()) if 1 << k <= top})
    if threads[0] != 1 or threads[-1] > top:
        ap.error(f"thread counts must include 1 and lie in 1..{top}")
    files = sorted(SCI.iterdir(), key=lambda p: -p.stat().st_size)[:3]
    print(f"machine: {machine()}; numba threads available: {top}")
    cases = [r for p in files for r in per_field(p, [1e-2, 1e-3, 1e-4], threads, args.repeats)]
    gm = {}
    for n in threads:
        gm[str(n)] = {f"{ref}_{op}": geomean(r["ns"][f"{base}_{op}"] / r["ns"][f"{n}_{op}"] for r in cases)
                      for ref, base in (("sz3", "sz3"), ("one", "1")) for op in ("c", "d")}
    env = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GLIBC_TUNABLES") if k in os.environ}
    res = dict(machine=machine(), layer=numba.threading_layer(), env=env, repeats=args.repeats, threads=threads,
               cases=cases, geomean=gm)
    text = markdown(res)
    print(text)
    stem = f"speed_scaling_{max(threads)}t"
    atomic_write(RESULTS / f"{stem}.md", text.encode())
    atomic_write(RESULTS / f"{stem}.json", json.dumps(res, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
