"""Would a Lorenzo predictor (SZ3's first- or second-order, chosen per block) pay in strata?
Measured two ways on sci + zoo at 1e-2, 1e-3, 1e-4 of the valid range, before anyone builds it.

**1. SZ3 by algorithm.** pysz (one thread, ABS bound = rel x valid range, missing values
mean-filled as in ``rate_distortion.py``) with ``cmprAlgo`` ``LORENZO_REG`` (Lorenzo + linear
regression per block), ``INTERP`` (interpolation only, default settings), ``INTERP_LORENZO``
(SZ3's default: its tuner picks Lorenzo-regression or tuned interpolation per field; the stream's
config says which), ``LORENZO_REG`` with first-order Lorenzo only (``Regression = No`` through
``szConfig.loadcfg``: the predictor the model below imitates) and ``LORENZO_REG`` with second-order
Lorenzo also allowed per block (``Lorenzo2ndOrder = Yes``); bytes and PSNR over the valid values,
beside strata's own (``strata.compress`` at the same absolute bound, fill value declared).

**2. A model inside strata's pipeline.** strata's own codes: ``strata.compress`` is run and its
``encode_level`` watched, which receives the codes of every point (the tuner's settings, lattice
and level-wise bounds: what the stream codes), the array it quantized (lattice indices when the
field is on a lattice) and the missing mask. On that same array, with strata's quantizer
(``strata.lossy.quantize.quantize_into``: bins ``2 eb``, reconstruction at the bin centre, exact
storage of unpredictable values) and the stream's coding bound, a closed-loop Lorenzo predictor
(first order: ``x - prod_d (1 - S_d) x``; second order: ``(1 - S_d)**2``; out-of-array
neighbours 0 as in SZ3; the axes the tuner made *flat* left out of the stencil; a missing point
reconstructed as its prediction and given no symbol, as strata does) is run over the whole
field in raster order (numba). ``|x - recon| <= eb`` is checked on every valid point.

Cost: the valid points are cut into blocks of 64 x 64 (2-D, and the slices of a 3-D array with
an axis shorter than 16) or 16 x 16 x 16 (3-D); a block's cost under a predictor is the order-0
entropy of its codes (all levels together for interpolation), plus the value's bits for each
unpredictable value. Totals: interpolation only, Lorenzo only (1st, 2nd order), and the cheaper
per block of interpolation and Lorenzo-1 (or of all three) plus 1 (log2 3) bit of side
information per block, each as a share of the interpolation total (< 1: fewer bits); the
cheapest of the three for the whole field (SZ3's per-field choice) follows from them. A second
cost model, whole-field order-0 tables (``global``: one per level for interpolation, as strata
lays its codes out; one per Lorenzo order), is in the JSON and the summary. Where the tuner
tightened the coarse levels' bounds (``alpha8/beta8`` != 8), strata is also run with the same
settings at uniform bounds (``interp_uniform_share``): interpolation at the bound Lorenzo has on
every point.

What the model leaves out: the per-block choice is an oracle on codes computed over the whole
field -- a hybrid's block would read neighbours reconstructed by the other predictor (both
within the bound), and blocks decodable on their own (region reads) would restart the stencil
at their edges (a lower order there, more bits); the coarse-level points of a Lorenzo block are
charged to Lorenzo although neighbouring interpolated blocks need them; strata's coder has
contexts and per-chunk tables (its real bits / the model's, in the table, are 0.7-1.3);
per-block tables cost bits not counted (alike for both predictors); SZ3's regression is not
modelled (part 1 measures it: ``LR`` against ``L1``).

    .venv/bin/python benchmarks/lorenzo_candidates.py [--fields PREFIX,...]

Writes benchmarks/results/lorenzo_candidates.{md,json}; about 5 minutes on the project's
2-core machine.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numba
import numpy as np
from numba import njit
from pysz import sz, szAlgorithm, szConfig, szErrorBoundMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import strata  # noqa: E402
import strata.lossy.codec as codec  # noqa: E402
from common import ROOT, SHARED, geomean, machine  # noqa: E402
from rate_distortion import RATIO_BOUNDS, Prepared, find_fields, strata_source  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.container import KIND_LOSSY, Source, unpack_header  # noqa: E402
from strata.lossy.header import LossyHeader  # noqa: E402
from strata.lossy.partition import as_3d_shape  # noqa: E402
from strata.lossy.quantize import UNPREDICTABLE, quantize_into  # noqa: E402
from strata.lossy.tune import Settings  # noqa: E402

#: SZ3 configurations: (key, cmprAlgo, extra ini text for ``szConfig.loadcfg``).
SZ3_ALGOS = (("lorenzo_reg", szAlgorithm.LORENZO_REG, None),
             ("lorenzo1", szAlgorithm.LORENZO_REG,
              "[GlobalSettings]\n[AlgoSettings]\nLorenzo = Yes\nLorenzo2ndOrder = No\nRegression = No\n"),
             ("interp", szAlgorithm.INTERP, None),
             ("interp_lorenzo", szAlgorithm.INTERP_LORENZO, None),
             ("lorenzo_reg2", szAlgorithm.LORENZO_REG,
              "[GlobalSettings]\n[AlgoSettings]\nLorenzo = Yes\nLorenzo2ndOrder = Yes\nRegression = Yes\n"))
ALGO_NAMES = {szAlgorithm.LORENZO_REG: "lorenzo_reg", szAlgorithm.INTERP: "interp",
              szAlgorithm.INTERP_LORENZO: "interp_lorenzo"}
#: Block edge: 3-D when every axis has at least BLOCK_3D points, else 2-D blocks on the long axes.
BLOCK_3D, BLOCK_2D = 16, 64
#: The model's columns, as shares of the interpolation bits.
MODEL_KEYS = ("l1", "l2", "best_l1", "best_all")
MODEL_LABELS = {"l1": "Lorenzo-1 only", "l2": "Lorenzo-2 only", "best_l1": "per block interp|L1",
                "best_all": "per block interp|L1|L2"}


# ------------------------------------------------------------------------------ SZ3 per algorithm
def run_sz3(p: Prepared, eb: float, algo, ini) -> tuple[int, np.ndarray, str]:
    """Bytes, decoded values and the algorithm the stream records."""
    cfg = szConfig()
    if ini:
        fd, path = tempfile.mkstemp(suffix=".ini")
        with os.fdopen(fd, "w") as fh:
            fh.write(ini)
        try:
            cfg.loadcfg(path)
        finally:
            os.unlink(path)
    cfg.errorBoundMode = szErrorBoundMode.ABS
    cfg.absErrorBound = eb
    cfg.cmprAlgo = algo
    c, _ = sz.compress(p.filled, cfg)
    z, back = sz.decompress(c, p.filled.dtype, p.filled.shape)
    return c.nbytes, z, ALGO_NAMES.get(back.cmprAlgo, str(back.cmprAlgo))


# --------------------------------------------------------------------------- strata's own codes
class Watched:
    """strata.compress with ``codec.encode_level`` watched: the codes of every point, the array
    quantized (lattice indices on a lattice), the flat uint8 missing mask (None) and the partition."""

    def __init__(self, p: Prepared, eb: float, settings: Settings | None = None):
        seen = {}
        inner = codec.encode_level

        def spy(plan, level, codes, orig, miss=None, step_hist=None):
            seen.update(part=plan.partition, codes=codes, orig=orig, miss=miss)
            return inner(plan, level, codes, orig, miss, step_hist)

        codec.encode_level = spy
        try:
            t0 = time.perf_counter()
            self.blob = codec.compress(p.a, abs_error=eb, fill_value=p.fill, settings=settings)
            self.seconds = time.perf_counter() - t0
        finally:
            codec.encode_level = inner
        self.codes, self.orig, self.miss, self.part = seen["codes"], seen["orig"], seen["miss"], seen["part"]
        src = Source(self.blob)
        raw, _ = unpack_header(src, KIND_LOSSY)
        self.header = LossyHeader.from_bytes(raw, src.size)
        h = self.header
        self.settings = Settings(tuple(h.order), tuple(h.flat), h.alpha8, h.beta8, bool(h.cubic_mask))


# ------------------------------------------------------------------------------------ Lorenzo
def stencil(order: int, axes) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int64, (k, 3)) and weights of the Lorenzo predictor of ``order`` over ``axes``
    (bools): ``pred = x - prod_d (1 - S_d)**order x`` with ``S_d`` the shift by one along axis d."""
    offs, w = [], []
    for m in itertools.product(*((range(order + 1)) if a else (0,) for a in axes)):
        if any(m):
            offs.append(m)
            w.append(-math.prod(math.comb(order, k) * (-1) ** k for k in m))
    return np.array(offs, np.int64).reshape(-1, 3), np.array(w, np.float64)


@njit(nogil=True, cache=True)
def _lorenzo(orig, x, codes, n0, n1, n2, offs, w, eb):
    """Closed-loop Lorenzo over the flat C-order array ``orig`` (missing points NaN) in raster
    order: ``x`` gets the reconstruction, ``codes`` strata's codes (:func:`quantize_into`)."""
    inv_bin, bin_width = 0.5 / eb, 2.0 * eb
    k = w.shape[0]
    for i in range(n0):
        for j in range(n1):
            for m in range(n2):
                pred = 0.0
                for t in range(k):
                    a, b, c = i - offs[t, 0], j - offs[t, 1], m - offs[t, 2]
                    if a >= 0 and b >= 0 and c >= 0:
                        pred += w[t] * np.float64(x[(a * n1 + b) * n2 + c])
                idx = (i * n1 + j) * n2 + m
                codes[idx] = quantize_into(x, idx, np.float64(orig[idx]), pred, eb, inv_bin, bin_width)


def lorenzo_codes(orig: np.ndarray, shape3, order: int, axes, eb: float):
    x = np.empty_like(orig)
    codes = np.empty(orig.size, np.int32)
    offs, w = stencil(order, axes)
    _lorenzo(orig, x, codes, *shape3, offs, w, eb)
    return codes, x


# ------------------------------------------------------------------------------------ entropy
def block_index(shape3) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Block number of every point (flat, int64) and the block edges."""
    if min(shape3) >= BLOCK_3D:
        edge = (BLOCK_3D,) * 3
    else:
        edge = tuple(BLOCK_2D if n >= BLOCK_3D else 1 for n in shape3)
    nb = [-(-n // e) for n, e in zip(shape3, edge)]
    ids = [np.arange(n) // e for n, e in zip(shape3, edge)]
    return ((ids[0][:, None, None] * nb[1] + ids[1][None, :, None]) * nb[2] + ids[2][None, None, :]).reshape(-1), edge


def block_costs(codes: np.ndarray, blocks: np.ndarray, n_blocks: int, value_bits: int, groups=None):
    """Bits of each block under two order-0 models: its own table (``self``) and whole-field
    tables (``global``: one per group, e.g. per level for interpolation; one without ``groups``);
    unpredictable values add ``value_bits`` each."""
    c = codes.astype(np.int64)
    order = np.lexsort((c, blocks))
    cb, bb = c[order], blocks[order]
    new = np.ones(cb.size, bool)
    new[1:] = (cb[1:] != cb[:-1]) | (bb[1:] != bb[:-1])
    start = np.flatnonzero(new)
    counts = np.diff(np.append(start, cb.size)).astype(np.float64)
    run_block = bb[start]
    per_block_n = np.bincount(blocks, minlength=n_blocks).astype(np.float64)
    own = np.bincount(run_block, weights=counts * np.log2(per_block_n[run_block] / counts), minlength=n_blocks)
    g = np.zeros(c.size, np.int64) if groups is None else groups.astype(np.int64)
    _, inverse, freq = np.unique(g * (1 << 32) + (c & 0xFFFFFFFF), return_inverse=True, return_counts=True)
    n_group = np.bincount(g).astype(np.float64)
    glob = np.bincount(blocks, weights=np.log2(n_group[g] / freq[inverse.reshape(-1)]), minlength=n_blocks)
    extra = np.bincount(blocks, weights=(c == UNPREDICTABLE) * float(value_bits), minlength=n_blocks)
    return own + extra, glob + extra


def level_entropy_bits(codes: np.ndarray, levels: np.ndarray, value_bits: int) -> float:
    """Order-0 entropy of the codes level by level (one table per level: strata's layout)."""
    total = 0.0
    for lv in np.unique(levels):
        c = codes[levels == lv]
        _, f = np.unique(c, return_counts=True)
        total += float((f * np.log2(c.size / f)).sum()) + value_bits * int(np.count_nonzero(c == UNPREDICTABLE))
    return total


def point_levels(part, shape3) -> np.ndarray:
    """Level of every point (flat, uint8): the coarsest level whose grid holds it."""
    lv = np.full(shape3, part.num_levels - 1, np.uint8)
    for level in range(part.num_levels - 2, -1, -1):
        s = part.level_stride(level)
        lv[::s[0], ::s[1], ::s[2]] = level
    return lv.reshape(-1)


# ------------------------------------------------------------------------------------- a point
def psnr(vr: float, sq: float, n: int) -> float:
    return 200.0 if sq == 0 else 20 * math.log10(vr) - 10 * math.log10(sq / n)


def model_point(p: Prepared, w: Watched, eb: float, uniform: Watched | None) -> dict:
    shape3 = as_3d_shape(p.a.shape)
    valid = np.ones(w.orig.size, bool) if w.miss is None else w.miss == 0
    value_bits = w.orig.dtype.itemsize * 8
    coding_eb = w.header.coding_eb
    blocks_all, edge = block_index(shape3)
    blocks = blocks_all[valid]
    n_blocks = int(blocks_all.max()) + 1
    n_used = int(np.count_nonzero(np.bincount(blocks, minlength=n_blocks)))  # blocks with valid points
    orig = np.ascontiguousarray(w.orig)
    lat = w.header.lattice
    axes = tuple(n > 1 and not f for n, f in zip(shape3, w.settings.flat))

    def costs(codes, groups=None):
        return block_costs(codes[valid], blocks, n_blocks, value_bits, groups)

    out = dict(coding_eb=coding_eb, lattice=lat is not None, block_edge=edge, flat=list(w.settings.flat),
               alpha8=w.settings.alpha8, beta8=w.settings.beta8, cubic=w.settings.cubic)
    own, glob = {}, {}
    levels = point_levels(w.part, shape3)[valid]
    own["interp"], glob["interp"] = costs(w.codes, levels)
    out["interp_level_bits"] = level_entropy_bits(w.codes[valid], levels, value_bits)
    out["strata_bits"] = len(w.blob) * 8
    if uniform is not None:
        u_own, _ = costs(uniform.codes, levels)
        out["interp_uniform_share"] = float(u_own.sum() / own["interp"].sum())
        out["strata_uniform_bits"] = len(uniform.blob) * 8
    t0 = time.perf_counter()
    for order in (1, 2):
        codes, x = lorenzo_codes(orig, shape3, order, axes, coding_eb)
        o, x = orig[valid].astype(np.float64), x[valid].astype(np.float64)
        err = np.abs(x - o).max()
        assert err <= coding_eb, (order, err, coding_eb)
        if lat is not None:  # the decoder rounds the lattice index; the value is dtype(offset + step * k)
            y = (lat.offset + lat.step * np.rint(x)).astype(p.a.dtype).astype(np.float64)
            d = y - p.a.reshape(-1)[valid].astype(np.float64)
        else:
            d = x - o
        assert np.abs(d).max() <= eb * (1 + 1e-12)
        out[f"l{order}_psnr"] = psnr(p.vr, float((d * d).sum()), d.size)
        out[f"l{order}_unpredictable"] = int(np.count_nonzero(codes[valid] == UNPREDICTABLE))
        own[f"l{order}"], glob[f"l{order}"] = costs(codes)
    out["lorenzo_seconds"] = time.perf_counter() - t0
    for name, c in (("self", own), ("global", glob)):
        base = float(c["interp"].sum())
        res = dict(interp_bits=base, l1_bits=float(c["l1"].sum()), l2_bits=float(c["l2"].sum()))
        best_l1 = np.minimum(c["interp"], c["l1"])
        best_all = np.minimum(best_l1, c["l2"])
        res["best_l1_bits"] = float(best_l1.sum()) + n_used
        res["best_all_bits"] = float(best_all.sum()) + n_used * math.log2(3)
        res["blocks_l1"] = float(np.count_nonzero(c["l1"] < c["interp"])) / n_used
        res["blocks_lorenzo_all"] = float(np.count_nonzero(np.minimum(c["l1"], c["l2"]) < c["interp"])) / n_used
        for k in MODEL_KEYS:
            res[k] = res[f"{k}_bits"] / base
        out[name] = res
    out["n_blocks"] = n_used
    return out


def measure(f, p: Prepared, rel: float) -> dict:
    eb = rel * p.vr
    row = dict(abs_eb=eb, sz3={})
    for key, algo, ini in SZ3_ALGOS:
        t0 = time.perf_counter()
        nbytes, z, chosen = run_sz3(p, eb, algo, ini)
        pt = p.point("sz3", rel, eb, nbytes, z, time.perf_counter() - t0)
        assert pt["bound_ok"], (f.name, key, rel)
        row["sz3"][key] = dict(bytes=pt["bytes"], ratio=pt["ratio"], psnr=pt["psnr"], chosen=chosen)
    w = Watched(p, eb)
    pt = p.point("strata", rel, eb, len(w.blob), strata.decompress(w.blob), w.seconds)
    assert pt["bound_ok"], (f.name, "strata", rel)
    row["strata"] = dict(bytes=pt["bytes"], ratio=pt["ratio"], psnr=pt["psnr"])
    uniform = None
    if (w.settings.alpha8, w.settings.beta8) != (8, 8):
        uniform = Watched(p, eb, replace(w.settings, alpha8=8, beta8=8))
    row["model"] = model_point(p, w, eb, uniform)
    return row


# ------------------------------------------------------------------------------------- report
def _b(rel: float) -> str:
    return f"{rel:.0e}".replace("e-0", "e-")


def projected(b: dict) -> float:
    """strata's bytes scaled by the model's per-block choice among interp, L1 and L2 (assumes
    strata's coder shrinks the chosen codes as it shrinks the interpolation codes)."""
    return b["strata"]["bytes"] * b["model"]["self"]["best_all"]


def summarize(rows: list[dict]) -> dict:
    """Geomeans per bound, overall and per family, of SZ3's Lorenzo / interpolation bytes and
    the model's shares."""
    def geo(rs, fn):
        return geomean(fn(r) for r in rs)

    def stats(rs, k):
        return dict(
            sz3_lorenzo_vs_interp=geo(rs, lambda r: r["bounds"][k]["sz3"]["lorenzo_reg"]["bytes"]
                                      / r["bounds"][k]["sz3"]["interp"]["bytes"]),
            sz3_l1_vs_interp=geo(rs, lambda r: r["bounds"][k]["sz3"]["lorenzo1"]["bytes"]
                                 / r["bounds"][k]["sz3"]["interp"]["bytes"]),
            strata_vs_sz3_best=geo(rs, lambda r: r["bounds"][k]["strata"]["bytes"]
                                   / min(v["bytes"] for v in r["bounds"][k]["sz3"].values())),
            projected_vs_sz3_default=geo(rs, lambda r: projected(r["bounds"][k])
                                         / r["bounds"][k]["sz3"]["interp_lorenzo"]["bytes"]),
            sz3_lorenzo_vs_default=geo(rs, lambda r: r["bounds"][k]["sz3"]["lorenzo_reg"]["bytes"]
                                       / r["bounds"][k]["sz3"]["interp_lorenzo"]["bytes"]),
            strata_vs_sz3_default=geo(rs, lambda r: r["bounds"][k]["strata"]["bytes"]
                                      / r["bounds"][k]["sz3"]["interp_lorenzo"]["bytes"]),
            **{f"{m}_{k2}": geo(rs, lambda r, m=m, k2=k2: r["bounds"][k]["model"][m][k2])
               for m in ("self", "global") for k2 in MODEL_KEYS},
            self_per_field=geo(rs, lambda r: min(1.0, r["bounds"][k]["model"]["self"]["l1"],
                                                 r["bounds"][k]["model"]["self"]["l2"])))

    bounds = [_b(r) for r in RATIO_BOUNDS]
    fams = sorted({r["family"] for r in rows})
    return dict(all={k: stats(rows, k) for k in bounds},
                families={fam: {k: stats([r for r in rows if r["family"] == fam], k) for k in bounds}
                          for fam in fams})


def markdown(report: dict) -> str:
    rows, summ = report["rows"], report["summary"]
    bounds = [_b(r) for r in RATIO_BOUNDS]
    out = ["# Lorenzo against interpolation: SZ3 by algorithm, and a model in strata's pipeline", "",
           f"{report['machine']}; {report['date']}; {', '.join(f'{k} {v}' for k, v in report['versions'].items())}; "
           f"strata at {report['strata']['head']}"
           f"{'' if report['strata']['matches_head'] else ' (modified)'}. Made by `benchmarks/lorenzo_candidates.py` "
           f"in {report['seconds']:.0f} s (its docstring has the method).", "",
           "Bounds are relative to the valid range; missing values mean-filled for SZ3, masked for strata.", "",
           "## 1. SZ3 by algorithm (bytes relative to SZ3 `INTERP`; < 1: smaller) and strata", "",
           "`LR`: `LORENZO_REG`, `L1`: the same with Lorenzo 1st order only (no regression), `LR2`: with "
           "2nd-order Lorenzo allowed too, `IL`: `INTERP_LORENZO` "
           "(SZ3's default; the letter after it is its tuner's pick, L or I), `strata`: strata's bytes. "
           "PSNR in dB.", "",
           "| field | family | bound | LR | L1 | LR2 | IL | strata | PSNR interp | PSNR LR | PSNR strata |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for k in bounds:
            b = r["bounds"][k]
            s, ib = b["sz3"], b["sz3"]["interp"]["bytes"]
            pick = "L" if s["interp_lorenzo"]["chosen"] == "lorenzo_reg" else "I"
            out.append(f"| {r['field']} | {r['family']} | {k} | {s['lorenzo_reg']['bytes'] / ib:.3f} | "
                       f"{s['lorenzo1']['bytes'] / ib:.3f} | {s['lorenzo_reg2']['bytes'] / ib:.3f} | "
                       f"{s['interp_lorenzo']['bytes'] / ib:.3f} {pick} | "
                       f"{b['strata']['bytes'] / ib:.3f} | {s['interp']['psnr']:.1f} | "
                       f"{s['lorenzo_reg']['psnr']:.1f} | {b['strata']['psnr']:.1f} |")
    out += ["", "## 2. The model: bits as a share of strata's interpolation codes (order-0, per block)", "",
            "Each block's own order-0 table; `L1`/`L2`: Lorenzo of order 1/2 alone; `I|L1`, `I|L1|L2`: the "
            "cheaper per block plus its side information; `blocks L`: share of blocks where a Lorenzo is "
            "cheaper; `strata/model`: strata's real bits / the interpolation model's; `uniform`: "
            "interpolation at uniform bounds / as tuned (where the tuner tightened coarse levels). "
            "PSNR of strata's stream and of the Lorenzo-1 model.", "",
            "| field | family | bound | L1 | L2 | I\\|L1 | I\\|L1\\|L2 | blocks L | strata/model | uniform | "
            "PSNR strata | PSNR L1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for k in bounds:
            b = r["bounds"][k]
            m, s = b["model"], b["model"]["self"]
            uni = f"{m['interp_uniform_share']:.3f}" if "interp_uniform_share" in m else "-"
            out.append(f"| {r['field']} | {r['family']} | {k} | {s['l1']:.3f} | {s['l2']:.3f} | "
                       f"{s['best_l1']:.3f} | {s['best_all']:.3f} | {s['blocks_lorenzo_all']:.2f} | "
                       f"{m['strata_bits'] / s['interp_bits']:.3f} | {uni} | {b['strata']['psnr']:.1f} | "
                       f"{m['l1_psnr']:.1f} |")
    out += ["", "## Per family (geomean)", "",
            "`SZ3 LR/I`, `SZ3 L1/I`: SZ3's Lorenzo-regression and Lorenzo-1-only bytes / its interpolation "
            "bytes; `L1`, `I|L1`, `I|L1|L2`: the model's shares (own table per block); `strata/IL`: strata's "
            "bytes / SZ3's default's; `field`: the cheapest of interp, L1, L2 for the whole field (SZ3's "
            "`INTERP_LORENZO` choice); `projected/IL`: the same with strata's bytes times the model's "
            "`I|L1|L2` share.", "",
            "| family | bound | SZ3 LR/I | SZ3 L1/I | L1 | field | I\\|L1 | I\\|L1\\|L2 | strata/IL | projected/IL |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for fam, st in list(summ["families"].items()) + [("**all**", summ["all"])]:
        for k in bounds:
            a = st[k]
            out.append(f"| {fam} | {k} | {a['sz3_lorenzo_vs_interp']:.3f} | {a['sz3_l1_vs_interp']:.3f} | "
                       f"{a['self_l1']:.3f} | {a['self_per_field']:.3f} | {a['self_best_l1']:.3f} | "
                       f"{a['self_best_all']:.3f} | "
                       f"{a['strata_vs_sz3_default']:.3f} | {a['projected_vs_sz3_default']:.3f} |")
    out += ["", "Geomeans over all fields:", ""]
    for k in bounds:
        a = summ["all"][k]
        out.append(f"- {k}: SZ3 LR / I {a['sz3_lorenzo_vs_interp']:.3f}, L1 / I {a['sz3_l1_vs_interp']:.3f}, "
                   f"LR / default {a['sz3_lorenzo_vs_default']:.3f}, "
                   f"strata / SZ3 default {a['strata_vs_sz3_default']:.3f}, strata / best SZ3 algorithm "
                   f"{a['strata_vs_sz3_best']:.3f}, projected / SZ3 default {a['projected_vs_sz3_default']:.3f}; "
                   "model (own table per block) "
                   + ", ".join(f"{MODEL_LABELS[m]} {a['self_' + m]:.3f}" for m in MODEL_KEYS)
                   + f", per field {a['self_per_field']:.3f}"
                   + "; (whole-field tables, per level for interp) "
                   + ", ".join(f"{MODEL_LABELS[m]} {a['global_' + m]:.3f}" for m in MODEL_KEYS))
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fields", help="comma-separated field-name prefixes (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lorenzo_candidates")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    rows = []
    for f in find_fields(SHARED / "data", args.fields.split(",") if args.fields else None, None):
        t0 = time.perf_counter()
        p = Prepared(f)
        row = dict(field=f.name, family=f.family, shape=list(p.a.shape), dtype=str(p.a.dtype),
                   missing=int(p.a.size - p.n_valid), bounds={})
        for rel in RATIO_BOUNDS:
            row["bounds"][_b(rel)] = measure(f, p, rel)
        rows.append(row)
        print(f"{f.name:32s} {time.perf_counter() - t0:5.1f} s  " + "  ".join(
            f"{k}: SZ3 LR/I {b['sz3']['lorenzo_reg']['bytes'] / b['sz3']['interp']['bytes']:.3f} "
            f"L1 {b['model']['self']['l1']:.3f} I|L {b['model']['self']['best_all']:.3f}"
            for k, b in row["bounds"].items()), flush=True)
    report = dict(machine=machine(), date=datetime.date.today().isoformat(),
                  versions={"numpy": np.__version__, "numba": numba.__version__,
                            "pysz": importlib.metadata.version("pysz")},
                  strata=strata_source(), seconds=time.perf_counter() - t_start, rows=rows)
    report["summary"] = summarize(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out.with_suffix(".json"), json.dumps(report, indent=1))
    text = markdown(report)
    atomic_write(args.out.with_suffix(".md"), text)
    print("\n".join(text.splitlines()[-4:]))


if __name__ == "__main__":
    main()
