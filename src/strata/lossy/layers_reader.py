"""Reading a stream in precision layers (:mod:`strata.lossy.layers`) at any error bound, level and
region, and refining a read to a finer bound with the layers it lacks."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..container import KIND_LAYERS, Source, SourceLike, stream_kind, unpack_header
from ..errors import CorruptStreamError, InvalidInputError, ResourceLimitError, TruncatedStreamError
from . import selection
from .layers import parse_header
from .reader import LevelInfo, LossyReader, check_bound, output_limit


@dataclass(frozen=True)
class LayerInfo:
    """One precision layer of a stream.

    Attributes:
        index: 0 for the coarsest layer.
        error_bound: absolute bound on every valid value of a read through this layer.
        compressed_bytes: bytes of this layer's stream.
        offset: byte offset of its stream (layers are laid out coarse to fine: a whole read
            through layer ``k`` fetches ``[0, offset + compressed_bytes)``).
    """

    index: int
    error_bound: float
    compressed_bytes: int
    offset: int


@dataclass(frozen=True)
class Retrieval:
    """The result of :meth:`LayeredReader.retrieve`, which :meth:`LayeredReader.refine` takes.

    Attributes:
        values: the decoded values (the stream's dtype; missing values and infinities hold
            their original bits), of the region's shape, the level's grid or the whole array.
        mask: bool array of the same shape, True where a value is missing.
        error_bound: absolute bound on every valid value (on a preview, ``level`` below the
            last with ``full_resolution``, on the points of the level's grid only).
        layers: number of layers read (``0 .. layers - 1``).
        level, region, full_resolution: what was read (``region`` canonical, or None).
    """

    values: np.ndarray
    mask: np.ndarray
    error_bound: float
    layers: int
    level: int
    region: tuple | None
    full_resolution: bool
    #: float64 sum of the layers' values, 0 where not valid
    total: np.ndarray = field(repr=False)
    #: where the values are valid (finite and not missing in layer 0)
    valid: np.ndarray = field(repr=False)

    def masked(self) -> np.ma.MaskedArray:
        """The values as a ``numpy.ma.MaskedArray`` masking the missing ones."""
        return np.ma.MaskedArray(self.values, mask=self.mask)


class LayeredReader:
    """Reader of a stream in precision layers held in bytes, a file, or a file object.

    Args:
        source: the stream: ``bytes``-like, a path, or a seekable binary file object.
        partial: accept a prefix of the stream that holds its first layers whole (what a reader
            at a coarse bound fetched: :func:`strata.lossy.layers.prefix_length`); a read that
            needs a layer beyond it raises ``TruncatedStreamError``.

    Raises:
        FormatError: not a layered stream, or an unsupported version.
        TruncatedStreamError: the stream is shorter than its header says (with ``partial``:
            shorter than its first layer).
        CorruptStreamError: a checksum mismatch, or layers that disagree (shape, dtype, bounds).
    """

    def __init__(self, source: SourceLike, *, partial: bool = False):
        self._src = source if isinstance(source, Source) else Source(source)
        try:
            raw, off = unpack_header(self._src, KIND_LAYERS)
            entries, self._snap = parse_header(raw)
            self._header_bytes = off
            self._layers = []
            for k, (bound, n) in enumerate(entries):
                self._layers.append(LayerInfo(k, bound, n, off))
                off += n
            self._held = sum(lay.offset + lay.compressed_bytes <= self._src.size for lay in self._layers)
            if self._held < (1 if partial else len(self._layers)):
                raise TruncatedStreamError(f"stream truncated: its layers need {off} bytes, it has {self._src.size}")
            self._readers: list[LossyReader | None] = [None] * len(entries)
            self._first = self._reader(0)
            self._last_level = len(self._first.levels) - 1  # (the full-resolution level; -1 for an empty array)
        except BaseException:
            self._src.close()
            raise

    def _reader(self, k: int) -> LossyReader:
        """Layer ``k``'s stream, opened on first use and checked against layer 0.

        Raises:
            TruncatedStreamError: a partial stream that does not hold layer ``k``."""
        if k >= self._held:
            raise TruncatedStreamError(f"layer {k} (bound {self._layers[k].error_bound:g}) is not in the "
                                       f"{self._src.size} bytes held")
        if self._readers[k] is None:
            info = self._layers[k]
            r = LossyReader(self._src.part(info.offset, info.compressed_bytes, f"layer {k}"))
            h = r.header
            exact = self._snap is not None and k == len(self._layers) - 1
            if (h.eb >= self._snap[1] / 2) if exact else (h.eb > info.error_bound):
                raise CorruptStreamError(f"layer {k} is coded at bound {h.eb:g}, above its layer bound "
                                         f"{info.error_bound:g}" + (" (half a step of its lattice)" if exact else ""))
            if k:
                first = self._first.header
                if h.shape != first.shape or h.missing_count or h.exact_len:
                    raise CorruptStreamError(f"layer {k} is not a residual of the first layer's shape without missing "
                                             "or exact values")
                if (h.order, h.flat) != (first.order, first.flat):
                    raise CorruptStreamError(f"layer {k} has other levels than the first layer")
            self._readers[k] = r
        return self._readers[k]

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return self._first.shape

    @property
    def dtype(self) -> np.dtype:
        return self._first.dtype

    @property
    def error_bound(self) -> float:
        """The finest bound: that of a read of every layer."""
        return self._layers[-1].error_bound

    @property
    def guaranteed_error(self) -> float:
        """Bound on ``|x - y|`` of every valid value of a full read (:attr:`error_bound`)."""
        return self.error_bound

    @property
    def layers(self) -> list[LayerInfo]:
        """The layers, coarse to fine."""
        return list(self._layers)

    @property
    def header_bytes(self) -> int:
        """Bytes of the container's preamble and header (read by every read)."""
        return self._header_bytes

    @property
    def levels(self) -> list[LevelInfo]:
        """Resolution levels of the first layer (every layer has the same grids: the bounds
        of a read through layer ``k`` are that layer's bound, its bytes those of each layer
        read)."""
        return self._first.levels

    @property
    def missing_count(self) -> int:
        return self._first.missing_count

    @property
    def fill_value(self):
        return self._first.fill_value

    @property
    def mask_bytes(self) -> int:
        """Bytes of the missing-value mask (held by the first layer alone)."""
        return self._first.mask_bytes

    @property
    def valid_range(self) -> tuple[float, float] | None:
        return self._first.valid_range

    @property
    def metadata(self) -> dict | None:
        return self._first.metadata

    @property
    def header(self):
        """The first layer's lossy header (shape, dtype, settings)."""
        return self._first.header

    def settings_text(self) -> str:
        """The first layer's predictor settings in words."""
        return self._first.settings_text()

    def layer_for(self, error_bound: float | None = None) -> int:
        """Index of the coarsest layer whose bound is at most ``error_bound`` (None: the last).

        Raises:
            InvalidInputError: ``error_bound`` is not a number, or below the finest bound.
        """
        if error_bound is None:
            return len(self._layers) - 1
        e = check_bound(error_bound, self.error_bound)
        return next(info.index for info in self._layers if info.error_bound <= e)

    def close(self) -> None:
        self._src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ reading
    def bytes_for(self, level: int | None = None, region=None, *, error_bound: float | None = None,
                  full_resolution: bool = True) -> int:
        """Bytes of the stream a :meth:`read` with these arguments fetches: the container's
        header and, in every layer it reads, what :meth:`strata.lossy.LossyReader.bytes_for`
        says. Refining a read to a finer bound fetches the difference of the two.

        Raises:
            InvalidInputError: as :meth:`read` says.
            CorruptStreamError, TruncatedStreamError: a layer's header, a level head or mask
                index is damaged.
        """
        k = self.layer_for(error_bound)
        return self._header_bytes + sum(self._reader(j).bytes_for(level, region, full_resolution=full_resolution)
                                        for j in range(k + 1))

    def read(self, level: int | None = None, region=None, *, error_bound: float | None = None,
             full_resolution: bool = True, masked: bool = False, progress=None, max_output_bytes: int | None = None,
             enhance: bool = True) -> np.ndarray:
        """Decode the data within ``error_bound``: the layers down to the first whose bound is at
        most it (:meth:`layer_for`), each for ``level`` and ``region`` only. The arguments are
        :meth:`strata.lossy.LossyReader.read`'s, in its order.

        Args:
            level, region, full_resolution, masked, max_output_bytes: as
                :meth:`strata.lossy.LossyReader.read` (a level's grid, or a region, of every
                layer read; ``max_output_bytes`` bounds each layer's read and the sums).
            error_bound: absolute bound the valid values must meet, from the coarsest layer's
                bound (or above) down to :attr:`error_bound`; None: the finest.
            progress: optional callable ``progress(done, total)`` after each layer.
            enhance: ignored (precision layers carry no enhancement network).

        Returns:
            ndarray of the stream's dtype (a ``numpy.ma.MaskedArray`` with ``masked=True``):
            every valid value within the bound of the last layer read (on a preview, at the
            points of the level's grid); missing values and infinities bit for bit.

        Raises:
            InvalidInputError: ``error_bound`` below the finest bound or not a number; as
                :meth:`strata.lossy.LossyReader.read` for the others.
            ResourceLimitError: the read would hold more than ``max_output_bytes``.
            CorruptStreamError, TruncatedStreamError: the bytes needed are damaged.
        """
        got = self.retrieve(level, region, error_bound=error_bound, full_resolution=full_resolution,
                            max_output_bytes=max_output_bytes, progress=progress)
        return got.masked() if masked else got.values

    def retrieve(self, level: int | None = None, region=None, *, error_bound: float | None = None,
                 full_resolution: bool = True, max_output_bytes: int | None = None, progress=None) -> Retrieval:
        """:meth:`read`, as a :class:`Retrieval` that :meth:`refine` can take to a finer bound."""
        k = self.layer_for(error_bound)
        first = self._first.read(level, region, full_resolution=full_resolution, masked=True,
                                 max_output_bytes=max_output_bytes, enhance=False)
        values, mask = np.ma.getdata(first), np.ma.getmaskarray(first)
        valid = ~mask & np.isfinite(values)
        total = np.where(valid, values.astype(np.float64), 0.0) if k else np.zeros(0)
        level = max(self._last_level, 0) if level is None else level
        region = selection.canonical(region, self.shape) if region is not None else None
        got = Retrieval(values, mask, self._layers[0].error_bound, 1, level, region, full_resolution, total, valid)
        if progress is not None:
            progress(1, k + 1)
        return self._add(got, k, max_output_bytes, progress)

    def refine(self, previous: Retrieval, error_bound: float | None = None, *, max_output_bytes: int | None = None,
               progress=None) -> Retrieval:
        """``previous`` (a :class:`Retrieval` of this stream) refined to ``error_bound`` by
        reading and adding only the layers it lacks: the same level and region, the values a
        :meth:`retrieve` at that bound returns, bit for bit. ``previous`` is left as it was.

        Raises:
            InvalidInputError: ``previous`` is not a retrieval of this stream's shape, or
                ``error_bound`` is below the finest bound.
            ResourceLimitError, CorruptStreamError, TruncatedStreamError: as :meth:`read`.
        """
        if not isinstance(previous, Retrieval) or not 1 <= previous.layers <= len(self._layers):
            raise InvalidInputError("previous must be a Retrieval of this stream (LayeredReader.retrieve)")
        k = self.layer_for(error_bound)
        if k < previous.layers:
            return previous
        return self._add(previous, k, max_output_bytes, progress)

    def _add(self, got: Retrieval, k: int, max_output_bytes, progress) -> Retrieval:
        """``got`` with layers ``got.layers .. k`` added."""
        if k < got.layers:
            return got
        limit = output_limit(max_output_bytes)
        need = got.values.size * (3 * 8 + 2 + got.values.itemsize)  # (sum, a layer, the values twice, masks)
        if limit and need > limit:
            raise ResourceLimitError(f"decoding needs {need} bytes, above the limit of {limit} "
                                     "(pass max_output_bytes= to raise it)")
        total = got.total.copy() if got.total.size else np.where(got.valid, got.values.astype(np.float64), 0.0)
        for j in range(got.layers, k + 1):
            layer = self._reader(j).read(got.level, got.region, full_resolution=got.full_resolution,
                                         max_output_bytes=max_output_bytes, enhance=False)
            if layer.shape != total.shape:
                raise CorruptStreamError(f"layer {j} decodes to shape {layer.shape}, the first layer to {total.shape}")
            np.add(total, layer, out=total, where=got.valid)
            if progress is not None:
                progress(j + 1, k + 1)
        values = got.values.copy()
        if self._snap is not None and k == len(self._layers) - 1:  # (the exact layer: onto the lattice)
            offset, step = self._snap
            values[got.valid] = offset + step * np.rint((total[got.valid] - offset) / step)
        else:
            values[got.valid] = total[got.valid]
        bound = self._layers[k].error_bound
        self._check_range(values, got, bound)
        return Retrieval(values, got.mask, bound, k + 1, got.level, got.region, got.full_resolution, total,
                         got.valid)

    def _check_range(self, values: np.ndarray, got: Retrieval, bound: float) -> None:
        """Valid values decoded at their bound within the first layer's valid range widened by
        ``bound`` (a preview's interpolated points are not checked).

        Raises:
            CorruptStreamError: otherwise (damage no checksum shows: a crafted layer)."""
        vr = self.valid_range
        if vr is None or (got.full_resolution and got.level != max(self._last_level, 0)) or not got.valid.any():
            return
        v = values[got.valid].astype(np.float64)
        if not (vr[0] - bound <= v.min() and v.max() <= vr[1] + bound):
            raise CorruptStreamError("decoded values outside the stream's valid range widened by the bound")


def open_array(source: SourceLike, *, partial: bool = False) -> LossyReader | LayeredReader:
    """A reader of the array stream in ``source`` (bytes-like, path or binary file object): a
    :class:`LayeredReader` (``partial`` as there) for a stream in precision layers, else a
    :class:`strata.lossy.LossyReader` (which raises ``FormatError`` for what is neither).

    Raises:
        as :class:`LayeredReader` and :class:`strata.lossy.LossyReader`.
    """
    src = source if isinstance(source, Source) else Source(source)
    try:
        layered = stream_kind(src) == KIND_LAYERS
    except BaseException:
        src.close()
        raise
    return LayeredReader(src, partial=partial) if layered else LossyReader(src)


__all__ = ["LayerInfo", "LayeredReader", "Retrieval", "open_array"]
