"""Helpers shared by the benchmark scripts: data discovery, timing, peak memory."""
from __future__ import annotations

import gc
import os
import platform
import statistics
import threading
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


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory(fn) -> tuple[int, object]:
    """Peak growth of the resident set size (bytes) while ``fn`` runs, sampled every 0.5 ms
    (catches C allocations that tracemalloc does not see), and ``fn``'s result."""
    gc.collect()
    base = _rss()
    peak = [base]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        res = fn()
    finally:
        done.set()
        t.join()
    peak[0] = max(peak[0], _rss())
    return peak[0] - base, res


def geomean(values) -> float:
    v = np.asarray(list(values), dtype=np.float64)
    return float(np.exp(np.mean(np.log(v)))) if v.size else float("nan")
