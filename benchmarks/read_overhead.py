#!/usr/bin/env python3
"""Whole-read time of strata.lossy in two checkouts, interleaved: what the checks a read makes
before and after decoding cost (``docs/format.md`` section 4).

Fields of ../shared/data/sci, compressed once (by this checkout) at 1e-3 of their range:
era5_t2m (744x33x49), ns3d192 (192^3), and sscand_elevation (823x726) with its land (values
>= 0) missing, so the fill pattern is written. Each round runs, for each checkout in turn, a
fresh process that reads every stream ``--reads`` times on one thread and on all threads (after
a warm-up read) and reports the median per stream; the table gives, per stream and thread count,
the median over rounds of each checkout's medians and their ratio. Writes
benchmarks/results/read_overhead.{md,json}.

    .venv/bin/python benchmarks/read_overhead.py --before PATH/TO/OTHER/src [--rounds 5] [--reads 15]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402

_CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {src!r})
import numba
import strata
out = {{}}
for path in {paths!r}:
    data = open(path, "rb").read()
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        r = strata.open(data)
        r.read()
        times = []
        for _ in range({reads}):
            t = time.perf_counter()
            r.read()
            times.append(time.perf_counter() - t)
        out[f"{{path}}|{{threads}}"] = statistics.median(times)
print(json.dumps(out))
"""


def streams(folder: Path) -> dict[str, Path]:
    sci = SHARED / "data" / "sci"
    out = {}
    for name, file in (("era5_t2m", "era5_t2m_744x33x49.f32"), ("ns3d192", "ns3d192_vx_t1p8_192x192x192.f32")):
        a = np.fromfile(sci / file, "<f4").reshape([int(n) for n in file[:-4].split("_")[-1].split("x")])
        out[name] = folder / f"{name}.strata"
        out[name].write_bytes(strata.compress(a, rel_error=1e-3))
    elev = np.fromfile(sci / "sscand_elevation_823x726.f32", "<f4").reshape(823, 726)
    out["sscand, land missing"] = folder / "sscand.strata"
    out["sscand, land missing"].write_bytes(strata.compress(np.where(elev >= 0, np.nan, elev), rel_error=1e-3))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the src folder of the checkout to compare with")
    ap.add_argument("--label", default="before", help="how the table names the other checkout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reads", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "read_overhead")
    args = ap.parse_args(argv)
    srcs = {"before": str(Path(args.before).resolve()), "after": str(ROOT / "src")}
    with tempfile.TemporaryDirectory() as tmp:
        paths = streams(Path(tmp))
        by_path = {str(p): name for name, p in paths.items()}
        runs: dict[str, list[dict]] = {k: [] for k in srcs}
        for i in range(args.rounds):
            for tag, src in srcs.items():
                code = _CHILD.format(src=src, paths=[str(p) for p in paths.values()], reads=args.reads)
                res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
                if res.returncode:
                    raise RuntimeError(res.stderr[-3000:])
                runs[tag].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"round {i + 1}/{args.rounds} done", flush=True)
    rows = []
    for key in runs["after"][0]:
        path, threads = key.split("|")
        med = {tag: statistics.median(r[key] for r in runs[tag]) for tag in srcs}
        rows.append(dict(stream=by_path[path], threads=int(threads), before_ms=1e3 * med["before"],
                         after_ms=1e3 * med["after"], ratio=med["after"] / med["before"]))
    lines = [f"Machine: {machine()}. Whole reads (`LossyReader.read()`) of streams at 1e-3 of the range, "
             f"{args.rounds} rounds alternating the checkouts, each a fresh process timing {args.reads} reads "
             "(median) after a warm-up; the median over rounds. before: "
             f"{args.label}; after: this checkout. `benchmarks/read_overhead.py`.", "",
             "| stream | threads | before ms | after ms | after / before |", "|---|---|---|---|---|"]
    lines += [f"| {r['stream']} | {r['threads']} | {r['before_ms']:.2f} | {r['after_ms']:.2f} | {r['ratio']:.3f} |"
              for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    atomic_write(args.out.with_suffix(".md"), text)
    atomic_write(args.out.with_suffix(".json"), json.dumps(dict(machine=machine(), before=args.label,
                                                                rounds=args.rounds, reads=args.reads, rows=rows),
                                                           indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
