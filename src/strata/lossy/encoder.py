"""The encoder: a compression plan and an array's values in, each level's sections out.

:func:`predict_all` runs the plan's predictors over the whole array (quantization codes and
the reconstruction, closed loop); :func:`encode_level` codes one level's codes chunk by chunk
(:mod:`strata.lossy.chunk_encoder`) with its mask (:mod:`strata.lossy.mask`). The plan
(:class:`strata.lossy.plan.Plan`) says how every point is predicted and quantized; the only
choice made here is a layout one, the chunk edge and coder of each level
(:func:`choose_tile`, from the level's codes: the level head records it, and the decoded values
do not depend on it).
"""
from __future__ import annotations

import struct

import numpy as np

from .._numba import workers
from ..container import Writer, crc32
from . import chunk_encoder, chunks, missing
from . import mask as mask_coder
from .partition import Partition
from .plan import Plan, level_geometry
from .predictors.origin import encode_origin
from .tune import grid_bits, sample_bits

#: Smallest average chunk (estimated bytes) for which a level gets half-size chunks.
MIN_CHUNK_BYTES = 1200
#: Average chunk (estimated bytes) below which a level's chunk edge doubles, up to
#: ``MAX_TILE_FACTOR`` times the default: a chunk's framing (its length, CRC-32 and coder state,
#: 10-12 bytes) then stays under about 5 % of it. Highly compressible levels otherwise pay more
#: framing than codes (eraint_z at 1e-2: 120 chunks of 6.6 bytes on average).
SMALL_CHUNK_BYTES = 256
MAX_TILE_FACTOR = 8


def predict_all(orig: np.ndarray, missing: np.ndarray, plan: Plan, x: np.ndarray | None = None,
                codes: np.ndarray | None = None) -> np.ndarray:
    """Quantization codes (flat int32) of every point under ``plan``, in full-resolution layout
    (``missing``: the flat uint8 mask, empty without one), into ``codes`` if given. ``x`` is the
    working array the reconstructed values go to: a copy of ``orig`` when points are missing;
    without, any array of its size and dtype (every point is written before it is read). Each
    run of steps with one predictor goes to that predictor's passes in one call."""
    if x is None:
        x = orig.copy() if missing.size else np.empty_like(orig)
    if codes is None:
        codes = np.empty(orig.size, dtype=np.int32)
    part = plan.partition
    encode_origin(x, codes, orig, plan.origin_bound, plan.origin_pred)
    last = len(part.steps) - 1
    passes = plan.passes()
    shape = np.array(part.shape, np.int64)
    for predictor, steps in plan.runs(0, last):
        run = passes if len(steps) == len(passes) else {i: passes[i] for i in steps}
        table = plan.table(predictor, run, part=part, key=("rows", steps.start, steps.stop, plan.multi))
        predictor.encode_passes(x, codes, orig, missing, shape, table)
    return codes


def level_layout(part: Partition, level: int, tile: int) -> chunk_encoder.ChunkLayout:
    """:func:`strata.lossy.chunk_encoder.layout` of the level's chunks on edge ``tile`` (cached:
    it depends on the geometry alone, and walks every row of every chunk)."""
    key = ("layout", level, tile)
    if key not in part.cache:
        _, _, refined, base, boxes = level_geometry(part, level, tile)
        part.cache[key] = chunk_encoder.ChunkLayout(*chunk_encoder.layout(boxes, refined, base))
    return part.cache[key]


def chunk_edge(part: Partition, level: int, est_bytes: float) -> int:
    """Chunk edge of ``level`` (> 0) whose codes are estimated at ``est_bytes``: half the default
    when half-size chunks still average ``MIN_CHUNK_BYTES``, twice (up to ``MAX_TILE_FACTOR``
    times) the default while chunks would average less than ``SMALL_CHUNK_BYTES``, else the
    default (see :func:`choose_tile`)."""
    t = part.default_tile()
    small = max(1, t // 2)
    if est_bytes / part.chunk_count(level, small) >= MIN_CHUNK_BYTES:
        return small
    n = part.chunk_count(level, t)
    while n > 1 and t < MAX_TILE_FACTOR * part.default_tile() and est_bytes / n < SMALL_CHUNK_BYTES:
        t *= 2
        n = part.chunk_count(level, t)
    return t


def level_chunks(part: Partition, level: int, est_bytes: float) -> int:
    """Number of chunks the encoder cuts ``level`` into when its codes are estimated at
    ``est_bytes`` (:func:`chunk_edge`; the base level is one chunk)."""
    return 1 if level == 0 else part.chunk_count(level, chunk_edge(part, level, est_bytes))


def choose_tile(part: Partition, level: int, codes: np.ndarray, itemsize: int,
                step_hist: np.ndarray | None = None) -> tuple[int, int]:
    """Chunk edge and coder for ``level``: half the default edge when the level's estimated
    coded size still gives every chunk at least ``MIN_CHUNK_BYTES`` (smaller chunks make region
    reads cheaper; each chunk costs about a dozen bytes of index, checksum and coder state),
    twice (up to ``MAX_TILE_FACTOR`` times) the default edge while its chunks would average
    less than ``SMALL_CHUNK_BYTES``; :data:`~strata.lossy.chunks.CODER_LANES` when its chunks
    then average at least :data:`~strata.lossy.chunks.LANES_MIN_CHUNK_BYTES` (its extra states
    cost 12 bytes a chunk)."""
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
    t = chunk_edge(part, level, est_bytes)
    lanes = est_bytes / part.chunk_boxes(level, t).shape[0] >= chunks.LANES_MIN_CHUNK_BYTES
    return t, chunks.CODER_LANES if lanes else chunks.CODER_SERIAL


def encode_level(plan: Plan, level: int, codes: np.ndarray, orig: np.ndarray,
                 miss: np.ndarray | None = None, step_hist: np.ndarray | None = None
                 ) -> tuple[bytes, bytes, bytes, bytes]:
    """Code one level of the codes of ``plan`` (:func:`predict_all`): returns its head (tables,
    chunk index, CRC), its mask index and mask payload (empty without a mask: ``miss`` is the
    flat uint8 mask or None) and its payload (chunks). ``step_hist``: the histogram per step of
    ``codes`` from a whole-array trial of the tuner (:class:`strata.lossy.tune.Trial`), which
    :func:`choose_tile` then reads instead of the codes."""
    part = plan.partition
    tile, coder = choose_tile(part, level, codes, orig.dtype.itemsize, step_hist)
    geometry = level_geometry(part, level, tile)
    if miss is None:
        mask_index, mask_payload, miss = b"", b"", missing.NO_MISSING
    else:
        # the mask on the default chunk edge: its chunks pay framing and relearn the first
        # slice, so they gain nothing from the smaller chunks that serve region reads of codes
        mask_index, mask_payload = mask_coder.encode_level(miss, *level_geometry(part, level))
    layout = level_layout(part, level, tile)
    offsets, raw_offsets = layout
    n = int(offsets[-1])
    n_chunks = len(offsets) - 1
    n_workers = workers(n_chunks)
    hist = np.zeros((n_workers, chunks.N_CONTEXTS, chunks.ALPHABET), np.int64)
    n_syms, n_raw, n_unpred = np.zeros(n_chunks, np.int64), np.zeros(n_chunks, np.int64), np.zeros(n_chunks, np.int64)
    # (the kernels' structured arguments as plain tuples: see chunk_encoder.Analysis)
    found = (np.empty(n, np.uint8), np.empty(n, np.uint8), n_syms, hist, np.empty(int(raw_offsets[-1]), np.uint8),
             n_raw, n_unpred, np.empty((n_chunks, chunk_encoder.UNPRED_SLOTS), np.int64))
    geometry, layout = tuple(geometry), tuple(layout)
    small = n < chunks.SERIAL_POINTS
    analyze, encode, assemble = (chunk_encoder.runner(k, small)
                                 for k in (chunk_encoder.analyze, chunk_encoder.encode, chunk_encoder.assemble))
    analyze(codes, miss, geometry, layout, found, coder, n_workers)
    group, table_bytes, enc = chunk_encoder.level_tables(hist)
    cmap = chunks.CONTEXT_GROUPS[group]
    itemsize = orig.dtype.itemsize
    unpred_bytes, buf_offsets = chunk_encoder.buffer_layout(n_unpred, n_syms, itemsize)
    n_rans = np.zeros(n_chunks, np.int64)
    coded = (np.empty(int(buf_offsets[-1]), np.uint8), buf_offsets, n_rans)
    encode(codes, orig.view(np.uint8), itemsize, geometry, layout, found, cmap, enc, coded, coder, n_workers)
    lens, out_offsets = chunk_encoder.chunk_lengths(n_rans, n_raw, unpred_bytes)
    payload = np.empty(int(out_offsets[-1]), np.uint8)
    assemble(coded, found, layout, unpred_bytes, payload, out_offsets)
    pay = payload.tobytes()
    head = (Writer().u8(coder << 4 | group).u8(tile.bit_length() - 1).blob(table_bytes).varint(n_chunks)
            .varints(lens).crcs(pay, out_offsets).getvalue())
    return head + struct.pack("<I", crc32(head)), mask_index, mask_payload, pay


__all__ = ["MAX_TILE_FACTOR", "MIN_CHUNK_BYTES", "SMALL_CHUNK_BYTES", "choose_tile", "chunk_edge", "encode_level",
           "level_chunks", "level_layout", "predict_all"]
