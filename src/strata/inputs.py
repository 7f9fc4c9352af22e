"""Reading and writing the array files strata's command line works with.

* raw little-endian ``NAME_D0xD1xD2.f32`` / ``.f64`` files (SDRBench convention: C order,
  slowest axis first; the shape comes from the name or is given);
* NumPy ``.npy`` files;
* one variable of a NetCDF (``.nc``, through netCDF4, or h5py for NetCDF-4 files) or HDF5
  (``.h5``/``.hdf5``, through h5py) file -- optional dependencies (``pip install strata[io]``).
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


def read_array(path, shape: tuple[int, ...] | None = None, var: str | None = None) -> np.ndarray:
    """Load a float array from ``path``.

    Args:
        path: ``.f32``/``.f64`` raw file, ``.npy``, ``.nc``, ``.h5``/``.hdf5``.
        shape: shape of a raw file (default: from its name).
        var: variable (NetCDF) or dataset path (HDF5) to read.

    Raises:
        InvalidInputError: unknown format, missing shape or variable, size mismatch.
        UnsupportedDtypeError: the data are not floating point.
    """
    path = Path(path)
    ext = path.suffix.lower()
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
    elif ext in (".nc", ".nc4", ".h5", ".hdf5", ".he5"):
        if not var:
            raise InvalidInputError(f"{path.name}: name the variable to read with --var")
        a = _read_variable(path, var)
    else:
        raise InvalidInputError(f"{path.name}: unknown input format (want .f32, .f64, .npy, .nc, .h5)")
    if a.dtype.kind != "f":
        raise UnsupportedDtypeError(f"{path.name}: dtype {a.dtype} is not floating point")
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="), copy=False))


def _read_variable(path: Path, var: str) -> np.ndarray:
    if path.suffix.lower().startswith(".nc"):
        try:
            import netCDF4
        except ImportError:
            netCDF4 = None
        if netCDF4 is not None:
            with netCDF4.Dataset(path) as ds:
                if var not in ds.variables:
                    raise InvalidInputError(f"{path.name} has no variable {var!r}; it has {list(ds.variables)}")
                v = ds.variables[var]
                v.set_auto_mask(False)
                return np.asarray(v[...])
    try:
        import h5py
    except ImportError as exc:
        raise InvalidInputError("reading NetCDF/HDF5 needs netCDF4 or h5py: pip install 'strata[io]'") from exc
    with h5py.File(path, "r") as f:
        if var not in f:
            raise InvalidInputError(f"{path.name} has no dataset {var!r}")
        return np.asarray(f[var][...])


def write_array(path, a: np.ndarray) -> None:
    """Write ``a`` to ``path`` atomically: ``.npy``, or raw little-endian ``.f32``/``.f64``."""
    from .container import atomic_write

    path = Path(path)
    ext = path.suffix.lower()
    if ext == ".npy":
        import io

        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        atomic_write(path, buf.getbuffer())
    elif ext in RAW_DTYPES:
        atomic_write(path, np.ascontiguousarray(a, dtype=RAW_DTYPES[ext]).tobytes())
    else:
        raise InvalidInputError(f"{path.name}: output must be .npy, .f32 or .f64")
