"""Reading a lossy stream: whole, progressively (levels ``0..k``), or a region.

A :class:`LossyReader` reads the header, then only the level sections and chunks a request
needs: levels above ``k`` are never read for a progressive request, and a region request
decodes, per level, only the chunks that hold points its interpolation stencils reach.
Every byte is checksummed before it is decoded.

Sections, located from the header's lengths alone: exact values, metadata, the levels (coarse
to fine), the target section (:mod:`strata.lossy.target`), the enhancement section (last).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._numba import kernel_threads, workers
from ..checksum import crc32_parts
from ..container import KIND_LOSSY, Source, SourceLike, checked_body, unpack_header
from ..errors import CorruptStreamError, InvalidInputError, ResourceLimitError, TruncatedStreamError
from . import chunk_decoder, chunks, exact, mask, missing, selection, verify
from . import metadata as meta
from .header import LossyHeader
from .partition import Box, as_3d_shape, grid_shape
from .plan import LevelGeometry
from .predictors import MULTIDIM
from .predictors.origin import decode_origin
from .quantize import narrow_fits
from .target import TargetRecord
from .window import Window

#: Most bytes a read allocates unless told otherwise (``max_output_bytes``): a guard against
#: decompression bombs, like Pillow's ``MAX_IMAGE_PIXELS``; a module setting one may change.
MAX_OUTPUT_BYTES = 8 << 30
#: Zero bytes after the chunks handed to the decoder (see :func:`strata.entropy.rans.renormalize`
#: and :func:`strata.entropy.rans.bits_refill`).
_PAD = 8
_CHUNK_ERRORS = {1: "bad chunk lengths", 2: "invalid symbol", 3: "entropy-coded bytes not consumed exactly",
                 4: "raw bits or stored values not consumed exactly"}


@dataclass(frozen=True)
class LevelInfo:
    """One resolution level of a stream.

    Attributes:
        index: 0 for the base grid, up to ``len(levels) - 1`` for full resolution.
        shape: shape of the grid decoded up to this level (``ceil(n / stride)`` per axis).
        stride: per-axis distance between grid points, in full-resolution indices.
        error_bound: absolute bound met by every value of that grid (finite values).
        compressed_bytes: bytes of this level's section.
        points: number of points this level adds.
        offset: byte offset of this level's section in the stream (sections are laid out
            coarse to fine, so levels ``0..k`` occupy ``[0, offset + compressed_bytes)``).
    """

    index: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    error_bound: float
    compressed_bytes: int
    points: int
    offset: int


#: Values from which a read may hold its codes as uint16 (:meth:`LossyReader._codes_dtype`).
#: Below, the codes stay in cache and int32 costs no more, and the kernels the compressor
#: compiled serve the decoder: narrow codes are compiled on first use, about 40 s a dtype on 2
#: cores. One thread, whole decompressions, narrow against int32 in one process: ns3d192
#: (7.1 M values) -14..-18 %, ns3d (2.1 M) -4..-7 %, era5_t2m (1.2 M) 0..-7 %.
NARROW_MIN_POINTS = 1 << 20


class _LevelTables:
    def __init__(self, coder, cmap, tile, dtab, offsets, crcs, max_z):
        self.coder, self.cmap, self.tile, self.dtab = coder, cmap, tile, dtab
        self.offsets, self.crcs = offsets, crcs  # int64 (n + 1,) and (n,)
        self.max_z = max_z  # the largest zig-zag value of a code the level can hold


class LossyReader:
    """Reader of a lossy stream held in bytes, a file, or a file object.

    Args:
        source: the stream: ``bytes``-like, a path, or a seekable binary file object.

    Raises:
        FormatError: not a strata lossy stream, or an unsupported version.
        TruncatedStreamError: the stream is shorter than its header says.
        CorruptStreamError: header checksum mismatch or inconsistent fields.
        ResourceLimitError: the header announces an absurd size.
    """

    def __init__(self, source: SourceLike):
        self._src = source if isinstance(source, Source) else Source(source)
        # (a file's bytes pass through a buffer of their own on their way to a read's payload)
        self._in_memory = self._src.in_memory
        try:
            self._open()
        except BaseException:
            self._src.close()
            raise

    def _open(self) -> None:
        raw, off = unpack_header(self._src, KIND_LOSSY)
        self.header = h = LossyHeader.from_bytes(raw, self._src.size)
        # the compression plan (None for an empty array): how every point was predicted (the read
        # plans of _plan say which chunks and passes a read needs)
        self._cplan = h.plan() if h.size else None
        self._part = self._cplan.partition if h.size else None
        self._exact_offset = off
        off += h.exact_len
        self._metadata_offset = off
        off += h.metadata_len
        self._level_offsets = []
        for lv in h.levels:
            self._level_offsets.append(off)
            off += lv.total
        self._target_offset = off
        off += h.target_len
        self._enhance_offset = off
        off += h.enhance_len
        if off > self._src.size:
            raise TruncatedStreamError(f"stream truncated: its sections need {off} bytes, "
                                       f"it has {self._src.size}")
        self._tables: dict[int, _LevelTables] = {}
        self._mask_index: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._missing_checked = False
        self._scratch: dict[tuple[int, bool], int] = {}
        self._metadata = None
        self._enhancement = None
        self._target = None

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return self.header.shape

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.header.dtype).newbyteorder("=")

    @property
    def error_bound(self) -> float:
        """Absolute error bound of the full-resolution data (on its valid values)."""
        return self.header.eb

    @property
    def missing_count(self) -> int:
        """Number of missing values (NaN, fill value or masked when compressed): the header's
        count, checked against the mask on first use (the whole mask is decoded then, about a
        byte per value, unless a whole read has checked it already).

        Raises:
            CorruptStreamError: the mask holds another number of missing points, or its bytes
                are damaged.
            ResourceLimitError: the mask would take more than :data:`MAX_OUTPUT_BYTES`.
        """
        if self.header.missing_count and not self._missing_checked:
            self.read_mask()
        return self.header.missing_count

    @property
    def fill_value(self):
        """The value most missing points hold (a scalar of the stream's dtype; NaN when they
        are NaN), or None when nothing is missing."""
        if not self.header.missing_count:
            return None
        return np.frombuffer(self.header.fill_bits, np.dtype(self.header.dtype))[0]

    @property
    def valid_range(self) -> tuple[float, float] | None:
        """``(min, max)`` of the valid (finite, non-missing) values, or None when the stream
        does not record it (no valid value, or a stream from before this field existed)."""
        return self.header.valid_range

    @property
    def mask_bytes(self) -> int:
        """Bytes of the mask sections (all levels)."""
        return sum(lv.mask_index_len + lv.mask_len for lv in self.header.levels)

    @property
    def metadata(self) -> dict | None:
        """The metadata the stream was given (:func:`strata.lossy.compress`), or None.

        Raises:
            CorruptStreamError: the metadata section is damaged.
        """
        if self._metadata is None and self.header.metadata_len:
            self._metadata = meta.parse(self._src.read(self._metadata_offset, self.header.metadata_len,
                                                       "metadata section"))
        return self._metadata

    @property
    def enhancement(self):
        """The stream's enhancement section (a :class:`strata.enhance.section.Enhancement` with
        the mode, whether a network is stored and the encoder's figures), or None.

        Raises:
            CorruptStreamError: the section is damaged.
        """
        if self._enhancement is None and self.header.enhance_len:
            from ..enhance.section import Enhancement

            self._enhancement = Enhancement.from_bytes(
                self._src.read(self._enhance_offset, self.header.enhance_len, "enhancement section"), self.header.size)
        return self._enhancement

    @property
    def target(self) -> TargetRecord | None:
        """What the compression was asked for and what it reached (a PSNR in dB, a compression
        ratio or an SSIM, and the number of compressions the search ran), or None for a stream
        compressed with an explicit error bound (no target section). Parsed on first use.

        Raises:
            CorruptStreamError: the section is damaged (checksum, version, metric, values).
        """
        if self._target is None and self.header.target_len:
            self._target = TargetRecord.from_bytes(
                self._src.read(self._target_offset, self.header.target_len, "target section"))
        return self._target

    @property
    def guaranteed_error(self) -> float:
        """Bound on ``|x - y|`` of every valid value of a full read (the error bound; twice it
        for a stream with a stored 2x enhancement)."""
        e = self.enhancement
        return self.header.eb * (2 if e is not None and e.stored and e.mode_name == "2x" else 1)

    @property
    def levels(self) -> list[LevelInfo]:
        """Resolution levels, coarse to fine (empty for an empty array)."""
        if self._part is None:
            return []
        part, nd = self._part, len(self.shape)
        out = []
        worst = 0.0
        first = 0
        for k in range(part.num_levels):
            steps = part.level_steps(k)
            n = len(steps)
            worst = max([worst, *self._cplan.bounds[first:first + n]]) if n else max(worst, self._cplan.eb)
            first += n
            stride = part.level_stride(k)
            shape = grid_shape(part.shape, stride)
            if nd <= 3:
                stride, shape = stride[3 - nd:], shape[3 - nd:]
            lv = self.header.levels[k]
            h = self.header
            bound = worst if h.lattice is None else h.lattice.data_bound(worst, h.eb)
            out.append(LevelInfo(k, tuple(shape), tuple(stride), bound,
                                 lv.total, part.level_points(k), self._level_offsets[k]))
        return out

    def settings_text(self) -> str:
        """The predictor settings in words (for ``strata info``)."""
        h = self.header
        flat = [a for a in range(3) if h.flat[a]]
        kinds = {bool(p) for p in self._cplan.params} if self._cplan else set()
        interp = "cubic" if kinds == {True} else "linear" if kinds == {False} else "mixed"
        multi = sum(p == MULTIDIM for p in h.predictors) if h.predictors else 0
        return (f"{interp} interpolation, pass order {h.order}"
                + (f", {multi} of {len(h.predictors)} steps multi-dimensional" if multi else "")
                + (f", flat axes {flat} (internal 3D view)" if flat else "")
                + f", level-wise bound factors alpha={h.alpha8 / 8:g} beta={h.beta8 / 8:g}")

    def close(self) -> None:
        self._src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ decoding
    @kernel_threads()
    def read(self, level: int | None = None, region=None, *, full_resolution: bool = True, masked: bool = False,
             progress=None, max_output_bytes: int | None = None, enhance: bool = True, inputs=None,
             error_bound: float | None = None) -> np.ndarray:
        """Decode the data.

        Every chunk the read decodes is read and checked (CRC-32, framing; the exact values and,
        for a whole read, the mask's count) before the output is allocated
        (:mod:`strata.lossy.verify`).

        Args:
            level: decode levels ``0..level`` only (default: all). With
                ``full_resolution=True`` the missing finer points are interpolated (a
                preview at the original shape); otherwise the level's grid is returned
                (shape ``levels[level].shape``; its values meet ``levels[level].error_bound``).
            region: a tuple of slices and integers (numpy basic indexing) selecting part of
                the full-resolution array; only the chunks it needs are read and decoded, and
                only the region and the neighbourhood its prediction needs at each level are
                held in memory. The result equals the same selection of a full decode, bit for
                bit.
            full_resolution: see ``level``.
            masked: return a ``numpy.ma.MaskedArray`` whose mask marks the missing values.
            progress: optional callable ``progress(done, total)`` called after each level.
            max_output_bytes: most bytes the read may hold (output, working arrays, the
                compressed bytes it decodes, an enhancement network's working memory), a
                non-negative integer (an integral float too); default :data:`MAX_OUTPUT_BYTES`
                (a decompression-bomb guard, like Pillow's); 0 for no limit.
            enhance: apply the stream's enhancement network (:mod:`strata.enhance`), if it
                stores one, to a full-resolution read of every level (whole or region: the
                region is decoded with the halo the network reads, so it equals the same
                region of a whole read). Previews of coarser levels stay plain. False: the
                plain decoded values.
            inputs: for a network that reads other fields (cross-field), a callable
                ``inputs(name, lo, hi)`` returning ``(values, missing)`` of that field's
                internal 3D block ``[lo, hi)`` (:meth:`read_block`);
                :func:`strata.enhance.decompress_fields` passes it.
            error_bound: the absolute bound the caller needs, checked: at least
                :attr:`guaranteed_error` (a stream in precision layers,
                :class:`strata.lossy.LayeredReader`, reads fewer bytes for a coarser one).

        Returns:
            ndarray of the stream's dtype (missing points hold their original bits, in a
            preview too), or a MaskedArray with ``masked=True``.

        Raises:
            InvalidInputError: ``level`` out of range, bad ``region`` (see
                :func:`strata.lossy.selection.canonical`), a region with
                ``full_resolution=False``, a ``max_output_bytes`` that is not a non-negative
                integer, a cross-field network without ``inputs``, or an ``error_bound`` below
                :attr:`guaranteed_error`.
            ResourceLimitError: the read would hold more than ``max_output_bytes`` (raised
                before allocating its output).
            CorruptStreamError, TruncatedStreamError: the bytes needed are damaged (raised
                before allocating the output, except for damage only decoding shows: a chunk
                whose symbols do not decode to its length, with its CRC recomputed).
        """
        h, part = self.header, self._part
        limit = output_limit(max_output_bytes)
        level, region, box = self._request(level, region, full_resolution)
        if error_bound is not None:
            check_bound(error_bound, self.guaranteed_error)
        if part is None:
            out = np.empty(h.shape, self.dtype)
            out = out[region] if region is not None else out
            return np.ma.MaskedArray(out, mask=np.zeros(out.shape, bool)) if masked else out
        last = part.num_levels - 1
        if box is not None and box.empty():
            out = np.empty(selection.shape(region, self.shape), self.dtype)
            return np.ma.MaskedArray(out, mask=np.zeros(out.shape, bool)) if masked else out
        report = progress or (lambda done, total: None)
        e = self.enhancement if enhance and level == last and full_resolution else None
        if e is not None and e.stored:
            out, m = self._read_enhanced(e, box, limit, report, inputs)
        elif box is None and full_resolution:
            out, m = self._read_whole(level, limit, report)
        else:
            out, m = self._read_window(level, box, full_resolution, limit, report)
        if region is not None:
            out, m = selection.take(out, box.lo, region, self.shape), selection.take(m, box.lo, region, self.shape)
        return np.ma.MaskedArray(out, mask=m) if masked else out

    def _request(self, level, region, full_resolution: bool):
        """``(level, region, box)`` of a read: the level checked (None: the last), the region
        canonical (:func:`strata.lossy.selection.canonical`) and its internal 3D box (None
        without a region).

        Raises:
            InvalidInputError: as :meth:`read` says."""
        region = selection.canonical(region, self.shape) if region is not None else None
        if self._part is None:
            return 0, region, None
        last = self._part.num_levels - 1
        if level is None:
            level = last
        if (isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer))
                or not 0 <= level <= last):
            raise InvalidInputError(f"level must be an integer in 0..{last}, got {level!r}")
        if region is not None and not full_resolution:
            raise InvalidInputError("a region is read at full resolution")
        return int(level), region, selection.box(region, self.shape) if region is not None else None

    def bytes_for(self, level: int | None = None, region=None, *, full_resolution: bool = True) -> int:
        """Bytes of the stream that :meth:`read` with these arguments fetches (without a stored
        enhancement network): preamble and header, the exact values, and per level the head and
        the chunks of codes it decodes, the mask index and the mask chunks it decodes -- so a
        file on a slow store or behind HTTP range requests serves that many. Reads the level
        heads and mask indexes it needs (a few bytes a chunk).

        Raises:
            InvalidInputError: as :meth:`read` says.
            CorruptStreamError, TruncatedStreamError: a level head or mask index is damaged.
        """
        h, part = self.header, self._part
        level, region, box = self._request(level, region, full_resolution)
        n = self._exact_offset + h.exact_len
        if part is None or (box is not None and box.empty()):
            return self._exact_offset
        _, level_chunks, mask_chunks = self._plan(level, box, full_resolution)
        for lv, ids in level_chunks.items():
            t = self._level_tables(lv)
            n += h.levels[lv].head_len + int((t.offsets[ids + 1] - t.offsets[ids]).sum())
        for lv, ids in mask_chunks.items():
            offsets, _ = self._mask_tables(lv)
            n += h.levels[lv].mask_index_len + int((offsets[ids + 1] - offsets[ids]).sum())
        return n

    @kernel_threads()
    def read_mask(self, region=None, *, max_output_bytes: int | None = None) -> np.ndarray:
        """The missing-value mask (bool, ``True`` = missing) of the array or of ``region``
        (as in :meth:`read`); only the mask chunks the region touches are decoded, into
        windows (as a region read).

        Raises:
            InvalidInputError: bad ``region`` or ``max_output_bytes`` (as :meth:`read`).
            ResourceLimitError: the read would hold more than ``max_output_bytes``.
            CorruptStreamError, TruncatedStreamError: the mask bytes needed are damaged, or the
                whole mask holds another number of missing points than the header.
        """
        part = self._part
        limit = output_limit(max_output_bytes)
        region = selection.canonical(region, self.shape) if region is not None else None
        box = selection.box(region, self.shape) if region is not None else None
        out_shape = selection.shape(region, self.shape) if region is not None else self.shape
        self._check_limit(math.prod(out_shape), limit)
        if part is None or not self.header.missing_count or (box is not None and box.empty()):
            return np.zeros(out_shape, bool)
        whole = box is None
        box = Box.whole(part.shape) if whole else box
        geometry = self._geometry_bytes(range(1), range(part.num_levels))
        self._check_limit(geometry, limit)  # (before the plan builds any chunk table)
        plan = self._plan(0, box, True)
        wins = self._windows(0, box, True, plan)
        sizes = [wins[lv].size for lv in sorted(wins)]
        arrays = max(a + b for a, b in zip(sizes, sizes[1:] + [0])) + geometry
        self._check_limit(arrays, limit)  # (before reading any mask index)
        self._check_limit(self._need(arrays, plan, 0, codes=False, with_exact=False), limit)
        data = self._load(plan, 0, codes=False, with_exact=False)
        prev = None
        for lv in sorted(wins):
            w = wins[lv]
            miss = np.zeros(w.size, np.uint8)
            if prev is not None:
                prev[0].copy_coarse(w, prev[1], miss)
            self._decode_mask(lv, data.masks.pop(lv), miss, w)
            prev = (w, miss)
        w, miss = prev
        if whole:
            self._check_missing_count(miss)
        m = miss.view(np.bool_).reshape(w.shape)[w.slices(box)]
        return m.reshape(self.shape) if whole else selection.take(m, box.lo, region, self.shape)

    @kernel_threads()
    def read_block(self, lo, hi, *, max_output_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Plain decoded ``(values, missing)`` of the block ``[lo, hi)`` of the internal 3D view
        (1-D and 2-D arrays get leading axes of size 1, leading axes of more than 3 are merged):
        3D arrays of the block's shape, the stream's dtype and bool.

        Raises:
            InvalidInputError: the block is empty or outside the array, or a bad
                ``max_output_bytes``.
            ResourceLimitError, CorruptStreamError, TruncatedStreamError: as :meth:`read`.
        """
        part = self._part
        box = Box(tuple(int(v) for v in lo), tuple(int(v) for v in hi))
        if part is None or box.empty() or any(a < 0 or b > n for a, b, n in zip(box.lo, box.hi, part.shape)):
            raise InvalidInputError(f"block [{lo}, {hi}) is empty or outside the array's 3D view")
        limit = output_limit(max_output_bytes)
        if box == Box.whole(part.shape):
            x, m = self._read_whole(part.num_levels - 1, limit, lambda done, total: None)
            return x.reshape(part.shape), m.reshape(part.shape)
        return self._read_window(part.num_levels - 1, box, True, limit, lambda done, total: None)

    def _read_enhanced(self, e, box: Box | None, limit: int, report, inputs):
        """Enhanced values and mask of the whole array (its shape) or of ``box`` (3D): the
        box and its halo decoded plainly (by ``inputs`` when given, ``""`` naming this field),
        the network applied tile by tile (:func:`strata.enhance.apply.enhance_block`), the box
        cut out."""
        from ..enhance.apply import TILE_BYTES, enhance_block, threads, tile_edge, working_bytes
        from ..enhance.network import HALO, SLICE_HALO

        part = self._part
        target = box if box is not None else Box.whole(part.shape)
        grown = target.grow(0, SLICE_HALO, part.shape).grow(1, HALO, part.shape).grow(2, HALO, part.shape)
        if len(e.inputs) > 1 and inputs is None:
            names = ", ".join(repr(f.name) for f in e.inputs[1:])
            raise InvalidInputError(f"this stream's enhancement also reads the fields {names}: decode it "
                                    "with strata.enhance.decompress_fields (or pass enhance=False)")
        shape = tuple(h - lo for lo, h in zip(grown.lo, grown.hi))
        n = math.prod(shape)
        # what the enhancement holds once the plain read is done: its values and mask, the
        # other fields' blocks (float64 at most), the output, the fallback mask (the whole
        # bitmap unpacked, or its bytes and the block's bit indices), the tiles in work
        fallback = 0
        if e.fallback_count:
            fallback = n + self.header.size // 8 if box is None else self.header.size // 8 + 33 * n
        need = n * (2 * self.dtype.itemsize + 1) + 9 * n * (len(e.inputs) - 1) + fallback
        # the network in tiles of a thread's share of what the limit leaves (TILE_BYTES at most)
        budget = max(0, limit - need) // threads(shape, tile_edge(e)) if limit else TILE_BYTES
        edge = tile_edge(e, budget)
        self._check_limit(need + working_bytes(e, shape, edge), limit)  # (the plain read checks its own need)
        if inputs is not None:
            blocks = [inputs(f.name, grown.lo, grown.hi) for f in e.inputs]
        elif box is None:
            x, m = self._read_whole(part.num_levels - 1, limit, report)
            blocks = [(x.reshape(part.shape), m.reshape(part.shape))]
        else:
            blocks = [self._read_window(part.num_levels - 1, grown, True, limit, report)]
        fb = e.fallback(part.shape, None if box is None else (grown.lo, grown.hi))
        out = enhance_block(e, blocks, self.header.eb, fb, edge)
        m = blocks[0][1]
        # (within the enhancement's guarantee of values within the valid range: its non-finite
        # values are the exact ones, kept)
        lo, hi, _ = missing.fill_into(out.reshape(-1), m.reshape(-1).view(np.uint8), None)
        verify.decoded_range(lo, hi, 0, self.header.valid_range, self.guaranteed_error)
        if box is None:
            return out.reshape(self.shape), m.reshape(self.shape)
        inner = tuple(slice(a - g, b - g) for a, b, g in zip(target.lo, target.hi, grown.lo))
        return out[inner], m[inner]

    def _bytes_per_point(self, codes: bool = True) -> int:
        # (int32 codes: an upper bound, known before any level head is read; narrow codes take 2)
        return self.dtype.itemsize + 4 * codes + (1 if self.header.missing_count else 0)

    def _geometry_bytes(self, code_levels, mask_levels) -> int:
        """Bytes of the chunk tables (boxes and bounds, :func:`strata.lossy.plan.level_geometry`) a read builds
        for the codes of ``code_levels`` and the mask of ``mask_levels``, from the chunk
        counts alone."""
        part = self._part
        n = sum(part.chunk_count(lv, self._level_tables(lv).tile) for lv in code_levels)
        if self.header.missing_count:
            n += sum(part.chunk_count(lv) for lv in mask_levels)
        return 64 * n

    def _need(self, arrays: int, plan, level: int, codes: bool = True, with_exact: bool = True) -> int:
        """Bytes a read of ``plan`` holds at its peak: its ``arrays`` (values, codes, mask,
        chunk tables) and what it reads before it allocates them -- the compressed chunks it
        decodes (codes of levels ``0..level`` if ``codes``, the mask; :meth:`_load`), the
        chunk decoders' scratch (per worker, that of the level's largest chunk), the exact values (the
        section and its positions) if ``with_exact`` -- or, while it reads them from a stream
        not held in memory, the largest run of chunks once more (a file's bytes on their way
        in) instead of the arrays. Reads the mask indexes."""
        _, level_chunks, mask_chunks = plan
        held = run = 0
        for lv, ids in mask_chunks.items():
            offsets, _ = self._mask_tables(lv)
            n = int((offsets[ids + 1] - offsets[ids]).sum())
            held += n + mask.PAD + workers(len(ids)) * self._largest_scratch(lv, None) * (len(ids) > 0)
            run = max(run, n)
        for lv, ids in level_chunks.items() if codes else ():
            t = self._level_tables(lv)
            n = int((t.offsets[ids + 1] - t.offsets[ids]).sum())
            held += n + _PAD + workers(len(ids)) * self._largest_scratch(lv, t) * (len(ids) > 0)
            run = max(run, n)
        # (the section, its positions as int64 twice over, a window's share of them: 10 bytes a byte)
        held += 10 * self.header.exact_len if with_exact else 0
        return held + max(arrays, 0 if self._in_memory else run)

    def _largest_scratch(self, lv: int, tables: _LevelTables | None) -> int:
        """Scratch bytes a chunk decoder's worker holds for the largest chunk of level ``lv``:
        its codes' (``tables`` given: a uint8 grid of the box with a low border, and 25 bytes a
        point of a row for :data:`~strata.lossy.chunks.CODER_LANES`), or its mask's (a uint8
        grid with a border on both sides)."""
        key = (lv, tables is None)
        if key not in self._scratch:
            boxes = self._cplan.geometry(lv, None if tables is None else tables.tile).boxes
            border = 2 if tables is None else 1
            per_row = 25 if tables is not None and tables.coder == chunks.CODER_LANES else 0
            ext = boxes[:, 1::2] - boxes[:, ::2] + border
            self._scratch[key] = int((ext.prod(axis=1) + per_row * ext[:, 2]).max()) if len(boxes) else 0
        return self._scratch[key]

    @staticmethod
    def _check_limit(n_bytes: int, limit: int) -> None:
        if limit and n_bytes > limit:
            raise ResourceLimitError(f"decoding needs {n_bytes} bytes, above the limit of {limit} "
                                     "(pass max_output_bytes= to raise it)")

    def _read_whole(self, level: int, limit: int, report):
        """Everything at full resolution, into arrays of the whole shape: the bytes read and
        checked, the mask decoded and checked against the header, then the values."""
        h, part = self.header, self._part
        arrays = h.size * self._bytes_per_point()
        self._check_limit(arrays, limit)  # (before reading any level head)
        arrays += self._geometry_bytes(range(level + 1), range(part.num_levels))
        self._check_limit(arrays, limit)  # (before the plan builds any chunk table)
        plan = self._plan(level, None, True)
        self._check_limit(self._need(arrays, plan, level), limit)
        data = self._load(plan, level)
        miss = missing.NO_MISSING
        if h.missing_count:
            miss = np.zeros(part.points((1, 1, 1)), np.uint8)
            for lv in sorted(plan[2]):
                self._decode_mask(lv, data.masks.pop(lv), miss)
            self._check_missing_count(miss)
            if data.exact is not None:
                verify.exact_values(*data.exact, miss, h.fill_bits)
        x = np.empty(part.points((1, 1, 1)), dtype=self.dtype)
        codes = np.empty(x.size, dtype=self._codes_dtype(level))
        self._decode(x, codes, miss, level, plan, data, report)
        del codes
        m = self._finish(x, miss, None, data.exact, True if level == part.num_levels - 1 else None)
        return x.reshape(self.shape), m.reshape(self.shape)

    def _check_missing_count(self, miss: np.ndarray) -> None:
        """The whole mask (flat uint8) against the header's count of missing points."""
        n = int(np.count_nonzero(miss))
        if n != self.header.missing_count:
            raise CorruptStreamError(f"the mask holds {n} missing points, the header {self.header.missing_count}")
        self._missing_checked = True

    def _finish(self, x, miss, win: Window | None, exact_values, check):
        """The fill pattern and the exact values (``(positions, values)`` or None) into ``x``
        (flat: the whole array, or the window ``win``, whose exact values are checked against its
        mask here); returns the mask (flat bool). ``check``: where every point was decoded at
        its level's bound (not a preview) -- True for all of ``x``, a tuple of slices for a box of
        the window -- its values at valid points are checked against the header's valid range
        first (:func:`strata.lossy.verify.decoded_range`); None: nowhere."""
        h = self.header
        if h.lattice is not None:  # (the decoded lattice indices rounded and mapped back)
            h.lattice.restore(x, miss)
        lo = hi = None
        bad = 0
        if isinstance(check, tuple):  # (a region of a window: measured apart, a copy of its size)
            box = np.ascontiguousarray(x.reshape(win.shape)[check]).reshape(-1)
            if h.missing_count:
                lo, hi, bad = missing.fill_into(box, np.ascontiguousarray(miss.reshape(win.shape)[check]).reshape(-1),
                                                None)
            elif h.valid_range is not None:
                lo, hi = missing.finite_range(box)
                bad = int(lo is None)
        if h.missing_count:  # (the fill pattern written and the valid points measured in one pass)
            measured = missing.fill_into(x, miss, h.fill_bits)
            if check is True:
                lo, hi, bad = measured
        elif check is True and h.valid_range is not None:
            lo, hi = missing.finite_range(x)
            bad = int(lo is None)
        if check is not None:
            verify.decoded_range(lo, hi, bad, h.valid_range, h.eb)
        if exact_values is not None:
            pos, vals = exact_values
            if win is not None:
                pos, vals = win.local_points(self._part.shape, pos, vals)
                if h.missing_count:
                    verify.exact_values(pos, vals, miss, h.fill_bits)
            x[pos] = vals
        return miss.view(np.bool_) if h.missing_count else np.zeros(x.size, np.bool_)

    def _read_window(self, level: int, box: Box | None, full_resolution: bool, limit: int, report):
        """A region, or a level's grid, through windows (:mod:`strata.lossy.window`): returns
        the values and mask of the region's internal 3D box (full resolution), or the grid."""
        part = self._part
        box = box if box is not None else Box.whole(part.shape)
        top = part.num_levels - 1 if full_resolution else level
        geometry = self._geometry_bytes(range(level + 1), range(top + 1))
        self._check_limit(geometry, limit)  # (before the plan builds any chunk table)
        plan = self._plan(level, box, full_resolution)
        wins = self._windows(level, box, full_resolution, plan)
        # at most two windows are alive at once, with codes where a level is decoded
        sizes = [wins[lv].size * self._bytes_per_point(lv <= level) for lv in sorted(wins)]
        arrays = max(a + b for a, b in zip(sizes, sizes[1:] + [0])) + geometry
        self._check_limit(arrays, limit)  # (before reading any chunk)
        self._check_limit(self._need(arrays, plan, level), limit)
        data = self._load(plan, level)
        win, (x, miss) = self._decode_windows(level, plan, wins, data, report)
        if self.header.missing_count and full_resolution and box == Box.whole(part.shape):
            self._check_missing_count(miss)
        # (a level's grid is decoded whole; a region read's box at full resolution; a preview not)
        check = True if not full_resolution else win.slices(box) if level == part.num_levels - 1 else None
        m = self._finish(x, miss, win, data.exact, check)
        if not full_resolution:
            nd = len(self.shape)
            shape = win.shape if nd > 3 else win.shape[3 - nd:]
            return x.reshape(shape), m.reshape(shape)
        sl = win.slices(box)
        return x.reshape(win.shape)[sl], m.reshape(win.shape)[sl]

    def _load(self, plan, level: int, codes: bool = True, with_exact: bool = True) -> _Loaded:
        """Read every chunk ``plan`` decodes -- the codes of levels ``0..level`` if ``codes``,
        the mask -- checking each one's CRC-32 and framing (:mod:`strata.lossy.verify`), and
        the exact-value section if ``with_exact``: what a read checks before it allocates its output.
        A plan that decodes the whole mask has its chunk modes checked against the header's
        count of missing points.

        Raises:
            CorruptStreamError, TruncatedStreamError: the bytes are damaged or inconsistent.
        """
        h, part = self.header, self._part
        _, level_chunks, mask_chunks = plan
        data = _Loaded({}, {}, None)
        if with_exact and h.exact_len:
            pos, vals = exact.read(self._src.read(self._exact_offset, h.exact_len, "exact-value section"),
                                   h.size, self.dtype)
            if not h.missing_count:
                verify.exact_values(pos, vals, None, b"")
            data.exact = (pos, vals)
        low = high = 0
        whole = len(mask_chunks) == part.num_levels
        for lv, ids in sorted(mask_chunks.items()):
            offsets, crcs = self._mask_tables(lv)
            entry = h.levels[lv]
            data.masks[lv] = loaded = self._read_chunks(self._level_offsets[lv] + entry.head_len + entry.mask_index_len,
                                                        offsets, crcs, ids, f"level {lv} mask chunk", mask.PAD)
            payload, starts, ends, _ = loaded
            bad = verify.mask_frames(payload, starts, ends) if len(ids) else -1
            if bad >= 0:
                raise CorruptStreamError(f"level {lv} mask chunk {int(ids[bad])}: its mode and length disagree")
            whole = whole and len(ids) == len(offsets) - 1
            if whole:
                lo, hi = verify.missing_bounds(payload, starts, self._cplan.geometry(lv))
                low, high = low + lo, high + hi
        if mask_chunks and whole and not low <= h.missing_count <= high:
            raise CorruptStreamError(f"the header counts {h.missing_count} missing points, its mask chunks hold "
                                     f"{low}..{high}")
        for lv, ids in sorted(level_chunks.items()) if codes else ():
            t = self._level_tables(lv)
            entry = h.levels[lv]
            base = self._level_offsets[lv] + entry.head_len + entry.mask_index_len + entry.mask_len
            data.codes[lv] = loaded = self._read_chunks(base, t.offsets, t.crcs, ids, f"level {lv} chunk", _PAD)
            payload, starts, ends, _ = loaded
            bad = verify.chunk_frames(payload, starts, ends, self.dtype.itemsize, t.coder == chunks.CODER_LANES) \
                if len(ids) else -1
            if bad >= 0:
                raise CorruptStreamError(f"level {lv} chunk {int(ids[bad])}: {_CHUNK_ERRORS[1]} or initial state")
        return data

    def _mask_tables(self, lv: int) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, crcs)`` of level ``lv``'s mask chunks (:func:`strata.lossy.mask.parse_index`)."""
        if lv not in self._mask_index:
            entry = self.header.levels[lv]
            index = self._src.read(self._level_offsets[lv] + entry.head_len, entry.mask_index_len,
                                   f"level {lv} mask index")
            self._mask_index[lv] = mask.parse_index(index, entry.mask_len, len(self._cplan.geometry(lv).boxes))
        return self._mask_index[lv]

    def _plan(self, level: int, box: Box | None, full_resolution: bool):
        """Per step the passes to run; per level ``0..level`` the chunks of codes to decode;
        per level the mask chunks to decode (none without missing values): those of levels
        ``0..level``, or ``0..last`` for a full-resolution read, whose previews need the mask."""
        part = self._part
        last_step = len(part.steps) - 1 if full_resolution else part.base_steps + level - 1
        step_passes = self._cplan.passes(box, last_step, part.base_steps)
        level_chunks: dict[int, np.ndarray] = {0: np.zeros(1, np.int64)}
        hulls: dict[int, Box | None] = {}
        need_codes = None
        for lv in range(level, 0, -1):
            tile = self._level_tables(lv).tile
            if box is None:
                level_chunks[lv] = np.arange(part.chunk_count(lv, tile))
                continue
            cbox = part.step_box(step_passes[part.base_steps + lv - 1])
            if need_codes is not None:
                cbox = cbox.hull(need_codes)
            ids = part.chunks_touching(lv, cbox, tile)
            level_chunks[lv] = ids
            hulls[lv] = hull = part.chunk_hull(lv, ids, tile)
            need_codes = hull if need_codes is None or hull is None else hull.hull(need_codes)
        mask_chunks: dict[int, np.ndarray] = {}
        if self.header.missing_count:
            top = part.num_levels - 1 if full_resolution else level
            mask_chunks[0] = np.zeros(1, np.int64)
            need = None
            for lv in range(top, 0, -1):
                if box is None:
                    mask_chunks[lv] = np.arange(part.chunk_count(lv))
                    continue
                # the mask where the level's codes are decoded (or its preview runs), and the
                # coarser mask inside the finer level's mask chunks
                mbox = hulls.get(lv) if lv <= level else part.step_box(step_passes[part.base_steps + lv - 1])
                mbox = need if mbox is None else (mbox if need is None else mbox.hull(need))
                ids = part.chunks_touching(lv, mbox) if mbox is not None else np.zeros(0, np.int64)
                mask_chunks[lv] = ids
                hull = part.chunk_hull(lv, ids)
                need = hull if need is None or hull is None else hull.hull(need)
        return step_passes, level_chunks, mask_chunks

    def _decode(self, x, codes, miss, level: int, plan, data: _Loaded, report) -> None:
        """Decode the levels of a whole read into ``x`` and ``codes`` (the mask ``miss``
        decoded), the chunks from ``data`` (each level's dropped once decoded)."""
        part, cp = self._part, self._cplan
        step_passes = plan[0]
        # base grid: one chunk, every step (each run of steps by its predictor)
        shape = np.array(part.shape, np.int64)
        self._decode_chunks(0, data.codes.pop(0), x, codes, miss)
        decode_origin(x, codes, cp.origin_bound, cp.origin_pred)
        base_plan = cp.passes(None, part.base_steps - 1)
        for predictor, steps in cp.runs(0, part.base_steps - 1):
            run = base_plan if len(steps) == len(base_plan) else {i: base_plan[i] for i in steps}
            table = cp.table(predictor, run, part=part, key=("rows", "base", steps.start, steps.stop, cp.multi))
            predictor.decode_passes(x, codes, miss, shape, table)
        total = len(step_passes) + 1
        report(1, total)
        for i in range(part.base_steps, len(part.steps)):
            if i not in step_passes:
                break
            lv = i - part.base_steps + 1
            predictor = cp.predictor(i)
            table = cp.table(predictor, {i: step_passes[i]}, part=part, key=("rows", "step", i, i in cp.multi))
            if lv <= level:
                self._decode_chunks(lv, data.codes.pop(lv), x, codes, miss)
                predictor.decode_passes(x, codes, miss, shape, table)
            else:
                predictor.preview_passes(x, miss, shape, table)
            report(i - part.base_steps + 2, total)

    def _windows(self, level: int, box: Box, full_resolution: bool, plan) -> dict[int, Window]:
        """Per level, the window a windowed read holds (see :mod:`strata.lossy.window`): the
        points its passes write and read, its chunks of codes (levels ``0..level``) and of the
        mask; the base level whole."""
        part = self._part
        step_passes, level_chunks, mask_chunks = plan
        top = part.num_levels - 1 if full_resolution else level
        wins = {0: Window.covering(part, part.level_stride(0), Box.whole(part.shape))}
        for lv in range(1, top + 1):
            need = None
            for p in step_passes[part.base_steps + lv - 1]:
                r = part.reads(p)
                need = r if need is None else need.hull(r)
            hulls = [part.chunk_hull(lv, level_chunks[lv], self._level_tables(lv).tile) if lv <= level else None,
                     part.chunk_hull(lv, mask_chunks[lv]) if lv in mask_chunks else None]
            for hull in hulls:
                if hull is not None:
                    need = hull if need is None else need.hull(hull)
            wins[lv] = Window.covering(part, part.level_stride(lv), need if need is not None else Box((0,) * 3,
                                                                                                     (0,) * 3))
        return wins

    def _decode_windows(self, level: int, plan, wins: dict[int, Window], data: _Loaded, report):
        """Decode level by level, each into its window, the coarser points copied from the
        previous window, the chunks from ``data``; returns the finest window and its values and
        mask (flat)."""
        part, cp = self._part, self._cplan
        step_passes = plan[0]
        has_missing = bool(self.header.missing_count)
        prev = None
        codes_dtype = self._codes_dtype(level)
        for lv in sorted(wins):
            w = wins[lv]
            x = np.empty(w.size, self.dtype)
            codes = np.empty(w.size, codes_dtype) if lv <= level else None
            miss = np.zeros(w.size, np.uint8) if has_missing else missing.NO_MISSING
            if prev is not None:
                pw, px, pcodes, pmiss = prev
                pw.copy_coarse(w, px, x)
                if codes is not None:
                    pw.copy_coarse(w, pcodes, codes)
                if has_missing:
                    pw.copy_coarse(w, pmiss, miss)
            if has_missing:
                self._decode_mask(lv, data.masks.pop(lv), miss, w)
            shape, geo = w.shape_array, w.geo
            if lv == 0:
                self._decode_chunks(0, data.codes.pop(0), x, codes, miss, w)
                decode_origin(x, codes, cp.origin_bound, cp.origin_pred)
                base_plan = cp.passes(None, part.base_steps - 1)
                for predictor, steps in cp.runs(0, part.base_steps - 1):
                    run = base_plan if len(steps) == len(base_plan) else {i: base_plan[i] for i in steps}
                    table = cp.table(predictor, run, rows=w.rows(run))
                    predictor.decode_passes(x, codes, miss, shape, table, geo)
            else:
                i = part.base_steps + lv - 1
                predictor = cp.predictor(i)
                table = cp.table(predictor, {i: step_passes[i]}, rows=w.rows({i: step_passes[i]}))
                if codes is not None:
                    self._decode_chunks(lv, data.codes.pop(lv), x, codes, miss, w)
                    predictor.decode_passes(x, codes, miss, shape, table, geo)
                else:
                    predictor.preview_passes(x, miss, shape, table, geo)
            prev = (w, x, codes, miss)
            report(lv + 1, len(wins))
        w, x, _, miss = prev
        return w, (x, miss)

    def _codes_dtype(self, level: int):
        """The codes array's dtype for a read of levels ``0..level``: the narrow uint16 codes
        (:data:`strata.lossy.quantize.NARROW_RADIUS`: half the memory traffic of the chunk
        decoder's stores and the passes' loads) for streams of at least :data:`NARROW_MIN_POINTS`
        values when the tables of every one of those levels rule out larger codes, else int32."""
        if self.header.size < NARROW_MIN_POINTS:
            return np.int32
        fits = all(narrow_fits(self._level_tables(lv).max_z) for lv in range(level + 1))
        return np.uint16 if fits else np.int32

    def _level_tables(self, lv: int) -> _LevelTables:
        if lv in self._tables:
            return self._tables[lv]
        entry = self.header.levels[lv]
        head = self._src.read(self._level_offsets[lv], entry.head_len, f"level {lv} head")
        checked_body(head, f"level {lv} head")
        parsed = chunk_decoder.parse_level_head(np.frombuffer(head, np.uint8, len(head) - 4), entry.payload_len,
                                                chunks.GROUPS, chunk_decoder.ZERO_FAST_PATH)
        status, group, coder, tile_log2, symbols, info, zero, packed, offsets, crcs, max_z = parsed
        if status:
            raise CorruptStreamError(f"level {lv}: {chunk_decoder.HEAD_ERRORS[status]}")
        tile = 1 << tile_log2
        expected = self._part.chunk_count(lv, tile)
        if len(crcs) != expected:
            raise CorruptStreamError(f"level {lv}: {len(crcs)} chunks listed, the shape has {expected}")
        cmap = chunks.CONTEXT_GROUPS[group]
        t = _LevelTables(coder, cmap, tile, (coder, cmap, symbols, info, zero, packed), offsets, crcs, max_z)
        self._tables[lv] = t
        return t

    def _read_chunks(self, offset: int, offsets: np.ndarray, crcs: np.ndarray, ids: np.ndarray, what: str,
                     pad: int):
        """Read chunks ``ids`` (sorted) of a payload at ``offset`` (chunk ``i`` at
        ``offsets[i]:offsets[i + 1]``) in runs of consecutive chunks into one padded uint8
        copy (the decoders read a few bytes past a section's end, never used), checking each
        chunk's CRC-32 against ``crcs[i]``: ``(payload, starts, ends, ids)``."""
        if len(ids) == 0:
            return np.zeros(pad, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64), ids
        i0, i1 = int(ids[0]), int(ids[-1]) + 1
        if i1 - i0 == len(ids):  # one run (a whole level): no per-run bookkeeping
            bounds = offsets[i0:i1 + 1] - offsets[i0]
            runs = [(i0, i1, 0)]
            expected = crcs[i0:i1]
        else:
            lens = offsets[ids + 1] - offsets[ids]
            bounds = np.zeros(len(ids) + 1, np.int64)
            np.cumsum(lens, out=bounds[1:])
            first = np.flatnonzero(np.diff(ids) != 1) + 1  # where a new run starts
            runs = [(int(ids[f]), int(ids[g - 1]) + 1, int(bounds[f]))
                    for f, g in zip([0, *first.tolist()], [*first.tolist(), len(ids)])]
            expected = crcs[ids]
        payload = np.zeros(int(bounds[-1]) + pad, np.uint8)
        for c0, c1, q in runs:
            a, b = int(offsets[c0]), int(offsets[c1])
            payload[q:q + b - a] = np.frombuffer(self._src.read(offset + a, b - a, what), np.uint8)
        bad = np.flatnonzero(crc32_parts(payload, bounds) != expected)
        if bad.size:
            raise CorruptStreamError(f"checksum mismatch in {what} {int(ids[bad[0]])}: the stream is corrupted")
        return payload, bounds[:-1], bounds[1:], ids

    def _decode_chunks(self, lv: int, loaded, x, codes, miss, win: Window | None = None) -> None:
        """Decode the chunks ``loaded`` (``(payload, starts, ends, ids)``, :meth:`_load`) of
        level ``lv`` into ``codes`` (and unpredictable values into ``x``): arrays of the whole
        shape, or of the window ``win``."""
        payload, starts, ends, ids = loaded
        if len(ids) == 0:
            return
        t = self._level_tables(lv)
        geometry = _geometry(self._cplan.geometry(lv, t.tile), win)
        errors = np.zeros(len(ids), np.int64)
        small = len(ids) == 1
        decode = chunk_decoder.runner(chunk_decoder.decode, small)
        decode(loaded, codes, x.view(np.uint8), x.itemsize, miss, tuple(geometry), t.dtab, errors, workers(len(ids)))
        if errors.any():
            j = int(np.flatnonzero(errors)[0])
            raise CorruptStreamError(f"level {lv} chunk {int(ids[j])}: {_CHUNK_ERRORS.get(int(errors[j]), 'invalid')}")

    def _decode_mask(self, lv: int, loaded, miss: np.ndarray, win: Window | None = None) -> None:
        """Decode the mask chunks ``loaded`` (as :meth:`_decode_chunks`) of level ``lv`` into
        ``miss`` (the whole array, or the window ``win``); the mask is chunked at the default
        chunk edge, whatever edge the level's codes use."""
        payload, starts, ends, ids = loaded
        if len(ids) == 0:
            return
        mask.decode_chunks(payload, starts, ends, ids, miss, *_geometry(self._cplan.geometry(lv), win))


@dataclass
class _Loaded:
    """The bytes a read decodes, read and checked (:meth:`LossyReader._load`): per level the
    ``(payload, starts, ends, ids)`` of its chunks of codes and of its mask chunks, and the
    exact values ``(positions, values)`` or None."""

    codes: dict
    masks: dict
    exact: tuple | None


def check_bound(error_bound, held: float) -> float:
    """``error_bound`` as a float, checked to be a number of at least ``held`` (the bound a
    stream holds).

    Raises:
        InvalidInputError: otherwise.
    """
    try:
        e = float(error_bound)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"error_bound must be a number, got {error_bound!r}") from exc
    if not e >= held:
        raise InvalidInputError(f"the stream's finest bound is {held:g}; it cannot be read at {e:g}")
    return e


def output_limit(max_output_bytes) -> int:
    """The byte limit of a read: :data:`MAX_OUTPUT_BYTES` for None, else ``max_output_bytes``
    (a non-negative integer, or a float with an integral value; 0: no limit).

    Raises:
        InvalidInputError: anything else (a string, a bool, a negative, fractional or
            non-finite number).
    """
    if max_output_bytes is None:
        return MAX_OUTPUT_BYTES
    v = max_output_bytes
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, float, np.floating)):
        raise InvalidInputError(f"max_output_bytes must be a non-negative integer, not {v!r}")
    if isinstance(v, (float, np.floating)) and not (math.isfinite(v) and v == int(v)):
        raise InvalidInputError(f"max_output_bytes must be a non-negative integer, not {v!r}")
    if v < 0:
        raise InvalidInputError(f"max_output_bytes must be a non-negative integer, not {v!r}")
    return int(v)


def _geometry(geometry: LevelGeometry, win: Window | None) -> LevelGeometry:
    """The chunk kernels' :data:`~strata.lossy.plan.LevelGeometry` for arrays of the whole
    shape, or of the window ``win`` (its shape, unit strides, boxes in its coordinates)."""
    if win is None:
        return geometry
    return geometry._replace(shape=win.shape_array, stride=_UNIT, boxes=win.local_boxes(geometry.boxes))


_UNIT = np.ones(3, np.int64)


def open_stream(source: SourceLike) -> LossyReader:
    """Open a lossy stream for reading (see :class:`LossyReader`)."""
    return LossyReader(source)


__all__ = ["LevelInfo", "LossyReader", "as_3d_shape", "check_bound", "open_stream", "output_limit"]
