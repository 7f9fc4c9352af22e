"""What the finest level's symbols would cost under other context models (an estimate).

A SIMD rANS decoder needs many symbols whose contexts are known before any of them is decoded
(64 states in flight for the checkpoint planes, strata.entropy.rans64). Today's lossy contexts
(strata.lossy.chunks: the magnitude classes of the neighbours one grid step back along each
axis) chain a row to the row above, so at most one row of a chunk is decodable at a time. This
script measures, on the shared fields, the empirical conditional entropy of the finest level's
symbols (strata.entropy.binning, sign included) plus their raw bits under:

* ``v2``: the three neighbours one step back (the serial coder);
* ``v3``: the lanes coder's (the third neighbour is the next point of the row above where the
  previous point of the row is of the same level);
* ``plane``: nothing from the plane being decoded: the previous plane's point, the next plane's
  point where it is coarser (known), else the previous plane's, and the larger class of the
  previous plane's points above and below -- a whole plane of a chunk decodable at once;
* ``prev-plane``: the previous plane's points only.

and, for high ratios, ``zero groups``: today's contexts, plus one flag for each group of eight
consecutive points of a row (rows cut at 32 grid points, as chunks would) whose contexts are all
zero -- 0 when the eight symbols are all zero, which then cost no more steps -- the symbols of a
flagged group that is not all zero under their own 27 tables; with the rANS steps per point this
would take (flags plus symbols coded).

It is an estimate: one static table per context over the whole level (the coder's tables are per
level too, but merged into groups when small), chunk borders ignored for every model alike,
unpredictable values as the escape symbol. Run: ``.venv/bin/python benchmarks/context_models.py``;
writes ``benchmarks/results/context_models.md``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "sci"
FIELDS = ("ns3d192_vx_t1p8_192x192x192.f32", "ns3d_vx_t2_128x128x128.f32", "era5_t2m_744x33x49.f32")
BOUNDS = (1e-2, 1e-3, 1e-4)


def finest_codes(a: np.ndarray, rel: float) -> tuple[np.ndarray, np.ndarray]:
    """The quantization codes of the whole 3D view as strata's decoder rebuilds them, and the
    mask of the finest level's points."""
    import strata
    from strata.lossy import open_stream

    rd = open_stream(strata.compress(a, rel_error=rel))
    part = rd._part
    x = np.empty(part.points((1, 1, 1)), a.dtype)
    codes = np.empty(x.size, np.int32)
    rd._decode(x, codes, np.zeros(0, np.uint8), part.num_levels - 1, None, True, lambda *args: None)
    c = codes.reshape(part.shape).astype(np.int64)
    i0, i1, i2 = np.meshgrid(*(np.arange(n) for n in part.shape), indexing="ij", sparse=True)
    return c, ((i0 & 1) | (i1 & 1) | (i2 & 1)).astype(bool)


def shifted(m: np.ndarray, d: tuple[int, int, int]) -> np.ndarray:
    """``out[i] = m[i - d]``, 0 outside."""
    out = np.zeros_like(m)
    src, dst = [], []
    for n, k in zip(m.shape, d):
        src.append(slice(max(-k, 0), n - max(k, 0)))
        dst.append(slice(max(k, 0), n - max(-k, 0)))
    out[tuple(dst)] = m[tuple(src)]
    return out


def models(c: np.ndarray, finest: np.ndarray) -> dict[str, np.ndarray]:
    from strata.lossy.quantize import RADIUS, UNPREDICTABLE

    m = np.minimum(np.abs(c - RADIUS), 2)
    m[c == UNPREDICTABLE] = 2
    back = {ax: shifted(m, tuple(int(i == ax) for i in range(3))) for ax in range(3)}
    prev_same_level = shifted(finest.astype(np.int64), (0, 0, 1)).astype(bool)
    third = np.where(prev_same_level, shifted(m, (0, 1, -1)), back[2])
    coarse_next = shifted((~finest).astype(np.int64), (-1, 0, 0)).astype(bool)
    nxt = np.where(coarse_next, shifted(m, (-1, 0, 0)), back[0])
    return {
        "v2": 9 * back[0] + 3 * back[1] + back[2],
        "v3": 9 * back[0] + 3 * back[1] + third,
        "plane": 9 * back[0] + 3 * nxt + np.maximum(shifted(m, (1, 1, 0)), shifted(m, (1, -1, 0))),
        "prev-plane": 9 * back[0] + 3 * shifted(m, (1, 1, 0)) + shifted(m, (1, 0, 1)),
    }


def bits_per_point(c: np.ndarray, finest: np.ndarray, ctx: np.ndarray) -> float:
    """Empirical conditional entropy of the symbols given ``ctx``, plus the raw bits, per point."""
    from strata.entropy.binning import ESCAPE, to_symbol_reference
    from strata.lossy.quantize import RADIUS, UNPREDICTABLE

    q = c[finest] - RADIUS
    z = np.where(q > 0, 2 * q - 1, -2 * q)
    sym, nbits, _ = to_symbol_reference(z)
    sym = np.where(c[finest] == UNPREDICTABLE, ESCAPE, sym)
    nbits = np.where(c[finest] == UNPREDICTABLE, 0, nbits)
    key = ctx[finest] * (ESCAPE + 1) + sym
    cnt = np.bincount(key).astype(np.float64)
    per_ctx = np.bincount(np.arange(cnt.size) // (ESCAPE + 1), weights=cnt)
    nz = cnt > 0
    h = -(cnt[nz] * np.log2(cnt[nz] / per_ctx[np.flatnonzero(nz) // (ESCAPE + 1)])).sum()
    return (h + nbits.sum()) / sym.size


def cond_bits(ctx: np.ndarray, sym: np.ndarray, n_sym: int) -> float:
    """Empirical conditional entropy (total bits) of ``sym`` given ``ctx``."""
    cnt = np.bincount(ctx * n_sym + sym).astype(np.float64)
    per_ctx = np.bincount(np.arange(cnt.size) // n_sym, weights=cnt)
    nz = cnt > 0
    return float(-(cnt[nz] * np.log2(cnt[nz] / per_ctx[np.flatnonzero(nz) // n_sym])).sum())


def zero_groups(c: np.ndarray, finest: np.ndarray, ctx: np.ndarray, group: int = 8, seg: int = 32):
    """Bits per point and rANS steps per point of the finest level with zero-group flags (see the
    module docstring)."""
    from strata.entropy.binning import ESCAPE, to_symbol_reference
    from strata.lossy.quantize import RADIUS, UNPREDICTABLE

    q = c - RADIUS
    sym, nbits, _ = to_symbol_reference(np.where(q > 0, 2 * q - 1, -2 * q).ravel())
    sym = np.where(c == UNPREDICTABLE, ESCAPE, sym.reshape(c.shape))
    nbits = np.where(c == UNPREDICTABLE, 0, nbits.reshape(c.shape))
    # group of each finest point: its row, its 32-point segment of the row, its rank there // 8
    rank = np.cumsum(finest, axis=2)
    n2 = c.shape[2]
    for s0 in range(seg, n2, seg):
        rank[:, :, s0:] -= rank[:, :, s0 - 1:s0]
    i0, i1, i2 = np.meshgrid(*(np.arange(n) for n in c.shape), indexing="ij", sparse=True)
    key = ((i0 * c.shape[1] + i1) * (n2 // seg + 1) + i2 // seg) * (seg // group + 1) + (rank - 1) // group
    _, g = np.unique(key[finest], return_inverse=True)
    s, x = sym[finest], ctx[finest]
    size = np.bincount(g)
    flagged = (size == group) & (np.bincount(g, weights=x > 0) == 0)
    nonzero = np.bincount(g, weights=s > 0) > 0
    in_flagged = flagged[g]
    coded = ~in_flagged | nonzero[g]
    bits = (cond_bits(np.zeros(int(flagged.sum()), np.int64), nonzero[flagged].astype(np.int64), 2)
            + cond_bits(np.where(in_flagged, 27 + x, x)[coded], s[coded], ESCAPE + 1) + nbits[finest].sum())
    return bits / s.size, (flagged.sum() + coded.sum()) / s.size


def main() -> int:
    rows = []
    for name in FIELDS:
        path = SHARED / name
        if not path.exists():
            print(f"skipping {name}: not in ../shared/data", file=sys.stderr)
            continue
        dims = tuple(int(v) for v in re.search(r"_(\d+(?:x\d+)*)\.f32", name).group(1).split("x"))
        a = np.fromfile(path, np.float32).reshape(dims)
        for rel in BOUNDS:
            c, finest = finest_codes(a, rel)
            m = models(c, finest)
            b = {k: bits_per_point(c, finest, v) for k, v in m.items()}
            b["zero groups"], steps = zero_groups(c, finest, m["v3"])
            rows.append((name, rel, int(finest.sum()), b, steps))
            print(name, rel, {k: round(v, 4) for k, v in b.items()}, f"steps {steps:.3f}", flush=True)
    lines = ["Finest level of each field, bits per point (symbols' conditional entropy + raw bits), by context model "
             "(`benchmarks/context_models.py`; an estimate: static tables per level, chunk borders ignored); "
             "change against v3, today's lanes coder:", "",
             "| field | rel. bound | points | v2 | v3 | plane | prev-plane | zero groups | zero groups: rANS steps "
             "per point |", "|---|---|---|---|---|---|---|---|---|"]
    for name, rel, n, b, steps in rows:
        cells = " | ".join(f"{b[k]:.4f} ({100 * (b[k] / b['v3'] - 1):+.2f} %)"
                           for k in ("v2", "v3", "plane", "prev-plane", "zero groups"))
        lines.append(f"| {name} | {rel:.0e} | {n} | {cells} | {steps:.3f} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    out = ROOT / "benchmarks" / "results" / "context_models.md"
    from strata.atomic import atomic_write

    atomic_write(out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
