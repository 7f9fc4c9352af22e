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
import re
from pathlib import Path

import numpy as np

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
        path: ``.f32``/``.f64`` raw file, ``.npy``, ``.nc``/``.nc4``/``.cdf``, ``.h5``/``.hdf5``/``.he5``.
        shape: shape of a raw file (default: from its name).
        var: variable (NetCDF) or dataset path (HDF5) to read.
        cf: for NetCDF/HDF5, apply the CF conventions (see :mod:`strata.cf`).

    Returns:
        A :class:`strata.cf.Variable`: raw and ``.npy`` files give their array alone (no mask,
        fill value or metadata); NetCDF/HDF5 variables come with them.

    Raises:
        InvalidInputError: unknown format, missing shape or variable, size mismatch.
        UnsupportedDtypeError: the data are not floating point.
    """
    from .cf import HDF5_SUFFIXES, NETCDF_SUFFIXES, Variable, read_variable

    path = Path(path)
    ext = path.suffix.lower()
    if ext in NETCDF_SUFFIXES + HDF5_SUFFIXES:
        if not var:
            raise InvalidInputError(f"{path.name}: name the variable to read with --var")
        return read_variable(path, var, cf=cf)
    if ext in RAW_DTYPES:
        shape = shape or raw_shape(path)
        if shape is None:
            raise InvalidInputError(f"{path.name}: give --shape or name the file NAME_D0xD1xD2{ext}")
        dtype = RAW_DTYPES[ext]
        n = path.stat().st_size // dtype.itemsize
        if n != math.prod(shape) or path.stat().st_size % dtype.itemsize:
            raise InvalidInputError(f"{path.name} holds {n} values of {dtype.itemsize} bytes; "
                                    f"shape {shape} needs {math.prod(shape)}")
        a = np.fromfile(path, dtype=dtype).reshape(shape)
    elif ext == ".npy":
        a = np.load(path, allow_pickle=False)
    else:
        raise InvalidInputError(f"{path.name}: unknown input format (want .f32, .f64, .npy, .nc, .h5)")
    if a.dtype.kind != "f":
        raise UnsupportedDtypeError(f"{path.name}: dtype {a.dtype} is not floating point")
    return Variable(np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="), copy=False)))


def read_array(path, shape: tuple[int, ...] | None = None, var: str | None = None) -> np.ndarray:
    """The float array of ``path`` as :func:`read_input` reads it, NetCDF/HDF5 variables with
    their stored values (no CF conventions).

    Raises:
        InvalidInputError, UnsupportedDtypeError: as :func:`read_input`.
    """
    return read_input(path, shape, var, cf=False).data


def write_array(path, a: np.ndarray, metadata: dict | None = None, *, fill_value=None, index=None) -> None:
    """Write ``a`` (an array, or a ``numpy.ma.MaskedArray`` marking missing points) to ``path``
    atomically: ``.npy`` or raw little-endian ``.f32``/``.f64`` (the values as they are: missing
    points keep the bits they decoded to), or NetCDF ``.nc``/``.nc4``/``.cdf`` through
    :func:`strata.cf.write_netcdf` (with ``metadata``, ``fill_value`` and ``index``).

    Raises:
        InvalidInputError: another output format.
        CorruptStreamError: NetCDF output with metadata that is invalid or does not fit ``a``.
    """
    from .cf import NETCDF_SUFFIXES, write_netcdf
    from .container import atomic_write

    path = Path(path)
    ext = path.suffix.lower()
    if ext in NETCDF_SUFFIXES:
        write_netcdf(path, a, metadata, fill_value=fill_value, index=index)
        return
    a = np.ma.getdata(a)
    if ext == ".npy":
        import io

        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        atomic_write(path, buf.getbuffer())
    elif ext in RAW_DTYPES:
        atomic_write(path, np.ascontiguousarray(a, dtype=RAW_DTYPES[ext]).tobytes())
    else:
        raise InvalidInputError(f"{path.name}: output must be .npy, .f32, .f64 or .nc")
