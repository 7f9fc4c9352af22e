"""Helpers shared by the benchmark scripts: data discovery, timing, peak memory."""
from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STRATA_SHARED", ROOT.parent / "shared"))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def timed(fn, repeats: int):
    """Median wall time of ``repeats`` calls, and the last result."""
    times, res = [], None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), res


def geomean(values) -> float:
    v = np.asarray(list(values), dtype=np.float64)
    return float(np.exp(np.mean(np.log(v)))) if v.size else float("nan")


_CHILD = """
import sys, numpy as np
def hwm():  # this process's peak resident set (kB); ru_maxrss would start at the parent's size
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
sys.path.insert(0, {bench!r})
from lossy_vs_anchors import codecs
from strata.inputs import read_array
a = read_array({path!r}); eb = {rel!r} * float(np.ptp(a))
comp, decomp, _ = codecs()[{codec!r}]
w = np.random.default_rng(0).standard_normal((16,) * a.ndim).astype(a.dtype)
decomp(comp(w, 0.1), w)  # warm-up on a tiny array: loads compiled kernels, leaves no big buffers
if {op!r} == "save":
    open({blob!r}, "wb").write(comp(a, eb))
    sys.exit()
blob = open({blob!r}, "rb").read() if {op!r} == "decomp" else None
before = hwm()
out = comp(a, eb) if {op!r} == "comp" else decomp(blob, a)
after = hwm()
print(max(0, after - before) * 1024)
"""


def fresh_peak(path, codec: str, op: str, rel: float) -> int:
    """Peak resident memory (bytes) an operation adds in a fresh process, beyond the input,
    the imports and a warm-up on a tiny array (``VmHWM``; includes C allocations and the
    output). For decompression the compressed input is made first and counts as input."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        def child(what):
            code = _CHILD.format(bench=str(Path(__file__).resolve().parent), path=str(path), rel=rel,
                                 codec=codec, op=what, blob=str(Path(tmp) / "blob"))
            return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

        if op == "decomp":  # the compressed input comes from another process
            child("save")
        return int(child(op).strip().splitlines()[-1])
