#!/usr/bin/env python3
"""strata.lossy on fields with missing values, beside SZ3 and ZFP given the best a user can do
without a mask, in one process, at value-range-relative bounds of the *valid* range.

Masked fields (real masks, made here from ../shared/data, nothing written to disk):

* ``era5_t2m`` 744x33x49 with the real coastline of the World Ocean Atlas basin mask (1 degree,
  cropped to the field's box, nearest cell): land missing, the same mask every hour;
* ``eraint_z`` 6x241x480 with the basin mask at six depths (0-1000 m, nearest cell): land grows
  with depth, a different mask on every slab;
* ``eraint_u`` 6x241x480 missing where the geopotential ``eraint_z`` of the same slab is in
  its top 30 % (a mask that changes from slab to slab, a threshold on another field);
* ``sscand_elevation`` 823x726, its own coastline: land (elevation >= 0) missing, bathymetry
  kept -- a regional ocean-model view;
* ``ns3d_vx`` 128^3 with a 128x128 window of the basin mask at 128 depths (3D, land growing
  with depth).

Missing points hold the CF fill value 1e20 (``fill_value=1e20`` for strata). Rows:

* ``strata``: with the mask;
* ``strata-before``: strata as it was before masks: missing points stored apart one by one
  (position and value; exactly what it did with NaN: the mean-filled field is coded and the
  missing values' section added to its size);
* ``strata-mean``, ``sz3-mean``, ``zfp-mean``: the field with missing points set to the mean of
  the valid values (what a user of a mask-less compressor does; the mask is then lost);
* ``sz3-nearest``, ``zfp-nearest``: missing points set to the nearest valid value
  (scipy.ndimage's Euclidean distance transform).

Error and PSNR are measured on the valid points only, at the same absolute bound for every row.
Prints tables and writes benchmarks/results/missing_values.{md,json}; exit status 1 if a strata
row breaks its bound or changes a missing point's bits.

    .venv/bin/python benchmarks/missing_values.py [--eb 1e-2,1e-3,1e-4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import ROOT, SHARED, geomean, machine, timed  # noqa: E402
from lossy_vs_anchors import codecs  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.inputs import read_array  # noqa: E402
from strata.lossy import exact  # noqa: E402

FILL = np.float32(1e20)


def basin_land(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(land (33, 180, 360) bool, depth m, lat, lon)`` of the World Ocean Atlas basin mask."""
    import netCDF4

    with netCDF4.Dataset(path) as ds:
        v = ds.variables["basin"]
        v.set_auto_mask(False)
        basin = np.asarray(v[...])
        land = basin == v.missing_value
        return land, np.asarray(ds["Z"][:]), np.asarray(ds["Y"][:]), np.asarray(ds["X"][:])


def _cells(lat, lon, blat, blon):
    """Indices of the basin cells nearest to each latitude / longitude."""
    i = np.abs(blat[None, :] - np.asarray(lat)[:, None]).argmin(axis=1)
    d = np.abs(((blon[None, :] - np.mod(np.asarray(lon), 360)[:, None]) + 180) % 360 - 180)
    return i, d.argmin(axis=1)


def masked_fields(sci: Path, masks: Path):
    """``{name: (field float32, missing bool, kind)}`` for the fields present."""
    land, depth, blat, blon = basin_land(masks / "basin_mask_33x180x360.nc")
    out = {}
    p = sci / "era5_t2m_744x33x49.f32"
    if p.exists():
        a = read_array(p)
        i, j = _cells(np.linspace(58, 50, 33), np.linspace(-10, 2, 49), blat, blon)
        m = np.broadcast_to(land[0][np.ix_(i, j)], a.shape)
        out["era5_t2m_744x33x49"] = (a, m, "coastline, the same every hour")
    glat, glon = np.linspace(90, -90, 241), np.linspace(-180, 179.25, 480)
    p = sci / "eraint_z_6x241x480.f32"
    if p.exists():
        z = read_array(p)
        i, j = _cells(glat, glon, blat, blon)
        levels = [int(np.abs(depth - d).argmin()) for d in (0, 100, 200, 400, 700, 1000)]
        out["eraint_z_6x241x480"] = (z, np.stack([land[k][np.ix_(i, j)] for k in levels]),
                                     "coastline at six depths")
        p = sci / "eraint_u_6x241x480.f32"
        if p.exists():
            u = read_array(p)
            thr = np.quantile(z.reshape(6, -1), 0.7, axis=1)[:, None, None]
            out["eraint_u_6x241x480"] = (u, z > thr, "threshold on another field, per slab")
    p = sci / "sscand_elevation_823x726.f32"
    if p.exists():
        a = read_array(p)
        out["sscand_elevation_823x726"] = (a, a >= 0, "its own coastline (2D)")
    p = sci / "ns3d_vx_t2_128x128x128.f32"
    if p.exists():
        a = read_array(p)
        k = np.round(np.linspace(0, len(depth) - 1, 128)).astype(int)
        i = np.arange(26, 154)
        j = np.arange(280, 408) % 360
        out["ns3d_vx_128x128x128"] = (a, land[np.ix_(k, i, j)], "3D window, land growing with depth")
    return out


def nearest_fill(a: np.ndarray, missing: np.ndarray) -> np.ndarray:
    from scipy import ndimage

    idx = ndimage.distance_transform_edt(missing, return_distances=False, return_indices=True)
    return a[tuple(idx)]


def run(name, a, missing, rel, cs, repeats):
    valid = ~missing
    vr = float(a[valid].max()) - float(a[valid].min())
    eb = rel * vr
    stored = np.where(missing, FILL, a)
    mean_f = np.where(missing, np.float32(a[valid].mean(dtype=np.float64)), a)
    near_f = nearest_fill(a, missing)
    sz3c, sz3d, _ = cs["sz3"]
    zfpc, zfpd, _ = cs["zfp"]
    threads = numba.config.NUMBA_NUM_THREADS
    variants = {
        "strata": (stored, lambda x: strata.compress(x, abs_error=eb, fill_value=FILL),
                   lambda b: strata.decompress(b), threads),
        "strata-mean": (mean_f, lambda x: strata.compress(x, abs_error=eb), lambda b: strata.decompress(b), threads),
        "sz3-mean": (mean_f, lambda x: sz3c(x, eb), lambda b: sz3d(b, a), 1),
        "sz3-nearest": (near_f, lambda x: sz3c(x, eb), lambda b: sz3d(b, a), 1),
        "zfp-mean": (mean_f, lambda x: zfpc(x, eb), lambda b: zfpd(b, a), 1),
        "zfp-nearest": (near_f, lambda x: zfpc(x, eb), lambda b: zfpd(b, a), 1),
    }
    rows = []
    for codec, (x, comp, decomp, th) in variants.items():
        decomp(comp(x))  # untimed: the first call of a kernel variant may load or compile it
        tc, blob = timed(lambda comp=comp, x=x: comp(x), repeats)
        td, y = timed(lambda decomp=decomp, blob=blob: decomp(blob), repeats)
        y = np.asarray(y).reshape(a.shape)
        err = metrics.max_abs_error(a[valid], y[valid])
        row = dict(field=name, codec=codec, threads=th, rel_eb=rel, abs_eb=eb, bytes=len(blob),
                   ratio=a.nbytes / len(blob), bits_per_value=8 * len(blob) / a.size,
                   psnr_valid=metrics.psnr(a[valid], y[valid]), err_over_eb=err / eb if eb else 0.0,
                   bound_ok=bool(err <= eb), comp_MBps=a.nbytes / 1e6 / tc, decomp_MBps=a.nbytes / 1e6 / td,
                   missing_share=float(missing.mean()))
        if codec == "strata":
            r = strata.open(blob)
            row["mask_bytes"] = r.mask_bytes
            row["mask_share"] = r.mask_bytes / len(blob)
            row["mask_bits_per_value"] = 8 * r.mask_bytes / a.size
            row["missing_exact"] = bool(np.array_equal(y[missing].view(np.uint32), stored[missing].view(np.uint32)))
        rows.append(row)
        if codec == "strata-mean":  # the stream as strata wrote it before masks: missing values apart
            before = len(blob) + len(exact.section(stored.reshape(-1), np.flatnonzero(missing)))
            rows.append(dict(row, codec="strata-before", bytes=before, ratio=a.nbytes / before,
                             bits_per_value=8 * before / a.size, comp_MBps=float("nan"), decomp_MBps=float("nan")))
    return rows


def fmt(rows):
    lines = ["| field | missing | codec | bound | ratio | bits/value | mask share | PSNR valid dB | max err/bound |"
             " comp MB/s | decomp MB/s |", "|---" * 11 + "|"]
    for r in rows:
        share = f"{r['mask_share']:.1%}" if "mask_share" in r else ""
        lines.append(f"| {r['field']} | {r['missing_share']:.0%} | {r['codec']} | {r['rel_eb']:.0e} |"
                     f" {r['ratio']:.2f} | {r['bits_per_value']:.3f} | {share} | {r['psnr_valid']:.2f} |"
                     f" {r['err_over_eb']:.4f} | {r['comp_MBps']:.0f} | {r['decomp_MBps']:.0f} |")
    return "\n".join(lines)


def summary(rows, rels):
    lines = ["| bound | strata / sz3-mean | strata / sz3-nearest | strata / zfp-mean | strata / strata-mean |"
             " strata / strata-before | mask bits/value (max) | compress speed strata / sz3-mean |"
             " decompress speed strata / sz3-mean | compress, decompress speed strata / strata-mean |",
             "|---" * 10 + "|"]
    out = {}
    for rel in rels:
        by = {}
        for r in rows:
            if r["rel_eb"] == rel:
                by.setdefault(r["field"], {})[r["codec"]] = r
        g = {k: geomean(v["strata"]["ratio"] / v[k]["ratio"] for v in by.values())
             for k in ("sz3-mean", "sz3-nearest", "zfp-mean", "strata-mean", "strata-before")}
        g["mask_bits_max"] = max(v["strata"]["mask_bits_per_value"] for v in by.values())
        for op in ("comp", "decomp"):
            for k in ("sz3-mean", "strata-mean"):
                g[f"{op}_speed_vs_{k}"] = geomean(v["strata"][f"{op}_MBps"] / v[k][f"{op}_MBps"] for v in by.values())
        out[rel] = g
        lines.append(f"| {rel:.0e} | {g['sz3-mean']:.3f} | {g['sz3-nearest']:.3f} | {g['zfp-mean']:.2f} |"
                     f" {g['strata-mean']:.3f} | {g['strata-before']:.2f} | {g['mask_bits_max']:.4f} |"
                     f" {g['comp_speed_vs_sz3-mean']:.2f} | {g['decomp_speed_vs_sz3-mean']:.2f} |"
                     f" {g['comp_speed_vs_strata-mean']:.2f}, {g['decomp_speed_vs_strata-mean']:.2f} |")
    return "\n".join(lines), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data")
    ap.add_argument("--eb", default="1e-2,1e-3,1e-4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "missing_values")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    rels = [float(v) for v in args.eb.split(",")]
    if not (args.data / "masks" / "basin_mask_33x180x360.nc").exists():
        print(f"no basin mask under {args.data}", file=sys.stderr)
        return 2
    fields = masked_fields(args.data / "sci", args.data / "masks")
    cs = codecs()
    w = np.random.default_rng(0).standard_normal((40, 40, 40)).astype(np.float32)
    w[:10] = FILL
    strata.decompress(strata.compress(w, rel_error=1e-3, fill_value=FILL))  # compile before timing
    threads = numba.config.NUMBA_NUM_THREADS
    print(f"machine: {machine()}; strata threads: {threads}; SZ3/ZFP: 1 thread")
    rows = []
    for name, (a, missing, kind) in fields.items():
        print(f"{name}: {kind}, {missing.mean():.1%} missing", flush=True)
        for rel in rels:
            for r in run(name, a, np.ascontiguousarray(missing), rel, cs, args.repeats):
                rows.append(r)
                print(f"  {r['codec']:13s} {rel:.0e} ratio {r['ratio']:8.2f} PSNR {r['psnr_valid']:6.2f} "
                      f"err/eb {r['err_over_eb']:.4f}" + (f" mask {r['mask_bits_per_value']:.4f} b/v"
                                                          if "mask_bytes" in r else ""), flush=True)
    summ, summ_data = summary(rows, rels)
    kinds = "\n".join(f"- `{n}`: {k}, {m.mean():.1%} missing" for n, (_, m, k) in fields.items())
    text = (f"Machine: {machine()}. strata on {threads} threads, SZ3 and ZFP on 1 (their wheels have no "
            f"OpenMP). Medians of {args.repeats} runs. Bounds relative to the range of the valid values; "
            f"error and PSNR on valid points.\n\nMasked fields:\n{kinds}\n\n"
            f"## Summary (geomean over the fields of strata's ratio over each row's)\n\n{summ}\n\n"
            f"## Every field\n\n{fmt(rows)}\n")
    print("\n" + text)
    atomic_write(args.out.with_suffix(".md"), text)
    atomic_write(args.out.with_suffix(".json"),
                 json.dumps(dict(machine=machine(), rows=rows, summary={str(k): v for k, v in summ_data.items()}),
                            indent=1, default=float))
    bad = [r for r in rows if r["codec"] == "strata" and not (r["bound_ok"] and r["missing_exact"])]
    if bad:
        print(f"BOUND VIOLATED or missing point changed in {len(bad)} row(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
