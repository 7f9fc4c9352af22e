"""One enhancement step shared by the encoder (which must foresee the decoder exactly) and the
decoder: input blocks -> network prediction -> regulated values."""
from __future__ import annotations

import numpy as np

from . import network, regulate
from .section import Enhancement


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


def enhance_block(e: Enhancement, blocks, eb: float, fallback: np.ndarray | None = None):
    """The enhanced values of a 3D block: ``(enhanced, r)``.

    Args:
        e: a stored enhancement section.
        blocks: ``(values, missing)`` of the stream's own field, then of each other input
            field of ``e.inputs``, in that order: 3D arrays of the same shape (the internal 3D
            view's block, with its halo).
        eb: the stream's absolute error bound.
        fallback: bool mask of the block's 1x fallback points, or None.

    Returns:
        The regulated enhanced values (the own field's dtype) and the network's prediction
        (float32, units of ``eb``).
    """
    values, miss = blocks[0]
    fields = stack_inputs(blocks, [f.center for f in e.inputs])
    r = network.predict(fields, e.spec(), e.params, e.width)
    out = regulate.corrected(values, r, eb, ~miss & np.isfinite(values))
    if fallback is not None:
        np.copyto(out, values, where=fallback)
    return out, r
