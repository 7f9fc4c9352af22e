#!/usr/bin/env python3
"""Peak memory of strata.lossy reads against what they account for, each read in a fresh process.

Reads: a 256^3 float32 field (the 192^3 turbulence field of ../shared/data tiled and trimmed,
or a smooth synthetic field without it) at 1e-3 of its range -- whole, the grid of its
next-to-last level, a preview of that level at full resolution, a 32^3 region -- the same field
with 20 % of its points missing (NaN), whole and a region; 16 MiB of float32 noise compressed
losslessly (its chunks as large as its output); a 64 MiB stream of zeros (one chunk per level:
chunks as large as the levels); enhanced reads of crafted streams (zeros and a random 2x network: 2048^2 of
width 16 under ``max_output_bytes=300e6``, 4096^2 of width 8); and 1 GiB streams of zeros
(float32, a few hundred bytes) whose one fault is met last: the last chunk's bytes (CRC mismatch),
its lengths (CRC recomputed), the exact-value section's CRC, an exact-value position outside the
array -- each read whole and as a 4x4x4 region. The crafted streams come from ``tests/crafted.py``.

Each read runs in a fresh process after a warm-up (a small stream of the same kind, which
loads the compiled kernels); its peak resident memory is measured from a reset of the peak
(``/proc/self/clear_refs``) and reported as the bytes it adds, beside the output's bytes and
the reader's accounting (the ``needs N bytes`` of the ``ResourceLimitError`` a read with
``max_output_bytes=1`` raises, settled: what ``max_output_bytes`` is compared with) and the
peak of the read under that limit. ``--src`` runs the
reads with another checkout's ``src`` (``git worktree add`` of an earlier commit): the
before/after comparison. Writes benchmarks/results/read_memory.{md,json}; ``--tag`` names the
run in them (runs with other tags are kept).

    .venv/bin/python benchmarks/read_memory.py [--src PATH --tag before] [--only NAME,...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import crafted  # noqa: E402

import strata  # noqa: E402
from common import ROOT, machine  # noqa: E402
from region_memory import field  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402

_CHILD = r"""
import ctypes, json, re, sys, time
src = {src!r}
if src:
    sys.path.insert(0, src)
import numpy as np
import strata
from strata.errors import ResourceLimitError, StrataError

# blocks of more than 128 KiB mapped and unmapped whole (glibc would otherwise raise that
# threshold as blocks are freed, and serve a second read from memory the first one freed)
ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)

def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) * 1024

def measured(call):
    open("/proc/self/clear_refs", "w").write("5")
    before = status("VmRSS")
    t = time.perf_counter()
    try:
        out = call()
        outcome, out_bytes = "decoded", out.nbytes
    except StrataError as exc:
        outcome, out_bytes = type(exc).__name__, 0
    return outcome, out_bytes, status("VmHWM") - before, time.perf_counter() - t

kw = {kwargs!r}
for k in ("region",):
    if kw.get(k) is not None:
        kw[k] = tuple(slice(*s) if isinstance(s, list) else s for s in kw[k])
w = strata.open({warm!r})
for extra in ({{}}, {{"region": (slice(0, 5),) * 3}}, {{"level": 0}}, {{"level": 0, "full_resolution": False}}):
    try:  # the warm-up: the kernels the read takes
        w.read(**dict({{k: v for k, v in kw.items() if k not in ("region", "level", "full_resolution")}}, **extra))
    except StrataError:
        pass
r = strata.open({path!r})
outcome, out_bytes, peak, seconds = measured(lambda: r.read(**kw))
accounted, limit, peak_at = None, 1, None
for _ in range(6 if outcome == "decoded" else 0):  # (a failing read: its memory to the failure is the figure)
    try:
        r.read(**dict(kw, max_output_bytes=limit))
        accounted = limit
        break
    except ResourceLimitError as exc:
        m = re.search(r"needs (\d+) bytes", str(exc))
        if not m:
            break
        limit = int(m.group(1))
if accounted is not None:  # (the read at the limit of its own need: an enhanced read's tiles fit it)
    peak_at = measured(lambda: r.read(**dict(kw, max_output_bytes=accounted)))[2]
print(json.dumps(dict(peak_added=peak, accounted=accounted, peak_at_accounted=peak_at, outcome=outcome,
                      out_bytes=out_bytes, seconds=seconds)))
"""


def streams(folder: Path) -> dict:
    """``{name: (path, warm-up path, read kwargs, declared output bytes)}``."""
    out = {}

    def put(name, blob, warm, out_bytes, **kw):
        p = folder / f"{name.replace(' ', '_').replace(',', '')}.strata"
        if not p.exists():
            p.write_bytes(blob)
        w = folder / f"warm_{p.name}"
        if not w.exists():
            w.write_bytes(warm)
        out[name] = (p, w, kw, out_bytes)

    n = 256
    a = field(n)
    small = field(128)  # (2**21 values: the reads of narrow codes, NARROW_MIN_POINTS)
    plain = strata.compress(a, rel_error=1e-3)
    warm = strata.compress(small, rel_error=1e-3)
    r = strata.open(plain)
    last = len(r.levels) - 1
    c = n // 2
    put("field, full", plain, warm, a.nbytes)
    put("field, level grid", plain, warm, 4 * int(np.prod(r.levels[last - 1].shape)), level=last - 1,
        full_resolution=False)
    put("field, level preview", plain, warm, a.nbytes, level=last - 1)
    put("field, 32^3 region", plain, warm, 4 * 32 ** 3, region=[[c - 16, c + 16]] * 3)
    holes = a.copy()
    holes[a < np.quantile(a, 0.2)] = np.nan
    small_holes = small.copy()
    small_holes[small < np.quantile(small, 0.2)] = np.nan
    put("field 20 % missing, full", strata.compress(holes, rel_error=1e-3),
        strata.compress(small_holes, rel_error=1e-3), a.nbytes)
    noise = np.random.default_rng(2).standard_normal((128, 128, 256)).astype(np.float32)
    put("noise, lossless, full", strata.compress(noise, abs_error=0), strata.compress(noise[:8], abs_error=0),
        noise.nbytes)
    put("field 20 % missing, 32^3 region", strata.compress(holes, rel_error=1e-3),
        strata.compress(small_holes, rel_error=1e-3), 4 * 32 ** 3, region=[[c - 16, c + 16]] * 3)
    put("zeros 64 MiB (one chunk a level), full", crafted.zero_stream((256, 256, 256)),
        crafted.zero_stream((16, 16, 16)), 1 << 26)
    put("enhanced 2048^2 width 16, limit 300e6", crafted.enhanced_zero_stream((2048, 2048), 16),
        crafted.enhanced_zero_stream((64, 64), 16), 4 << 22, max_output_bytes=300_000_000)
    put("enhanced 4096^2 width 8", crafted.enhanced_zero_stream((4096, 4096), 8),
        crafted.enhanced_zero_stream((64, 64), 8), 4 << 24)
    gib = (1024, 1024, 256)
    for fault in crafted.FAULTS:
        blob = crafted.zero_stream(gib, fault)
        w = crafted.zero_stream((16, 16, 16))
        put(f"1 GiB, {fault}, full", blob, w, 1 << 30)
        put(f"1 GiB, {fault}, 4^3 region", blob, w, 1 << 30, region=[[0, 4]] * 3)
    return out


def child(src: str, path: Path, warm: Path, kwargs: dict) -> dict:
    code = _CHILD.format(src=src, path=str(path), warm=str(warm), kwargs=kwargs)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default="", help="the src folder of another checkout to read with")
    ap.add_argument("--tag", default="after", help="the run's name in the results (its checkout's commit, say)")
    ap.add_argument("--only", default="", help="comma-separated read names (default: all)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "strata-read-memory")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "read_memory")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    cases = streams(args.work)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    rows = []
    for name, (path, warm, kw, out_bytes) in cases.items():
        if only and not any(o in name for o in only):
            continue
        m = child(args.src, path, warm, kw)
        acc = m["accounted"]
        rows.append(dict(read=name, stream_bytes=path.stat().st_size, output_bytes=out_bytes, **m,
                         ratio=m["peak_at_accounted"] / acc if acc else None))
        print(f"{name:45s} {m['outcome']:22s} peak added {m['peak_added'] / 2**20:8.1f} MiB  accounted "
              f"{(acc or 0) / 2**20:8.1f} MiB, peak at that limit {(m['peak_at_accounted'] or 0) / 2**20:8.1f} MiB  "
              f"{m['seconds']:7.2f} s", flush=True)
    json_path = args.out.with_suffix(".json")
    runs = json.loads(json_path.read_text()).get("runs", {}) if json_path.exists() else {}
    kept = [r for r in runs.get(args.tag, {}).get("rows", []) if r["read"] not in {q["read"] for q in rows}]
    order = list(cases)
    rows = sorted(kept + rows, key=lambda r: order.index(r["read"]) if r["read"] in order else len(order))
    runs[args.tag] = dict(src="another checkout (--src)" if args.src else "this checkout", rows=rows)
    atomic_write(json_path, json.dumps(dict(machine=machine(), runs=runs), indent=1))
    lines = [f"Machine: {machine()}. Each read in a fresh process after a warm-up: the peak resident memory "
             "it adds (VmHWM from a reset of the peak; glibc's mmap threshold fixed at 128 KiB), the reader's "
             "accounting (what `max_output_bytes` is compared with: the smallest limit the read accepts, "
             "settled from the `needs N bytes` of the ResourceLimitErrors below it), the peak of the same read "
             "under that limit (an enhanced read fits its tiles to the limit) and its ratio to the accounting. "
             "`benchmarks/read_memory.py`.", ""]
    for tag, run in runs.items():
        lines += [f"**{tag}** ({run['src']})", "",
                  "| read | stream bytes | outcome | output MiB | peak added MiB | time s | accounted MiB "
                  "| peak at that limit MiB | peak / accounted |", "|---|---|---|---|---|---|---|---|---|"]
        for r in run["rows"]:
            acc, at = r["accounted"], r.get("peak_at_accounted")
            lines.append(f"| {r['read']} | {r['stream_bytes']} | {r['outcome']} | {r['output_bytes'] / 2**20:.1f} | "
                         f"{r['peak_added'] / 2**20:.1f} | {r['seconds']:.2f} | "
                         f"{acc / 2**20 if acc else float('nan'):.1f} | {at / 2**20 if at else float('nan'):.1f} | "
                         f"{r['ratio'] if r['ratio'] is not None else float('nan'):.2f} |")
        lines.append("")
    atomic_write(args.out.with_suffix(".md"), "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
