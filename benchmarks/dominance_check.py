"""The range-dominance check (strata.dominance) on every real field of the shared data: how much
of its range the valid values occupy, raw and as decoded from streams at relative bounds of
1e-1 to 1e-4, with the documented fill values declared (the check must stay silent) and, for
the fields that have one, undeclared (it must speak).

Usage::

    python benchmarks/dominance_check.py [--data ../shared/data] [--out benchmarks/results]

Writes ``dominance_check.json`` and ``dominance_check.md`` to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

import strata
from common import SHARED, machine
from strata import dominance
from strata.atomic import atomic_write
from strata.inputs import read_array

#: Fill values the zoo's MANIFEST documents (NaN needs no declaring).
FILLS = {"ocean_foam_v": 1e35, "gpm_ku_zcorr": -9999.9}
BOUNDS = (1e-1, 1e-2, 1e-3, 1e-4)


def share(values: np.ndarray, bound: float = 0.0) -> float:
    """The share of their range that ``values`` occupy (the check's statistic, on all values)."""
    u = np.unique(values[np.isfinite(values)].astype(np.float64))
    if u.size < 2:
        return 1.0
    occupied, _ = dominance.occupancy(u, bound)
    return occupied / float(u[-1] - u[0])


def stream_share(blob: bytes) -> tuple[float, bool]:
    with strata.open(blob) as r:
        level = next((lv for lv in r.levels if math.prod(lv.shape) >= dominance.STREAM_POINTS), r.levels[-1])
        g = r.read(level=level.index, full_resolution=False, masked=True, enhance=False)
        return share(np.ma.getdata(g)[~np.ma.getmaskarray(g)], r.header.eb), dominance.check_stream(r) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    rows = []
    paths = sorted((args.data / "sci").glob("*.f*")) + sorted((args.data / "zoo").glob("*.f*"))
    for path in paths:
        a = read_array(path)
        name = path.name.rsplit("_", 1)[0]
        fill = FILLS.get(name)
        cases = [("declared", fill)] + ([("undeclared", None)] if fill is not None else [])
        for case, f in cases:
            miss = (a == a.dtype.type(f)) if f is not None else None
            valid = a[~miss] if miss is not None else a
            t = time.perf_counter()
            fired = dominance.check_array(a, miss) is not None
            seconds = time.perf_counter() - t
            row = {"field": path.name, "family": path.parent.name, "fill": case if fill is not None else "none",
                   "raw_share": share(valid.reshape(-1)), "raw_fires": fired, "check_ms": 1e3 * seconds}
            for b in BOUNDS:
                row[f"stream_{b:g}_share"], row[f"stream_{b:g}_fires"] = stream_share(
                    strata.compress(a, rel_error=b, fill_value=f))
            rows.append(row)
            print(_line(row), flush=True)
    report = {"machine": machine(), "share": dominance.SHARE, "sample": dominance.SAMPLE_SIZE, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "dominance_check.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / "dominance_check.md", _markdown(report))


def _cell(share_: float, fires: bool) -> str:
    return f"{100 * share_:.3g} %" + (" **warns**" if fires else "")


def _line(r: dict) -> str:
    return (f"| {r['field']} | {r['fill']} | {_cell(r['raw_share'], r['raw_fires'])} | {r['check_ms']:.1f} | "
            + " | ".join(_cell(r[f"stream_{b:g}_share"], r[f"stream_{b:g}_fires"]) for b in BOUNDS) + " |")


def _markdown(report: dict) -> str:
    rows = report["rows"]
    valid = [r for r in rows if r["fill"] != "undeclared"]
    fired_valid = sum(r["raw_fires"] or any(r[f"stream_{b:g}_fires"] for b in BOUNDS) for r in valid)
    lines = [
        "# Range dominance on the shared fields", "",
        f"Machine: {report['machine']}. Made by `benchmarks/dominance_check.py`. Share of the range the valid values "
        f"occupy (gaps of at least {100 * report['share']:g} % of the range, and for decoded values of ten bounds, "
        "taken out); the check warns below "
        f"{100 * report['share']:g} %. Raw: every value; the check itself examines a strided sample of at most "
        f"{report['sample']} values plus the exact extremes (its time in ms). Streams: the grid of the first level "
        f"of at least {dominance.STREAM_POINTS} points, decoded.", "",
        f"Fields with their documented fill values declared (or none): {len(valid)}, warnings: {fired_valid}; "
        f"smallest share raw {100 * min(r['raw_share'] for r in valid):.3g} %, decoded "
        f"{100 * min(r[f'stream_{b:g}_share'] for r in valid for b in BOUNDS):.3g} %.", "",
        "| field | fill value | raw | check ms | " + " | ".join(f"stream rel {b:g}" for b in BOUNDS) + " |",
        "|---|---|---|---|" + "---|" * len(BOUNDS)]
    lines += [_line(r) for r in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
