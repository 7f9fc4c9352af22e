"""Windows: the part of one level's grid a region read holds in memory.

A full read decodes into arrays of the whole array's shape. A region read needs, per level,
only a box of that level's grid: the points its passes write and read, and the chunks of codes
and of the mask it decodes (:meth:`strata.lossy.reader.LossyReader._plan`). A :class:`Window`
is such a box: the level's grid (stride ``stride`` in full-resolution indices) from grid index
``origin`` over ``shape`` points per axis. Each level's window holds the values, codes and
mask of its points and of the coarser points inside it (copied from the coarser level's
window), so the compiled kernels run on it unchanged, given

* pass tables in window coordinates (:meth:`Window.table`), and, for the edge rules, where the
  window lies in the whole grid (:attr:`Window.geo`);
* chunk boxes in window coordinates (:meth:`Window.local_boxes`): with the origin even on every
  axis, a point's parity -- which says which level it belongs to -- is the same in both.

So a region read allocates about the region plus the neighbourhood its prediction needs at
each level (a geometric series over the levels), not the whole array.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .partition import Box, Partition, Vec, grid_shape
from .predictors.interpolation import geometry_rows


@dataclass(frozen=True)
class Window:
    """A box of the grid of stride ``stride`` (full-resolution indices per grid step): grid
    indices ``origin .. origin + shape`` per axis (``origin`` even), of a grid of ``grid``
    points per axis."""

    stride: Vec
    origin: Vec
    shape: Vec
    grid: Vec

    @staticmethod
    def covering(part: Partition, stride: Vec, box: Box) -> Window:
        """The smallest window of the grid of ``stride`` holding the grid points of ``box``
        (full-resolution indices), its origin rounded down to even grid indices."""
        grid = grid_shape(part.shape, stride)
        lo = tuple((b // s) & ~1 for b, s in zip(box.lo, stride))
        hi = tuple(min(g, -(-h // s)) for h, s, g in zip(box.hi, stride, grid))
        return Window(tuple(stride), lo, tuple(max(0, h - lo_) for lo_, h in zip(lo, hi)), grid)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def geo(self) -> np.ndarray:
        """``origin, grid`` (int64, 6): the kernels' edge rules see whole-grid indices."""
        return np.array(self.origin + self.grid, np.int64)

    @cached_property
    def shape_array(self) -> np.ndarray:
        return np.array(self.shape, np.int64)

    def rows(self, passes):
        """Geometry rows (:func:`strata.lossy.predictors.interpolation.geometry_rows`) of
        ``passes`` (``{step index: [Pass, ...]}``, full-resolution indices, all on this
        window's grid) in window coordinates, clipped to the window: what a predictor's
        ``pass_table`` takes as ``rows`` (:class:`strata.lossy.predictors.Predictor`)."""
        rows = geometry_rows(passes, self.shape)
        G = np.array(self.stride, np.int64)
        O = np.array(self.origin, np.int64) * G  # full-resolution index of the first point
        end = O + np.array(self.shape, np.int64) * G
        for r in rows:
            axis = r[0]
            lo = np.maximum(r[8:11], O)
            hi = np.minimum(r[11:14], end)
            start, step = r[2:5], r[5:8]
            first = np.where(lo <= start, start, start + (lo - start + step - 1) // step * step)
            r[1] = r[1] // G[axis]
            r[2:5] = (first - O) // G
            r[5:8] = step // G
            r[8:11] = (first - O) // G
            r[11:14] = np.maximum((hi - O + G - 1) // G, r[8:11])
        return rows

    def local_boxes(self, boxes: np.ndarray) -> np.ndarray:
        """Chunk boxes (int64 ``(n, 6)``, grid indices of this window's grid) in window
        coordinates (chunks outside the window get boxes that are never used)."""
        o = np.repeat(np.array(self.origin, np.int64), 2)
        return boxes - o

    def slices(self, box: Box) -> tuple[slice, ...]:
        """Slices of this window (of the full-resolution grid, stride 1) holding ``box``."""
        return tuple(slice(lo - o, hi - o) for lo, hi, o in zip(box.lo, box.hi, self.origin))

    def local_points(self, shape3: Vec, pos: np.ndarray, vals: np.ndarray):
        """The points of flat full-resolution positions ``pos`` (internal 3D shape ``shape3``)
        that lie in this window: ``(positions in the window, their vals)``."""
        idx = np.unravel_index(pos, shape3)
        keep = np.ones(pos.shape, bool)
        local = []
        for a in range(3):
            g, r = np.divmod(idx[a], self.stride[a])
            keep &= (r == 0) & (g >= self.origin[a]) & (g < self.origin[a] + self.shape[a])
            local.append(g - self.origin[a])
        return np.ravel_multi_index(tuple(v[keep] for v in local), self.shape), vals[keep]

    def copy_coarse(self, finer: Window, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy the values of ``src`` (flat, this window's shape) at the points that also lie
        in ``finer`` (a window of a finer grid: stride equal or half on each axis) into ``dst``
        (flat, ``finer``'s shape)."""
        s_sl, d_sl = [], []
        for a in range(3):
            ratio = self.stride[a] // finer.stride[a]
            # grid indices g (this grid) with g * ratio inside the finer window
            g_lo = max(self.origin[a], -(-finer.origin[a] // ratio))
            g_hi = min(self.origin[a] + self.shape[a], -(-(finer.origin[a] + finer.shape[a]) // ratio))
            if g_hi <= g_lo:
                return
            s_sl.append(slice(g_lo - self.origin[a], g_hi - self.origin[a]))
            d_sl.append(slice(g_lo * ratio - finer.origin[a], (g_hi - 1) * ratio - finer.origin[a] + 1, ratio))
        dst.reshape(finer.shape)[tuple(d_sl)] = src.reshape(self.shape)[tuple(s_sl)]


__all__ = ["Window"]
