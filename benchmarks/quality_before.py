"""The "before" columns of ``quality_prediction.py``'s per-family table: an earlier commit's
strata.quality (its features, inputs, training schedule and shipped predictors) on today's
ground truth of sci + zoo, each family held out.

* Families the earlier predictors were trained on (sci's: climate, turbulence, CFD,
  combustion, topography): its method retrained without the family (its samples, its
  ``quality_train.fit``, on the rows of today's ground truth, so that the compressor measured
  is the same as after).
* Families it never saw (the zoo's twelve): its shipped predictors as they are.

Evaluated on the same rows as ``quality_prediction.py`` (every (sample, bound) of the family in
``benchmarks/.cache/quality_grid_v2.json``; ``quality_train.py`` measures it): strata's ratio
median / p90 of |predicted/measured - 1| over every row, PSNR over the rows of finite measured
PSNR (the earlier predictors have no lossless case: the rows strata decodes exactly are counted).

The commit is exported with ``git archive`` into a temporary folder and run in a child process
that imports its ``strata`` package; today's ``quality_train.py`` only lists and loads the samples.

Run: ``.venv/bin/python benchmarks/quality_before.py [--commit c00c584]`` (a few minutes);
writes ``benchmarks/results/quality_before.json``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def inner(old: Path, commit: str) -> dict:
    """Runs in the child, with the earlier commit's ``src`` first on ``sys.path``."""
    sys.path.insert(0, str(old / "benchmarks"))
    import quality_train as old_qt  # (the earlier commit's)
    import strata
    from strata.quality import features as old_features
    from strata.quality import model as old_model

    assert Path(strata.__file__).resolve().is_relative_to(old.resolve()), strata.__file__
    sys.path.insert(1, str(HERE))
    spec = importlib.util.spec_from_file_location("quality_train_now", HERE / "quality_train.py")
    qt = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = qt  # (its dataclasses look their module up)
    spec.loader.exec_module(qt)
    old_qt.SCI, old_qt.SERIES = qt.SCI, qt.SERIES  # (today's shared data and series, not the export's)
    from strata.errors import InvalidInputError

    grid = json.loads(qt.GRID.read_text())["rows"]
    feats = {}
    for s in qt.samples():
        if s.name not in grid:
            continue
        a, miss = qt.load(s)
        try:
            f = old_features(a, mask=miss)
        except InvalidInputError:  # (as quality_train.feature_table: nothing to predict)
            continue
        if f.value_range > 0:
            feats[s.name] = f
    S = [s for s in qt.samples() if s.name in feats]
    family_of = {s.name: s.family for s in S}
    earlier = {s.name for s in old_qt.samples()} & set(feats)

    def rows(names, metric, with_exact=False):
        xs, ys, base, meas = [], [], [], []
        for n in names:
            f = feats[n]
            for r in grid[n]:
                if r["codec"] != "strata" or r[metric] is None or (not math.isfinite(r[metric]) and not with_exact):
                    continue
                x, est = old_model.inputs(f, r["eb"])
                b = old_model.baseline(metric, f, est)
                xs.append(x)
                base.append(b)
                meas.append(r[metric])
                ys.append(old_model.to_target(metric, r[metric]) - b if math.isfinite(r[metric]) else math.nan)
        return np.array(xs), np.array(ys), np.array(base), np.array(meas)

    shipped = old_model.load()
    out = {}
    for family in qt.families():
        test = [s.name for s in S if family_of[s.name] == family]
        seen = any(n in earlier for n in test)
        res = dict(samples=len(test), how="retrained without the family" if seen else "shipped predictors")
        for metric in ("ratio", "psnr"):
            if seen:
                x, y, _, _ = rows(sorted(n for n in earlier if family_of[n] != family), metric)
                m = old_qt.fit(x, y)
            else:
                m = shipped.get("strata", metric)
            xt, _, bt, mt = rows(test, metric, with_exact=True)
            p = np.array([old_model.from_target(metric, v) for v in bt + m(xt)])
            if metric == "ratio":
                e = 100 * np.abs(p / mt - 1)
            else:
                fin = np.isfinite(mt)
                e = np.abs(p[fin] - mt[fin])
                res["lossless_rows"] = int((~fin).sum())
            res[metric] = dict(n=int(e.size), median=float(np.median(e)), p90=float(np.percentile(e, 90)))
        out[family] = res
        print(f"{family:15s} {res['how']:30s} ratio {res['ratio']['median']:6.1f} % / {res['ratio']['p90']:6.1f} %  "
              f"PSNR {res['psnr']['median']:.2f} / {res['psnr']['p90']:.2f} dB", file=sys.stderr, flush=True)
    note = (f"Before: strata.quality at {commit} (its features, inputs and training schedule) on the same rows: "
            "sci's families from its method retrained without the family (its own samples, today's ground "
            "truth), the zoo's from its shipped predictors (never trained on the zoo); "
            "`benchmarks/quality_before.py`.")
    return dict(commit=commit, lossy_digest=json.loads(qt.GRID.read_text())["meta"].get("lossy_digest"),
                note=note, families=out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commit", default="c00c584", help="the earlier commit (default: c00c584)")
    ap.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        json.dump(inner(args.inner, args.commit), sys.stdout)
        return
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", args.commit, "src", "benchmarks"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        me = str(Path(__file__).resolve())
        code = (f"import runpy, sys; sys.path.insert(0, {str(Path(tmp) / 'src')!r}); "
                f"sys.argv = [{me!r}, '--inner', {tmp!r}, '--commit', {args.commit!r}]; "
                f"runpy.run_path({me!r}, run_name='__main__')")
        sys.path.insert(0, str(HERE))
        from common import SHARED

        env = dict(os.environ, STRATA_SHARED=str(SHARED))
        res = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE, text=True,
                             cwd=tmp, env=env)
    report = json.loads(res.stdout.strip().splitlines()[-1])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "quality_before.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"-> {RESULTS / 'quality_before.json'}")


if __name__ == "__main__":
    main()
