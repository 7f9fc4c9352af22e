#!/usr/bin/env python3
"""strata demo: compress a real turbulence field, decode it whole, progressively, and by region.

The sample, demo/data/ns3d_vx_64x64x64.f32, is the x-velocity of forced isotropic turbulence
simulated for this project with fluidsim (demo/make_sample.py made it; demo/data/README.md
describes it). Run with ``make demo``; the figure goes to demo/out/demo.png.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import strata
from strata import metrics
from strata.inputs import read_array

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "data" / "ns3d_vx_64x64x64.f32"
OUT = HERE / "out"


def best_time(fn, repeats=7):
    best, res = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t)
    return best, res


def main() -> int:
    a = read_array(SAMPLE)
    print(f"sample: {SAMPLE.name}, shape {a.shape}, {a.dtype}, {a.nbytes / 2**20:.1f} MiB, "
          f"value range {metrics.value_range(a):.4f}")
    strata.decompress(strata.compress(a, rel_error=1e-3))  # compile the kernels once

    print("\nError-bounded compression (value-range-relative bounds; every decoded value checked):")
    print(f"{'bound':>7} {'ratio':>8} {'bits/value':>10} {'PSNR dB':>8} {'max err/bound':>13} "
          f"{'comp MB/s':>9} {'decomp MB/s':>11}")
    ok = True
    for rel in (1e-2, 1e-3, 1e-4):
        eb = rel * metrics.value_range(a)
        tc, blob = best_time(lambda rel=rel: strata.compress(a, rel_error=rel))
        td, y = best_time(lambda blob=blob: strata.decompress(blob))
        err = metrics.max_abs_error(a, y)
        ok &= err <= eb
        print(f"{rel:7.0e} {a.nbytes / len(blob):8.2f} {8 * len(blob) / a.size:10.3f} {metrics.psnr(a, y):8.2f} "
              f"{err / eb:13.4f} {a.nbytes / 1e6 / tc:9.0f} {a.nbytes / 1e6 / td:11.0f}")

    rel = 1e-3
    blob = strata.compress(a, rel_error=rel)
    r = strata.open(blob)
    full = r.read()
    print(f"\nProgressive decoding at {rel:g} ({len(blob)} bytes in all): level k reads only levels 0..k")
    print(f"{'level':>5} {'grid shape':>14} {'stride':>10} {'bound':>9} {'grid max err':>12} {'bytes 0..k':>10} "
          f"{'preview PSNR':>12}")
    previews = []
    for lv in r.levels:
        grid = r.read(level=lv.index, full_resolution=False)
        ref = a[tuple(slice(None, None, s) for s in lv.stride)]
        err = metrics.max_abs_error(ref, grid)
        ok &= err <= lv.error_bound
        prev = r.read(level=lv.index)
        previews.append(prev)
        print(f"{lv.index:5d} {str(lv.shape):>14} {str(lv.stride):>10} {lv.error_bound:9.3g} {err:12.3g} "
              f"{lv.offset + lv.compressed_bytes:10d} {metrics.psnr(a, prev):12.2f}")

    box = (slice(24, 40), slice(24, 40), slice(24, 40))  # 1/64 of the volume
    t_full, _ = best_time(lambda: r.read())
    t_box, part = best_time(lambda: r.read(region=box))
    same = np.array_equal(part, full[box])
    ok &= same
    print(f"\nRegion decoding: box {tuple((s.start, s.stop) for s in box)} = 1/64 of the volume in "
          f"{t_box * 1e3:.2f} ms vs {t_full * 1e3:.2f} ms for all of it; equal to the full decode: {same}")

    try:
        figure(a, full, previews, r, rel)
    except ImportError:
        print("(matplotlib missing: no figure)")
    print("\nall checks passed" if ok else "\nA CHECK FAILED")
    return 0 if ok else 1


def figure(a, full, previews, r, rel):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z = a.shape[0] // 2
    eb = rel * metrics.value_range(a)
    n_top = 3
    n = max(n_top, len(previews))
    fig, axes = plt.subplots(2, n, figsize=(3.2 * n, 6.6), constrained_layout=True)
    lim = dict(vmin=float(a.min()), vmax=float(a.max()), cmap="RdBu_r")
    axes[0, 0].imshow(a[z], **lim)
    axes[0, 0].set_title(f"original (slice z={z})")
    axes[0, 1].imshow(full[z], **lim)
    axes[0, 1].set_title(f"decompressed, bound {rel:g}\nratio {a.nbytes / len(strata.compress(a, rel_error=rel)):.1f}")
    im = axes[0, 2].imshow((full[z].astype(np.float64) - a[z]) / eb, vmin=-1, vmax=1, cmap="PuOr")
    axes[0, 2].set_title("error / bound")
    fig.colorbar(im, ax=axes[0, 2], shrink=0.8)
    for k in range(n_top, n):
        axes[0, k].axis("off")
    for k in range(n):
        ax = axes[1, k]
        if k < len(previews):
            lv = r.levels[k]
            ax.imshow(previews[k][z], **lim)
            ax.set_title(f"level {k}: grid {lv.shape}\npreview PSNR {metrics.psnr(a, previews[k]):.1f} dB")
        else:
            ax.axis("off")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    OUT.mkdir(exist_ok=True)
    path = OUT / "demo.png"
    fig.savefig(path, dpi=110)
    print(f"figure: {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    sys.exit(main())
