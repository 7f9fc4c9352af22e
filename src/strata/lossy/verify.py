"""Checks a read runs on the bytes it has read, before it allocates its output.

A read (:meth:`strata.lossy.reader.LossyReader.read`) first reads every chunk of codes and of
the mask it will decode, checking each one's CRC-32, and parses the exact-value section; then
the checks here look at the structure of those bytes. Only then are the output and its working
arrays allocated, so a damaged stream fails with no more memory than its compressed bytes
(``docs/format.md``, "Validation before allocation"):

* :func:`chunk_frames`: each chunk of codes has a framing its decoder can start on -- lengths
  that fit in the chunk, enough rANS bytes for its initial states and states in the coder's
  range, stored values of whole items (``docs/format.md``, section 3);
* :func:`mask_frames`: each mask chunk has a known mode and the length that mode implies
  (:mod:`strata.lossy.mask`);
* :func:`missing_bounds`: the missing points the mask's chunk modes imply (all-missing chunks
  at least, all but the all-valid ones at most) bracket the header's count;
* :func:`exact_values`: the exact values are where the contract puts them
  (:mod:`strata.lossy.missing`): +-Inf at valid points, another bit pattern than the fill
  pattern at missing points.

After decoding, :func:`decoded_range` checks the decoded valid values against the header's
range of the original ones widened by the bound: a pass the read makes anyway where points are
missing (the fill pattern written, :func:`strata.lossy.missing.fill_into`), one vectorized pass
otherwise (:func:`strata.lossy.missing.finite_range`).

What these cannot see without decoding -- a symbol stream that decodes to another length than
its chunk's, which a stream whose CRCs were recomputed can hold -- the chunk decoders refuse
while decoding (:mod:`strata.lossy.chunk_decoder`), after the output is allocated.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import varint
from ..entropy import rans
from ..errors import CorruptStreamError
from .chunks import LANES, chunk_sizes
from .mask import ALL_MISSING, CODED


@njit(nogil=True, cache=True)
def _first_bad_frame(payload, starts, ends, itemsize, n_states):
    for j in range(starts.shape[0]):
        end = ends[j]
        n_r, pos = varint.get(payload, starts[j], end)
        n_x, pos = varint.get(payload, pos, end)
        # (compared by difference, as the decoder does: no sum can wrap around)
        if n_r < rans.STATE_BYTES * n_states or n_x < 0 or n_r > end - pos or n_x > end - pos - n_r:
            return j
        if (end - pos - n_r - n_x) % itemsize:
            return j
        for k in range(n_states):
            q = pos + rans.STATE_BYTES * k
            state = (np.int64(payload[q]) | (np.int64(payload[q + 1]) << 8) | (np.int64(payload[q + 2]) << 16)
                     | (np.int64(payload[q + 3]) << 24))
            if state < rans.RANS_L:
                return j
    return -1


def chunk_frames(payload: np.ndarray, starts: np.ndarray, ends: np.ndarray, itemsize: int, lanes: bool) -> int:
    """Index (into ``starts``) of the first chunk of codes whose framing no decoder can start
    on, or -1.

    Args:
        payload: uint8 array holding the chunks (their CRC-32 checked).
        starts, ends: int64 ``(n,)``: chunk ``j`` is ``payload[starts[j]:ends[j]]``.
        itemsize: bytes of a value of the stream's dtype (4 or 8).
        lanes: the level's coder is :data:`~strata.lossy.chunks.CODER_LANES` (``LANES``
            initial states), else one state.

    Returns:
        -1 when every chunk's ``varint n_rans | varint n_raw`` fit in the chunk, its rANS bytes
        hold its initial states and each is at least ``RANS_L`` (the range every encoder's
        flushed state lies in), and the bytes after its raw bits are whole values.
    """
    return int(_first_bad_frame(payload, starts, ends, itemsize, LANES if lanes else 1))


def mask_frames(payload: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> int:
    """Index of the first mask chunk whose mode byte or length is inconsistent, or -1: an
    ``ALL_VALID`` or ``ALL_MISSING`` chunk is its mode byte alone, a ``CODED`` one holds at
    least a rANS state after it (arguments as :func:`chunk_frames`)."""
    lens = ends - starts
    if not lens.size:
        return -1
    if lens.min() < 1:
        return int(np.flatnonzero(lens < 1)[0])
    modes = payload[starts]
    bad = (modes > CODED) | ((modes < CODED) & (lens != 1)) | ((modes == CODED) & (lens < 1 + rans.STATE_BYTES))
    return int(np.flatnonzero(bad)[0]) if bad.any() else -1


def missing_bounds(payload: np.ndarray, starts: np.ndarray, geometry) -> tuple[int, int]:
    """``(at least, at most)`` missing points of one level's mask chunks, all of them, from
    their modes: the points of its ``ALL_MISSING`` chunks, and those plus the points of its
    ``CODED`` ones.

    Args:
        payload, starts: the level's mask chunks (as :func:`mask_frames`), every chunk of the
            level in order.
        geometry: the level's ``(shape, stride, refined, base, boxes)`` on the mask's chunk
            edge (:func:`strata.lossy.plan.level_geometry`).
    """
    _, _, refined, base, boxes = geometry
    points = chunk_sizes(boxes, refined, base)
    modes = payload[starts]
    low = int(points[modes == ALL_MISSING].sum())
    return low, low + int(points[modes == CODED].sum())


def exact_values(positions: np.ndarray, values: np.ndarray, missing: np.ndarray | None, fill_bits: bytes) -> None:
    """Check exact values against the mask: each one at a valid point is +-Inf, each one at a
    missing point has another bit pattern than the fill pattern.

    Args:
        positions: int64 flat positions of the values in ``missing``'s array.
        values: the values (the stream's dtype).
        missing: flat uint8 mask (1 = missing) of the array the positions index, or None
            when the stream has no missing value.
        fill_bits: the fill pattern (``itemsize`` bytes; empty without a mask).

    Raises:
        CorruptStreamError: a value where the contract puts none.
    """
    if not positions.size:
        return
    miss = missing[positions].view(np.bool_) if missing is not None else np.zeros(positions.size, np.bool_)
    valid = values[~miss]
    if not np.isinf(valid).all():
        raise CorruptStreamError("an exact value at a valid point is finite or NaN (only +-Inf are kept there)")
    if missing is not None and miss.any():
        bits = values[miss].view(f"<u{values.itemsize}")
        if (bits == np.frombuffer(fill_bits, f"<u{values.itemsize}")[0]).any():
            raise CorruptStreamError("an exact value at a missing point repeats the fill pattern")


def decoded_range(lo, hi, not_finite: int, valid_range, bound: float) -> None:
    """Check decoded values against the header's range of the valid values: a value ``y`` that
    approximates an ``x`` of ``[vlo, vhi]`` within ``bound`` lies in ``[vlo - bound, vhi + bound]``
    (up to float64 rounding: a relative ``1e-12`` of the range's magnitude more), so one beyond it
    is detectably outside the bound -- a stream whose fields (the bound, the range, the
    predictor's settings, a chunk's raw bits) were changed with their CRCs recomputed.

    Args:
        lo, hi: the smallest and largest finite decoded value at the valid points (None: none).
        not_finite: decoded values at valid points that are NaN or +-Inf (before the exact
            values are written, there is none).
        valid_range: the header's ``(vlo, vhi)``, or None (not recorded: only ``not_finite``
            is checked).
        bound: the bound in force (the error bound, or an enhanced read's guarantee).

    Raises:
        CorruptStreamError: a value beyond the range widened by the bound, or not finite.
    """
    if not_finite:
        raise CorruptStreamError(f"{not_finite} decoded values at valid points are not finite")
    if valid_range is None or lo is None:
        return
    vlo, vhi = valid_range
    slack = bound + 1e-12 * (abs(vlo) + abs(vhi) + bound)
    if lo < vlo - slack or hi > vhi + slack:
        raise CorruptStreamError(f"decoded values {lo!r}..{hi!r} lie beyond the valid range {vlo!r}..{vhi!r} "
                                 f"by more than the bound {bound!r}")


__all__ = ["chunk_frames", "decoded_range", "exact_values", "mask_frames", "missing_bounds"]
