#!/usr/bin/env python3
"""The entropy stage of strata.lossy against issue 16's one-thread budget (1.5x SZ3's speed).

For the three largest shared fields at value-range-relative bounds 1e-2, 1e-3, 1e-4, one thread
on both sides, in one process, medians of ``--repeats`` interleaved rounds (ns per value):

* SZ3 (pysz) compress / decompress, and the budget they set: a third less time (1.5x faster);
* strata's whole calls;
* strata's entropy stage alone, timed inside those same calls: the chunk analysis (contexts,
  symbols, histograms) and the rANS coding to compress, the chunk decoding (rANS, contexts,
  codes placed) to decompress -- the kernels of :mod:`strata.lossy.chunk_encoder` and
  :mod:`strata.lossy.chunk_decoder`, timed by wrapping the runners the encoder and reader take them from;
* that stage's share of the budget: at 1.0 or more, the entropy stage alone takes all the time
  that 1.5x SZ3 allows, before any prediction, tuning or container work;
* the share of the rest of the call (whole call less the entropy stage: the prediction passes,
  the tuner, the container): what the call would take with an entropy stage that cost nothing.

And what the context model costs the decoder: the same fields and bounds compressed with the
context grouping the encoder chooses, and with it forced to one table (no context: order 0) and
to three (:data:`strata.lossy.chunks.CONTEXT_GROUPS`); one-thread decompression (ns per value,
medians) and size against the chosen grouping's.

Writes ``benchmarks/results/speed_budget.{md,json}``.

    .venv/bin/python benchmarks/speed_budget.py [--repeats 9]
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import strata  # noqa: E402
from common import machine  # noqa: E402
from speed_per_core import RESULTS, SCI, field_cases, rounds, with_threads  # noqa: E402
from strata import metrics  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402
from strata.inputs import read_array  # noqa: E402
from strata.lossy import chunk_decoder, chunk_encoder  # noqa: E402

#: Speed the issue asks of one thread, as a multiple of SZ3's.
TARGET = 1.5
#: Context groupings forced in the second table (index into ``CONTEXT_GROUPS``: one table, three).
GROUPINGS = {"1 table": 0, "3 tables": 1}
#: Kernels of the entropy stage, by direction.
STAGE = {"c": ("analyze", "encode"), "d": ("decode",)}


class StageTimer:
    """Seconds spent in the kernels that ``module.runner`` hands out, by kernel name, while
    installed (``with``): the codec asks the runner for each kernel at each level."""

    def __init__(self, *modules):
        self.modules = modules
        self.seconds = defaultdict(float)

    def __enter__(self):
        self.saved = [m.runner for m in self.modules]
        for m, runner in zip(self.modules, self.saved):
            m.runner = self._wrap(runner)
        return self

    def __exit__(self, *exc):
        for m, runner in zip(self.modules, self.saved):
            m.runner = runner

    def _wrap(self, runner):
        def timed_runner(kernel, small):
            fn = runner(kernel, small)

            def call(*args):
                t0 = time.perf_counter()
                out = fn(*args)
                self.seconds[kernel.__name__] += time.perf_counter() - t0
                return out

            return call

        return timed_runner


def per_field(path: Path, rels, repeats: int) -> list[dict]:
    comp, decomp, a, cases = field_cases(path, rels)
    rows = []
    numba.set_num_threads(1)
    with StageTimer(chunk_encoder, chunk_decoder) as timer:
        for rel, eb, s_blob in cases:
            blob = strata.compress(a, abs_error=eb)
            calls = {"sz3_c": lambda eb=eb: comp(a, eb), "sz3_d": lambda s=s_blob: decomp(s, a),
                     "c": lambda eb=eb: strata.compress(a, abs_error=eb), "d": lambda b=blob: strata.decompress(b)}
            ns = defaultdict(list)
            for _ in range(repeats):
                for k, fn in calls.items():
                    gc.collect()
                    timer.seconds.clear()
                    t0 = time.perf_counter()
                    fn()
                    ns[k].append((time.perf_counter() - t0) / a.size * 1e9)
                    if k in STAGE:
                        ns["stage_" + k].append(sum(timer.seconds[n] for n in STAGE[k]) / a.size * 1e9)
            med = {k: statistics.median(v) for k, v in ns.items()}
            budget = {k: med["sz3_" + k] / TARGET for k in STAGE}
            rows.append(dict(field=path.stem, rel_eb=rel, ns=med,
                             **{"share_" + k: med["stage_" + k] / budget[k] for k in STAGE},
                             **{"rest_" + k: (med[k] - med["stage_" + k]) / budget[k] for k in STAGE}))
            print(f"{path.stem[:16]:16s} {rel:.0e}  SZ3 {med['sz3_c']:6.2f}/{med['sz3_d']:5.2f}  strata "
                  f"{med['c']:6.2f}/{med['d']:5.2f}  entropy stage {med['stage_c']:6.2f}/{med['stage_d']:5.2f} "
                  f"ns/value", flush=True)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return rows


def groupings(path: Path, rels, repeats: int) -> list[dict]:
    """One-thread decompression of streams coded with the chosen context grouping and with
    each of :data:`GROUPINGS` forced (through ``chunk_encoder.level_tables``)."""
    a = read_array(path)
    vr = metrics.value_range(a)
    chosen = chunk_encoder.level_tables
    rows = []
    for rel in rels:
        eb = rel * vr
        blobs = {"chosen": strata.compress(a, abs_error=eb)}
        try:
            for name, g in GROUPINGS.items():
                chunk_encoder.level_tables = functools.partial(chosen, grouping=g)
                blobs[name] = strata.compress(a, abs_error=eb)
        finally:
            chunk_encoder.level_tables = chosen
        for blob in blobs.values():
            assert np.abs(strata.decompress(blob).astype(np.float64) - a).max() <= eb, (path.name, rel)
        t = rounds({k: with_threads(1, functools.partial(strata.decompress, b)) for k, b in blobs.items()}, repeats)
        rows.append(dict(field=path.stem, rel_eb=rel, ns={k: v / a.size * 1e9 for k, v in t.items()},
                         size={k: len(b) / len(blobs["chosen"]) - 1 for k, b in blobs.items()}))
        print(f"{path.stem[:16]:16s} {rel:.0e}  decompress " + ", ".join(
            f"{k} {rows[-1]['ns'][k]:.2f} ({100 * rows[-1]['size'][k]:+.1f} %)" for k in blobs), flush=True)
    return rows


def markdown(res: dict) -> str:
    m = [f"Machine: {res['machine']}. One thread on both sides (SZ3 via pysz; strata "
         f"`numba.set_num_threads(1)`), medians of {res['repeats']} interleaved rounds, ns per value, absolute "
         "bound = rel x value range. Budget: SZ3's time / 1.5 (issue 16's one-thread target). Entropy stage: "
         "strata's chunk analysis + rANS coding (compress) and chunk decoding (decompress), timed inside the "
         "same calls.", "",
         "| field | rel. bound | SZ3 comp / decomp | budget at 1.5x | strata whole call | strata entropy stage "
         "| entropy stage / budget | rest of the call / budget |", "|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        ns = r["ns"]
        m.append(f"| {r['field']} | {r['rel_eb']:.0e} | {ns['sz3_c']:.2f} / {ns['sz3_d']:.2f} | "
                 f"{ns['sz3_c'] / TARGET:.2f} / {ns['sz3_d'] / TARGET:.2f} | {ns['c']:.2f} / {ns['d']:.2f} | "
                 f"{ns['stage_c']:.2f} / {ns['stage_d']:.2f} | {r['share_c']:.2f} / {r['share_d']:.2f} | "
                 f"{r['rest_c']:.2f} / {r['rest_d']:.2f} |")
    cs = res["cases"]
    for key, what in (("share", "Entropy stage"), ("rest", "Rest of the call")):
        med_c, med_d = (statistics.median(r[f"{key}_{k}"] for r in cs) for k in STAGE)
        m += ["", f"{what} / budget, median over the cases: compress {med_c:.2f}, decompress {med_d:.2f}; "
              f"cases at 1.0 or more: {sum(r[key + '_c'] >= 1 for r in cs)} / "
              f"{sum(r[key + '_d'] >= 1 for r in cs)} of {len(cs)}."]
    m += ["", "Decompression (one thread, ns per value, medians) with the context grouping chosen and forced to "
          "fewer tables; in brackets the size against the chosen grouping's:", "",
          "| field | rel. bound | chosen | " + " | ".join(GROUPINGS) + " |", "|---|---|---|" + "---|" * len(GROUPINGS)]
    for r in res["groupings"]:
        m.append(f"| {r['field']} | {r['rel_eb']:.0e} | {r['ns']['chosen']:.2f} | " + " | ".join(
            f"{r['ns'][k]:.2f} ({100 * r['size'][k]:+.1f} %)" for k in GROUPINGS) + " |")
    m.append("")
    return "\n".join(m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)
    files = sorted(SCI.iterdir(), key=lambda p: -p.stat().st_size)[:3]
    print(f"machine: {machine()}")
    cases = [r for p in files for r in per_field(p, [1e-2, 1e-3, 1e-4], args.repeats)]
    res = dict(machine=machine(), repeats=args.repeats, target=TARGET, cases=cases,
               groupings=[r for p in files for r in groupings(p, [1e-2, 1e-3, 1e-4], args.repeats)])
    text = markdown(res)
    print(text)
    atomic_write(RESULTS / "speed_budget.md", text.encode())
    atomic_write(RESULTS / "speed_budget.json", json.dumps(res, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
