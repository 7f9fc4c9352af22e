"""One NetCDF/HDF5 variable and the CF conventions: read it with its missing values, keep its
description in a stream's metadata, write it back as NetCDF.

Reading (:func:`read_variable`, CF-1.x rules, as netCDF4-python applies them):

* **Missing data** (CF 2.5.1): a point is missing when its stored value is NaN, equals
  ``_FillValue`` or one of the ``missing_value`` values, or lies outside ``valid_min`` /
  ``valid_max`` / ``valid_range``. All of them are compared with the *stored* (packed) values,
  cast to the variable's type. A NetCDF variable without ``_FillValue`` whose fill mode is on
  also treats the netCDF default fill value of its type as missing (not for 8-bit types, as the
  netCDF user guide advises). Through h5py, an HDF5 dataset's own fill value counts likewise
  when it was set explicitly (a user-defined fill value in its creation properties, which is
  also how netCDF-4 stores its default fill) and there is no ``_FillValue`` attribute; h5py's
  implicit default, 0, is a legitimate value and never a marker.
* **Packed data** (CF 8.1): with ``scale_factor`` and/or ``add_offset`` on an 8-, 16- or 32-bit
  integer variable, values are unpacked as ``stored * scale_factor + add_offset`` in the type
  of those attributes (float32 or float64; float64 for 32-bit integers, which float32 cannot
  hold, as xarray does). Missing points of unpacked data are NaN (quiet NaNs whose payload is
  the stored integer, so that writing back restores it bit for bit).
* **Types**: float32/float64 variables are read as they are. Integer variables without
  packing are refused (:class:`~strata.errors.UnsupportedDtypeError`): strata compresses
  floating-point data, an error bound rarely makes sense for codes, flags or counts, and a
  float copy would not write back as the integer variable xarray users had. ``_Unsigned``
  (the netCDF-3 unsigned-byte convention) and packing of float variables are refused too.
* ``cf=False`` reads the stored values as they are, with no missing-value semantics (NaN is
  still missing for the compressor, which treats NaN as missing always).

Metadata (:attr:`Variable.metadata`, a strict-JSON dict kept in the stream): the variable's name,
dimensions (and which are unlimited), stored dtype, every attribute with its exact type, the
global attributes, and its 1-D dimension coordinates (variables named like one of its
dimensions) with their exact values and attributes. Numbers are stored as base64 of their
little-endian bytes with a numpy dtype string, so NaN fill values and float32 values come back
bit for bit. :func:`parse_metadata` validates it and raises
:class:`~strata.errors.CorruptStreamError` on anything unexpected.

Writing (:func:`write_netcdf`): a NETCDF4 file with the dimensions, coordinates, attributes
and ``_FillValue`` of the source variable, so that ``xarray.open_dataset`` sees what it saw in
the source. Stored values: floats as decoded (missing points keep their original bits);
packed variables are *repacked* to their integer type with their ``scale_factor`` /
``add_offset``, so the file keeps its type, encoding and attributes. To keep the error bound
through that rounding, :meth:`Variable.compress` tightens the bound of a packed variable to
``(k + 1/2) * |scale_factor|`` less a float rounding margin (``k`` the number of whole packing
steps the bound allows): repacking then moves no value by more than ``k`` steps, i.e. no more
than the requested bound; a bound below one step gives the stored integers back exactly.
"""
from __future__ import annotations

import base64
import binascii
import errno
import math
import os
import re
import shutil
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .atomic import atomic_path
from .errors import CorruptStreamError, InvalidInputError, StrataError, UnsupportedDtypeError

#: Value of the ``format`` key of the metadata this module writes.
FORMAT = "strata.cf/1"
NETCDF_SUFFIXES = (".nc", ".nc4", ".cdf")
HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")
#: HDF5 attributes that netCDF-4 and the dimension-scale API keep for themselves.
_INTERNAL_ATTRS = frozenset({"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "DIMENSION_LABELS",
                             "_Netcdf4Dimid", "_Netcdf4Coordinates", "_NCProperties", "_nc3_strict"})
_NOT_A_VARIABLE = b"This is a netCDF dimension but not a netCDF variable"
#: Quiet-NaN bit patterns; the stored integer of a missing packed point goes in the low bits.
_QUIET_NAN = {4: 0x7FC00000, 8: 0x7FF8000000000000}
_DTYPE_RE = re.compile(r"[<|][iuf][1248]")
#: Bytes a NETCDF4 file may take beyond its variables' values (HDF5 superblock, object headers,
#: B-trees, attributes): the slack :func:`netcdf_output` allows when it diagnoses a failed write.
HDF5_OVERHEAD_BYTES = 1 << 20


# ---------------------------------------------------------------------------- packing (CF 8.1)
@dataclass(frozen=True)
class Packing:
    """CF 8.1 packing of a variable: ``unpacked = stored * scale + offset``.

    Attributes:
        dtype: the stored integer dtype (8, 16 or 32 bits).
        unpacked: the unpacked dtype (float32 or float64).
        scale, offset: ``scale_factor`` (1 when absent) and ``add_offset`` (0 when absent).
        max_steps: largest change, in packing steps, that keeps every valid value of the data
            away from the missing-value markers (None: no limit).
    """

    dtype: np.dtype
    unpacked: np.dtype
    scale: float
    offset: float
    max_steps: int | None = None

    def unpack(self, stored: np.ndarray, missing: np.ndarray) -> np.ndarray:
        """Unpacked floats of ``stored``; the ``missing`` points become NaNs carrying their
        stored integer in the payload."""
        out = stored.astype(self.unpacked)
        out *= self.unpacked.type(self.scale)
        out += self.unpacked.type(self.offset)
        size = self.unpacked.itemsize
        bits = stored[missing].view(f"u{stored.itemsize}").astype(f"u{size}") | _QUIET_NAN[size]
        out[missing] = bits.view(self.unpacked)
        return out

    def pack(self, data: np.ndarray, missing: np.ndarray, low, high) -> np.ndarray:
        """Stored integers for unpacked ``data``: valid points rounded to the nearest step and
        kept within ``[low, high]`` (the valid range, None for none) and the type's range;
        ``missing`` points restored from their NaN payload."""
        info = np.iinfo(self.dtype)
        lo = info.min if low is None else max(info.min, int(low))
        hi = info.max if high is None else min(info.max, int(high))
        with np.errstate(invalid="ignore", over="ignore"):
            steps = np.rint((data.astype(np.float64) - self.offset) / self.scale)
        out = np.clip(np.nan_to_num(steps, nan=lo), lo, hi).astype(self.dtype)
        payload = data[missing].view(f"u{data.itemsize}") & np.uint64((1 << (8 * self.dtype.itemsize)) - 1)
        out[missing] = payload.astype(f"u{self.dtype.itemsize}").view(self.dtype)
        return out

    def safe_bound(self, data: np.ndarray, abs_error=None, rel_error=None):
        """``(abs_error, rel_error)`` to compress the unpacked ``data`` with, so that repacking
        the decoded values keeps the requested bound (see the module's docstring). Arguments
        the compressor would refuse are returned unchanged, for it to refuse them."""
        if (abs_error is None) == (rel_error is None):
            return abs_error, rel_error
        try:
            bound = float(rel_error if abs_error is None else abs_error)
        except (TypeError, ValueError):
            return abs_error, rel_error
        valid = data[~np.isnan(data)]
        if not (math.isfinite(bound) and bound >= 0 and valid.size):
            return abs_error, rel_error
        lo, hi = float(valid.min()), float(valid.max())
        eb = bound if abs_error is not None else bound * (hi - lo)
        # two roundings of the unpacking (x * scale, + offset) in the unpacked type
        margin = 2 * float(np.spacing(self.unpacked.type(max(abs(lo), abs(hi)) + abs(self.offset))))
        step = abs(self.scale)
        k = max(math.floor((eb - margin) / step), 0) if step else 0
        if self.max_steps is not None:
            k = min(k, self.max_steps)
        safe = max((k + 0.5) * step - margin, 0.0)
        if eb <= safe:
            return abs_error, rel_error
        return (safe, None) if abs_error is not None else (None, safe / (hi - lo))


def _number(attrs: dict, key: str):
    """A numeric attribute as a 1-D array, or None when absent."""
    if key not in attrs:
        return None
    a = np.asarray(attrs[key]).reshape(-1)
    if a.dtype.kind not in "iuf" or not a.size:
        raise InvalidInputError(f"attribute {key} must be numeric, not {attrs[key]!r}")
    return a


def _cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return values.astype(dtype)


def _packing(attrs: dict, dtype: np.dtype) -> Packing | None:
    scale, offset = _number(attrs, "scale_factor"), _number(attrs, "add_offset")
    if scale is None and offset is None:
        return None
    if dtype.kind not in "iu":
        raise UnsupportedDtypeError(f"scale_factor/add_offset on {dtype} data is not supported (CF 8.1 packs "
                                    "integers); read the stored values with cf=False (--no-cf)")
    if dtype.itemsize > 4:
        raise UnsupportedDtypeError(f"packed {dtype} data: CF 8.1 packs into 8-, 16- or 32-bit integers")
    kinds = [a.dtype for a in (scale, offset) if a is not None]
    if any(k.kind != "f" or k.itemsize not in (4, 8) for k in kinds):
        raise UnsupportedDtypeError("scale_factor/add_offset are not float32/float64: the unpacked data "
                                    "would not be floating point (CF 8.1)")
    unpacked = np.dtype(np.float64) if dtype.itemsize == 4 else np.result_type(*kinds)
    return Packing(dtype, unpacked, float(scale[0]) if scale is not None else 1.0,
                   float(offset[0]) if offset is not None else 0.0)


@dataclass(frozen=True)
class _Rules:
    """What marks a missing point (CF 2.5.1), on stored values of ``dtype``."""

    markers: np.ndarray  # _FillValue, missing_value values, default fill
    low: object  # valid minimum or None
    high: object  # valid maximum or None
    packing: Packing | None

    @classmethod
    def of(cls, attrs: dict, dtype: np.dtype, default_fill=None) -> _Rules:
        packing = _packing(attrs, dtype)
        if packing is None and dtype.kind != "f":
            raise UnsupportedDtypeError(f"{dtype} data without scale_factor/add_offset: strata compresses "
                                        "floating-point data (convert it to float, or pack it as CF 8.1 says)")
        if "_Unsigned" in attrs:
            raise UnsupportedDtypeError("the _Unsigned convention is not supported; read it with cf=False (--no-cf)")
        found = [a for a in (_number(attrs, "_FillValue"), _number(attrs, "missing_value")) if a is not None]
        if "_FillValue" not in attrs and default_fill is not None and dtype.itemsize > 1:
            found.append(np.asarray([default_fill]))
        markers = _cast(np.concatenate(found), dtype) if found else np.zeros(0, dtype)
        low = high = None
        limits = _number(attrs, "valid_range")
        if limits is not None:
            if limits.size != 2:
                raise InvalidInputError(f"valid_range must hold 2 values, not {limits.size}")
            low, high = _cast(limits, dtype)
        vmin, vmax = _number(attrs, "valid_min"), _number(attrs, "valid_max")
        if vmin is not None:
            low = _cast(vmin[:1], dtype)[0]
        if vmax is not None:
            high = _cast(vmax[:1], dtype)[0]
        return cls(markers, low, high, packing)

    def missing(self, stored: np.ndarray) -> np.ndarray:
        out = np.isin(stored, self.markers)
        if stored.dtype.kind == "f":
            out |= np.isnan(stored)
        if self.low is not None:
            out |= stored < self.low
        if self.high is not None:
            out |= stored > self.high
        return out

    def max_steps(self, stored: np.ndarray, missing: np.ndarray) -> int | None:
        """Packing steps between the valid stored values and the nearest marker, less one."""
        valid = stored[~missing].astype(np.int64)
        if not valid.size or not self.markers.size:
            return None
        return min(int(np.abs(valid - int(m)).min()) for m in self.markers) - 1


# ---------------------------------------------------------------------------- metadata
def _encode(value):
    """A JSON-able form of an attribute value or coordinate array (None: unsupported type)."""
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    a = np.asarray(value)
    if a.dtype.kind in "SUO":
        items = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in a.reshape(-1).tolist()]
        if all(isinstance(v, str) for v in items):
            return items[0] if a.ndim == 0 else items
        return None
    if a.dtype.kind not in "iuf" or a.ndim > 1:
        return None
    a = a.astype(a.dtype.newbyteorder("<"))
    return {"dtype": a.dtype.str, "shape": list(a.shape), "base64": base64.b64encode(a.tobytes()).decode()}


def _need(ok, what: str) -> None:
    if not ok:
        raise CorruptStreamError(f"CF metadata: {what}")


def _decode(obj, what: str):
    """Inverse of :func:`_encode`: str, list of str, numpy scalar (shape []) or 1-D array."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, list):
        _need(all(isinstance(v, str) for v in obj), f"{what} is a list of non-strings")
        return obj
    _need(isinstance(obj, dict) and set(obj) == {"dtype", "shape", "base64"}, f"{what} is malformed")
    _need(isinstance(obj["dtype"], str) and _DTYPE_RE.fullmatch(obj["dtype"]), f"{what} has a bad dtype")
    try:
        dtype = np.dtype(obj["dtype"])
    except TypeError:
        raise CorruptStreamError(f"CF metadata: {what} has a bad dtype") from None
    shape = obj["shape"]
    _need(isinstance(shape, list) and len(shape) <= 1
          and all(type(n) is int and n >= 0 for n in shape), f"{what} has a bad shape")
    _need(isinstance(obj["base64"], str), f"{what} has no data")
    try:
        raw = base64.b64decode(obj["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise CorruptStreamError(f"CF metadata: {what} holds invalid base64") from None
    _need(len(raw) == math.prod(shape) * dtype.itemsize, f"{what} holds {len(raw)} bytes for shape {shape}")
    a = np.frombuffer(raw, dtype).astype(dtype.newbyteorder("=")).reshape(shape)
    return a[()] if a.ndim == 0 else a


def _encode_attrs(attrs: dict, where: str) -> dict:
    out = {}
    for key, value in attrs.items():
        if key in _INTERNAL_ATTRS:
            continue
        enc = _encode(value)
        if enc is None:
            warnings.warn(f"{where}: attribute {key!r} of an unsupported type is not kept", stacklevel=3)
        else:
            out[key] = enc
    return out


def _decode_attrs(obj, what: str) -> dict:
    _need(isinstance(obj, dict), f"{what} is not an object")
    _need(all(isinstance(k, str) and k for k in obj), f"{what} has a bad attribute name")
    return {k: _decode(v, f"{what}[{k!r}]") for k, v in obj.items()}


def _names(obj, what: str) -> tuple[str, ...]:
    _need(isinstance(obj, list) and all(isinstance(v, str) and v for v in obj), f"{what} is not a list of names")
    return tuple(obj)


@dataclass
class Coordinate:
    """A 1-D dimension coordinate: its stored ``values`` and ``attrs``."""

    values: np.ndarray
    attrs: dict = field(default_factory=dict)


@dataclass
class Description:
    """What a NetCDF file needs besides the data to rebuild a variable.

    Attributes:
        name: variable name.
        dims: dimension names, one per axis.
        dtype: the stored dtype (the packed integer type for packed data).
        attrs: attributes: ``str``, list of ``str``, numpy scalar or 1-D array (exact types).
        coords: dimension coordinates by name (each along the dimension of that name).
        global_attrs: the file's global attributes.
        unlimited: the dimensions that are unlimited.
    """

    name: str
    dims: tuple[str, ...]
    dtype: np.dtype
    attrs: dict = field(default_factory=dict)
    coords: dict[str, Coordinate] = field(default_factory=dict)
    global_attrs: dict = field(default_factory=dict)
    unlimited: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """The metadata dict (strict JSON) :func:`parse_metadata` reads back."""
        where = f"variable {self.name!r}"
        coords = {}
        for name, c in self.coords.items():
            data = _encode(c.values)
            if not isinstance(data, dict) or c.values.ndim != 1:
                warnings.warn(f"{where}: coordinate {name!r} of type {c.values.dtype} is not kept", stacklevel=2)
                continue
            coords[name] = {"dims": [name], "data": data, "attrs": _encode_attrs(c.attrs, f"coordinate {name!r}")}
        return {"format": FORMAT, "name": self.name, "dims": list(self.dims), "unlimited": list(self.unlimited),
                "dtype": self.dtype.newbyteorder("<").str, "attrs": _encode_attrs(self.attrs, where),
                "coords": coords, "global_attrs": _encode_attrs(self.global_attrs, "global attributes")}


def parse_metadata(metadata) -> Description | None:
    """Validate the CF metadata of a stream (:attr:`strata.lossy.LossyReader.metadata`).

    Returns:
        The :class:`Description`, or None when ``metadata`` is None or not CF metadata
        (no ``"format": "strata.cf/..."`` entry: some other metadata a user stored).

    Raises:
        CorruptStreamError: a field is missing, of the wrong type or size, or inconsistent
            (coordinate not along a dimension of the variable, unlimited dimension unknown,
            CF attributes that cannot be applied).
    """
    fmt = metadata.get("format") if isinstance(metadata, dict) else None
    if not (isinstance(fmt, str) and fmt.startswith("strata.cf/")):
        return None
    _need(fmt == FORMAT, f"unsupported version {fmt!r}")
    for key in ("name", "dims", "dtype", "attrs"):
        _need(key in metadata, f"no {key!r}")
    name, dims = metadata["name"], _names(metadata["dims"], "dims")
    _need(isinstance(name, str) and name, "bad variable name")
    _need(len(set(dims)) == len(dims), "repeated dimension names")
    unlimited = _names(metadata.get("unlimited", []), "unlimited")
    _need(set(unlimited) <= set(dims), "an unlimited dimension is not a dimension of the variable")
    _need(isinstance(metadata["dtype"], str) and _DTYPE_RE.fullmatch(metadata["dtype"]), "bad dtype")
    dtype = np.dtype(metadata["dtype"]).newbyteorder("=")
    attrs = _decode_attrs(metadata["attrs"], "attrs")
    coords_obj = metadata.get("coords", {})
    _need(isinstance(coords_obj, dict), "coords is not an object")
    coords = {}
    for cname, c in coords_obj.items():
        what = f"coordinate {cname!r}"
        _need(cname in dims and cname != name, f"{what} is not a dimension of the variable")
        _need(isinstance(c, dict) and _names(c.get("dims"), f"{what} dims") == (cname,), f"{what} has bad dims")
        values = _decode(c.get("data"), f"{what} data")
        _need(isinstance(values, np.ndarray) and values.ndim == 1, f"{what} is not a 1-D array")
        coords[cname] = Coordinate(values, _decode_attrs(c.get("attrs", {}), f"{what} attrs"))
    desc = Description(name, dims, dtype, attrs, coords, _decode_attrs(metadata.get("global_attrs", {}),
                                                                       "global_attrs"), unlimited)
    _repacking(desc)
    return desc


def _repacking(desc: Description) -> _Rules | None:
    """The rules that repack a described integer variable; None for a float variable (written
    as decoded, whatever its attributes say).

    Raises:
        CorruptStreamError: an integer variable without valid CF packing.
    """
    if desc.dtype.kind == "f":
        return None
    try:
        return _Rules.of(desc.attrs, desc.dtype)
    except (InvalidInputError, UnsupportedDtypeError) as exc:
        raise CorruptStreamError(f"CF metadata: {exc}") from exc


# ---------------------------------------------------------------------------- reading
@dataclass
class Variable:
    """A variable ready for :func:`strata.compress`.

    Attributes:
        data: float32/float64 array, the variable's shape, native byte order: the stored values,
            or the unpacked ones (CF 8.1) for packed data, in the variable's units.
        mask: bool array of ``data``'s shape, ``True`` at missing points (CF 2.5.1), or None
            when no point is missing.
        fill_value: the value the missing points of float data hold (``_FillValue``, else the
            first ``missing_value``, else the netCDF default fill), a scalar of ``data``'s
            dtype, or None (no marker, or packed data: missing points are NaN there).
        metadata: the description to keep in the stream (see :class:`Description`), or None.
        packing: the CF packing of the stored data, or None.
    """

    data: np.ndarray
    mask: np.ndarray | None = None
    fill_value: np.floating | None = None
    metadata: dict | None = None
    packing: Packing | None = None

    def compress(self, *, abs_error=None, rel_error=None, progress=None, enhance=None, target=None,
                 objective="ratio", progressive=None, layers=None) -> bytes:
        """:func:`strata.lossy.compress` with this variable's mask, fill value and metadata
        (:func:`strata.enhance.compress` with ``enhance="1x"`` or ``"2x"``; with ``target``, a
        ``(metric, value)`` pair such as ``("psnr", 60)``,
        :func:`strata.quality.compress_to_target`; with ``progressive="precision"``, precision
        layers, :func:`strata.lossy.compress_layers`, ``layers`` their coarser bounds);
        ``objective`` as in :func:`strata.lossy.compress`, with a bound only.

        For packed data the bound is tightened so that repacking on write keeps it (see the
        module's docstring); the stream's header gives the bound in force.

        Raises:
            InvalidInputError, UnsupportedDtypeError: as :func:`strata.lossy.compress`
                (metadata above 4 MiB of JSON included); precision layers of packed data
                (their bounds would each need the packing's tightening).
        """
        from .lossy import compress, compress_layers

        if progressive is not None:
            if self.packing is not None:
                raise InvalidInputError("precision layers are not supported for packed (scale_factor) data")
            return compress_layers(self.data, abs_error=abs_error, rel_error=rel_error, layers=layers, mask=self.mask,
                                   fill_value=self.fill_value, metadata=self.metadata, objective=objective,
                                   progress=progress)

        if objective != "ratio" and (target is not None or enhance is not None):
            raise InvalidInputError("objective applies to a bound, without a quality target or enhance")
        if target is not None:
            if self.packing is not None:
                raise InvalidInputError("a quality target is not supported for packed (scale_factor) data")
            from . import compress as to_target

            return to_target(self.data, mask=self.mask, fill_value=self.fill_value, metadata=self.metadata,
                             **{f"target_{target[0]}": target[1]})
        if self.packing is not None:
            abs_error, rel_error = self.packing.safe_bound(self.data, abs_error, rel_error)
        if enhance is not None:
            from .enhance import compress as enhanced

            return enhanced(self.data, abs_error=abs_error, rel_error=rel_error, enhance=enhance, mask=self.mask,
                            fill_value=self.fill_value, metadata=self.metadata)
        return compress(self.data, abs_error=abs_error, rel_error=rel_error, mask=self.mask,
                        fill_value=self.fill_value, metadata=self.metadata, objective=objective, progress=progress)


def read_variable(path, name: str, *, cf: bool = True) -> Variable:
    """Read variable ``name`` of a NetCDF file (netCDF4, or h5py for netCDF-4 files when netCDF4
    is not installed) or dataset ``name`` of an HDF5 file (h5py).

    Args:
        path: ``.nc``/``.nc4``/``.cdf`` or ``.h5``/``.hdf5``/``.he5`` file.
        name: variable name (a path like ``"group/var"`` in groups).
        cf: apply the CF conventions (missing values, packing: see the module's docstring);
            False reads the stored values, which must then be float32/float64.

    Returns:
        A :class:`Variable` (its ``metadata`` describes the variable either way).

    Raises:
        InvalidInputError: unknown file type, unreadable file, no such variable, malformed
            CF attributes; ImportError's message when netCDF4/h5py is missing.
        UnsupportedDtypeError: not floating point (see the module's docstring).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in NETCDF_SUFFIXES + HDF5_SUFFIXES:
        raise InvalidInputError(f"{path.name}: not a NetCDF ({'/'.join(NETCDF_SUFFIXES)}) or HDF5 "
                                f"({'/'.join(HDF5_SUFFIXES)}) file")
    try:
        if suffix in NETCDF_SUFFIXES and _module("netCDF4", optional=True) is not None:
            desc, stored, default_fill = _read_netcdf4(path, name)
        else:
            desc, stored, default_fill = _read_h5py(path, name)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path.name}: {exc}") from exc
    where = f"{path.name}: variable {name!r}"
    stored = stored.astype(stored.dtype.newbyteorder("="), copy=False)
    metadata = desc.to_json()
    if not cf:
        if stored.dtype.kind != "f":
            raise UnsupportedDtypeError(f"{where} holds {stored.dtype} values, not floating point"
                                        + (" (packed data: read it with the CF conventions)"
                                           if "scale_factor" in desc.attrs or "add_offset" in desc.attrs else ""))
        return Variable(np.ascontiguousarray(stored), metadata=metadata)
    try:
        rules = _Rules.of(desc.attrs, stored.dtype, default_fill)
    except StrataError as exc:
        raise type(exc)(f"{where}: {exc}") from exc
    missing = rules.missing(stored)
    mask = missing if missing.any() else None
    if rules.packing is not None:
        packing = replace(rules.packing, max_steps=rules.max_steps(stored, missing))
        return Variable(packing.unpack(stored, missing), mask, None, metadata, packing)
    fill = rules.markers[0] if rules.markers.size else None
    return Variable(np.ascontiguousarray(stored), mask, fill, metadata)


def _module(name: str, optional: bool = False):
    try:
        return __import__(name)
    except ImportError as exc:
        if optional:
            return None
        raise InvalidInputError(f"NetCDF/HDF5 files need {name}: pip install 'strata[io]'") from exc


def _read_netcdf4(path: Path, name: str):
    netCDF4 = _module("netCDF4")
    with netCDF4.Dataset(path) as ds:
        try:
            v = ds[name]
        except (IndexError, KeyError):
            v = None
        if not isinstance(v, netCDF4.Variable):
            raise InvalidInputError(f"{path.name} has no variable {name!r}; it has {list(ds.variables)}")
        if not isinstance(v.dtype, np.dtype):
            raise UnsupportedDtypeError(f"{path.name}: variable {name!r} holds {v.dtype} values, not numbers")
        v.set_auto_maskandscale(False)
        stored = np.asarray(v[...])
        attrs = {k: v.getncattr(k) for k in v.ncattrs()}
        default_fill = None if "_FillValue" in attrs else v.get_fill_value()
        coords = {}
        for dim in v.dimensions:
            c = _netcdf4_lookup(v.group(), dim)
            if c is not None and c.dimensions == (dim,) and c is not v and isinstance(c.dtype, np.dtype):
                c.set_auto_maskandscale(False)
                coords[dim] = Coordinate(np.asarray(c[...]), {k: c.getncattr(k) for k in c.ncattrs()})
        desc = Description(v.name, tuple(v.dimensions), v.dtype, attrs, coords,
                           {k: ds.getncattr(k) for k in ds.ncattrs()},
                           tuple(d.name for d in v.get_dims() if d.isunlimited()))
    return desc, stored, default_fill


def _netcdf4_lookup(group, name: str):
    """The variable ``name`` seen from ``group`` (netCDF scoping: this group, then its parents)."""
    while group is not None:
        if name in group.variables:
            return group.variables[name]
        group = group.parent
    return None


def _read_h5py(path: Path, name: str):
    h5py = _module("h5py")
    with h5py.File(path, "r") as f:
        d = f.get(name)
        if not isinstance(d, h5py.Dataset):
            raise InvalidInputError(f"{path.name} has no dataset {name!r}")
        if d.dtype.kind not in "iuf":
            raise UnsupportedDtypeError(f"{path.name}: dataset {name!r} holds {d.dtype} values, not numbers")
        stored = np.asarray(d[()])
        dims, coords = [], {}
        for i, dim in enumerate(d.dims):
            scale = dim[0] if len(dim) else None
            dname = dim.label or (scale.name.rsplit("/", 1)[-1] if scale is not None else f"dim_{i}")
            dims.append(dname)
            if (scale is not None and scale.ndim == 1 and scale != d and scale.dtype.kind in "iuf"
                    and not np.asarray(scale.attrs.get("NAME", b"")).tobytes().startswith(_NOT_A_VARIABLE)):
                coords[dname] = Coordinate(np.asarray(scale[()]), _h5py_attrs(scale.attrs))
        desc = Description(d.name.rsplit("/", 1)[-1], tuple(dims), d.dtype, _h5py_attrs(d.attrs), coords,
                           _h5py_attrs(f.attrs))
        # the dataset's own fill value counts only when it was set (h5py's default is 0)
        defined = d.id.get_create_plist().fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
        default_fill = d.fillvalue if defined else None
    return desc, stored, default_fill


def _h5py_attrs(attrs) -> dict:
    out = {}
    for key in attrs:
        if key in _INTERNAL_ATTRS:
            continue
        try:
            value = attrs[key]
        except (OSError, TypeError, ValueError):
            warnings.warn(f"HDF5 attribute {key!r} cannot be read and is not kept", stacklevel=3)
            continue
        # netCDF does not tell a scalar from a 1-element attribute; netCDF4 reads both as scalars
        out[key] = value[0] if isinstance(value, np.ndarray) and value.shape == (1,) else value
    return out


# ---------------------------------------------------------------------------- writing
@contextmanager
def netcdf_output(path, nbytes: int, *, replace: bool = True):
    """A temporary path beside ``path`` for a netCDF-C writer (netCDF4, xarray's ``netcdf4``
    engine), renamed to ``path`` when the block succeeds and removed when it fails
    (:func:`strata.atomic.atomic_path`), whose storage errors say what happened.

    netCDF-C reports a failed write of the HDF5 layer (a full disk, a file size limit) as
    ``RuntimeError("NetCDF: HDF error")``, without the system's error number. When the block
    raises a ``RuntimeError``, the partial file is measured before it is removed: if the process
    may not write a file that large (``RLIMIT_FSIZE``) or the file system has less space free
    than the file still needed (``nbytes`` less what was written, plus
    :data:`HDF5_OVERHEAD_BYTES`), the error becomes that ``OSError``. Any other error is raised
    as it was.

    Args:
        path: the NetCDF file to write.
        nbytes: the size of the values to be written, in bytes (the file's expected size less
            its HDF5 structures).
        replace: replace an existing ``path`` (default); False: raise ``FileExistsError``
            instead (:func:`strata.atomic.atomic_path`).

    Yields:
        The temporary path (``str``).

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false.
        OSError: ``ENOSPC`` (no space left on the device) or ``EFBIG`` (file size limit),
            naming ``path`` and giving the sizes and netCDF-C's message; ``path`` is left as it
            was.
    """
    path = Path(path)
    with atomic_path(path, replace=replace) as tmp:
        try:
            yield str(tmp)
        except RuntimeError as exc:
            cause = _storage_error(Path(tmp), path, nbytes, exc)
            if cause is None:
                raise
            raise cause from exc


def _storage_error(tmp: Path, path: Path, nbytes: int, exc: RuntimeError) -> OSError | None:
    """The ``OSError`` behind netCDF-C's failed write of ``tmp``, or None when neither the file
    size limit nor the free space explains it."""
    written = tmp.stat().st_size if tmp.exists() else 0
    needed = max(int(nbytes) - written, 0) + HDF5_OVERHEAD_BYTES
    try:
        import resource
    except ImportError:  # not a Unix system: no file size limit to check
        resource = None
    if resource is not None:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and written + needed > limit:
            return OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)} (this process may write files of {limit} "
                                        f"bytes at most, the file holds {nbytes} bytes of values; netCDF-C "
                                        f"reported: {exc})", str(path))
    free = shutil.disk_usage(tmp.parent).free
    if free < needed:
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free} bytes free on its file system after "
                                     f"{written} bytes of the file, which holds {nbytes} bytes of values; "
                                     f"netCDF-C reported: {exc})", str(path))
    return None


def write_netcdf(path, array, metadata=None, *, fill_value=None, index=None, replace: bool = True) -> None:
    """Write a decoded variable to a NETCDF4 file, atomically (a temporary file in the same
    folder, then a rename).

    Args:
        path: output file.
        array: float32/float64 array or ``numpy.ma.MaskedArray`` (masked = missing), as
            :meth:`strata.lossy.LossyReader.read` returns with ``masked=True``.
        metadata: the stream's metadata: CF metadata (:class:`Description`) rebuilds the
            variable (name, dims, stored type with repacking, attributes, ``_FillValue``,
            coordinates, global attributes); otherwise a variable ``data`` with dimensions
            ``dim_0, dim_1, ...`` is written, its missing points set to ``fill_value`` (NaN when
            None) and declared as ``_FillValue``.
        fill_value: see ``metadata``.
        index: tuple of slices (one per leading axis) that selected ``array`` from the full
            variable (a region, or a level's grid): the coordinates are sliced the same way.
        replace: replace an existing ``path`` (default); False: raise ``FileExistsError``
            instead, checked before writing and again at the rename.

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false.
        CorruptStreamError: CF metadata that is invalid or does not fit ``array`` (number of
            dimensions, coordinate lengths).
        InvalidInputError: netCDF4 cannot write a name or attribute; bad ``index``.
        OSError: the file could not be written: ``ENOSPC`` for a full disk, ``EFBIG`` past the
            process's file size limit (see :func:`netcdf_output`); nothing is left at ``path``.
    """
    netCDF4 = _module("netCDF4")
    path = Path(path)
    data = np.ma.getdata(array)
    missing = np.ma.getmaskarray(array) | np.isnan(data)
    desc = parse_metadata(metadata)
    if desc is None:
        fill = data.dtype.type(np.nan if fill_value is None else fill_value)
        desc = Description("data", tuple(f"dim_{i}" for i in range(data.ndim)), data.dtype,
                           {"_FillValue": fill} if missing.any() else {})
        stored = np.where(missing, fill, data)
    else:
        _need(len(desc.dims) == data.ndim, f"{len(desc.dims)} dimensions for data of shape {data.shape}")
        rules = _repacking(desc)
        if rules is None:
            stored = data.astype(desc.dtype, copy=False)
        else:
            stored = rules.packing.pack(data, missing, rules.low, rules.high)
    coords = _sliced(desc, index, data.shape)
    nbytes = stored.nbytes + sum(c.values.nbytes for c in coords.values())
    try:
        with netcdf_output(path, nbytes, replace=replace) as tmp, netCDF4.Dataset(tmp, "w", format="NETCDF4") as ds:
            _set_attrs(ds, desc.global_attrs)
            for dim, n in zip(desc.dims, data.shape):
                ds.createDimension(dim, None if dim in desc.unlimited else n)
            for cname, c in coords.items():
                _create(ds, cname, (cname,), c.values, c.attrs)
            _create(ds, desc.name, desc.dims, stored, desc.attrs)
    except (RuntimeError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidInputError(f"cannot write {path.name}: {exc}") from exc


def to_netcdf(source, path, *, level: int | None = None, region=None) -> None:
    """Decode a stream (bytes, path or binary file object) and write it with
    :func:`write_netcdf`: all of it, a full-resolution preview from levels ``0..level``, or a
    ``region`` (integers in it keep their axis, as length-1 dimensions).

    Raises:
        FormatError, CorruptStreamError, TruncatedStreamError: a damaged stream or metadata.
        InvalidInputError: bad ``level``/``region``; netCDF4 cannot write a name or attribute.
        OSError: the file could not be written (a full disk: ``ENOSPC``).
    """
    from .lossy import LossyReader

    region = keep_axes(region)
    with LossyReader(source) as r:
        write_netcdf(path, r.read(level=level, region=region, masked=True), r.metadata,
                     fill_value=r.fill_value, index=region)


def keep_axes(region):
    """``region`` (numpy basic indexing: a tuple of slices and integers, or None) with each
    integer ``i`` made the slice ``i:i+1``, so that a NetCDF variable keeps every dimension."""
    if region is None:
        return None
    region = region if isinstance(region, tuple) else (region,)
    return tuple(slice(i, i + 1 or None) if isinstance(i, (int, np.integer)) else i for i in region)


def _sliced(desc: Description, index, shape) -> dict[str, Coordinate]:
    index = () if index is None else tuple(index)
    if len(index) > len(shape) or not all(isinstance(s, slice) for s in index):
        raise InvalidInputError(f"index must be a tuple of at most {len(shape)} slices, not {index!r}")
    out = {}
    for axis, dim in enumerate(desc.dims):
        c = desc.coords.get(dim)
        if c is None:
            continue
        values = c.values[index[axis]] if axis < len(index) else c.values
        _need(values.shape == (shape[axis],), f"coordinate {dim!r} has {values.size} values for "
                                              f"a dimension of {shape[axis]}")
        out[dim] = Coordinate(values, c.attrs)
    return out


def _create(ds, name: str, dims, values: np.ndarray, attrs: dict) -> None:
    v = ds.createVariable(name, values.dtype, dims, fill_value=attrs.get("_FillValue"))
    v.set_auto_maskandscale(False)
    _set_attrs(v, {k: a for k, a in attrs.items() if k != "_FillValue"})
    v[...] = values


def _set_attrs(obj, attrs: dict) -> None:
    for key, value in attrs.items():
        if isinstance(value, list):
            obj.setncattr_string(key, value)
        else:
            obj.setncattr(key, value)
