"""The lossy compressor: array -> levels -> predicted, quantized codes -> chunks -> stream.

Method (STZ, Wang et al., SC'25, with SZ3's interpolation, Zhao et al., ICDE'21):

1. Non-finite values (NaN, +-Inf) are set aside bit-exactly with their positions and replaced
   by the mean of the finite values for prediction (:mod:`strata.lossy.nonfinite`).
2. The settings -- pass order, flat axes, level-wise bounds, cubic or linear interpolation --
   come from :mod:`strata.lossy.tune` unless given.
3. The grid is refined step by step (:mod:`strata.lossy.partition`); every point is predicted
   from reconstructed coarser points and quantized (:mod:`strata.lossy.predict`,
   :mod:`strata.lossy.quantize`), so each decoded value is within the bound of its step,
   never more than the user's bound.
4. Each level's codes are entropy coded chunk by chunk (:mod:`strata.lossy.chunks`) and laid
   out level after level (:mod:`strata.lossy.header`, ``docs/format.md``).
"""
from __future__ import annotations

import math
import struct

import numpy as np

from ..container import KIND_LOSSY, Writer, crc32, pack
from ..errors import InvalidInputError, UnsupportedDtypeError
from . import chunks, nonfinite
from .header import BOUND_ABS, BOUND_REL, DTYPE_CODES, LevelEntry, LossyHeader
from .partition import Partition, as_3d_shape
from .predict import encode_origin, encode_passes, pass_table
from .quantize import RADIUS
from .tune import Settings, choose, sample_bits

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


def absolute_bound(a: np.ndarray, abs_error, rel_error) -> tuple[int, float, float]:
    """``(mode, requested value, absolute bound)`` from exactly one of the two bounds.

    The value-range-relative bound is ``rel_error * (max - min)`` over the finite values.

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
    finite = a[np.isfinite(a)] if a.size else a
    vrange = float(finite.max()) - float(finite.min()) if finite.size else 0.0
    eb = value * vrange
    if not math.isfinite(eb):
        raise InvalidInputError("value range times rel_error overflows float64")
    return mode, value, eb


def compress(array, *, abs_error=None, rel_error=None, settings: Settings | None = None,
             progress=None) -> bytes:
    """Compress ``array`` with a point-wise error bound.

    Args:
        array: float32 or float64 array, any shape (0-d to N-d), C or Fortran order.
        abs_error: absolute error bound (same unit as the data): every decoded finite value
            ``y`` of ``x`` satisfies ``|x - y| <= abs_error``, checked in float64.
        rel_error: value-range-relative bound: the absolute bound is
            ``rel_error * (max(x) - min(x))`` over finite values.
        settings: predictor settings; chosen by sampling the data when omitted.
        progress: optional callable ``progress(done, total)`` called after each stage
            (tuning, prediction, each level's coding).

    Returns:
        The compressed stream (bytes), self-describing.

    Raises:
        InvalidInputError: bounds missing, doubled, negative or NaN.
        UnsupportedDtypeError: ``array`` is not float32/float64.

    A bound of 0 gives a lossless round trip (at a poor ratio). NaN and +-Inf are restored
    bit-exactly.
    """
    a = validate_array(array)
    mode, value, eb = absolute_bound(a, abs_error, rel_error)
    header = LossyHeader(a.shape, a.dtype, mode, value, eb)
    if a.size == 0:
        return pack(KIND_LOSSY, header.to_bytes(), [])
    report = progress or (lambda done, total: None)
    flat_in = a.reshape(-1)
    nf_section, orig = nonfinite.split(flat_in)
    codes = None
    if settings is None:
        settings, codes = choose(orig.reshape(a.shape), eb)
    header.order, header.flat = settings.order, settings.flat
    header.alpha8, header.beta8 = settings.alpha8, settings.beta8
    part = Partition.get(as_3d_shape(a.shape), settings.order, settings.flat)
    stages = part.num_levels + 2
    report(1, stages)
    header.cubic_mask = (1 << len(part.steps)) - 1 if settings.cubic else 0
    if codes is None:  # (the tuner's trials did not cover the whole array)
        codes = predict_all(orig, part, header)
    report(2, stages)
    sections = []
    if nf_section:
        sections.append(nf_section)
        header.nonfinite_len = len(nf_section)
    for level in range(part.num_levels):
        head, payload = encode_level(part, level, codes, orig)
        header.levels.append(LevelEntry(len(head), len(payload)))
        sections += [head, payload]
        report(3 + level, stages)
    return pack(KIND_LOSSY, header.to_bytes(), sections)


def predict_all(orig: np.ndarray, part: Partition, header: LossyHeader) -> np.ndarray:
    """Quantization codes (flat int32) of every point, in full-resolution layout."""
    x = orig.copy()
    codes = np.empty(orig.size, dtype=np.int32)
    bounds = header.step_bounds(part.steps)
    encode_origin(x, codes, orig, bounds[0] if bounds else header.eb)
    plan = part.plan_passes(None, len(part.steps) - 1)
    encode_passes(x, codes, orig, np.array(part.shape, np.int64),
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


def choose_tile(part: Partition, level: int, codes: np.ndarray, itemsize: int) -> int:
    """Chunk edge for ``level``: half the default when the level's estimated coded size
    still gives every chunk at least ``MIN_CHUNK_BYTES`` (smaller chunks make region reads
    cheaper; each chunk costs about a dozen bytes of index, checksum and coder state)."""
    t = part.default_tile()
    if level == 0:
        return t
    q = part.level_stride(level)
    grid = codes.reshape(part.shape)[::q[0], ::q[1], ::q[2]]  # a view
    long_axes = sum(n > 1 for n in grid.shape)
    skip = max(1, round((grid.size / 65536) ** (1 / max(1, long_axes))))
    sample = grid[tuple(slice(None, None, skip if n > 1 else 1) for n in grid.shape)].ravel()
    est_bytes = sample_bits(sample, part.level_points(level), 8 * itemsize) / 8
    small = max(1, t // 2)
    return small if est_bytes / part.chunk_boxes(level, small).shape[0] >= MIN_CHUNK_BYTES else t


def encode_level(part: Partition, level: int, codes: np.ndarray, orig: np.ndarray) -> tuple[bytes, bytes]:
    """Code one level: returns its head (tables, chunk index, CRC) and payload (chunks)."""
    tile = choose_tile(part, level, codes, orig.dtype.itemsize)
    shape, stride, refined, base, boxes = level_geometry(part, level, tile)
    sizes = chunks.chunk_sizes(boxes, refined, base)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    n = int(offsets[-1])
    n_chunks = len(sizes)
    syms = np.empty(n, np.uint8)
    ctxs = np.empty(n, np.uint8)
    n_workers = chunks.workers(n_chunks)
    hist = np.zeros((n_workers, chunks.N_CONTEXTS, chunks.ALPHABET), np.int64)
    raw_offsets = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(3 * sizes + 8, out=raw_offsets[1:])
    raw = np.empty(int(raw_offsets[-1]), np.uint8)
    n_raw = np.zeros(n_chunks, np.int64)
    n_unpred = np.zeros(n_chunks, np.int64)
    small = n < chunks.SERIAL_POINTS
    analyze, encode, assemble = (chunks.runner(k, small) for k in (chunks.analyze, chunks.encode, chunks.assemble))
    analyze(codes, shape, stride, refined, base, boxes, offsets, syms, ctxs, hist, raw, raw_offsets, n_raw,
            n_unpred, n_workers)
    group, table_bytes, enc = chunks.level_tables(hist)
    cmap = chunks.CONTEXT_GROUPS[group]
    itemsize = orig.dtype.itemsize
    unpred_bytes = n_unpred * itemsize
    buf_offsets = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(unpred_bytes + 2 * sizes + 8, out=buf_offsets[1:])
    buf = np.empty(int(buf_offsets[-1]), np.uint8)
    n_rans = np.zeros(n_chunks, np.int64)
    encode(codes, orig.view(np.uint8), itemsize, shape, stride, refined, base, boxes, offsets, syms, ctxs,
           cmap, enc, n_unpred, buf, buf_offsets, n_rans, n_workers)
    lens = n_rans + n_raw + unpred_bytes + _varint_len(n_rans) + _varint_len(n_raw)
    out_offsets = np.zeros(n_chunks + 1, np.int64)
    np.cumsum(lens, out=out_offsets[1:])
    payload = np.empty(int(out_offsets[-1]), np.uint8)
    assemble(buf, buf_offsets, n_rans, raw, raw_offsets, n_raw, unpred_bytes, payload, out_offsets)
    w = Writer().u8(group).u8(tile.bit_length() - 1).blob(table_bytes).varint(n_chunks)
    for ln in lens:
        w.varint(int(ln))
    pay = payload.tobytes()
    view = memoryview(pay)
    for c in range(n_chunks):
        w.u32(crc32(view[out_offsets[c]:out_offsets[c + 1]]))
    head = w.getvalue()
    return head + struct.pack("<I", crc32(head)), pay


def _varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes of the varint of each value (values below 2**35)."""
    return 1 + sum((v >= 1 << (7 * k)).astype(np.int64) for k in range(1, 5))


__all__ = ["Settings", "absolute_bound", "compress", "encode_level", "level_geometry", "predict_all",
           "validate_array", "RADIUS", "DTYPE_CODES"]
