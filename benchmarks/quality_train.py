"""Ground truth and training of strata.quality's predictors (shipped in
``src/strata/quality/models/predictors.npz``).

1. Samples: every field of the shared sets ``sci`` and ``zoo`` (``../shared/data``) as a whole,
   four crops (quarters of each long axis' extent, at the corners) and a stride-2 resampling;
   for sci also 2D levels of the reanalyses and transposes of the CFD fields, and, for
   topography, the sea masked (a coastline mask made from the elevation); era5_t2m's 744 hourly
   steps in windows of 24 h (a real time series); and the 2D turbulence sequences of
   ``benchmarks/quality_series.py`` (fluidsim; run it first, the script goes on without them).
   Families as ``benchmarks/rate_distortion.py`` names them (sci by field-name prefix, zoo from
   its MANIFEST's "family" column): climate, turbulence, CFD, combustion, topography and the
   zoo's twelve. Missing values: NaN and the zoo's documented fill values (ocean_foam_v 1e35,
   gpm_ku_zcorr -9999.9), declared to strata as a mask.
2. Ground truth: each sample compressed by strata, SZ3 (pysz, absolute bound) and ZFP (zfpy,
   fixed accuracy) at value-range-relative bounds 1e-2 .. 1e-5; measured ratio, PSNR and SSIM
   (:func:`strata.metrics.ssim`), for strata also its mask bytes, lattice and level-wise bounds.
   SZ3 and ZFP take no samples with missing values. Cached in
   ``benchmarks/.cache/quality_grid_v2.json`` with the digest of ``src/strata/lossy`` it was
   measured with (a different digest is reported; ``--remeasure strata`` measures strata's rows
   again and keeps the anchors', or delete the file to measure everything again).
3. Training: one mixture of experts per (compressor, metric) (:mod:`strata.quality.model`) in
   torch, one thread, fixed seeds (reruns give the same weights), three members from consecutive
   seeds averaged, on every sample, rows weighted
   so that each family weighs as the square root of its number of rows (the many time steps of
   one simulation do not drown the zoo's one-field families). ``quality_prediction.py``
   retrains on splits (time; each family held out) and evaluates on the held-out part.

Run: ``.venv/bin/python benchmarks/quality_train.py [--workers 2]`` (about 10 minutes the
first time on 2 cores, then under two minutes).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, SHARED  # noqa: E402
from strata import metrics  # noqa: E402
from strata.quality import anchors, model  # noqa: E402
from strata.quality.features import Features, features  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
SERIES = CACHE / "quality_series"
GRID = CACHE / "quality_grid_v2.json"
DATA = SHARED / "data"
SCI = DATA / "sci"
BOUNDS = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)
CODECS = ("strata", "sz3", "zfp")
#: Share of a time series' steps (the last ones) held out by the time split.
LATE_SHARE = 1 / 3
#: Mixture size and training schedule of the shipped predictors; members of each predictor
#: (the same schedule from consecutive seeds, averaged).
EXPERTS, HIDDEN, EPOCHS, LR, DECAY, SEED = 4, 8, 400, 1e-2, 3e-2, 2026
MEMBERS = 3


@dataclass(frozen=True)
class Sample:
    name: str
    family: str
    series: str | None  # a time series' name, None for a lone field
    step: int           # its position in the series (0 for lone fields)
    source: str         # file name (a shared field of sci/zoo, or a series file)
    view: str           # how the array is cut from the file (see _cut)


@lru_cache(maxsize=1)
def fields() -> dict:
    """``{file name: rate_distortion.Field}`` of the shared sci and zoo sets (their families)."""
    import rate_distortion as rd

    return {f.path.name: f for f in rd.find_fields(DATA, [], set())}


def families() -> list[str]:
    """The field families of sci + zoo, sci's first."""
    out = []
    for f in fields().values():
        if f.family not in out:
            out.append(f.family)
    return out


def _series_files() -> list[tuple[str, int, Path]]:
    out = []
    for p in sorted(SERIES.glob("*.f32")):
        seq, _, rest = p.stem.rpartition("_t")
        step = rest.split("_")[0]
        if seq and step.isdigit():
            out.append((seq, int(step), p))
    return out


def samples() -> list[Sample]:
    """Every sample of the grid (files that are absent are skipped)."""
    out = []
    shared = fields()

    def add(name, source, view="whole", series=None, step=0, family=None):
        if source in shared or (SERIES / source).exists():
            out.append(Sample(name, family or shared[source].family, series, step, source, view))

    era5 = "era5_t2m_744x33x49.f32"
    add("era5_t2m", era5)
    for w in range(31):
        add(f"era5_t2m_w{w:02d}", era5, f"steps:{24 * w}:{24 * w + 24}", "era5_t2m", w)
    for var in ("u", "z"):
        src = f"eraint_{var}_6x241x480.f32"
        add(f"eraint_{var}", src)
        for lev in range(6):
            add(f"eraint_{var}_level{lev}", src, f"steps:{lev}:{lev + 1}")
    for src, tag in (("ns3d_vx_t2_128x128x128.f32", "ns3d"), ("ns3d192_vx_t1p8_192x192x192.f32", "ns3d192"),
                     ("ns2d_vorticity_t4_512x512.f64", "ns2d")):
        add(tag, src)
        add(f"{tag}_half", src, "stride2")
        for c in range(4):
            add(f"{tag}_crop{c}", src, f"crop{c}")
    for seq, step, p in _series_files():
        add(f"{seq}_t{step:03d}", p.name, "whole", seq, step, family="turbulence")
    for src, tag in (("sqcyl_u_t1608_64x192.f32", "sqcyl_u"), ("sqcyl_v_t1608_64x192.f32", "sqcyl_v"),
                     ("comb_density_25x33x57.f32", "comb_density"), ("comb_xmomentum_25x33x57.f32", "comb_xmom")):
        add(tag, src)
        add(f"{tag}_T", src, "transpose")
    topo = "sscand_elevation_823x726.f32"
    add("sscand", topo)
    add("sscand_half", topo, "stride2")
    add("sscand_land", topo, "land")
    for c in range(4):
        add(f"sscand_crop{c}", topo, f"crop{c}")
        add(f"sscand_land_crop{c}", topo, f"land_crop{c}")
    for src, f in shared.items():
        if f.set != "zoo":
            continue
        add(f.name, src)
        add(f"{f.name}_half", src, "stride2")
        for c in range(4):
            add(f"{f.name}_crop{c}", src, f"crop{c}")
    return out


def load(s: Sample) -> tuple[np.ndarray, np.ndarray | None]:
    """``(array, missing mask or None)`` of a sample: a shared field's NaN and documented fill
    values are missing (rate_distortion's ``Prepared``)."""
    f = fields().get(s.source)
    if f is None:
        path = SERIES / s.source
        a = np.fromfile(path, "<f4").reshape(tuple(int(n) for n in path.stem.rpartition("_")[2].split("x")))
        return _cut(a, s.view)
    import rate_distortion as rd

    p = rd.Prepared(f)
    a = np.array(p.a)
    return _cut(a, s.view, None if p.valid.all() else ~p.valid)


def _cut(a: np.ndarray, view: str, miss: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    if view.startswith("land"):  # the sea (elevation <= 0) is missing (NaN): a coastline mask
        miss = a <= 0
        a = np.where(miss, np.float32(np.nan), a)
        view = view[5:] or "whole"
    if view.startswith("steps:"):
        lo, hi = (int(v) for v in view.split(":")[1:])
        a, miss = a[lo:hi], (miss[lo:hi] if miss is not None else None)
        if hi - lo == 1:
            a, miss = a[0], (miss[0] if miss is not None else None)
    elif view == "stride2":
        a = a[tuple(slice(None, None, 2) for _ in a.shape)]
        miss = miss[tuple(slice(None, None, 2) for _ in miss.shape)] if miss is not None else None
    elif view == "transpose":
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
        miss = np.swapaxes(miss, -1, -2) if miss is not None else None
    elif view.startswith("crop"):
        c = int(view[4:])
        half = [max(8, n // 2) if n >= 16 else n for n in a.shape]
        lo = [((c >> (d % 2)) & 1) * (n - h) for d, (n, h) in enumerate(zip(a.shape, half))]
        sl = tuple(slice(o, o + h) for o, h in zip(lo, half))
        a = a[sl]
        miss = miss[sl] if miss is not None else None
    a = np.ascontiguousarray(a)
    return a, (np.ascontiguousarray(miss) if miss is not None and miss.any() else None)


def lossy_digest() -> str:
    """SHA-256 (16 hex digits) of ``src/strata/lossy``'s sources: which compressor the ground
    truth measured."""
    h = hashlib.sha256()
    for p in sorted((ROOT / "src" / "strata" / "lossy").glob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def _measure_strata(a: np.ndarray, eb: float, miss) -> dict:
    """anchors.measure's row for strata, with the stream's mask bytes, lattice steps of error
    (-1: off a lattice) and level-wise bound factors."""
    import strata
    from strata.lossy import LossyReader

    blob = strata.compress(a, abs_error=float(eb), mask=miss)
    with LossyReader(blob) as r:
        y = r.read(max_output_bytes=0)
        h = r.header
        extra = dict(mask_bytes=int(r.mask_bytes), lattice_m=-1 if h.lattice is None else int(h.lattice.m),
                     alpha8=int(h.alpha8), beta8=int(h.beta8))
    valid = a if miss is None else np.where(miss, np.nan, a)
    row = dict(bytes=len(blob), ratio=a.nbytes / len(blob), psnr=metrics.psnr(valid, y),
               max_err=metrics.max_abs_error(valid, y), ssim=None, **extra)
    if a.ndim >= 2 and min(a.shape[-2:]) >= metrics.WINDOW:
        try:
            row["ssim"] = metrics.ssim(a, y, missing=miss)
        except Exception:  # (no complete window of valid values)
            pass
    return row


def _measure_sample(s: Sample, codecs=CODECS) -> tuple[str, list]:
    import numba

    numba.set_num_threads(1)
    a, miss = load(s)
    vr = metrics.value_range(a if miss is None else np.where(miss, np.nan, a))
    rows = []
    for codec in codecs:
        if codec != "strata" and miss is not None:
            continue
        for rel in BOUNDS:
            m = _measure_strata(a, rel * vr, miss) if codec == "strata" else anchors.measure(codec, a, rel * vr)
            rows.append(dict(codec=codec, rel=rel, eb=rel * vr, **m))
    return s.name, rows


def ground_truth(workers: int = 2, progress: bool = True, remeasure: tuple[str, ...] = ()) -> dict:
    """``{sample name: [measured rows]}``, measuring what the cache lacks, and the rows of the
    compressors in ``remeasure`` of every sample again (for strata: with this checkout's
    src/strata/lossy, whose digest the cache then records)."""
    import functools

    stored = json.loads(GRID.read_text()) if GRID.exists() else {}
    grid, meta = stored.get("rows", {}), stored.get("meta", {})
    digest = lossy_digest()
    if "strata" in remeasure:
        meta["lossy_digest"] = digest
    if meta.get("lossy_digest", digest) != digest:
        print(f"note: {GRID.name} was measured with src/strata/lossy {meta['lossy_digest']}, the checkout has "
              f"{digest} (--remeasure strata, or delete the file, to measure again)", file=sys.stderr)
    meta.setdefault("lossy_digest", digest)
    todo = [(s, CODECS) for s in samples() if s.name not in grid]
    todo += [(s, tuple(remeasure)) for s in samples() if s.name in grid and remeasure]
    if todo:
        from concurrent.futures import ProcessPoolExecutor

        from tqdm import tqdm

        CACHE.mkdir(exist_ok=True)
        todo.sort(key=lambda t: -np.prod([int(n) for n in t[0].source.rsplit("_", 1)[-1][:-4].split("x")]))
        with ProcessPoolExecutor(workers) as pool:
            jobs = [pool.submit(functools.partial(_measure_sample, codecs=c), s) for s, c in todo]
            for i, job in enumerate(tqdm(jobs, total=len(todo), disable=not progress, desc="ground truth")):
                name, rows = job.result()
                codecs = {r["codec"] for r in rows}
                grid[name] = [r for r in grid.get(name, []) if r["codec"] not in codecs] + rows
                if i % 20 == 19 or i == len(todo) - 1:
                    _write_json(GRID, dict(meta=meta, rows=grid))
    return grid


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.replace(path)


def feature_table(names=None) -> dict[str, Features]:
    """Features of every sample (``names``: a subset); samples with no valid value or a
    constant one (nothing to predict: a crop of a masked field's missing part) are left out."""
    from strata.errors import InvalidInputError

    out = {}
    for s in samples():
        if names is None or s.name in names:
            a, miss = load(s)
            try:
                f = features(a, mask=miss)
            except InvalidInputError:
                continue
            if f.value_range > 0:
                out[s.name] = f
    return out


def rows_for(sample_names, grid, feats, codec: str, metric: str, with_exact: bool = False):
    """``(x, y, baseline, measured, sample names)`` training rows of one (codec, metric) over
    samples (``with_exact``: also the rows where the measured or predicted PSNR is infinite,
    with ``y`` and ``baseline`` NaN; for evaluation)."""
    xs, ys, base, meas, names = [], [], [], [], []
    for name in sample_names:
        f = feats[name]
        for r in grid.get(name, []):
            if r["codec"] != codec or r[metric] is None:
                continue
            x, est = model.inputs(f, r["eb"], codec)
            exact = model.lossless(metric, est) is not None or not math.isfinite(r[metric])
            if exact and not with_exact:
                continue
            if metric == "ssim" and r["ssim"] <= 0:
                continue
            b = model.baseline(metric, f, est) if not exact else math.nan
            xs.append(x)
            base.append(b)
            ys.append(model.to_target(metric, r[metric]) - b if not exact else math.nan)
            meas.append(r[metric])
            names.append(name)
    return np.array(xs), np.array(ys), np.array(base), np.array(meas), names


def family_weights(names, family_of: dict) -> np.ndarray:
    """Weights (mean 1) of rows from samples ``names``: each family weighs as the square root
    of its number of rows."""
    fam = np.array([family_of[n] for n in names])
    _, inv, counts = np.unique(fam, return_inverse=True, return_counts=True)
    w = 1 / np.sqrt(counts[inv].astype(np.float64))
    return w / w.mean()


def fit(x: np.ndarray, y: np.ndarray, experts: int = EXPERTS, hidden: int = HIDDEN, epochs: int = EPOCHS,
        seed: int = SEED, weights: np.ndarray | None = None) -> model.Mixture:
    """Train one mixture of experts on rows ``x`` -> residual targets ``y`` (torch, one thread,
    full-batch Adam, MSE on standardized targets, rows weighted by ``weights``)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    mean = x.mean(axis=0)
    scale = np.maximum(x.std(axis=0), 1e-3)
    out_mean, out_scale = float(y.mean()), float(max(y.std(), 1e-6))
    z = torch.tensor((x - mean) / scale, dtype=torch.float64)
    t = torch.tensor((y - out_mean) / out_scale, dtype=torch.float64)
    wt = torch.tensor(np.ones(len(y)) if weights is None else weights, dtype=torch.float64)
    n = x.shape[1]
    gen = torch.Generator().manual_seed(seed)

    def param(*shape, s=0.3):
        return torch.nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64) * s)

    gw, gb = param(n, experts, s=0.1), param(experts, s=0.0)
    w1, b1 = param(experts, n, hidden, s=1 / math.sqrt(n)), param(experts, hidden, s=0.1)
    w2, b2 = param(experts, hidden, s=1 / math.sqrt(hidden)), param(experts, s=0.0)
    params = [gw, gb, w1, b1, w2, b2]
    opt = torch.optim.Adam(params, lr=LR, weight_decay=DECAY)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    for _ in range(epochs):
        g = torch.softmax(z @ gw + gb, dim=1)
        h = torch.tanh(torch.einsum("mn,knh->mkh", z, w1) + b1)
        e = torch.einsum("mkh,kh->mk", h, w2) + b2
        loss = torch.mean(wt * ((g * e).sum(dim=1) - t) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    arr = [p.detach().numpy().copy()[None] for p in params]
    return model.Mixture(mean[None], scale[None], *arr, out_mean=np.array([out_mean]), out_scale=np.array([out_scale]))


def fit_members(x: np.ndarray, y: np.ndarray, members: int = MEMBERS, weights: np.ndarray | None = None,
                **kw) -> model.Mixture:
    """:func:`fit` ``members`` times from seeds ``SEED``, ``SEED + 1``, ...: one predictor, their mean."""
    return model.Mixture.stack([fit(x, y, seed=SEED + i, weights=weights, **kw) for i in range(members)])


def train(sample_names, grid, feats, family_of: dict, codecs=CODECS, experts: int = EXPERTS) -> model.Predictors:
    """Predictors for every (codec, metric) with training rows among ``sample_names``."""
    table = {}
    for codec in codecs:
        for metric in model.METRICS:
            x, y, _, _, names = rows_for(sample_names, grid, feats, codec, metric)
            if len(y) >= 8:
                table[(codec, metric)] = fit_members(x, y, experts=experts, weights=family_weights(names, family_of))
    return model.Predictors(table, {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=model.DEFAULT_PATH)
    ap.add_argument("--remeasure", default="", help="comma-separated compressors whose cached rows to measure again "
                    "(e.g. strata, after a change to src/strata/lossy)")
    args = ap.parse_args()
    grid = ground_truth(args.workers, remeasure=tuple(c for c in args.remeasure.split(",") if c))
    feats = feature_table({s.name for s in samples() if s.name in grid})
    S = [s for s in samples() if s.name in feats]
    names = [s.name for s in S]
    family_of = {s.name: s.family for s in S}
    preds = train(names, grid, feats, family_of)
    info = dict(samples=len(names), rows=sum(len(grid[n]) for n in names), bounds=list(BOUNDS),
                families=sorted(set(family_of.values())), members=MEMBERS, experts=EXPERTS, hidden=HIDDEN,
                epochs=EPOCHS, lr=LR,
                weight_decay=DECAY, seed=SEED, weights="family: sqrt(rows)", lossy_digest=lossy_digest(),
                trained_by="benchmarks/quality_train.py")
    model.save(args.out, preds.table, info)
    print(f"{len(preds.table)} predictors from {info['rows']} measurements of {len(names)} samples "
          f"({len(info['families'])} families) -> {args.out}")


if __name__ == "__main__":
    main()
