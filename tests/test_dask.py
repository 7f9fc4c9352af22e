"""strata with dask and dask.distributed: a lazily generated dask array written through
``dask.array.to_zarr`` with :class:`strata.zarr.StrataCodec` on a ``LocalCluster`` of 2
single-threaded worker processes and read back within the bound (checked chunk by chunk on the
workers against the regenerated source), its chunks byte-identical to chunks written here on
numba's threads; the threading contract of :mod:`strata._numba` seen from inside a worker (one
numba thread per call, also in the threads zarr runs the codec in; a thread-safe layer); a small box
read through zarr and through ``xarray.open_zarr`` fetching exactly the chunks it touches;
and concurrent calls from plain threads giving the same bytes as sequential calls.

One cluster for the module (a few seconds to start). Run with
``.venv/bin/python -m pytest tests/test_dask.py``; the first run after a change to the kernels
compiles them (minutes), later runs load them from numba's on-disk cache.
"""
from __future__ import annotations

import importlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import numba  # noqa: E402

import strata  # noqa: E402
from strata import _numba  # noqa: E402
from strata.zarr import StrataCodec  # noqa: E402

from .zarr_stores import CountingStore  # noqa: E402

SHAPE = (48, 80, 96)
CHUNKS = (24, 40, 48)      # 2 x 2 x 2 chunks of 46080 points: big enough for the parallel kernels
EB = 0.01
#: boxes and how many chunks each touches: inside one chunk, across one face, around a corner
BOXES = [((slice(2, 5), slice(3, 6), slice(4, 7)), 1),
         ((slice(2, 5), slice(38, 42), slice(4, 7)), 2),
         ((slice(22, 26), slice(37, 43), slice(46, 49)), 8)]


def block(shape, start) -> np.ndarray:
    """The float32 values of the block of ``shape`` at index ``start`` of the test array: smooth
    waves in global coordinates plus noise seeded by ``start``, so any process regenerates it."""
    t, y, x = (np.arange(s, s + n, dtype=np.float64).reshape([-1 if i == d else 1 for i in range(3)])
               for d, (s, n) in enumerate(zip(start, shape)))
    v = 8 * np.sin(0.05 * t + 0.031 * y) + 4 * np.cos(0.043 * x - 0.02 * t) * np.sin(0.017 * y)
    v = v + 0.02 * np.random.default_rng([*start, 1]).standard_normal(shape)
    return v.astype(np.float32)


def _generate(block_info=None):
    loc = block_info[None]["array-location"]
    return block(tuple(b - a for a, b in loc), tuple(a for a, _ in loc))


def source():
    """The test array as a lazy dask array (nothing is generated until computed)."""
    return da.map_blocks(_generate, chunks=da.core.normalize_chunks(CHUNKS, SHAPE), dtype=np.float32,
                         meta=np.empty((0, 0, 0), np.float32))


def _block_error(y, block_info=None):
    """Max |decoded - regenerated| / EB of one block, as a (1, 1, 1) array (float64)."""
    loc = block_info[0]["array-location"]
    x = block(y.shape, tuple(a for a, _ in loc))
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    return np.array(np.nan if np.isnan(err).any() else err.max() / EB).reshape(1, 1, 1)


@pytest.fixture(scope="module")
def client():
    # the nanny leaves its pre-spawn variables (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_, ...) in this
    # process's environment, where later subprocesses of the test session would inherit them: put them back
    import dask

    saved = {k: os.environ.get(k) for k in dask.config.get("distributed.nanny.pre-spawn-environ", {})}
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as c:
            yield c
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def written(client, tmp_path_factory):
    """Path of the store the cluster wrote, and its full decode read in this process."""
    path = tmp_path_factory.mktemp("dask") / "a.zarr"
    source().to_zarr(zarr.storage.LocalStore(str(path)), serializer=StrataCodec(abs_error=EB), compressors=None,
                     fill_value=np.nan)
    return path, zarr.open_array(str(path), mode="r")[:]


def test_cluster_write_and_read_within_bound(client, written, tmp_path):
    path, full = written
    z = zarr.open_array(str(path), mode="r")
    assert isinstance(z.serializer, StrataCodec) and z.nchunks_initialized == 8
    stored = sum(f.stat().st_size for f in (path / "c").rglob("*") if f.is_file())
    assert stored * 4 < full.nbytes
    y = da.from_zarr(str(path))
    assert y.chunks == da.core.normalize_chunks(CHUNKS, SHAPE)
    worst = da.map_blocks(_block_error, y, chunks=(1, 1, 1), dtype=np.float64).compute()  # on the workers
    assert worst.shape == (2, 2, 2) and np.all(worst <= 1.0), worst
    assert np.all(worst > 0.5)                             # the bound is used, not beaten by a lossless path
    # this process reads the same values, and writing one chunk at a time here (each call on all of
    # numba's threads: parallel kernels) gives the bytes the workers wrote with one thread (serial kernels)
    assert np.array_equal(full, y.compute())
    local = tmp_path / "local.zarr"
    zl = zarr.create_array(zarr.storage.LocalStore(str(local)), shape=SHAPE, chunks=CHUNKS, dtype="f4",
                           serializer=StrataCodec(abs_error=EB), compressors=None, fill_value=np.nan)
    for idx in np.ndindex(2, 2, 2):
        start = tuple(i * c for i, c in zip(idx, CHUNKS))
        zl[tuple(slice(s, s + c) for s, c in zip(start, CHUNKS))] = block(CHUNKS, start)
    files = sorted(f.relative_to(path) for f in (path / "c").rglob("*") if f.is_file())
    assert len(files) == 8
    for f in files:
        assert (local / f).read_bytes() == (path / f).read_bytes(), f


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _probe_zarr_round_trip(path: str) -> dict:
    """Write and read a one-chunk zarr array at ``path`` and record, at every strata kernel
    launch, the calling thread and the numba threads it may use. Runs as a dask task or here."""
    import strata.lossy.encoder as encoder
    import strata.lossy.reader as reader

    seen = []
    originals = encoder.workers, reader.workers

    def recording(orig):
        def workers(n):
            seen.append((threading.current_thread().name, numba.get_num_threads()))
            return orig(n)
        return workers

    encoder.workers, reader.workers = recording(originals[0]), recording(originals[1])
    try:
        z = zarr.open_array(path, mode="r+")
        x = block(z.shape, (0, 0, 0))
        z[:] = x
        assert np.abs(z[:].astype(np.float64) - x).max() <= EB
    finally:
        encoder.workers, reader.workers = originals
    safe = [m for m in ("numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool") if _importable(m)]
    with _numba.kernel_threads():
        inside = numba.get_num_threads()
    return {"task_thread": threading.current_thread().name, "seen": seen, "layer": numba.threading_layer(),
            "safe_layers": safe, "kernel_threads": inside, "in_worker": _numba._in_dask_worker()}


def test_worker_calls_use_one_numba_thread(client, tmp_path):
    path = str(tmp_path / "one.zarr")
    shape = (48, 64, 64)                                    # one chunk: no concurrent calls share the threads
    zarr.create_array(zarr.storage.LocalStore(path), shape=shape, chunks=shape, dtype="f4",
                      serializer=StrataCodec(abs_error=EB), compressors=None)
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    for worker in workers:                                  # one after the other: both write the one chunk
        report = client.submit(_probe_zarr_round_trip, path, workers=[worker], pure=False).result()
        assert report["in_worker"]
        # zarr runs the codec in its own threads (not the task's): the worker must be seen there too
        assert report["seen"]
        assert {n for _, n in report["seen"]} == {1} and report["kernel_threads"] == 1
        if report["safe_layers"]:                            # OpenMP or TBB present: never workqueue
            assert report["layer"] in ("omp", "tbb"), report
    # the same calls outside a worker get all of numba's threads (one call in flight; zarr's threads
    # start with numba's default)
    here = _probe_zarr_round_trip(path)
    assert not here["in_worker"]
    assert {n for _, n in here["seen"]} == {numba.config.NUMBA_NUM_THREADS}


def test_box_reads_fetch_only_the_chunks_they_touch(written):
    path, full = written
    counting = CountingStore(zarr.storage.LocalStore(str(path), read_only=True))
    z = zarr.open_array(counting, mode="r")
    for sel, touched in BOXES:
        CountingStore.keys.clear()
        box = z[sel]
        chunk_reads = CountingStore.chunk_reads()
        assert len(chunk_reads) == len(set(chunk_reads)) == touched, (sel, chunk_reads)
        assert np.array_equal(box.view(np.uint32), full[sel].view(np.uint32))


def test_xarray_box_reads(client, tmp_path):
    xr = pytest.importorskip("xarray")
    from strata import xarray as sx

    ds = xr.Dataset({"v": (("time", "y", "x"), source(), {"units": "K"})},
                    coords={"time": np.arange(SHAPE[0]), "y": np.linspace(0, 1, SHAPE[1])})
    enc = sx.encoding(ds, rel_error=1e-3)                  # the range is reduced lazily, on the cluster
    eb = enc["v"]["serializer"].config.abs_error
    assert enc["v"]["serializer"].config.valid_range is not None and eb > 0
    ds.to_zarr(zarr.storage.LocalStore(str(tmp_path / "ds.zarr")), encoding=enc, zarr_format=3,
               consolidated=False)                     # on the cluster; zarr chunks = the dask chunks
    full = zarr.open_array(str(tmp_path / "ds.zarr" / "v"), mode="r")[:]
    counting = CountingStore(zarr.storage.LocalStore(str(tmp_path / "ds.zarr"), read_only=True))
    # lazy numpy-backed, and dask-backed with zarr's chunks (computed in this process, where the log is)
    for chunks in (None, {}):
        back = xr.open_zarr(counting, consolidated=False, chunks=chunks)
        assert back.v.attrs["units"] == "K" and (back.v.chunks is None) == (chunks is None)
        for sel, touched in BOXES:
            CountingStore.keys.clear()
            box = back.v.isel(time=sel[0], y=sel[1], x=sel[2]).compute(scheduler="sync").values
            chunk_reads = CountingStore.chunk_reads("v/c/")
            assert len(chunk_reads) == len(set(chunk_reads)) == touched, (chunks, sel, chunk_reads)
            assert np.array_equal(box.view(np.uint32), full[sel].view(np.uint32))
    worst = da.map_blocks(_block_error, da.from_zarr(str(tmp_path / "ds.zarr" / "v")), chunks=(1, 1, 1),
                          dtype=np.float64).max().compute() * EB / eb
    assert worst <= 1.0


def test_concurrent_threads_give_sequential_bytes():
    g = np.random.default_rng(5)
    arrays = [block((40, 64, 64), (0, 0, 0)),
              block((24, 96, 80), (7, 3, 11)).astype(np.float64),
              np.cumsum(g.standard_normal((300, 400)), axis=1).astype(np.float32),
              block((64, 48, 48), (100, 0, 0))]
    arrays[3][5:9, 10:30, 3] = np.nan                       # a hole: the mask kernels run too
    bounds = [0.01, 1e-4, 0.05, 0.002]
    threads_before = numba.get_num_threads()
    sequential = [strata.compress(a, abs_error=e) for a, e in zip(arrays, bounds)]
    decoded = [strata.decompress(s) for s in sequential]

    def job(i):
        s = strata.compress(arrays[i], abs_error=bounds[i])
        return s, strata.decompress(s), strata.decompress(s, region=(slice(3, 9),) * arrays[i].ndim)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(job, [0, 1, 2, 3] * 3))
    for k, (s, y, box) in enumerate(results):
        i = k % 4
        assert s == sequential[i], i
        assert np.array_equal(y, decoded[i], equal_nan=True)
        assert np.array_equal(box, decoded[i][(slice(3, 9),) * arrays[i].ndim], equal_nan=True)
    for a, y, e in zip(arrays, decoded, bounds):
        ok = ~np.isnan(a)
        assert np.abs(a[ok].astype(np.float64) - y[ok]).max() <= e
    assert _numba._active == 0 and numba.get_num_threads() == threads_before
