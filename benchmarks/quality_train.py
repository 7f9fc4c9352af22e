"""Ground truth and training of strata.quality's predictors (shipped in
``src/strata/quality/models/predictors.npz``).

1. Samples: the shared fields (``../shared/data/sci``) as wholes, crops, stride-2 resamplings,
   2D levels and, for topography, with the sea masked (a coastline mask made from the
   elevation); era5_t2m's 744 hourly steps in windows of 24 h (a real time series); and the
   2D turbulence sequences of ``benchmarks/quality_series.py`` (fluidsim; run it first, the
   script goes on without them). Four field families: climate, turbulence, CFD, topography.
2. Ground truth: each sample compressed by strata, SZ3 (pysz, absolute bound) and ZFP (zfpy,
   fixed accuracy) at value-range-relative bounds 1e-2 .. 1e-5; measured ratio, PSNR and SSIM
   (:func:`strata.metrics.ssim`). SZ3 and ZFP take no masked samples. Cached in
   ``benchmarks/.cache/quality_grid.json`` (delete it to measure again).
3. Training: one mixture of experts per (compressor, metric) (:mod:`strata.quality.model`) in
   torch, one thread, fixed seeds (reruns give the same weights), on every sample (the
   benchmark ``quality_prediction.py`` retrains on splits and evaluates on held-out data).

Run: ``.venv/bin/python benchmarks/quality_train.py [--workers 2]`` (about 10 minutes the
first time on 2 cores, then seconds).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED  # noqa: E402
from strata import metrics  # noqa: E402
from strata.inputs import read_array  # noqa: E402
from strata.quality import anchors, model  # noqa: E402
from strata.quality.features import Features, features  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
SERIES = CACHE / "quality_series"
GRID = CACHE / "quality_grid.json"
SCI = SHARED / "data" / "sci"
BOUNDS = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)
CODECS = ("strata", "sz3", "zfp")
FAMILIES = ("climate", "turbulence", "cfd", "topography")
#: Share of a time series' steps (the last ones) held out by the time split.
LATE_SHARE = 1 / 3
#: Mixture size and training schedule of the shipped predictors.
EXPERTS, HIDDEN, EPOCHS, LR, DECAY, SEED = 4, 8, 400, 1e-2, 3e-2, 2026


@dataclass(frozen=True)
class Sample:
    name: str
    family: str
    series: str | None  # a time series' name, None for a lone field
    step: int           # its position in the series (0 for lone fields)
    source: str         # file name (shared sci data or a series file)
    view: str           # how the array is cut from the file (see _cut)


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

    def add(name, family, source, view="whole", series=None, step=0):
        if (SCI / source).exists() or (SERIES / source).exists():
            out.append(Sample(name, family, series, step, source, view))

    era5 = "era5_t2m_744x33x49.f32"
    for w in range(31):
        add(f"era5_t2m_w{w:02d}", "climate", era5, f"steps:{24 * w}:{24 * w + 24}", "era5_t2m", w)
    for var in ("u", "z"):
        src = f"eraint_{var}_6x241x480.f32"
        add(f"eraint_{var}", "climate", src)
        for lev in range(6):
            add(f"eraint_{var}_level{lev}", "climate", src, f"steps:{lev}:{lev + 1}")
    for src, tag in (("ns3d_vx_t2_128x128x128.f32", "ns3d"), ("ns3d192_vx_t1p8_192x192x192.f32", "ns3d192"),
                     ("ns2d_vorticity_t4_512x512.f64", "ns2d")):
        add(tag, "turbulence", src)
        add(f"{tag}_half", "turbulence", src, "stride2")
        for c in range(4):
            add(f"{tag}_crop{c}", "turbulence", src, f"crop{c}")
    for seq, step, p in _series_files():
        add(f"{seq}_t{step:03d}", "turbulence", p.name, "whole", seq, step)
    for src, tag in (("sqcyl_u_t1608_64x192.f32", "sqcyl_u"), ("sqcyl_v_t1608_64x192.f32", "sqcyl_v"),
                     ("comb_density_25x33x57.f32", "comb_density"), ("comb_xmomentum_25x33x57.f32", "comb_xmom")):
        add(tag, "cfd", src)
        add(f"{tag}_T", "cfd", src, "transpose")
    topo = "sscand_elevation_823x726.f32"
    add("sscand", "topography", topo)
    add("sscand_half", "topography", topo, "stride2")
    add("sscand_land", "topography", topo, "land")
    for c in range(4):
        add(f"sscand_crop{c}", "topography", topo, f"crop{c}")
        add(f"sscand_land_crop{c}", "topography", topo, f"land_crop{c}")
    return out


def load(s: Sample) -> tuple[np.ndarray, np.ndarray | None]:
    """``(array, missing mask or None)`` of a sample."""
    path = SCI / s.source if (SCI / s.source).exists() else SERIES / s.source
    a = read_array(path) if path.parent == SCI else np.fromfile(path, "<f4").reshape(
        tuple(int(n) for n in path.stem.rpartition("_")[2].split("x")))
    return _cut(a, s.view)


def _cut(a: np.ndarray, view: str) -> tuple[np.ndarray, np.ndarray | None]:
    miss = None
    if view.startswith("land"):  # the sea (elevation <= 0) is missing (NaN): a coastline mask
        miss = a <= 0
        a = np.where(miss, np.float32(np.nan), a)
        view = view[5:] or "whole"
    if view.startswith("steps:"):
        lo, hi = (int(v) for v in view.split(":")[1:])
        a = a[lo:hi]
        a = a[0] if hi - lo == 1 else a
    elif view == "stride2":
        a = a[tuple(slice(None, None, 2) for _ in a.shape)]
        miss = miss[tuple(slice(None, None, 2) for _ in miss.shape)] if miss is not None else None
    elif view == "transpose":
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    elif view.startswith("crop"):
        c = int(view[4:])
        half = [max(8, n // 2) if n >= 16 else n for n in a.shape]
        lo = [((c >> (d % 2)) & 1) * (n - h) for d, (n, h) in enumerate(zip(a.shape, half))]
        sl = tuple(slice(o, o + h) for o, h in zip(lo, half))
        a = a[sl]
        miss = miss[sl] if miss is not None else None
    a = np.ascontiguousarray(a)
    return a, (np.ascontiguousarray(miss) if miss is not None and miss.any() else None)


def _measure_sample(s: Sample) -> tuple[str, list]:
    import numba

    numba.set_num_threads(1)
    a, miss = load(s)
    vr = metrics.value_range(a if miss is None else np.where(miss, np.nan, a))
    rows = []
    for codec in CODECS:
        if codec != "strata" and miss is not None:
            continue
        for rel in BOUNDS:
            rows.append(dict(codec=codec, rel=rel, eb=rel * vr, **anchors.measure(codec, a, rel * vr, miss)))
    return s.name, rows


def ground_truth(workers: int = 2, progress: bool = True) -> dict:
    """``{sample name: [measured rows]}``, measuring what the cache lacks."""
    grid = json.loads(GRID.read_text()) if GRID.exists() else {}
    todo = [s for s in samples() if s.name not in grid]
    if todo:
        from concurrent.futures import ProcessPoolExecutor

        from tqdm import tqdm

        CACHE.mkdir(exist_ok=True)
        with ProcessPoolExecutor(workers) as pool:
            for i, (name, rows) in enumerate(tqdm(pool.map(_measure_sample, todo), total=len(todo),
                                                  disable=not progress, desc="ground truth")):
                grid[name] = rows
                if i % 20 == 19 or i == len(todo) - 1:
                    _write_json(GRID, grid)
    return grid


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.replace(path)


def feature_table(names=None) -> dict[str, Features]:
    """Features of every sample (``names``: a subset)."""
    out = {}
    for s in samples():
        if names is None or s.name in names:
            a, miss = load(s)
            out[s.name] = features(a, mask=miss)
    return out


def rows_for(sample_names, grid, feats, codec: str, metric: str):
    """``(x, y, baseline, measured)`` training rows of one (codec, metric) over samples."""
    xs, ys, base, meas = [], [], [], []
    for name in sample_names:
        f = feats[name]
        for r in grid.get(name, []):
            if r["codec"] != codec or r[metric] is None or not math.isfinite(r[metric]):
                continue
            if metric == "ssim" and r["ssim"] <= 0:
                continue
            x, est = model.inputs(f, r["eb"])
            b = model.baseline(metric, f, est)
            xs.append(x)
            base.append(b)
            ys.append(model.to_target(metric, r[metric]) - b)
            meas.append(r[metric])
    return np.array(xs), np.array(ys), np.array(base), np.array(meas)


def fit(x: np.ndarray, y: np.ndarray, experts: int = EXPERTS, hidden: int = HIDDEN, epochs: int = EPOCHS,
        seed: int = SEED) -> model.Mixture:
    """Train one mixture of experts on rows ``x`` -> residual targets ``y`` (torch, one thread,
    full-batch Adam, MSE on standardized targets)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    mean = x.mean(axis=0)
    scale = np.maximum(x.std(axis=0), 1e-3)
    out_mean, out_scale = float(y.mean()), float(max(y.std(), 1e-6))
    z = torch.tensor((x - mean) / scale, dtype=torch.float64)
    t = torch.tensor((y - out_mean) / out_scale, dtype=torch.float64)
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
        loss = torch.mean(((g * e).sum(dim=1) - t) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    arr = [p.detach().numpy().copy() for p in params]
    return model.Mixture(mean, scale, *arr, out_mean=out_mean, out_scale=out_scale)


def train(sample_names, grid, feats, codecs=CODECS, experts: int = EXPERTS) -> model.Predictors:
    """Predictors for every (codec, metric) with training rows among ``sample_names``."""
    table = {}
    for codec in codecs:
        for metric in model.METRICS:
            x, y, _, _ = rows_for(sample_names, grid, feats, codec, metric)
            if len(y) >= 8:
                table[(codec, metric)] = fit(x, y, experts=experts)
    return model.Predictors(table, {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=model.DEFAULT_PATH)
    args = ap.parse_args()
    grid = ground_truth(args.workers)
    names = [s.name for s in samples() if s.name in grid]
    feats = feature_table(set(names))
    preds = train(names, grid, feats)
    info = dict(samples=len(names), rows=sum(len(grid[n]) for n in names), bounds=list(BOUNDS),
                families=list(FAMILIES), experts=EXPERTS, hidden=HIDDEN, epochs=EPOCHS, lr=LR,
                weight_decay=DECAY, seed=SEED, trained_by="benchmarks/quality_train.py")
    model.save(args.out, preds.table, info)
    print(f"{len(preds.table)} predictors from {info['rows']} measurements of {len(names)} samples -> {args.out}")


if __name__ == "__main__":
    main()
