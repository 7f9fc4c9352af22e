#!/usr/bin/env python3
"""Why strata predicts dimension by dimension (SZ3) rather than with STZ's diagonal stencils.

For the finest level of each shared field, every odd-parity block is predicted two ways from
the original values (open loop, interior points): (a) SZ3's order -- a cubic along the last
odd axis, from points one stride away; (b) STZ (SC'25, Sec. III-B) -- the average of the
cubics along the in-plane diagonals (2 odd axes) or body diagonals (3 odd axes), through the
coarse grid. The residuals are quantized with bin 2*eb (eb = 1e-3 of the range) and the
order-0 entropy of the codes is printed: fewer bits per value is better.

    .venv/bin/python benchmarks/stencils_stz_vs_sz3.py
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED  # noqa: E402
from strata.inputs import read_array  # noqa: E402

REL = 1e-3
M = 4  # interior margin


def cubic(a, b, c, d):
    return (-a + 9 * b + 9 * c - d) / 16


def shifted(x, off):
    return x[tuple(slice(M + o, n - M + o) for n, o in zip(x.shape, off))]


def entropy(q):
    _, n = np.unique(q, return_counts=True)
    p = n / n.sum()
    return float(-(p * np.log2(p)).sum())


def along(x, axes, signs, nd):
    def off(m):
        v = [0] * nd
        for k, sg in zip(axes, signs):
            v[k] = m * sg
        return tuple(v)
    return cubic(shifted(x, off(-3)), shifted(x, off(-1)), shifted(x, off(1)), shifted(x, off(3)))


def main() -> int:
    files = sorted((SHARED / "data" / "sci").glob("*.f*"))
    print(f"finest level, order-0 entropy of the codes at {REL:g} of the range (bits/value)")
    print(f"{'field':28s} {'SZ3 order':>10} {'STZ diagonals':>14} {'STZ / SZ3':>10}")
    for path in files:
        x = read_array(path).astype(np.float64)
        nd = x.ndim
        if min(x.shape) < 2 * M + 2:
            continue
        eb = REL * float(np.ptp(x))
        codes = {"sz3": [], "stz": []}
        core = shifted(x, (0,) * nd)
        for par in itertools.product((0, 1), repeat=nd):
            odd = [k for k in range(nd) if par[k]]
            if not odd:
                continue
            p_sz3 = along(x, [odd[-1]], [1], nd)
            if len(odd) == 1:
                p_stz = p_sz3
            else:
                diag = [along(x, odd, (1,) + s, nd) for s in itertools.product((1, -1), repeat=len(odd) - 1)]
                p_stz = sum(diag) / len(diag)
            sel = tuple(slice((p - M) % 2, None, 2) for p in par)
            for key, pred in (("sz3", p_sz3), ("stz", p_stz)):
                codes[key].append(np.rint((core - pred)[sel] / (2 * eb)).astype(np.int64).ravel())
        h = {k: entropy(np.concatenate(v)) for k, v in codes.items()}
        print(f"{path.name.rsplit('_', 1)[0]:28s} {h['sz3']:10.3f} {h['stz']:14.3f} {h['stz'] / h['sz3']:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
