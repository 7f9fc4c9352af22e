"""How should one strata stream be readable at any error bound (issue 39)? Two layerings measured, before anyone
builds one, with a model of strata's coder on every field of sci + zoo.

**The model** (nothing here is in ``src/strata``): the field's points refined from a coarse grid by levels, each level
predicted dimension by dimension by linear interpolation from the points already reconstructed (closed loop), the
prediction residual quantized with bin ``2 e`` (bound ``e``), the codes costed by their empirical entropy with one
static table per level (strata codes its quantization codes with static rANS tables per level and chunk; table and
context costs are left out on both sides, so the model compares layerings, not absolute sizes). A *dedicated stream*
at bound ``e`` is this model at ``e``; bounds are relative to the field's value range; missing values are replaced by
the mean of the valid ones.

**The layerings** (layer ``k`` at bound ``e_k``, ``e_0`` coarsest; reading at bound ``e`` reads the layers down to
the first ``e_k <= e``):

* ``bitplanes``: layer 0 a dedicated stream at ``e_0``, then the residual of its reconstruction refined one bit per
  point and halving (the point's interval halved; the bit costed with one table per halving and a context: the
  interval's distance from zero), as bit-plane coders (IPComp, pMGARD) refine;
* ``conditional``: every layer a closed-loop stream at its bound, its codes coded *within the window* the previous
  layer leaves (the codes whose bin meets ``[x'_{k-1} - e_{k-1}, x'_{k-1} + e_{k-1}]``, ``x'_{k-1}`` the previous
  layer's reconstruction): the level's table restricted to the window and renormalized. The decoder knows the window
  (it has the previous layer), so the cost is what it needs.
* ``nested``: as ``conditional``, but the layer's grid is laid from the previous layer's value (``x'_k = x'_{k-1} +
  2 e_k j``, ``|j| <= e_{k-1} / (2 e_k)`` rounded), so the window is exact; the prediction, closed-loop at the
  layer's bound, only centres the code's distribution (the code is ``j`` minus the prediction's ``j``).

Layers every decade (``1e-2 .. 1e-6``) and every half decade. Reported per field and target bound (``1e-2``, ``2e-3``,
``1e-3`` .. ``1e-6``): bytes read by the layered stream against the dedicated stream at the target; its finest size
against the dedicated stream at the finest bound; and the passes a read decodes (each layer is a full interpolation
pass; a dedicated stream is one). Geomeans over the fields.

Writes ``precision_candidates.{json,md}`` to ``--out`` (atomically)::

    .venv/bin/python benchmarks/precision_candidates.py [--fields era5_t2m cosmo] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmarks.common import machine  # noqa: E402

from strata.atomic import atomic_write  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
TARGETS = (1e-2, 2e-3, 1e-3, 1e-4, 1e-5, 1e-6)  # (2e-3: between the layers of both spacings)
SPACINGS = {"decade": [10.0 ** -k for k in range(2, 7)], "half decade": [10.0 ** (-k / 2) for k in range(4, 13)]}


def load(path: Path) -> np.ndarray:
    """A raw field ``NAME_D0xD1xD2.f32/.f64``, as float64, missing values (NaN, the zoo's fill values) replaced by
    the mean of the valid ones."""
    dims = tuple(int(d) for d in path.stem.rsplit("_", 1)[1].split("x"))
    x = np.fromfile(path, dtype="<f4" if path.suffix == ".f32" else "<f8").reshape(dims).astype(np.float64)
    valid = np.isfinite(x) & (np.abs(x) < 1e30)
    return np.where(valid, x, x[valid].mean())


def passes(shape) -> list[tuple[int, int, int]]:
    """``(level, axis, stride)`` of every pass from the coarsest grid to stride 1."""
    top = 1
    while top * 2 < max(shape):
        top *= 2
    out, s, level = [], top, 1
    while s >= 1:
        out += [(level, ax, s) for ax in range(len(shape)) if shape[ax] > s]
        s, level = s // 2, level + 1
    return out


def _slices(ndim: int, ax: int, s: int, done: set, new: bool):
    return tuple(slice(s if new else 0, None, 2 * s) if d == ax else slice(0, None, s if d in done else 2 * s)
                 for d in range(ndim))


def stream(x: np.ndarray, eb: float, prev: np.ndarray | None = None, prev_eb: float = 0.0, nested: bool = False):
    """The model's closed-loop stream at bound ``eb``: ``(reconstruction, cost in bits)``; with ``prev`` (the previous
    layer's reconstruction at ``prev_eb``) each code is costed within the window that layer leaves; ``nested``: the
    quantization grid is laid from the previous layer's value instead of the prediction (the window is then exact),
    the code costed as its offset from the prediction's bin."""
    xh = np.zeros_like(x)
    top = passes(x.shape)
    stride = top[0][2] * 2 if top else 1
    codes: dict[int, list] = {}

    def quantize(target, pred, level, where):
        if nested and prev is not None:
            half = np.floor(prev_eb / (2 * eb) + 0.5)  # (|j| <= half keeps the value within eb: |x - prev| <= prev_eb)
            j = np.clip(np.round((target - prev[where]) / (2 * eb)), -half, half)
            guess = np.round((pred - prev[where]) / (2 * eb))
            codes.setdefault(level, []).append(((j - guess).ravel(), (-half - guess, half - guess)))
            return prev[where] + 2 * eb * j
        q = np.round((target - pred) / (2 * eb))
        window = None
        if prev is not None:
            lo, hi = prev[where] - prev_eb, prev[where] + prev_eb
            window = (np.ceil((lo - pred) / (2 * eb) - 0.5), np.floor((hi - pred) / (2 * eb) + 0.5))
        codes.setdefault(level, []).append((q.ravel(), window))
        return pred + 2 * eb * q

    base = tuple(slice(0, None, stride) for _ in x.shape)
    xh[base] = quantize(x[base], np.zeros_like(x[base]), 0, base)
    level_now, done = None, set()
    for level, ax, s in top:
        if level != level_now:
            level_now, done = level, set()
        new, old = _slices(x.ndim, ax, s, done, True), _slices(x.ndim, ax, s, done, False)
        known, n_new = xh[old], x[new].shape[ax]
        left = np.take(known, range(n_new), axis=ax)
        right = np.take(known, np.minimum(np.arange(n_new) + 1, known.shape[ax] - 1), axis=ax)
        inside = np.expand_dims(np.arange(n_new) + 1 < known.shape[ax], tuple(d for d in range(x.ndim) if d != ax))
        xh[new] = quantize(x[new], np.where(inside, (left + right) / 2, left), level, new)
        done.add(ax)
    if not np.abs(xh - x).max() <= eb * (1 + 1e-9):
        raise AssertionError("the model missed its bound")
    return xh, sum(_level_bits(parts) for parts in codes.values()), codes


def _level_bits(parts: list) -> float:
    """Entropy of a level's codes under its static table; within each code's window where there is one."""
    q = np.concatenate([p[0] for p in parts])
    values, counts = np.unique(q, return_counts=True)
    prob = counts / counts.sum()
    if parts[0][1] is None:
        return float(-(counts * np.log2(prob)).sum())
    lo = np.concatenate([p[1][0].ravel() for p in parts])
    hi = np.concatenate([p[1][1].ravel() for p in parts])
    off = int(values.min())
    dense = np.zeros(int(values.max()) - off + 1)
    dense[(values - off).astype(np.int64)] = prob
    cum = np.concatenate([[0.0], np.cumsum(dense)])
    # (the window holds the code but for the rounding of the bounds' arithmetic, which a coder must make exact)
    a = np.minimum(np.clip(lo - off, 0, dense.size), q - off).astype(np.int64)
    b = np.maximum(np.clip(hi - off + 1, 0, dense.size), q - off + 1).astype(np.int64)
    return float(-np.log2(dense[(q - off).astype(np.int64)] / (cum[b] - cum[a])).sum())


def truncated_plane_bits(x: np.ndarray, finest: float, bounds: list[float]) -> list[float]:
    """Bits read at each of ``bounds`` from one stream at ``finest`` whose codes are stored as bit planes, most
    significant first (IPComp's layout): level ``l`` read without its ``t_l`` lowest planes (each code known to a
    bucket of ``2**t_l``, reconstructed at the bucket's middle), decoded in one pass from the values so read. Linear
    interpolation passes a reference's error on unchanged, so a pass of level ``l`` adds at most
    ``finest * (2**t_l - 1)`` to what its references carry: the ``t_l`` minimize the bits (the entropy of each level's
    truncated codes) subject to ``finest * (1 + sum_l passes_l * (2**t_l - 1)) <= bound`` (a Lagrangian search)."""
    _, _, codes = stream(x, finest)
    counts = {0: 1}
    for level, _, _ in passes(x.shape):
        counts[level] = counts.get(level, 0) + 1
    cost = {}
    for level, parts in codes.items():
        q = np.concatenate([p[0] for p in parts]).astype(np.int64)
        for t in range(40):
            _, c = np.unique(q >> t, return_counts=True)
            cost[level, t] = float(-(c * np.log2(c / c.sum())).sum())
            if c.size == 1:
                break
    tmax = {lv: max(t for lv2, t in cost if lv2 == lv) for lv in codes}
    out = []
    for bound in bounds:
        budget = bound / finest - 1

        def pick(lam):
            ts = {lv: min(range(tmax[lv] + 1), key=lambda t, lv=lv: cost[lv, t] + lam * counts[lv] * (2 ** t - 1))
                  for lv in codes}
            return ts, sum(counts[lv] * (2 ** t - 1) for lv, t in ts.items())

        lo, hi = 0.0, 1e12
        for _ in range(200):
            mid = math.sqrt(lo * hi) if lo > 0 else hi / 1e6
            ts, used = pick(mid)
            if used > budget:
                lo = mid
            else:
                hi = mid
            if hi / max(lo, 1e-300) < 1 + 1e-9:
                break
        ts, used = pick(hi)
        assert used <= budget
        out.append(sum(cost[lv, t] for lv, t in ts.items()))
    return out


def bitplane_bits(x: np.ndarray, xh: np.ndarray, e0: float, bounds: list[float]) -> list[float]:
    """Bits of each refinement layer after a layer at ``e0`` (reconstruction ``xh``): one bit per point and halving
    until the interval is within each of ``bounds``."""
    r = (x - xh).ravel()
    center, width, out = np.zeros_like(r), e0, []
    for e in bounds:
        bits = 0.0
        while width > e * (1 + 1e-12):
            up = r >= center
            ctx = np.minimum(np.round(np.abs(center) / width).astype(np.int64), 5)
            for c in range(6):
                b = up[ctx == c]
                p = b.mean() if b.size else 0.0
                if 0 < p < 1:
                    bits += b.size * -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
            center = center + np.where(up, width / 2, -width / 2)
            width /= 2
        out.append(bits)
    return out


def field_rows(path: Path) -> dict:
    x = load(path)
    vr = float(x.max() - x.min()) or 1.0
    n = x.size
    dedicated = {e: stream(x, e * vr)[1] / n for e in sorted(set(TARGETS) | {b for v in SPACINGS.values() for b in v})}
    finest = min(SPACINGS["decade"])
    truncated = truncated_plane_bits(x, finest * vr, [t * vr for t in TARGETS])
    out = {"points": n, "dedicated_bits_per_point": {f"{e:g}": b for e, b in dedicated.items()}, "layerings": {}}
    for spacing, bounds in SPACINGS.items():
        layerings, first = {}, {}
        for name, nested in (("conditional", False), ("nested", True)):
            prev, prev_eb, total, cum = None, 0.0, 0.0, []
            for e in bounds:
                xh, bits, _ = stream(x, e * vr, prev, prev_eb, nested)
                first.setdefault(name, xh)
                total += bits / n
                cum.append(total)
                prev, prev_eb = xh, e * vr
            layerings[name] = cum
        planes = np.cumsum([dedicated[bounds[0]] * n] + bitplane_bits(x, first["conditional"], bounds[0] * vr,
                                                                      [e * vr for e in bounds[1:]])) / n
        layerings["bitplanes"] = list(planes)
        for name, layered in layerings.items():
            rows = {}
            for t in TARGETS:
                k = next(i for i, e in enumerate(bounds) if e <= t * (1 + 1e-9))
                rows[f"{t:g}"] = {"read_bits_per_point": layered[k], "vs_dedicated": layered[k] / dedicated[t],
                                  "passes": 1 if name == "bitplanes" else k + 1}
            out["layerings"][f"{name}, {spacing}"] = {
                "targets": rows, "finest_vs_dedicated": layered[-1] / dedicated[bounds[-1]]}
    out["layerings"]["truncated planes (IPComp-like)"] = {
        "targets": {f"{t:g}": {"read_bits_per_point": b / n, "vs_dedicated": b / n / dedicated[t], "passes": 1}
                    for t, b in zip(TARGETS, truncated)},
        "finest_vs_dedicated": 1.0}
    return out


def geomean(values) -> float:
    v = [x for x in values if x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def render(report: dict) -> str:
    fields = report["fields"]
    names = list(next(iter(fields.values()))["layerings"])
    lines = [f"Layered streams against dedicated streams, strata's coder modelled ({report['machine']}); "
             f"{len(fields)} fields of sci + zoo. Bytes read at each target bound over the dedicated stream's bytes "
             "(geomean, worst field); the finest layer's size over the dedicated stream at that bound; passes a read "
             "decodes.", "",
             "| layering | " + " | ".join(f"read at {t:g}" for t in TARGETS) + " | finest size | passes at 1e-4 |",
             "|---|" + "---|" * (len(TARGETS) + 2)]
    for name in names:
        cells = []
        for t in TARGETS:
            r = [f["layerings"][name]["targets"][f"{t:g}"]["vs_dedicated"] for f in fields.values()]
            cells.append(f"{geomean(r):.2f} ({max(r):.2f})")
        fin = [f["layerings"][name]["finest_vs_dedicated"] for f in fields.values()]
        p = next(iter(fields.values()))["layerings"][name]["targets"]["0.0001"]["passes"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {geomean(fin):.2f} ({max(fin):.2f}) | {p} |")
    lines += ["", "Per field, conditional layers every decade (read / dedicated at 1e-2 .. 1e-6, finest size):", "",
              "| field | " + " | ".join(f"{t:g}" for t in TARGETS) + " | finest |",
              "|---|" + "---|" * (len(TARGETS) + 1)]
    for fname, f in fields.items():
        lay = f["layerings"]["conditional, decade"]
        lines.append(f"| {fname} | " + " | ".join(f"{lay['targets'][f'{t:g}']['vs_dedicated']:.2f}" for t in TARGETS)
                     + f" | {lay['finest_vs_dedicated']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fields", nargs="*", help="field name prefixes (default: every field of sci and zoo)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    paths = sorted(p for folder in ("sci", "zoo") for p in (DATA / folder).glob("*_*x*.f*")
                   if not args.fields or any(p.name.startswith(f) for f in args.fields))
    report = {"machine": machine(), "targets": TARGETS, "spacings": SPACINGS, "fields": {}}
    for path in paths:
        report["fields"][path.stem.rsplit("_", 1)[0]] = field_rows(path)
        lay = report["fields"][path.stem.rsplit("_", 1)[0]]["layerings"]["conditional, decade"]
        print(f"{path.stem:40s} " + " ".join(f"{v['vs_dedicated']:.2f}" for v in lay["targets"].values()), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "precision_candidates.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / "precision_candidates.md", render(report))
    print(render(report))
    return report


if __name__ == "__main__":
    main()
