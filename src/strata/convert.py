"""``strata convert``: a NetCDF/HDF5 file to a zarr v3 store compressed with strata, and back.

::

    from strata.convert import convert

    convert("in.nc", "out.zarr", rel_error=1e-3)            # float data variables lossy, rest lossless
    convert("out.zarr", "back.nc")                          # NetCDF4, float variables decoded

The libraries do the work: xarray opens the file lazily (dask-backed) and writes the store,
:func:`strata.xarray.encoding` gives each compressed variable its
:class:`strata.zarr.StrataCodec` (a relative bound resolved once against the variable's whole
valid range), and dask computes the chunks, with a ``tqdm.dask.TqdmCallback`` progress bar.

* Compressed: the float32/float64 data variables (:func:`strata.xarray.lossy_variables`), or
  the ones named. Copied losslessly with zarr's default codecs: coordinates, integer variables
  (packed integers are written back to their integer type with their ``scale_factor`` /
  ``add_offset``, so their stored integers are kept exactly), strings.
* Kept by xarray: attributes (variable and global), coordinates, ``_FillValue`` /
  ``missing_value``, CF time encodings. The source's storage settings (NetCDF chunking,
  compression) are not carried over.
* Chunks: zarr chunk shape per dimension (:func:`chunk_sizes`); by default about
  :data:`TARGET_CHUNK_BYTES` per chunk, in multiples of the file's own chunks when it has any.
* The store's metadata is consolidated (zarr-python's consolidated metadata in the root
  ``zarr.json``), so ``xarray.open_zarr`` opens it with one read and without a warning.
* Outputs are written atomically: a store is written into a temporary directory beside the
  output and renamed at the end, a NetCDF file through :func:`strata.cf.netcdf_output`;
  a failure leaves nothing under the output's name, nor a temporary store beside it (on dask's
  threaded scheduler the write's tasks are drained before it is removed). An existing output is
  replaced only with ``force=True``.

Only a file's root group is converted (NetCDF groups and HDF5 datasets outside the root group
are not read).
"""
from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .atomic import atomic_dir, clean_stale
from .cf import HDF5_SUFFIXES, NETCDF_SUFFIXES, netcdf_output
from .chunk_codec import ChunkConfig
from .errors import InvalidInputError

#: Default chunk size in bytes (decoded values) of the largest variable.
TARGET_CHUNK_BYTES = 4 << 20
#: A variable (or the part of it left to chunk) up to this size is one chunk.
MAX_SINGLE_CHUNK_BYTES = 8 << 20
#: Input file suffixes converted to zarr.
SOURCE_SUFFIXES = NETCDF_SUFFIXES + HDF5_SUFFIXES
ZARR_SUFFIX = ".zarr"


#: Encoding keys kept from the source: the CF ones xarray encodes values with. Storage
#: settings of the source (chunking, compression) are dropped so that they cannot clash with
#: the output's.
_KEEP_ENCODING = ("_FillValue", "missing_value", "dtype", "scale_factor", "add_offset", "units", "calendar",
                  "_Unsigned", "coordinates")


@dataclass
class ConvertReport:
    """What :func:`convert` did.

    Attributes:
        source, output: the paths.
        lossy: ``{name: ChunkConfig}`` of the variables compressed with strata (empty for a
            zarr to NetCDF conversion); ``config.abs_error`` is the bound in force, in the
            variable's unit.
        lossless: names of the other variables (coordinates included), copied losslessly.
        chunks: ``{dim: size}`` of the zarr chunks (empty for a zarr to NetCDF conversion).
        nbytes: decoded size of all variables, in bytes.
        output_bytes: size of the output on disk (all files of a store), in bytes.
        seconds: wall time of the conversion.
    """

    source: Path
    output: Path
    lossy: dict[str, ChunkConfig] = field(default_factory=dict)
    lossless: list[str] = field(default_factory=list)
    chunks: dict[str, int] = field(default_factory=dict)
    nbytes: int = 0
    output_bytes: int = 0
    seconds: float = 0.0


def convert(source, output, *, rel_error=None, abs_error=None, variables=None, chunks=None, force: bool = False,
            progress_bytes: float = math.inf, objective: str | None = None, layers=None) -> ConvertReport:
    """Convert ``source`` to ``output``, the direction given by their suffixes.

    A NetCDF/HDF5 file (``.nc``, ``.nc4``, ``.cdf``, ``.h5``, ``.hdf5``, ``.he5``) to a
    ``.zarr`` store: :func:`netcdf_to_zarr` (takes the bound, ``variables``, ``chunks``,
    ``objective`` and ``layers``);
    a ``.zarr`` store to a NetCDF file: :func:`zarr_to_netcdf` (takes none of them).

    Raises:
        InvalidInputError: suffixes giving no direction, options of the other direction, and
            everything the two functions raise.
    """
    source, output = Path(source), Path(output)
    src, dst = source.suffix.lower(), output.suffix.lower()
    if src in SOURCE_SUFFIXES and dst == ZARR_SUFFIX:
        return netcdf_to_zarr(source, output, rel_error=rel_error, abs_error=abs_error, variables=variables,
                              chunks=chunks, force=force, progress_bytes=progress_bytes,
                              objective=objective or "ratio", layers=layers)
    if src == ZARR_SUFFIX and dst in NETCDF_SUFFIXES:
        given = [n for n, v in (("rel_error", rel_error), ("abs_error", abs_error), ("variables", variables),
                                ("chunks", chunks), ("objective", objective), ("layers", layers)) if v is not None]
        if given:
            raise InvalidInputError(f"{', '.join(given)}: only for a NetCDF/HDF5 to zarr conversion (a zarr store "
                                    "is written back as it was compressed)")
        return zarr_to_netcdf(source, output, force=force, progress_bytes=progress_bytes)
    raise InvalidInputError(
        f"cannot convert {source.name} to {output.name}: convert a NetCDF/HDF5 file ({'/'.join(SOURCE_SUFFIXES)}) "
        f"to a {ZARR_SUFFIX} store, or a {ZARR_SUFFIX} store to a NetCDF file ({'/'.join(NETCDF_SUFFIXES)})")


def netcdf_to_zarr(source, output, *, rel_error=None, abs_error=None, variables=None, chunks=None,
                   force: bool = False, progress_bytes: float = math.inf, objective: str = "ratio",
                   layers=None) -> ConvertReport:
    """Write the NetCDF/HDF5 file ``source`` as a zarr v3 store ``output``, float data
    variables compressed with strata.

    Args:
        source: NetCDF/HDF5 file (root group), opened lazily with xarray (dask-backed, read
            chunk by chunk).
        output: the store (a directory) to write.
        rel_error: bound relative to each compressed variable's whole valid range: its absolute
            bound is ``rel_error * (max - min)`` of its valid values (one extra read of it).
        abs_error: absolute bound, in each variable's unit. Exactly one of the two.
        variables: names of the data variables to compress (default: every float32/float64
            data variable that is not packed integers); the others are copied losslessly.
        chunks: zarr chunk shape: ``{dim: size}``, a string ``"time=24,lat=256"`` or
            ``"24,256,256"``, or a sequence of sizes (see :func:`chunk_sizes`); ``None``: about
            :data:`TARGET_CHUNK_BYTES` per chunk.
        force: replace an existing ``output``.
        progress_bytes: show tqdm progress bars (on stderr) when the data hold at least this
            many bytes (0: always; default: never).
        objective: the compressor's tuning objective, ``"ratio"`` or ``"psnr"``
            (:func:`strata.lossy.compress`), kept in each codec's configuration.
        layers: bounds of precision layers coarser than the bound, of its kind, or None: every
            chunk then holds layers that a reader at a coarser bound fetches alone
            (:func:`strata.xarray.open_zarr`, :class:`strata.zarr.ErrorBoundStore`).

    Returns:
        :class:`ConvertReport`.

    Raises:
        InvalidInputError: ``source`` cannot be opened, neither or both bounds, an unknown,
            non-float or coordinate variable, a relative bound for a variable with no valid
            value, bad ``chunks``.
        FileNotFoundError: no ``source``; FileExistsError: ``output`` exists and not ``force``.
        OSError: reading or writing failed; StrataError: a chunk could not be compressed.
    """
    import xarray as xr

    from . import xarray as sx

    t0 = time.perf_counter()
    source, output = Path(source), Path(output)
    _check_output(output, force)
    if (rel_error is None) == (abs_error is None):
        raise InvalidInputError("give exactly one of rel_error and abs_error")
    if isinstance(variables, str):
        variables = [variables]
    with _open_source(source, xr) as meta:  # metadata only: nothing is read but index coordinates
        for name in variables or ():
            if name in meta.coords:
                raise InvalidInputError(f"{name!r} is a coordinate: coordinates are copied losslessly")
            if name not in meta.data_vars:
                raise InvalidInputError(f"no variable {name!r} in {source.name} (data variables: "
                                        f"{', '.join(map(str, meta.data_vars)) or 'none'})")
        sizes = chunk_sizes(meta, chunks, variables)
    ds = _open_source(source, xr, chunks=sizes)
    try:
        _clean_encodings(ds)
        show = ds.nbytes >= progress_bytes
        with _bar(show, "valid range"):
            enc = sx.encoding(ds, rel_error=rel_error, abs_error=abs_error, variables=variables, zarr_format=3,
                              objective=objective, layers=layers)
        lossy = {name: e["serializer"].config for name, e in enc.items()}
        with atomic_dir(output, replace=force) as tmp, warnings.catch_warnings():
            # consolidated metadata (xarray's default, and what xr.open_zarr looks for first) is a
            # zarr-python extension of zarr v3, which it says in a warning on every write
            warnings.filterwarnings("ignore", "Consolidated metadata is currently not part", UserWarning)
            write = ds.to_zarr(tmp, mode="w", encoding=enc, zarr_format=3, consolidated=True, compute=False)
            with _bar(show, f"write {output.name}"):
                _compute(write)
        return ConvertReport(source, output, lossy, [str(n) for n in ds.variables if n not in lossy],
                             {str(d): n for d, n in sizes.items()}, int(ds.nbytes), _disk_bytes(output),
                             time.perf_counter() - t0)
    finally:
        ds.close()


def zarr_to_netcdf(source, output, *, force: bool = False, progress_bytes: float = math.inf) -> ConvertReport:
    """Write the zarr store ``source`` (any zarr store xarray opens, strata-compressed or not)
    as the NetCDF4 file ``output``.

    Float variables are written decoded (their values as strata decodes them, missing points
    as their ``_FillValue``), integer and packed-integer variables exactly as stored;
    attributes, coordinates and fill values as xarray reads them.

    Args:
        source: the store, opened lazily with ``xarray.open_zarr``.
        output: the NetCDF4 file, written atomically.
        force: replace an existing ``output``.
        progress_bytes: show a tqdm progress bar (stderr) when the data hold at least this many
            bytes (0: always; default: never).

    Returns:
        :class:`ConvertReport` (``lossy`` empty: every variable is written as decoded).

    Raises:
        InvalidInputError: ``source`` is not a zarr store xarray can open.
        FileNotFoundError: no ``source``; FileExistsError: ``output`` exists and not ``force``.
        OSError: writing failed (a full disk: ``ENOSPC`` naming ``output``, see
            :func:`strata.cf.netcdf_output`); StrataError: a damaged strata chunk.
    """
    import xarray as xr

    t0 = time.perf_counter()
    source, output = Path(source), Path(output)
    if not source.exists():
        raise FileNotFoundError(f"no such store: {source}")
    _check_output(output, force)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Failed to open Zarr store with consolidated", RuntimeWarning)
            ds = xr.open_zarr(source, consolidated=None)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"cannot open {source.name} as a zarr store: {exc}") from exc
    try:
        _clean_encodings(ds)
        with netcdf_output(output, ds.nbytes) as tmp:
            write = ds.to_netcdf(tmp, engine="netcdf4", format="NETCDF4", compute=False)
            with _bar(ds.nbytes >= progress_bytes, f"write {output.name}"):
                _compute(write)
        return ConvertReport(source, output, lossless=[str(n) for n in ds.variables], nbytes=int(ds.nbytes),
                             output_bytes=output.stat().st_size, seconds=time.perf_counter() - t0)
    finally:
        ds.close()


def _compute(write) -> None:
    """Run a writer's dask graph (``write``, from ``to_zarr`` / ``to_netcdf`` with
    ``compute=False``) so that none of its tasks still writes once this returns or raises.

    dask's threaded scheduler raises at the first failed task while the others run on in its
    pool: the atomic writer would then remove the partial output under their feet and they would
    recreate parts of it (a hidden ``.NAME.*.tmp`` store left behind: seen with 16 threads). On
    that scheduler (the default) the graph runs in a pool of its own, drained (running tasks
    finished, queued ones cancelled) before an error goes on. Other schedulers (a distributed
    client, ``synchronous``) run as configured."""
    import dask
    from dask.base import get_scheduler
    from dask.system import CPU_COUNT

    if get_scheduler(collections=[write]) is not dask.threaded.get:
        write.compute()
        return
    pool = ThreadPoolExecutor(dask.config.get("num_workers", None) or CPU_COUNT)
    try:
        write.compute(scheduler="threads", pool=pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def chunk_sizes(ds, chunks=None, variables=None) -> dict:
    """The zarr chunk size of every dimension of ``ds``.

    Args:
        ds: ``xarray.Dataset`` (only its metadata is used).
        chunks: ``None`` for the default; ``{dim: size}`` or ``"dim=size,dim=size"``; or sizes
            in the order of the dimensions of the main variable (the largest of ``variables``,
            else of the float data variables, else of all data variables): ``"24,256,256"`` or
            a sequence. A size of -1 is the whole dimension; dimensions not given are not split.
            A size larger than its dimension is clipped to it.
        variables: the variables that will be compressed (for the positional form).

    Default: the data variables, largest first, each get chunks of about
    :data:`TARGET_CHUNK_BYTES` (a variable up to :data:`MAX_SINGLE_CHUNK_BYTES` is one chunk)
    from dask's ``"auto"`` chunking, in multiples of the file's own chunks when it has any,
    with the dimensions an earlier (larger) variable fixed kept; split into chunks of equal
    size (but the last).

    Returns:
        ``{dim: size}`` for every dimension of ``ds``.

    Raises:
        InvalidInputError: malformed ``chunks``, an unknown dimension, a size < 1 (but -1), a
            positional list of the wrong length.
    """
    dims = {str(d): int(n) for d, n in ds.sizes.items()}
    if chunks is None:
        return _default_chunks(ds, dims)
    if isinstance(chunks, str):
        chunks = _parse_chunks(chunks)
    if not isinstance(chunks, dict):
        name, main = _main_variable(ds, variables)
        sizes = list(chunks)
        if main is None or len(sizes) != len(main.dims):
            shown = f"{name}({', '.join(map(str, main.dims))})" if main is not None else "none"
            raise InvalidInputError(f"{len(sizes)} chunk sizes for the dimensions of the main variable {shown}: "
                                    "give one per dimension, or name them (time=24,lat=256)")
        chunks = dict(zip(map(str, main.dims), sizes))
    out = dict(dims)
    for dim, size in chunks.items():
        if dim not in dims:
            raise InvalidInputError(f"chunks: no dimension {dim!r} (dimensions: {', '.join(dims) or 'none'})")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or (size < 1 and size != -1):
            raise InvalidInputError(f"chunks: the size of {dim!r} must be a positive integer or -1, not {size!r}")
        out[dim] = dims[dim] if size == -1 else max(1, min(int(size), dims[dim]))
    return out


def _parse_chunks(text: str):
    """``"time=24,lat=256"`` -> ``{"time": 24, "lat": 256}``; ``"24,256"`` -> ``[24, 256]``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InvalidInputError("chunks: empty")
    named = ["=" in p for p in parts]
    if any(named) and not all(named):
        raise InvalidInputError(f"chunks {text!r}: either name every dimension (time=24,lat=256) or none (24,256)")
    try:
        if all(named):
            pairs = [p.split("=", 1) for p in parts]
            return {k.strip(): int(v) for k, v in pairs}
        return [int(p) for p in parts]
    except ValueError as exc:
        raise InvalidInputError(f"chunks {text!r}: sizes must be integers") from exc


def _main_variable(ds, variables):
    names = list(variables) if variables else None
    if names is None:
        from .xarray import lossy_variables

        names = lossy_variables(ds) or [str(n) for n in ds.data_vars]
    candidates = [(n, ds.variables[n]) for n in names if n in ds.variables]
    if not candidates:
        return None, None
    return max(candidates, key=lambda nv: (nv[1].ndim, nv[1].size))


def _default_chunks(ds, dims: dict) -> dict:
    from dask.array.core import normalize_chunks

    out: dict = {}
    for var in sorted(ds.data_vars.values(), key=lambda v: -v.size * v.dtype.itemsize):
        vdims = [str(d) for d in var.dims]
        free = [d for d in vdims if d not in out]
        if not free:
            continue
        item = max(var.dtype.itemsize, 1)
        full = tuple(out.get(d, dims[d]) for d in vdims)
        if math.prod(full) * item <= MAX_SINGLE_CHUNK_BYTES:
            out.update({d: dims[d] for d in free})
            continue
        disk = var.encoding.get("chunksizes")
        disk = tuple(int(c) for c in disk) if disk is not None and len(disk) == len(vdims) else None
        shape = tuple(dims[d] for d in vdims)
        auto = normalize_chunks(tuple(out.get(d, "auto") for d in vdims), shape,
                                limit=TARGET_CHUNK_BYTES, dtype=np.dtype(f"V{item}"), previous_chunks=disk)
        for d, c in zip(vdims, auto):
            if d in free:
                n = dims[d]
                k = math.ceil(n / max(c[0], 1))  # the number of chunks dask chose, of equal size
                out[d] = math.ceil(n / k) if n else 1
    for d, n in dims.items():
        out.setdefault(d, max(n, 1))
    return out


def _clean_encodings(ds) -> None:
    """Keep only the CF encoding keys of ``ds``'s variables, their dtype in native byte order
    (zarr reports explicit little-endian dtypes, which netCDF4 warns about)."""
    for var in ds.variables.values():
        enc = {k: v for k, v in var.encoding.items() if k in _KEEP_ENCODING}
        if "dtype" in enc:
            dtype = np.dtype(enc["dtype"])
            if dtype.byteorder in "<>" and dtype.isnative:
                enc["dtype"] = dtype.newbyteorder("=")
        var.encoding = enc


def _open_source(source: Path, xr, chunks=None):
    if not source.exists():
        raise FileNotFoundError(f"no such file: {source}")
    try:
        with warnings.catch_warnings():  # chunks asked for that split the file's own chunks
            warnings.filterwarnings("ignore", "The specified chunks separate the stored chunks", UserWarning)
            return xr.open_dataset(source, chunks=chunks, cache=False)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"cannot open {source.name} as a NetCDF/HDF5 file: {exc}") from exc


def _check_output(output: Path, force: bool) -> None:
    clean_stale(output.parent)  # a store a killed replacement left aside is back before the check
    if (output.exists() or output.is_symlink()) and not force:
        raise FileExistsError(f"{output} exists (replace it with force=True, --force on the command line)")
    if not output.parent.is_dir():
        raise FileNotFoundError(f"no such directory: {output.parent}")


def _bar(show: bool, desc: str):
    if not show:
        return nullcontext()
    from tqdm.dask import TqdmCallback

    return TqdmCallback(desc=desc, unit="task", leave=False)


def _disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


__all__ = ["ConvertReport", "MAX_SINGLE_CHUNK_BYTES", "TARGET_CHUNK_BYTES", "chunk_sizes", "convert",
           "netcdf_to_zarr", "zarr_to_netcdf"]
