"""Cost of strata.quality's stage 1 (``features``) now and at an earlier commit, one thread.

Fields: the cost fields of ``quality_prediction.py`` (era5_t2m, ns3d, ns3d192: at least 1M
values) and four of the zoo that the newer features treat apart: ``ocean_foam_v`` (its fill
value declared: a mask), ``radar_qpe_belgium`` (NaN outside the radar), ``mri_knee`` and
``das_silixa_strainrate`` (integers: a lattice), ``radar_rainsum_boxpol`` (float64, mostly
zeros). Each version runs in a fresh process (``NUMBA_NUM_THREADS=1``; the earlier commit
exported with ``git archive``, its own ``strata`` imported), loads every field, calls
``features`` once (compiled kernels loaded) and then times ``ROUNDS`` calls per field, median;
the two versions alternate over ``REPEATS`` processes each and the median of the per-process
medians is reported.

Run: ``.venv/bin/python benchmarks/quality_cost.py [--commit c00c584]``; writes
``benchmarks/results/quality_cost.{md,json}``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
FIELDS = ("era5_t2m", "ns3d_vx_t2", "ns3d192_vx_t1p8", "ocean_foam_v", "radar_qpe_belgium", "mri_knee",
          "das_silixa_strainrate", "radar_rainsum_boxpol")
ROUNDS = 9
REPEATS = 3

CHILD = """
import json, sys, time, gc, statistics
sys.path.insert(0, {src!r})
sys.path.insert(1, {bench!r})
import numpy as np
import strata
import rate_distortion as rd
from strata.quality import features
out = {{}}
fields = {{f.name: f for f in rd.find_fields(rd.SHARED / "data", [], set())}}
for name in {fields!r}:
    p = rd.Prepared(fields[name])
    a = np.array(p.a)
    mask = None if p.fill is None else ~p.valid
    features(a, mask=mask)
    t = []
    for _ in range({rounds}):
        gc.collect()
        t0 = time.perf_counter()
        features(a, mask=mask)
        t.append(time.perf_counter() - t0)
    out[name] = dict(values=int(a.size), ms=1e3 * statistics.median(t))
print(json.dumps(dict(strata=strata.__file__, times=out)))
"""


def run(src: str) -> dict:
    code = CHILD.format(src=src, bench=str(HERE), fields=FIELDS, rounds=ROUNDS)
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commit", default="c00c584", help="the earlier commit (default: c00c584)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from common import machine

    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", args.commit, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        runs = {"before": [], "after": []}
        for _ in range(REPEATS):
            runs["before"].append(run(str(Path(tmp) / "src")))
            runs["after"].append(run(str(HERE.parent / "src")))
    table = {}
    for name in FIELDS:
        b = statistics.median(r["times"][name]["ms"] for r in runs["before"])
        a = statistics.median(r["times"][name]["ms"] for r in runs["after"])
        table[name] = dict(values=runs["after"][0]["times"][name]["values"], before_ms=b, after_ms=a)
    report = dict(machine=machine(), commit=args.commit, rounds=ROUNDS, repeats=REPEATS, fields=table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "quality_cost.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# strata.quality stage 1 (features) cost, before and after", "",
             f"Machine: {report['machine']}. One numba thread; per field the median of {ROUNDS} calls after one "
             f"warm-up call, in a fresh process per version, {REPEATS} processes each, alternating; the median of "
             f"their medians. Before: {args.commit}; after: the checkout (`benchmarks/quality_cost.py`).", "",
             "| field | values | before ms | after ms | after / before |", "|---|---|---|---|---|"]
    for name, r in table.items():
        lines.append(f"| {name} | {r['values']:,} | {r['before_ms']:.2f} | {r['after_ms']:.2f} | "
                     f"{r['after_ms'] / r['before_ms']:.2f} |")
    (RESULTS / "quality_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
