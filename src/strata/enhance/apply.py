"""One enhancement step shared by the encoder (which must foresee the decoder exactly) and the
decoder: input blocks -> network prediction -> regulated values, tile by tile.

The network's working memory grows with a slice's area times its width (four feature maps of
``width`` float32 channels); a block is therefore enhanced in tiles of at most
:data:`TILE_BYTES` of working memory each, one per thread at a time. A tile is computed with the
receptive field's halo (:data:`~strata.enhance.network.HALO` points within the slice,
:data:`~strata.enhance.network.SLICE_HALO` slice either way) and only its inner part kept:
every kept value is computed from the same inputs in the same order as without tiles (the
kernel's float32 arithmetic has a fixed order), so the result is bit-identical to a whole-slice
inference, whatever the tile size and the number of threads.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._numba import thread_budget
from . import network, regulate
from .section import Enhancement

#: Working bytes a tile may take (its inputs, the network's feature maps, the regulation).
TILE_BYTES = 32 << 20
#: Bytes per point of a tile's regulation (float64 temporaries, masks, the corrected values).
REGULATION_BYTES_PER_POINT = 48
#: Smallest tile edge (points): a tile of 32 x 32 computes 1.7 times its points with the halo.
MIN_TILE_EDGE = 32


def stack_inputs(blocks, centers) -> np.ndarray:
    """float32 ``(F, D, H, W)`` from ``blocks`` (``(values, missing)`` pairs of 3D arrays of one
    shape), each field's missing and non-finite points replaced by its center."""
    values0 = blocks[0][0]
    out = np.empty((len(blocks), *values0.shape), np.float32)
    for f, ((values, miss), center) in enumerate(zip(blocks, centers)):
        s = out[f]
        s[...] = values
        np.copyto(s, np.float32(center), where=miss | ~np.isfinite(s))
    return out


def _halo_bytes_per_point(e: Enhancement) -> int:
    """Bytes per point of a tile with its halo: the inputs (``F`` fields, three slices), the
    prediction (three slices, one written) and the kernel's feature maps
    (:func:`strata.enhance.network.slice_bytes`)."""
    return 4 * 3 * len(e.inputs) + 4 * 3 + network.slice_bytes(e.channels, e.width, 1, 1)


def tile_edge(e: Enhancement, budget: int = TILE_BYTES) -> int:
    """Points along each axis of a tile's inner part: the largest whose working memory (with
    the halo) stays within ``budget`` bytes (a thread's share of a read's limit, at most
    :data:`TILE_BYTES`), at least :data:`MIN_TILE_EDGE` (where a tile is mostly halo)."""
    per = _halo_bytes_per_point(e) + REGULATION_BYTES_PER_POINT
    return max(MIN_TILE_EDGE, math.isqrt(min(budget, TILE_BYTES) // per) - 2 * network.HALO - 2)


def _tile_count(shape, edge: int) -> int:
    """Tiles of a block of ``shape`` (3D): per slice, rows and columns of tiles."""
    depth, height, width = shape
    return depth * -(-height // edge) * -(-width // edge)


def _tile(i: int, shape, edge: int) -> tuple[int, int, int]:
    """``(slice, first row, first column)`` of tile ``i`` of a block of ``shape`` (slice by
    slice, rows of tiles in order)."""
    _, height, width = shape
    cols = -(-width // edge)
    k, rest = divmod(i, -(-height // edge) * cols)
    r, c = divmod(rest, cols)
    return k, r * edge, c * edge


def threads(shape, edge: int) -> int:
    """Threads :func:`enhance_block` runs on for a block of ``shape`` in tiles of ``edge``."""
    return max(1, min(thread_budget(), _tile_count(shape, edge)))


def working_bytes(e: Enhancement, shape, edge: int) -> int:
    """Bytes :func:`enhance_block` holds besides its input blocks and its output for a block of
    ``shape`` (3D) in tiles of ``edge``: a tile's working memory per thread."""
    _, height, width = shape
    rows, cols = min(edge, height), min(edge, width)
    halo_rows, halo_cols = min(height, rows + 2 * network.HALO), min(width, cols + 2 * network.HALO)
    per_tile = _halo_bytes_per_point(e) * (halo_rows + 2) * (halo_cols + 2) + REGULATION_BYTES_PER_POINT * rows * cols
    return threads(shape, edge) * per_tile


def enhance_block(e: Enhancement, blocks, eb: float, fallback: np.ndarray | None = None,
                  edge: int | None = None) -> np.ndarray:
    """The regulated enhanced values of a 3D block, computed in tiles (see the module docstring).

    Args:
        e: a stored enhancement section.
        blocks: ``(values, missing)`` of the stream's own field, then of each other input
            field of ``e.inputs``, in that order: 3D arrays of the same shape (the internal 3D
            view's block, with its halo).
        eb: the stream's absolute error bound.
        fallback: bool mask of the block's 1x fallback points, or None.
        edge: the tiles' edge (:func:`tile_edge`; default: that of :data:`TILE_BYTES`).

    Returns:
        The regulated enhanced values: an array of the own field's shape and dtype (the same
        values whatever ``edge``). Its memory besides the blocks and the result:
        :func:`working_bytes`.
    """
    values, miss = blocks[0]
    out = np.empty_like(values)
    spec = e.spec()
    centers = [f.center for f in e.inputs]
    weights = tuple(network.unpack(np.ascontiguousarray(e.params, np.float32), e.channels, e.width))
    depth, height, width = values.shape
    edge = tile_edge(e) if edge is None else edge
    n_tiles = _tile_count(values.shape, edge)
    h = network.HALO

    def run(first: int, last: int) -> None:
        for i in range(first, last):
            k, r0, c0 = _tile(i, values.shape, edge)
            r1, c1 = min(r0 + edge, height), min(c0 + edge, width)
            k0, k1 = max(0, k - network.SLICE_HALO), min(depth, k + network.SLICE_HALO + 1)
            a0, a1, b0, b1 = max(0, r0 - h), min(height, r1 + h), max(0, c0 - h), min(width, c1 + h)
            fields = stack_inputs([(v[k0:k1, a0:a1, b0:b1], m[k0:k1, a0:a1, b0:b1]) for v, m in blocks], centers)
            r = network.predict_slice(fields, spec, weights, k - k0)[r0 - a0:r1 - a0, c0 - b0:c1 - b0]
            plain = values[k, r0:r1, c0:c1]
            o = regulate.corrected(plain, r, eb, ~miss[k, r0:r1, c0:c1] & np.isfinite(plain))
            if fallback is not None:
                np.copyto(o, plain, where=fallback[k, r0:r1, c0:c1])
            out[k, r0:r1, c0:c1] = o

    n = threads(values.shape, edge)
    bounds = [n_tiles * i // n for i in range(n + 1)]
    if n == 1:
        run(0, n_tiles)
    else:
        with ThreadPoolExecutor(n) as pool:
            for f in [pool.submit(run, a, b) for a, b in zip(bounds, bounds[1:])]:
                f.result()
    return out
