"""Precision layers (issue 39) measured: one strata stream written with ``progressive="precision"`` and read at any
bound, against a dedicated stream at each bound (strata's own, SZ3's and SPERR's), on every field of sci + zoo.

For every field (``NAME_D0xD1xD2.f32/.f64`` in ``../shared/data/sci`` and ``../shared/data/zoo``; NaN always
missing, the zoo's fill values as :data:`FILL` says) with ``vr`` the value range of its valid values (bounds below are
relative to it, absolute ``e * vr``):

1. **Sizes.** The layered stream at ``rel_error=1e-6`` with the default layers (every decade from 1e-2 down to 1e-6)
   against a dedicated strata stream at 1e-6 (``abs_error=1e-6 * vr``) and SZ3's and SPERR's at 1e-6.
2. **Bytes read at a target bound** (:data:`TARGETS`, between-layer bounds included on purpose: a read there fetches
   the layers down to the first finer one): ``LayeredReader.bytes_for(error_bound=e * vr)`` against the size of the
   dedicated strata, SZ3 and SPERR streams at ``e``. Every target is also read through a fresh
   ``strata.container.Source``: the bytes it fetched (``Source.bytes_read``) must equal ``bytes_for``; every valid
   value must be within ``e * vr`` (float64), every missing value (and infinity) must come back with its original
   bits.
3. **Decode time** at :data:`TIME_TARGETS`: ``strata.decompress(layered, error_bound=e * vr)`` against
   ``strata.decompress(dedicated at e)``, medians of ``--repeats`` interleaved runs (a run of a read under 20 ms
   repeats it for about 20 ms: the time per read), on ``numba.get_num_threads()`` threads.
4. **Box reads** at :data:`BOX_TARGETS`: a centred box a quarter of each axis of length >= 8 (the whole axis
   otherwise); bytes (``bytes_for(error_bound=e * vr, region=box)``, checked against a real read) against the
   dedicated stream's ``LossyReader.bytes_for(region=box)`` (also checked), and decode time (medians, interleaved).
   The box read must equal the same box of the whole read bit for bit.
5. **Refinement**: ``g = retrieve(error_bound=1e-2 * vr)`` then ``refine(g, error_bound=1e-4 * vr)`` through a
   fresh ``Source``: the bytes the refine fetched against the difference of ``bytes_for`` at the two bounds; its
   values must equal a read at 1e-4 bit for bit; its time against a direct read at 1e-4 (as in 3).

SZ3 (``pysz``, absolute bound, its default algorithm) and SPERR (``numcodecs_wasm_sperr``, point-wise error mode) get
the data with the missing values replaced by the mean of the valid ones (as ``../shared/bench/zoo_eval.py`` does);
only their sizes are measured. Reported: geomeans over the fields (and the worst field) of each ratio, and a table per
field. Writes ``progressive_precision.{json,md}`` to ``--out`` (atomically); exit status 1 if any check fails::

    .venv/bin/python benchmarks/progressive_precision.py [--fields era5_t2m cosmo] [--out DIR] [--repeats 3] \\
        [--threads N]

On a machine shared with other work, ``--threads 1`` keeps the times steadier: a parallel kernel whose second thread
is descheduled waits a scheduler time slice (milliseconds, more than a whole read of a small field takes).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from benchmarks.common import geomean, machine  # noqa: E402

import strata  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.container import Source  # noqa: E402
from strata.lossy import LayeredReader, LossyReader  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
FINEST = 1e-6
TARGETS = (1e-1, 5e-2, 1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 2e-4, 1e-4, 1e-5, 1e-6)
TIME_TARGETS = (1e-2, 1e-3, 1e-4, 1e-6)
BOX_TARGETS = (1e-2, 1e-4, 1e-6)
REFINE = (1e-2, 1e-4)
#: the zoo's fill values by field-name prefix (its MANIFEST.md); NaN is always missing
FILL = {"ocean_foam": np.float32(1e35), "gpm_ku": np.float32(-9999.9)}


def load(path: Path) -> np.ndarray:
    dims = tuple(int(d) for d in path.stem.rsplit("_", 1)[1].split("x"))
    return np.fromfile(path, dtype="<f4" if path.suffix == ".f32" else "<f8").reshape(dims)


def anchors(filled: np.ndarray, eb: float) -> dict[str, int]:
    """Bytes of SZ3's and SPERR's streams at absolute bound ``eb`` (as ``zoo_eval.py`` calls them)."""
    import numcodecs_wasm_sperr as sperr
    from pysz import sz, szConfig, szErrorBoundMode

    cfg = szConfig()
    cfg.errorBoundMode = szErrorBoundMode.ABS
    cfg.absErrorBound = float(eb)
    c, _ = sz.compress(np.ascontiguousarray(filled), cfg)
    sc = sperr.Sperr(mode="pwe", pwe=float(eb)).encode(np.ascontiguousarray(filled))
    return {"sz3": int(c.nbytes), "sperr": len(sc)}


def centred_box(shape) -> tuple[slice, ...]:
    out = []
    for n in shape:
        w = max(1, round(n / 4)) if n >= 8 else n
        lo = (n - w) // 2
        out.append(slice(lo, lo + w))
    return tuple(out)


def interleaved(fns, repeats: int, batch_s: float = 0.02) -> list[float]:
    """Median wall time of a call of each of ``fns``, run in turn ``repeats`` times; a run of a call that takes under
    ``batch_s`` repeats it until it takes about that long (the time per call), so that millisecond reads on a shared
    machine are not one scheduler hiccup away from a tenfold outlier."""
    times, calls = [[] for _ in fns], []
    for fn in fns:  # (untimed: warms caches, sizes the batch)
        t0 = time.perf_counter()
        fn()
        calls.append(max(1, math.ceil(batch_s / max(time.perf_counter() - t0, 1e-6))))
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(calls[i]):
                fn()
            times[i].append((time.perf_counter() - t0) / calls[i])
    return [statistics.median(t) for t in times]


class Checks:
    """Failed checks, each with its field, what and the numbers."""

    def __init__(self):
        self.failures: list[dict] = []
        self.count = 0

    def __call__(self, ok: bool, field: str, what: str, **numbers) -> bool:
        self.count += 1
        if not ok:
            row = {"field": field, "check": what, **numbers}
            self.failures.append(row)
            print(f"  CHECK FAILED: {row}", file=sys.stderr, flush=True)
        return ok


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8))


def check_values(check: Checks, field: str, what: str, a: np.ndarray, valid: np.ndarray, y: np.ndarray,
                 eb: float) -> float:
    """Max error of the valid values of ``y`` (checked against ``eb``); missing values and infinities must keep their
    bits. Returns the max error over ``eb``."""
    y = np.asarray(y)
    if not check(y.shape == a.shape and y.dtype == a.dtype, field, f"{what}: shape/dtype",
                 got=[list(y.shape), str(y.dtype)], want=[list(a.shape), str(a.dtype)]):
        return float("nan")
    err = float(np.max(np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)), initial=0.0))
    check(err <= eb, field, f"{what}: bound", max_abs_error=err, bound=eb, over=err / eb)
    inv = ~valid
    if inv.any():
        ok = same_bits(np.ascontiguousarray(a[inv]), np.ascontiguousarray(y[inv]))
        if not ok:
            nan_kept = bool(np.isnan(y[inv][np.isnan(a[inv])]).all())
            check(False, field, f"{what}: missing values' bits", differing=int(
                (a[inv].view(np.uint8).reshape(-1, a.itemsize) != y[inv].view(np.uint8).reshape(-1, a.itemsize))
                .any(axis=1).sum()), of=int(inv.sum()), nan_still_nan=nan_kept)
        else:
            check(True, field, "missing bits")
    return err / eb


def field_rows(path: Path, repeats: int, check: Checks) -> dict:
    name = path.stem.rsplit("_", 1)[0]
    a = load(path)
    fv = next((v for k, v in FILL.items() if name.startswith(k)), None)
    valid = np.isfinite(a) & ((a != a.dtype.type(fv)) if fv is not None else True)
    vals = a[valid]
    vr = float(vals.max()) - float(vals.min())
    filled = np.where(valid, a, a.dtype.type(float(vals.astype(np.float64).mean()))).astype(a.dtype)
    out = {"shape": list(a.shape), "dtype": str(a.dtype), "points": int(a.size), "missing": int((~valid).sum()),
           "fill_value": None if fv is None else float(fv), "value_range": vr, "bytes": int(a.nbytes)}

    t0 = time.perf_counter()
    blob = strata.compress(a, rel_error=FINEST, progressive="precision", fill_value=fv)
    out["layered_compress_s"] = time.perf_counter() - t0
    r = strata.open(blob)
    if not isinstance(r, LayeredReader):
        raise TypeError(f"{name}: strata.open gave {type(r).__name__} for a layered stream")
    out["layered_bytes"] = len(blob)
    out["layers"] = [{"bound": li.error_bound / vr, "bytes": li.compressed_bytes} for li in r.layers]

    ded, anc = {}, {}
    for e in TARGETS:
        t0 = time.perf_counter()
        ded[e] = strata.compress(a, abs_error=e * vr, fill_value=fv)
        if e == FINEST:
            out["dedicated_finest_compress_s"] = time.perf_counter() - t0
        anc[e] = anchors(filled, e * vr)
    out["finest"] = {"layered": len(blob), "strata": len(ded[FINEST]), **anc[FINEST],
                     "vs_strata": len(blob) / len(ded[FINEST]), "vs_sz3": len(blob) / anc[FINEST]["sz3"],
                     "vs_sperr": len(blob) / anc[FINEST]["sperr"]}

    # 2. bytes read at each target, checked against a real read; the bound and the missing values
    full = {}
    out["targets"] = {}
    for e in TARGETS:
        eb = e * vr
        want = r.bytes_for(error_bound=eb)
        src = Source(blob)
        rr = LayeredReader(src)
        y = rr.read(error_bound=eb)
        got = src.bytes_read
        check(got == want, name, f"bytes_for vs bytes read at {e:g}", bytes_for=want, bytes_read=got)
        over = check_values(check, name, f"layered read at {e:g}", a, valid, y, eb)
        full[e] = y
        k = r.layer_for(eb)
        out["targets"][f"{e:g}"] = {
            "layers_read": k + 1, "layer_bound": r.layers[k].error_bound / vr, "bytes_read": want,
            "bytes_fetched": got, "max_error_over_bound": over, "strata": len(ded[e]), **anc[e],
            "vs_strata": want / len(ded[e]), "vs_sz3": want / anc[e]["sz3"], "vs_sperr": want / anc[e]["sperr"]}

    # 3. decode time, interleaved
    out["decode"] = {}
    for e in TIME_TARGETS:
        y = strata.decompress(ded[e])
        over = check_values(check, name, f"dedicated read at {e:g}", a, valid, y, e * vr)
        tl, td = interleaved([lambda e=e: strata.decompress(blob, error_bound=e * vr),
                              lambda e=e: strata.decompress(ded[e])], repeats)
        out["decode"][f"{e:g}"] = {"layered_s": tl, "dedicated_s": td, "ratio": tl / td,
                                   "dedicated_max_error_over_bound": over}

    # 4. a centred box
    box = centred_box(a.shape)
    out["box"] = {"region": [[s.start, s.stop] for s in box], "fraction": float(np.prod(
        [(s.stop - s.start) / n for s, n in zip(box, a.shape)]))}
    for e in BOX_TARGETS:
        eb = e * vr
        want = r.bytes_for(error_bound=eb, region=box)
        src = Source(blob)
        yb = LayeredReader(src).read(error_bound=eb, region=box)
        got = src.bytes_read
        check(got == want, name, f"box bytes_for vs bytes read at {e:g}", bytes_for=want, bytes_read=got)
        check(same_bits(np.ascontiguousarray(yb), np.ascontiguousarray(full[e][box])), name,
              f"box read at {e:g} equals the box of the whole read")
        dsrc = Source(ded[e])
        dr = LossyReader(dsrc)
        dwant = dr.bytes_for(region=box)
        dsrc2 = Source(ded[e])
        LossyReader(dsrc2).read(region=box)
        check(dsrc2.bytes_read == dwant, name, f"dedicated box bytes_for vs bytes read at {e:g}",
              bytes_for=dwant, bytes_read=dsrc2.bytes_read)
        tl, td = interleaved([lambda eb=eb: strata.decompress(blob, error_bound=eb, region=box),
                              lambda e=e: strata.decompress(ded[e], region=box)], repeats)
        out["box"][f"{e:g}"] = {"layered_bytes": want, "dedicated_bytes": dwant, "bytes_ratio": want / dwant,
                                "layered_s": tl, "dedicated_s": td, "time_ratio": tl / td}

    # 5. refinement 1e-2 -> 1e-4
    lo, hi = (e * vr for e in REFINE)
    src = Source(blob)
    rr = LayeredReader(src)
    g = rr.retrieve(error_bound=lo)
    b1 = src.bytes_read
    g2 = rr.refine(g, error_bound=hi)
    fetched = src.bytes_read - b1
    want = r.bytes_for(error_bound=hi) - r.bytes_for(error_bound=lo)
    check(fetched == want, name, f"refine {REFINE[0]:g} -> {REFINE[1]:g} bytes", bytes_fetched=fetched,
          bytes_for_difference=want)
    direct = r.read(error_bound=hi)
    ident = same_bits(g2.values, direct)
    check(ident, name, f"refine {REFINE[0]:g} -> {REFINE[1]:g} equals read at {REFINE[1]:g}")
    tr, td = interleaved([lambda: rr.refine(g, error_bound=hi), lambda: r.read(error_bound=hi)], repeats)
    out["refine"] = {"bytes_fetched": fetched, "bytes_for_difference": want, "refine_s": tr, "direct_read_s": td,
                     "time_ratio": tr / td, "bit_identical": ident}
    r.close()
    return out


def _g(vals) -> str:
    vals = list(vals)
    return f"{geomean(vals):.2f} ({max(vals):.2f})"


def _worst(fields: dict, key) -> str:
    name = max(fields, key=lambda f: key(fields[f]))
    return name


def render(report: dict) -> str:
    F = report["fields"]
    n = len(F)
    ver = report["version"]
    if report["version_end"] != ver:
        ver += f" when the run started and loaded it (by its end: {report['version_end']})"
    lines = [f"Machine: {report['machine']}; strata on {report['threads']} numba threads; {ver}.", "",
             "Precision layers (`progressive=\"precision\"`, `rel_error=1e-6`, default layers 1e-2 .. 1e-6) against "
             f"dedicated streams on {n} fields of sci + zoo. Times: medians of {report['repeats']} interleaved runs "
             "(a read under 20 ms repeated for about 20 ms a run). Bounds relative to the value range of the valid "
             "values. Ratios: geomean over the fields (worst field).", "",
             f"Checks: {report['checks']} run, {len(report['failures'])} failed"
             + (" (see *Failures*)." if report["failures"] else
                " (every read within its bound, missing values bit for bit, bytes fetched = `bytes_for`, box reads "
                "= box of the whole read, refine = read bit for bit)."), "",
             "## Size of the whole stream (finest bound 1e-6)", "",
             "| layered / dedicated strata | layered / SZ3 | layered / SPERR | dedicated strata / SZ3 | "
             "dedicated strata / SPERR |", "|---|---|---|---|---|",
             f"| {_g(f['finest']['vs_strata'] for f in F.values())} | {_g(f['finest']['vs_sz3'] for f in F.values())} "
             f"| {_g(f['finest']['vs_sperr'] for f in F.values())} "
             f"| {_g(f['finest']['strata'] / f['finest']['sz3'] for f in F.values())} "
             f"| {_g(f['finest']['strata'] / f['finest']['sperr'] for f in F.values())} |", "",
             "## Bytes read at a target bound", "",
             "Bytes the layered stream fetches for a whole read at the target over the size of a dedicated stream at "
             "that target (strata's own, SZ3's, SPERR's); the last columns put strata's dedicated stream beside the "
             "anchors'.", "",
             "| target | layers read | layered / strata | worst field | layered / SZ3 | layered / SPERR | "
             "strata / SZ3 | strata / SPERR |", "|---|---|---|---|---|---|---|---|"]
    for e in report["targets"]:
        t = f"{e:g}"
        rows = {k: f["targets"][t] for k, f in F.items()}
        k = sorted({r["layers_read"] for r in rows.values()})
        worst = _worst(rows, lambda r: r["vs_strata"])
        lines.append(f"| {t} | {'/'.join(map(str, k))} | {_g(r['vs_strata'] for r in rows.values())} | {worst} "
                     f"| {_g(r['vs_sz3'] for r in rows.values())} | {_g(r['vs_sperr'] for r in rows.values())} "
                     f"| {_g(r['strata'] / r['sz3'] for r in rows.values())} "
                     f"| {_g(r['strata'] / r['sperr'] for r in rows.values())} |")
    lines += ["", "## Decode time", "",
              "`strata.decompress(layered, error_bound=e)` over `strata.decompress(dedicated at e)` (whole array); "
              "total seconds over the fields.", "",
              "| target | time ratio | worst field | layered s (all fields) | dedicated s (all fields) |",
              "|---|---|---|---|---|"]
    for e in report["time_targets"]:
        rows = {k: f["decode"][f"{e:g}"] for k, f in F.items()}
        lines.append(f"| {e:g} | {_g(r['ratio'] for r in rows.values())} | {_worst(rows, lambda r: r['ratio'])} "
                     f"| {sum(r['layered_s'] for r in rows.values()):.3f} "
                     f"| {sum(r['dedicated_s'] for r in rows.values()):.3f} |")
    lines += ["", "## Box reads", "",
              "A centred box a quarter of each axis of length >= 8 (whole axis otherwise): the layered stream's bytes "
              "and decode time over the dedicated stream's at the target.", "",
              "| target | bytes ratio | worst field (bytes) | time ratio | worst field (time) |",
              "|---|---|---|---|---|"]
    for e in report["box_targets"]:
        rows = {k: f["box"][f"{e:g}"] for k, f in F.items()}
        lines.append(f"| {e:g} | {_g(r['bytes_ratio'] for r in rows.values())} "
                     f"| {_worst(rows, lambda r: r['bytes_ratio'])} | {_g(r['time_ratio'] for r in rows.values())} "
                     f"| {_worst(rows, lambda r: r['time_ratio'])} |")
    ref = {k: f["refine"] for k, f in F.items()}
    same = sum(r["bytes_fetched"] == r["bytes_for_difference"] for r in ref.values())
    ident = sum(r["bit_identical"] for r in ref.values())
    lines += ["", "## Refinement 1e-2 -> 1e-4", "",
              f"`refine(retrieve(1e-2), 1e-4)` fetched exactly `bytes_for(1e-4) - bytes_for(1e-2)` on {same} of {n} "
              f"fields and equalled `read(1e-4)` bit for bit on {ident} of {n}; refine time over a direct read at "
              f"1e-4: {_g(r['time_ratio'] for r in ref.values())}.", "",
              "## Per field", "",
              "Finest: the layered stream's size over the dedicated streams' at 1e-6 (strata, SZ3, SPERR). Then the "
              "layered read's bytes over the dedicated strata stream's at each target; decode time ratio at 1e-4; box "
              "bytes ratio at 1e-4.", "",
              "| field | shape | missing | finest / strata | / SZ3 | / SPERR | "
              + " | ".join(f"{e:g}" for e in report["targets"]) + " | time 1e-4 | box 1e-4 |",
              "|---|---|---|---|---|---|" + "---|" * len(report["targets"]) + "---|---|"]
    for k, f in F.items():
        lines.append(f"| {k} | {'x'.join(map(str, f['shape']))} | {f['missing']} | {f['finest']['vs_strata']:.3f} "
                     f"| {f['finest']['vs_sz3']:.2f} | {f['finest']['vs_sperr']:.2f} | "
                     + " | ".join(f"{f['targets'][f'{e:g}']['vs_strata']:.2f}" for e in report["targets"])
                     + f" | {f['decode']['0.0001']['ratio']:.2f} | {f['box']['0.0001']['bytes_ratio']:.2f} |")
    lines += ["", "## Published figures", "", report["published"]]
    if report["failures"]:
        lines += ["", "## Failures", "", "| field | check | numbers |", "|---|---|---|"]
        for fl in report["failures"]:
            nums = ", ".join(f"{k}={v}" for k, v in fl.items() if k not in ("field", "check"))
            lines.append(f"| {fl['field']} | {fl['check']} | {nums} |")
    return "\n".join(lines) + "\n"


PUBLISHED = ("None found: `../shared/research` names IPComp (arXiv 2502.04093) and pMGARD only by what they do "
             "(01-streaming-compressor-stz.md), with no sizes, ratios or timings to compare with.")


def version() -> str:
    """The strata source measured: its commit, and whether ``src`` differs from it."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"strata {strata.__version__}" if hasattr(strata, "__version__") else "strata (version unknown)"
    return f"strata at commit {head}" + (" with uncommitted changes in src" if dirty else "")


def warm_up() -> None:
    """Compile strata's kernels (both dtypes, layers, regions) before timing anything."""
    for dt in (np.float32, np.float64):
        w = np.random.default_rng(0).standard_normal((40, 40, 40)).astype(dt)
        b = strata.compress(w, rel_error=1e-5, progressive="precision")
        strata.decompress(b, error_bound=1e-3 * float(np.ptp(w)), region=(slice(0, 3),))
        strata.decompress(b)
        strata.decompress(strata.compress(w, rel_error=1e-3), region=(slice(0, 3),))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fields", nargs="*", help="field name prefixes (default: every field of sci and zoo)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, help="strata's numba threads (default: numba's)")
    args = ap.parse_args(argv)
    if args.threads:
        numba.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = sorted(p for folder in ("sci", "zoo") for suffix in ("f32", "f64")
                   for p in (DATA / folder).glob(f"*_*x*.{suffix}")
                   if not args.fields or any(p.name.startswith(f) for f in args.fields))
    if not paths:
        print(f"no fields under {DATA}", file=sys.stderr)
        return 2
    warm_up()
    threads = numba.get_num_threads()
    print(f"machine: {machine()}; strata threads: {threads}; {len(paths)} fields", flush=True)
    check = Checks()
    report = {"machine": machine(), "version": version(), "threads": threads, "repeats": args.repeats,
              "finest": FINEST, "targets": TARGETS, "time_targets": TIME_TARGETS, "box_targets": BOX_TARGETS,
              "refine": REFINE, "fields": {}}
    t_all = time.perf_counter()
    for path in paths:
        t0 = time.perf_counter()
        name = path.stem.rsplit("_", 1)[0]
        f = report["fields"][name] = field_rows(path, args.repeats, check)
        print(f"{name:32s} finest/strata {f['finest']['vs_strata']:.3f} /SZ3 {f['finest']['vs_sz3']:.2f} "
              f"/SPERR {f['finest']['vs_sperr']:.2f}  read/strata "
              + " ".join(f"{e:g}:{f['targets'][f'{e:g}']['vs_strata']:.2f}" for e in (1e-1, 2e-3, 1e-4, 1e-6))
              + f"  time 1e-4 {f['decode']['0.0001']['ratio']:.2f}  box 1e-4 {f['box']['0.0001']['bytes_ratio']:.2f}"
              f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    report["seconds"] = time.perf_counter() - t_all
    report["version_end"] = version()
    report["checks"] = check.count
    report["failures"] = check.failures
    report["published"] = PUBLISHED
    atomic_write(args.out / "progressive_precision.json", json.dumps(report, indent=1, default=float) + "\n")
    text = render(report)
    atomic_write(args.out / "progressive_precision.md", text)
    print(text)
    if check.failures:
        print(f"{len(check.failures)} CHECK(S) FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
