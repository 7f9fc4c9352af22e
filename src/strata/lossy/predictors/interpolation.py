"""SZ3's hierarchical interpolation predictor (id 0 of :mod:`strata.lossy.predictors`):
compiled passes over one interpolation stride.

Each point of a pass (see :mod:`strata.lossy.partition`) is predicted from the
*reconstructed* points at distances ``s`` and ``3s`` along the pass axis (closed loop), with
SZ3's 1D interpolators (Zhao et al., "Optimizing Error-Bounded Lossy Compression for
Scientific Data by Dynamic Spline Interpolation", ICDE'21, Sec. IV-B; the cubic weights are
STZ's ``(-1, 9, 9, -1)/16``):

===========================  =============================================  ==========
neighbours present           prediction                                     name
===========================  =============================================  ==========
i-3s, i-s, i+s, i+3s         (-x[i-3s] + 9 x[i-s] + 9 x[i+s] - x[i+3s])/16  cubic
i-s, i+s, i+3s               (3 x[i-s] + 6 x[i+s] - x[i+3s]) / 8            quadratic
i-3s, i-s, i+s               (-x[i-3s] + 6 x[i-s] + 3 x[i+s]) / 8           quadratic
i-s, i+s                     (x[i-s] + x[i+s]) / 2                          linear
i-5s, i-3s, i-s (last point) (3 x[i-5s] - 10 x[i-3s] + 15 x[i-s]) / 8       extrapolation
i-3s, i-s (last point)       (3 x[i-s] - x[i-3s]) / 2                       extrapolation
i-s (last point)             x[i-s]                                         copy
===========================  =============================================  ==========

With ``cubic=False`` the linear rules are used (two-point interpolation, linear
extrapolation, copy). Predictions are computed in float64 from values of the data dtype;
encoder and decoder run the same compiled code, so their predictions are bit-identical.

Three kernels share one loop: :func:`encode_pass` (predict, quantize, keep the
reconstruction), :func:`decode_pass` (predict, dequantize) and :func:`preview_pass` (predict
only: fills a finer grid from a coarser one for a progressive preview). They run over all
cores (numba ``prange``).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..._numba import pick, prefetch_line, serial_variant
from ..quantize import (
    HIST_CLIP,
    RADIUS,
    UNPREDICTABLE,
    code_radius,
    dequantize_into,
    dequantize_window,
    narrow_type,
    quantize_into,
    quantize_lane,
    quantize_window,
    select,
    unfold_lane,
    window_clamp,
)

#: Its steps have one pass per refined axis (:data:`strata.lossy.predictors.Predictor.GROUPS`).
GROUPS = False
#: Points per parallel work item along the fastest axis.
_BLOCK = 2048
#: Passes with fewer points run on one thread (a parallel launch costs microseconds).
_SERIAL_BELOW = 16384
#: Points per slab (work item) when a step runs slab by slab.
_SLAB_POINTS = 32768
#: Parts a pass that runs row by row is split into, to run in parallel.
_PARTS = 64
#: Contiguous memory indices a row runner computes at a time into its scratch arrays.
_CHUNK = 1024
#: Lanes of the vector loops (AVX-512: 16 float32).
_VECTOR = 16
#: Largest distance of the points (in memory indices) that run over contiguous lanes: points 4
#: apart (the stride-2 level's passes) ran at 7.0 ns/point over lanes on era5_t2m (rows of 13
#: points, 49 lanes each) and 3.2 point by point; the finest level's, 2 apart, are faster over
#: lanes (ns3d: 2.0 against 2.2 ns/point).
_MAX_LANE_STEP = 2


# Prediction rules, by the neighbours a point has along its axis (see the table above); the
# last two only where a mask leaves a point valid neighbours on its right side alone.
_CUBIC, _QUAD_LEFT, _QUAD_RIGHT, _LINEAR, _EXTRAP_QUAD, _EXTRAP_LINEAR, _COPY, _EXTRAP_RIGHT, _COPY_RIGHT = range(9)


@njit(inline="always")
def _rule(i, n, s, cubic):
    """Rule for index ``i`` of an axis of length ``n`` at stride ``s``."""
    if i + s < n:
        if cubic:
            left = i >= 3 * s
            right = i + 3 * s < n
            if left and right:
                return _CUBIC
            if right:
                return _QUAD_LEFT
            if left:
                return _QUAD_RIGHT
        return _LINEAR
    if cubic and i >= 5 * s:
        return _EXTRAP_QUAD
    if i >= 3 * s:
        return _EXTRAP_LINEAR
    return _COPY


@njit(inline="always")
def _masked_rule(missing, idx, d1, i, n, s, cubic):
    """Rule for index ``i`` (memory index ``idx``, neighbours ``d1`` apart, uint64) of an axis
    of length ``n`` at stride ``s`` that uses valid neighbours only; a point whose neighbours on
    both sides are missing keeps :func:`_rule` (it then reads their reconstructions, which are
    predictions themselves). It reads no farther than ``3s`` (``STENCIL_REACH``): no quadratic
    extrapolation, which reads ``i - 5s``, outside what a region read decodes."""
    d3 = np.uint64(3) * d1
    left = missing[idx - d1] == 0
    right = i + s < n and missing[idx + d1] == 0
    if left and right:
        if cubic:
            left3 = i >= 3 * s and missing[idx - d3] == 0
            right3 = i + 3 * s < n and missing[idx + d3] == 0
            if left3 and right3:
                return _CUBIC
            if right3:
                return _QUAD_LEFT
            if left3:
                return _QUAD_RIGHT
        return _LINEAR
    if left:
        if i >= 3 * s and missing[idx - d3] == 0:
            return _EXTRAP_LINEAR
        return _COPY
    if right:
        if i + 3 * s < n and missing[idx + d3] == 0:
            return _EXTRAP_RIGHT
        return _COPY_RIGHT
    r = _rule(i, n, s, cubic)
    return _EXTRAP_LINEAR if r == _EXTRAP_QUAD else r


@njit(inline="always")
def _cubic(x, idx, d1, d3):
    """Cubic prediction of ``x[idx]`` (unsigned index and distances: no wraparound code)."""
    return (9.0 * (np.float64(x[idx - d1]) + np.float64(x[idx + d1]))
            - np.float64(x[idx - d3]) - np.float64(x[idx + d3])) * 0.0625


@njit(inline="always")
def _apply(x, idx, d1, rule):
    """Prediction of ``x[idx]`` with neighbours ``d1`` apart in memory (both uint64)."""
    d3 = np.uint64(3) * d1
    if rule == _CUBIC:
        return _cubic(x, idx, d1, d3)
    if rule == _LINEAR:
        return 0.5 * (np.float64(x[idx - d1]) + np.float64(x[idx + d1]))
    if rule == _QUAD_LEFT:
        return (3.0 * np.float64(x[idx - d1]) + 6.0 * np.float64(x[idx + d1])
                - np.float64(x[idx + d3])) * 0.125
    if rule == _QUAD_RIGHT:
        return (6.0 * np.float64(x[idx - d1]) + 3.0 * np.float64(x[idx + d1])
                - np.float64(x[idx - d3])) * 0.125
    if rule == _EXTRAP_QUAD:
        return (15.0 * np.float64(x[idx - d1]) - 10.0 * np.float64(x[idx - d3])
                + 3.0 * np.float64(x[idx - np.uint64(5) * d1])) * 0.125
    if rule == _EXTRAP_LINEAR:
        return 1.5 * np.float64(x[idx - d1]) - 0.5 * np.float64(x[idx - d3])
    if rule == _EXTRAP_RIGHT:
        return 1.5 * np.float64(x[idx + d1]) - 0.5 * np.float64(x[idx + d3])
    if rule == _COPY_RIGHT:
        return np.float64(x[idx + d1])
    return np.float64(x[idx - d1])


@njit(inline="always")
def _point(mode, x, codes, orig, idx, pred, eb, inv_bin, bin_width, win):
    """Point ``idx``: quantized against ``pred`` (mode 0), dequantized (1) or set to it (2); in
    the window ``[-win, win]`` of a residual layer when ``win > 0``
    (:func:`strata.lossy.quantize.quantize_window`)."""
    if mode == 0:
        if win > 0:
            codes[idx] = quantize_window(x, idx, np.float64(orig[idx]), pred, eb, inv_bin, bin_width, win)
        else:
            codes[idx] = quantize_into(x, idx, np.float64(orig[idx]), pred, eb, inv_bin, bin_width)
    elif mode == 1:
        if win > 0:
            dequantize_window(x, idx, codes, pred, inv_bin, bin_width, win)
        else:
            dequantize_into(x, idx, codes, pred, bin_width)
    else:
        x[idx] = window_clamp(pred, win) if win > 0 else pred


@njit(inline="always")
def _first(start, step, lo):
    """Smallest ``start + k*step >= lo`` (k >= 0)."""
    if lo <= start:
        return start
    return start + ((lo - start + step - 1) // step) * step


@njit(inline="always")
def _count(first, step, hi):
    if first >= hi:
        return 0
    return (hi - 1 - first) // step + 1


#: Geometry of one pass (clipped to a slab) as the row runners take it: work item ``w`` is
#: block ``w % nb`` (``_BLOCK`` points) of row ``w // nb``; row ``r`` is ``i0 = f0 + (r // c1) *
#: steps0``, ``i1 = f1 + (r % c1) * steps1``, its ``c2`` points ``st2`` apart from ``f2`` on
#: axis 2 (arrays ``mem0 = n1 * n2`` and ``n2`` apart on axes 0 and 1); the pass predicts along
#: ``axis`` at stride ``s`` (neighbours ``d1`` apart in memory), an axis of ``n_axis`` points in
#: the whole grid whose index ``ioff`` is the arrays' first; interpolation (``cub``) and
#: quantizer (``eb``, ``inv_bin``, ``bin_width``, the window ``win`` of a residual layer, 0 for
#: none) of its step; for a pass along axis 2, the points ``k`` in ``[e_lo, e_hi)`` of every row
#: are interior (the others near an edge).
_Rows = namedtuple("_Rows",
                   "nb c1 c2 f0 f1 f2 steps0 steps1 st2 mem0 n2 axis s n_axis ioff d1 cub eb inv_bin bin_width "
                   "win e_lo e_hi")


@njit(parallel=True, nogil=True, cache=True)
def _sweep(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo):
    """Run the passes of ``table`` in order. mode 0: encode, 1: decode, 2: preview.

    ``table[p]`` = ``axis, stride, start0..2, step0..2, lo0..2, hi0..2, step id, by_slab,
    axes`` of pass ``p`` (``axes``: the bit mask of the axes it predicts along), in the
    coordinates of the arrays (of internal shape ``shape``);
    ``bounds[p]`` its error bound and window (float64 ``(n, 2)``: the window of a residual
    layer's codes, 0 for none; :func:`strata.lossy.quantize.quantize_window`) and ``cubic[p]``
    its interpolation. ``geo`` (int64, 6)
    places the arrays in the whole grid, for the edge rules: per axis the grid index of their
    first point, then the whole grid's size (``0, 0, 0, shape`` for whole arrays; a window of
    a region read, :class:`strata.lossy.window.Window`, holds a box of one level's grid).

    The passes of one step run slab by slab along the first axis longer than 1 (``by_slab``
    non-zero says this is valid: a pass along that axis comes first and reads only coarser
    slabs; the other passes read within their slab), each slab doing all its passes while it is
    in cache, slabs in parallel; at the finest stride a slab prefetches the next one's memory
    when ``by_slab`` is 1 (one pass per axis over the whole box; :func:`geometry_rows`).
    Otherwise each pass sweeps the whole box, its rows split into a few parts per thread.
    """
    n1, n2 = shape[1], shape[2]
    mem0 = n1 * n2
    ax_s = 0 if shape[0] > 1 else (1 if shape[1] > 1 else 2)
    per_index = (mem0 if ax_s == 0 else (n2 if ax_s == 1 else 1))
    passes = (shape, table, bounds, cubic, geo)
    n = table.shape[0]
    p0 = 0
    while p0 < n:
        p1 = step_end(table, p0)
        if table[p0, 15]:
            # slabs: multiples of the step's fine stride along ax_s, a few indices each
            q = table[p0, 1] if table[p0, 0] == ax_s else table[p0, 5 + ax_s]
            lo = table[p0, 8 + ax_s]
            hi = table[p0, 11 + ax_s]
            for p in range(p0 + 1, p1):
                lo = min(lo, table[p, 8 + ax_s])
                hi = max(hi, table[p, 11 + ax_s])
            lo = (lo // q) * q
            width = slab_width(q, per_index)
            n_slabs = (hi - lo + width - 1) // width
            for u in prange(n_slabs):
                a = lo + u * width
                # at the finest stride, the next slab's memory (its points are dense), from where
                # the previous slab left off (the slab's passes read up to 3 indices ahead)
                if q == 1 and table[p0, 15] == 1:
                    _prefetch(x, (a + width + 3) * per_index, (a + 2 * width + 3) * per_index)
                    _prefetch(codes, (a + width) * per_index, (a + 2 * width) * per_index)
                    if mode == 0:
                        _prefetch(orig, (a + width) * per_index, (a + 2 * width) * per_index)
                bx, bc = _scratch(mode, x)
                _run(mode, x, codes, orig, missing, bx, bc, passes, (ax_s, a, a + width, p0, p1, 0, 1))
        else:
            for p in range(p0, p1):
                items = _pass_rows(shape, table, bounds, cubic, geo, p, ax_s, 0, shape[ax_s])[1]
                if items * _BLOCK < _SERIAL_BELOW:
                    bx, bc = _scratch(mode, x)
                    _run(mode, x, codes, orig, missing, bx, bc, passes, (ax_s, 0, shape[ax_s], p, p + 1, 0, 1))
                else:
                    # its rows in parallel, a few parts per thread
                    parts = min(items, _PARTS)
                    for t in prange(parts):
                        bx, bc = _scratch(mode, x)
                        _run(mode, x, codes, orig, missing, bx, bc, passes,
                             (ax_s, 0, shape[ax_s], p, p + 1, t, parts))
        p0 = p1


@njit(inline="always")
def step_end(table, p0):
    """The first row of ``table`` after ``p0`` of another step (column 14): the passes of one
    step are rows ``p0 .. step_end(table, p0)``."""
    p1 = p0 + 1
    while p1 < table.shape[0] and table[p1, 14] == table[p0, 14]:
        p1 += 1
    return p1


@njit(inline="always")
def slab_width(q, per_index):
    """Indices along the slab axis of a slab of a step at stride ``q`` on that axis
    (``per_index`` array elements an index): about ``_SLAB_POINTS`` points, a multiple of ``q``."""
    return q * max(1, _SLAB_POINTS // (per_index // q + 1))


@njit(inline="always")
def _prefetch(a, lo, hi):
    """Prefetch the cache lines of ``a[lo:hi]`` (clipped to ``a``)."""
    for i in range(max(lo, 0), min(hi, a.shape[0]), 64 // a.itemsize):
        prefetch_line(a, i)


@njit(inline="always")
def _scratch(mode, x):
    """Scratch arrays of a runner: ``_CHUNK`` values of ``x``'s dtype and, to encode, codes."""
    return np.empty(_CHUNK, x.dtype), np.empty(_CHUNK if mode == 0 else 0, np.int32)


def _run(mode, x, codes, orig, missing, bx, bc, passes, span):
    """:func:`_run_passes` compiled for ``mode`` (a literal in each call: a constant inside).
    ``span`` is passed as plain int64 values: the literals and unsigned prange indices of the
    calls would each make numba compile the runner again (5 s a version, cold). Narrow codes
    (uint16, :func:`strata.lossy.quantize.code_radius`) are only ever decoded: for them only
    that mode is compiled (each mode compiles for about 8 s, cold)."""
    raise NotImplementedError


@overload(_run, inline="always")
def _run_compiled(mode, x, codes, orig, missing, bx, bc, passes, span):
    if narrow_type(codes):
        def impl(mode, x, codes, orig, missing, bx, bc, passes, span):
            _run_passes(1, x, codes, orig, missing, bx, bc, passes, _int64s(span))
        return impl

    def impl(mode, x, codes, orig, missing, bx, bc, passes, span):
        span = _int64s(span)
        if mode == 1:
            _run_passes(1, x, codes, orig, missing, bx, bc, passes, span)
        elif mode == 0:
            _run_passes(0, x, codes, orig, missing, bx, bc, passes, span)
        else:
            _run_passes(2, x, codes, orig, missing, bx, bc, passes, span)
    return impl


@njit(inline="always")
def _int64s(span):
    return (np.int64(span[0]), np.int64(span[1]), np.int64(span[2]), np.int64(span[3]), np.int64(span[4]),
            np.int64(span[5]), np.int64(span[6]))


# The runners below take ``mode`` as a literal (numba compiles one version per mode) and run
# without reference counting (``_nrt=False``: they allocate nothing), which would otherwise cost
# a few atomic operations per array and call.
@njit(nogil=True, _nrt=False)
def _run_passes(mode, x, codes, orig, missing, bx, bc, passes, span):
    """Passes ``p0 .. p1`` of ``passes = (shape, table, bounds, cubic, geo)`` (see
    :func:`_sweep`), their points with index in ``[a, b)`` along axis ``ax_s``, of each pass
    part ``part`` of ``parts`` of its work items (``span = (ax_s, a, b, p0, p1, part, parts)``);
    ``bx``, ``bc``: scratch arrays (:func:`_scratch`).

    Work item ``w`` of a pass is block ``w % nb`` (``_BLOCK`` points) of row ``w // nb``; rows
    run over axis 1 inside axis 0."""
    ax_s, a, b, p0, p1, part, parts = span
    shape, table, bounds, cubic, geo = passes
    for p in range(p0, p1):
        if table[p, 8 + ax_s] >= b or table[p, 11 + ax_s] <= a:
            continue  # (the pass's box misses the span: a sampled box outside the slab)
        g, items = _pass_rows(shape, table, bounds, cubic, geo, p, ax_s, a, b)
        w0 = part * items // parts
        w1 = (part + 1) * items // parts
        if w1 <= w0:
            continue
        r = w0 // g.nb
        blk = w0 % g.nb
        r0 = r // g.c1
        r1 = r % g.c1
        for _ in range(w0, w1):
            k0 = blk * _BLOCK
            _row(mode, x, codes, orig, missing, bx, bc, g, g.f0 + r0 * g.steps0, g.f1 + r1 * g.steps1, k0,
                 min(g.c2, k0 + _BLOCK))
            blk += 1
            if blk == g.nb:
                blk = 0
                r1 += 1
                if r1 == g.c1:
                    r1 = 0
                    r0 += 1


@njit(inline="always")
def _pass_rows(shape, table, bounds, cubic, geo, p, ax_s, a, b):
    """The rows (:data:`_Rows`) of pass ``p`` with index in ``[a, b)`` along axis ``ax_s``, and
    their number of work items."""
    n1, n2 = shape[1], shape[2]
    mem0 = n1 * n2
    axis, s = table[p, 0], table[p, 1]
    steps0, steps1, st2 = table[p, 5], table[p, 6], table[p, 7]
    lo0, lo1, lo2 = table[p, 8], table[p, 9], table[p, 10]
    hi0, hi1, hi2 = table[p, 11], table[p, 12], table[p, 13]
    if ax_s == 0:
        lo0, hi0 = max(lo0, a), min(hi0, b)
    elif ax_s == 1:
        lo1, hi1 = max(lo1, a), min(hi1, b)
    else:
        lo2, hi2 = max(lo2, a), min(hi2, b)
    f0 = _first(table[p, 2], steps0, lo0)
    f1 = _first(table[p, 3], steps1, lo1)
    f2 = _first(table[p, 4], st2, lo2)
    c0 = _count(f0, steps0, hi0)
    c1 = _count(f1, steps1, hi1)
    c2 = _count(f2, st2, hi2)
    eb, win = bounds[p, 0], bounds[p, 1]
    nb = (c2 + _BLOCK - 1) // _BLOCK
    # along axis 2: points k (of a row) in [e_lo, e_hi) have the whole stencil inside the grid
    g2 = geo[2] + f2  # (index of a row's first point in the whole grid)
    reach = 3 * s if cubic[p] else s
    e_lo = -((g2 - reach) // st2)
    e_hi = -((g2 + reach - geo[5]) // st2)
    rows = _Rows(nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s, geo[3 + axis], geo[axis],
                 s * (mem0 if axis == 0 else (n2 if axis == 1 else 1)), cubic[p], eb,
                 0.5 / eb if eb > 0 else 0.0, 2.0 * eb, win, e_lo, e_hi)
    return rows, c0 * c1 * nb


@njit(inline="always")
def _row(mode, x, codes, orig, missing, bx, bc, g, i0, i1, k0, k1):
    """Points ``k0 .. k1`` of the row ``(i0, i1)`` of the pass ``g`` (:data:`_Rows`). The edge
    rules see a point's index along the pass axis plus ``ioff`` against ``n_axis``: its place in
    the whole grid.

    Cubic and linear points at most ``_MAX_LANE_STEP`` apart spanning at least ``_VECTOR``
    memory indices run over the contiguous memory between them (:func:`_lanes`), which
    numba/LLVM vectorizes; the others (and a zero bound, whose quantizer compares signs, and a
    residual layer's windowed codes but to decode them) point by point (:func:`_scalar`)."""
    row = i0 * g.mem0 + i1 * g.n2 + g.f2
    s, st2 = g.s, g.st2
    if missing.shape[0] > 0:
        # with a mask the rule depends on which neighbours are valid: chosen point by point
        c_lo, c_hi, rule = k1, k1, -1
    elif g.axis != 2:
        # off axis 2 the rule is the same along the whole row
        rule = _rule(g.ioff + (i0 if g.axis == 0 else i1), g.n_axis, s, g.cub)
        if mode == 2 and rule == _EXTRAP_QUAD:
            rule = _EXTRAP_LINEAR  # a preview compounds extrapolation over the levels it skips
        c_lo, c_hi = k0, k1
    else:
        # along axis 2: points k in [c_lo, c_hi) are interior (cubic, or linear), the others near an edge
        c_lo = min(k1, max(k0, g.e_lo))
        c_hi = min(k1, max(c_lo, g.e_hi))
        rule = _CUBIC if g.cub else _LINEAR
    lanes = (c_hi - c_lo - 1) * st2 + 1
    vector = ((rule == _CUBIC or rule == _LINEAR) and st2 <= _MAX_LANE_STEP and lanes >= _VECTOR
              and (mode != 0 or g.eb > 0) and (g.win == 0 or mode == 1))
    # point by point: the edges (each point its own rule) and an interior that is not vectorized
    for lo, hi, r in ((k0, c_lo, -1), (c_lo, c_hi, -2 if vector else rule), (c_hi, k1, -1)):
        if hi > lo and r != -2:
            _scalar(mode, x, codes, orig, missing, g, row, i0, i1, lo, hi, r)
    if vector:
        start = row + c_lo * st2
        if rule == _CUBIC:
            _cubic_lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, g.d1, g.eb, g.inv_bin, g.bin_width, g.win)
        else:
            _lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, g.d1, False, g.eb, g.inv_bin, g.bin_width, 0, 0, 0,
                   g.win)


@njit(inline="always")
def _scalar(mode, x, codes, orig, missing, g, row, i0, i1, k0, k1, rule):
    """Points ``k0 .. k1`` of the row ``(i0, i1)`` (memory index ``row``) point by point: all
    with ``rule``, or (``rule < 0``) each with its own, by the mask or else by its place."""
    s, st2, axis = g.s, g.st2, g.axis
    urow, ust, u1 = np.uint64(row), np.uint64(st2), np.uint64(g.d1)
    for k in range(k0, k1):
        idx = urow + np.uint64(k) * ust
        r = rule
        if rule < 0:
            i = g.ioff + (i0 if axis == 0 else (i1 if axis == 1 else g.f2 + k * st2))
            if missing.shape[0] > 0:
                r = _masked_rule(missing, idx, u1, i, g.n_axis, s, g.cub)
            else:
                r = _rule(i, g.n_axis, s, g.cub)
                if mode == 2 and r == _EXTRAP_QUAD:
                    r = _EXTRAP_LINEAR
        _point(mode, x, codes, orig, idx, _apply(x, idx, u1, r), g.eb, g.inv_bin, g.bin_width, g.win)


@njit(nogil=True, _nrt=False)
def _lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, d1, cubic, eb, inv_bin, bin_width, n_axes, d2, d3, win):
    """Cubic (or linear) points ``start + k * st2`` (``st2`` a power of 2, neighbours ``d1``
    apart; with ``n_axes`` 1, 2 or 3, the cubic mean along that many axes of neighbours ``d1``,
    ``d2``, ``d3`` apart, a group of :mod:`strata.lossy.predictors.multidim`; ``n_axes`` is a
    literal of each caller, 0 here) over the ``lanes`` (at least ``_VECTOR``) contiguous memory
    indices from ``start``,
    in chunks of at most ``_CHUNK``: each lane predicted and quantized (or dequantized) without
    a branch into the scratch ``bx`` (``bc``: codes), a lane between two points keeping its
    value, then copied back. The same operations as point by point, so the same bits; the lanes
    between points belong to other passes, which no thread runs meanwhile, and their loads read
    only what the points' loads read. The last ``_VECTOR`` lanes of a chunk run as one vector,
    again where they overlap the others, instead of a scalar remainder. Decoding with the cubic
    rule runs it inlined into the row (:func:`_cubic_lanes`). ``win``: a residual layer's window
    (decoding only; 0 for none)."""
    u1, u2, u3 = np.uint64(d1), np.uint64(d2), np.uint64(d3)
    n_chunks = (lanes + _CHUNK - 1) // _CHUNK
    for c in range(n_chunks):
        c0 = c * lanes // n_chunks if n_chunks > 1 else 0
        n = np.uint64((c + 1) * lanes // n_chunks - c0 if n_chunks > 1 else lanes)  # (at least _VECTOR)
        base = np.uint64(start + c0)
        first = np.uint64(c0)
        for t in range(n & ~np.uint64(_VECTOR - 1)):
            _lane(mode, x, codes, orig, bx, bc, base, first, t, st2, (u1, u2, u3), n_axes, cubic, eb, inv_bin,
                  bin_width, win)
        tail = n - np.uint64(_VECTOR)
        for v in range(np.uint64(_VECTOR)):
            _lane(mode, x, codes, orig, bx, bc, base, first, tail + v, st2, (u1, u2, u3), n_axes, cubic, eb, inv_bin,
                  bin_width, win)
        for t in range(n):
            x[base + t] = bx[t]
        if mode == 0:
            for t in range(n):
                codes[base + t] = bc[t]


#: :func:`_lanes` compiled into its caller (numba inlines it), for :func:`_cubic_lanes`.
_lanes_inlined = njit(inline="always")(_lanes.py_func)


def _cubic_lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, d1, eb, inv_bin, bin_width, win):
    """:func:`_lanes` with the cubic rule, inlined into its row (:func:`_row`) to decode: as a call
    of its own (fifteen arguments, once a row), era5_t2m's finest-level decoding passes (rows of
    49 points) took 2.7 ms on one thread instead of 2.05. Encoding, previews and the linear rule
    keep the call: inlined in every mode and rule, the passes compiled 20 % longer in a fresh
    process (about 40 s on two cores) for compressions 0-4 % faster (compiled code only)."""
    raise NotImplementedError


@overload(_cubic_lanes, inline="always", prefer_literal=True)
def _cubic_lanes_compiled(mode, x, codes, orig, bx, bc, start, lanes, st2, d1, eb, inv_bin, bin_width, win):
    lanes_fn = _lanes_inlined if isinstance(mode, types.IntegerLiteral) and mode.literal_value == 1 else _lanes

    def impl(mode, x, codes, orig, bx, bc, start, lanes, st2, d1, eb, inv_bin, bin_width, win):
        lanes_fn(mode, x, codes, orig, bx, bc, start, lanes, st2, d1, True, eb, inv_bin, bin_width, 0, 0, 0, win)

    return impl


@njit(inline="always")
def _lane(mode, x, codes, orig, bx, bc, base, first, t, st2, u, n_axes, cubic, eb, inv_bin, bin_width, win):
    """Lane ``t`` of a chunk of :func:`_lanes` (memory index ``base + t``, lane ``first + t`` of
    the span: a point where that is a multiple of ``st2``) into ``bx[t]`` (and ``bc[t]``);
    ``u``: the neighbours' distances, ``n_axes`` as in :func:`_lanes`; a residual layer's code
    decoded in its window ``win`` (:func:`strata.lossy.quantize.dequantize_window`'s operations,
    without a branch)."""
    j = base + t
    if n_axes > 0:
        # a group's mean, summed from +0.0 by increasing axis as multidim's points are
        total = 0.0 + _along(x, j, u[0], cubic)
        if n_axes > 1:
            total += _along(x, j, u[1], cubic)
        if n_axes > 2:
            total += _along(x, j, u[2], cubic)
        pred = total / n_axes
    else:
        pred = _along(x, j, u[0], cubic)
    keep = ((first + t) & np.uint64(st2 - 1)) != 0
    if mode == 0:
        rec, code = quantize_lane(x, orig[j], pred, eb, inv_bin, bin_width)
        bx[t] = select(keep, x[j], rec)
        bc[t] = select(keep, np.int32(codes[j]), code)
    elif mode == 1:
        c = codes[j]
        q = np.float64(np.int64(c) - code_radius(codes))
        if win > 0:
            pred, q = unfold_lane(pred, q, inv_bin, win)
        bx[t] = select(keep | (c == UNPREDICTABLE), x[j], x.dtype.type(pred + q * bin_width))
    else:
        bx[t] = select(keep, x[j], x.dtype.type(pred))


@njit(inline="always")
def _along(x, j, d1, cubic):
    """The cubic or linear interpolation of ``x[j]`` from neighbours ``d1`` apart (uint64)."""
    if cubic:
        return _cubic(x, j, d1, np.uint64(3) * d1)
    return 0.5 * (np.float64(x[j - d1]) + np.float64(x[j + d1]))


def pass_table(plan, bounds, cubic, part=None, key=None, rows=None, window: float = 0.0):
    """Arrays for the pass runners: one row per pass, with its bound, window and interpolation.

    Args:
        plan: ``{step index: [Pass, ...]}``, run in increasing step order.
        bounds: error bound of each step (indexable by step index).
        cubic: interpolation of each step (callable ``cubic(step)``, true for cubic: the
            step's parameter, :meth:`strata.lossy.plan.Plan.param`).
        part: the partition; with ``key``, the geometry rows are memoized in ``part.cache``.
        rows: the passes' geometry rows when the caller has them (a region read's window:
            :meth:`strata.lossy.window.Window.rows`), else computed (:func:`geometry_rows`).
        window: the window of a residual layer's codes (:attr:`strata.lossy.plan.Plan.window`).

    Returns:
        ``(rows, bounds, cubic, points)``, ``bounds`` each pass's bound and window (float64
        ``(n, 2)``), ``points`` about the number of points the passes visit (it picks the
        serial or the parallel runner).
    """
    if rows is not None:
        points = count_points(rows)
    elif part is not None and key is not None and key in part.cache:
        rows, points = part.cache[key]
    else:
        shape = part.shape if part is not None else None
        rows = geometry_rows(plan, shape)
        points = count_points(rows)
        if part is not None and key is not None:
            part.cache[key] = rows, points
    return (rows, *step_arrays(plan, bounds, cubic, window), points)


def count_points(rows) -> int:
    """About the number of points the passes of geometry ``rows`` visit."""
    return int((np.maximum(rows[:, 11:14] - rows[:, 8:11], 0) // rows[:, 5:8] + 1).prod(axis=1).sum())


def step_arrays(plan, bounds, cubic, window: float = 0.0):
    """Per pass of ``plan`` (in step order): its step's error bound and the window (float64
    ``(n, 2)``), and its interpolation."""
    steps = sorted(plan)
    counts = [len(plan[i]) for i in steps]
    eb = np.repeat(np.array([(bounds[i], window) for i in steps], dtype=np.float64).reshape(-1, 2), counts, axis=0)
    cub = np.repeat(np.array([bool(cubic(i)) for i in steps], dtype=np.bool_), counts)
    return eb, cub


def geometry_rows(plan, shape):
    """Geometry rows (see :func:`_sweep`) of ``plan``'s passes in step order (a new array);
    a step runs slab by slab when its pass along the slab axis (if any) comes first (``by_slab``
    1), without prefetching the next slab when it has several passes along an axis (2: the
    passes of small boxes spread through the array, the tuner's samples, which would prefetch
    whole planes for a few rows each: most of a trial's time on ns3d192)."""
    ax_s = None if shape is None else (0 if shape[0] > 1 else (1 if shape[1] > 1 else 2))
    out = []
    for i in sorted(plan):
        axes = [p.axis for p in plan[i]]
        by_slab = 0
        if ax_s is not None and (ax_s not in axes or axes[0] == ax_s):
            by_slab = 1 if len(axes) == len(set(axes)) else 2
        out += [(p.axis, p.stride, *p.starts, *p.steps, *p.box.lo, *p.box.hi, i, by_slab, p.axes or 1 << p.axis)
                for p in plan[i]]
    return np.array(out, dtype=np.int64).reshape(-1, 17)


_NO_CODES = np.empty(1, np.int32)


def _geo(shape, geo):
    return np.concatenate([np.zeros(3, np.int64), shape]) if geo is None else geo


def encode_passes(x, codes, orig, missing, shape, table, geo=None):
    """Predict and quantize the points of the passes of ``table`` (from :func:`pass_table`).

    Args:
        x: flat working array (float32/float64); reconstructed values are written into it.
        codes: flat int32 array receiving the quantization codes.
        orig: flat original values (same dtype as ``x``), missing points NaN.
        missing: flat uint8 mask (1 = missing), or an empty array without missing values:
            predictions then read valid neighbours only where they can.
        shape: internal 3D shape of the arrays, int64 array.
        table: from :func:`pass_table` (or :meth:`strata.lossy.window.Window.table`).
        geo: where the arrays lie in the grid of the passes (see :func:`_sweep`); default:
            they are the whole array.
    """
    _runner(table)(0, x, codes, orig, missing, shape, *table[:3], _geo(shape, geo))


def decode_passes(x, codes, missing, shape, table, geo=None):
    """Reconstruct the points of the passes from their codes (see :func:`encode_passes`)."""
    _runner(table)(1, x, codes, x, missing, shape, *table[:3], _geo(shape, geo))


def preview_passes(x, missing, shape, table, geo=None):
    """Fill the points of the passes with their prediction (no residual)."""
    _runner(table)(2, x, _NO_CODES, x, missing, shape, *table[:3], _geo(shape, geo))


#: Counts below which :func:`count_codes` keeps four interleaved copies.
_SMALL = 16



@njit(nogil=True, cache=True)
def count_codes(codes, flat, x, has_missing, shape, rows, hist, sse):
    """The tuner's cost estimate of a trial (:func:`strata.lossy.tune.estimate_bits`): add the
    codes of each pass of the geometry ``rows`` (:func:`geometry_rows`)
    to ``hist[step]``: ``|q|`` clipped to ``HIST_CLIP``, unpredictable values in the last column;
    missing points (``has_missing``: NaN in ``flat``) have no symbol and are left out. With a
    non-empty ``sse`` (one per step), the squared error of each counted point's
    reconstruction ``x`` against ``flat`` is added to ``sse[step]``. The
    counts of ``|q| < _SMALL`` go to four interleaved copies first (consecutive points hit the
    same few counters, and one copy would wait on its own previous increment)."""
    n1, n2 = shape[1], shape[2]
    small = np.zeros((4, _SMALL), np.int64)
    errors = sse.shape[0] > 0
    for p in range(rows.shape[0]):
        out = hist[rows[p, 14]]
        err = 0.0
        st2 = np.uint64(rows[p, 7])
        f2 = _first(rows[p, 4], rows[p, 7], rows[p, 10])
        n = _count(f2, rows[p, 7], rows[p, 13])
        small[:] = 0
        k = np.uint64(0)
        for i0 in range(_first(rows[p, 2], rows[p, 5], rows[p, 8]), rows[p, 11], rows[p, 5]):
            for i1 in range(_first(rows[p, 3], rows[p, 6], rows[p, 9]), rows[p, 12], rows[p, 6]):
                idx = np.uint64((i0 * n1 + i1) * n2 + f2)
                for _ in range(n):
                    c = codes[idx]
                    if not (has_missing and flat[idx] != flat[idx]):
                        b = HIST_CLIP + 1 if c == UNPREDICTABLE else min(abs(np.int64(c) - RADIUS), HIST_CLIP)
                        if b < _SMALL:
                            small[k & np.uint64(3), b] += 1
                        else:
                            out[b] += 1
                        k += np.uint64(1)
                        if errors:
                            d = np.float64(x[idx]) - np.float64(flat[idx])
                            err += d * d
                    idx += st2
        if errors:
            sse[rows[p, 14]] += err
        for b in range(_SMALL):
            out[b] += small[0, b] + small[1, b] + small[2, b] + small[3, b]


_sweep_serial = serial_variant(_sweep)
#: Passes visiting fewer points run on one thread.
SERIAL_POINTS = 1 << 15


def _runner(table):
    return pick(_sweep, _sweep_serial, table[3] < SERIAL_POINTS)
