#!/usr/bin/env python3
"""Rate-distortion of strata.enhance (NeurLZ online neural enhancement) beside plain strata,
SZ3 (pysz, absolute bound) and ZFP (zfpy, fixed accuracy, tolerance = the absolute bound), in
one process, on every field of ``SHARED/data/sci`` with at least 100,000 values.

What it measures:

* Rate-distortion points at value-range-relative bounds (default 1e-1 ... 1e-4, four or more
  in each of the BD ranges 1e-1..1e-2 and 1e-3..1e-4) for plain strata, strata + enhance 2x,
  strata + enhance 1x, SZ3 and ZFP: bit rate = 8 * len(stream) / values (the whole stream:
  network weights and 1x fallback points included), PSNR over the whole field (value range
  of the original), SSIM (``skimage.metrics.structural_similarity``, data_range = the value
  range) averaged over up to 8 evenly spaced 2D slices along axis 0 (the field itself in 2D),
  max error / absolute bound (limits: plain 1, 1x 1, 2x 2; exit status 1 if one is broken),
  and for the enhanced streams whether the encoder stored the network (it declines when the
  network does not pay for its bytes) and the 1x fallback count.
* BD-rate (Bjontegaard delta rate, ``bjontegaard.bd_rate`` with Akima interpolation, the
  package's recommended method; PCHIP kept in the json) of 2x and 1x against plain strata and
  against SZ3, over 1e-1..1e-2 and 1e-3..1e-4 separately, per field, and the geometric mean
  over fields of the rate ratios (``geomean(1 + bd/100) - 1``). Delta PSNR (enhanced minus
  plain) at the bound 1e-2, per field, and its median over the 3D fields.
* Cross-field learning on/off (``strata.enhance.compress_fields``, 2x) on the pairs sqcyl u/v,
  eraint u/z, comb density/xmomentum at 1e-1, 1e-2, 1e-3: total bytes, per-field PSNR, whether
  each field's network was stored.
* Time (medians of ``--repeats`` runs): compression plain vs with 2x enhancement at 1e-2,
  decompression plain vs enhanced at the bound nearest 1e-2 where the 2x network is stored
  (1e-2 when it is nowhere), MB/s, training seconds per 100 MB of input (enhanced minus
  plain compression time, scaled), enhanced decode MB/s. Thread counts (numba, torch) are
  printed and written; SZ3 and ZFP run on one thread.
* Targets, each printed with PASS/FAIL: 2x BD-rate vs plain over 1e-1..1e-2 (geomean) <= -10 %;
  median 2x delta PSNR at 1e-2 on the 3D fields >= +1.5 dB; training <= 60 s per 100 MB (all
  fields together); enhanced decode >= 20 MB/s (all fields with a stored network, each at the
  bound nearest 1e-2 where its 2x network is stored).

Writes ``benchmarks/results/enhance_rate_distortion.{md,json,png}`` (rate-distortion curves,
one panel per field) and ``benchmarks/results/enhance_error_map.png`` (one slice of ns3d_vx at
1e-2: original, plain and 2x error maps on one colour scale). ``--quick`` is a smoke run (two
fields, shortened training, one repeat) that writes nothing unless ``--out`` is given.
About 9 minutes on 2 idle cores (much longer when other processes share them: the training
then slows down far more than its share of the cores).

    .venv/bin/python benchmarks/enhance_rate_distortion.py [--fields era5_t2m,ns3d_vx]
        [--bounds 1e-1,5e-2,...] [--repeats 3] [--quick] [--out PREFIX]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import bjontegaard as bd
import matplotlib
import numba
import numpy as np
import zfpy
from pysz import sz, szConfig, szErrorBoundMode
from skimage.metrics import structural_similarity

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, geomean, machine, timed  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.enhance import EnhanceOptions, compress_fields, decompress_fields  # noqa: E402
from strata.enhance.fields import open_fields  # noqa: E402
from strata.inputs import read_array  # noqa: E402
from strata.lossy import LossyReader  # noqa: E402

BOUNDS = (1e-1, 5e-2, 2e-2, 1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 2e-4, 1e-4)
#: BD-rate ranges (inclusive, relative bounds).
RANGES = {"1e-1..1e-2": (1e-2, 1e-1), "1e-3..1e-4": (1e-4, 1e-3)}
CODECS = ("strata", "strata+2x", "strata+1x", "sz3", "zfp")
#: Max error / bound each codec must keep (strata rows break the run when they do not).
LIMITS = {"strata": 1.0, "strata+2x": 2.0, "strata+1x": 1.0, "sz3": 1.0, "zfp": 1.0}
MIN_VALUES = 100_000
PAIRS = (("sqcyl_u", "sqcyl_v"), ("eraint_u", "eraint_z"), ("comb_density", "comb_xmomentum"))
CROSS_BOUNDS = (1e-1, 1e-2, 1e-3)
AT = 1e-2  # the bound of delta PSNR, timing and the error map
MAP_FIELD = "ns3d_vx"
SSIM_SLICES = 8
TARGETS = {"bd_2x_vs_plain": -10.0, "dpsnr_3d": 1.5, "train_s_per_100MB": 60.0, "enh_decode_MBps": 20.0}
QUICK_FIELDS = ("eraint_u", "ns2d_vorticity")


# ----------------------------------------------------------------------------------- data
def field_name(path: Path) -> str:
    """``ns3d_vx_t2_128x128x128.f32`` -> ``ns3d_vx_t2``."""
    return path.name.rsplit("_", 1)[0]


def find_fields(data: Path, wanted, min_values: int = MIN_VALUES) -> dict[str, Path]:
    """``{name: path}`` of the fields with at least ``min_values`` values, those whose name
    starts with one of ``wanted`` (all when None)."""
    out = {}
    for p in sorted(data.glob("*.f32")) + sorted(data.glob("*.f64")):
        n = field_name(p)
        size = math.prod(int(d) for d in p.name.rsplit("_", 1)[1].split(".")[0].split("x"))
        if size >= min_values and (not wanted or any(n.startswith(w) for w in wanted)):
            out[n] = p
    return out


def find_pair(data: Path, prefix: str) -> Path:
    return next(p for p in sorted(data.glob("*.f*")) if field_name(p).startswith(prefix))


# --------------------------------------------------------------------------------- codecs
def sz3_compress(a, eb):
    cfg = szConfig()
    cfg.errorBoundMode = szErrorBoundMode.ABS
    cfg.absErrorBound = float(eb)
    return sz.compress(np.ascontiguousarray(a), cfg)[0].tobytes()


def sz3_decompress(blob, a):
    return sz.decompress(np.frombuffer(blob, dtype=np.uint8), a.dtype, a.shape)[0]


def codecs(options: EnhanceOptions):
    """``{name: (compress(a, rel, eb) -> bytes, decompress(blob, a) -> array)}``."""
    def enhanced(mode):
        return lambda a, rel, eb: strata.compress(a, rel_error=rel, enhance=mode, enhance_options=options)

    dec = lambda b, a: strata.decompress(b)  # noqa: E731
    return {
        "strata": (lambda a, rel, eb: strata.compress(a, rel_error=rel), dec),
        "strata+2x": (enhanced("2x"), dec),
        "strata+1x": (enhanced("1x"), dec),
        "sz3": (lambda a, rel, eb: sz3_compress(a, eb), sz3_decompress),
        "zfp": (lambda a, rel, eb: zfpy.compress_numpy(a, tolerance=float(eb)), lambda b, a: zfpy.decompress_numpy(b)),
    }


# -------------------------------------------------------------------------------- metrics
def ssim(a: np.ndarray, y: np.ndarray, value_range: float) -> float:
    """Mean SSIM over up to ``SSIM_SLICES`` evenly spaced slices along axis 0 (3D), or the
    field itself (2D)."""
    if a.ndim == 2:
        return float(structural_similarity(a.astype(np.float64), y.astype(np.float64), data_range=value_range))
    idx = np.unique(np.linspace(0, a.shape[0] - 1, min(SSIM_SLICES, a.shape[0])).round().astype(int))
    return float(np.mean([structural_similarity(a[i].astype(np.float64), y[i].astype(np.float64),
                                                data_range=value_range) for i in idx]))


def enhancement_info(blob: bytes) -> dict:
    """The enhancement section's figures of a strata stream (``{}`` without one)."""
    with LossyReader(blob) as r:
        e = r.enhancement
        if e is None:
            return {}
        return dict(stored=bool(e.stored), mode=e.mode_name, encoder_psnr_plain=float(e.psnr_plain),
                    encoder_psnr_enhanced=float(e.psnr_enhanced), plain_equivalent_bytes=int(e.plain_equivalent_bytes),
                    fallback_count=int(e.fallback_count), guaranteed_error=float(r.guaranteed_error))


def stream_bound(codec: str, blob: bytes, eb: float) -> float:
    """The absolute bound the stream was made for (strata's own, else ``eb``)."""
    if codec.startswith("strata"):
        with LossyReader(blob) as r:
            return float(r.error_bound)
    return eb


def point(codec: str, fns, a: np.ndarray, rel: float, vr: float):
    """One rate-distortion point; returns (row, decoded array)."""
    comp, dec = fns
    t0 = time.perf_counter()
    blob = comp(a, rel, rel * vr)
    tc = time.perf_counter() - t0
    y = np.asarray(dec(blob, a)).reshape(a.shape)
    eb = stream_bound(codec, blob, rel * vr)
    err = metrics.max_abs_error(a, y)
    row = dict(codec=codec, rel_eb=rel, abs_eb=eb, bytes=len(blob), bits_per_value=8 * len(blob) / a.size,
               ratio=a.nbytes / len(blob), psnr=metrics.psnr(a, y), ssim=ssim(a, y, vr), max_err=err,
               err_over_eb=err / eb, limit=LIMITS[codec], bound_ok=bool(err <= LIMITS[codec] * eb), comp_s=tc)
    row.update(enhancement_info(blob) if codec.startswith("strata+") else {})
    return row, y


def rd_field(name: str, a: np.ndarray, bounds, cs: dict, keep: dict) -> list[dict]:
    """Every codec at every bound on one field; keeps the decoded map slice in ``keep``."""
    vr = metrics.value_range(a)
    rows = []
    for rel in bounds:
        for codec, fns in cs.items():
            r, y = point(codec, fns, a, rel, vr)
            r["field"] = name
            rows.append(r)
            if name.startswith(MAP_FIELD) and rel == AT and codec in ("strata", "strata+2x"):
                keep.update(field=name, rel=rel, slice=a.shape[0] // 2, original=a[a.shape[0] // 2],
                            **{codec: y[a.shape[0] // 2]})
                keep.setdefault("psnr", {})[codec] = r["psnr"]
            print(f"{name[:20]:20s} {rel:7.0e} {codec:10s} bpv {r['bits_per_value']:8.4f} PSNR {r['psnr']:7.2f} "
                  f"SSIM {r['ssim']:.4f} err/eb {r['err_over_eb']:.4f} {_net(r):12s} {r['comp_s']:6.1f} s", flush=True)
    return rows


def _net(r: dict) -> str:
    if "stored" not in r:
        return ""
    return ("stored" if r["stored"] else "declined") + (f" fb {r['fallback_count']}" if r["mode"] == "1x" else "")


# -------------------------------------------------------------------------------- BD-rate
def curve(rows, field: str, codec: str, lo: float, hi: float):
    """(rates, PSNRs) of one codec on one field for bounds in [lo, hi], sorted by PSNR,
    finite PSNRs only (BD needs PSNR strictly increasing)."""
    pts = sorted((r["psnr"], r["bits_per_value"]) for r in rows if r["field"] == field and r["codec"] == codec
                 and lo * (1 - 1e-9) <= r["rel_eb"] <= hi * (1 + 1e-9) and math.isfinite(r["psnr"]))
    psnr, rate = [], []
    for p, b in pts:
        if not psnr or p > psnr[-1]:
            psnr.append(p)
            rate.append(b)
    return np.array(rate), np.array(psnr)


def bd_rate(anchor, test, method: str = "akima") -> dict:
    """BD-rate in % of ``test`` against ``anchor`` (curves from :func:`curve`) and the
    overlap of their PSNR intervals (share of the union); NaN with fewer than 4 points."""
    (ra, pa), (rt, pt) = anchor, test
    if min(len(pa), len(pt)) < 4:
        return dict(bd=float("nan"), overlap=float("nan"), points=[len(pa), len(pt)])
    union = max(pa.max(), pt.max()) - min(pa.min(), pt.min())
    overlap = max(0.0, min(pa.max(), pt.max()) - max(pa.min(), pt.min())) / union if union > 0 else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = bd.bd_rate(ra, pa, rt, pt, method=method, require_matching_points=False, min_overlap=0)
    return dict(bd=float(v), overlap=float(overlap), points=[len(pa), len(pt)])


BD_PAIRS = (("strata+2x", "strata"), ("strata+1x", "strata"), ("strata+2x", "sz3"), ("strata+1x", "sz3"),
            ("strata", "sz3"))


def bd_table(rows, fields) -> dict:
    """``{range: {"test vs anchor": {"fields": {field: {...}}, "geomean": %}}}``."""
    out = {}
    for rname, (lo, hi) in RANGES.items():
        out[rname] = {}
        for test, anchor in BD_PAIRS:
            per = {}
            for f in fields:
                ca, ct = curve(rows, f, anchor, lo, hi), curve(rows, f, test, lo, hi)
                per[f] = dict(akima=bd_rate(ca, ct), pchip=bd_rate(ca, ct, "pchip"))
            vals = [1 + v["akima"]["bd"] / 100 for v in per.values() if math.isfinite(v["akima"]["bd"])]
            gm = 100 * (geomean(vals) - 1) if vals else math.nan
            out[rname][f"{test} vs {anchor}"] = dict(fields=per, geomean=gm, n_fields=len(vals))
    return out


def delta_psnr(rows, fields, at: float = AT) -> dict:
    """Enhanced minus plain PSNR at the bound ``at``, per field and mode; also what the
    encoder's network reached (stored or not)."""
    out = {}
    for f in fields:
        by = {r["codec"]: r for r in rows if r["field"] == f and math.isclose(r["rel_eb"], at)}
        if "strata" not in by:
            continue
        out[f] = {m: dict(dpsnr=by[c]["psnr"] - by["strata"]["psnr"], stored=by[c]["stored"],
                          network_dpsnr=by[c]["encoder_psnr_enhanced"] - by[c]["encoder_psnr_plain"])
                  for m, c in (("2x", "strata+2x"), ("1x", "strata+1x")) if c in by}
    return out


def declined(rows, bounds) -> dict:
    """Number of fields whose network was not stored, per mode and bound."""
    return {c: {f"{rel:g}": sum(1 for r in rows if r["codec"] == c and r["rel_eb"] == rel and not r["stored"])
                for rel in bounds} for c in ("strata+2x", "strata+1x")}


# ---------------------------------------------------------------------------- cross-field
def cross_field(data: Path, pairs, bounds, options: EnhanceOptions) -> list[dict]:
    """compress_fields (2x) with cross_field on and off (and plain) on each pair."""
    rows = []
    for pair in pairs:
        arrays = {n: read_array(find_pair(data, n)) for n in pair}
        for rel in bounds:
            plain = len(compress_fields(arrays, rel_error=rel, enhance=None))
            for cross in (False, True):
                rows.append(cross_row(arrays, rel, cross, plain, options))
                r = rows[-1]
                nets = " ".join(f"{n} {v['psnr']:.2f} dB {'stored' if v['stored'] else 'declined'}"
                                for n, v in r["fields"].items())
                print(f"cross {'/'.join(pair):28s} {rel:6.0e} cross={cross!s:5s} bytes {r['bytes']:8d} "
                      f"(plain {plain:8d}) {nets}", flush=True)
    return rows


def cross_row(arrays: dict, rel: float, cross: bool, plain_bytes: int, options: EnhanceOptions) -> dict:
    t0 = time.perf_counter()
    blob = compress_fields(arrays, rel_error=rel, enhance="2x", cross_field=cross, options=options)
    tc = time.perf_counter() - t0
    out = decompress_fields(blob)
    readers = open_fields(blob)
    per = {}
    for n, a in arrays.items():
        r = readers[n]
        err = metrics.max_abs_error(a, out[n])
        per[n] = dict(psnr=metrics.psnr(a, out[n]), stored=bool(r.enhancement.stored),
                      err_over_eb=err / r.error_bound, bound_ok=bool(err <= 2 * r.error_bound))
        r.close()
    return dict(pair="/".join(arrays), rel_eb=rel, cross_field=cross, bytes=len(blob), plain_bytes=plain_bytes,
                comp_s=tc, fields=per)


# --------------------------------------------------------------------------------- timing
def decode_bound(rows, field: str, at: float = AT) -> float:
    """The bound nearest ``at`` (in log) where the field's 2x network was stored, else ``at``."""
    st = [r["rel_eb"] for r in rows if r["field"] == field and r["codec"] == "strata+2x" and r["stored"]]
    return min(st, key=lambda b: (abs(math.log(b / at)), -b)) if st else at


def timing(name: str, a: np.ndarray, rel: float, dec_rel: float, repeats: int, options: EnhanceOptions) -> dict:
    """Medians of plain and 2x compression at ``rel``, and of plain and enhanced
    decompression at ``dec_rel`` (a bound where the network is stored, when there is one)."""
    def enhanced(r):
        return strata.compress(a, rel_error=r, enhance="2x", enhance_options=options)

    tcp, _ = timed(lambda: strata.compress(a, rel_error=rel), repeats)
    tce, enh = timed(lambda: enhanced(rel), repeats)
    plain = strata.compress(a, rel_error=dec_rel)
    enh = enh if dec_rel == rel else enhanced(dec_rel)
    tdp, _ = timed(lambda: strata.decompress(plain), repeats)
    tde, _ = timed(lambda: strata.decompress(enh), repeats)
    mb = a.nbytes / 1e6
    return dict(field=name, rel_eb=rel, MB=mb, comp_plain_s=tcp, comp_2x_s=tce, comp_plain_MBps=mb / tcp,
                comp_2x_MBps=mb / tce, train_s=tce - tcp, train_s_per_100MB=(tce - tcp) / mb * 100,
                decode_rel_eb=dec_rel, stored=enhancement_info(enh)["stored"], decomp_plain_s=tdp, decomp_2x_s=tde,
                decomp_plain_MBps=mb / tdp, decomp_2x_MBps=mb / tde)


def timing_summary(rows) -> dict:
    """All fields together: training s per 100 MB, enhanced decode MB/s (stored networks)."""
    mb = sum(r["MB"] for r in rows)
    st = [r for r in rows if r["stored"]]
    return dict(train_s_per_100MB=sum(r["train_s"] for r in rows) / mb * 100 if mb else math.nan,
                enh_decode_MBps=sum(r["MB"] for r in st) / sum(r["decomp_2x_s"] for r in st) if st else math.nan,
                enh_decode_fields=[r["field"] for r in st])


# -------------------------------------------------------------------------------- targets
def targets(bds: dict, dps: dict, tsum: dict, ndims: dict) -> list[dict]:
    d3 = [v["2x"]["dpsnr"] for f, v in dps.items() if ndims[f] == 3 and "2x" in v]
    vals = [("2x BD-rate vs plain strata, 1e-1..1e-2 (geomean over fields)", "<=", TARGETS["bd_2x_vs_plain"],
             bds["1e-1..1e-2"]["strata+2x vs strata"]["geomean"], "%"),
            (f"2x delta PSNR at {AT:g}, median over the 3D fields", ">=", TARGETS["dpsnr_3d"],
             statistics.median(d3) if d3 else math.nan, "dB"),
            ("training seconds per 100 MB of input (all fields together)", "<=", TARGETS["train_s_per_100MB"],
             tsum["train_s_per_100MB"], "s"),
            ("enhanced decode MB/s (fields with a stored network, at the bound nearest 1e-2 where one is stored)",
             ">=", TARGETS["enh_decode_MBps"], tsum["enh_decode_MBps"], "MB/s")]
    out = []
    for what, op, goal, got, unit in vals:
        ok = math.isfinite(got) and (got <= goal if op == "<=" else got >= goal)
        out.append(dict(target=what, goal=f"{op} {goal:g} {unit}", measured=got, unit=unit, passed=bool(ok)))
    return out


# ----------------------------------------------------------------------------------- text
def _f(v, spec=".2f"):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def fmt_points(rows, fields) -> str:
    head = ("| field | bound | " + " | ".join(f"{c} bpv / PSNR / SSIM" for c in CODECS)
            + " | max err/eb (plain, 2x, 1x, SZ3, ZFP) | network 2x / 1x (1x fallback points) |")
    lines = [head, "|---" * (len(CODECS) + 4) + "|"]
    for f in fields:
        for rel in sorted({r["rel_eb"] for r in rows if r["field"] == f}, reverse=True):
            by = {r["codec"]: r for r in rows if r["field"] == f and r["rel_eb"] == rel}
            cells = [f"{by[c]['bits_per_value']:.3f} / {by[c]['psnr']:.2f} / {by[c]['ssim']:.4f}" for c in CODECS]
            errs = ", ".join(f"{by[c]['err_over_eb']:.3f}" for c in CODECS)
            net = f"{_net(by['strata+2x'])} / {_net(by['strata+1x'])}"
            lines.append(f"| {f} | {rel:g} | " + " | ".join(cells) + f" | {errs} | {net} |")
    return "\n".join(lines)


def fmt_bd(bds, fields) -> str:
    pairs = [f"{t} vs {a}" for t, a in BD_PAIRS]
    lines = []
    for rname, per in bds.items():
        lines += [f"\n### {rname}\n", "| field | " + " | ".join(pairs) + " |", "|---" * (len(pairs) + 1) + "|"]
        for f in fields:
            cells = []
            for p in pairs:
                v = per[p]["fields"][f]["akima"]
                low = " (overlap {:.0%})".format(v["overlap"]) if v["overlap"] < 0.75 else ""
                cells.append(_f(v["bd"], "+.1f") + " %" + low)
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
        lines.append("| **geomean** | " + " | ".join(_f(per[p]["geomean"], "+.1f") + " %" for p in pairs) + " |")
    return "\n".join(lines)


def fmt_dpsnr(dps, ndims) -> str:
    lines = ["| field | dims | 2x delta PSNR dB | 2x network stored | 1x delta PSNR dB | 1x network stored |"
             " 2x network's gain (encoder, stored or not) dB |", "|---" * 7 + "|"]
    for f, v in dps.items():
        lines.append(f"| {f} | {ndims[f]}D | {v['2x']['dpsnr']:+.2f} | {v['2x']['stored']} | {v['1x']['dpsnr']:+.2f} | "
                     f"{v['1x']['stored']} | {v['2x']['network_dpsnr']:+.2f} |")
    d3 = {m: [v[m]["dpsnr"] for f, v in dps.items() if ndims[f] == 3] for m in ("2x", "1x")}
    m2, m1 = _f(_median(d3["2x"]), "+.2f"), _f(_median(d3["1x"]), "+.2f")
    lines.append(f"| **median, 3D fields** | | {m2} | | {m1} | | |")
    return "\n".join(lines)


def _median(v):
    return statistics.median(v) if v else math.nan


def fmt_declined(dec) -> str:
    bounds = list(next(iter(dec.values())))
    lines = ["| mode | " + " | ".join(bounds) + " |", "|---" * (len(bounds) + 1) + "|"]
    lines += [f"| {c} | " + " | ".join(str(v) for v in per.values()) + " |" for c, per in dec.items()]
    return "\n".join(lines)


def fmt_cross(rows) -> str:
    lines = ["| pair | bound | plain bytes | 2x bytes, cross off | 2x bytes, cross on | on/off |"
             " PSNR dB off (stored) | PSNR dB on (stored) |", "|---" * 8 + "|"]
    by = {(r["pair"], r["rel_eb"], r["cross_field"]): r for r in rows}
    for pair, rel in dict.fromkeys((r["pair"], r["rel_eb"]) for r in rows):
        off, on = by[(pair, rel, False)], by[(pair, rel, True)]

        def cell(r):
            return ", ".join(f"{n} {v['psnr']:.2f} ({'y' if v['stored'] else 'n'})" for n, v in r["fields"].items())

        lines.append(f"| {pair} | {rel:g} | {off['plain_bytes']} | {off['bytes']} | {on['bytes']} | "
                     f"{on['bytes'] / off['bytes']:.3f} | {cell(off)} | {cell(on)} |")
    return "\n".join(lines)


def fmt_timing(rows, tsum) -> str:
    lines = [f"| field | MB | compress plain s (MB/s) at {AT:g} | compress 2x s (MB/s) at {AT:g} | training s |"
             " training s / 100 MB | decode bound | network stored | decompress plain s (MB/s) |"
             " decompress 2x s (MB/s) |", "|---" * 10 + "|"]
    for r in rows:
        lines.append(f"| {r['field']} | {r['MB']:.2f} | {r['comp_plain_s']:.3f} ({r['comp_plain_MBps']:.0f}) | "
                     f"{r['comp_2x_s']:.2f} ({r['comp_2x_MBps']:.2f}) | {r['train_s']:.2f} | "
                     f"{r['train_s_per_100MB']:.0f} | {r['decode_rel_eb']:g} | {r['stored']} | "
                     f"{r['decomp_plain_s']:.3f} ({r['decomp_plain_MBps']:.0f}) | "
                     f"{r['decomp_2x_s']:.3f} ({r['decomp_2x_MBps']:.1f}) |")
    lines.append(f"| **all fields** | {sum(r['MB'] for r in rows):.2f} | | | {sum(r['train_s'] for r in rows):.1f} | "
                 f"{tsum['train_s_per_100MB']:.0f} | | | | stored networks only: "
                 f"{_f(tsum['enh_decode_MBps'], '.1f')} MB/s |")
    return "\n".join(lines)


def fmt_targets(ts) -> str:
    lines = ["| target | goal | measured | |", "|---|---|---|---|"]
    lines += [f"| {t['target']} | {t['goal']} | {_f(t['measured'], '+.2f' if t['unit'] in '%dB' else '.1f')} "
              f"{t['unit']} | **{'PASS' if t['passed'] else 'FAIL'}** |" for t in ts]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- plots
def plot_rd(rows, fields, path: Path) -> None:
    n = len(fields)
    cols = min(4, n)
    fig, axes = plt.subplots(-(-n // cols), cols, figsize=(4.2 * cols, 3.6 * -(-n // cols)), squeeze=False)
    style = {"strata": "o-", "strata+2x": "s-", "strata+1x": "^-", "sz3": "x--", "zfp": "d:"}
    for ax, f in zip(axes.flat, fields):
        for c in CODECS:
            pts = sorted((r["bits_per_value"], r["psnr"]) for r in rows if r["field"] == f and r["codec"] == c)
            ax.plot(*zip(*pts), style[c], label=c, ms=4)
        ax.set_xscale("log")
        ax.set(title=f, xlabel="bits / value", ylabel="PSNR dB")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_error_map(keep: dict, path: Path) -> None:
    o = keep["original"].astype(np.float64)
    errs = {c: keep[c].astype(np.float64) - o for c in ("strata", "strata+2x")}
    lim = max(float(np.abs(e).max()) for e in errs.values())
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    im = axes[0].imshow(o, cmap="viridis")
    axes[0].set_title(f"{keep['field']}: original\nslice {keep['slice']} along axis 0", fontsize=10)
    fig.colorbar(im, ax=axes[0], shrink=0.8)
    for ax, (c, e) in zip(axes[1:], errs.items()):
        im = ax.imshow(e, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(f"{c} error, bound {keep['rel']:g} of the range\nPSNR {keep['psnr'][c]:.2f} dB (whole field)",
                     fontsize=10)
    fig.colorbar(im, ax=list(axes[1:]), shrink=0.8, label="decoded - original")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


# ----------------------------------------------------------------------------------- main
def source_state() -> str:
    """The commit strata was measured at, and whether src/ had uncommitted changes."""
    import subprocess

    def git(*a):
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" + uncommitted changes in src/" if git("status", "--porcelain", "--", "src") else "")


def threads() -> dict:
    return dict(numba=numba.get_num_threads(), torch=1, sz3=1, zfp=1,
                cores=os.cpu_count())


def warm_up() -> None:
    """Compile strata's and the enhancement's kernels before anything is timed."""
    for dt in (np.float32, np.float64):
        w = np.random.default_rng(0).standard_normal((16, 40, 40)).cumsum(axis=2).astype(dt)
        strata.decompress(strata.compress(w, rel_error=1e-3))
        strata.decompress(strata.compress(w, rel_error=1e-2, enhance="2x", enhance_options=EnhanceOptions(steps=2)))


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data" / "sci")
    ap.add_argument("--fields", default=None, help="comma-separated name prefixes (default: every field with "
                    f">= {MIN_VALUES} values)")
    ap.add_argument("--bounds", default=",".join(f"{b:g}" for b in BOUNDS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: EnhanceOptions' default)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 fields, 40 training steps, 1 repeat, "
                    "one cross-field pair at 1e-2; writes nothing unless --out is given")
    ap.add_argument("--out", type=Path, default=None, help="results prefix (default: "
                    "benchmarks/results/enhance_rate_distortion)")
    args = ap.parse_args(argv)
    if args.quick:
        args.fields = args.fields or ",".join(QUICK_FIELDS)
        args.steps, args.repeats = args.steps or 40, 1
    elif args.out is None:
        args.out = ROOT / "benchmarks" / "results" / "enhance_rate_distortion"
    return args


def report(args, res) -> str:
    th = res["threads"]
    return (f"# strata.enhance rate-distortion\n\nstrata at {res['source']}. Machine: {res['machine']}. "
            f"Threads: numba {th['numba']} (strata's compression, decoding and network inference), torch "
            f"{th['torch']} (training: strata.enhance trains on one thread), SZ3 and ZFP 1. Load average (1/5/15 min) "
            f"at start / end: {res['load_start']} / {res['load_end']} (times are only as clean as the machine was "
            f"idle). Training options: {res['options']}. Times: medians of {args.repeats} runs. "
            f"Wall time of the whole run: {res['wall_s'] / 60:.1f} min.\n\n"
            f"## Targets\n\n{fmt_targets(res['targets'])}\n\n"
            "## BD-rate (Akima, % bit rate at equal PSNR; negative = smaller)\n"
            f"{fmt_bd(res['bd_rate'], res['fields'])}\n\n"
            f"## Delta PSNR at {AT:g} (enhanced minus plain strata)\n\n{fmt_dpsnr(res['delta_psnr'], res['ndims'])}\n\n"
            f"## Fields (of {len(res['fields'])}) whose network was declined (not stored), per bound\n\n"
            f"{fmt_declined(res['declined'])}\n\n"
            f"## Time at {AT:g}\n\n{fmt_timing(res['timing'], res['timing_all'])}\n\n"
            f"## Cross-field learning (compress_fields, 2x), on vs off\n\n{fmt_cross(res['cross_field'])}\n\n"
            "## Every point (bits/value, PSNR dB, mean SSIM of 2D slices)\n\n"
            f"{fmt_points(res['rows'], res['fields'])}\n")


def run(args) -> dict:
    t_start = time.perf_counter()
    options = EnhanceOptions(progress=False, **({"steps": args.steps} if args.steps else {}))
    bounds = [float(b) for b in args.bounds.split(",")]
    files = find_fields(args.data, args.fields.split(",") if args.fields else None)
    if not files:
        raise SystemExit(f"no fields in {args.data}")
    res = dict(machine=machine(), source=source_state(), threads=threads(), load_start=_load(), options=repr(options),
               bounds=bounds)
    print(f"machine: {res['machine']}; threads: {res['threads']}; load {res['load_start']}", flush=True)
    warm_up()
    cs, rows, keep, arrays = codecs(options), [], {}, {}
    for name, path in files.items():
        arrays[name] = read_array(path)
        rows += rd_field(name, arrays[name], bounds, cs, keep)
    fields = list(files)
    res.update(fields=fields, ndims={f: arrays[f].ndim for f in fields}, rows=rows, bd_rate=bd_table(rows, fields),
               delta_psnr=delta_psnr(rows, fields), declined=declined(rows, bounds))
    pairs, cross_b = (PAIRS[:1], [AT]) if args.quick else (PAIRS, CROSS_BOUNDS)
    res["cross_field"] = cross_field(args.data, pairs, cross_b, options)
    res["timing"] = [timing(f, arrays[f], AT, decode_bound(rows, f), args.repeats, options) for f in fields]
    for r in res["timing"]:
        print(f"time {r['field']:20s} comp {r['comp_plain_s']:.3f} / {r['comp_2x_s']:.2f} s, decomp "
              f"{r['decomp_plain_s']:.3f} / {r['decomp_2x_s']:.3f} s, training {r['train_s_per_100MB']:.0f} s/100MB",
              flush=True)
    res["timing_all"] = timing_summary(res["timing"])
    res["targets"] = targets(res["bd_rate"], res["delta_psnr"], res["timing_all"], res["ndims"])
    res["keep"] = keep
    res.update(load_end=_load(), wall_s=time.perf_counter() - t_start)
    return res


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def bound_failures(res) -> list[str]:
    bad = [f"{r['field']} {r['codec']} {r['rel_eb']:g}: err/eb {r['err_over_eb']:.4f} > {r['limit']}"
           for r in res["rows"] if not r["bound_ok"] and r["codec"].startswith("strata")]
    bad += [f"cross {r['pair']} {r['rel_eb']:g} {n}: err/eb {v['err_over_eb']:.4f} > 2"
            for r in res["cross_field"] for n, v in r["fields"].items() if not v["bound_ok"]]
    return bad


def main(argv=None) -> int:
    args = parse(argv)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    res = run(args)
    text = report(args, res)
    print("\n" + text)
    keep = res.pop("keep")
    if args.out:
        atomic_write(args.out.with_suffix(".md"), text)
        atomic_write(args.out.with_suffix(".json"), json.dumps(res, indent=1, default=float))
        plot_rd(res["rows"], res["fields"], args.out.with_suffix(".png"))
        if "original" in keep:
            plot_error_map(keep, args.out.parent / "enhance_error_map.png")
    bad = bound_failures(res)
    for b in bad:
        print("BOUND VIOLATED:", b, file=sys.stderr)
    anchors_bad = [r for r in res["rows"] if not r["bound_ok"] and not r["codec"].startswith("strata")]
    if anchors_bad:
        print(f"note: {len(anchors_bad)} SZ3/ZFP point(s) above their bound", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
