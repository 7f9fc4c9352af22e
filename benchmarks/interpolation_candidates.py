"""How much a multi-dimensional interpolation (HPEZ's) could save over SZ3's dimension-by-dimension
order, per level, on sci + zoo: a model of the predictors, not the codec.

Both predictors refine the same levels (stride halved on every axis at once) with the same
closed-loop quantizer (bins ``2 eb``, reconstruction at the bin centre) and the same 1-D rules
(cubic ``(-1, 9, 9, -1)/16`` inside, quadratic near an edge, linear, copy):

* ``dim``: SZ3's order -- a pass per axis, each point predicted along the axis of its pass
  from the points of the previous passes (what strata.lossy codes today);
* ``multi``: points grouped by the set of axes on which their index is odd -- first those odd on
  one axis, then two, then three -- each predicted as the mean of the 1-D predictions along each
  of its odd axes, from points of the earlier groups (Liu et al., HPEZ, 2024, multi-dimensional
  interpolation).

The size of each is the order-0 entropy of its codes per level (no context model, no chunking):
the figures compare the predictors, not the codecs. "best of the two per level" takes the
smaller entropy at each level (ignoring that a level's choice changes the finer levels' inputs).
Missing values are replaced by the valid mean (as the anchors of rate_distortion.py see them).

    .venv/bin/python benchmarks/interpolation_candidates.py [--fields PREFIX,...]

Writes benchmarks/results/interpolation_candidates.{md,json}.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, SHARED, machine  # noqa: E402
from rate_distortion import RATIO_BOUNDS, Prepared, find_fields  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402


def _interpolate(x: np.ndarray, axis: int) -> np.ndarray:
    """Predictions of the odd points of ``x`` along ``axis`` (its points one stride apart)
    from the even ones, with SZ3's 1-D rules."""
    n = x.shape[axis]
    out = []
    for c in range(1, n, 2):
        def g(i):
            return np.take(x, i, axis=axis)
        left3, right1, right3 = c >= 3, c + 1 < n, c + 3 < n
        if left3 and right3:
            v = (-g(c - 3) + 9 * g(c - 1) + 9 * g(c + 1) - g(c + 3)) / 16
        elif right1 and right3:
            v = (3 * g(c - 1) + 6 * g(c + 1) - g(c + 3)) / 8
        elif right1 and left3:
            v = (-g(c - 3) + 6 * g(c - 1) + 3 * g(c + 1)) / 8
        elif right1:
            v = (g(c - 1) + g(c + 1)) / 2
        elif left3:
            v = (3 * g(c - 1) - g(c - 3)) / 2
        else:
            v = g(c - 1)
        out.append(v)
    return np.stack(out, axis=axis)


def level_entropies(a: np.ndarray, eb: float, mode: str) -> list[float]:
    """Order-0 entropy (bytes) of the codes of each level, coarse to fine; the whole closed loop
    is checked against the bound."""
    x = a.copy()
    n = a.shape
    top = 1
    while any(2 * top < m for m in n):
        top *= 2
    out = []
    s = top
    while s >= 1:
        active = [d for d in range(3) if n[d] > s]
        if mode == "dim":
            groups = [(d, tuple(active[:i])) for i, d in enumerate(active)]
        else:
            groups = [(odd, ()) for k in range(1, len(active) + 1) for odd in itertools.combinations(active, k)]
        codes = []
        for odd, before in groups:
            odd_axes = (odd,) if mode == "dim" else odd
            sel = tuple(slice(s, None, 2 * s) if e in odd_axes else slice(0, None, s if e in before else 2 * s)
                        for e in range(3))
            preds = [_interpolate(x[tuple(slice(0, None, s) if e == d else sel[e] for e in range(3))], d)
                     for d in odd_axes]
            p = np.mean(preds, axis=0)
            q = np.rint((a[sel] - p) / (2 * eb))
            x[sel] = p + 2 * eb * q
            codes.append(q.ravel())
        if codes:
            q = np.concatenate(codes).astype(np.int64)
            _, c = np.unique(q, return_counts=True)
            out.append(float(-(c * np.log2(c / c.sum())).sum() / 8))
        s //= 2
    assert np.abs(x - a).max() <= eb * (1 + 1e-9)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fields", help="comma-separated field-name prefixes (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "interpolation_candidates")
    args = ap.parse_args(argv)
    rows = []
    for f in find_fields(SHARED / "data", args.fields.split(",") if args.fields else None, None):
        p = Prepared(f)
        a = p.filled.astype(np.float64)
        while a.ndim < 3:
            a = a[None]
        a = a.reshape((-1,) + a.shape[-2:]) if a.ndim > 3 else a
        row = dict(field=f.name, family=f.family, bounds={})
        for rel in RATIO_BOUNDS:
            dim, multi = (np.array(level_entropies(a, rel * p.vr, m)) for m in ("dim", "multi"))
            row["bounds"][f"{rel:g}"] = dict(dim=dim.tolist(), multi=multi.tolist(),
                                             multi_gain=float(dim.sum() / multi.sum()),
                                             best_gain=float(dim.sum() / np.minimum(dim, multi).sum()))
        rows.append(row)
        print(f.name, " ".join(f"{k}: {v['multi_gain']:.3f}/{v['best_gain']:.3f}" for k, v in row["bounds"].items()),
              flush=True)
    geo = {k: math.exp(np.mean([math.log(r["bounds"][k]["best_gain"]) for r in rows])) for k in rows[0]["bounds"]}
    lines = ["# Multi-dimensional interpolation against SZ3's order: order-0 entropy of the codes", "",
             f"{machine()}. Made by `benchmarks/interpolation_candidates.py` (see its docstring: a model of the "
             "two predictors with the same quantizer, not the codec). Gain = entropy with SZ3's "
             "dimension-by-dimension order / entropy with the other (> 1: fewer bits).", "",
             "| field | family | " + " | ".join(f"multi {k} | best per level {k}" for k in rows[0]["bounds"]) + " |",
             "|---|---|" + "---|---|" * len(rows[0]["bounds"])]
    for r in rows:
        lines.append(f"| {r['field']} | {r['family']} | " + " | ".join(
            f"{v['multi_gain']:.3f} | {v['best_gain']:.3f}" for v in r["bounds"].values()) + " |")
    lines += ["", "Geomean of the best-per-level gain: " + ", ".join(f"{k}: {v:.3f}" for k, v in geo.items()), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out.with_suffix(".json"), json.dumps(dict(machine=machine(), rows=rows, geomean=geo), indent=1))
    atomic_write(args.out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines[-2:]))


if __name__ == "__main__":
    main()
