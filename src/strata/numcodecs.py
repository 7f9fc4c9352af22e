"""strata as a numcodecs codec (``codec_id = "strata"``), for zarr v2 stores, HDF5 through
numcodecs and anything else that speaks numcodecs.

Registered through the ``numcodecs.codecs`` entry point, so once strata is installed::

    import numcodecs
    codec = numcodecs.get_codec({"id": "strata", "abs_error": 0.1})
    blob = codec.encode(array)          # float32/float64 n-d array -> bytes
    back = codec.decode(blob)           # -> ndarray of the original shape and dtype

The codec needs the array's shape: give it the n-d array (zarr v2 passes each chunk as an
array). Given flat bytes it cannot know the geometry and raises ``InvalidInputError`` rather
than compress a flattened chunk badly. Configuration: :class:`strata.chunk_codec.ChunkConfig`
(an absolute bound; resolve a relative one over the whole array with :meth:`Strata.for_array`).
Method: STZ (SC'25) streaming interpolation compressor, see :mod:`strata.lossy`.
"""
from __future__ import annotations

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ndarray_copy

from . import chunk_codec
from .chunk_codec import ChunkConfig
from .errors import InvalidInputError


class Strata(Codec):
    """numcodecs codec: error-bounded lossy compression of float32/float64 n-d arrays.

    Args:
        abs_error: absolute error bound (>= 0, the data's unit) of every decoded valid value.
        fill_value: optional; values equal to it are missing and decode to their exact bits
            (NaN always is).
        rel_error, valid_range: provenance only (written by :meth:`for_array`).

    Raises:
        InvalidInputError: bad configuration (unknown keys, version, bounds), flat bytes to
            encode, or an ``out`` buffer of the wrong size.
        UnsupportedDtypeError: the array is not float32/float64.
        CorruptStreamError, TruncatedStreamError, FormatError: a damaged stream.
    """

    codec_id = "strata"

    def __init__(self, abs_error: float | None = None, fill_value: float | None = None,
                 rel_error: float | None = None, valid_range=None, version: int = chunk_codec.CONFIG_VERSION):
        self.config = ChunkConfig.from_arguments(abs_error, fill_value, rel_error, valid_range, version)

    @classmethod
    def for_array(cls, data, rel_error: float, fill_value=None) -> Strata:
        """A codec whose bound is ``rel_error`` times ``data``'s whole valid range."""
        return cls(**chunk_codec.resolve_rel_error(data, rel_error, fill_value).to_json())

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
        if not isinstance(buf, np.ndarray) or buf.dtype == np.uint8 and buf.ndim == 1:
            raise InvalidInputError(
                "the strata codec needs the chunk as a float n-d array, not flat bytes (its predictor uses the "
                "chunk's shape)")
        return self.config.encode(buf)

    def decode(self, buf, out=None):
        arr = chunk_codec.decode(memoryview(ensure_contiguous_ndarray(buf).reshape(-1).view(np.uint8)))
        if out is None:
            return arr
        if np.asarray(out).nbytes != arr.nbytes:
            raise InvalidInputError(f"out holds {np.asarray(out).nbytes} bytes, the decoded chunk {arr.nbytes}")
        return ndarray_copy(arr, out)
