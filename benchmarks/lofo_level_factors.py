"""Leave one family out: the tuner's level-wise bound rule (strata.lossy.tune) chosen without
each family, and that family's figures from the rule chosen without it.

The rule has two parts: the ``(alpha8, beta8)`` candidates the tuner tries after none
(``LEVEL_FACTORS``) and the share by which one must shrink the estimated size to be kept
(``LEVEL_MARGIN``). For every family of sci + zoo, each candidate rule of the grid below is scored on
the *other* families (geomean of strata's compression ratio at value-range-relative bounds 1e-2,
1e-3, 1e-4, every field weighted alike), the best one is taken, and the held-out family's geomean
ratio under it is reported against the rule without level-wise bounds. The rule the library ships
is then compared with the rules chosen that way.

    .venv/bin/python benchmarks/lofo_level_factors.py [--fields PREFIX,...]

Writes benchmarks/results/lofo_level_factors.{md,json}; one thread (``NUMBA_NUM_THREADS=1`` set
here), one process.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import strata  # noqa: E402
from common import ROOT, SHARED, machine  # noqa: E402
from rate_distortion import RATIO_BOUNDS, Prepared, find_fields  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.lossy import tune  # noqa: E402

#: The candidate rules: level-factor candidates (tried in this order) and margins.
CANDIDATES = {"none": (), "9/10": ((9, 10),), "10/12": ((10, 12),), "9/10 then 10/12": ((9, 10), (10, 12)),
              "10/12 then 12/16": ((10, 12), (12, 16))}
MARGINS = (0.0, 0.01, 0.02, 0.04)


def ratios(fields, factors, margin) -> dict[str, list[float]]:
    """``{field: [ratio at each of RATIO_BOUNDS]}`` under one rule."""
    saved = tune.LEVEL_FACTORS, tune.LEVEL_MARGIN
    tune.LEVEL_FACTORS, tune.LEVEL_MARGIN = factors, margin
    try:
        out = {}
        for name, f in fields.items():
            kw = {"fill_value": f.fill} if f.fill is not None else {}
            out[name] = [f.a.nbytes / len(strata.compress(f.a, abs_error=rel * f.vr, **kw)) for rel in RATIO_BOUNDS]
        return out
    finally:
        tune.LEVEL_FACTORS, tune.LEVEL_MARGIN = saved


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fields", help="comma-separated field-name prefixes (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lofo_level_factors")
    args = ap.parse_args(argv)
    found = find_fields(SHARED / "data", args.fields.split(",") if args.fields else None, None)
    fields = {f.name: Prepared(f) for f in found}
    family = {f.name: f.family for f in found}
    rules = {(c, m): ratios(fields, factors, m) for c, factors in CANDIDATES.items()
             for m in (MARGINS if factors else (0.0,))}
    shipped = next((c, m) for (c, m) in rules if CANDIDATES[c] == tune.LEVEL_FACTORS and m == tune.LEVEL_MARGIN)
    none = rules[("none", 0.0)]

    def score(rule, names) -> float:
        return geomean(r for n in names for r in rules[rule][n])

    rows = []
    for fam in sorted(set(family.values())):
        held = [n for n in fields if family[n] == fam]
        train = [n for n in fields if family[n] != fam]
        best = max(rules, key=lambda rule: score(rule, train))
        rows.append(dict(family=fam, fields=held, chosen=list(best), held_out_gain=score(best, held) / score(
            ("none", 0.0), held), shipped_gain=score(shipped, held) / score(("none", 0.0), held)))
    every = list(fields)
    report = dict(machine=machine(), bounds=list(RATIO_BOUNDS), shipped=list(shipped),
                  rules={f"{c} @ {m:g}": {"geomean_gain": score((c, m), every) / score(("none", 0.0), every)}
                         for (c, m) in rules},
                  families=rows,
                  per_field={n: {f"{c} @ {m:g}": [a / b for a, b in zip(rules[(c, m)][n], none[n])]
                                 for (c, m) in rules} for n in fields})
    lines = ["# Leave one family out: the tuner's level-wise bound rule", "",
             f"{report['machine']}. One thread. Compression ratio at value-range-relative bounds "
             f"{', '.join(f'{b:g}' for b in RATIO_BOUNDS)} of each field of sci + zoo; gains are geomeans over a "
             "family's fields and bounds against the rule without level-wise bounds (`none`). Made by "
             "`benchmarks/lofo_level_factors.py`.", "",
             f"Shipped rule: candidates `{shipped[0]}`, margin {shipped[1]:g}.", "",
             "| held-out family | fields | rule chosen on the other families | gain, rule chosen without it | "
             "gain, shipped rule |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {len(r['fields'])} | `{r['chosen'][0]}` @ {r['chosen'][1]:g} | "
                     f"{r['held_out_gain']:.4f} | {r['shipped_gain']:.4f} |")
    lines += ["", "Every rule on every field (geomean gain over all fields):", "", "| rule | gain |", "|---|---|"]
    lines += [f"| `{k}` | {v['geomean_gain']:.4f} |" for k, v in report["rules"].items()]
    worst = sorted((min(g), n) for n, gains in report["per_field"].items()
                   for k, g in gains.items() if k == f"{shipped[0]} @ {shipped[1]:g}")[:5]
    lines += ["", "Shipped rule, lowest per-bound gain of a field: "
              + ", ".join(f"{n} {g:.3f}" for g, n in worst), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out.with_suffix(".json"), json.dumps(report, indent=1))
    atomic_write(args.out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
