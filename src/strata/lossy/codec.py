"""The lossy compressor: array -> levels -> predicted, quantized codes -> chunks -> stream.

Method (STZ, Wang et al., SC'25, with SZ3's interpolation, Zhao et al., ICDE'21):

1. Missing values (NaN, a fill value, a mask) are marked for the predictor, which gives them
   no symbol, and their mask is coded per level and chunk (:mod:`strata.lossy.missing`,
   :mod:`strata.lossy.mask`); +-Inf and unusual missing bit patterns are kept bit-exactly
   apart (:mod:`strata.lossy.exact`).
2. The settings -- pass order, flat axes, level-wise bounds, cubic or linear interpolation --
   come from :mod:`strata.lossy.tune` unless given.
3. The grid is refined step by step (:mod:`strata.lossy.partition`); every point is predicted
   from reconstructed coarser points and quantized (:mod:`strata.lossy.predictors`,
   :mod:`strata.lossy.quantize`), so each decoded value is within the bound of its step,
   never more than the user's bound.
4. Each level's codes are entropy coded chunk by chunk (:mod:`strata.lossy.chunks`) and laid
   out level after level (:mod:`strata.lossy.header`, ``docs/format.md``).
"""
from __future__ import annotations

import math
import struct

import numpy as np

from .._numba import kernel_threads, workers
from ..container import KIND_LOSSY, Source, Writer, crc32, pack, unpack_header
from ..errors import CorruptStreamError, InvalidInputError, TruncatedStreamError, UnsupportedDtypeError
from . import chunk_encoder, chunks, exact, missing
from . import mask as mask_coder
from . import metadata as meta
from .header import BOUND_ABS, BOUND_REL, DTYPE_CODES, LevelEntry, LossyHeader
from .partition import Partition, as_3d_shape
from .predictors import lattice
from .predictors.interpolation import encode_origin, encode_passes, pass_table
from .quantize import RADIUS
from .target import TargetRecord
from .tune import OBJECTIVES, Settings, choose, grid_bits, sample_bits

#: Smallest average chunk (estimated bytes) for which a level gets half-size chunks.
MIN_CHUNK_BYTES = 1200


def validate_array(array) -> np.ndarray:
    """Contiguous, native-endian float32/float64 view or copy of ``array``.

    Raises:
        UnsupportedDtypeError: the dtype is not float32 or float64.
    """
    a = np.asarray(array)
    if a.dtype.kind != "f" or a.dtype.itemsize not in (4, 8):
        raise UnsupportedDtypeError(f"strata.lossy compresses float32 and float64 arrays, not {a.dtype}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return a if a.flags.c_contiguous else a.copy(order="C")


def absolute_bound(valid_range, abs_error, rel_error) -> tuple[int, float, float]:
    """``(mode, requested value, absolute bound)`` from exactly one of the two bounds.

    The value-range-relative bound is ``rel_error * (max - min)`` over the valid values
    (``valid_range``, None when there are none: the bound is then 0).

    Raises:
        InvalidInputError: both or neither bound given, or a negative, NaN or infinite bound.
    """
    if (abs_error is None) == (rel_error is None):
        raise InvalidInputError("give exactly one of abs_error and rel_error")
    mode, value = (BOUND_ABS, abs_error) if abs_error is not None else (BOUND_REL, rel_error)
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"error bound must be a number, not {value!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"error bound must be finite and >= 0, got {value}")
    if mode == BOUND_ABS:
        return mode, value, value
    vrange = valid_range[1] - valid_range[0] if valid_range is not None else 0.0
    eb = value * vrange
    if not math.isfinite(eb):
        raise InvalidInputError("value range times rel_error overflows float64")
    return mode, value, eb


@kernel_threads()
def compress(array, *, abs_error=None, rel_error=None, mask=None, fill_value=None, metadata=None,
             settings: Settings | None = None, objective: str = "ratio", progress=None) -> bytes:
    """Compress ``array`` with a point-wise error bound on its valid values.

    Args:
        array: float32 or float64 array, any shape (0-d to N-d), C or Fortran order; a
            ``numpy.ma.MaskedArray``'s masked points are missing.
        abs_error: absolute error bound (same unit as the data): every decoded valid value
            ``y`` of ``x`` satisfies ``|x - y| <= abs_error``, checked in float64.
        rel_error: value-range-relative bound: the absolute bound is
            ``rel_error * (max(x) - min(x))`` over the valid values (0 if there are none).
        mask: boolean array (``True`` = missing, numpy.ma convention), of the array's shape
            or broadcasting to it (e.g. one land mask for every time step).
        fill_value: values equal to it are missing (CF ``_FillValue`` / ``missing_value``);
            NaN is always missing.
        metadata: a dict kept in the stream as strict JSON (at most 4 MiB), returned by
            :attr:`strata.lossy.LossyReader.metadata`.
        settings: predictor settings; chosen by sampling the data when omitted.
        objective: what the choice optimizes (:data:`strata.lossy.tune.OBJECTIVES`):
            ``"ratio"`` (default), the smallest stream at the bound; ``"psnr"``, the fewest
            bits at equal PSNR (QoZ's rate-distortion tuning: tighter bounds on the coarse
            levels where they pay in PSNR; the bound still holds everywhere).
        progress: optional callable ``progress(done, total)`` called after each stage
            (tuning, prediction, each level's coding).

    Returns:
        The compressed stream (bytes), self-describing.

    Raises:
        InvalidInputError: bounds missing, doubled, negative or NaN; a mask that is not
            boolean or of another shape; a fill value not representable in the dtype;
            metadata not serializable or too large; an unknown objective.
        UnsupportedDtypeError: ``array`` is not float32/float64.

    Valid values are the finite, non-missing ones. A bound of 0 gives a lossless round trip
    (at a poor ratio). Missing points and +-Inf decode to their exact original bits (see
    :mod:`strata.lossy.missing` for the contract and the method).
    """
    if objective not in OBJECTIVES:
        raise InvalidInputError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    data, ma_mask = missing.split_masked(array)
    a = validate_array(data)
    miss = None  # (NaN only: prepare finds them, without a mask array when there are none)
    if mask is not None or fill_value is not None or ma_mask is not None:
        miss = missing.find(a, mask, fill_value)
        if ma_mask is not None:
            miss |= ma_mask.reshape(-1)
    prep = missing.prepare(a, miss)
    mode, value, eb = absolute_bound(prep.valid_range, abs_error, rel_error)
    metadata_section = meta.section(metadata)
    on = lattice.choose(a.reshape(-1), prep.missing, eb, prep.valid_range)
    header = LossyHeader(a.shape, a.dtype, mode, value, eb, valid_range=prep.valid_range,
                         metadata_len=len(metadata_section), lattice=on)
    if a.size == 0:
        return pack(KIND_LOSSY, header.to_bytes(), [metadata_section] if metadata_section else [])
    report = progress or (lambda done, total: None)
    orig = prep.work if on is None else on.to_steps(prep.work)  # (on a lattice: its indices)
    if prep.count:
        header.missing_count, header.fill_bits, header.origin_pred = prep.count, prep.fill_bits, prep.valid_mean
        if on is not None:
            header.origin_pred = (prep.valid_mean - on.offset) / on.step
    # the prediction's working array (without missing points, one that need not hold the
    # data: see predict_all) and codes, lent to the tuner's trials first
    work = np.empty_like(orig) if prep.missing is None else None
    codes = np.empty(orig.size, np.int32)
    trial = None
    if settings is None:
        settings, trial = choose(orig.reshape(a.shape), header.coding_eb, header.origin_pred, prep.missing, work,
                                 codes, objective)
    header.order, header.flat = settings.order, settings.flat
    header.alpha8, header.beta8 = settings.alpha8, settings.beta8
    part = Partition.get(as_3d_shape(a.shape), settings.order, settings.flat)
    stages = part.num_levels + 2
    report(1, stages)
    header.cubic_mask = (1 << len(part.steps)) - 1 if settings.cubic else 0
    miss = prep.missing if prep.missing is not None else missing.NO_MISSING
    if trial is not None:  # (the tuner's trials covered the whole array)
        codes = trial.codes
    else:
        predict_all(orig, miss, part, header, work, codes)
    work = None  # (not held while the levels are coded: the peak memory of a compression)
    report(2, stages)
    sections = []
    exact_section = exact.section(a.reshape(-1), prep.exact)
    if exact_section:
        sections.append(exact_section)
        header.exact_len = len(exact_section)
    if metadata_section:
        sections.append(metadata_section)
    # the winning whole-array trial's histogram sizes the levels (it counts no missing points)
    step_hist = trial.hist if trial is not None and prep.missing is None else None
    for level in range(part.num_levels):
        head, mask_index, mask_payload, payload = encode_level(part, level, codes, orig, prep.missing, step_hist)
        header.levels.append(LevelEntry(len(head), len(payload), len(mask_index), len(mask_payload)))
        sections += [head, mask_index, mask_payload, payload]
        report(3 + level, stages)
    return pack(KIND_LOSSY, header.to_bytes(), sections)


def with_enhancement(stream: bytes, section: bytes) -> bytes:
    """``stream`` (a lossy stream from :func:`compress`) with ``section`` as its enhancement
    section (:mod:`strata.enhance.section`), appended last (after the levels and the target
    section, if any); the header records its length (extension flag 8) and gets a new checksum."""
    src = Source(stream)
    raw, offset = unpack_header(src, KIND_LOSSY)
    header = LossyHeader.from_bytes(raw, src.size)
    if header.enhance_len:
        raise InvalidInputError("the stream already has an enhancement section")
    header.enhance_len = len(section)
    return pack(KIND_LOSSY, header.to_bytes(), [bytes(src.read(offset, src.size - offset)), section])


def with_target(stream: bytes, record: TargetRecord) -> bytes:
    """``stream`` (a lossy stream from :func:`compress`, maybe with an enhancement section) with
    ``record`` as its target section (:mod:`strata.lossy.target`): placed after the levels and
    before the enhancement section, which stays last; the header records its length (extension
    flag 16) and gets a new checksum. The decoded values do not change.

    Raises:
        InvalidInputError: ``record`` is not a :class:`TargetRecord`, or the stream already has
            a target section.
        FormatError, TruncatedStreamError, CorruptStreamError: ``stream`` is not a valid lossy
            stream, ends before its sections do, or holds bytes after them.
    """
    if not isinstance(record, TargetRecord):
        raise InvalidInputError(f"record must be a TargetRecord, not {type(record).__name__}")
    src = Source(stream)
    raw, offset = unpack_header(src, KIND_LOSSY)
    header = LossyHeader.from_bytes(raw, src.size)
    if header.target_len:
        raise InvalidInputError("the stream already has a target section")
    # (the sections as the reader locates them: exact values, metadata, levels, enhancement)
    levels_end = offset + header.exact_len + header.metadata_len + sum(lv.total for lv in header.levels)
    end = levels_end + header.enhance_len
    if end > src.size:
        raise TruncatedStreamError(f"stream truncated: its sections need {end} bytes, it has {src.size}")
    if end < src.size:
        raise CorruptStreamError(f"{src.size - end} unexpected bytes after the stream's sections")
    section = record.to_bytes()
    header.target_len = len(section)
    return pack(KIND_LOSSY, header.to_bytes(), [bytes(src.read(offset, levels_end - offset)), section,
                                                 bytes(src.read(levels_end, header.enhance_len))])


def predict_all(orig: np.ndarray, missing: np.ndarray, part: Partition, header: LossyHeader,
                x: np.ndarray | None = None, codes: np.ndarray | None = None) -> np.ndarray:
    """Quantization codes (flat int32) of every point, in full-resolution layout (``missing``:
    the flat uint8 mask, empty without one), into ``codes`` if given. ``x`` is the working
    array the reconstructed values go to: a copy of ``orig`` when points are missing;
    without, any array of its size and dtype (every point is written before it is read)."""
    if x is None:
        x = orig.copy() if missing.size else np.empty_like(orig)
    if codes is None:
        codes = np.empty(orig.size, dtype=np.int32)
    bounds = header.step_bounds(part.steps)
    encode_origin(x, codes, orig, bounds[0] if bounds else header.coding_eb, header.origin_pred)
    plan = part.plan_passes(None, len(part.steps) - 1)
    encode_passes(x, codes, orig, missing, np.array(part.shape, np.int64),
                  pass_table(plan, bounds, header.cubic, part, ("rows", "all")))
    return codes


def level_geometry(part: Partition, level: int, tile: int | None = None):
    """Arrays the chunk kernels take: ``(shape, stride, refined, base, boxes)`` (cached)."""
    key = ("geometry", level, tile)
    if key not in part.cache:
        stride = part.level_stride(level)
        steps = part.level_steps(level)
        refined = (np.array(steps[0].refined, dtype=np.bool_) if level > 0
                   else np.ones(3, dtype=np.bool_))
        part.cache[key] = (np.array(part.shape, np.int64), np.array(stride, np.int64), refined, level == 0,
                           part.chunk_boxes(level, tile))
    return part.cache[key]


def level_layout(part: Partition, level: int, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`strata.lossy.chunk_encoder.layout` of the level's chunks on edge ``tile`` (cached:
    it depends on the geometry alone, and walks every row of every chunk)."""
    key = ("layout", level, tile)
    if key not in part.cache:
        _, _, refined, base, boxes = level_geometry(part, level, tile)
        part.cache[key] = chunk_encoder.layout(boxes, refined, base)
    return part.cache[key]


def choose_tile(part: Partition, level: int, codes: np.ndarray, itemsize: int,
                step_hist: np.ndarray | None = None) -> tuple[int, int]:
    """Chunk edge and coder for ``level``: half the default edge when the level's estimated
    coded size still gives every chunk at least ``MIN_CHUNK_BYTES`` (smaller chunks make region
    reads cheaper; each chunk costs about a dozen bytes of index, checksum and coder state);
    :data:`~strata.lossy.chunks.CODER_LANES` when its chunks then average at least
    :data:`~strata.lossy.chunks.LANES_MIN_CHUNK_BYTES` (its extra states cost 12 bytes a chunk)."""
    t = part.default_tile()
    if level == 0:
        return t, chunks.CODER_SERIAL
    if step_hist is not None:
        # the tuner's whole-array trial counted these codes already (the same estimate: a
        # grid this small is sampled whole)
        est_bytes = grid_bits(step_hist, part.base_steps + level, codes[0], part.level_points(level),
                              8 * itemsize) / 8
    else:
        q = part.level_stride(level)
        grid = codes.reshape(part.shape)[::q[0], ::q[1], ::q[2]]  # a view
        long_axes = sum(n > 1 for n in grid.shape)
        skip = max(1, round((grid.size / 65536) ** (1 / max(1, long_axes))))
        sample = grid[tuple(slice(None, None, skip if n > 1 else 1) for n in grid.shape)].ravel()
        est_bytes = sample_bits(sample, part.level_points(level), 8 * itemsize) / 8
    small = max(1, t // 2)
    if est_bytes / part.chunk_boxes(level, small).shape[0] >= MIN_CHUNK_BYTES:
        t = small
    lanes = est_bytes / part.chunk_boxes(level, t).shape[0] >= chunks.LANES_MIN_CHUNK_BYTES
    return t, chunks.CODER_LANES if lanes else chunks.CODER_SERIAL


def encode_level(part: Partition, level: int, codes: np.ndarray, orig: np.ndarray,
                 miss: np.ndarray | None = None, step_hist: np.ndarray | None = None
                 ) -> tuple[bytes, bytes, bytes, bytes]:
    """Code one level: returns its head (tables, chunk index, CRC), its mask index and mask
    payload (empty without a mask: ``miss`` is the flat uint8 mask or None) and its payload
    (chunks). ``step_hist``: the histogram per step of ``codes`` from a whole-array trial of the
    tuner (:class:`strata.lossy.tune.Trial`), which :func:`choose_tile` then reads instead of
    the codes."""
    tile, coder = choose_tile(part, level, codes, orig.dtype.itemsize, step_hist)
    shape, stride, refined, base, boxes = level_geometry(part, level, tile)
    if miss is None:
        mask_index, mask_payload, miss = b"", b"", missing.NO_MISSING
    else:
        # the mask on the default chunk edge: its chunks pay framing and relearn the first
        # slice, so they gain nothing from the smaller chunks that serve region reads of codes
        mask_index, mask_payload = mask_coder.encode_level(miss, *level_geometry(part, level))
    offsets, raw_offsets = level_layout(part, level, tile)
    n = int(offsets[-1])
    n_chunks = len(offsets) - 1
    syms = np.empty(n, np.uint8)
    ctxs = np.empty(n, np.uint8)
    n_syms = np.zeros(n_chunks, np.int64)
    n_workers = workers(n_chunks)
    hist = np.zeros((n_workers, chunks.N_CONTEXTS, chunks.ALPHABET), np.int64)
    raw = np.empty(int(raw_offsets[-1]), np.uint8)
    n_raw = np.zeros(n_chunks, np.int64)
    n_unpred = np.zeros(n_chunks, np.int64)
    unpred_at = np.empty((n_chunks, chunk_encoder.UNPRED_SLOTS), np.int64)
    small = n < chunks.SERIAL_POINTS
    analyze, encode, assemble = (chunk_encoder.runner(k, small)
                                 for k in (chunk_encoder.analyze, chunk_encoder.encode, chunk_encoder.assemble))
    analyze(codes, miss, shape, stride, refined, base, boxes, offsets, syms, ctxs, n_syms, hist, raw, raw_offsets,
            n_raw, n_unpred, unpred_at, coder, n_workers)
    group, table_bytes, enc = chunk_encoder.level_tables(hist)
    cmap = chunks.CONTEXT_GROUPS[group]
    itemsize = orig.dtype.itemsize
    unpred_bytes, buf_offsets = chunk_encoder.buffer_layout(n_unpred, n_syms, itemsize)
    buf = np.empty(int(buf_offsets[-1]), np.uint8)
    n_rans = np.zeros(n_chunks, np.int64)
    encode(codes, orig.view(np.uint8), itemsize, shape, stride, refined, base, boxes, offsets, syms, ctxs, n_syms,
           cmap, enc, n_unpred, unpred_at, buf, buf_offsets, n_rans, coder, n_workers)
    lens, out_offsets = chunk_encoder.chunk_lengths(n_rans, n_raw, unpred_bytes)
    payload = np.empty(int(out_offsets[-1]), np.uint8)
    assemble(buf, buf_offsets, n_rans, raw, raw_offsets, n_raw, unpred_bytes, payload, out_offsets)
    pay = payload.tobytes()
    head = (Writer().u8(coder << 4 | group).u8(tile.bit_length() - 1).blob(table_bytes).varint(n_chunks)
            .varints(lens).crcs(pay, out_offsets).getvalue())
    return head + struct.pack("<I", crc32(head)), mask_index, mask_payload, pay


__all__ = ["Settings", "absolute_bound", "compress", "encode_level", "level_geometry", "predict_all",
           "validate_array", "with_enhancement", "with_target", "RADIUS", "DTYPE_CODES"]
