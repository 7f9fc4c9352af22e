#!/usr/bin/env python3
"""Peak memory and time of region reads against full reads, each in a fresh process.

A 320^3 float32 field (131 MB; the 192^3 turbulence field of ../shared/data tiled and trimmed,
or a smooth synthetic field without it) is compressed at 1e-3 of its range into a temporary
file; then, in fresh processes, a full read and reads of 32^3 boxes (center, corner, random)
run while the child's peak resident memory (VmHWM) is measured beyond a warm-up. Prints a table
and writes benchmarks/results/region_memory.{md,json}.

    .venv/bin/python benchmarks/region_memory.py [--n 320] [--box 32] [--repeats 5]
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
import strata  # noqa: E402
from common import ROOT, SHARED, machine  # noqa: E402
from strata.atomic import atomic_write  # noqa: E402

_CHILD = """
import sys, time, statistics, json
import numpy as np
import strata
def hwm():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
w = np.random.default_rng(0).standard_normal((40, 40, 40)).astype(np.float32)
b = strata.compress(w, rel_error=1e-3)
strata.decompress(b); strata.decompress(b, region=(slice(3, 9), slice(0, 5), 7))  # load the kernels
region = {region}
r = strata.open({path!r})
before = hwm()
times = []
for _ in range({repeats}):
    t = time.perf_counter()
    out = r.read(region=region) if region is not None else r.read()
    times.append(time.perf_counter() - t)
    del out
print(json.dumps(dict(peak_added=hwm() - before, time_s=statistics.median(times))))
"""


def field(n: int) -> np.ndarray:
    src = SHARED / "data" / "sci" / "ns3d192_vx_t1p8_192x192x192.f32"
    if src.exists():
        a = np.fromfile(src, "<f4").reshape(192, 192, 192)
        return np.ascontiguousarray(np.tile(a, (2, 2, 2))[:n, :n, :n])
    i = np.linspace(0, 6 * np.pi, n, dtype=np.float32)
    return (np.sin(i)[:, None, None] * np.cos(i)[None, :, None] + np.sin(2 * i)[None, None, :]).astype(np.float32)


def child(path: Path, region, repeats: int) -> dict:
    code = _CHILD.format(path=str(path), region=repr(region), repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=320)
    ap.add_argument("--box", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "region_memory")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n, k = args.n, args.box
    a = field(n)
    rng = np.random.default_rng(1)
    boxes = {"full read": None,
             "center": tuple(slice(n // 2 - k // 2, n // 2 + k - k // 2) for _ in range(3)),
             "corner": tuple(slice(0, k) for _ in range(3))}
    for i in range(2):
        o = rng.integers(0, n - k + 1, 3)
        boxes[f"random{i}"] = tuple(slice(int(v), int(v) + k) for v in o)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "field.strata"
        path.write_bytes(strata.compress(a, rel_error=1e-3))
        full = strata.decompress(path)
        for name, region in boxes.items():
            if region is not None:
                assert np.array_equal(strata.decompress(path, region=region), full[region])
            m = child(path, region, args.repeats)
            rows.append(dict(read=name, region=None if region is None else [[s.start, s.stop] for s in region],
                             peak_added_MB=m["peak_added"] / 1e6, time_ms=1e3 * m["time_s"]))
            print(f"{name:10s} peak added {m['peak_added'] / 1e6:8.1f} MB   time {1e3 * m['time_s']:8.2f} ms",
                  flush=True)
        stream_mb = path.stat().st_size / 1e6
    full_ms = rows[0]["time_ms"]
    lines = [f"Machine: {machine()}. A {n}^3 float32 field ({a.nbytes / 1e6:.0f} MB decoded, stream "
             f"{stream_mb:.1f} MB at 1e-3); each read in a fresh process, peak resident memory it adds "
             f"(VmHWM, output included), median time of {args.repeats}.", "",
             "| read | peak memory added MB | time ms | fraction of a full read's time |", "|---|---|---|---|"]
    lines += [f"| {r['read']} | {r['peak_added_MB']:.1f} | {r['time_ms']:.2f} | {r['time_ms'] / full_ms:.3f} |"
              for r in rows]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    atomic_write(args.out.with_suffix(".md"), text)
    atomic_write(args.out.with_suffix(".json"), json.dumps(dict(machine=machine(), n=n, box=k, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
