"""Leave one family out: a rule of the tuner (strata.lossy.tune) chosen without each family, and
that family's figures from the rule chosen without it.

A rule has two parts: the candidates the tuner tries after its first choice and the share by
which one must shrink the estimated size to be kept. ``--rule level-factors``: the level-wise
bound factors ``(alpha8, beta8)`` (``LEVEL_FACTORS``, ``LEVEL_MARGIN``); ``--rule pass-order``:
the pass orders tried after ``(0, 1, 2)`` (``ORDERS``, ``ORDER_MARGIN``); ``--rule step-predictors``:
the predictors tried per step after dimension-by-dimension interpolation (``STEP_PREDICTORS``,
``STEP_MARGIN``: multi-dimensional interpolation). For every family of
sci + zoo, each candidate rule of the rule's grid is scored on the *other* families (geomean of
strata's compression ratio at value-range-relative bounds 1e-2, 1e-3, 1e-4, every field weighted
alike), the best one is taken, and the held-out family's geomean ratio under it is reported
against the rule without candidates (``none``). The rule the library ships is then compared with
the rules chosen that way. The other rules stay as shipped.

    .venv/bin/python benchmarks/lofo_tuner_rules.py --rule pass-order [--fields PREFIX,...]

Writes benchmarks/results/lofo_level_factors, lofo_pass_order or lofo_step_predictors .{md,json}; one thread
(``NUMBA_NUM_THREADS=1`` set here), one process.
"""
from __future__ import annotations

import argparse
import itertools
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

#: Per rule: its title, the tuner's two attributes (candidates, margin), the candidate lists (tried
#: in this order) and the margins of its grid.
RULES = {
    "level-factors": dict(
        title="the tuner's level-wise bound rule", attrs=("LEVEL_FACTORS", "LEVEL_MARGIN"),
        out="lofo_level_factors",
        candidates={"none": (), "9/10": ((9, 10),), "10/12": ((10, 12),), "9/10 then 10/12": ((9, 10), (10, 12)),
                    "10/12 then 12/16": ((10, 12), (12, 16))},
        margins=(0.0, 0.01, 0.02, 0.04)),
    "pass-order": dict(
        title="the tuner's pass-order rule", attrs=("ORDERS", "ORDER_MARGIN"), out="lofo_pass_order",
        candidates={"none": (), "reverse": ((2, 1, 0),),
                    "every order": tuple(o for o in itertools.permutations(range(3)) if o != (0, 1, 2))},
        margins=(0.0, 0.01, 0.02, 0.04, 0.08)),
    "step-predictors": dict(
        title="the tuner's step-predictor rule", attrs=("STEP_PREDICTORS", "STEP_MARGIN"),
        out="lofo_step_predictors",
        candidates={"none": (), "multidim": (tune.MULTIDIM,)},
        margins=(0.0, 0.02, 0.04, 0.06, 0.08, 0.12)),
}


def ratios(fields, rule, candidates, margin) -> dict[str, list[float]]:
    """``{field: [ratio at each of RATIO_BOUNDS]}`` under one setting of ``rule``."""
    names = RULES[rule]["attrs"]
    saved = tuple(getattr(tune, n) for n in names)
    for n, v in zip(names, (candidates, margin)):
        setattr(tune, n, v)
    try:
        out = {}
        for name, f in fields.items():
            kw = {"fill_value": f.fill} if f.fill is not None else {}
            out[name] = [f.a.nbytes / len(strata.compress(f.a, abs_error=rel * f.vr, **kw)) for rel in RATIO_BOUNDS]
        return out
    finally:
        for n, v in zip(names, saved):
            setattr(tune, n, v)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rule", choices=sorted(RULES), default="level-factors", help="the rule to choose")
    ap.add_argument("--fields", help="comma-separated field-name prefixes (default: all)")
    ap.add_argument("--out", type=Path, help="output prefix (default benchmarks/results/lofo_<rule>)")
    args = ap.parse_args(argv)
    spec = RULES[args.rule]
    out = args.out or ROOT / "benchmarks" / "results" / spec["out"]
    found = find_fields(SHARED / "data", args.fields.split(",") if args.fields else None, None)
    fields = {f.name: Prepared(f) for f in found}
    family = {f.name: f.family for f in found}
    cands = spec["candidates"]
    rules = {(c, m): ratios(fields, args.rule, cand, m) for c, cand in cands.items()
             for m in (spec["margins"] if cand else (0.0,))}
    now = tuple(getattr(tune, n) for n in spec["attrs"])
    shipped = next((c, m) for (c, m) in rules if (cands[c], m) == now)
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
    report = dict(machine=machine(), rule=args.rule, bounds=list(RATIO_BOUNDS), shipped=list(shipped),
                  rules={f"{c} @ {m:g}": {"geomean_gain": score((c, m), every) / score(("none", 0.0), every)}
                         for (c, m) in rules},
                  families=rows,
                  per_field={n: {f"{c} @ {m:g}": [a / b for a, b in zip(rules[(c, m)][n], none[n])]
                                 for (c, m) in rules} for n in fields})
    lines = [f"# Leave one family out: {spec['title']}", "",
             f"{report['machine']}. One thread. Compression ratio at value-range-relative bounds "
             f"{', '.join(f'{b:g}' for b in RATIO_BOUNDS)} of each field of sci + zoo; gains are geomeans over a "
             "family's fields and bounds against the rule without candidates (`none`). Made by "
             f"`benchmarks/lofo_tuner_rules.py --rule {args.rule}`.", "",
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
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out.with_suffix(".json"), json.dumps(report, indent=1))
    atomic_write(out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
