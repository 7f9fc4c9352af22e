"""strata as a zarr v3 codec: the array-to-bytes **serializer**, one strata stream per chunk.

A shape-aware lossy codec belongs in zarr's serializer slot: it receives each chunk as an
n-d array (views and non-contiguous chunks included) instead of flattened bytes, so the
interpolation predictor sees the chunk's real geometry. Use it with no bytes-to-bytes
compressor after it (the stream is already entropy-coded and checksummed)::

    import zarr
    from strata.zarr import StrataCodec

    z = zarr.create_array(store, shape=data.shape, chunks=(24, 256, 256), dtype="f4",
                          serializer=StrataCodec(abs_error=0.01), compressors=None)
    z[:] = data

The codec is registered under the name ``"strata.lossy"`` through the ``zarr.codecs`` entry
point, so a store written with it opens wherever strata is installed. Its configuration is
:class:`strata.chunk_codec.ChunkConfig`'s JSON (an absolute bound; a relative bound is resolved
once against the whole array by :meth:`StrataCodec.for_array` or
:func:`strata.xarray.encoding`, never per chunk). Missing values: NaN, the configuration's
``fill_value`` and the array's own fill value, all decoded to their exact original bits.
Big-endian arrays (``dtype=">f4"``) are compressed by value; zarr v3 stores their data type as
``float32``/``float64`` (byte order is the serializer's business) and reads them back native.

Partial decoding: reading a box of a chunk fetches the chunk's stream once (one store read
per chunk) and decodes only the strata chunks the box needs (zarr's
``ArrayBytesCodecPartialDecodeMixin``; zarr uses it when no other codec follows this one).

Method: STZ (SC'25) streaming interpolation compressor, see :mod:`strata.lossy`.
"""
from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from zarr.abc.codec import ArrayBytesCodec, ArrayBytesCodecPartialDecodeMixin
from zarr.storage import WrapperStore

from . import chunk_codec
from .chunk_codec import ChunkConfig
from .errors import InvalidInputError
from .lossy import layers

if TYPE_CHECKING:
    from zarr.abc.store import ByteGetter
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

#: The codec's name in zarr metadata (``{"name": "strata.lossy", "configuration": {...}}``).
NAME = "strata.lossy"


@dataclass(frozen=True)
class StrataCodec(ArrayBytesCodecPartialDecodeMixin, ArrayBytesCodec):
    """zarr v3 array-to-bytes codec writing one error-bounded strata stream per chunk.

    Args:
        abs_error: absolute error bound (>= 0, the data's unit) met by every decoded valid
            value of every chunk.
        fill_value: optional; values equal to it are missing (e.g. a CF ``_FillValue`` that
            differs from the zarr array's fill value).
        rel_error, valid_range: provenance only (written by :meth:`for_array`).
        objective: the compressor's tuning objective, ``"ratio"`` (default) or ``"psnr"``
            (:func:`strata.lossy.compress`); written to the configuration only when not the
            default, and not needed to decode.
        layers: absolute bounds of precision layers coarser than ``abs_error``: every chunk is
            then a stream readable at any of them (:mod:`strata.lossy.layers`).
        read_error_bound: decode chunks at this coarser absolute bound, fetching from each
            chunk in layers only the layers it needs (:class:`ErrorBoundStore` sets it on a
            whole store); None: the finest.

    Raises:
        InvalidInputError: a missing, negative or non-finite bound, a relative bound given
            without an absolute one, unknown configuration keys or version (``from_dict``).
        UnsupportedDtypeError: the array is not float32/float64 (either byte order; raised
            when the array is created or a chunk is written).
        CorruptStreamError, TruncatedStreamError, FormatError: a damaged chunk on read; the
            message starts with the chunk's store key.
    """

    is_fixed_size = False
    config: ChunkConfig

    def __init__(self, abs_error: float | None = None, *, fill_value: float | None = None,
                 rel_error: float | None = None, valid_range=None, version: int = chunk_codec.CONFIG_VERSION,
                 objective: str | None = None, layers=None, read_error_bound: float | None = None):
        object.__setattr__(self, "config", ChunkConfig.from_arguments(abs_error, fill_value, rel_error, valid_range,
                                                                      version, objective, layers, read_error_bound))

    @classmethod
    def for_array(cls, data, rel_error: float, fill_value=None, objective: str = "ratio", layers=None) -> StrataCodec:
        """A codec whose bound is ``rel_error`` times ``data``'s whole valid range (numpy or
        dask array, reduced once; see :func:`strata.chunk_codec.resolve_rel_error`), and
        ``layers`` (relative bounds of precision layers) resolved the same way."""
        return cls._from_config(chunk_codec.resolve_rel_error(data, rel_error, fill_value, objective, layers))

    @classmethod
    def _from_config(cls, config: ChunkConfig) -> StrataCodec:
        return cls(**config.to_json())

    # ------------------------------------------------------------------ metadata
    @classmethod
    def from_dict(cls, data: dict) -> StrataCodec:
        if not isinstance(data, dict) or data.get("name") != NAME:
            raise InvalidInputError(f"not a {NAME} codec description: {data!r}")
        unknown = set(data) - {"name", "configuration"}
        if unknown:
            raise InvalidInputError(f"unknown keys in a {NAME} codec description: {sorted(unknown)}")
        return cls._from_config(ChunkConfig.from_json(data.get("configuration", {})))

    def to_dict(self) -> dict:
        return {"name": NAME, "configuration": self.config.to_json()}

    def validate(self, *, shape, dtype, chunk_grid) -> None:
        chunk_codec.check_dtype(dtype.to_native_dtype())

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError("strata streams have a data-dependent size")

    # ------------------------------------------------------------------ coding
    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer:
        data = self.config.encode(chunk_array.as_numpy_array(), chunk_spec.fill_value)
        return chunk_spec.prototype.buffer.from_bytes(data)

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec, selection=None, name: str = "chunk"):
        out = chunk_codec.decode(memoryview(chunk_bytes.as_numpy_array()), chunk_spec.dtype.to_native_dtype(),
                                 chunk_spec.shape, selection, name=name, error_bound=self.config.read_error_bound)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(out)

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._encode_sync, chunk_array, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    async def _decode_partial_single(self, byte_getter: ByteGetter, selection, chunk_spec: ArraySpec):
        chunk_bytes = await _fetch(byte_getter, chunk_spec, self.config.read_error_bound)
        if chunk_bytes is None:
            return None
        box, rest = _bounding_box(selection, chunk_spec.shape)
        name = str(getattr(byte_getter, "path", "chunk"))
        out = await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec, box, name)
        return out if rest is None else out[rest]


#: The keys of zarr metadata documents (v3, v2 array, v2 consolidated) :class:`ErrorBoundStore` rewrites.
METADATA_KEYS = ("zarr.json", ".zarray", ".zmetadata")


class ErrorBoundStore(WrapperStore):
    """A read-only view of a zarr store (v3 or v2) whose strata arrays are read at a coarser
    error bound: the strata codec configurations in the metadata it serves get a
    ``read_error_bound`` (:class:`strata.chunk_codec.ChunkConfig`), so zarr, xarray and dask
    read every strata chunk at that bound, fetching from a chunk in precision layers only the
    layers it needs (:func:`_fetch`). Other arrays read as stored.

    Args:
        store: the zarr store (a ``zarr.abc.store.Store``; :meth:`of` takes a path too).
        error_bound: absolute bound for every strata array, or
        rel_error: bound relative to each array's recorded ``valid_range`` (arrays written with
            a relative bound: :meth:`StrataCodec.for_array`, :func:`strata.xarray.encoding`).

    Raises:
        InvalidInputError: neither or both bounds, or a bound that is not a non-negative
            number; when an array's metadata are read: a ``rel_error`` for an array without a
            recorded range, or a bound below an array's finest (its ``abs_error``).
    """

    def __init__(self, store, *, error_bound=None, rel_error=None):
        super().__init__(store)
        if (error_bound is None) == (rel_error is None):
            raise InvalidInputError("give exactly one of error_bound and rel_error")
        value = error_bound if error_bound is not None else rel_error
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
            raise InvalidInputError(f"the read bound must be a number >= 0, got {value!r}")
        self._bound = tuple(None if v is None else float(v) for v in (error_bound, rel_error))

    @classmethod
    def of(cls, store, *, error_bound=None, rel_error=None) -> ErrorBoundStore:
        """:class:`ErrorBoundStore` of a store or a path (opened read-only as a
        ``zarr.storage.LocalStore``)."""
        if isinstance(store, (str, os.PathLike)):
            from zarr.storage import LocalStore

            store = LocalStore(store, read_only=True)
        return cls(store, error_bound=error_bound, rel_error=rel_error)

    def _with_store(self, store) -> ErrorBoundStore:
        return type(self)(store, error_bound=self._bound[0], rel_error=self._bound[1])

    @property
    def read_only(self) -> bool:
        """Always True: a view for reading."""
        return True

    def _check_writable(self) -> None:
        raise InvalidInputError("an ErrorBoundStore is a read-only view of a store")

    async def set(self, key, value) -> None:
        """Refused (:class:`strata.errors.InvalidInputError`): a view for reading."""
        self._check_writable()

    async def set_if_not_exists(self, key, value) -> None:
        """Refused (:class:`strata.errors.InvalidInputError`): a view for reading."""
        self._check_writable()

    async def delete(self, key) -> None:
        """Refused (:class:`strata.errors.InvalidInputError`): a view for reading."""
        self._check_writable()

    async def get(self, key, prototype, byte_range=None):
        """The wrapped store's value of ``key``; a metadata document (:data:`METADATA_KEYS`) with
        ``read_error_bound`` added to its strata codec configurations."""
        buf = await self._store.get(key, prototype, byte_range)
        if buf is None or byte_range is not None or key.rsplit("/", 1)[-1] not in METADATA_KEYS:
            return buf
        doc = json.loads(buf.to_bytes())
        _with_read_bound(doc, *self._bound)
        return prototype.buffer.from_bytes(json.dumps(doc).encode())

    def __repr__(self) -> str:
        return f"ErrorBoundStore({self._store!r}, error_bound={self._bound[0]}, rel_error={self._bound[1]})"


def _with_read_bound(doc, error_bound: float | None, rel_error: float | None) -> None:
    """Add ``read_error_bound`` to every strata codec configuration in the JSON ``doc`` (v3
    ``{"name": "strata.lossy", "configuration": ...}``, v2 ``{"id": "strata", ...}``), in place."""
    if isinstance(doc, list):
        for item in doc:
            _with_read_bound(item, error_bound, rel_error)
        return
    if not isinstance(doc, dict):
        return
    config = doc.get("configuration") if doc.get("name") == NAME else doc if doc.get("id") == "strata" else None
    if isinstance(config, dict):
        e = error_bound
        if e is None:
            vr = config.get("valid_range")
            if not isinstance(vr, list) or len(vr) != 2:
                raise InvalidInputError("rel_error needs each strata array's recorded valid_range: an array written "
                                        "with an absolute bound has none (give error_bound)")
            e = rel_error * (float(vr[1]) - float(vr[0]))
        config["read_error_bound"] = e
        ChunkConfig.from_json({k: v for k, v in config.items() if k != "id"})  # (checked now, not per chunk)
        return
    for value in doc.values():
        _with_read_bound(value, error_bound, rel_error)


async def _fetch(byte_getter: ByteGetter, chunk_spec: ArraySpec, error_bound: float | None):
    """A chunk's bytes: all of them, or, read at ``error_bound``, the head of a chunk in
    precision layers and then the prefix holding the layers that bound needs (two range
    requests, three for a header of many layers; a plain chunk is fetched whole by a second
    request)."""
    from zarr.abc.store import RangeByteRequest

    proto = chunk_spec.prototype
    if error_bound is None:
        return await byte_getter.get(prototype=proto)
    head = await byte_getter.get(prototype=proto, byte_range=RangeByteRequest(0, layers.HEAD_BYTES))
    if head is None:
        return None
    end = layers.header_end(head.to_bytes())
    if end is not None and end > len(head) == layers.HEAD_BYTES:  # (a header of many layers)
        head = await byte_getter.get(prototype=proto, byte_range=RangeByteRequest(0, end))
    n = layers.prefix_length(head.to_bytes(), error_bound)
    if n is not None and n <= len(head):
        return head if n == len(head) else proto.buffer.from_bytes(head.to_bytes()[:n])
    if n is None and len(head) < layers.HEAD_BYTES:
        return head  # (the whole chunk already)
    return await byte_getter.get(prototype=proto, byte_range=None if n is None else RangeByteRequest(0, n))


def _bounding_box(selection, shape):
    """Split a chunk selection into a basic-indexing box the reader decodes and the rest of
    the selection applied to that box (``None`` when the box is the selection)."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    if all(isinstance(s, (int, np.integer, slice)) for s in selection):
        return selection, None
    box, rest = [], []
    for i, n in enumerate(shape):
        s = selection[i] if i < len(selection) else slice(None)
        if isinstance(s, (int, np.integer)):
            box.append(slice(int(s), int(s) + 1))
            rest.append(0)
        elif isinstance(s, np.ndarray) and s.dtype != bool and s.size:
            lo = int(s.min())
            box.append(slice(lo, int(s.max()) + 1))
            rest.append(s - lo)
        else:
            box.append(s if isinstance(s, slice) else slice(0, n))
            rest.append(slice(None) if isinstance(s, slice) else s)
    return tuple(box), tuple(rest)
