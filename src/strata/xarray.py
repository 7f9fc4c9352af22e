"""xarray integration: the per-variable encoding that writes a Dataset to zarr with strata.

::

    import xarray as xr
    import strata.xarray

    ds = xr.open_dataset("in.nc", chunks={})                      # lazy, dask-backed
    enc = strata.xarray.encoding(ds, rel_error=1e-3)             # bounds resolved once per variable
    ds.to_zarr("out.zarr", encoding=enc, zarr_format=3)
    back = xr.open_zarr("out.zarr")                              # lazy; a box reads only its chunks

With ``layers`` (``encoding(ds, rel_error=1e-6, layers=[1e-2, 1e-4])``) every chunk holds
precision layers, and :func:`open_zarr` reads the store at a coarser bound, fetching from each
chunk only the layers that bound needs: ``strata.xarray.open_zarr("out.zarr", rel_error=1e-2)``.

CF attributes, coordinates and fill values are kept by xarray itself: coordinates and
non-float variables are not given the lossy codec (zarr's default lossless codecs store them);
a variable's ``_FillValue`` (or ``missing_value``) goes into the codec configuration, so the
points xarray encodes with it are missing and decode to their exact bits.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import chunk_codec
from .chunk_codec import ChunkConfig
from .errors import InvalidInputError

#: Encoding keys xarray's CF coder reads, carried over from the variable's own encoding.
_CF_KEYS = ("_FillValue", "missing_value", "dtype")


def lossy_variables(ds) -> list[str]:
    """Names of the data variables (not coordinates) stored as float32/float64 that are not
    packed integers: the variables :func:`encoding` compresses by default."""
    return [str(name) for name, var in ds.data_vars.items() if _stored_float(var)]


def _stored_float(var) -> bool:
    stored = np.dtype(var.encoding.get("dtype", var.dtype))
    return stored.kind == "f" and stored.itemsize in (4, 8) and var.dtype.kind == "f"


def fill_value(var):
    """The value xarray writes in place of the variable's missing points (its CF
    ``_FillValue``, else ``missing_value``), or ``None``."""
    for source in (var.encoding, var.attrs):
        for key in ("_FillValue", "missing_value"):
            value = source.get(key)
            if value is not None:
                value = np.asarray(value).reshape(-1)
                if value.size and np.issubdtype(value.dtype, np.number) and not np.isnan(value[0]):
                    return float(value[0])
    return None


def encoding(ds, *, rel_error=None, abs_error=None, variables=None, zarr_format: int = 3,
             objective: str = "ratio", layers=None) -> dict:
    """Encoding for ``ds.to_zarr(..., encoding=...)`` compressing float variables with strata.

    Args:
        ds: an ``xarray.Dataset`` (numpy- or dask-backed).
        rel_error: value-range-relative bound, a number or ``{name: number}``: each variable's
            absolute bound is ``rel_error * (max - min)`` over its whole valid range, computed
            once over the whole variable (lazily, chunk by chunk, for dask-backed data), never
            per chunk; the codec configuration stores it with the range it came from.
        abs_error: absolute bound (the variable's unit), a number or ``{name: number}``.
        variables: names to compress (default: :func:`lossy_variables`); each must be a float
            variable, and with a mapping bound, a key of it.
        zarr_format: 3 (the strata codec is the serializer) or 2 (it is the numcodecs
            compressor, :class:`strata.numcodecs.Strata`); pass the same ``zarr_format`` to
            ``to_zarr``.
        objective: the compressor's tuning objective, ``"ratio"`` or ``"psnr"``
            (:func:`strata.lossy.compress`), kept in each codec's configuration.
        layers: bounds of precision layers coarser than the bound, of its kind (relative
            bounds resolved per variable as ``rel_error`` is), or None for plain chunks
            (:mod:`strata.lossy.layers`).

    Returns:
        ``{name: {"serializer": StrataCodec, "compressors": None, "filters": None}}`` (zarr v3)
        or ``{name: {"compressors": Strata, "filters": None}}`` (zarr v2: the keys xarray
        takes with zarr-python 3 in both formats), plus the variable's own ``_FillValue``,
        ``missing_value`` and ``dtype`` encoding (xarray replaces a variable's encoding by the
        one given to ``to_zarr``).

    Raises:
        InvalidInputError: neither or both bounds, an unknown or non-float variable, a variable
            with no bound in a mapping, or a relative bound for a variable with no valid value.
    """
    if (rel_error is None) == (abs_error is None):
        raise InvalidInputError("give exactly one of rel_error and abs_error")
    if zarr_format not in (2, 3):
        raise InvalidInputError(f"zarr_format must be 2 or 3, not {zarr_format!r}")
    bound = rel_error if rel_error is not None else abs_error
    names = lossy_variables(ds) if variables is None else [str(v) for v in variables]
    out = {}
    for name in names:
        if name not in ds.variables:
            raise InvalidInputError(f"no variable {name!r} in the dataset")
        var = ds.variables[name]
        if not _stored_float(var):
            raise InvalidInputError(f"variable {name!r} is stored as {var.encoding.get('dtype', var.dtype)}: the "
                                    "lossy codec takes float32/float64 variables (packed integers are kept lossless)")
        value = bound.get(name) if isinstance(bound, Mapping) else bound
        if value is None:
            raise InvalidInputError(f"no bound given for variable {name!r}")
        fill = fill_value(var)
        if rel_error is not None:
            try:
                config = chunk_codec.resolve_rel_error(var.data, value, fill, objective, layers)
            except InvalidInputError as exc:
                raise InvalidInputError(f"variable {name!r}: {exc}") from exc
        else:
            config = ChunkConfig(value, fill, objective=objective, layers=None if layers is None else tuple(layers))
        out[name] = _codec_encoding(config, zarr_format)
        # xarray replaces a variable's encoding by the one given: keep its CF encoding keys
        out[name].update({k: var.encoding[k] for k in _CF_KEYS if k in var.encoding})
    return out


def open_zarr(store, *, error_bound=None, rel_error=None, **kwargs):
    """``xarray.open_zarr`` of ``store`` with its strata variables read at a coarser bound
    (:class:`strata.zarr.ErrorBoundStore`: ``error_bound`` absolute, or ``rel_error`` of each
    variable's recorded valid range), fetching from chunks in precision layers only the layers
    that bound needs; ``kwargs`` go to ``xarray.open_zarr``.

    Raises:
        InvalidInputError: as :class:`strata.zarr.ErrorBoundStore` (when the variables'
            metadata are read).
    """
    import xarray as xr

    from .zarr import ErrorBoundStore

    return xr.open_zarr(ErrorBoundStore.of(store, error_bound=error_bound, rel_error=rel_error), **kwargs)


def _codec_encoding(config: ChunkConfig, zarr_format: int) -> dict:
    if zarr_format == 3:
        from .zarr import StrataCodec

        return {"serializer": StrataCodec(**config.to_json()), "compressors": None, "filters": None}
    from .numcodecs import Strata

    return {"compressors": Strata(**config.to_json()), "filters": None}
