"""Multi-dimensional interpolation (id 1 of :mod:`strata.lossy.predictors`): HPEZ's predictor
for a refinement step, its points predicted along every axis on which they are new.

Liu et al., "High-performance Effective Scientific Error-bounded Lossy Compression with
Auto-tuned Multi-component Interpolation" (HPEZ, SIGMOD 2024), Sec. 4.2, multi-dimensional
spline interpolation: a step that halves the stride of several axes is predicted in *groups*
(:meth:`strata.lossy.partition.Partition.passes` with ``multi``): first the points new on one
axis (from the coarse grid along that axis), then those new on two axes, then on three; a point
of a group of axes ``S`` is predicted as the mean of SZ3's 1D interpolations
(:mod:`strata.lossy.predictors.interpolation`'s rules, cubic or linear as the step's parameter
says) along each axis of ``S``, each from points of the smaller groups. Where a point's line
along some axis of ``S`` has neighbours on both sides and along another only on one side (an
extrapolation: the array's or a region's edge, or missing neighbours), the two-sided
predictions alone are averaged; with none two-sided, every one is.

Dimension by dimension, the last pass of a 3D step predicts its points along one axis from
neighbours that were themselves predicted along the other two; averaging the 1D predictions of
all the point's new axes uses the neighbours on each side, which on smooth, isotropic data
(turbulence, cosmology, cryo-EM density) gives smaller residuals. On anisotropic data it
does not, so the tuner (:func:`strata.lossy.tune.choose`) chooses it per step by measured
cost against dimension-by-dimension interpolation.

The points run row by row (the fastest axis inside), rows in parallel (numba ``prange``);
encoder and decoder run the same compiled code, so their predictions are bit-identical.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from ..._numba import pick, serial_variant
from ..quantize import narrow_type
from .interpolation import (
    _CUBIC,
    _EXTRAP_LINEAR,
    _EXTRAP_QUAD,
    _LINEAR,
    _MAX_LANE_STEP,
    _NO_CODES,
    _VECTOR,
    _apply,
    _count,
    _first,
    _geo,
    _lanes,
    _masked_rule,
    _point,
    _rule,
    _scratch,
    count_codes,
    pass_table,
    slab_width,
    step_end,
)

#: Its steps have one pass per group of refined axes (:data:`strata.lossy.predictors.Predictor.GROUPS`).
GROUPS = True


@njit(parallel=True, nogil=True, cache=True)
def _sweep(mode, x, codes, orig, missing, shape, rows, bounds, cubic, geo):
    """Run the groups of ``rows`` (:func:`strata.lossy.predictors.interpolation.geometry_rows`:
    ``axes``, column 16, is the group's bit mask of axes) step by step. mode 0: encode, 1:
    decode, 2: preview; ``bounds[p]``, ``cubic[p]``: the bound and window, and interpolation of group
    ``p``; ``geo``: where the arrays lie in the whole grid (``origin0..2, grid0..2``).

    A step runs in two phases, slab by slab along the slab axis (the first of axes 0 and 1
    longer than 1), slabs in parallel, each slab doing all its groups of the phase in order
    while it is in cache: first the groups without the slab axis (they read along their own
    axes only, within their slab), then those with it (they read along the slab axis only what
    the first phase wrote, along their other axes within their slab). Group by group over the
    whole array, a 3-D step swept memory seven times: at two threads decoding took 1.6 times as
    long on ns3d192 at 1e-2."""
    n1, n2 = shape[1], shape[2]
    ax_s = 1 if shape[0] == 1 and n1 > 1 else 0
    per_index = n1 * n2 if ax_s == 0 else n2
    n = rows.shape[0]
    p0 = 0
    while p0 < n:
        p1 = step_end(rows, p0)
        for phase in range(2):
            lo, hi, q = shape[ax_s], 0, 1
            for p in range(p0, p1):
                if (rows[p, 16] >> ax_s) & 1 == phase:
                    lo = min(lo, rows[p, 8 + ax_s])
                    hi = max(hi, rows[p, 11 + ax_s])
                    q = rows[p, 5 + ax_s]
            if hi <= lo:
                continue
            width = slab_width(q, per_index)
            for u in prange((hi - lo + width - 1) // width):
                a = lo + u * width
                bx, bc = _scratch(mode, x)
                for p in range(p0, p1):
                    if (rows[p, 16] >> ax_s) & 1 == phase:
                        _run_slab(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a,
                              a + width)
        p0 = p1


def _run_slab(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b):
    """:func:`_slab`; narrow codes (uint16) are only ever decoded, and for them only that mode
    is compiled (as :func:`strata.lossy.predictors.interpolation._run`)."""
    raise NotImplementedError


@overload(_run_slab, inline="always")
def _run_slab_compiled(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b):
    if narrow_type(codes):
        def impl(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b):
            _slab(1, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b)
    else:
        def impl(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b):
            _slab(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b)
    return impl


@njit(nogil=True, cache=True, _nrt=False)
def _slab(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, rows, bounds, cubic, p, ax_s, a, b):
    """The points of group ``p`` whose index along axis ``ax_s`` is in ``[a, b)``, row by row
    (the fastest axis inside; ``bx``, ``bc``: scratch arrays, ``interpolation._scratch``). A
    function of its own, compiled without reference counting (it allocates nothing): inlined
    into :func:`_sweep`'s serial variant, each point's array reference counts made it 20 times
    slower than the parallel variant on one thread."""
    lo0, hi0, lo1, hi1 = rows[p, 8], rows[p, 11], rows[p, 9], rows[p, 12]
    if ax_s == 0:
        lo0, hi0 = max(lo0, a), min(hi0, b)
    else:
        lo1, hi1 = max(lo1, a), min(hi1, b)
    f0, f1 = _first(rows[p, 2], rows[p, 5], lo0), _first(rows[p, 3], rows[p, 6], lo1)
    f2 = _first(rows[p, 4], rows[p, 7], rows[p, 10])
    c0, c1, c2 = _count(f0, rows[p, 5], hi0), _count(f1, rows[p, 6], hi1), _count(f2, rows[p, 7], rows[p, 13])
    eb = bounds[p, 0]
    line = (rows[p, 16], rows[p, 1], cubic[p], eb, 0.5 / eb if eb > 0 else 0.0, 2.0 * eb, bounds[p, 1])
    for r0 in range(c0):
        for r1 in range(c1):
            _line(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, line, f0 + r0 * rows[p, 5], f1 + r1 * rows[p, 6],
                  f2, rows[p, 7], c2)


@njit(inline="always")
def _line(mode, x, codes, orig, missing, bx, bc, n1, n2, geo, line, i0, i1, f2, st2, c2):
    """The ``c2`` points ``st2`` apart from ``f2`` of row ``(i0, i1)`` of a group ``line = (axes,
    stride, cubic, eb, inv_bin, bin_width, win)`` (``win``: a residual layer's window, whose
    codes are encoded point by point). Without a mask the rules along axes 0 and 1 are
    the row's, and along axis 2 the interior one between the edges: chosen once, not per point."""
    axes, s, cub, eb = line[0], line[1], line[2], line[3]
    row = (i0 * n1 + i1) * n2
    d = (np.uint64(s * n1 * n2), np.uint64(s * n2), np.uint64(s))
    masked = missing.shape[0] > 0
    r0 = _plain_rule(mode, i0 + geo[0], geo[3], s, cub) if axes & 1 else _NONE
    r1 = _plain_rule(mode, i1 + geo[1], geo[4], s, cub) if axes & 2 else _NONE
    k_lo, k_hi = 0, c2
    if axes & 4:
        # points k in [k_lo, k_hi) have the whole stencil along axis 2 inside the grid
        g2 = geo[2] + f2
        reach = 3 * s if cub else s
        k_lo = min(c2, max(0, -((g2 - reach) // st2)))
        k_hi = min(c2, max(k_lo, -((g2 + reach - geo[5]) // st2)))
    interior = _CUBIC if cub else _LINEAR
    inner = interior if axes & 4 else _NONE
    lanes = (k_hi - k_lo - 1) * st2 + 1
    # (encoding vectorizes cubic steps only: see _lanes_literal)
    vector = (not masked and (mode == 1 or mode == 0 and cub) and (r0 == _NONE or r0 == interior)
              and (r1 == _NONE or r1 == interior) and st2 <= _MAX_LANE_STEP and lanes >= _VECTOR
              and (mode != 0 or eb > 0) and (line[6] == 0 or mode == 1))
    if vector:
        # every axis interior: over the contiguous memory between the points (vectorized)
        # the distances along the group's axes, in increasing axis order
        used = ((d[0] if axes & 1 else (d[1] if axes & 2 else d[2])), (d[1] if axes & 3 == 3 else d[2]), d[2])
        _lanes_literal(mode, (axes & 1) + (axes >> 1 & 1) + (axes >> 2 & 1), cub, x, codes, orig, bx, bc,
                       row + f2 + k_lo * st2, lanes, st2, used, eb, line[4], line[5], line[6])
    # the points the lanes did not run, point by point (one call site: each inlined copy of the
    # rules compiles for seconds in every version of the kernels)
    k = 0
    while k < c2:
        if vector and k == k_lo:
            k = k_hi
            continue
        i2 = f2 + k * st2
        r2 = inner if k_lo <= k < k_hi else _plain_rule(mode, i2 + geo[2], geo[5], s, cub)
        _predict_point(mode, x, codes, orig, missing, np.uint64(row + i2), (r0, r1, r2),
                       (i0 + geo[0], i1 + geo[1], i2 + geo[2]), d, geo, line)
        k += 1


#: Rule of an axis the point is not predicted along.
_NONE = -1


def _lanes_literal(mode, n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win):
    """:func:`strata.lossy.predictors.interpolation._lanes` of a group of ``n_axes`` axes (the
    cubic or the linear rule by ``cub``, neighbours ``d[0..n_axes)`` apart along them, in
    increasing axis order: each lane predicted with :func:`_predict_point`'s operations, so the
    same bits; the lanes between points belong to other groups or coarser steps, which no
    thread writes meanwhile), with ``mode`` (0 or 1), ``n_axes`` and ``cub`` as literals: one
    compiled loop each, without a branch per lane (with a variable the loop did not vectorize:
    era5_t2m's finest step decoded 2-3 times slower). Nine loops, each compiling in about two
    seconds: the linear rule decodes through them (point by point, cosmology at 1e-2, whose steps
    are linear, decoded in 1.9 times the time of dimension-by-dimension interpolation; with them
    1.2 times) and encodes point by point (three more loops made a fresh test suite compile for
    about a minute longer); previews keep the point-by-point loop; narrow codes (uint16) compile
    the decoding loops only. ``win``: a residual layer's window (decoding only)."""
    raise NotImplementedError


@overload(_lanes_literal, inline="always")
def _lanes_literal_compiled(mode, n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width,
                            win):
    if narrow_type(codes):
        def impl(mode, n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win):
            _decode_lanes(n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win)
        return impl

    def impl(mode, n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win):
        if mode == 0:  # (cubic: _line encodes linear steps point by point)
            _lanes_of(0, True, n_axes, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win)
        else:
            _decode_lanes(n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win)
    return impl


@njit(inline="always")
def _decode_lanes(n_axes, cub, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win):
    """:func:`_lanes_of` decoding, ``cub`` made a literal."""
    if cub:
        _lanes_of(1, True, n_axes, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win)
    else:
        _lanes_of(1, False, n_axes, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win)


@njit(inline="always")
def _lanes_of(mode, cub, n_axes, x, codes, orig, bx, bc, start, lanes, st2, d, eb, inv_bin, bin_width, win):
    """:func:`_lanes_literal`'s dispatch on ``n_axes`` (``mode`` and ``cub`` literals)."""
    if n_axes == 1:
        _lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, d[0], cub, eb, inv_bin, bin_width, 1, d[1], d[2], win)
    elif n_axes == 2:
        _lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, d[0], cub, eb, inv_bin, bin_width, 2, d[1], d[2], win)
    else:
        _lanes(mode, x, codes, orig, bx, bc, start, lanes, st2, d[0], cub, eb, inv_bin, bin_width, 3, d[1], d[2], win)


@njit(inline="always")
def _plain_rule(mode, i, n, s, cub):
    """:func:`strata.lossy.predictors.interpolation._rule` of index ``i`` of an axis of ``n``
    points; a preview extrapolates linearly (it compounds extrapolation over the levels it skips)."""
    rule = _rule(i, n, s, cub)
    return _EXTRAP_LINEAR if mode == 2 and rule == _EXTRAP_QUAD else rule


@njit(inline="always")
def _predict_point(mode, x, codes, orig, missing, idx, rules, pos, d, geo, line):
    """Predict (and quantize, dequantize or fill) point ``idx`` (grid index ``pos``) along the
    axes of the group ``line`` (:func:`_line`), by ``rules`` or, with a mask, by the valid
    neighbours: the mean of the two-sided rules' predictions, or of all when none is two-sided,
    summed by increasing axis. With a mask the axes run in a loop (one inlined copy of the
    masked rule: three compiled for 10 s more a kernel version, cold); without, unrolled (the
    loop made encoding era5_t2m 5-8 % slower)."""
    sums = (0.0, 0, 0.0, 0)
    if missing.shape[0] > 0:
        axes, s, cub = line[0], line[1], line[2]
        for ax in range(3):
            if axes >> ax & 1:
                sums = _add_rule(x, idx, d[ax], _masked_rule(missing, idx, d[ax], pos[ax], geo[3 + ax], s, cub), sums)
    else:
        sums = _add_rule(x, idx, d[0], rules[0], sums)
        sums = _add_rule(x, idx, d[1], rules[1], sums)
        sums = _add_rule(x, idx, d[2], rules[2], sums)
    two_sided, n_two, one_sided, n_one = sums
    _point(mode, x, codes, orig, idx, two_sided / n_two if n_two else one_sided / n_one, line[3], line[4], line[5],
           line[6])


@njit(inline="always")
def _add_rule(x, idx, d1, rule, sums):
    """``sums = (two-sided sum, count, one-sided sum, count)`` with the prediction of ``x[idx]``
    by ``rule`` along an axis of neighbours ``d1`` apart added (none for ``_NONE``)."""
    two_sided, n_two, one_sided, n_one = sums
    if rule == _NONE:
        return sums
    v = _apply(x, idx, d1, rule)
    if rule <= _LINEAR:  # cubic, quadratic or linear: neighbours on both sides
        return two_sided + v, n_two + 1, one_sided, n_one
    return two_sided, n_two, one_sided + v, n_one + 1


_sweep_serial = serial_variant(_sweep)
#: Groups visiting fewer points run on one thread.
SERIAL_POINTS = 1 << 15


def _runner(table):
    return pick(_sweep, _sweep_serial, table[3] < SERIAL_POINTS)


def encode_passes(x, codes, orig, missing, shape, table, geo=None):
    """Predict and quantize the points of the groups of ``table`` (:func:`pass_table`, the
    interpolation's: geometry rows of the groups, bounds, parameters); the arguments as
    :func:`strata.lossy.predictors.interpolation.encode_passes`'."""
    _runner(table)(0, x, codes, orig, missing, shape, *table[:3], _geo(shape, geo))


def decode_passes(x, codes, missing, shape, table, geo=None):
    """Reconstruct the points of the groups from their codes (see :func:`encode_passes`)."""
    _runner(table)(1, x, codes, x, missing, shape, *table[:3], _geo(shape, geo))


def preview_passes(x, missing, shape, table, geo=None):
    """Fill the points of the groups with their prediction (no residual)."""
    _runner(table)(2, x, _NO_CODES, x, missing, shape, *table[:3], _geo(shape, geo))


__all__ = ["GROUPS", "SERIAL_POINTS", "count_codes", "decode_passes", "encode_passes", "pass_table", "preview_passes"]
