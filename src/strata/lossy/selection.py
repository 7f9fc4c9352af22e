"""The region a read selects: numpy basic indexing (integers and slices) of a stream's array,
checked, and its box in the internal 3D view (:func:`strata.lossy.partition.as_3d_shape`).

:func:`canonical` validates a region once -- every entry an integer in range or a slice of
integers (or None) with a non-zero step, at most one entry per axis -- and returns it with
plain non-negative ints and a slice for each missing axis; :func:`box`, :func:`shape` and
:func:`take` take that form.
"""
from __future__ import annotations

import operator

import numpy as np

from ..errors import InvalidInputError
from .partition import Box


def canonical(region, shape: tuple[int, ...]) -> tuple:
    """``region`` (an integer, a slice, or a tuple of them) as a tuple of one entry per axis of
    ``shape``: non-negative Python ints and slices of Python ints (or None).

    Raises:
        InvalidInputError: more entries than axes; an entry that is neither an integer nor a
            slice (a bool, a float, None, Ellipsis, an array...); an index out of range; a slice
            bound or step that is not an integer; a zero step.
    """
    entries = region if isinstance(region, tuple) else (region,)
    if len(entries) > len(shape):
        raise InvalidInputError(f"region has {len(entries)} entries for a {len(shape)}-d array")
    out = []
    for d, n in enumerate(shape):
        r = entries[d] if d < len(entries) else slice(None)
        if isinstance(r, slice):
            try:
                start, stop, step = (None if v is None else operator.index(v) for v in (r.start, r.stop, r.step))
            except TypeError as exc:
                raise InvalidInputError(f"slice {r!r} on axis {d}: bounds and step must be integers or None") from exc
            if step == 0:
                raise InvalidInputError(f"slice {r!r} on axis {d}: the step cannot be zero")
            out.append(slice(start, stop, step))
        elif isinstance(r, (int, np.integer)) and not isinstance(r, (bool, np.bool_)):
            i = int(r) + (n if r < 0 else 0)
            if not 0 <= i < n:
                raise InvalidInputError(f"index {r} out of range for axis {d} of size {n}")
            out.append(i)
        else:
            raise InvalidInputError(f"region entries must be slices or integers, not {type(r).__name__}")
    return tuple(out)


def indices(entry, n: int) -> np.ndarray:
    """int64 indices an entry of a canonical region selects on an axis of ``n`` points."""
    if not isinstance(entry, slice):
        return np.array([entry], np.int64)
    rng = range(*entry.indices(n))
    # (a step past int64, e.g. 2**63, selects at most one index: never multiplied out)
    return rng.start + np.arange(len(rng), dtype=np.int64) * (rng.step if len(rng) > 1 else 0)


def shape(region: tuple, full: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of ``numpy.empty(full)[region]`` (``region`` canonical), computed."""
    return tuple(len(range(*r.indices(n))) for r, n in zip(region, full) if isinstance(r, slice))


def box(region: tuple, full: tuple[int, ...]) -> Box:
    """The smallest box of the internal 3D view of an array of shape ``full`` that holds
    ``region`` (canonical); an empty box when the region selects nothing."""
    lo, hi = [], []
    for r, n in zip(region, full):
        if isinstance(r, slice):
            rng = range(*r.indices(n))
            lo.append(min(rng[0], rng[-1]) if rng else 0)
            hi.append(max(rng[0], rng[-1]) + 1 if rng else 0)
        else:
            lo.append(r)
            hi.append(r + 1)
    if len(full) <= 3:
        pad = 3 - len(full)
        return Box((0,) * pad + tuple(lo), (1,) * pad + tuple(hi))
    if any(h <= low for low, h in zip(lo, hi)):
        return Box((0, 0, 0), (0, 0, 0))
    lead = full[:-2]
    m_lo = int(np.ravel_multi_index(lo[:-2], lead))
    m_hi = int(np.ravel_multi_index([h - 1 for h in hi[:-2]], lead)) + 1
    return Box((m_lo, lo[-2], lo[-1]), (m_hi, hi[-2], hi[-1]))


def take(a: np.ndarray, lo, region: tuple, full: tuple[int, ...]) -> np.ndarray:
    """``region`` (canonical) of an array of shape ``full``, taken from ``a``: the internal 3D
    box of that array that starts at ``lo`` and holds the region; a copy."""
    nd = len(full)
    idx = [indices(r, n) for r, n in zip(region, full)]
    keep = [isinstance(r, slice) for r in region]
    if nd <= 3:
        out = a.reshape(a.shape[3 - nd:])
        for d in range(nd):
            out = np.take(out, idx[d] - lo[3 - nd + d], axis=d)
    else:  # internal axis 0 merges the leading axes
        lead = np.ravel_multi_index(np.ix_(*idx[:-2]), full[:-2]) - lo[0]
        out = np.take(a, lead.ravel(), axis=0).reshape(*lead.shape, *a.shape[1:])
        out = np.take(np.take(out, idx[-2] - lo[1], axis=nd - 2), idx[-1] - lo[2], axis=nd - 1)
    return out.reshape([n for n, k in zip(out.shape, keep) if k])


__all__ = ["box", "canonical", "indices", "shape", "take"]
