"""strata as a numcodecs codec (``codec_id = "strata"``), for zarr v2 stores and anything else
that speaks numcodecs.

Registered through the ``numcodecs.codecs`` entry point, so once strata is installed::

    import numcodecs
    codec = numcodecs.get_codec({"id": "strata", "abs_error": 0.1})
    blob = codec.encode(array)          # float32/float64 n-d array -> bytes
    back = codec.decode(blob)           # -> ndarray of the original shape, dtype and order

The codec needs the chunk's shape and float dtype: give it the n-d array (zarr v2 passes each
chunk as one), or any object exporting it through the buffer protocol (a float
``memoryview``, an ``array.array('f')``: numcodecs' ``ensure_ndarray``). Flat bytes carry
neither, so they are refused rather than compressed badly. Configuration:
:class:`strata.chunk_codec.ChunkConfig` (an absolute bound; resolve a relative one over the
whole array with :meth:`Strata.for_array`).

Layouts: the stream holds the chunk's values by element (C order, little-endian). A chunk
given in Fortran order or big-endian (zarr v2 with ``order="F"``, a ``>f4`` store) adds a small
metadata object to its stream, ``{"format": "strata.numcodecs/1", "descr": ">f4",
"fortran_order": true}`` (the fields of numpy's ``.npy`` header), so that :meth:`Strata.decode`
gives back the dtype and memory order it was given: zarr v2 reads a decoded chunk's memory in
its array's order, as it does for every numcodecs compressor.

HDF5: there is no HDF5 filter for strata (an HDF5 filter is compiled C registered with the HDF5
library; numcodecs codecs are Python, and h5py cannot call them as filters). Store strata
streams in HDF5 as opaque byte datasets, or use zarr.

Method: STZ (SC'25) streaming interpolation compressor, see :mod:`strata.lossy`.
"""
from __future__ import annotations

import math

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ensure_ndarray

from . import chunk_codec
from .chunk_codec import ChunkConfig
from .errors import CorruptStreamError, InvalidInputError, UnsupportedDtypeError

#: ``format`` of the metadata object recording a chunk's layout.
LAYOUT_FORMAT = "strata.numcodecs/1"
_DESCRS = ("<f4", ">f4", "<f8", ">f8")


class Strata(Codec):
    """numcodecs codec: error-bounded lossy compression of float32/float64 n-d arrays.

    Args:
        abs_error: absolute error bound (>= 0, the data's unit) of every decoded valid value.
        fill_value: optional; values equal to it are missing and decode to their exact bits
            (NaN always is).
        rel_error, valid_range: provenance only (written by :meth:`for_array`).
        objective: the compressor's tuning objective, ``"ratio"`` (default) or ``"psnr"``
            (:func:`strata.lossy.compress`); written to the configuration only when not the
            default, and not needed to decode.
        layers: absolute bounds of precision layers coarser than ``abs_error``: every chunk is
            then a stream readable at any of them (:mod:`strata.lossy.layers`).
        read_error_bound: decode chunks at this coarser absolute bound (reading only the
            layers it needs of a chunk in layers); None: the finest.

    Raises:
        InvalidInputError: bad configuration (unknown keys, version, bounds).
    """

    codec_id = "strata"

    def __init__(self, abs_error: float | None = None, fill_value: float | None = None,
                 rel_error: float | None = None, valid_range=None, version: int = chunk_codec.CONFIG_VERSION,
                 objective: str | None = None, layers=None, read_error_bound: float | None = None):
        self.config = ChunkConfig.from_arguments(abs_error, fill_value, rel_error, valid_range, version, objective,
                                                 layers, read_error_bound)

    @classmethod
    def for_array(cls, data, rel_error: float, fill_value=None, objective: str = "ratio", layers=None) -> Strata:
        """A codec whose bound is ``rel_error`` times ``data``'s whole valid range (and
        ``layers``, relative bounds of precision layers, resolved the same way)."""
        return cls(**chunk_codec.resolve_rel_error(data, rel_error, fill_value, objective, layers).to_json())

    def get_config(self) -> dict:
        return {"id": self.codec_id, **self.config.to_json()}

    @classmethod
    def from_config(cls, config: dict) -> Strata:
        config = dict(config)
        config.pop("id", None)
        return cls(**ChunkConfig.from_json(config).to_json())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.to_json().items() if k != "version")
        return f"Strata({args})"

    def encode(self, buf) -> bytes:
        """Compress one chunk.

        Args:
            buf: float32/float64 array of any shape, byte order and memory layout (views and
                non-contiguous arrays included), or an object exporting one through the buffer
                protocol (a float ``memoryview``, ``array.array('f')``).

        Returns:
            The chunk's strata stream.

        Raises:
            UnsupportedDtypeError (a ``TypeError``): ``buf`` exports no buffer (a list), holds
                flat bytes, or values that are not float32/float64 (object arrays included).
        """
        try:
            arr = ensure_ndarray(buf)
        except TypeError as exc:
            raise UnsupportedDtypeError(f"the strata codec encodes float32/float64 arrays (or objects exporting "
                                        f"one through the buffer protocol), not {type(buf).__name__}") from exc
        if arr.dtype.itemsize == 1 and not isinstance(buf, np.ndarray):
            raise UnsupportedDtypeError(
                f"the strata codec needs the chunk as a float32/float64 n-d array, not flat bytes "
                f"({type(buf).__name__} of {arr.nbytes} bytes): its predictor uses the chunk's shape and type")
        chunk_codec.check_dtype(arr.dtype)
        return self.config.encode(arr, metadata=_layout_metadata(arr))

    def decode(self, buf, out=None):
        """Decompress one chunk.

        Args:
            buf: the stream (any contiguous bytes-like object).
            out: optional destination, checked against the stream's header before anything is
                decoded: an array of the chunk's shape and a float dtype of its width (filled
                by element, by value: any memory order or byte order, views included); a
                contiguous float array of the chunk's size and another shape, or a contiguous
                byte buffer of the chunk's size in bytes (filled in the memory order and byte
                order the chunk was encoded from, numcodecs' convention for flat buffers).

        Returns:
            The chunk, in the dtype and memory order it was encoded from; ``out`` (as an
            ndarray sharing its memory) when given.

        Raises:
            UnsupportedDtypeError (a ``TypeError``): ``out`` is an object array or exports no
                buffer.
            InvalidInputError: ``out`` is read-only or cannot hold the chunk.
            CorruptStreamError, TruncatedStreamError, FormatError: a damaged stream, or not a
                strata stream.
        """
        data = ensure_contiguous_ndarray(buf).view(np.uint8)
        with chunk_codec.reading(memoryview(data)) as r:
            dtype, fortran = _layout(r)
            shape = tuple(r.shape)
            dest = None if out is None else _destination(out, shape, dtype)
            values = r.read(error_bound=self.config.read_error_bound)
        order = "F" if fortran else "C"
        if dest is None:
            return values.astype(dtype, order=order, copy=False)
        if dest.shape == shape:
            dest[...] = values
        elif dest.dtype.itemsize == dtype.itemsize:
            dest.reshape(-1, order="A")[...] = values.reshape(-1, order=order)
        else:
            raw = values.astype(dtype, order=order, copy=False).reshape(-1, order="A").view(np.uint8)
            dest.reshape(-1, order="A").view(np.uint8)[...] = raw
        return dest


def _layout_metadata(arr: np.ndarray) -> dict | None:
    """The layout record of a chunk not given as a C-ordered native array (``None`` for one):
    numpy's ``.npy`` header fields, ``fortran_order`` as ``numpy.save`` sets it."""
    fortran = bool(arr.flags.f_contiguous and not arr.flags.c_contiguous)
    if not fortran and arr.dtype.isnative:
        return None
    return {"format": LAYOUT_FORMAT, "descr": arr.dtype.str, "fortran_order": fortran}


def _layout(reader) -> tuple[np.dtype, bool]:
    """``(dtype, fortran_order)`` the chunk of ``reader`` was encoded from.

    Raises:
        CorruptStreamError: a layout record that is malformed or does not fit the stream.
    """
    meta = reader.metadata
    if meta is None or meta.get("format") != LAYOUT_FORMAT:
        return reader.dtype, False
    descr, fortran = meta.get("descr"), meta.get("fortran_order")
    if (set(meta) != {"format", "descr", "fortran_order"} or descr not in _DESCRS or not isinstance(fortran, bool)
            or np.dtype(descr).newbyteorder("=") != reader.dtype):
        raise CorruptStreamError(f"layout record {meta!r} does not fit a {reader.dtype} chunk")
    return np.dtype(descr), fortran


def _destination(out, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """``out`` as an ndarray, checked to hold a chunk of ``shape`` and ``dtype``."""
    try:
        dest = ensure_ndarray(out)
    except TypeError as exc:
        raise UnsupportedDtypeError(f"out must export a buffer, not {type(out).__name__}") from exc
    if dest.dtype == object:
        raise UnsupportedDtypeError("cannot decode into an object array (it holds pointers, not values)")
    if not dest.flags.writeable:
        raise InvalidInputError("out is read-only")
    size = math.prod(shape)
    contiguous = dest.flags.c_contiguous or dest.flags.f_contiguous
    same_float = dest.dtype.kind == "f" and dest.dtype.itemsize == dtype.itemsize
    if (same_float and (dest.shape == shape or (dest.size == size and contiguous))
            or dest.dtype.itemsize == 1 and dest.nbytes == size * dtype.itemsize and contiguous):
        return dest
    raise InvalidInputError(
        f"out ({dest.dtype}, shape {dest.shape}, {dest.nbytes} bytes{'' if contiguous else ', not contiguous'}) "
        f"cannot hold the chunk ({dtype.name}, shape {shape}): give an array of that shape and a float dtype of "
        f"{dtype.itemsize} bytes, or a contiguous buffer of {size * dtype.itemsize} bytes")
