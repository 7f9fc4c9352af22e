"""Would a wavelet transform member (SPERR's CDF 9/7, with outlier correction) pay in strata?
Measured on sci + zoo at the six bounds of ``rate_distortion.py``, before anyone builds it.

Issue 36's rate-distortion targets are set against SPERR, which codes a field's CDF 9/7 wavelet
coefficients and then corrects the points that miss the bound ("outliers"); strata predicts
(interpolation, multi-dimensional steps) and quantizes every point in a closed loop. At the same
maximum error a transform spends its bits where the energy is and leaves most points well inside
the bound, so its PSNR at a bit rate is higher (SPERR: +5.7 dB over strata on comb_density at
1e-2, at 14 % more bytes). This script measures how far a plain transform member, coded by
strata's own entropy layer, would move strata's standing.

**The candidate** (a model; nothing here is in ``src/strata``):

* Transform: the CDF 9/7 biorthogonal wavelet (Cohen, Daubechies, Feauveau 1992) by lifting
  (Daubechies and Sweldens 1998, four steps and a scaling), whole-sample symmetric extension,
  separable, dyadic; an axis is split again while its low band has at least 9 samples, at most 6
  times (so a 6-long axis, eraint's levels, is not transformed); float64, the Mallat layout.
* Quantization: every coefficient to the nearest multiple of ``q = c x eb`` (``c`` a constant for
  all fields, chosen below), reconstruction at the multiple.
* Coefficient coding: the integers binned as strata codes its quantization codes
  (``strata.entropy.binning``: zig-zag, 16 direct symbols, octave symbols with raw low bits),
  one static rANS table per (group, context) under four designs (:data:`DESIGNS`): tables per
  level or per subband, context = the magnitude classes (0, 1, >= 2) of the coefficient's
  neighbour before it on the last axis, on the axis before that and of its parent (27), or
  the class of their sum (6); strata's coder uses three neighbours' magnitudes the same way.
  Size = the symbols' cost under the
  tables as the decoder sees them (``tables.normalize(tables.quantized(counts))``, 11-bit
  frequencies), plus the raw bits, the serialized tables (``tables.serialize``) and four bytes of
  final rANS state per subband: the bytes strata's rANS would write, to within its final flush.
  The rANS stream itself is not written.
* Outliers: the inverse transform is rounded to the field's dtype; a valid point further than
  ``eb`` from its value gets a correction ``k`` (``value + 2 eb k``, the nearest) -- positions
  as gaps between flat indices and ``k`` zig-zagged, both binned and coded with one order-0 table
  each (sizes as above). The corrected reconstruction is checked: ``|x - y| <= eb`` on every
  valid point, in the field's dtype.
* Missing values (NaN, fill values) are filled with the valid mean (as the anchors get them) and
  their mask costs what strata's stream paid for it (``mask bytes`` of the strata stream at the
  same bound); PSNR and bit rate over the valid points.

**Compared, in one process on the same data:** strata (``strata.compress`` at the same
absolute bound, objective ``ratio``, this checkout), and the anchors' points of
``rate_distortion.py`` (SZ3, SPERR; from its cache of anchor points keyed by field digest,
anchor version and bound, measured when missing). BD-rate: ``rate_distortion.bd_rate`` (Akima,
over the six bounds). The variant (design and ``c`` of ``C_GRID``) is chosen leave one family
out: for each family, the variant with the lowest median BD-rate vs SPERR over the *other*
families' fields (for PSNR), and the one with the highest geomean ratio gain of the oracle
below on them (for ratio); that family's figures are reported with those.

**Portfolio:** ``oracle`` takes, per field and bound, the smaller of strata's stream and the
candidate (ratio variant; what a tuner that always chose right would get; the choice is not
modelled); its curve gives the ratio targets and a BD-rate.

What the model leaves out: chunking (SPERR and strata code chunks independently; the whole field
is one transform here), progressive and region reads (a subband is a resolution level, a region
needs the coefficients under its support), decoding speed, and the tuner's choice.

Usage: ``python benchmarks/transform_candidates.py [--fields PREFIX,...] [--out PREFIX]``
writes ``benchmarks/results/transform_candidates.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from collections import namedtuple
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rate_distortion as rd  # noqa: E402
from common import ROOT, SHARED, geomean, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.entropy import rans, tables  # noqa: E402
from strata.entropy.binning import ALPHABET, DIRECT, ESCAPE  # noqa: E402

#: Quantization steps tried, in units of the absolute bound.
C_GRID = (0.75, 1.0, 1.5, 2.0, 2.5, 3.0)
#: Lifting constants of CDF 9/7 (predict, update, predict, update, scaling).
ALPHA, BETA, GAMMA, DELTA = -1.586134342059924, -0.052980118572961, 0.882911075530934, 0.443506852043971
ZETA = 1.230174104914001
MAX_LEVELS = 6
MIN_LOW = 9
#: Where every coefficient sits: level (0 coarsest), subband, parent's flat index (-1: none).
Bands = namedtuple("Bands", "level n_levels band n_bands parent")


# ------------------------------------------------------------------------------- transform
def _neighbours(even, odd):
    """For lifting along axis 0: ``even[i] + even[i + 1]`` at each odd sample (whole-sample
    symmetric: past the end, ``even[i + 1]`` is ``even[i]``)."""
    nxt = np.empty_like(odd)
    n_odd = len(odd)
    if len(even) > n_odd:
        nxt[:] = even[1:n_odd + 1]
    else:
        nxt[:-1] = even[1:]
        nxt[-1] = even[-1]
    return even[:n_odd] + nxt


def _around(odd, n_even):
    """``odd[i - 1] + odd[i]`` at each even sample, mirrored at both ends."""
    prev = np.empty((n_even,) + odd.shape[1:])
    prev[0] = odd[0]
    prev[1:] = odd[:n_even - 1]
    cur = np.empty_like(prev)
    cur[:len(odd)] = odd
    if n_even > len(odd):
        cur[-1] = odd[-1]
    return prev + cur


def forward_axis(x, axis):
    x = np.moveaxis(x, axis, 0)
    even, odd = x[0::2].copy(), x[1::2].copy()
    odd += ALPHA * _neighbours(even, odd)
    even += BETA * _around(odd, len(even))
    odd += GAMMA * _neighbours(even, odd)
    even += DELTA * _around(odd, len(even))
    return np.moveaxis(np.concatenate([even * ZETA, odd / ZETA]), 0, axis)


def inverse_axis(y, axis, n):
    y = np.moveaxis(y, axis, 0)
    n_even = (n + 1) // 2
    even, odd = y[:n_even] / ZETA, y[n_even:n] * ZETA
    even = even - DELTA * _around(odd, n_even)
    odd = odd - GAMMA * _neighbours(even, odd)
    even = even - BETA * _around(odd, n_even)
    odd = odd - ALPHA * _neighbours(even, odd)
    x = np.empty((n,) + even.shape[1:])
    x[0::2], x[1::2] = even, odd
    return np.moveaxis(x, 0, axis)


def plan(shape):
    """The transform's levels: per level, the low band's shape before it and the axes it splits."""
    levels, cur = [], list(shape)
    for _ in range(MAX_LEVELS):
        axes = [a for a, n in enumerate(cur) if n >= MIN_LOW]
        if not axes:
            break
        levels.append((tuple(cur), tuple(axes)))
        cur = [(n + 1) // 2 if a in axes else n for a, n in enumerate(cur)]
    return levels


def forward(x, levels):
    y = x.astype(np.float64)
    for shp, axes in levels:
        box = tuple(slice(0, n) for n in shp)
        sub = y[box]
        for a in axes:
            sub = forward_axis(sub, a)
        y[box] = sub
    return y


def inverse(y, levels):
    y = y.copy()
    for shp, axes in reversed(levels):
        box = tuple(slice(0, n) for n in shp)
        sub = y[box]
        for a in reversed(axes):
            sub = inverse_axis(sub, a, shp[a])
        y[box] = sub
    return y


def subbands(shape, levels):
    """Per coefficient: its level (0: the coarsest low band, then 1 for the coarsest details up
    to ``len(levels)`` for the finest), and the flat index of its parent (the coefficient at half
    its position in the same orientation one level coarser; -1 where there is none), both int64
    arrays of ``shape``."""
    level = np.zeros(shape, np.int64)
    parent = np.full(shape, -1, np.int64)
    band = np.zeros(shape, np.int64)
    k = 1
    n = len(levels)
    for li, (shp, axes) in enumerate(levels):
        half = [(m + 1) // 2 if a in axes else m for a, m in enumerate(shp)]
        coarser = levels[li + 1] if li + 1 < n else None
        for code in range(1, 1 << len(axes)):
            box, pmap = [], []
            for a in range(len(shape)):
                hi = a in axes and code >> axes.index(a) & 1
                lo_, hi_ = (half[a], shp[a]) if hi else (0, half[a])
                box.append(np.arange(lo_, hi_))
                local = np.arange(hi_ - lo_)
                if coarser is None:
                    pmap.append(None)
                    continue
                cshp, caxes = coarser
                if a in caxes:
                    chalf = (cshp[a] + 1) // 2
                    pmap.append((chalf if hi else 0) + np.minimum(local // 2, (cshp[a] - chalf if hi else chalf) - 1))
                else:
                    pmap.append((lo_ if hi else 0) + local if hi else local)
            level[np.ix_(*box)] = n - li
            band[np.ix_(*box)] = k
            k += 1
            if coarser is not None and all(m is not None for m in pmap):
                parent[np.ix_(*box)] = np.ravel_multi_index(np.ix_(*pmap), shape)
    return Bands(level, n + 1, band, k, parent)


# ---------------------------------------------------------------------------------- coding
def binned(values):
    """strata's binning of signed integers: ``(symbols, raw bits)`` (numpy)."""
    z = np.where(values > 0, 2 * values - 1, -2 * values).astype(np.int64)
    e = np.floor(np.log2(np.maximum(z, 1))).astype(np.int64)
    nb = np.where(z < DIRECT, 0, e - 2)
    sym = np.where(z < DIRECT, z, DIRECT + 4 * (e - 4) + ((z >> np.maximum(nb, 0)) & 3))
    wide = sym >= ESCAPE  # past the octaves: the escape symbol and the value's 64 bits
    sym[wide] = ESCAPE
    return sym, int(nb[~wide].sum()) + 64 * int(wide.sum())


def coded_bytes(symbols, contexts, n_contexts, raw_bits, n_streams):
    """Bytes of strata's rANS coding of ``symbols`` under one static table per context."""
    counts = np.bincount(contexts * ALPHABET + symbols, minlength=n_contexts * ALPHABET).reshape(n_contexts, ALPHABET)
    used = counts.sum(1) > 0
    counts = counts[used]
    freq = tables.normalize(tables.quantized(counts))
    with np.errstate(divide="ignore"):
        cost = np.where(counts > 0, -np.log2(np.maximum(freq, 1) / tables.SCALE), 0.0)
    bits = float((counts * cost).sum()) + raw_bits
    return math.ceil(bits / 8) + len(tables.serialize(counts)) + n_streams * rans.STATE_BYTES + int(used.size)


def magnitude(c):
    return np.minimum(np.abs(c), 2).astype(np.int64)


def _neighbour_codes(codes, parent):
    before = np.zeros_like(codes)
    before[..., 1:] = codes[..., :-1]
    above = np.zeros_like(codes)
    if codes.ndim > 1:
        above[..., 1:, :] = codes[..., :-1, :]
    par = np.where(parent >= 0, codes.ravel()[np.maximum(parent, 0)].reshape(codes.shape), 0)
    return np.abs(before), np.abs(above), np.abs(par)


#: Context designs of the coefficient coder: (tables grouped by, context of the neighbours'
#: magnitudes). ``classes``: 0, 1, >= 2 for each of before / above / parent (27 contexts);
#: ``sum``: their sum in 0, 1, 2, 3-4, 5-8, > 8 (6 contexts).
DESIGNS = {"level-classes": ("level", "classes"), "level-sum": ("level", "sum"),
           "band-classes": ("band", "classes"), "band-sum": ("band", "sum")}
_SUM_EDGES = np.array([0, 1, 2, 4, 8])


def coefficient_bytes(codes, bands: Bands, design: str, nb):
    """Coded bytes of the quantized coefficients under context design ``design``
    (:data:`DESIGNS`); ``nb`` the neighbours' magnitudes (:func:`_neighbour_codes`)."""
    group, kind = DESIGNS[design]
    g, n_g = (bands.level, bands.n_levels) if group == "level" else (bands.band, bands.n_bands)
    before, above, par = nb
    if kind == "sum":
        k = len(_SUM_EDGES) + 1
        ctx = g * k + np.searchsorted(_SUM_EDGES, before + above + par, side="left")
    else:
        k = 27
        ctx = g * k + np.minimum(before, 2) * 9 + np.minimum(above, 2) * 3 + np.minimum(par, 2)
    sym, raw = binned(codes.ravel())
    return coded_bytes(sym, ctx.ravel(), n_g * k, raw, n_g)


def outlier_bytes(positions, corrections):
    if positions.size == 0:
        return 1
    gaps = np.diff(positions, prepend=-1) - 1
    gsym, graw = binned(gaps)  # gaps >= 0: zig-zag of a non-negative g is 2g, a wasted bit at most
    ksym, kraw = binned(corrections)
    zero = np.zeros(gsym.size, np.int64)
    return (coded_bytes(gsym, zero, 1, graw, 1) + coded_bytes(ksym, zero, 1, kraw, 1)
            + len(str(positions.size)))


def candidate(f: rd.Prepared, coeffs, levels, bands: Bands, rel, c, mask_bytes):
    """The candidate's rows at bound ``rel`` and step ``c``, one per context design."""
    eb = rel * f.vr
    q = c * eb
    codes = np.rint(coeffs / q).astype(np.int64)
    y = (inverse(codes * q, levels) + f.vals64.mean()).astype(f.a.dtype)
    x = f.a
    err = x.astype(np.float64) - y
    out = f.valid & (np.abs(err) > eb)
    pos = np.flatnonzero(out)
    k = np.rint(err.ravel()[pos] / (2 * eb)).astype(np.int64)
    yf = y.ravel()
    yf[pos] = (yf[pos].astype(np.float64) + 2 * eb * k).astype(f.a.dtype)
    still = np.abs(x.ravel()[pos].astype(np.float64) - yf[pos]) > eb
    extra = 0
    if still.any():  # the dtype's rounding of the correction missed: store those exactly
        yf[pos[still]] = x.ravel()[pos[still]]
        extra = int(still.sum()) * (x.itemsize + 4)
    extra += outlier_bytes(pos, k) + mask_bytes + 16  # header: shape, bound, c, levels
    row = f.point("transform", rel, eb, 1, yf.reshape(x.shape), 0.0)
    if not row["bound_ok"]:
        raise AssertionError(f"bound missed at {rel}")
    nb = _neighbour_codes(codes, bands.parent)
    rows = {}
    for design in DESIGNS:
        n_bytes = coefficient_bytes(codes, bands, design, nb) + extra
        rows[design] = dict(row, bytes=n_bytes, ratio=x.nbytes / n_bytes, bits_per_value=8 * n_bytes / f.n_valid,
                            c=c, design=design, outliers=int(pos.size), outlier_share=pos.size / f.n_valid)
    return rows


def strata_mask_bytes(f: rd.Prepared, rel: float) -> int:
    """The mask section's bytes in strata's stream (0 without missing values)."""
    if f.n_valid == f.a.size:
        return 0
    import strata
    import strata.lossy as lossy

    blob = strata.compress(f.a, abs_error=rel * f.vr, fill_value=f.fill) if f.fill is not None else \
        strata.compress(f.a, abs_error=rel * f.vr)
    return lossy.open_stream(blob).mask_bytes


# ------------------------------------------------------------------------------- summaries
def bd(anchor_rows, rows):
    return rd.bd_rate(anchor_rows, rows, "psnr")[0]


def oracle(rec, variant):
    """Per bound, the smaller of strata's stream and the candidate's."""
    return [min(s, x, key=lambda r: r["bytes"]) for s, x in zip(rec["strata"], rec["transform"][variant])]


def ratio_gain(rec, rows):
    """strata-variant ratio / the better of SZ3 and SPERR, at the ratio bounds."""
    return [rows[i]["ratio"] / max(rec["sz3"][i]["ratio"], rec["sperr"][i]["ratio"])
            for i, rel in enumerate(rd.BOUNDS) if rel in rd.RATIO_BOUNDS]


def lofo(results, variants):
    """Per family, the variants chosen on the other families: ``psnr``, the lowest median BD-rate
    vs SPERR of the candidate alone; ``ratio``, the highest geomean ratio gain of the oracle."""
    out = {}
    for fam in sorted({r["family"] for r in results.values()}):
        others = [r for r in results.values() if r["family"] != fam]
        psnr = min(variants, key=lambda v: statistics.median(r["bd_sperr"][v] for r in others))
        ratio = max(variants, key=lambda v: geomean([g for r in others for g in ratio_gain(r, oracle(r, v))]))
        out[fam] = {"psnr": psnr, "ratio": ratio}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fields", default="", help="comma-separated field-name prefixes")
    ap.add_argument("--out", default="transform_candidates")
    args = ap.parse_args()
    prefixes = [p for p in args.fields.split(",") if p]
    fields = rd.find_fields(SHARED / "data", prefixes, None)
    versions = rd.anchor_versions()
    variants = [f"{d}@{c:g}" for d in DESIGNS for c in C_GRID]
    t_start = time.perf_counter()
    results = {}
    for fld in fields:
        f = rd.Prepared(fld)
        levels = plan(f.a.shape)
        t0 = time.perf_counter()
        coeffs = forward(f.filled - f.vals64.mean(), levels)
        bands = subbands(f.a.shape, levels)
        rec = {"family": fld.family, "shape": list(f.a.shape), "levels": [list(ax) for _, ax in levels],
               "strata": [], "sz3": [], "sperr": [], "transform": {v: [] for v in variants}}
        for rel in rd.BOUNDS:
            rec["strata"].append(rd.measure(f, "strata", rel))
            for a in ("sz3", "sperr"):
                rec[a].append(rd.anchor_point(fld, f, a, versions[a], rel, True)[0])
            mb = strata_mask_bytes(f, rel)
            for c in C_GRID:
                for d, row in candidate(f, coeffs, levels, bands, rel, c, mb).items():
                    rec["transform"][f"{d}@{c:g}"].append(row)
        rec["seconds"] = time.perf_counter() - t0
        rec["bd_sperr"] = {v: bd(rec["sperr"], rows) for v, rows in rec["transform"].items()}
        rec["bd_sz3"] = {v: bd(rec["sz3"], rows) for v, rows in rec["transform"].items()}
        rec["bd_sperr_strata"] = bd(rec["sperr"], rec["strata"])
        rec["bd_sz3_strata"] = bd(rec["sz3"], rec["strata"])
        results[fld.name] = rec
        best = min(variants, key=lambda v: rec["bd_sperr"][v])
        print(f"{fld.name:26s} BD vs SPERR: strata {rec['bd_sperr_strata']:+6.1f} %, transform best {best} "
              f"{rec['bd_sperr'][best]:+6.1f} %  ({rec['seconds']:.1f} s)", flush=True)
    choice = lofo(results, variants)
    for rec in results.values():
        ch = choice[rec["family"]]
        rec["psnr_variant"], rec["ratio_variant"] = ch["psnr"], ch["ratio"]
        rec["oracle"] = oracle(rec, ch["ratio"])
    report = {"date": datetime.date.today().isoformat(), "machine": machine(), "anchor_versions": versions,
              "strata_source": rd.strata_source(), "c_grid": list(C_GRID), "designs": list(DESIGNS),
              "lofo": choice, "seconds": time.perf_counter() - t_start, "fields": results}
    out = ROOT / "benchmarks" / "results" / args.out
    text = render(report)
    for rec in results.values():  # the JSON keeps the chosen variants' points, every variant's BD-rates
        keep = {rec["psnr_variant"], rec["ratio_variant"]}
        rec["transform"] = {v: rows for v, rows in rec["transform"].items() if v in keep}
    atomic_write(out.with_suffix(".json"), json.dumps(report, separators=(",", ":")) + "\n")
    atomic_write(out.with_suffix(".md"), text)
    print(text)


def _targets(results, pick):
    """Issue 36's figures of the curves ``pick(rec)`` gives per field."""
    gains, bd_sperr, bd_sz3 = [], [], []
    for rec in results.values():
        rows = pick(rec)
        gains += ratio_gain(rec, rows)
        bd_sperr.append(bd(rec["sperr"], rows))
        bd_sz3.append(bd(rec["sz3"], rows))
    wins = sum(g >= 1 for g in gains)
    return (f"{wins}/{len(gains)} = {100 * wins / len(gains):.1f} %", f"{geomean(gains):.3f}x",
            f"{statistics.median(bd_sz3):+.1f} % / {max(bd_sz3):+.1f} %",
            f"{statistics.median(bd_sperr):+.1f} % / {max(bd_sperr):+.1f} %")


def render(report) -> str:
    res, src = report["fields"], report["strata_source"]
    fmt_choice = "; ".join(f"{fam}: {c['psnr']} / {c['ratio']}" for fam, c in sorted(report["lofo"].items()))
    lines = ["# A wavelet transform member (CDF 9/7 + outlier correction) against strata, SZ3 and SPERR",
             "",
             f"Made by `benchmarks/transform_candidates.py` (method in its docstring). {report['date']}, "
             f"{report['machine']}, one thread for the candidate (NumPy), strata on its numba threads. strata HEAD "
             f"{src['head']}{'' if src['matches_head'] else ' (with local changes)'}; "
             f"anchors {report['anchor_versions']['sz3']}, {report['anchor_versions']['sperr']} (cached points of "
             f"`rate_distortion.py`). {len(res)} fields, bounds {', '.join(f'{b:g}' for b in rd.BOUNDS)} of the valid "
             "range. The candidate's bytes are what strata's entropy layer (rANS, static per-context tables, tables "
             "included) would write for a model transform outside `src/strata`: no stream is written.",
             "",
             "Variants: context design @ c (quantization step / bound), chosen leave one family out -- for PSNR, the "
             "lowest median BD-rate vs SPERR of the other families; for ratio, the highest geomean ratio gain of the "
             "oracle portfolio on them. Per family held out (psnr / ratio): " + fmt_choice + ".",
             "",
             "## Issue 36's targets",
             "",
             "| variant | ratio >= better of SZ3/SPERR (1e-2/1e-3/1e-4) | geomean vs better "
             "| BD-rate vs SZ3 median / worst | BD-rate vs SPERR median / worst |",
             "|---|---|---|---|---|"]
    picks = {"strata (this checkout, objective ratio)": lambda r: r["strata"],
             "transform candidate (LOFO psnr variant)": lambda r: r["transform"][r["psnr_variant"]],
             "transform candidate (LOFO ratio variant)": lambda r: r["transform"][r["ratio_variant"]],
             "oracle: smaller of strata and candidate per field-bound (LOFO ratio variant)": lambda r: r["oracle"]}
    for label, pick in picks.items():
        lines.append(f"| {label} | " + " | ".join(_targets(res, pick)) + " |")
    lines += ["", "Targets: >= 95 %, >= 1.25x, SZ3 <= -15 % / <= 0 %, SPERR <= -10 % / <= +5 %.", "",
              "## Per field", "",
              "BD-rate at equal PSNR (%, negative = fewer bits) of strata and of the candidate (LOFO psnr variant); "
              "ratio at 1e-2 / 1e-3 / 1e-4 (candidate: LOFO ratio variant); outliers: share of valid points "
              "corrected at 1e-3 (ratio variant).", "",
              "| field | family | BD vs SPERR strata | candidate | BD vs SZ3 strata | candidate | ratio strata "
              "| candidate | SPERR | SZ3 | outliers |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    idx = [rd.BOUNDS.index(b) for b in rd.RATIO_BOUNDS]
    fmt = lambda rows: " / ".join(f"{rows[i]['ratio']:.1f}" for i in idx)  # noqa: E731
    for name, rec in res.items():
        pv, rv = rec["psnr_variant"], rec["ratio_variant"]
        t = rec["transform"][rv]
        lines.append(f"| {name} | {rec['family']} | {rec['bd_sperr_strata']:+.1f} | {rec['bd_sperr'][pv]:+.1f} | "
                     f"{rec['bd_sz3_strata']:+.1f} | {rec['bd_sz3'][pv]:+.1f} | {fmt(rec['strata'])} | {fmt(t)} | "
                     f"{fmt(rec['sperr'])} | {fmt(rec['sz3'])} | {t[rd.BOUNDS.index(1e-3)]['outlier_share']:.2%} |")
    variants = list(next(iter(res.values()))["bd_sperr"])
    lines += ["", "## Every variant on all fields (not held out)", "",
              "| variant | BD vs SPERR median | worst | oracle geomean ratio gain |", "|---|---|---|---|"]
    for v in variants:
        b = [r["bd_sperr"][v] for r in res.values()]
        g = geomean([x for r in res.values() for x in ratio_gain(r, oracle(r, v))])
        lines.append(f"| {v} | {statistics.median(b):+.1f} % | {max(b):+.1f} % | {g:.3f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
