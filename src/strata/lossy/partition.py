"""Hierarchical partitioning of an array into resolution levels, passes and chunks.

The array is viewed as 3D (1D and 2D arrays get leading axes of size 1; arrays of more
dimensions are stacks of 3D with their leading axes merged into the first).

**Steps.** The grid is refined from a single point (the origin) to full resolution by *steps*;
a step halves the stride of some axes, taking the grid of per-axis strides ``P`` to the grid
of strides ``Q``. The points a step adds are those of the ``Q`` grid not on the ``P`` grid: the
odd-parity blocks of the ``Q`` grid, split by index parity as in STZ (Wang et al., SC'25,
Sec. III-A). By default every step halves the axes with the largest stride, so that strides
are equal on all axes once an axis is fine enough -- SZ3's level structure. A *flat* axis is
refined first, down to stride 1, while the other axes are still at their coarsest: this keeps
interpolation across a stack of unlike 2D fields (pressure levels, variables) out of the
fine levels.

**Levels.** Level 0 is the *base grid*: the steps up to the last grid with at most
``BASE_POINTS`` points. Each later step is one level; the last level has stride 1 on all
axes. Decoding levels ``0..k`` yields the grid of level ``k``, ``ceil(n / Q)`` per axis.

**Passes.** A step is predicted in one pass per refined axis, in ``order`` (SZ3's
dimension-by-dimension interpolation, Zhao et al., ICDE'21, Sec. IV). Pass ``p`` along axis
``a`` covers the points with an odd multiple of ``Q[a]`` on ``a``, a multiple of ``Q`` on the
axes refined before it and a multiple of ``P`` on the others; it reads coarser points and
points of earlier passes at distances ``Q[a]`` and ``3 Q[a]`` along ``a``. A *multi-dimensional*
step (HPEZ's, Liu et al., 2024) has one pass per set ``S`` of refined axes -- a *group*: the
points with an odd multiple of ``Q`` on the axes of ``S`` and a multiple of ``P`` on the other
refined axes -- groups of one axis first, then of two, then of three; a group's point is
predicted along every axis of ``S``, from points of the smaller groups.

**Chunks.** Each level ``k >= 1`` is cut into boxes of about ``tile`` grid points per axis
(``TILE``, or half of it for levels whose chunks would still be large; the encoder records the
choice per level), coded independently, so a region is decoded from the chunks it touches. Within a chunk the
level's points are listed in C (raster) order of their grid index. The base grid is one chunk.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

#: Most points in the base grid.
BASE_POINTS = 4096
#: Chunk edge, in grid points per axis, by the number of axes longer than 1.
TILE = {0: 1, 1: 1 << 16, 2: 256, 3: 32}
#: Reach of the interpolation stencil along its axis, in multiples of the stride.
STENCIL_REACH = 3
#: Reach of the quadratic extrapolation of the last point of a line.
EXTRAPOLATION_REACH = 5

Vec = tuple[int, int, int]


def as_3d_shape(shape: tuple[int, ...]) -> Vec:
    """Internal 3D shape of an array of ``shape`` (C order, slowest axis first)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) <= 3:
        return (1,) * (3 - len(shape)) + shape
    return (math.prod(shape[:-2]), shape[-2], shape[-1])


def grid_shape(shape: Vec, stride: Vec) -> Vec:
    """Number of grid points per axis: multiples of ``stride`` in ``[0, n)``."""
    return tuple(-(-n // s) for n, s in zip(shape, stride))


@dataclass(frozen=True)
class Box:
    """Half-open box ``[lo, hi)`` per axis, in full-resolution indices."""

    lo: Vec
    hi: Vec

    @staticmethod
    def whole(shape: Vec) -> Box:
        return Box((0, 0, 0), tuple(shape))

    def grow(self, axis: int, by: int, shape: Vec) -> Box:
        lo, hi = list(self.lo), list(self.hi)
        lo[axis] = max(0, lo[axis] - by)
        hi[axis] = min(shape[axis], hi[axis] + by)
        return Box(tuple(lo), tuple(hi))

    def hull(self, other: Box) -> Box:
        return Box(tuple(map(min, self.lo, other.lo)), tuple(map(max, self.hi, other.hi)))

    def empty(self) -> bool:
        return any(h <= lo for lo, h in zip(self.lo, self.hi))


@dataclass(frozen=True)
class Pass:
    """One interpolation pass: the points ``starts + k * steps`` inside ``box``, predicted
    along ``axis`` with stride ``stride``, or, for a group of a multi-dimensional step
    (``axes`` non-zero), along each axis of the bit mask ``axes`` (``axis`` its first)."""

    axis: int
    stride: int
    starts: Vec
    steps: Vec
    box: Box
    axes: int = 0

    @property
    def along(self) -> tuple[int, ...]:
        """The axes the pass's points are predicted along."""
        return tuple(a for a in range(3) if self.axes >> a & 1) if self.axes else (self.axis,)


@dataclass(frozen=True)
class Step:
    """Refinement from the grid of strides ``coarse`` to the grid of strides ``fine``."""

    coarse: Vec
    fine: Vec

    @property
    def refined(self) -> tuple[bool, bool, bool]:
        return tuple(f < c for f, c in zip(self.fine, self.coarse))

    @cached_property
    def level_number(self) -> int:
        """SZ3's interpolation level: 1 for the finest stride, ``log2(s) + 1`` for stride ``s``."""
        return max(self.fine).bit_length()


@dataclass(frozen=True)
class Partition:
    """Steps, levels, passes and chunks of a 3D shape.

    Args:
        shape: internal 3D shape ``(n0, n1, n2)`` (see :func:`as_3d_shape`).
        order: axis order of the passes within a step.
        flat: axes refined to stride 1 before the others (see the module docstring).
    """

    shape: Vec
    order: Vec = (0, 1, 2)
    flat: tuple[bool, bool, bool] = (False, False, False)

    @staticmethod
    @lru_cache(maxsize=64)
    def get(shape: Vec, order: Vec = (0, 1, 2), flat: tuple[bool, bool, bool] = (False, False, False)) -> Partition:
        """A shared partition of ``shape``: its derived geometry is computed once per process."""
        return Partition(tuple(int(n) for n in shape), tuple(order), tuple(bool(f) for f in flat))

    @cached_property
    def cache(self) -> dict:
        """Memo of derived per-level arrays (filled by the codec and reader)."""
        return {}

    @cached_property
    def top(self) -> Vec:
        """Stride of the one-point starting grid, per axis."""
        return tuple(1 << math.ceil(math.log2(n)) if n > 1 else 1 for n in self.shape)

    @cached_property
    def steps(self) -> tuple[Step, ...]:
        v = list(self.top)
        out = []
        for phase in (True, False):
            while True:
                cand = [d for d in range(3) if v[d] > 1 and (self.flat[d] or not phase)]
                if not cand:
                    break
                m = max(v[d] for d in cand)
                new = [s // 2 if d in cand and s == m else s for d, s in enumerate(v)]
                out.append(Step(tuple(v), tuple(new)))
                v = new
        return tuple(out)

    @cached_property
    def level_numbers(self) -> tuple[int, ...]:
        """SZ3's interpolation level of each step (:attr:`Step.level_number`)."""
        return tuple(st.level_number for st in self.steps)

    @cached_property
    def base_steps(self) -> int:
        """Number of steps inside the base grid."""
        k = 0
        while k < len(self.steps) and self.points(self.steps[k].fine) <= BASE_POINTS:
            k += 1
        return k

    @property
    def num_levels(self) -> int:
        return len(self.steps) - self.base_steps + 1

    def points(self, stride: Vec) -> int:
        return math.prod(grid_shape(self.shape, stride))

    def level_stride(self, level: int) -> Vec:
        """Per-axis stride of the grid decoded up to ``level``."""
        k = self.base_steps + level
        return self.steps[k - 1].fine if k > 0 else self.top

    def level_steps(self, level: int) -> tuple[Step, ...]:
        if level == 0:
            return self.steps[: self.base_steps]
        return (self.steps[self.base_steps + level - 1],)

    @cached_property
    def step_points(self) -> tuple[int, ...]:
        """Number of points each step adds."""
        return tuple(self.points(st.fine) - self.points(st.coarse) for st in self.steps)

    def level_points(self, level: int) -> int:
        n = self.points(self.level_stride(level))
        return n if level == 0 else n - self.points(self.level_stride(level - 1))

    def passes(self, step: Step, box: Box | None = None, multi: bool = False) -> tuple[list[Pass], Box | None]:
        """Passes of ``step`` in order (its groups if ``multi``: see the module docstring),
        restricted to ``box`` when given.

        With a box, the pass boxes grow backwards so that each pass covers what later passes
        read; the second value is the box of coarser points the step reads (``None`` without
        a box).
        """
        P, Q = step.coarse, step.fine
        axes = [a for a in self.order if Q[a] < P[a]]
        if multi:
            return self._groups(P, Q, axes, box)
        cur = box if box is not None else Box.whole(self.shape)
        out = []
        for p in range(len(axes) - 1, -1, -1):
            a = axes[p]
            starts, steps = [0, 0, 0], list(Q)
            starts[a], steps[a] = Q[a], P[a]
            for later in axes[p + 1:]:
                steps[later] = P[later]
            out.append(Pass(a, Q[a], tuple(starts), tuple(steps), cur))
            if box is not None:
                cur = self.reads(out[-1])
        out.reverse()
        return out, (cur if box is not None else None)

    def _groups(self, P: Vec, Q: Vec, axes: list[int], box: Box | None) -> tuple[list[Pass], Box | None]:
        """:meth:`passes` of a multi-dimensional step. With a box, a group ``S`` covers the box
        and what the groups of one more axis ``a`` read of it (along ``a`` only); the coarse
        points read are what the groups of one axis read along it. (A group's box grown by all
        the groups after it, as passes are, would grow along every axis at each of them: the
        tuner's sampled trials then ran 15 times the points.)"""
        groups = [g for k in range(1, len(axes) + 1) for g in itertools.combinations(axes, k)]
        need: dict[frozenset, Box] = {}
        coarse = None
        if box is not None:
            for g in reversed(groups):
                cur = box
                for a in axes:
                    if a not in g:
                        cur = cur.hull(self._grow(need[frozenset(g) | {a}], a, Q[a]))
                need[frozenset(g)] = cur
            for a in axes:
                grown = self._grow(need[frozenset((a,))], a, Q[a])
                coarse = grown if coarse is None else coarse.hull(grown)
        out = []
        for g in groups:
            starts, steps = [0, 0, 0], list(Q)
            for a in g:
                starts[a] = Q[a]
            for a in axes:
                steps[a] = P[a]
            out.append(Pass(g[0], Q[g[0]], tuple(starts), tuple(steps),
                            need[frozenset(g)] if box is not None else Box.whole(self.shape), sum(1 << a for a in g)))
        return out, coarse

    def _grow(self, box: Box, a: int, stride: int) -> Box:
        """``box`` grown along axis ``a`` by the reach of a stencil of ``stride`` (the last point of
        a line extrapolates from up to 5 strides back)."""
        reach = EXTRAPOLATION_REACH if box.hi[a] + stride > self.shape[a] else STENCIL_REACH
        return box.grow(a, reach * stride, self.shape)

    @staticmethod
    def step_box(passes: list[Pass]) -> Box:
        """The box of a step's points that its ``passes`` (from :meth:`passes` with a box)
        compute: the hull of their boxes."""
        out = passes[0].box
        for p in passes[1:]:
            out = out.hull(p.box)
        return out

    def reads(self, p: Pass) -> Box:
        """The box of points pass ``p`` reads or writes: its box grown along each axis it
        predicts along by the stencil's reach (the last point of a line extrapolates from up
        to 5 strides back)."""
        out = p.box
        for a in p.along:
            out = self._grow(out, a, p.stride)
        return out

    def plan_passes(self, box: Box | None, last_step: int, first_step: int = 0,
                    multi: frozenset = frozenset()) -> dict[int, list[Pass]]:
        """Passes of steps ``first_step..last_step`` needed for the values of the step
        ``last_step`` grid inside ``box`` (all points when ``box`` is None), by step; the
        steps in ``multi`` multi-dimensional (:meth:`passes`)."""
        if box is None:
            key = ("plan", last_step, first_step, multi)
            if key not in self.cache:
                self.cache[key] = {i: self.passes(self.steps[i], None, i in multi)[0]
                                   for i in range(first_step, last_step + 1)}
            return self.cache[key]
        out: dict[int, list[Pass]] = {}
        need = box
        for i in range(last_step, first_step - 1, -1):
            out[i], need = self.passes(self.steps[i], need, i in multi)
        return out

    # ------------------------------------------------------------------ chunks
    def default_tile(self) -> int:
        """Chunk edge in grid points for this many axes longer than 1 (:data:`TILE`)."""
        return TILE[sum(n > 1 for n in self.shape)]

    def tile_bounds(self, level: int, tile: int | None = None) -> list[np.ndarray]:
        """Per axis, the grid-index boundaries of the chunks of ``level`` (about ``tile`` grid
        points per axis; the base grid is one chunk)."""
        key = ("tile bounds", level, tile)
        if key not in self.cache:
            g = grid_shape(self.shape, self.level_stride(level))
            if level == 0:
                out = [np.array([0, m], dtype=np.int64) for m in g]
            else:
                t = tile or self.default_tile()
                out = []
                for m in g:
                    nt = max(1, round(m / t))
                    out.append(np.array([(j * m) // nt for j in range(nt + 1)], dtype=np.int64))
            self.cache[key] = out
        return self.cache[key]

    def chunk_count(self, level: int, tile: int | None = None) -> int:
        """Number of chunks of ``level`` at chunk edge ``tile`` (:meth:`tile_bounds`), computed
        without building them (a hostile edge cannot make the reader allocate)."""
        if level == 0:
            return 1
        t = tile or self.default_tile()
        return math.prod(max(1, round(m / t)) for m in grid_shape(self.shape, self.level_stride(level)))

    def chunk_boxes(self, level: int, tile: int | None = None) -> np.ndarray:
        """Chunks of ``level``: int64 ``(n_chunks, 6)`` of grid-index ``lo0, hi0, lo1, hi1,
        lo2, hi2`` (grid of :meth:`level_stride`), in C order of the chunk grid."""
        key = ("boxes", level, tile)
        if key not in self.cache:
            b = self.tile_bounds(level, tile)
            g = np.meshgrid(*[np.arange(len(x) - 1) for x in b], indexing="ij")
            cols = []
            for ax in range(3):
                j = g[ax].ravel()
                cols += [b[ax][j], b[ax][j + 1]]
            self.cache[key] = np.stack(cols, axis=1).astype(np.int64)
        return self.cache[key]

    def chunks_touching(self, level: int, box: Box, tile: int | None = None) -> np.ndarray:
        """Indices of the chunks of ``level`` that hold grid points inside ``box``."""
        stride = self.level_stride(level)
        b = self.tile_bounds(level, tile)
        sel = []
        for ax in range(3):
            g_lo = -(-box.lo[ax] // stride[ax])
            g_hi = -(-box.hi[ax] // stride[ax])
            bounds = b[ax]
            sel.append(np.nonzero((bounds[:-1] < g_hi) & (bounds[1:] > g_lo))[0])
        n = [len(x) - 1 for x in b]
        idx = (sel[0][:, None, None] * n[1] + sel[1][None, :, None]) * n[2] + sel[2][None, None, :]
        return idx.ravel()

    def chunk_hull(self, level: int, chunks: np.ndarray, tile: int | None = None) -> Box | None:
        """Full-resolution box covering the given chunks of ``level``."""
        if len(chunks) == 0:
            return None
        boxes = self.chunk_boxes(level, tile)[chunks]
        stride = self.level_stride(level)
        lo = tuple(int(boxes[:, 2 * a].min()) * stride[a] for a in range(3))
        hi = tuple(min(self.shape[a], (int(boxes[:, 2 * a + 1].max()) - 1) * stride[a] + 1)
                   for a in range(3))
        return Box(lo, hi)
