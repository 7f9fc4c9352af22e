#!/usr/bin/env python3
"""Rate-distortion of strata.lossy against SZ3, SPERR and ZFP on every field of the shared sci and
zoo sets, per field and per family, with issue 36's targets marked PASS or FAIL.

The method is the project's yardstick, ``shared/bench/zoo_eval.py``, extended:

* Fields: raw little-endian ``NAME_D0xD1xD2.f32/.f64`` of ``SHARED/data/sci`` and
  ``SHARED/data/zoo``. Missing values: NaN, and the fill values the zoo's MANIFEST documents
  (``ocean_foam_v`` 1e35, ``gpm_ku_zcorr`` -9999.9). strata gets the array as it is (NaN masked
  by strata itself, the fill value declared); the anchors get it with every missing value
  replaced by the mean of the valid values.
* Bounds: 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4 of the valid values' range; every compressor gets
  the absolute bound: strata ``abs_error``, SZ3 (pysz, ABS mode, default algorithm, one thread),
  SPERR (numcodecs-wasm-sperr, ``mode="pwe"``), ZFP (zfpy accuracy mode, ``tolerance`` = bound).
* Per point: bytes, ratio (the whole array's bytes over the compressed bytes), bit rate
  (8 * bytes / number of valid values), PSNR over the valid values with their range as peak
  (200 dB when exact), max error over the valid values / bound, and the "max-error PSNR"
  ``-20 log10(max error / range)``. Max errors are checked: strata, SZ3 and ZFP must keep the
  bound; SPERR may exceed it by less than half an ulp of the decoded value's type (it enforces
  the bound in double, then rounds). A strata point over its bound makes the exit status 1.
* BD-rate (``bjontegaard.bd_rate``, method 'akima', over the six bounds) of strata against each
  anchor, at equal PSNR and at equal max error (rate vs max-error PSNR). Negative: strata needs
  fewer bits. NaN where the package cannot compute it (non-monotonic curve, no overlap).
* Per family and overall: issue 36's targets (ratio >= the better of SZ3 and SPERR on >= 95 %
  of field-bounds at 1e-2/1e-3/1e-4, geomean of strata / better anchor >= 1.25; BD-rate at
  equal PSNR vs SZ3 median <= -15 %, worst <= 0 %, vs SPERR median <= -10 %, worst <= +5 %).

Anchor points never depend on strata's code: they are cached in ``benchmarks/.cache/rate_distortion``
(ignored by git), keyed by field (name and content digest), anchor, anchor version, method and bound,
so a rerun measures strata only. ``--tag NAME`` stores the strata points under NAME in the JSON;
the points of other tags already there are kept (those of the same tag are replaced, field by
field), so two runs (before / after a change) come out side by side in the markdown, one column
per tag, and as one curve per tag in the figure. ``--drop-tag NAME`` removes a tag.

Writes ``OUT.json``, ``OUT.md`` and ``OUT.png`` (default ``benchmarks/results/rate_distortion``).
On the project's 2-core machine the 29 fields take 1 to 1.5 minutes with every anchor point
measured and 10 to 15 s with them cached (strata: about 7 s of compression and decompression).

    .venv/bin/python benchmarks/rate_distortion.py [--tag current] [--fields era5,ns3d]
        [--families radar,astronomy] [--out PREFIX] [--drop-tag NAME] [--rewrite] [--no-cache]
"""
from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import importlib.metadata
import json
import math
import re
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import bjontegaard as bd
import matplotlib
import numba
import numcodecs_wasm_sperr as sperr_wasm
import numpy as np
import zfpy
from pysz import sz, szConfig, szErrorBoundMode

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, geomean, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402

BOUNDS = (3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)
#: The bounds of the ratio targets.
RATIO_BOUNDS = (1e-2, 1e-3, 1e-4)
ANCHORS = ("sz3", "sperr", "zfp")
#: The anchors whose better ratio strata must reach.
RATIO_ANCHORS = ("sz3", "sperr")
SETS = ("sci", "zoo")
#: Fill values by field-name prefix (zoo MANIFEST.md); NaN is always missing.
FILLS = {"ocean_foam": np.float32(1e35), "gpm_ku": np.float32(-9999.9)}
#: Families of the sci fields by name prefix, used where sci has no MANIFEST with a family column.
SCI_FAMILIES = {"era5": "climate", "eraint": "climate", "ns2d": "turbulence", "ns3d": "turbulence",
                "sqcyl": "CFD", "sscand": "topography", "comb": "combustion"}
#: Part of the cache key: change it when the anchors' measurement changes (fill, metrics).
METHOD = "meanfill-v1"
CACHE = ROOT / "benchmarks" / ".cache" / "rate_distortion"
EXACT_PSNR = 200.0  # dB given to an exact reconstruction (zoo_eval.py's convention)
LABELS = {"sz3": "SZ3", "sperr": "SPERR", "zfp": "ZFP"}
COLORS = {"sz3": "tab:blue", "sperr": "tab:green", "zfp": "tab:orange"}
TAG_STYLES = (("black", "-"), ("tab:red", "--"), ("tab:purple", ":"), ("tab:brown", "-."))


# ------------------------------------------------------------------------------------ data
@dataclass
class Field:
    name: str
    path: Path
    set: str
    family: str


def field_name(path: Path) -> str:
    """``ns3d_vx_t2_128x128x128.f32`` -> ``ns3d_vx_t2`` (zoo_eval.py's name)."""
    return path.name.rsplit("_", 1)[0]


def manifest_families(folder: Path) -> dict[str, str]:
    """``{file name: family}`` from the table of ``folder/MANIFEST.md`` that has a "family" column."""
    out: dict[str, str] = {}
    for man in (folder / "MANIFEST.md", folder / "README.md"):
        if not man.exists():
            continue
        col = None
        for line in man.read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                col = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if col is None:
                low = [c.lower() for c in cells]
                col = low.index("family") if "family" in low else None
                continue
            if col < len(cells) and not set(cells[0]) <= set("-: "):
                out[cells[0].strip("`* ")] = cells[col].strip("`* ")
    return out


def find_fields(data: Path, prefixes, families) -> list[Field]:
    fields = []
    for s in SETS:
        folder = data / s
        fam = manifest_families(folder)
        for p in sorted(folder.glob("*.f32")) + sorted(folder.glob("*.f64")):
            name = field_name(p)
            family = fam.get(p.name) or next((v for k, v in SCI_FAMILIES.items() if name.startswith(k)), None)
            if family is None:
                print(f"warning: no family for {p.name}", file=sys.stderr)
                family = "unknown"
            if prefixes and not any(name.startswith(w) for w in prefixes):
                continue
            if families and family not in families:
                continue
            fields.append(Field(name, p, s, family))
    return fields


class Prepared:
    """A field as zoo_eval.py prepares it: the valid mask, the range and the mean-filled copy."""

    def __init__(self, f: Field):
        p = str(f.path)
        shape = tuple(int(x) for x in re.search(r"_(\d+(?:x\d+)*)\.f(32|64)$", p).group(1).split("x"))
        raw = f.path.read_bytes()
        self.digest = hashlib.sha256(raw).hexdigest()
        self.a = np.frombuffer(bytearray(raw), dtype="<f4" if p.endswith("32") else "<f8").reshape(shape)
        self.fill = next((v for k, v in FILLS.items() if f.name.startswith(k)), None)
        self.valid = np.isfinite(self.a) & ((self.a != self.fill) if self.fill is not None else True)
        vals = self.a[self.valid]
        self.vr = float(vals.max() - vals.min())
        self.vals64 = vals.astype(np.float64)
        self.n_valid = int(self.valid.sum())
        mean = float(vals.mean())
        self.filled = np.ascontiguousarray(np.where(self.valid, self.a, mean).astype(self.a.dtype))

    def point(self, codec: str, rel: float, eb: float, nbytes: int, out, seconds: float) -> dict:
        y = np.asarray(out).reshape(self.a.shape)[self.valid]
        d = np.abs(y.astype(np.float64) - self.vals64)
        mse = float(np.mean(d ** 2))
        maxerr = float(d.max())
        # SPERR rounds to the output type after enforcing the bound in double: < half an ulp over
        slack = 0.5 * np.spacing(np.abs(y)).astype(np.float64) if codec == "sperr" else 0.0
        over = int(np.count_nonzero(d > eb + slack))
        return dict(rel_eb=rel, abs_eb=eb, bytes=int(nbytes), ratio=self.a.nbytes / nbytes,
                    bits_per_value=nbytes * 8 / self.n_valid,
                    psnr=20 * math.log10(self.vr) - 10 * math.log10(mse) if mse > 0 else EXACT_PSNR,
                    max_error=maxerr, err_over_eb=maxerr / eb,
                    maxerr_psnr=-20 * math.log10(maxerr / self.vr) if maxerr > 0 else EXACT_PSNR,
                    over_bound=over, bound_ok=over == 0, seconds=seconds)


# ---------------------------------------------------------------------------------- codecs
def run_strata(f: Prepared, eb: float, objective: str = "ratio"):
    blob = (strata.compress(f.a, abs_error=eb, fill_value=f.fill, objective=objective) if f.fill is not None
            else strata.compress(f.a, abs_error=eb, objective=objective))
    return len(blob), strata.decompress(blob)


def run_sz3(f: Prepared, eb: float):
    cfg = szConfig()
    cfg.errorBoundMode = szErrorBoundMode.ABS
    cfg.absErrorBound = eb
    c, _ = sz.compress(f.filled, cfg)
    z, _ = sz.decompress(c, f.filled.dtype, f.filled.shape)
    return c.nbytes, z


def run_sperr(f: Prepared, eb: float):
    sp = sperr_wasm.Sperr(mode="pwe", pwe=float(eb))
    sc = sp.encode(f.filled)
    return sc.nbytes, sp.decode(sc)


def run_zfp(f: Prepared, eb: float):
    zc = zfpy.compress_numpy(f.filled, tolerance=float(eb))
    return len(zc), zfpy.decompress_numpy(zc)


RUN = {"strata": run_strata, "sz3": run_sz3, "sperr": run_sperr, "zfp": run_zfp}


def anchor_versions() -> dict[str, str]:
    dist = {"sz3": "pysz", "sperr": "numcodecs-wasm-sperr", "zfp": "zfpy"}
    return {k: f"{v}-{importlib.metadata.version(v)}" for k, v in dist.items()}


def measure(f: Prepared, codec: str, rel: float) -> dict:
    eb = rel * f.vr
    t0 = time.perf_counter()
    nbytes, out = RUN[codec](f, eb)
    seconds = time.perf_counter() - t0
    return f.point(codec, rel, eb, nbytes, out, seconds)


def anchor_point(field: Field, f: Prepared, anchor: str, version: str, rel: float, use_cache: bool):
    """The anchor's point, from the cache when there; ``(point, cached)``."""
    path = CACHE / f"{field.name}-{f.digest[:16]}" / f"{anchor}-{version}-{METHOD}-{rel:.0e}.json"
    if use_cache and path.exists():
        return json.loads(path.read_text()), True
    row = measure(f, anchor, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(row, indent=1) + "\n")
    return row, False


# ------------------------------------------------------------------------------- provenance
def _git(*args) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def strata_source() -> dict:
    """Which strata was measured: the repository's HEAD, whether the imported package is that
    commit's src/strata byte for byte (git blob hashes; no paths recorded), which files differ."""
    head = _git("rev-parse", "--short=12", "HEAD").strip()
    pkg = Path(strata.__file__).resolve().parent
    differ = []
    for line in _git("ls-tree", "-r", "HEAD", "src/strata").splitlines():
        meta, path = line.split("\t", 1)
        blob = meta.split()[2]
        local = pkg / Path(path).relative_to("src/strata")
        try:
            data = local.read_bytes()
        except OSError:
            differ.append(path)
            continue
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != blob:
            differ.append(path)
    return {"head": head, "matches_head": bool(head) and not differ, "differing_files": differ,
            "imported_from_checkout": pkg == (ROOT / "src" / "strata").resolve(),
            "version": getattr(strata, "__version__", "")}


# ---------------------------------------------------------------------------------- BD-rate
def _curve(rows, metric: str):
    """Rates and qualities of a curve, cut after its first exact point: once a compressor is exact,
    tighter bounds repeat the same quality (EXACT_PSNR), which no interpolation over quality takes.
    Also the number of points cut."""
    rate, q = [], []
    for r in rows:
        rate.append(r["bits_per_value"])
        q.append(r[metric])
        if r[metric] >= EXACT_PSNR:
            break
    return rate, np.array(q), len(rows) - len(rate)


def bd_rate(anchor_rows, test_rows, metric: str) -> tuple[float, float, int]:
    """BD-rate (%) of test against anchor at equal ``metric``, the overlap of the metric ranges
    (share of their union), and the number of repeated exact points cut (0: zoo_eval.py's number)."""
    ra, ma, ca = _curve(anchor_rows, metric)
    rt, mt, ct = _curve(test_rows, metric)
    lo, hi = max(ma.min(), mt.min()), min(ma.max(), mt.max())
    span = max(ma.max(), mt.max()) - min(ma.min(), mt.min())
    overlap = max(hi - lo, 0.0) / span if span > 0 else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            v = float(bd.bd_rate(ra, list(ma), rt, list(mt), method="akima", require_matching_points=False))
        except Exception:
            v = float("nan")
    return v, overlap, ca + ct


def field_bd(anchors: dict, rows: list) -> dict:
    out = {}
    for metric, key in (("psnr", "psnr"), ("maxerr", "maxerr_psnr")):
        for a in ANCHORS:
            v, ov, cut = bd_rate(anchors[a], rows, key)
            out[f"{metric}_{a}"] = v
            out[f"{metric}_{a}_overlap"] = ov
            out[f"{metric}_{a}_cut"] = cut
    return out


# ---------------------------------------------------------------------------------- summary
TARGETS = (
    # key, description, threshold text, test
    ("ratio_share", "ratio >= better of SZ3/SPERR, share of field-bounds at 1e-2/1e-3/1e-4", ">= 95 %",
     lambda v: v >= 0.95),
    ("ratio_geomean", "geomean of strata ratio / better of SZ3,SPERR at 1e-2/1e-3/1e-4", ">= 1.25x",
     lambda v: v >= 1.25),
    ("bd_sz3_median", "BD-rate at equal PSNR vs SZ3, median over fields", "<= -15 %", lambda v: v <= -15),
    ("bd_sz3_worst", "BD-rate at equal PSNR vs SZ3, worst field", "<= 0 %", lambda v: v <= 0),
    ("bd_sperr_median", "BD-rate at equal PSNR vs SPERR, median over fields", "<= -10 %", lambda v: v <= -10),
    ("bd_sperr_worst", "BD-rate at equal PSNR vs SPERR, worst field", "<= +5 %", lambda v: v <= 5),
)


def _b(rel: float) -> str:
    """1e-2, 3e-4 (not 1e-02)."""
    return f"{rel:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _at(rows, rel):
    return next(r for r in rows if r["rel_eb"] == rel)


def _median(v):
    v = [x for x in v if math.isfinite(x)]
    return statistics.median(v) if v else float("nan")


def _worst(v):
    """The largest BD-rate; NaN when one is undefined (an undefined field cannot be shown to pass)."""
    return max(v) if v and all(math.isfinite(x) for x in v) else float("nan")


def summarize(fields: dict, rows: dict, bds: dict) -> dict:
    """Target values over ``rows`` (``{field: strata rows}``), overall and per family."""
    names = [n for n in fields if n in rows]
    groups = {"all": names}
    for n in names:
        groups.setdefault(fields[n]["family"], []).append(n)
    out = {}
    for g, ns in groups.items():
        wins, quots, per_bound = 0, [], {}
        for n in ns:
            for rel in RATIO_BOUNDS:
                s = _at(rows[n], rel)["ratio"]
                best = max(_at(fields[n]["anchors"][a], rel)["ratio"] for a in RATIO_ANCHORS)
                wins += s >= best
                quots.append(s / best)
                per_bound.setdefault(_b(rel), []).append(s / best)
        e = {"fields": len(ns), "ratio_wins": wins, "ratio_points": len(quots),
             "ratio_share": wins / len(quots) if quots else float("nan"),
             "ratio_geomean": geomean(quots),
             "ratio_geomean_by_bound": {k: geomean(v) for k, v in per_bound.items()},
             "ratio_vs": {a: geomean(_at(rows[n], rel)["ratio"] / _at(fields[n]["anchors"][a], rel)["ratio"]
                                     for n in ns for rel in RATIO_BOUNDS) for a in ANCHORS}}
        for metric in ("psnr", "maxerr"):
            for a in ANCHORS:
                v = [bds[n][f"{metric}_{a}"] for n in ns]
                e[f"bd_{metric}_{a}_median"] = _median(v)
                e[f"bd_{metric}_{a}_worst"] = _worst(v)
                e[f"bd_{metric}_{a}_undefined"] = sum(not math.isfinite(x) for x in v)
        for a in RATIO_ANCHORS:
            e[f"bd_{a}_median"] = e[f"bd_psnr_{a}_median"]
            e[f"bd_{a}_worst"] = e[f"bd_psnr_{a}_worst"]
        e["pass"] = {k: bool(math.isfinite(e[k]) and test(e[k])) for k, _, _, test in TARGETS}
        out[g] = e
    return out


# --------------------------------------------------------------------------------- markdown
def _pct(v, signed=True):
    return "n/a" if not math.isfinite(v) else (f"{v:+.1f} %" if signed else f"{v:.1f} %")


def _target_cell(key, e):
    v = e[key]
    if key == "ratio_share":
        txt = f"{e['ratio_wins']}/{e['ratio_points']} = {100 * v:.1f} %"
    elif key == "ratio_geomean":
        txt = f"{v:.3f}x"
    else:
        metric_anchor = key.rsplit("_", 1)[0].replace("bd_", "bd_psnr_")
        und = e[f"{metric_anchor}_undefined"]
        txt = _pct(v) + (f" ({und} undefined)" if und else "")
    return f"{txt} **{'PASS' if e['pass'][key] else 'FAIL'}**"


def _table(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def markdown(report: dict) -> str:
    fields, tags = report["fields"], report["tags"]
    tnames = list(tags)
    summ = report["summary"]
    vers = ", ".join(f"{LABELS[k]} {v}" for k, v in report["anchor_versions"].items())
    out = ["# Rate-distortion: strata vs SZ3, SPERR and ZFP on sci + zoo, by family", "",
           f"Made by `benchmarks/rate_distortion.py`. Machine: {report['machine']}. Anchors one thread each "
           f"({vers}); strata on its numba threads (per tag below). Bounds {', '.join(_b(b) for b in BOUNDS)} "
           "of the valid values' range. Missing values (NaN, the zoo's documented fill values) masked for strata, "
           "replaced by the valid mean for the anchors. Ratio = array bytes / compressed bytes; bit rate = "
           "8 x compressed bytes / valid values; PSNR over the valid values, peak = their range; max-error PSNR = "
           "-20 log10(max error / range). BD-rate: `bjontegaard.bd_rate`, Akima, over the six bounds, strata "
           "against the anchor (negative = strata needs fewer bits for the same quality). The method of "
           "`shared/bench/zoo_eval.py`, extended with ZFP and the max-error axis.", ""]
    out += ["Tags (strata variants, one column each below):", ""]
    out.append(_table(["tag", "strata source", "objective", "numba threads", "fields", "date",
                       "strata seconds (compress + decompress, one run of each point)"],
                      [[t, _source_text(tags[t]["source"]), tags[t].get("objective", "ratio"), tags[t]["threads"],
                        len(tags[t]["rows"]),
                        tags[t]["date"], f"{tags[t]['strata_seconds']:.1f}"] for t in tnames]))

    out += ["", "## Issue 36's targets (sci + zoo)", ""]
    out.append(_table(["target", "threshold"] + [f"{t} ({summ[t]['all']['fields']} fields)" for t in tnames],
                      [[desc, thr] + [_target_cell(k, summ[t]["all"]) for t in tnames]
                       for k, desc, thr, _ in TARGETS]))
    out += ["", "Beside the targets (no threshold):", ""]
    info = []
    for rel in RATIO_BOUNDS:
        info.append([f"geomean strata / better of SZ3,SPERR at {_b(rel)}"]
                    + [f"{summ[t]['all']['ratio_geomean_by_bound'][_b(rel)]:.3f}x" for t in tnames])
    for a in ANCHORS:
        info.append([f"geomean strata / {LABELS[a]} ratio at 1e-2/1e-3/1e-4"]
                    + [f"{summ[t]['all']['ratio_vs'][a]:.3f}x" for t in tnames])
    for metric, what in (("psnr", "equal PSNR"), ("maxerr", "equal max error")):
        for a in ANCHORS:
            if metric == "psnr" and a in RATIO_ANCHORS:
                continue
            info.append([f"BD-rate at {what} vs {LABELS[a]}, median / worst"]
                        + [f"{_pct(summ[t]['all'][f'bd_{metric}_{a}_median'])} / "
                           f"{_pct(summ[t]['all'][f'bd_{metric}_{a}_worst'])}" for t in tnames])
    out.append(_table(["measure"] + tnames, info))

    out += ["", "## By family", "",
            "Ratio wins: field-bounds at 1e-2/1e-3/1e-4 where strata's ratio >= the better of SZ3 and SPERR; "
            "geomean: of strata / the better of SZ3,SPERR at those bounds; BD-rates: medians over the family's "
            "fields (PSNR unless marked max err).", ""]
    cols = [("wins", lambda e: f"{e['ratio_wins']}/{e['ratio_points']}"),
            ("geomean", lambda e: f"{e['ratio_geomean']:.2f}x"),
            ("BD vs SZ3", lambda e: _pct(e["bd_psnr_sz3_median"])),
            ("BD vs SPERR", lambda e: _pct(e["bd_psnr_sperr_median"])),
            ("BD vs ZFP", lambda e: _pct(e["bd_psnr_zfp_median"])),
            ("BD max err vs SZ3", lambda e: _pct(e["bd_maxerr_sz3_median"])),
            ("BD max err vs SPERR", lambda e: _pct(e["bd_maxerr_sperr_median"]))]
    fams = sorted({fields[n]["family"] for t in tnames for n in tags[t]["rows"]}, key=str.lower) + ["all"]
    head = ["family", "fields"] + [c if len(tnames) == 1 else f"{c} [{t}]" for c, _ in cols for t in tnames]
    body = []
    for fam in fams:
        n = max(summ[t].get(fam, {"fields": 0})["fields"] for t in tnames)
        body.append([f"**{fam}**" if fam == "all" else fam, n]
                    + [fn(summ[t][fam]) if fam in summ[t] else "" for _, fn in cols for t in tnames])
    out.append(_table(head, body))

    for t in tnames:
        bds = report["bd"][t]
        for a in RATIO_ANCHORS:
            worst = sorted(bds, key=lambda n: -bds[n][f"psnr_{a}"] if math.isfinite(bds[n][f"psnr_{a}"]) else -1e9)
            out += ["", f"### Five worst fields vs {LABELS[a]} at equal PSNR [{t}]", ""]
            out.append(_table(["field", "family", f"BD-rate vs {LABELS[a]}", "overlap", "ratio strata / "
                               f"{LABELS[a]} at 1e-2, 1e-3, 1e-4"],
                              [[n, fields[n]["family"], _pct(bds[n][f"psnr_{a}"]),
                                f"{100 * bds[n][f'psnr_{a}_overlap']:.0f} %",
                                ", ".join(f"{_at(tags[t]['rows'][n], r)['ratio']:.1f} / "
                                          f"{_at(fields[n]['anchors'][a], r)['ratio']:.1f}" for r in RATIO_BOUNDS)]
                               for n in worst[:5]]))

    names = [n for n in fields if any(n in tags[t]["rows"] for t in tnames)]
    out += ["", "## BD-rate per field", "",
            "strata against each anchor over 3e-2..1e-4 (%, negative = fewer bits). Overlap below 75 % of the "
            "joint quality range marked with *. Marked with +: a curve exact at several bounds, cut after its first "
            f"exact point ({EXACT_PSNR:.0f} dB; zoo_eval.py gives NaN there). n/a: not computable.", ""]
    cols = [(f"{m}_{a}", f"{LABELS[a]}{' max err' if m == 'maxerr' else ''}") for m in ("psnr", "maxerr")
            for a in ANCHORS]
    head = ["field", "family"] + [c if len(tnames) == 1 else f"{c} [{t}]" for _, c in cols for t in tnames]
    body = []
    for n in names:
        cells = []
        for k, _ in cols:
            for t in tnames:
                b = report["bd"][t].get(n)
                cells.append("" if b is None else _pct(b[k]) + ("*" if b[f"{k}_overlap"] < 0.75 else "")
                             + ("+" if b[f"{k}_cut"] else ""))
        body.append([n, fields[n]["family"]] + cells)
    out.append(_table(head, body))

    out += ["", "## Ratio at the bound", "", "Better anchor: the better of SZ3 and SPERR.", ""]
    head = (["field", "bound"] + [f"strata [{t}]" for t in tnames] + ["SZ3", "SPERR", "ZFP"]
            + [f"strata / better [{t}]" for t in tnames])
    body = []
    for n in names:
        for rel in RATIO_BOUNDS:
            an = {a: _at(fields[n]["anchors"][a], rel)["ratio"] for a in ANCHORS}
            best = max(an[a] for a in RATIO_ANCHORS)
            st = [_at(tags[t]["rows"][n], rel)["ratio"] if n in tags[t]["rows"] else None for t in tnames]
            body.append([n, _b(rel)] + ["" if s is None else f"{s:.2f}" for s in st]
                        + [f"{an[a]:.2f}" for a in ANCHORS]
                        + ["" if s is None else (f"{s / best:.3f}" + ("" if s >= best else " (lower)")) for s in st])
    out.append(_table(head, body))

    out += ["", "## Bound checks", ""]
    checks = []
    for n in names:
        for a in ANCHORS:
            for r in fields[n]["anchors"][a]:
                if not r["bound_ok"]:
                    checks.append([n, LABELS[a], _b(r["rel_eb"]), f"{r['err_over_eb']:.6f}", r["over_bound"]])
        for t in tnames:
            for r in tags[t]["rows"].get(n, []):
                if not r["bound_ok"]:
                    checks.append([n, f"strata [{t}]", _b(r["rel_eb"]), f"{r['err_over_eb']:.6f}",
                                   r["over_bound"]])
    mx = {a: max((r["err_over_eb"] for n in names for r in fields[n]["anchors"][a]), default=0.0) for a in ANCHORS}
    mx.update({f"strata [{t}]": max(r["err_over_eb"] for rs in tags[t]["rows"].values() for r in rs) for t in tnames})
    slack = sum(r["err_over_eb"] > 1 and r["bound_ok"] for n in names for r in fields[n]["anchors"]["sperr"])
    out.append("Largest max error / bound: " + ", ".join(f"{LABELS.get(k, k)} {v:.7f}" for k, v in mx.items())
               + f". SPERR may exceed the bound by under half an ulp of the decoded value: {slack} SPERR point(s) "
               "do, within that allowance (not listed below).")
    out += ["", _table(["field", "codec", "bound", "max err / bound", "values over"], checks) if checks
            else "No point over its bound."]

    out += ["", "## Every point", ""]
    body = []
    for n in names:
        for rel in BOUNDS:
            rs = [(LABELS[a], _at(fields[n]["anchors"][a], rel)) for a in ANCHORS]
            rs += [(f"strata [{t}]", _at(tags[t]["rows"][n], rel)) for t in tnames if n in tags[t]["rows"]]
            for c, r in rs:
                body.append([n, _b(rel), c, r["bytes"], f"{r['ratio']:.2f}", f"{r['bits_per_value']:.4f}",
                             f"{r['psnr']:.2f}", f"{r['maxerr_psnr']:.2f}", f"{r['err_over_eb']:.4f}"])
    out.append(_table(["field", "bound", "codec", "bytes", "ratio", "bits/value", "PSNR dB", "max-err PSNR dB",
                       "max err / bound"], body))

    out += ["", "## Runs", ""]
    out += ["Seconds: from the start of main (after the imports; strata's kernels loaded from numba's cache) to the "
            "last point measured (writing these files takes a few seconds more); the last 20 runs.", ""]
    out.append(_table(["date", "tag", "fields", "seconds", "anchor points measured", "anchor points cached"],
                      [[r["date"], r["tag"], r["fields"], f"{r['seconds']:.0f}", r["anchor_measured"],
                        r["anchor_cached"]] for r in report["runs"]]))
    return "\n".join(out) + "\n"


def _source_text(s: dict) -> str:
    txt = f"HEAD {s['head']}"
    if s["matches_head"]:
        return txt + " (src/strata as committed)"
    return txt + f" + {len(s['differing_files'])} changed file(s): " + ", ".join(
        Path(p).name for p in s["differing_files"][:8])


# ----------------------------------------------------------------------------------- figure
def figure(report: dict, path: Path) -> None:
    fields, tags = report["fields"], report["tags"]
    tnames = list(tags)
    names = [n for n in fields if any(n in tags[t]["rows"] for t in tnames)]
    if not names:
        return
    cols = 6 if len(names) > 12 else min(4, len(names))
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.3 * cols, 2.7 * nrows), squeeze=False)
    for ax, n in zip(axes.flat, names):
        top = []
        for a in ANCHORS:
            rs = fields[n]["anchors"][a]
            ax.plot([r["bits_per_value"] for r in rs], [r["psnr"] for r in rs], marker="o", ms=2.5, lw=1,
                    color=COLORS[a], label=LABELS[a])
            top += [r["psnr"] for r in rs]
        for i, t in enumerate(tnames):
            if n in tags[t]["rows"]:
                rs = tags[t]["rows"][n]
                color, ls = TAG_STYLES[i % len(TAG_STYLES)]
                ax.plot([r["bits_per_value"] for r in rs], [r["psnr"] for r in rs], marker="s", ms=2.5, lw=1.4,
                        color=color, ls=ls, label=f"strata [{t}]")
                top += [r["psnr"] for r in rs]
        finite = [v for v in top if v < EXACT_PSNR]
        if finite and max(top) >= EXACT_PSNR:  # an exact point: keep the scale of the others
            lo = min(finite)
            ax.set_ylim(lo - 3, max(finite) + 12)
            ax.text(0.02, 0.96, f"exact points ({EXACT_PSNR:.0f} dB) above the top", transform=ax.transAxes,
                    fontsize=6, va="top")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{n} ({fields[n]['family']})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("PSNR dB", fontsize=7)
    for j in range(min(cols, len(names))):  # the lowest panel of each column
        axes[(len(names) - 1 - j) // cols, j].set_xlabel("bits / valid value", fontsize=7)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle("PSNR (valid values, peak = their range) vs bits per valid value at bounds 3e-2 ... 1e-4 of the "
                 "range", y=0.998, fontsize=11)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.985), ncol=len(labels), fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------- main
def write(report: dict, out: Path) -> None:
    """BD-rates and summaries from the points, then OUT.json, OUT.md and OUT.png."""
    report["tags"] = {t: v for t, v in report["tags"].items() if v.get("rows")}
    report["bd"] = {t: {n: field_bd(report["fields"][n]["anchors"], rs) for n, rs in v["rows"].items()}
                    for t, v in report["tags"].items()}
    report["summary"] = {t: summarize(report["fields"], v["rows"], report["bd"][t])
                         for t, v in report["tags"].items()}
    text = markdown(report)
    atomic_write(out.with_suffix(".json"), json.dumps(report, indent=1, default=float) + "\n")
    atomic_write(out.with_suffix(".md"), text)
    figure(report, out.with_suffix(".png"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data", help="folder holding sci/ and zoo/")
    ap.add_argument("--fields", default="", help="comma-separated field-name prefixes (default: all)")
    ap.add_argument("--families", default="", help="comma-separated families (default: all)")
    ap.add_argument("--tag", default="current", help="name of this strata variant in the results (default current)")
    ap.add_argument("--drop-tag", action="append", default=[],
                    help="remove a tag from the results and rewrite them, measuring nothing (repeatable)")
    ap.add_argument("--objective", default="ratio", choices=("ratio", "psnr"),
                    help="strata's tuning objective (strata.compress(objective=...), default ratio)")
    ap.add_argument("--rewrite", action="store_true", help="rewrite the results from OUT.json, measuring nothing")
    ap.add_argument("--no-cache", action="store_true", help="measure the anchors again (and refresh the cache)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rate_distortion",
                    help="output prefix: PREFIX.json, PREFIX.md, PREFIX.png")
    args = ap.parse_args(argv)
    t_run = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prefixes = [w for w in args.fields.split(",") if w]
    families = {w for w in args.families.split(",") if w}
    fields = find_fields(args.data, prefixes, families)
    jpath = args.out.with_suffix(".json")
    report = json.loads(jpath.read_text()) if jpath.exists() else {}
    report.setdefault("fields", {})
    report.setdefault("tags", {})
    report.setdefault("runs", [])
    if args.drop_tag or args.rewrite:
        for t in args.drop_tag:
            report["tags"].pop(t, None)
        write(report, args.out)
        return 0
    if not fields:
        print(f"no fields in {args.data} match", file=sys.stderr)
        return 2
    versions = anchor_versions()
    if report.get("anchor_versions", versions) != versions or report.get("method", METHOD) != METHOD:
        print("anchor versions or method changed: the anchor points of other fields in the results are stale",
              file=sys.stderr)
    report.update(machine=machine(), anchor_versions=versions, method=METHOD, bounds=list(BOUNDS))
    threads = numba.config.NUMBA_NUM_THREADS
    src = strata_source()
    print(f"machine: {machine()}; strata: {numba.config.NUMBA_NUM_THREADS} numba threads, {_source_text(src)}; "
          f"anchors one thread: {versions}", flush=True)
    # compile strata's kernels before the first field (not counted in any field's time)
    for dt in (np.float32, np.float64):
        w = np.random.default_rng(0).standard_normal((24, 24, 24)).astype(dt)
        strata.decompress(strata.compress(w, rel_error=1e-3))
    RUN["strata"] = functools.partial(run_strata, objective=args.objective)
    tag = report["tags"].setdefault(args.tag, {"rows": {}})
    n_meas = n_cached = 0
    strata_seconds = 0.0
    bad = 0
    for fld in fields:
        t0 = time.perf_counter()
        f = Prepared(fld)
        anchors = {}
        for a in ANCHORS:
            anchors[a] = []
            for rel in BOUNDS:
                row, cached = anchor_point(fld, f, a, versions[a], rel, not args.no_cache)
                anchors[a].append(row)
                n_cached += cached
                n_meas += not cached
        rows = [measure(f, "strata", rel) for rel in BOUNDS]
        strata_seconds += sum(r["seconds"] for r in rows)
        bad += sum(not r["bound_ok"] for r in rows)
        report["fields"][fld.name] = dict(family=fld.family, set=fld.set, file=fld.path.name,
                                          shape=list(f.a.shape), dtype=str(f.a.dtype), values=int(f.a.size),
                                          valid_values=f.n_valid, value_range=f.vr,
                                          fill_value=None if f.fill is None else float(f.fill),
                                          digest=f.digest, anchors=anchors)
        tag["rows"][fld.name] = rows
        b = field_bd(anchors, rows)
        r = {k: [_at(rs, rel)["ratio"] for rel in RATIO_BOUNDS] for k, rs in (("strata", rows), *anchors.items())}
        print(f"{fld.name:28s} {fld.family:14s} BD vs SZ3 {b['psnr_sz3']:+6.1f}%  vs SPERR {b['psnr_sperr']:+6.1f}%  "
              f"vs ZFP {b['psnr_zfp']:+6.1f}%  ratio@1e-2/1e-3/1e-4 "
              + "  ".join(f"{k} {'/'.join(f'{x:.1f}' for x in v)}" for k, v in r.items())
              + f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    tag.update(source=src, threads=threads, objective=args.objective, date=datetime.date.today().isoformat(),
               strata_seconds=sum(r["seconds"] for rs in tag["rows"].values() for r in rs))
    seconds = time.perf_counter() - t_run
    report["runs"] = report["runs"][-19:] + [
        dict(date=datetime.datetime.now().isoformat(timespec="seconds"), tag=args.tag, fields=len(fields),
             seconds=seconds, anchor_measured=n_meas, anchor_cached=n_cached, strata_seconds=strata_seconds)]
    write(report, args.out)
    for t in report["tags"]:
        e = report["summary"][t]["all"]
        print(f"[{t}] " + "; ".join(f"{k} {_target_cell(k, e)}" for k, _, _, _ in TARGETS))
    print(f"{len(fields)} fields in {seconds:.0f} s (anchor points measured {n_meas}, cached {n_cached})")
    if bad:
        print(f"BOUND VIOLATED in {bad} strata point(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
