"""Is a field's value range dominated by a few extreme values?

A relative bound (``rel_error``) is a share of the range of the valid values, ``max - min``.
When an undeclared marker of missing values sits far from the data (an ocean field whose land
holds ``1e20``), the range is the marker's, the bound is ``1e-3 * 1e20 = 1e17`` and every real
value decodes to noise: the stream is valid and the bound holds, but nothing of the data is
left. This module finds such ranges so that the command line can say so before (``compress``,
``quality``) or after (``info``) the fact.

The rule (occupancy): take the distinct values, sorted; a gap between consecutive ones that is
at least :data:`SHARE` (1 %) of the range counts as empty. The range is dominated when the
values occupy less than :data:`SHARE` of it once the empty gaps are taken out: then at least
99 % of the range lies between groups of values, and a relative bound of ``1e-2`` or less
exceeds the spread of the values inside the groups, which a relative bound was meant to
resolve. On the 29 real fields of the project's test data (11 simulation and reanalysis
fields, 18 fields of 12 other families, with their documented fill values declared) the values
occupy at least 32 % of their range (``eraint_z``, three pressure levels in one array), and
their coarse levels decoded at relative bounds of ``1e-1`` to ``1e-4`` at least 13 %
(``glimpse_irac2``): no warning; an ocean field with its ``1e35`` fill undeclared: 0 %, a
radar field with its ``-9999.9`` fill undeclared: 0.36 % (decoded: 0 to 0.65 % at ``1e-2`` to
``1e-4``): warnings (``benchmarks/dominance_check.py``).

For arrays (:func:`check_array`) a constant group counts as no spread: a field of two values
(a mask stored as floats) is not reported, only one whose varying values would be lost. For a
stream (:func:`check_stream`, which sees the decoded values only, each within the bound of the
original) that cannot be told apart, so a two-valued field compressed with a small relative
bound is reported too.

Cost: one pass for the exact extremes of the valid values, and a sort of a strided sample of at
most :data:`SAMPLE_SIZE` values (tens of milliseconds for 7 million values); for a stream, the
first level grid of at least :data:`STREAM_POINTS` points is decoded (no finer level).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Values examined: a strided sample of the valid values, plus their exact minimum and maximum.
SAMPLE_SIZE = 1 << 18
#: Gaps of at least this share of the range count as empty; the range is dominated when the
#: values occupy less than this share of it.
SHARE = 0.01
#: A stream is examined on the grid of its first level with at least this many points.
STREAM_POINTS = 4096


@dataclass(frozen=True)
class Dominance:
    """A value range dominated by a few extreme values.

    Attributes:
        low: the smallest value examined (the valid values' minimum; for a stream, the
            smallest decoded value examined).
        high: the largest value examined.
        occupied: the part of the range the values fill, in the data's unit (the range minus
            the empty gaps, each at least :data:`SHARE` of it).
        values: the values named as dominating: for an array, each end of the range that is a
            single repeated value (a marker of missing values), else the end farther from
            zero; for a stream, the end of the header's valid range farther from zero
            (values of the data's dtype, as float).
        counts: for an array, the number of points holding each of ``values``; None for a
            stream.
        size: the number of points of the array or stream.
        groups: the number of groups the values form (separated by empty gaps).
    """

    low: float
    high: float
    occupied: float
    values: tuple[float, ...]
    counts: tuple[int, ...] | None
    size: int
    groups: int

    @property
    def share(self) -> float:
        """``occupied`` as a share of the range (below :data:`SHARE`)."""
        return self.occupied / (self.high - self.low)


def occupancy(u: np.ndarray, bound: float = 0.0) -> tuple[float, np.ndarray]:
    """The part of their range that values occupy, and the groups they form.

    A gap between consecutive values is empty when it is at least :data:`SHARE` of the range
    and, for decoded values, at least ten bounds (so that no gap between decoded values counts
    as empty for lack of resolution).

    Args:
        u: sorted distinct finite values, float64, at least two.
        bound: the error bound the values were decoded within (0: exact values).

    Returns:
        ``(occupied, starts)``: the range minus its empty gaps (the data's unit), and the index
        in ``u`` where each group begins (one after each empty gap).
    """
    gaps = np.diff(u)
    empty = gaps >= max(SHARE * (u[-1] - u[0]), 10 * bound)
    return float(gaps[~empty].sum()), np.concatenate(([0], np.flatnonzero(empty) + 1))


def _sample(flat: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    step = max(1, math.ceil(flat.size / SAMPLE_SIZE))
    s = flat[::step]
    keep = np.isfinite(s) if valid is None else valid[::step] & np.isfinite(s)
    return s[keep].astype(np.float64)


def check_array(a: np.ndarray, missing: np.ndarray | None = None) -> Dominance | None:
    """Whether the valid values of ``a`` occupy less than :data:`SHARE` of their range (see the
    module's docstring).

    Args:
        a: float32 or float64 array, any shape.
        missing: bool array, ``True`` at the missing points, of ``a``'s shape or flat (e.g.
            from :func:`strata.lossy.missing.find`); None: no declared missing points. NaN and
            +-Inf are never valid values.

    Returns:
        A :class:`Dominance`, or None when the range is not dominated (or holds fewer than
        two distinct valid values, or none varies within its group).
    """
    flat = np.asarray(a).reshape(-1)
    valid = None if missing is None else ~np.asarray(missing, bool).reshape(-1)
    finite = np.isfinite(flat) if valid is None else np.isfinite(flat) & valid
    if not finite.any():
        return None
    lo = float(np.min(flat, where=finite, initial=np.inf))
    hi = float(np.max(flat, where=finite, initial=-np.inf))
    if not hi > lo:
        return None
    u = np.unique(np.concatenate((_sample(flat, valid), [lo, hi])))
    occupied, starts = occupancy(u)
    if not 0 < occupied < SHARE * (hi - lo):
        return None
    ends = np.append(starts[1:], u.size)
    single = [u[s] for s, e in ((starts[0], ends[0]), (starts[-1], ends[-1])) if e - s == 1]
    named = single or [lo if abs(lo) > abs(hi) else hi]
    named = sorted(set(named), key=abs, reverse=True)
    counts = tuple(int(np.count_nonzero(flat == flat.dtype.type(v))) for v in named)
    return Dominance(lo, hi, occupied, tuple(float(v) for v in named), counts, flat.size, len(starts))


def check_stream(reader) -> Dominance | None:
    """Whether the decoded values of a lossy stream occupy less than :data:`SHARE` of their
    range (see the module's docstring), from the grid of its first level with at least
    :data:`STREAM_POINTS` points (plain values: no enhancement network).

    Args:
        reader: an open :class:`strata.lossy.LossyReader`.

    Returns:
        A :class:`Dominance` (``counts`` None), or None.

    Raises:
        CorruptStreamError, TruncatedStreamError: the level's bytes are damaged.
    """
    if reader.valid_range is None or not reader.levels:
        return None
    level = next((lv for lv in reader.levels if math.prod(lv.shape) >= STREAM_POINTS), reader.levels[-1])
    grid = reader.read(level=level.index, full_resolution=False, masked=True, enhance=False)
    values = np.ma.getdata(grid)[~np.ma.getmaskarray(grid)]
    u = np.unique(values[np.isfinite(values)].astype(np.float64))
    if u.size < 2:
        return None
    occupied, starts = occupancy(u, reader.header.eb)
    if not occupied < SHARE * (u[-1] - u[0]):
        return None
    lo, hi = reader.valid_range
    return Dominance(float(u[0]), float(u[-1]), occupied, (lo if abs(lo) > abs(hi) else hi,), None,
                     math.prod(reader.shape), len(starts))
