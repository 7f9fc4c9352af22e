#!/usr/bin/env python3
"""strata's zarr v3 serializer under dask.distributed: a dataset larger than the workers'
combined memory limit, and throughput of 2 single-threaded worker processes against one
process using both cores.

**Memory.** A ``LocalCluster`` of 2 worker processes, 1 thread each, ``memory_limit`` 1 GiB
each (2 GiB together), writes a lazily generated float32 array of 3 GiB (smooth waves plus
uniform noise, computed per chunk from the chunk's position, so any process regenerates any
chunk; chunks of 16 x 256 x 512 = 8 MiB) with ``dask.array.to_zarr`` to a zarr v3
``LocalStore`` in a temporary directory, serializer :class:`strata.zarr.StrataCodec` at an
absolute bound, then reads it back with ``dask.array.from_zarr`` and compares every chunk on
the workers with the regenerated chunk (max |error| / bound, in float64). Nothing holds the
whole array. Checked: the worker processes (pids, addresses) are the same before and after;
no bytes spilled to disk (each worker's ``SpillBuffer``: bytes on disk and disk-write count);
no nanny restart event; no warning about memory, pausing, spilling or killed/restarted workers
in the workers' logs or in this process's (scheduler, nannies). Peak resident memory of each
worker: ``VmHWM`` of the worker process, and RSS sampled every 50 ms from here.

**Throughput.** The same kind of data, 512 MiB (chunks of 8 MiB, 64 chunks), stored first
uncompressed (zarr, no codec) in the temporary directory, where it stays in the page cache. Each
configuration copies it into a strata store (write: read source chunk, compress, store) and reads
the strata store back (read: fetch and decode every chunk, reduce each to its maximum; nothing
holds the whole array):

* ``dist-2x1``: ``LocalCluster(n_workers=2, threads_per_worker=1)``: 2 task threads, each strata
  call on 1 numba thread (strata's rule inside a worker: serial kernels);
* ``dist-1x2``: ``LocalCluster(n_workers=1, threads_per_worker=2)``: 2 task threads in one
  worker, each call on 1 numba thread;
* ``inproc-zarr``: this process, no dask: ``dst[slab] = src[slab]`` and ``dst[slab]`` for slabs
  of 8 chunks (64 MiB): zarr codes the 8 chunks at once in asyncio's thread pool (6 threads on 2
  cores), the calls in flight share numba's 2 threads (so usually 1 each);
* ``inproc-loop``: this process, no dask: one chunk after the other, each call on all of
  numba's threads (parallel kernels);
* ``dask-threads``: dask's local threaded scheduler, 2 threads (calls in flight share numba's
  threads);
* ``dist-2x1-oversub``: as ``dist-2x1`` with strata's worker rule switched off in the workers
  (``strata._numba._in_dask_worker`` patched to return False): each call on numba's 2 threads,
  4 busy threads on 2 cores; what the rule avoids;
* ``dist-2x1-notrim``: as ``dist-2x1`` with the workers spawned without the
  ``MALLOC_TRIM_THRESHOLD_=65536`` that distributed sets for them by default
  (``distributed.nanny.pre-spawn-environ``): that setting also freezes glibc's mmap threshold at
  128 KiB, so every large temporary array of a strata call is a fresh mapping whose pages are
  faulted in and zeroed again (minor page faults per MB are reported for every row).

``--repeats`` (5) rounds, each running every configuration once (write, then read) with its own
cluster started and warmed up (compiled kernels loaded, one small dask job) before the timed
runs; medians per configuration; MB/s of uncompressed data; ratios to the faster of the two
in-process configurations. "cores busy" = CPU seconds (user + system) of this process and its
child processes (the workers) / wall seconds; "sys" = the system share of those CPU seconds.
Every configuration's store is compared byte for byte with the ``inproc-loop`` one, whose max
error / bound is checked against the source.

Prints the tables, writes ``benchmarks/results/dask_scaling.{md,json}`` (not with ``--quick``,
a smoke run on small data). Exit status 1 when a bound is broken, a worker was restarted, or
anything spilled. About 4 minutes on 2 cores::

    .venv/bin/python benchmarks/dask_scaling.py [--big-gib 3] [--worker-gib 1] [--tput-mib 512]
        [--repeats 5] [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import distributed
import numba
import numpy as np
import psutil
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine  # noqa: E402
from strata.zarr import StrataCodec  # noqa: E402

CHUNKS = (16, 256, 512)          # 8 MiB of float32
EB = 0.01                        # absolute bound; the waves span about +-12, the noise +-0.025
#: log lines that mean memory trouble (workers' and nannies' warnings)
TROUBLE = re.compile(r"memory|spill|paus|kill|restart|terminat|exceeded|died|lost", re.IGNORECASE)


# ------------------------------------------------------------------------------------ data
def block(shape, start) -> np.ndarray:
    """float32 values of the block of ``shape`` at index ``start``: smooth waves in global
    coordinates plus uniform noise seeded by ``start`` (the same in every process)."""
    t, y, x = (np.arange(s, s + n, dtype=np.float32).reshape([-1 if i == d else 1 for i in range(3)])
               for d, (s, n) in enumerate(zip(start, shape)))
    v = 8 * np.sin(0.05 * t + 0.031 * y) + 4 * np.cos(0.043 * x - 0.02 * t) * np.sin(0.017 * y + 0.011 * x)
    noise = np.random.default_rng([*start, 1]).random(shape, dtype=np.float32)
    noise -= 0.5
    noise *= 0.05
    v += noise
    return v


def _generate(block_info=None):
    loc = block_info[None]["array-location"]
    return block(tuple(b - a for a, b in loc), tuple(a for a, _ in loc))


def lazy_source(shape) -> da.Array:
    """The dataset as a lazy dask array, one task per chunk."""
    return da.map_blocks(_generate, chunks=da.core.normalize_chunks(CHUNKS, shape), dtype=np.float32,
                         meta=np.empty((0, 0, 0), np.float32))


def _block_error(y, block_info=None):
    """max |decoded - regenerated| / EB of one chunk (NaN if a value is NaN), shape (1, 1, 1)."""
    x = block(y.shape, tuple(a for a, _ in block_info[0]["array-location"]))
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    return np.array(np.nan if np.isnan(err).any() else err.max() / EB).reshape(1, 1, 1)


def _block_max(y):
    return np.array(y.max()).reshape(1, 1, 1)


def codec_kwargs() -> dict:
    return {"serializer": StrataCodec(abs_error=EB), "compressors": None, "fill_value": np.nan}


def store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------- monitoring
class LogCatcher(logging.Handler):
    """Keeps this process's warnings from distributed (scheduler and nannies live here)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")


class RssSampler:
    """Samples the resident memory of the given processes every ``period`` seconds."""

    def __init__(self, pids, period=0.05):
        self.procs = {pid: psutil.Process(pid) for pid in pids}
        self.peak = dict.fromkeys(pids, 0)
        self.period, self._stop = period, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for pid, p in self.procs.items():
                try:
                    self.peak[pid] = max(self.peak[pid], p.memory_info().rss)
                except psutil.Error:
                    pass
            self._stop.wait(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _worker_state(dask_worker):
    """Runs in a worker (``client.run``): pid, peak RSS, spill counters, memory limit."""
    hwm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM"))
    data = dask_worker.data
    spilled = getattr(data, "spilled_total", (0, 0))
    metrics = dict(getattr(data, "cumulative_metrics", {}))
    return {"pid": os.getpid(), "vm_hwm": hwm, "rss": psutil.Process().memory_info().rss,
            "spilled_bytes": [int(v) for v in spilled],
            "disk_writes": int(metrics.get(("disk-write", "count"), 0)),
            "disk_write_bytes": int(metrics.get(("disk-write", "bytes"), 0)),
            "memory_limit": dask_worker.memory_manager.memory_limit, "status": str(dask_worker.status)}


def cpu_seconds() -> np.ndarray:
    """(user s, system s, minor page faults) so far of this process and its live children (the
    worker processes)."""
    total = np.zeros(3)
    for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            t = p.cpu_times()
            with open(f"/proc/{p.pid}/stat") as f:
                faults = int(f.read().rsplit(")", 1)[1].split()[7])    # minflt
        except (psutil.Error, OSError):
            continue
        total += (t.user, t.system, faults)
    return total


def machine_busy(seconds: float) -> float:
    """Cores kept busy (user, nice, system, irq, softirq, steal) over ``seconds``, from /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]

    b0 = sample()
    time.sleep(seconds)
    return (sample() - b0) / os.sysconf("SC_CLK_TCK") / seconds


def cluster(n_workers, threads, memory_limit="4GiB"):
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=threads, processes=True,
                                    memory_limit=memory_limit, dashboard_address=None)


@contextlib.contextmanager
def no_malloc_trim():
    """Workers spawned in the block run without distributed's ``MALLOC_TRIM_THRESHOLD_=65536``
    (``distributed.nanny.pre-spawn-environ``). The nanny also leaves that variable in this
    process's ``os.environ`` once any cluster started, and workers inherit it from there: both
    are removed for the block."""
    saved = os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
            yield
    finally:
        if saved is not None:
            os.environ["MALLOC_TRIM_THRESHOLD_"] = saved


def _warm_up():
    """Load strata's compiled kernels (from numba's disk cache) and zarr's codec pipeline in the
    calling process."""
    from zarr.storage import MemoryStore  # imported here: the worker gets this function by value

    z = zarr.create_array(MemoryStore(), shape=(16, 64, 64), chunks=(8, 64, 64), dtype="f4",
                          **codec_kwargs())
    z[:] = block(z.shape, (0, 0, 0))
    z[:]
    return os.getpid()


def warm_up_workers(client):
    client.run(_warm_up)
    da.map_blocks(_block_max, lazy_source((32, 256, 512)), chunks=(1, 1, 1), dtype=np.float32).max().compute()


# ---------------------------------------------------------------------------- memory run
def memory_run(tmp: Path, gib: float, worker_gib: float) -> dict:
    shape = (max(CHUNKS[0], round(gib * 2**30 / (4 * 1024 * 1024) / CHUNKS[0]) * CHUNKS[0]), 1024, 1024)
    nbytes = int(np.prod(shape)) * 4
    path = tmp / "big.zarr"
    catcher = LogCatcher()
    logging.getLogger("distributed").addHandler(catcher)
    print(f"memory run: {shape} float32 = {nbytes / 2**30:.2f} GiB, 2 workers x {worker_gib} GiB", flush=True)
    out = {"shape": list(shape), "chunks": list(CHUNKS), "dataset_bytes": nbytes, "n_workers": 2,
           "threads_per_worker": 1, "memory_limit_per_worker": int(worker_gib * 2**30), "abs_error": EB}
    try:
        with cluster(2, 1, f"{worker_gib}GiB") as lc, distributed.Client(lc) as client:
            warm_up_workers(client)
            before = client.run(_worker_state)
            addresses = sorted(client.scheduler_info()["workers"])
            with RssSampler([s["pid"] for s in before.values()]) as sampler:
                t0 = time.perf_counter()
                lazy_source(shape).to_zarr(zarr.storage.LocalStore(str(path)), **codec_kwargs())
                t_write = time.perf_counter() - t0
                print(f"  written in {t_write:.1f} s", flush=True)
                y = da.from_zarr(str(path))
                t0 = time.perf_counter()
                top = float(da.map_blocks(_block_max, y, chunks=(1, 1, 1), dtype=np.float32).max().compute())
                t_read = time.perf_counter() - t0
                t0 = time.perf_counter()
                worst = da.map_blocks(_block_error, y, chunks=(1, 1, 1), dtype=np.float64).compute()
                t_verify = time.perf_counter() - t0
                print(f"  read in {t_read:.1f} s, verified in {t_verify:.1f} s", flush=True)
            after = client.run(_worker_state)
            worker_logs = client.get_worker_logs()
            events = client.get_events()
            same = (sorted(client.scheduler_info()["workers"]) == addresses
                    and {a: s["pid"] for a, s in after.items()} == {a: s["pid"] for a, s in before.items()})
    finally:
        logging.getLogger("distributed").removeHandler(catcher)
    lines = [f"{addr}: {msg}" for addr, logs in worker_logs.items() for level, msg in logs
             if level in ("WARNING", "ERROR", "CRITICAL") and TROUBLE.search(msg)]
    lines += [line for line in catcher.lines if TROUBLE.search(line)]
    restarts = [e for topic, evs in events.items() if "restart" in str(topic) for e in evs]
    out.update({
        "store_bytes": store_bytes(path), "ratio": nbytes / store_bytes(path),
        "write_s": t_write, "write_mb_s": nbytes / 1e6 / t_write,
        "read_s": t_read, "read_mb_s": nbytes / 1e6 / t_read, "read_max": top,
        "verify_s": t_verify, "max_err_over_bound": float(np.max(worst)), "nan_chunks": int(np.isnan(worst).sum()),
        "chunks_checked": int(worst.size), "same_workers": bool(same),
        "workers": [{"before": before[a], "after": after[a], "sampled_peak_rss": sampler.peak[before[a]["pid"]]}
                    for a in sorted(before)],
        "spilled": any(s["disk_writes"] or any(s["spilled_bytes"]) for s in after.values()),
        "restart_events": len(restarts), "trouble_log_lines": lines,
    })
    shutil.rmtree(path, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------- throughput
def _switch_off_worker_rule():
    import strata._numba as sn

    sn._in_dask_worker = lambda: False
    return True


def make_source(tmp: Path, mib: int) -> tuple[Path, tuple]:
    shape = (max(CHUNKS[0], mib // 4 // CHUNKS[0] * CHUNKS[0]), 1024, 1024)  # 4 MiB per 1024 x 1024 plane
    path = tmp / "source.zarr"
    z = zarr.create_array(zarr.storage.LocalStore(str(path)), shape=shape, chunks=CHUNKS, dtype="f4",
                          compressors=None, fill_value=np.nan)
    for region in regions(shape):
        z[region] = block(tuple(s.stop - s.start for s in region), tuple(s.start for s in region))
    return path, shape


def regions(shape):
    grid = [range(0, n, c) for n, c in zip(shape, CHUNKS)]
    for idx in np.ndindex(*[len(g) for g in grid]):
        yield tuple(slice(g[i], min(g[i] + c, n)) for i, g, c, n in zip(idx, grid, CHUNKS, shape))


def _dask_write(src: Path, dst: Path, **compute_kwargs):
    da.from_zarr(str(src)).to_zarr(zarr.storage.LocalStore(str(dst)), compute=False,
                                   **codec_kwargs()).compute(**compute_kwargs)


def _dask_read(dst: Path, **compute_kwargs) -> float:
    y = da.from_zarr(str(dst))
    return float(da.map_blocks(_block_max, y, chunks=(1, 1, 1), dtype=np.float32).max().compute(**compute_kwargs))


def _zarr_create(dst: Path, shape):
    return zarr.create_array(zarr.storage.LocalStore(str(dst)), shape=shape, chunks=CHUNKS, dtype="f4",
                             **codec_kwargs())


def _slabs(shape):
    """Slabs of one chunk along the first axis (8 chunks, 64 MiB each for the default shape)."""
    return [slice(t, min(t + CHUNKS[0], shape[0])) for t in range(0, shape[0], CHUNKS[0])]


def _inproc_write(src: Path, dst: Path, shape, pieces):
    """Copy ``src`` into a new strata store at ``dst``, piece by piece (``pieces``: selections)."""
    s, d = zarr.open_array(str(src), mode="r"), _zarr_create(dst, shape)
    for piece in pieces:
        d[piece] = s[piece]


def _inproc_read(dst: Path, pieces) -> float:
    d = zarr.open_array(str(dst), mode="r")
    return max(float(d[piece].max()) for piece in pieces)


CONFIGS = {
    # name: (workers, threads per worker, numba threads per call, description)
    "dist-2x1": (2, 1, "1", "LocalCluster, 2 worker processes x 1 thread"),
    "dist-1x2": (1, 2, "1", "LocalCluster, 1 worker process x 2 threads"),
    "inproc-zarr": (0, 0, "2 / calls in flight", "one process, zarr, a slab of 8 chunks at a time"),
    "inproc-loop": (0, 0, "2", "one process, zarr, one chunk at a time"),
    "dask-threads": (0, 2, "2 / calls in flight", "one process, dask threaded scheduler, 2 threads"),
    "dist-2x1-oversub": (2, 1, "2 (rule off)", "LocalCluster 2 x 1, strata's worker rule switched off"),
    "dist-2x1-notrim": (2, 1, "1", "LocalCluster 2 x 1, workers without MALLOC_TRIM_THRESHOLD_=65536"),
}


@contextlib.contextmanager
def setup(name, src: Path, dst: Path, shape):
    """``(write, read)`` callables of a configuration, its cluster started (and warmed up) for
    the duration."""
    n_workers, threads, _, _ = CONFIGS[name]
    if name.startswith("dist"):
        env = no_malloc_trim() if name.endswith("notrim") else contextlib.nullcontext()
        with env, cluster(n_workers, threads) as lc, distributed.Client(lc) as client:
            warm_up_workers(client)
            if name.endswith("oversub"):
                client.run(_switch_off_worker_rule)
            yield (lambda: _dask_write(src, dst)), (lambda: _dask_read(dst))
        return
    _warm_up()
    if name == "dask-threads":
        yield (lambda: _dask_write(src, dst, scheduler="threads", num_workers=2),
               lambda: _dask_read(dst, scheduler="threads", num_workers=2))
    elif name == "inproc-zarr":
        yield (lambda: _inproc_write(src, dst, shape, _slabs(shape))), (lambda: _inproc_read(dst, _slabs(shape)))
    else:
        yield (lambda: _inproc_write(src, dst, shape, regions(shape))), (lambda: _inproc_read(dst, regions(shape)))


def throughput(tmp: Path, mib: int, repeats: int) -> dict:
    src, shape = make_source(tmp, mib)
    nbytes = int(np.prod(shape)) * 4
    print(f"throughput: {shape} float32 = {nbytes / 2**20:.0f} MiB, {repeats} rounds", flush=True)
    times = {name: {"write": [], "read": []} for name in CONFIGS}
    cpu = {name: {"write": np.zeros(3), "read": np.zeros(3)} for name in CONFIGS}
    for rnd in range(repeats):                 # rounds outermost: drift of the machine hits every row alike
        for name in CONFIGS:
            dst = tmp / f"{name}.zarr"
            shutil.rmtree(dst, ignore_errors=True)
            with setup(name, src, dst, shape) as ops:
                for op, fn in zip(("write", "read"), ops):
                    c0, t0 = cpu_seconds(), time.perf_counter()
                    fn()
                    times[name][op].append(time.perf_counter() - t0)
                    cpu[name][op] += cpu_seconds() - c0
            print(f"  round {rnd + 1} {name:18s} write {nbytes / 1e6 / times[name]['write'][-1]:6.1f} MB/s  "
                  f"read {nbytes / 1e6 / times[name]['read'][-1]:6.1f} MB/s", flush=True)
    rows = []
    for name, (n_workers, threads, numba_threads, description) in CONFIGS.items():
        r = {"config": name, "workers": n_workers, "threads_per_worker": threads,
             "numba_threads_per_call": numba_threads, "description": description,
             "store_bytes": store_bytes(tmp / f"{name}.zarr")}
        for op in ("write", "read"):
            r[f"{op}_s"] = times[name][op]
            r[f"{op}_mb_s"] = nbytes / 1e6 / statistics.median(times[name][op])
            user, system, faults = cpu[name][op]
            r[f"{op}_cores_busy"] = float((user + system) / sum(times[name][op]))
            r[f"{op}_sys_share"] = float(system / (user + system))
            r[f"{op}_cpu_ms_per_mb"] = float(1e3 * (user + system) / (nbytes / 1e6 * repeats))
            r[f"{op}_faults_per_mb"] = float(faults / (nbytes / 1e6 * repeats))
        rows.append(r)
    # correctness: every store equals the in-process one; that one is within the bound
    ref = tmp / "inproc-loop.zarr"
    s, d = zarr.open_array(str(src), mode="r"), zarr.open_array(str(ref), mode="r")
    worst = max(float(np.abs(d[r].astype(np.float64) - s[r].astype(np.float64)).max()) for r in regions(shape)) / EB
    ref_files = sorted(f.relative_to(ref) for f in (ref / "c").rglob("*") if f.is_file())
    for r in rows:
        other = tmp / f"{r['config']}.zarr"
        r["same_bytes_as_inproc_loop"] = all((other / f).read_bytes() == (ref / f).read_bytes() for f in ref_files)
    best = {op: max(r[f"{op}_mb_s"] for r in rows if r["config"].startswith("inproc")) for op in ("write", "read")}
    for r in rows:
        for op in ("write", "read"):
            r[f"{op}_vs_one_process"] = r[f"{op}_mb_s"] / best[op]
    return {"shape": list(shape), "chunks": list(CHUNKS), "dataset_bytes": nbytes, "repeats": repeats,
            "abs_error": EB, "max_err_over_bound": worst, "ratio": nbytes / rows[0]["store_bytes"],
            "one_process_mb_s": best, "rows": rows}


# ------------------------------------------------------------------------------- report
def targets(tp: dict) -> list[str]:
    """The scaling target (2 x 1 workers within 10 % of one process) in a few lines."""
    rows = {r["config"]: r for r in tp["rows"]}

    def ratios(name):
        out = []
        for op in ("write", "read"):
            v = rows[name][f"{op}_vs_one_process"]
            out.append(f"{op} {v:.2f} ({'within' if v >= 0.9 else 'NOT within'} 10 %)")
        return ", ".join(out)

    best = tp["one_process_mb_s"]
    a, o = rows["dist-2x1"], rows["dist-2x1-oversub"]
    return [
        f"- one process on both cores (faster in-process row): write {best['write']:.0f} MB/s, "
        f"read {best['read']:.0f} MB/s",
        f"- 2 worker processes x 1 thread, distributed's defaults, vs one process: {ratios('dist-2x1')}",
        f"- the same, workers without MALLOC_TRIM_THRESHOLD_=65536: {ratios('dist-2x1-notrim')}",
        f"- strata's worker rule switched off (2 numba threads per call, 4 on 2 cores), vs on: write "
        f"{o['write_mb_s'] / a['write_mb_s']:.2f}, read {o['read_mb_s'] / a['read_mb_s']:.2f}",
    ]


def markdown(mem: dict, tp: dict, meta: dict) -> str:
    mib = 2**20
    lines = [
        "# strata under dask.distributed: memory limit and scaling",
        "",
        f"Machine: {meta['machine']}. numba {meta['numba']} (threading layer {meta['layer']}, "
        f"NUMBA_NUM_THREADS={meta['numba_threads']}), dask/distributed {meta['dask']}, zarr {meta['zarr']}. "
        f"Cores busy in the {meta['busy_window_s']} s before the run (other work on the machine): "
        f"{meta['busy_before']:.2f}. Data: float32, smooth waves + uniform noise, "
        f"chunks {'x'.join(map(str, CHUNKS))} (8 MiB), absolute bound {EB}. "
        "Generated by `benchmarks/dask_scaling.py`.",
        "",
        "## Dataset larger than the workers' combined memory limit",
        "",
        f"{mem['dataset_bytes'] / 2**30:.2f} GiB array ({'x'.join(map(str, mem['shape']))}), "
        f"LocalCluster of {mem['n_workers']} worker processes x {mem['threads_per_worker']} thread, "
        f"memory_limit {mem['memory_limit_per_worker'] / 2**30:.2f} GiB each "
        f"({mem['n_workers'] * mem['memory_limit_per_worker'] / 2**30:.2f} GiB together); "
        f"store {mem['store_bytes'] / mib:.0f} MiB (ratio {mem['ratio']:.1f}).",
        "",
        "| step | seconds | MB/s |",
        "|---|---|---|",
        f"| write (generate + compress + store, `to_zarr`) | {mem['write_s']:.1f} | {mem['write_mb_s']:.0f} |",
        f"| read (fetch + decode, per-chunk max) | {mem['read_s']:.1f} | {mem['read_mb_s']:.0f} |",
        f"| verify (read + regenerate + compare) | {mem['verify_s']:.1f} | "
        f"{mem['dataset_bytes'] / 1e6 / mem['verify_s']:.0f} |",
        "",
        f"- max error / bound over all {mem['chunks_checked']} chunks: **{mem['max_err_over_bound']:.4f}** "
        f"(chunks with NaN: {mem['nan_chunks']})",
        f"- same worker processes (pids and addresses) before and after: **{mem['same_workers']}**; "
        f"nanny restart events: {mem['restart_events']}",
        f"- spilled to disk: **{mem['spilled']}**; memory/spill/kill warnings in the logs: "
        f"**{len(mem['trouble_log_lines'])}**",
        "",
        "| worker | peak RSS (VmHWM) MiB | peak RSS sampled MiB | share of memory_limit | RSS after MiB | "
        "disk writes | bytes on disk |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, w in enumerate(mem["workers"]):
        a = w["after"]
        lines.append(f"| {i} | {a['vm_hwm'] / mib:.0f} | {w['sampled_peak_rss'] / mib:.0f} | "
                     f"{a['vm_hwm'] / a['memory_limit']:.0%} | {a['rss'] / mib:.0f} | {a['disk_writes']} | "
                     f"{a['spilled_bytes'][1]} |")
    for line in mem["trouble_log_lines"]:
        lines.append(f"    {line}")
    lines += [
        "",
        "## Throughput: 2 single-threaded workers vs one process on both cores",
        "",
        *targets(tp),
        "",
        f"{tp['dataset_bytes'] / mib:.0f} MiB array ({'x'.join(map(str, tp['shape']))}) copied from an "
        "uncompressed zarr store (in the page cache) into a strata store (write), then read back and reduced "
        f"per chunk (read); median of {tp['repeats']} rounds; compression ratio {tp['ratio']:.1f}; "
        f"max error / bound {tp['max_err_over_bound']:.4f}. \"vs one process\": ratio to the faster in-process "
        "row. \"same bytes\": the store equals the inproc-loop one byte for byte.",
        "",
        "| configuration | processes x threads | numba threads per strata call | write MB/s | write vs one "
        "process | read MB/s | read vs one process | same bytes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in tp["rows"]:
        pt = f"{r['workers']} x {r['threads_per_worker']}" if r["workers"] else (
            "1 (dask, 2 threads)" if r["threads_per_worker"] else "1")
        lines.append(f"| {r['config']}: {r['description']} | {pt} | {r['numba_threads_per_call']} | "
                     f"{r['write_mb_s']:.0f} | {r['write_vs_one_process']:.2f} | {r['read_mb_s']:.0f} | "
                     f"{r['read_vs_one_process']:.2f} | {'yes' if r['same_bytes_as_inproc_loop'] else 'NO'} |")
    lines += ["", "Where the CPU goes (all runs of a row together): cores busy = CPU seconds / wall seconds, the "
              "system share of those CPU seconds, CPU milliseconds per MB, minor page faults per MB.", "",
              "| configuration | write cores | write sys | write CPU ms/MB | write faults/MB | read cores | read sys | "
              "read CPU ms/MB | read faults/MB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in tp["rows"]:
        cells = []
        for op in ("write", "read"):
            cells += [f"{r[f'{op}_cores_busy']:.2f}", f"{r[f'{op}_sys_share']:.0%}",
                      f"{r[f'{op}_cpu_ms_per_mb']:.2f}", f"{r[f'{op}_faults_per_mb']:.0f}"]
        lines.append(f"| {r['config']} | " + " | ".join(cells) + " |")
    lines += ["", "Every run (MB/s, in round order):", "", "| configuration | write | read |", "|---|---|---|"]
    for r in tp["rows"]:
        mb = tp["dataset_bytes"] / 1e6
        lines.append(f"| {r['config']} | {', '.join(f'{mb / t:.0f}' for t in r['write_s'])} | "
                     f"{', '.join(f'{mb / t:.0f}' for t in r['read_s'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big-gib", type=float, default=3.0, help="size of the memory-limit dataset (GiB)")
    ap.add_argument("--worker-gib", type=float, default=1.0, help="memory_limit of each of the 2 workers (GiB)")
    ap.add_argument("--tput-mib", type=int, default=512, help="size of the throughput dataset (MiB)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds of the throughput part")
    ap.add_argument("--quick", action="store_true", help="smoke run on small data; writes no results")
    args = ap.parse_args(argv)
    if args.quick:
        args.big_gib, args.tput_mib, args.repeats = 0.25, 64, 2
    _warm_up()
    meta = {"machine": machine(), "numba": numba.__version__, "layer": numba.threading_layer(),
            "numba_threads": numba.config.NUMBA_NUM_THREADS, "dask": dask.__version__, "zarr": zarr.__version__,
            "distributed": distributed.__version__, "busy_window_s": 2, "busy_before": machine_busy(2)}
    print(meta["machine"], flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="strata-dask-") as tmp:
        mem = memory_run(Path(tmp), args.big_gib, args.worker_gib)
        tp = throughput(Path(tmp), args.tput_mib, args.repeats)
    meta["total_s"] = time.perf_counter() - t0
    report = markdown(mem, tp, meta)
    print(report)
    if not args.quick:
        out = ROOT / "benchmarks" / "results"
        (out / "dask_scaling.md").write_text(report)
        (out / "dask_scaling.json").write_text(json.dumps({"meta": meta, "memory": mem, "throughput": tp}, indent=1))
    ok = (mem["max_err_over_bound"] <= 1 and not mem["nan_chunks"] and mem["same_workers"] and not mem["spilled"]
          and not mem["restart_events"] and tp["max_err_over_bound"] <= 1
          and all(r["same_bytes_as_inproc_loop"] for r in tp["rows"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
