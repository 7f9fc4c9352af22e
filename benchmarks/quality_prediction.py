"""strata.quality on held-out data: predicted vs measured ratio, PSNR and SSIM; the sampling
baseline at equal time; prediction cost; compression to a PSNR target.

Splits (the predictors are retrained on each split's training part with
``quality_train.fit_members``'s schedule and family weights; the shipped predictors, trained on
everything, are not what is measured here):

* time: era5_t2m's and the fluidsim sequences' last third of steps held out;
* family: each field family of sci + zoo (``quality_train.families()``: climate, turbulence,
  CFD, topography, combustion and the zoo's twelve) held out in turn -- every sample cut from
  any of its fields (wholes, crops, resamplings, levels, masked variants, time steps).

Rows: every (sample, bound 1e-2..1e-5) of the held-out part. Columns: median and 90th
percentile of |predicted / measured - 1| (ratio), |delta PSNR| (dB), |delta SSIM|, for strata,
SZ3 and ZFP; beside them, the model-free estimate alone (stage 1, no learning) and, for the
time split, a single expert (plain MLP) instead of the mixture. Rows where strata decodes
exactly (lossless on a lattice: PSNR inf) count in the ratio; the PSNR columns take the finite
ones, and the lossless rows are reported apart (how many the predictor calls lossless).

Issue 36's target, per held-out family (strata): ratio median |error| <= 5 %, p90 <= 15 %,
PSNR median <= 0.3 dB; PASS/FAIL per family.

Sampling baseline (Tao et al.-style: compress a sample of blocks, extrapolate): per held-out
strata row, blocks spread over the field are stacked and compressed by strata with the same
bound, as many blocks as fit in the time strata.quality took for that field (features + one
bound, measured in the same process), at least one block.

Cost: features + three metrics for one bound vs one strata compression at 1e-3, on the fields
of at least 1M values, medians of 5; threads: strata's compression uses numba's default
(all cores), the prediction one thread.

Target: ``compress_to_target(metric="psnr")`` with the split's predictors on held-out samples,
targets 40, 60 and 80 dB: share within +-0.5 dB and compressions used.

Run after ``quality_train.py`` (which measures the ground truth):
``.venv/bin/python benchmarks/quality_prediction.py``; writes
``benchmarks/results/quality_prediction.{md,json,png}`` (``quality_before.py``'s results, when
present, give the table's "before" columns).
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality_train as qt  # noqa: E402
import strata  # noqa: E402
from common import geomean, machine, timed  # noqa: E402
from strata import metrics  # noqa: E402
from strata.quality import features, model, predict  # noqa: E402
from strata.quality.search import compress_to_target  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = (40.0, 60.0, 80.0)
#: Held-out samples per family for the (costlier) sampling baseline and target runs (the time
#: split: per family of its test part; a family split: of the family).
PER_FAMILY = 3
#: Issue 36's target per held-out family (strata): ratio median and p90 |error| (%), PSNR
#: median |delta| (dB).
GOAL = dict(ratio_median=5.0, ratio_p90=15.0, psnr_median=0.3)


def splits(S) -> dict:
    def late(s):
        if s.series is None:
            return False
        n = max(x.step for x in S if x.series == s.series) + 1
        return s.step >= n * (1 - qt.LATE_SHARE)

    out = {"time": ([s.name for s in S if not late(s)], [s.name for s in S if late(s)])}
    for fam in qt.families():
        out[f"family:{fam}"] = ([s.name for s in S if s.family != fam], [s.name for s in S if s.family == fam])
    return out


def errors(metric: str, predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Per-row error: % for the ratio, dB for PSNR, absolute for SSIM."""
    if metric == "ratio":
        return 100 * np.abs(predicted / measured - 1)
    return np.abs(predicted - measured)


def summary(e: np.ndarray) -> dict:
    return dict(n=int(e.size), median=float(np.median(e)), p90=float(np.percentile(e, 90))) if e.size else {}


def evaluate(split: str, train_names, test_names, grid, feats, family_of, experts=qt.EXPERTS,
             codecs=qt.CODECS) -> tuple[dict, dict, dict]:
    """``(learned, model_free, predictors)``: error summaries per codec/metric, and the
    split's predictors; also the rows (for the plot) under learned[codec]["rows"] and, for the
    PSNR, the lossless rows under learned[codec]["exact"]: measured exact, predicted exact, both."""
    learned, free, table = {}, {}, {}
    for codec in codecs:
        learned[codec], free[codec] = {"rows": {}}, {}
        for metric in model.METRICS:
            x, y, _, _, names = qt.rows_for(train_names, grid, feats, codec, metric)
            xt, _, bt, mt, _ = qt.rows_for(test_names, grid, feats, codec, metric, with_exact=True)
            if len(y) < 8 or not len(mt):
                continue
            m = qt.fit_members(x, y, experts=experts, weights=qt.family_weights(names, family_of))
            table[(codec, metric)] = m
            exact = ~np.isfinite(bt)  # (the estimate says lossless: PSNR inf, SSIM 1)
            out = bt + m(xt)
            p = np.array([model.from_target(metric, v) for v in out])
            p0 = np.array([model.from_target(metric, v) for v in bt])
            if metric != "ratio":
                p[exact] = p0[exact] = math.inf if metric == "psnr" else 1.0
            keep = np.isfinite(mt) if metric == "psnr" else np.ones(len(mt), bool)
            if metric == "psnr":
                learned[codec]["exact"] = dict(measured=int((~np.isfinite(mt)).sum()), predicted=int(exact.sum()),
                                               both=int((exact & ~np.isfinite(mt)).sum()))
                keep &= np.isfinite(p)
            learned[codec][metric] = summary(errors(metric, p[keep], mt[keep]))
            free[codec][metric] = summary(errors(metric, p0[keep], mt[keep]))
            learned[codec]["rows"][metric] = (p[keep].tolist(), mt[keep].tolist())
    return learned, free, model.Predictors(table, {})


def passes(learned: dict) -> dict:
    """Issue 36's target on strata's errors of one held-out family: each part and all."""
    L = learned["strata"]
    out = dict(ratio_median=L["ratio"]["median"] <= GOAL["ratio_median"],
               ratio_p90=L["ratio"]["p90"] <= GOAL["ratio_p90"],
               psnr_median=not L.get("psnr") or L["psnr"]["median"] <= GOAL["psnr_median"])
    out["all"] = all(out.values())
    return out


def spread_blocks(a: np.ndarray, miss, count: int):
    """``count`` blocks spread over ``a`` (edge 16 in 3D, 32 in 2D, 1024 in 1D), stacked along
    the first axis; their missing mask alike (None without)."""
    nd = a.ndim
    edge = {1: 1024, 2: 32, 3: 16}[nd]
    edge = min(edge, *a.shape)
    rng = np.random.default_rng(7)
    blocks, masks = [], []
    for _ in range(count):
        lo = [int(rng.integers(0, n - edge + 1)) for n in a.shape]
        sl = tuple(slice(o, o + edge) for o in lo)
        blocks.append(a[sl])
        masks.append(miss[sl] if miss is not None else None)
    s = np.concatenate(blocks, axis=0)
    m = np.concatenate(masks, axis=0) if miss is not None else None
    return np.ascontiguousarray(s), m


def sampling_baseline(a, miss, rels, budget_s: float) -> list[dict]:
    """The sampling estimate at each relative bound with blocks that fit in ``budget_s``."""
    vr = metrics.value_range(a if miss is None else np.where(miss, np.nan, a))
    count = 1
    while True:  # (calibrated at 1e-3: the largest block count whose compression fits the budget)
        s, m = spread_blocks(a, miss, 2 * count)
        t = time.perf_counter()
        strata.compress(s, abs_error=1e-3 * vr, mask=m)
        if time.perf_counter() - t > budget_s or 2 * count > 4096:
            break
        count *= 2
    s, m = spread_blocks(a, miss, count)
    out = []
    for rel in rels:
        from strata.quality.anchors import measure

        row = measure("strata", s, rel * vr, m)
        out.append(dict(rel=rel, ratio=row["ratio"], psnr=row["psnr"], ssim=row["ssim"], blocks=count))
    return out


def cost_row(field: str, a: np.ndarray) -> dict:
    """Features + prediction (one bound, three metrics) vs one strata compression at 1e-3."""
    vr = metrics.value_range(a)
    features(a)  # (compiled kernels loaded)
    t_pred, _ = timed(lambda: predict(features(a), rel_error=1e-3), 5)
    t_feat, _ = timed(lambda: features(a), 5)
    strata.compress(a, abs_error=1e-3 * vr)
    t_comp, _ = timed(lambda: strata.compress(a, abs_error=1e-3 * vr), 5)
    return dict(field=field, values=int(a.size), features_ms=1e3 * t_feat, predict_ms=1e3 * t_pred,
                compress_ms=1e3 * t_comp, share=t_pred / t_comp)


def prediction_cost() -> list[dict]:
    """Cost rows of the fields of at least 1M values."""
    from strata.inputs import read_array

    out = [cost_row("era5_t2m (whole)", read_array(qt.SCI / "era5_t2m_744x33x49.f32"))]
    for name in ("ns3d", "ns3d192"):
        s = next(x for x in qt.samples() if x.name == name)
        out.append(cost_row(name, qt.load(s)[0]))
    return out


def _predict_time(a, miss, preds) -> float:
    features(a, mask=miss)
    t, _ = timed(lambda: predict(features(a, mask=miss), rel_error=1e-3, predictors=preds), 3)
    return t


def main(argv=None) -> None:
    import argparse

    import numba

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="the splits' prediction errors only (no sampling baseline, targets or cost); "
                         "writes nothing under results/")
    args = ap.parse_args(argv)
    grid = qt.ground_truth(2)
    feats = qt.feature_table({s.name for s in qt.samples() if s.name in grid})
    S = [s for s in qt.samples() if s.name in feats]
    fam_of = {s.name: s.family for s in S}
    report = dict(machine=machine(), numba_threads=numba.config.NUMBA_NUM_THREADS, samples=len(S), splits={},
                  bounds=list(qt.BOUNDS), goal=GOAL, lossy_digest=qt.lossy_digest())
    plot_rows = {}
    split_preds = {}
    for split, (tr, te) in splits(S).items():
        learned, free, preds = evaluate(split, tr, te, grid, feats, fam_of,
                                        codecs=("strata",) if args.quick else qt.CODECS)
        split_preds[split] = (preds, te)
        for codec in learned:
            for metric, (p, m) in learned[codec].pop("rows").items():
                if split == "time":  # (the figure: held-out families)
                    continue
                plot_rows.setdefault((codec, metric), ([], []))
                plot_rows[(codec, metric)][0].extend(p)
                plot_rows[(codec, metric)][1].extend(m)
        report["splits"][split] = dict(train=len(tr), test=len(te), learned=learned, model_free=free,
                                       passes=passes(learned))
        L = learned["strata"]
        print(f"{split:26s} {len(tr):4d} train / {len(te):4d} test samples; strata ratio {L['ratio']['median']:5.1f} % "
              f"/ {L['ratio']['p90']:5.1f} %, PSNR {L.get('psnr', {}).get('median', math.nan):.2f} / "
              f"{L.get('psnr', {}).get('p90', math.nan):.2f} dB, lossless {L.get('exact')}; model-free ratio "
              f"{free['strata']['ratio']['median']:5.1f} % / {free['strata']['ratio']['p90']:5.1f} % "
              f"{'PASS' if report['splits'][split]['passes']['all'] else 'FAIL'}", flush=True)
    if args.quick:
        return
    tr, te = splits(S)["time"]
    single, _, _ = evaluate("time", tr, te, grid, feats, fam_of, experts=1)
    for codec in single:
        single[codec].pop("rows")
    report["time_single_expert"] = single

    # sampling baseline and targets on a subset of held-out samples of each split
    base_rows, target_rows = [], []
    for split, (preds, te) in split_preds.items():
        by_family = {}
        for name in te:
            by_family.setdefault(fam_of[name], []).append(name)
        chosen = [n for names in by_family.values() for n in names[:: max(1, len(names) // PER_FAMILY)][:PER_FAMILY]]
        for name in chosen:
            s = next(x for x in S if x.name == name)
            a, miss = qt.load(s)
            t_pred = _predict_time(a, miss, preds)
            rels = list(qt.BOUNDS)
            measured = {r["rel"]: r for r in grid[name] if r["codec"] == "strata"}
            p = predict(feats[name], rel_error=rels, predictors=preds)
            for i, b in enumerate(sampling_baseline(a, miss, rels, t_pred)):
                m = measured[b["rel"]]
                base_rows.append(dict(split=split, sample=name, rel=b["rel"], blocks=b["blocks"],
                                      budget_ms=1e3 * t_pred,
                                      sampled=dict(ratio=b["ratio"], psnr=b["psnr"], ssim=b["ssim"]),
                                      predicted=dict(ratio=p["ratio"][i], psnr=p["psnr"][i], ssim=p["ssim"][i]),
                                      measured=dict(ratio=m["ratio"], psnr=m["psnr"], ssim=m["ssim"])))
            for goal in TARGETS:
                blob = compress_to_target(a, metric="psnr", target=goal, mask=miss, predictors=preds)
                rec = strata.open(blob).target
                target_rows.append(dict(split=split, sample=name, target=goal, achieved=rec.achieved,
                                        compressions=rec.compressions))
        print(f"{split}: sampling baseline and targets on {len(chosen)} samples", flush=True)
    report["sampling"] = _sampling_summary(base_rows)
    report["target_psnr"] = _target_summary(target_rows)
    report["cost"] = prediction_cost()
    RESULTS.mkdir(exist_ok=True)
    before = RESULTS / "quality_before.json"
    if before.exists():
        report["before"] = json.loads(before.read_text())
    (RESULTS / "quality_prediction.json").write_text(json.dumps(dict(report, sampling_rows=base_rows,
                                                                     target_rows=target_rows), indent=1))
    (RESULTS / "quality_prediction.md").write_text(markdown(report))
    plot(plot_rows, RESULTS / "quality_prediction.png")
    print(markdown(report))


def _sampling_summary(rows) -> dict:
    out = {}
    for metric in model.METRICS:
        ok = [r for r in rows if r["measured"][metric] is not None and r["sampled"][metric] is not None
              and math.isfinite(r["measured"][metric]) and math.isfinite(r["sampled"][metric])]
        meas = np.array([r["measured"][metric] for r in ok])
        out[metric] = dict(sampling=summary(errors(metric, np.array([r["sampled"][metric] for r in ok]), meas)),
                           predicted=summary(errors(metric, np.array([r["predicted"][metric] for r in ok]), meas)))
    out["median_blocks"] = float(np.median([r["blocks"] for r in rows])) if rows else 0
    out["median_budget_ms"] = float(np.median([r["budget_ms"] for r in rows])) if rows else 0
    return out


def _target_summary(rows) -> dict:
    d = np.array([abs(r["achieved"] - r["target"]) if math.isfinite(r["achieved"]) else np.inf for r in rows])
    c = np.array([r["compressions"] for r in rows])
    return dict(cases=len(rows), within_half_db=float(np.mean(d <= 0.5)) if rows else 0.0,
                median_abs_db=float(np.median(d)) if rows else 0.0, max_compressions=int(c.max()) if rows else 0,
                mean_compressions=float(c.mean()) if rows else 0.0,
                one_compression=float(np.mean(c == 1)) if rows else 0.0)


def markdown(r: dict) -> str:
    def cell(d, key, metric=None):
        """``d[key]``'s median / p90 in ``metric``'s unit (default: the key's)."""
        if not d.get(key):
            return "-"
        s = d[key]
        metric = metric or key
        if metric == "ratio":
            return f"{s['median']:.1f} % / {s['p90']:.1f} %"
        if metric == "psnr":
            return f"{s['median']:.2f} / {s['p90']:.2f} dB"
        return f"{s['median']:.4f} / {s['p90']:.4f}"

    def exact(d):
        e = d.get("exact")
        return f"{e['both']} of {e['measured']} ({e['predicted'] - e['both']} wrong)" if e and e["measured"] + \
            e["predicted"] else "-"

    g = r["goal"]
    fams = [k for k in r["splits"] if k.startswith("family:")]
    n_pass = sum(r["splits"][k]["passes"]["all"] for k in fams)
    lines = [f"# strata.quality on held-out data\n\nMachine: {r['machine']}; {r['samples']} samples, bounds "
             f"{', '.join(f'{b:g}' for b in r['bounds'])} (relative); ground truth of src/strata/lossy "
             f"{r['lossy_digest']}. Errors: median / 90th percentile over the held-out (sample, bound) rows: "
             "|predicted/measured - 1| of the ratio, |delta PSNR| (rows of finite measured PSNR), |delta SSIM|. "
             "'model-free' is the stage-1 estimate alone. Every family's figures come from predictors trained "
             "without any sample of that family.\n",
             f"## Issue 36's target per held-out family (strata): ratio median <= {g['ratio_median']:g} %, "
             f"p90 <= {g['ratio_p90']:g} %, PSNR median <= {g['psnr_median']:g} dB", "",
             f"{n_pass} of {len(fams)} families pass.", ""]
    before = r.get("before")
    head = "| held out (test samples) | strata ratio | strata PSNR | lossless rows (predicted of measured) |"
    if before:
        head += " before: ratio | before: PSNR |"
    lines += [head + " target |", "|" + "---|" * (head.count("|") - 1 + 1)]
    for split in fams:
        s = r["splits"][split]
        L = s["learned"]["strata"]
        p = s["passes"]
        verdict = "PASS" if p["all"] else "FAIL (" + ", ".join(k.replace("_", " ") for k in ("ratio_median",
                                                                                          "ratio_p90", "psnr_median")
                                                             if not p[k]) + ")"
        row = f"| {split[7:]} ({s['test']}) | {cell(L, 'ratio')} | {cell(L, 'psnr')} | {exact(L)} |"
        if before:
            b = before["families"].get(split[7:], {})
            row += f" {cell(b, 'ratio')} | {cell(b, 'psnr')} |"
        lines.append(row + f" {verdict} |")
    if before:
        lines += ["", before["note"]]
    lines += ["", "## Every split and compressor", "",
              "| split (test samples) | compressor | ratio | PSNR | SSIM | model-free ratio | model-free PSNR |",
              "|---|---|---|---|---|---|---|"]
    for split, s in r["splits"].items():
        for codec in qt.CODECS:
            L, F = s["learned"].get(codec, {}), s["model_free"].get(codec, {})
            if not L.get("ratio"):
                continue
            lines.append(f"| {split} ({s['test']}) | {codec} | {cell(L, 'ratio')} | {cell(L, 'psnr')} | "
                         f"{cell(L, 'ssim')} | {cell(F, 'ratio')} | {cell(F, 'psnr')} |")
    one = r["time_single_expert"]["strata"]
    lines += ["", f"Time split, strata, one expert per member ({qt.MEMBERS} plain MLPs averaged) instead of "
              f"{qt.EXPERTS}: ratio {cell(one, 'ratio')}, "
              f"PSNR {cell(one, 'psnr')}, SSIM {cell(one, 'ssim')}.", ""]
    sp = r["sampling"]
    lines += [f"## Sampling baseline at equal time (strata; median budget {sp['median_budget_ms']:.1f} ms, "
              f"median {sp['median_blocks']:.0f} blocks)", "", "| metric | sampling | strata.quality |",
              "|---|---|---|"]
    for metric in model.METRICS:
        lines.append(f"| {metric} | {cell(sp[metric], 'sampling', metric)} | {cell(sp[metric], 'predicted', metric)} |")
    t = r["target_psnr"]
    lines += ["", "## target_psnr (40, 60, 80 dB) on held-out samples", "",
              f"{t['cases']} cases: {100 * t['within_half_db']:.0f} % within +-0.5 dB (median |miss| "
              f"{t['median_abs_db']:.2f} dB); compressions: mean {t['mean_compressions']:.2f}, at most "
              f"{t['max_compressions']}; {100 * t['one_compression']:.0f} % needed one.", "",
              f"## Prediction cost (features + ratio/PSNR/SSIM at one bound, 1 thread) vs strata compression at "
              f"1e-3 ({r['numba_threads']} threads), medians of 5", "",
              "| field | values | features ms | prediction ms | compression ms | share |", "|---|---|---|---|---|---|"]
    for c in r["cost"]:
        lines.append(f"| {c['field']} | {c['values']:,} | {c['features_ms']:.2f} | {c['predict_ms']:.2f} | "
                     f"{c['compress_ms']:.1f} | {100 * c['share']:.1f} % |")
    if r["cost"]:
        lines.append(f"\nGeometric mean share: {100 * geomean(c['share'] for c in r['cost']):.1f} %.")
    return "\n".join(lines) + "\n"


def plot(rows: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    colors = {"strata": "tab:blue", "sz3": "tab:orange", "zfp": "tab:green"}
    for ax, metric in zip(axes, ("ratio", "psnr")):
        lo, hi = math.inf, -math.inf
        for codec in reversed(qt.CODECS):  # (strata drawn last, on top)
            if (codec, metric) not in rows:
                continue
            p, m = (np.array(v) for v in rows[(codec, metric)])
            ax.scatter(m, p, s=4, alpha=0.4, color=colors[codec], label=codec)
            lo, hi = min(lo, m.min(), p.min()), max(hi, m.max(), p.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        if metric == "ratio":
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {metric}" + (" (dB)" if metric == "psnr" else ""))
        ax.set_ylabel(f"predicted {metric}" + (" (dB)" if metric == "psnr" else ""))
        ax.set_title(f"{metric}: each family of sci + zoo held out")
        ax.legend(markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
