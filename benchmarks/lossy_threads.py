#!/usr/bin/env python3
"""strata.lossy's compression and decompression speed on 1, 2, 4, ... threads, this source tree
against another one (``--baseline-src``: the ``src`` folder of an earlier commit), on the same
fields in the same run.

Each version runs in worker processes of its own (two versions of a package cannot share one
process); the workers alternate round by round (``--rounds``), each timing every field and
thread count ``--repeats`` times, so load drifts hit both versions alike. A cell is the median
of those timings as MB/s of original bytes (compress, decompress), numba's ``set_num_threads``
naming the threads; the first call (compilation) is left out. The JSON also holds the median
minor page faults of a call (``getrusage``), which cost far more in some virtual machines.

Writes ``OUT.md`` and ``OUT.json`` (default ``benchmarks/results/lossy_threads``).

    .venv/bin/python benchmarks/lossy_threads.py --baseline-src /tmp/base/src \\
        --fields ns3d192,era5_t2m --threads 1,2 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, SHARED, machine  # noqa: E402

NAME = re.compile(r"^(?P<name>.+)_(?P<dims>\d+(?:x\d+)*)\.(?P<ext>f32|f64)$")


def find_fields(data: Path, prefixes: list[str]) -> list[Path]:
    """Raw ``NAME_D0xD1.f32/.f64`` files under ``data`` (recursively) whose name starts with one
    of ``prefixes``, in the order of ``prefixes``."""
    files = sorted(p for p in data.rglob("*") if NAME.match(p.name))
    out = []
    for pre in prefixes:
        hits = [p for p in files if p.name.startswith(pre) and p not in out]
        if not hits:
            raise SystemExit(f"no field {pre!r} under {data}")
        out += hits[:1]
    return out


def load(path: Path):
    import numpy as np

    m = NAME.match(path.name)
    shape = tuple(int(d) for d in m["dims"].split("x"))
    return np.fromfile(path, dtype="<f4" if m["ext"] == "f32" else "<f8").reshape(shape)


def worker(args) -> int:
    """Time every field and thread count once (after a compiling call); print JSON."""
    import resource

    import numba
    import numpy as np

    import strata

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    out = {"strata": str(Path(strata.__file__).resolve().parent), "cells": {}}
    for path in [Path(p) for p in args.paths]:
        a = load(path)
        numba.set_num_threads(max(args.threads))
        blob = strata.compress(a, rel_error=args.rel)  # (compiles)
        strata.decompress(blob)
        vr = float(np.nanmax(a)) - float(np.nanmin(a))
        for n in args.threads:
            numba.set_num_threads(n)
            cell = dict(compress_s=[], decompress_s=[], compress_faults=[], decompress_faults=[], nbytes=a.nbytes,
                        bound_ok=True)
            for _ in range(args.repeats):
                f0, t0 = faults(), time.perf_counter()
                blob = strata.compress(a, rel_error=args.rel)
                f1, t1 = faults(), time.perf_counter()
                y = strata.decompress(blob)
                f2, t2 = faults(), time.perf_counter()
                cell["compress_s"].append(t1 - t0)
                cell["decompress_s"].append(t2 - t1)
                cell["compress_faults"].append(f1 - f0)
                cell["decompress_faults"].append(f2 - f1)
                cell["bound_ok"] &= bool(np.max(np.abs(y.astype(np.float64) - a)) <= args.rel * vr)
            cell["bytes"] = len(blob)
            out["cells"][f"{path.name}|{n}"] = cell
    print(json.dumps(out))
    return 0


def run_worker(src: Path, paths, threads, rel, repeats) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, __file__, "--worker", "--rel", str(rel), "--threads", ",".join(map(str, threads)),
           "--repeats", str(repeats), *map(str, paths)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        raise SystemExit(f"worker with {src} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, default=SHARED / "data", help="folder of raw fields")
    ap.add_argument("--fields", default="ns3d192,ns3d_vx,era5_t2m,das_silixa", help="comma-separated name prefixes")
    ap.add_argument("--threads", default="", help="comma-separated thread counts (default 1, 2, 4, ... cores)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds (a worker process per version and round)")
    ap.add_argument("--repeats", type=int, default=3, help="timings of each cell in a worker (default 3)")
    ap.add_argument("--rel", type=float, default=1e-3, help="value-range-relative bound (default 1e-3)")
    ap.add_argument("--baseline-src", type=Path, help="src folder of the version to compare against")
    ap.add_argument("--label", default="HEAD", help="name of this tree in the tables")
    ap.add_argument("--baseline-label", default="baseline", help="name of the baseline in the tables")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "lossy_threads")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    args.threads = ([int(t) for t in args.threads.split(",") if t] if args.threads
                    else [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= cores])
    if args.worker:
        return worker(args)
    paths = find_fields(args.data, [f for f in args.fields.split(",") if f])
    versions = {args.label: ROOT / "src"}
    if args.baseline_src:
        versions[args.baseline_label] = args.baseline_src.resolve()
    times = {v: {} for v in versions}
    sizes = {v: {} for v in versions}
    faults = {}
    bad = 0
    for r in range(args.rounds):
        for v, src in (versions.items() if r % 2 == 0 else reversed(versions.items())):
            res = run_worker(src, paths, args.threads, args.rel, args.repeats)
            for key, c in res["cells"].items():
                times[v].setdefault(key, []).extend((c["nbytes"] / 1e6 / tc, c["nbytes"] / 1e6 / td)
                                                    for tc, td in zip(c["compress_s"], c["decompress_s"]))
                sizes[v][key] = c["bytes"]
                faults.setdefault(v, {}).setdefault(key, []).extend(zip(c["compress_faults"], c["decompress_faults"]))
                bad += not c["bound_ok"]
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    def cell(v, k, t):
        f = faults[v][k]
        return dict(compress_mbs=statistics.median(x[0] for x in t), decompress_mbs=statistics.median(x[1] for x in t),
                    bytes=sizes[v][k], compress_faults=statistics.median(x[0] for x in f),
                    decompress_faults=statistics.median(x[1] for x in f))

    cells = {v: {k: cell(v, k, t) for k, t in times[v].items()} for v in versions}
    report = dict(machine=machine(), rel=args.rel, rounds=args.rounds, repeats=args.repeats, threads=args.threads,
                  fields=[p.name for p in paths], versions={v: str(s) for v, s in versions.items()}, cells=cells,
                  date=time.strftime("%Y-%m-%d"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(report, args.label, args.baseline_label if args.baseline_src
                                                  else None))
    print(args.out.with_suffix(".md").read_text())
    if bad:
        print(f"BOUND VIOLATED in {bad} cell(s)", file=sys.stderr)
    return 1 if bad else 0


def render(rep: dict, label: str, base: str | None) -> str:
    out = [f"# strata.lossy on 1..{max(rep['threads'])} threads", "",
           f"Made by `benchmarks/lossy_threads.py`. Machine: {rep['machine']}; {rep['date']}. Bound "
           f"{rep['rel']:g} of the value range; MB/s of original bytes, medians of {rep['rounds']} rounds x "
           f"{rep['repeats']} timings (each version in its own worker processes, alternating round by round); "
           "threads = numba's set_num_threads.", ""]
    head = ["field", "threads", f"{label} compress", f"{label} decompress"]
    if base:
        head += [f"{base} compress", f"{base} decompress", "compress ratio", "decompress ratio", "same size"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in rep["fields"]:
        for n in rep["threads"]:
            key = f"{f}|{n}"
            a = rep["cells"][label][key]
            row = [f, str(n), f"{a['compress_mbs']:.0f}", f"{a['decompress_mbs']:.0f}"]
            if base:
                b = rep["cells"][base][key]
                row += [f"{b['compress_mbs']:.0f}", f"{b['decompress_mbs']:.0f}",
                        f"{a['compress_mbs'] / b['compress_mbs']:.3f}",
                        f"{a['decompress_mbs'] / b['decompress_mbs']:.3f}",
                        "yes" if a["bytes"] == b["bytes"] else f"{a['bytes'] / b['bytes']:.4f}x"]
            out.append("| " + " | ".join(row) + " |")
    if base:
        import math

        out += ["", f"Geomean {label} / {base} by threads (compress, decompress):", ""]
        for n in rep["threads"]:
            rc = [rep["cells"][label][f"{f}|{n}"]["compress_mbs"] / rep["cells"][base][f"{f}|{n}"]["compress_mbs"]
                  for f in rep["fields"]]
            rd = [rep["cells"][label][f"{f}|{n}"]["decompress_mbs"] / rep["cells"][base][f"{f}|{n}"][
                "decompress_mbs"] for f in rep["fields"]]
            g = [math.exp(sum(map(math.log, x)) / len(x)) for x in (rc, rd)]
            out.append(f"- {n} thread(s): {g[0]:.3f}, {g[1]:.3f}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
