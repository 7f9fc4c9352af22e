"""Hierarchical interpolation predictor: compiled passes over one interpolation stride.

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

import numpy as np
from numba import njit, prange

from .._numba import pick, serial_variant
from .quantize import dequantize_into, quantize_into

#: Points per parallel work item along the fastest axis.
_BLOCK = 2048
#: Passes with fewer points run on one thread (a parallel launch costs microseconds).
_SERIAL_BELOW = 16384
#: Points per slab (work item) when a step runs slab by slab.
_SLAB_POINTS = 32768


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
def _point(mode, x, codes, orig, idx, pred, eb, inv_bin, bin_width):
    if mode == 0:
        codes[idx] = quantize_into(x, idx, np.float64(orig[idx]), pred, eb, inv_bin, bin_width)
    elif mode == 1:
        dequantize_into(x, idx, codes[idx], pred, bin_width)
    else:
        x[idx] = pred


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


@njit(parallel=True, nogil=True, cache=True)
def _sweep(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo):
    """Run the passes of ``table`` in order. mode 0: encode, 1: decode, 2: preview.

    ``table[p]`` = ``axis, stride, start0..2, step0..2, lo0..2, hi0..2, step id, by_slab``
    of pass ``p``, in the coordinates of the arrays (of internal shape ``shape``);
    ``bounds[p]`` its error bound and ``cubic[p]`` its interpolation. ``geo`` (int64, 6)
    places the arrays in the whole grid, for the edge rules: per axis the grid index of their
    first point, then the whole grid's size (``0, 0, 0, shape`` for whole arrays; a window of
    a region read, :class:`strata.lossy.window.Window`, holds a box of one level's grid).

    The passes of one step run slab by slab along the first axis longer than 1 (``by_slab``
    says this is valid: a pass along that axis comes first and reads only coarser slabs;
    the other passes read within their slab), each slab doing all its passes while it is in
    cache, slabs in parallel. Otherwise each pass sweeps the whole box in parallel.
    """
    n1, n2 = shape[1], shape[2]
    mem0 = n1 * n2
    ax_s = 0 if shape[0] > 1 else (1 if shape[1] > 1 else 2)
    per_index = (mem0 if ax_s == 0 else (n2 if ax_s == 1 else 1))
    n = table.shape[0]
    p0 = 0
    while p0 < n:
        p1 = p0 + 1
        while p1 < n and table[p1, 14] == table[p0, 14]:
            p1 += 1
        if table[p0, 15]:
            # slabs: multiples of the step's fine stride along ax_s, a few indices each
            q = table[p0, 1] if table[p0, 0] == ax_s else table[p0, 5 + ax_s]
            lo = table[p0, 8 + ax_s]
            hi = table[p0, 11 + ax_s]
            for p in range(p0 + 1, p1):
                lo = min(lo, table[p, 8 + ax_s])
                hi = max(hi, table[p, 11 + ax_s])
            lo = (lo // q) * q
            width = q * max(1, _SLAB_POINTS // (per_index // q + 1))
            n_slabs = (hi - lo + width - 1) // width
            for u in prange(n_slabs):
                a = lo + u * width
                for p in range(p0, p1):
                    _pass(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo, p, ax_s, a, a + width, -1)
        else:
            end = shape[ax_s]
            for p in range(p0, p1):
                # whole pass, its rows in parallel
                nw = _pass(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo, p, ax_s, 0, end, -2)
                if nw * _BLOCK < _SERIAL_BELOW:
                    _pass(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo, p, ax_s, 0, end, -1)
                else:
                    for w in prange(nw):
                        _pass(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo, p, ax_s, 0, end, w)
        p0 = p1


@njit(nogil=True, cache=True)
def _pass(mode, x, codes, orig, missing, shape, table, bounds, cubic, geo, p, ax_s, a, b, item):
    """Points of pass ``p`` with index in ``[a, b)`` along axis ``ax_s``: all of them
    (``item == -1``), only work item ``item >= 0``, or none (``item == -2``); returns the
    number of work items."""
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
    if c0 == 0 or c1 == 0 or c2 == 0:
        return 0
    eb = bounds[p]
    cub = cubic[p]
    n_axis = geo[3 + axis]
    ioff = geo[axis]
    d1 = s * (mem0 if axis == 0 else (n2 if axis == 1 else 1))
    inv_bin = 0.5 / eb if eb > 0 else 0.0
    bin_width = 2.0 * eb
    nb = (c2 + _BLOCK - 1) // _BLOCK
    total = c0 * c1 * nb
    if item != -2:
        w0, w1 = (item, item + 1) if item >= 0 else (0, total)
        if mode == 0:
            _rows_encode(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2,
                         axis, s, n_axis, ioff, d1, cub, eb, inv_bin, bin_width)
        elif mode == 1:
            _rows_decode(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2,
                         axis, s, n_axis, ioff, d1, cub, eb, inv_bin, bin_width)
        else:
            _rows_preview(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2,
                          axis, s, n_axis, ioff, d1, cub, eb, inv_bin, bin_width)
    return total


# One compiled row runner per mode (the mode is a constant inside each); no reference counting
# (``_nrt=False``): they allocate nothing, and are called once per pass or work item.
@njit(nogil=True, _nrt=False)
def _rows_encode(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
                 n_axis, ioff, d1, cub, eb, inv_bin, bin_width):
    _run_rows(0, x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
              n_axis, ioff, d1, cub, eb, inv_bin, bin_width)


@njit(nogil=True, _nrt=False)
def _rows_decode(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
                 n_axis, ioff, d1, cub, eb, inv_bin, bin_width):
    _run_rows(1, x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
              n_axis, ioff, d1, cub, eb, inv_bin, bin_width)


@njit(nogil=True, _nrt=False)
def _rows_preview(x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
                  n_axis, ioff, d1, cub, eb, inv_bin, bin_width):
    _run_rows(2, x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
              n_axis, ioff, d1, cub, eb, inv_bin, bin_width)


@njit(inline="always")
def _run_rows(mode, x, codes, orig, missing, w0, w1, nb, c1, c2, f0, f1, f2, steps0, steps1, st2, mem0, n2, axis, s,
              n_axis, ioff, d1, cub, eb, inv_bin, bin_width):
    """Work items ``w0 .. w1`` of a pass: item ``w`` is block ``w % nb`` (``_BLOCK`` points)
    of row ``w // nb``; rows run over axis 1 inside axis 0. The divisions are done once."""
    r = w0 // nb
    blk = w0 % nb
    r0 = r // c1
    r1 = r % c1
    for _ in range(w0, w1):
        k0 = blk * _BLOCK
        _row_work(mode, x, codes, orig, missing, f0 + r0 * steps0, f1 + r1 * steps1, k0, min(c2, k0 + _BLOCK), f2, st2,
                  mem0, n2, axis, s, n_axis, ioff, d1, cub, eb, inv_bin, bin_width)
        blk += 1
        if blk == nb:
            blk = 0
            r1 += 1
            if r1 == c1:
                r1 = 0
                r0 += 1


@njit(inline="always")
def _row_work(mode, x, codes, orig, missing, i0, i1, k0, k1, f2, st2, mem0, n2, axis, s, n_axis, ioff, d1, cub, eb,
              inv_bin, bin_width):
    """Points ``k0 .. k1`` of the row ``(i0, i1)`` of a pass; ``mode`` is a constant in each
    of the three compiled row runners above. The edge rules see a point's index along the
    pass axis plus ``ioff`` against ``n_axis``: its place in the whole grid."""
    row = i0 * mem0 + i1 * n2 + f2
    # unsigned indices: numba adds no negative-index wraparound to the loads (2x fewer instructions)
    urow = np.uint64(row)
    ust = np.uint64(st2)
    u1 = np.uint64(d1)
    u3 = np.uint64(3 * d1)
    if missing.shape[0] > 0:
        # with a mask the rule depends on which neighbours are valid: chosen point by point
        for k in range(k0, k1):
            idx = urow + np.uint64(k) * ust
            r = _masked_rule(missing, idx, u1, ioff + (i0 if axis == 0 else (i1 if axis == 1 else f2 + k * st2)),
                             n_axis, s, cub)
            _point(mode, x, codes, orig, idx, _apply(x, idx, u1, r), eb, inv_bin, bin_width)
        return
    if axis != 2:
        # off axis 2 the rule is the same along the whole row
        rule = _rule(ioff + (i0 if axis == 0 else i1), n_axis, s, cub)
        if mode == 2 and rule == _EXTRAP_QUAD:
            rule = _EXTRAP_LINEAR  # a preview compounds extrapolation over the levels it skips
        if rule == _CUBIC:
            for k in range(k0, k1):
                idx = urow + np.uint64(k) * ust
                _point(mode, x, codes, orig, idx, _cubic(x, idx, u1, u3), eb, inv_bin, bin_width)
        else:
            for k in range(k0, k1):
                idx = urow + np.uint64(k) * ust
                _point(mode, x, codes, orig, idx, _apply(x, idx, u1, rule), eb, inv_bin, bin_width)
        return
    # along axis 2: points k in [c_lo, c_hi) are interior (cubic), the others near an edge
    g2 = ioff + f2  # (index of the row's first point in the whole grid)
    c_lo = c_hi = k1
    if cub:
        c_lo = min(k1, max(k0, -((g2 - 3 * s) // st2)))
        c_hi = min(k1, max(c_lo, -((g2 + 3 * s - n_axis) // st2)))
    for k in range(k0, c_lo):
        _edge_point(mode, x, codes, orig, urow + np.uint64(k) * ust, g2 + k * st2, n_axis, s, cub, u1,
                    eb, inv_bin, bin_width)
    for k in range(c_lo, c_hi):
        idx = urow + np.uint64(k) * ust
        _point(mode, x, codes, orig, idx, _cubic(x, idx, u1, u3), eb, inv_bin, bin_width)
    for k in range(c_hi, k1):
        _edge_point(mode, x, codes, orig, urow + np.uint64(k) * ust, g2 + k * st2, n_axis, s, cub, u1,
                    eb, inv_bin, bin_width)


@njit(inline="always")
def _edge_point(mode, x, codes, orig, idx, i, n_axis, s, cub, u1, eb, inv_bin, bin_width):
    r = _rule(i, n_axis, s, cub)
    if mode == 2 and r == _EXTRAP_QUAD:
        r = _EXTRAP_LINEAR
    _point(mode, x, codes, orig, idx, _apply(x, idx, u1, r), eb, inv_bin, bin_width)


def pass_table(plan, bounds, cubic, part=None, key=None):
    """Arrays for the pass runners: one row per pass, with its bound and interpolation.

    Args:
        plan: ``{step index: [Pass, ...]}``, run in increasing step order.
        bounds: error bound of each step (indexable by step index).
        cubic: interpolation of each step (callable ``cubic(step) -> bool``).
        part: the partition; with ``key``, the geometry rows are memoized in ``part.cache``.

    Returns:
        ``(rows, bounds, cubic, points)``, ``points`` about the number of points the passes
        visit (it picks the serial or the parallel runner).
    """
    if part is not None and key is not None and key in part.cache:
        rows, points = part.cache[key]
    else:
        shape = part.shape if part is not None else None
        rows = geometry_rows(plan, shape)
        points = count_points(rows)
        if part is not None and key is not None:
            part.cache[key] = rows, points
    return (rows, *step_arrays(plan, bounds, cubic), points)


def count_points(rows) -> int:
    """About the number of points the passes of geometry ``rows`` visit."""
    return int((np.maximum(rows[:, 11:14] - rows[:, 8:11], 0) // rows[:, 5:8] + 1).prod(axis=1).sum())


def step_arrays(plan, bounds, cubic):
    """Per pass of ``plan`` (in step order): its step's error bound and interpolation."""
    steps = sorted(plan)
    counts = [len(plan[i]) for i in steps]
    eb = np.repeat(np.array([bounds[i] for i in steps], dtype=np.float64), counts)
    cub = np.repeat(np.array([bool(cubic(i)) for i in steps], dtype=np.bool_), counts)
    return eb, cub


def geometry_rows(plan, shape):
    """Geometry rows (see :func:`_sweep`) of ``plan``'s passes in step order (a new array);
    a step runs slab by slab when its pass along the slab axis (if any) comes first."""
    ax_s = None if shape is None else (0 if shape[0] > 1 else (1 if shape[1] > 1 else 2))
    out = []
    for i in sorted(plan):
        axes = [p.axis for p in plan[i]]
        by_slab = ax_s is not None and (ax_s not in axes or axes[0] == ax_s)
        out += [(p.axis, p.stride, *p.starts, *p.steps, *p.box.lo, *p.box.hi, i, by_slab) for p in plan[i]]
    return np.array(out, dtype=np.int64).reshape(-1, 16)


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


_sweep_serial = serial_variant(_sweep)
#: Passes visiting fewer points run on one thread.
SERIAL_POINTS = 1 << 15


def _runner(table):
    return pick(_sweep, _sweep_serial, table[3] < SERIAL_POINTS)


@njit(nogil=True, cache=True)
def _origin(x, codes, orig, eb, pred):
    inv_bin = 0.5 / eb if eb > 0 else 0.0
    codes[0] = quantize_into(x, 0, np.float64(orig[0]), pred, eb, inv_bin, 2.0 * eb)


@njit(nogil=True, cache=True)
def _origin_decode(x, codes, eb, pred):
    dequantize_into(x, 0, codes[0], pred, 2.0 * eb)


def encode_origin(x, codes, orig, eb, pred=0.0):
    """Quantize the first point (the one-point starting grid) against the prediction
    ``pred`` (0, or the mean of the valid values in a stream with missing values)."""
    _origin(x, codes, orig, eb, float(pred))


def decode_origin(x, codes, eb, pred=0.0):
    """Reconstruct the first point (see :func:`encode_origin`)."""
    _origin_decode(x, codes, eb, float(pred))
