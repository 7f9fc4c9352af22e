"""One strata stream per chunk: the configuration and chunk coding shared by the zarr v3
codec (:mod:`strata.zarr`) and the numcodecs codec (:mod:`strata.numcodecs`).

A chunked store must hold one error bound for the whole array: a value-range-relative bound
computed per chunk would give every chunk its own bound (numcodecs #812 / zarr-python #3557
report exactly this surprise with other lossy codecs). So a codec configuration holds an
**absolute** bound; :func:`resolve_rel_error` turns a relative bound into one against the
whole array's valid range (computed once, lazily with dask for dask arrays) and the
configuration records both for provenance.

Configuration (JSON, version 1)::

    {"abs_error": 0.01,            # required, finite, >= 0 (same unit as the data)
     "fill_value": -9999.0,        # optional: values equal to it are missing (CF _FillValue)
     "rel_error": 0.001,           # optional, provenance: the relative bound it came from
     "valid_range": [lo, hi],      # optional, provenance: the range it was resolved against
     "objective": "psnr",          # optional: the compressor's tuning objective, "ratio" when absent
     "layers": [1.0, 0.1],         # optional: precision layers at these coarser absolute bounds
     "read_error_bound": 0.1,      # optional, reading only: decode at this coarser absolute bound
     "version": 1}

With ``layers`` every chunk is a stream in precision layers (:mod:`strata.lossy.layers`): the
bounds given, then ``abs_error``. ``read_error_bound`` is a reader's choice, not the store's:
:class:`strata.zarr.ErrorBoundStore` adds it to the configurations a store's metadata holds, so
that zarr, xarray and dask read the whole store at that bound, fetching from each chunk only the
layers it needs (a plain chunk is read whole, and must hold that bound or a finer one).

Missing values of a chunk (decoded to their exact original bits, see
:mod:`strata.lossy.missing`): NaN, values equal to the configuration's ``fill_value`` and
values equal to the array's own fill value (zarr's ``fill_value``, which zarr also returns
for chunks never written).
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .errors import CorruptStreamError, FormatError, InvalidInputError, UnsupportedDtypeError
from .lossy import compress, compress_layers, open_array
from .lossy.tune import check_objective

#: Version of the configuration written by this strata.
CONFIG_VERSION = 1
_KEYS = {"abs_error", "fill_value", "rel_error", "valid_range", "objective", "layers", "read_error_bound", "version"}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: Values reduced at a time by :func:`valid_range` for a numpy array.
_SLAB = 1 << 22


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInputError(f"{what} must be a number, not {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise InvalidInputError(f"{what} must be finite, got {value}")
    return value


@dataclass(frozen=True)
class ChunkConfig:
    """Validated codec configuration (see the module docstring for the JSON form).

    Attributes:
        abs_error: absolute error bound of every valid value, in the data's unit.
        fill_value: values equal to it are missing (besides NaN and the array's fill value).
        rel_error: provenance: the value-range-relative bound ``abs_error`` was resolved from.
        valid_range: provenance: ``(min, max)`` of the whole array's valid values.
        objective: the compressor's tuning objective (:func:`strata.lossy.compress`):
            ``"ratio"`` (default) or ``"psnr"``; decoding does not depend on it.
        layers: absolute bounds (coarser than ``abs_error``, decreasing) of precision layers
            before the finest, or None for plain streams.
        read_error_bound: the absolute bound chunks are decoded at (at least ``abs_error``),
            or None: the finest.
    """

    abs_error: float
    fill_value: float | None = None
    rel_error: float | None = None
    valid_range: tuple[float, float] | None = None
    objective: str = "ratio"
    layers: tuple[float, ...] | None = None
    read_error_bound: float | None = None

    def __post_init__(self):
        abs_error = _number(self.abs_error, "abs_error")
        if abs_error < 0:
            raise InvalidInputError(f"abs_error must be >= 0, got {abs_error}")
        object.__setattr__(self, "abs_error", abs_error)
        if self.fill_value is not None:
            object.__setattr__(self, "fill_value", _number(self.fill_value, "fill_value"))
        if self.rel_error is not None:
            object.__setattr__(self, "rel_error", _number(self.rel_error, "rel_error"))
        if self.valid_range is not None:
            vr = self.valid_range
            if not isinstance(vr, (list, tuple)) or len(vr) != 2:
                raise InvalidInputError(f"valid_range must be [min, max], not {vr!r}")
            object.__setattr__(self, "valid_range", (_number(vr[0], "valid_range"), _number(vr[1], "valid_range")))
        check_objective(self.objective)
        if self.layers is not None:
            if not isinstance(self.layers, (list, tuple)) or not self.layers:
                raise InvalidInputError(f"layers must be a non-empty list of bounds, not {self.layers!r}")
            layers = tuple(_number(b, "a layer bound") for b in self.layers)
            if any(b <= abs_error for b in layers) or any(a <= b for a, b in zip(layers, layers[1:])):
                raise InvalidInputError(f"layers must decrease and stay above abs_error, got {list(layers)}")
            object.__setattr__(self, "layers", layers)
        if self.read_error_bound is not None:
            e = _number(self.read_error_bound, "read_error_bound")
            if e < abs_error:
                raise InvalidInputError(f"read_error_bound {e} is below abs_error {abs_error}: no chunk holds it")
            object.__setattr__(self, "read_error_bound", e)

    @classmethod
    def from_arguments(cls, abs_error=None, fill_value=None, rel_error=None, valid_range=None,
                       version=CONFIG_VERSION, objective=None, layers=None, read_error_bound=None) -> ChunkConfig:
        """The configuration of the codecs' keyword arguments (``None``: not given), validated
        as :meth:`from_json` does."""
        given = {"abs_error": abs_error, "fill_value": fill_value, "rel_error": rel_error,
                 "valid_range": valid_range, "objective": objective, "layers": layers,
                 "read_error_bound": read_error_bound, "version": version}
        return cls.from_json({k: v for k, v in given.items() if v is not None})

    @classmethod
    def from_json(cls, config: dict) -> ChunkConfig:
        """Validate a configuration dict.

        Raises:
            InvalidInputError: not a dict, an unknown key, a version other than 1, no
                ``abs_error``, or a value of the wrong kind. A ``rel_error`` without
                ``abs_error`` is refused: a relative bound must be resolved against the whole
                array first (:func:`resolve_rel_error`, :func:`strata.xarray.encoding`).
        """
        if not isinstance(config, dict):
            raise InvalidInputError(f"a strata codec configuration is a dict, not {type(config).__name__}")
        unknown = set(config) - _KEYS
        if unknown:
            raise InvalidInputError(f"unknown strata codec configuration keys: {sorted(unknown)}")
        version = config.get("version", CONFIG_VERSION)
        if isinstance(version, bool) or version != CONFIG_VERSION:
            raise InvalidInputError(f"strata codec configuration version {version!r} is not supported "
                                    f"(this strata reads version {CONFIG_VERSION})")
        if "abs_error" not in config:
            if "rel_error" in config:
                raise InvalidInputError(
                    "a strata codec needs an absolute bound: resolve rel_error against the whole array's valid "
                    "range with strata.chunk_codec.resolve_rel_error or strata.xarray.encoding (a per-chunk "
                    "relative bound would give every chunk its own bound)")
            raise InvalidInputError("a strata codec configuration needs abs_error")
        return cls(config["abs_error"], config.get("fill_value"), config.get("rel_error"), config.get("valid_range"),
                   config.get("objective", "ratio"), config.get("layers"), config.get("read_error_bound"))

    def to_json(self) -> dict:
        """The configuration as a JSON-serializable dict (keys in a fixed order)."""
        out = {"abs_error": self.abs_error}
        if self.fill_value is not None:
            out["fill_value"] = self.fill_value
        if self.rel_error is not None:
            out["rel_error"] = self.rel_error
        if self.valid_range is not None:
            out["valid_range"] = list(self.valid_range)
        if self.objective != "ratio":  # (absent for the default: configurations as before)
            out["objective"] = self.objective
        if self.layers is not None:
            out["layers"] = list(self.layers)
        if self.read_error_bound is not None:
            out["read_error_bound"] = self.read_error_bound
        out["version"] = CONFIG_VERSION
        return out

    def encode(self, chunk: np.ndarray, array_fill_value=None, metadata: dict | None = None) -> bytes:
        """Compress one chunk (any float32/float64 array of either byte order, C or Fortran
        order, views and non-contiguous arrays included) to a strata lossy stream.

        The stream holds the chunk's values by element in C order and little-endian, whatever
        the layout given (see :func:`strata.lossy.compress`).

        Args:
            chunk: the chunk's values, shape and dtype kept in the stream.
            array_fill_value: the array's own fill value; values equal to it are missing.
            metadata: a JSON object kept in the stream (:attr:`strata.lossy.LossyReader.metadata`).

        Raises:
            UnsupportedDtypeError: ``chunk`` is not float32/float64 (a lossy codec for
                integers or booleans would be a surprise: store those losslessly).
        """
        chunk = np.asarray(chunk)
        check_dtype(chunk.dtype)
        mask = None
        fills = [f for f in (self.fill_value, array_fill_value) if _usable_fill(f, chunk.dtype)]
        if len(fills) == 2 and chunk.dtype.type(fills[0]) != chunk.dtype.type(fills[1]):
            mask = chunk == chunk.dtype.type(fills[1])
        fill = fills[0] if fills else None
        if self.layers is not None:
            return compress_layers(chunk, abs_error=self.abs_error, layers=self.layers, fill_value=fill, mask=mask,
                                   metadata=metadata, objective=self.objective)
        return compress(chunk, abs_error=self.abs_error, fill_value=fill, mask=mask, metadata=metadata,
                        objective=self.objective)


def _usable_fill(value, dtype: np.dtype) -> bool:
    """A fill value that marks missing points (NaN is missing anyway)."""
    if value is None:
        return False
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    if math.isnan(v):
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(dtype.type(v)) or math.isinf(v))


def check_dtype(dtype) -> np.dtype:
    """``dtype`` if it is float32 or float64, in either byte order (a big-endian chunk is
    compressed by value and decoded back to the dtype its array declares).

    Raises:
        UnsupportedDtypeError: any other dtype.
    """
    dtype = np.dtype(dtype)
    if dtype.newbyteorder("=") not in _DTYPES:
        hint = ": store integer and bool arrays with a lossless codec" if dtype.kind in "biu" else ""
        raise UnsupportedDtypeError(f"the strata lossy codec takes float32/float64 arrays, not {dtype}{hint}")
    return dtype


@contextmanager
def reading(data, name: str = "chunk", partial: bool = False):
    """A reader on one chunk's stream (:func:`strata.lossy.open_array`: a
    :class:`strata.lossy.LossyReader`, or a :class:`strata.lossy.LayeredReader` for a chunk in
    precision layers; its header read and checked, nothing decoded yet); a
    :class:`FormatError` raised in the block names the chunk.

    Args:
        data: the stream (bytes-like).
        name: how errors name the chunk (its store key).
        partial: the stream may be the prefix of a chunk in precision layers that a read at a
            coarse bound fetched (:class:`strata.lossy.LayeredReader`).

    Raises:
        FormatError, TruncatedStreamError, CorruptStreamError: not a strata stream, or a
            damaged one; the message starts with ``name``.
    """
    try:
        with open_array(data, partial=partial) as r:
            yield r
    except FormatError as exc:
        raise type(exc)(f"{name}: {exc}") from exc


def decode(data, dtype, shape, selection=None, *, name: str = "chunk", error_bound: float | None = None) -> np.ndarray:
    """Decode one chunk's stream, checking it is a chunk of this array.

    Args:
        data: the stream (bytes-like).
        dtype, shape: the chunk's dtype and shape, as its array declares them. The stream
            holds native float32/float64: a ``dtype`` of the other byte order (e.g. ``>f4``)
            is given back by value.
        selection: a tuple of slices and integers (numpy basic indexing) into the chunk:
            only the strata chunks it needs are decoded (see
            :meth:`strata.lossy.LossyReader.read`); ``None`` decodes the whole chunk.
        name: how errors name the chunk (its store key).
        error_bound: decode at this absolute bound (the layers it needs of a chunk in precision
            layers); None: the finest the chunk holds.

    Returns:
        ndarray of ``dtype`` (C order): the chunk, or ``chunk[selection]``.

    Raises:
        CorruptStreamError: the stream is damaged, or of another dtype or shape (the error
            names the chunk); FormatError: not a strata stream.
        InvalidInputError: ``error_bound`` is below the finest bound the chunk holds.
    """
    dtype, shape = np.dtype(dtype), tuple(shape)
    with reading(data, name, partial=error_bound is not None) as r:
        if r.dtype != dtype.newbyteorder("=") or tuple(r.shape) != shape:
            raise CorruptStreamError(f"holds a {r.dtype} array of shape {tuple(r.shape)}, the array's chunk "
                                     f"is {dtype} of shape {shape}")
        return r.read(region=selection, error_bound=error_bound).astype(dtype, copy=False)


def resolve_rel_error(data, rel_error: float, fill_value=None, objective: str = "ratio", layers=None) -> ChunkConfig:
    """A configuration whose absolute bound is ``rel_error`` times the valid range of the
    whole array (never per chunk).

    Args:
        data: numpy array, dask array or anything ``numpy.asarray`` takes; a dask array is
            reduced lazily, chunk by chunk, in one pass computing min and max together.
        rel_error: value-range-relative bound (>= 0).
        fill_value: values equal to it are missing (NaN is missing, and +-Inf is not valid).
        objective: the compressor's tuning objective (:class:`ChunkConfig`).
        layers: relative bounds of precision layers coarser than ``rel_error`` (resolved the
            same way), or None.

    Returns:
        :class:`ChunkConfig` with ``abs_error = rel_error * (max - min)``, ``rel_error``,
        ``valid_range``, ``fill_value``, ``objective`` and the absolute ``layers``.

    Raises:
        InvalidInputError: a bad ``rel_error``, or no valid value at all (a relative bound
            means nothing then); UnsupportedDtypeError: not float32/float64.
    """
    rel = _number(rel_error, "rel_error")
    if rel < 0:
        raise InvalidInputError(f"rel_error must be >= 0, got {rel}")
    check_dtype(data.dtype)
    lo, hi = valid_range(data, fill_value)
    if lo is None:
        raise InvalidInputError("a relative bound needs valid values: this array has none (all missing or +-Inf)")
    eb = rel * (hi - lo)
    if not math.isfinite(eb):
        raise InvalidInputError("value range times rel_error overflows float64")
    absolute = None if layers is None else sorted((_number(b, "a layer bound") * (hi - lo) for b in layers),
                                                  reverse=True)
    return ChunkConfig(eb, fill_value, rel, (lo, hi), objective, absolute)


def _valid_only(block: np.ndarray, fill_value) -> np.ndarray:
    """``block`` as float64 with NaN in place of missing, +-Inf and fill values."""
    out = np.asarray(block, dtype=np.float64)
    bad = ~np.isfinite(out)
    if fill_value is not None:
        bad |= block == block.dtype.type(fill_value)
    return np.where(bad, np.nan, out)


def valid_range(data, fill_value=None) -> tuple[float | None, float | None]:
    """``(min, max)`` of the finite values not equal to ``fill_value``, ``(None, None)``
    when there are none; lazy and chunk-wise for a dask array."""
    if fill_value is not None and not _usable_fill(fill_value, np.dtype(data.dtype)):
        fill_value = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks
        if type(data).__module__.startswith("dask"):
            import dask
            import dask.array as da

            valid = da.map_blocks(_valid_only, data, fill_value, dtype=np.float64)
            lo, hi = dask.compute(da.nanmin(valid), da.nanmax(valid))
        else:  # slab by slab: the float64 copy stays small
            flat = np.asarray(data).reshape(-1)
            lo = hi = np.nan
            for start in range(0, flat.size, _SLAB):
                valid = _valid_only(flat[start:start + _SLAB], fill_value)
                lo, hi = np.fmin(lo, np.nanmin(valid)), np.fmax(hi, np.nanmax(valid))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None, None
    return float(lo), float(hi)


__all__ = ["CONFIG_VERSION", "ChunkConfig", "check_dtype", "decode", "reading", "resolve_rel_error",
           "valid_range"]
