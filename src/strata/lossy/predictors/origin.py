"""The first point of the array: the one-point starting grid of every hierarchy, quantized
against the plan's first-point prediction (:attr:`strata.lossy.plan.Plan.origin_pred`: 0, or
the mean of the valid values in a stream with missing values) at the first step's bound
(:attr:`strata.lossy.plan.Plan.origin_bound`); no predictor is involved.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..quantize import dequantize_into, quantize_into


@njit(nogil=True, cache=True)
def _origin(x, codes, orig, eb, pred):
    inv_bin = 0.5 / eb if eb > 0 else 0.0
    codes[0] = quantize_into(x, 0, np.float64(orig[0]), pred, eb, inv_bin, 2.0 * eb)


@njit(nogil=True, cache=True)
def _origin_decode(x, codes, eb, pred):
    dequantize_into(x, 0, codes, pred, 2.0 * eb)


def encode_origin(x, codes, orig, eb, pred=0.0):
    """Quantize the first point (the one-point starting grid) against the prediction
    ``pred`` (0, or the mean of the valid values in a stream with missing values)."""
    _origin(x, codes, orig, eb, float(pred))


def decode_origin(x, codes, eb, pred=0.0):
    """Reconstruct the first point (see :func:`encode_origin`)."""
    _origin_decode(x, codes, eb, float(pred))
