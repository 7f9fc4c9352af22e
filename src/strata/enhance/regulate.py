"""Error regulation of the enhanced values (NeurLZ, arXiv:2409.05785, sec. 3.4).

The correction is the network's predicted error clipped to ``[-eb, eb]``:
``x~ = x^ + eb * clip(r, -1, 1)``, rounded to the stream's dtype; a value whose rounding moved it
more than ``eb`` from the plain decoded ``x^`` (or that overflowed) keeps ``x^``. So
``|x~ - x^| <= eb`` everywhere, and with ``|x^ - x| <= eb``:

* **2x**: ``|x~ - x| <= 2 eb``, no side information;
* **1x**: the encoder, which knows ``x``, lists the points where ``|x~ - x|`` would exceed
  ``eb * (1 - MARGIN)``; the decoder keeps ``x^`` there, so every value stays within ``eb``.
  The margin absorbs any last-bit difference of a decoder on another machine (the inference is
  deterministic, :mod:`strata.enhance.network`).

Missing and non-finite values are never corrected: they keep their exact bits.
"""
from __future__ import annotations

import numpy as np

#: Share of the bound the 1x test keeps free.
MARGIN = 2.0 ** -10


def corrected(plain: np.ndarray, r: np.ndarray, eb: float, valid: np.ndarray) -> np.ndarray:
    """``plain`` (any float dtype and shape) corrected by ``r`` (predicted error in units of
    ``eb``, same shape), where ``valid`` (bool, same shape); a new array of ``plain``'s dtype."""
    p = plain.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # (+-Inf and overflow: kept below)
        out = (p + np.clip(r, -1.0, 1.0).astype(np.float64) * eb).astype(plain.dtype)
        keep = ~valid | ~(np.abs(out.astype(np.float64) - p) <= eb)
    np.copyto(out, plain, where=keep)
    return out


def fallback_points(original: np.ndarray, enhanced: np.ndarray, eb: float, valid: np.ndarray) -> np.ndarray:
    """Bool mask of the valid points where the 1x decoder must keep the plain value."""
    with np.errstate(invalid="ignore"):  # (+-Inf: not valid)
        err = np.abs(enhanced.astype(np.float64) - original)
    return valid & ~(err <= eb * (1.0 - MARGIN))
