"""Reading and writing the array files strata's command line works with.

* raw little-endian ``NAME_D0xD1xD2.f32`` / ``.f64`` files (SDRBench convention: C order,
  slowest axis first; the shape comes from the name or is given);
* NumPy ``.npy`` files;
* one variable of a NetCDF (``.nc``, through netCDF4, or h5py for NetCDF-4 files) or HDF5
  (``.h5``/``.hdf5``, through h5py) file, read with the CF conventions (missing values, packed
  data; see :mod:`strata.cf`) -- optional dependencies (``pip install strata[io]``); written
  back as NetCDF from a stream's metadata.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from .atomic import open_regular
from .errors import InvalidInputError, UnsupportedDtypeError

SHAPE_RE = re.compile(r"_(\d+(?:x\d+)*)\.(f32|f64)$", re.IGNORECASE)
RAW_DTYPES = {".f32": np.dtype("<f4"), ".f64": np.dtype("<f8")}


def parse_shape(text: str) -> tuple[int, ...]:
    """``"512x512x64"`` or ``"512,512,64"`` -> ``(512, 512, 64)``."""
    try:
        shape = tuple(int(v) for v in re.split(r"[x,]", text.strip().lower()) if v)
    except ValueError as exc:
        raise InvalidInputError(f"cannot parse shape {text!r}") from exc
    if not shape or any(n < 0 for n in shape):
        raise InvalidInputError(f"invalid shape {text!r}")
    return shape


def raw_shape(path: Path) -> tuple[int, ...] | None:
    """Shape encoded in an SDRBench-style file name, or None."""
    m = SHAPE_RE.search(path.name)
    return parse_shape(m.group(1)) if m else None


def read_input(path, shape: tuple[int, ...] | None = None, var: str | None = None, *, cf: bool = True):
    """Load the data to compress from ``path``, with its missing values and description.

    Args:
        path: ``.f32``/``.f64`` raw file, ``.npy``, ``.nc``/``.nc4``/``.cdf``, ``.h5``/``.hdf5``/``.he5``;
            a regular file (a FIFO, directory or device is refused before it is opened).
        shape: shape of a raw file (default: from its name).
        var: variable (NetCDF) or dataset path (HDF5) to read.
        cf: for NetCDF/HDF5, apply the CF conventions (see :mod:`strata.cf`).

    Returns:
        A :class:`strata.cf.Variable`: raw and ``.npy`` files give their array alone (no mask,
        fill value or metadata: :func:`declare_missing` adds them); NetCDF/HDF5 variables come
        with them.

    Raises:
        InvalidInputError: unknown format, missing shape or variable (or one given for a file
            of another kind), size mismatch, a file that is not a regular file or not a valid
            ``.npy``.
        UnsupportedDtypeError: the data are not floating point.
        OSError: the file cannot be opened or read.
    """
    from .cf import HDF5_SUFFIXES, NETCDF_SUFFIXES, Variable, read_variable

    path = Path(path)
    ext = path.suffix.lower()
    if shape is not None and ext not in RAW_DTYPES:
        raise InvalidInputError(f"{path.name}: a shape (--shape) is for raw .f32/.f64 files only")
    if var is not None and ext not in NETCDF_SUFFIXES + HDF5_SUFFIXES:
        raise InvalidInputError(f"{path.name}: a variable (--var) is for NetCDF/HDF5 files only")
    if ext in NETCDF_SUFFIXES + HDF5_SUFFIXES:
        if not var:
            raise InvalidInputError(f"{path.name}: name the variable to read with --var")
        open_regular(path).close()  # (netCDF4 and h5py would block on a FIFO)
        return read_variable(path, var, cf=cf)
    return Variable(_read_array_file(path, ext, shape))


def declare_missing(v, fill_value=None, mask=None):
    """``v`` (a :class:`strata.cf.Variable`) with more missing points: those equal to
    ``fill_value`` and those ``mask`` marks (what ``--fill-value`` and ``--mask`` declare for a
    raw or ``.npy`` input, which carries no attributes).

    Args:
        v: the variable as read (its own missing points are kept).
        fill_value: values equal to it are missing (the nearest value of the data's dtype:
            ``1e20`` for float32 data means ``float32(1e20)``); it becomes the variable's fill
            value when it has none. NaN: no change (NaN is always missing).
        mask: bool array (``True`` = missing, or integers 0/1) of the data's shape or
            broadcasting to it (:func:`read_mask` reads one from a file).

    Returns:
        A new :class:`strata.cf.Variable` (``mask`` None when no point is missing).

    Raises:
        InvalidInputError: a ``fill_value`` that the dtype cannot represent, a ``mask`` that is
            not boolean or does not broadcast to the data's shape.
    """
    from dataclasses import replace

    from .lossy import missing

    if fill_value is None and mask is None:
        return v
    declared = missing.find(v.data, mask, fill_value).reshape(v.data.shape)
    if v.mask is not None:
        declared |= v.mask
    fill = v.fill_value
    if fill is None and fill_value is not None and not np.isnan(float(fill_value)):
        fill = v.data.dtype.type(fill_value)
    return replace(v, mask=declared if declared.any() else None, fill_value=fill)


def _read_array_file(path: Path, ext: str, shape) -> np.ndarray:
    """The float array of a raw or ``.npy`` file (native byte order, C-contiguous)."""
    if ext in RAW_DTYPES:
        shape = shape or raw_shape(path)
        if shape is None:
            raise InvalidInputError(f"{path.name}: give --shape or name the file NAME_D0xD1xD2{ext}")
        dtype = RAW_DTYPES[ext]
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            n = size // dtype.itemsize
            if n != math.prod(shape) or size % dtype.itemsize:
                raise InvalidInputError(f"{path.name} holds {size} bytes ({n} values of {dtype.itemsize} bytes); "
                                        f"shape {shape} needs {math.prod(shape)}")
            a = np.fromfile(f, dtype=dtype).reshape(shape)
    elif ext == ".npy":
        a = _load_npy(path)
    else:
        raise InvalidInputError(f"{path.name}: unknown input format (want .f32, .f64, .npy, .nc, .h5)")
    if a.dtype.kind != "f":
        raise UnsupportedDtypeError(f"{path.name}: dtype {a.dtype} is not floating point")
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="), copy=False))


def _load_npy(path: Path) -> np.ndarray:
    with open_regular(path) as f:
        try:
            a = np.load(f, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # (numpy's words for a damaged or empty file)
            raise InvalidInputError(f"{path.name} is not a valid .npy file: {exc or type(exc).__name__}") from exc
    if not isinstance(a, np.ndarray) or a.dtype.fields is not None:
        raise InvalidInputError(f"{path.name} holds no plain array")
    return a


def read_mask(path, shape: tuple[int, ...]) -> np.ndarray:
    """A missing-value mask for data of ``shape`` from a file: ``True`` (or 1) = missing.

    * ``.npy``: a boolean array, or integers 0 and 1, of ``shape`` or broadcasting to it (one
      land mask for every time step);
    * any other file: raw bytes, one per point, 0 (valid) or 1 (missing), of the shape in its
      SDRBench-style name (``land_180x360.u8``), else of the trailing axes of ``shape`` whose
      size matches the file's (the whole shape first).

    Args:
        path: the mask file (a regular file).
        shape: the data's shape.

    Returns:
        A bool or uint8 array (to be broadcast and checked by :func:`strata.lossy.missing.find`).

    Raises:
        InvalidInputError: not a valid ``.npy`` file, or a raw file whose size matches no
            trailing axes of ``shape``.
        OSError: the file cannot be opened or read.
    """
    path = Path(path)
    if path.suffix.lower() == ".npy":
        return _load_npy(path)
    with open_regular(path) as f:
        m = np.fromfile(f, dtype=np.uint8)
    named = re.search(r"_(\d+(?:x\d+)*)\.[^.]+$", path.name)
    if named:
        own = parse_shape(named.group(1))
        if math.prod(own) == m.size:
            return m.reshape(own)
    for k in range(len(shape), 0, -1):
        if math.prod(shape[-k:]) == m.size:
            return m.reshape(shape[-k:])
    raise InvalidInputError(f"{path.name}: {m.size} bytes, one per point, fit no trailing axes of the data's "
                            f"shape {shape}")


def read_array(path, shape: tuple[int, ...] | None = None, var: str | None = None) -> np.ndarray:
    """The float array of ``path`` as :func:`read_input` reads it, NetCDF/HDF5 variables with
    their stored values (no CF conventions).

    Raises:
        InvalidInputError, UnsupportedDtypeError, OSError: as :func:`read_input`.
    """
    return read_input(path, shape, var, cf=False).data


def write_array(path, a: np.ndarray, metadata: dict | None = None, *, fill_value=None, index=None,
                replace: bool = True) -> None:
    """Write ``a`` (an array, or a ``numpy.ma.MaskedArray`` marking missing points) to ``path``
    atomically: ``.npy`` or raw little-endian ``.f32``/``.f64`` (the values as they are: missing
    points keep the bits they decoded to), or NetCDF ``.nc``/``.nc4``/``.cdf`` through
    :func:`strata.cf.write_netcdf` (with ``metadata``, ``fill_value`` and ``index``).

    Args:
        replace: replace an existing ``path`` (default); False: raise ``FileExistsError``
            instead (checked before writing and again at the rename).

    Raises:
        InvalidInputError: another output format.
        CorruptStreamError: NetCDF output with metadata that is invalid or does not fit ``a``.
        FileExistsError: ``path`` exists and ``replace`` is false.
        OSError: the file could not be written (the error names ``path``).
    """
    from .atomic import atomic_write
    from .cf import NETCDF_SUFFIXES, write_netcdf

    path = Path(path)
    ext = path.suffix.lower()
    if ext in NETCDF_SUFFIXES:
        write_netcdf(path, a, metadata, fill_value=fill_value, index=index, replace=replace)
        return
    a = np.ma.getdata(a)
    if ext == ".npy":
        import io

        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        atomic_write(path, buf.getbuffer(), replace=replace)
    elif ext in RAW_DTYPES:
        atomic_write(path, np.ascontiguousarray(a, dtype=RAW_DTYPES[ext]).tobytes(), replace=replace)
    else:
        raise InvalidInputError(f"{path.name}: output must be .npy, .f32, .f64 or .nc")
