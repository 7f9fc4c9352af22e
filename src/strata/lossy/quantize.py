"""Linear-scale quantizer with unpredictable-value fallback.

The residual ``d = value - prediction`` is mapped to the integer quantization bin
``q = rint(d / (2 * eb))``; the reconstruction is ``prediction + 2 * eb * q`` rounded to the
data dtype. A value is *unpredictable* when ``|q|`` reaches the quantizer radius or when the
reconstruction, after rounding to the data dtype, is farther than ``eb`` from the value
(this happens near the float resolution), or, with ``eb = 0``, when the signs of zero differ.
Unpredictable values are stored exactly, so every decoded value is within ``eb`` -- the bound
is checked on the rounded value, in float64, the same way a user checks it.

A *missing* value (marked NaN in the encoder's working copy, see :mod:`strata.lossy.missing`)
gets code ``MISSING`` (``q = 0``) and is reconstructed as its prediction: the decoder, which
knows the mask, rebuilds it with the same dequantization and codes no symbol for it.

Method: SZ3's ``LinearQuantizer`` (Liang et al., "SZ3: A Modular Framework for Composing
Prediction-Based Error-Bounded Lossy Compressors", IEEE TBD 2022, Sec. IV-B), with bin width
``2 * eb``. The code space reserves ``UNPREDICTABLE`` for stored values.

The numba functions here are inlined into the predictor's compiled passes
(:mod:`strata.lossy.predictors`); :func:`quantize_reference` is the plain NumPy version the
tests compare against.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

from ..entropy.binning import unzigzag, zigzag

#: Largest |q| that is quantized; larger residuals become unpredictable values.
RADIUS = 1 << 20
#: Quantization code stored for an unpredictable value (codes are ``q + RADIUS`` otherwise).
UNPREDICTABLE = 0
#: Code of a missing value (``q = 0``: its reconstruction is the prediction).
MISSING = RADIUS
#: Radius of the decoder's narrow codes (uint16, ``q + NARROW_RADIUS``, half the memory traffic
#: of int32 codes), for reads whose levels cannot hold ``|q|`` of ``NARROW_RADIUS`` or more (the
#: quantizer's radius is ``RADIUS``: the level tables tell, :func:`narrow_fits`).
NARROW_RADIUS = 1 << 15
#: Largest ``|q|`` the tuner's histograms count apart (one column per ``|q|`` up to it, larger
#: ones in the next, unpredictable values in the last: :func:`strata.lossy.tune.estimate_bits`).
HIST_CLIP = 1023


def code_radius(codes) -> int:
    """The radius of the codes in ``codes`` (an array): ``NARROW_RADIUS`` for uint16 codes,
    else ``RADIUS``; ``UNPREDICTABLE`` is 0 and a missing value's code the radius in both.
    In compiled code a constant of the array's type."""
    return NARROW_RADIUS if codes.dtype == np.uint16 else RADIUS


def narrow_type(codes) -> bool:
    """Whether ``codes``, the numba type of a codes argument (at typing time, in an
    ``overload``), is an array of the decoder's narrow codes (uint16)."""
    return isinstance(codes, types.Array) and codes.dtype == types.uint16


@overload(code_radius, inline="always")
def _code_radius(codes):
    r = NARROW_RADIUS if narrow_type(codes) else RADIUS

    def impl(codes):
        return r

    return impl


def narrow_fits(max_z: int) -> bool:
    """Whether codes of zig-zag magnitude up to ``max_z`` (``q`` within ``(max_z + 1) // 2``
    of 0) fit the narrow representation: ``0 < q + NARROW_RADIUS < 2 * NARROW_RADIUS``."""
    return (max_z + 1) // 2 < NARROW_RADIUS


@njit(inline="always")
def quantize_into(x, idx, value, pred, eb, inv_bin, bin_width):
    """Quantize ``value`` against ``pred``; write the reconstruction into ``x[idx]``.

    Returns the quantization code (``q + RADIUS``) or ``UNPREDICTABLE``, in which case
    ``x[idx]`` holds ``value`` exactly. ``x`` is the working array of the data dtype, so the
    assignment performs the dtype rounding that the decoder performs too. A NaN ``value``
    is a missing point: code ``MISSING``, reconstructed exactly as :func:`dequantize_into`
    does (the test sits on the rare path, so it costs nothing on the common one).
    """
    q = np.rint((value - pred) * inv_bin)
    if abs(q) < RADIUS:
        x[idx] = pred + q * bin_width
        r = np.float64(x[idx])
        # a zero bound is bit-exact: -0.0 is not +0.0
        if abs(r - value) <= eb and (eb > 0 or np.signbit(r) == np.signbit(value)):
            return np.int32(q) + RADIUS
    elif value != value:
        x[idx] = pred + 0.0 * bin_width
        return np.int32(MISSING)
    x[idx] = value
    return UNPREDICTABLE


@intrinsic
def select(typingctx, cond, a, b):
    """``a if cond else b`` (``a`` and ``b`` of one type) as one LLVM ``select``: no branch, so
    that LLVM neither sinks the computation of ``a`` or ``b`` into one nor predicates the loads
    of a loop using it (which then vectorizes with plain loads)."""
    if not isinstance(cond, types.Boolean) or a != b:
        return None

    def codegen(context, builder, signature, args):
        return builder.select(*args)

    return a(cond, a, b), codegen


@njit(inline="always")
def quantize_lane(x, value, pred, eb, inv_bin, bin_width):
    """:func:`quantize_into` without branches, for a bound ``eb > 0`` (so that loops over many
    points vectorize): returns ``(reconstruction, code)``, the reconstruction of ``x``'s dtype,
    the code int32.

    The same floating-point operations as :func:`quantize_into`, so the same bits: out of the
    quantizer's radius (a NaN ``value`` included) ``q`` is 0, whose reconstruction is the
    missing point's; ``MISSING`` is ``0 + RADIUS``.
    """
    v = np.float64(value)
    q = np.rint((v - pred) * inv_bin)
    inside = abs(q) < RADIUS
    q = select(inside, q, 0.0)
    rec = x.dtype.type(pred + q * bin_width)
    ok = (inside & (abs(np.float64(rec) - v) <= eb)) | (v != v)
    return select(ok, rec, value), select(ok, np.int32(q + RADIUS), np.int32(UNPREDICTABLE))


@njit(inline="always")
def dequantize_into(x, idx, codes, pred, bin_width):
    """Write the reconstruction of ``codes[idx]`` (int32 or narrow codes, :func:`code_radius`)
    into ``x[idx]``; unpredictable values stay as stored."""
    code = codes[idx]
    if code != UNPREDICTABLE:
        x[idx] = pred + np.float64(np.int64(code) - code_radius(codes)) * bin_width


# ---------------------------------------------------------------------------- windowed codes
# A residual precision layer (:mod:`strata.lossy.layers`) codes values known to lie in a window
# ``[-win, win]`` (the previous layer's bound). The prediction is clamped into it, and of the
# bins ``q`` whose reconstruction can lie in it, ``[-a, b]``, those within ``m = min(a, b)`` of the
# prediction keep their code, the others (on the longer side alone) take the zig-zag ranks after
# ``2m`` (:mod:`strata.entropy.binning`: ``0, +1, -1, +2, -2, ...``): no rank is spent on a bin the
# value cannot be in, so a prediction off the mark costs what the window leaves, not more.


@njit(inline="always")
def window_clamp(pred, win):
    """``pred`` clamped into ``[-win, win]``."""
    return min(max(pred, -win), win)


@njit(inline="always")
def _window_sides(pred, win, inv_bin):
    """``(a, b)``, as float64: the bins ``q`` in ``[-a, b]`` are those whose reconstruction
    ``pred + q * bin`` lies within half a bin of ``[-win, win]`` (``pred`` in it: ``a, b >= 0``)."""
    return np.floor((pred + win) * inv_bin + 0.5), np.floor((win - pred) * inv_bin + 0.5)


@njit(nogil=True, _nrt=False)
def quantize_window(x, idx, value, pred, eb, inv_bin, bin_width, win):
    """:func:`quantize_into` of ``value`` in the window ``[-win, win]`` (``win > 0``) against
    ``pred`` clamped into it, the code folded (see above). A value whose bin falls outside the
    window (the window was wrong by a rounding) is unpredictable: stored exactly. A call of its
    own, not inlined: inlined into every pass kernel's point loop, the window's code made a fresh
    process compile the plain paths 22 s longer (152.7 -> 174.9 s for float32 and float64 streams
    on 2 cores); called, 4 s."""
    p = window_clamp(pred, win)
    code = quantize_into(x, idx, value, p, eb, inv_bin, bin_width)
    if code == UNPREDICTABLE or value != value:
        return code
    q = np.int64(code) - RADIUS
    a, b = _window_sides(p, win, inv_bin)
    if q < -a or q > b:
        x[idx] = value
        return UNPREDICTABLE
    m = np.int64(min(a, b))
    if abs(q) <= m:
        return code
    return np.int32(unzigzag(m + abs(q)) + RADIUS)


@njit(nogil=True, _nrt=False)
def dequantize_window(x, idx, codes, pred, inv_bin, bin_width, win):
    """:func:`dequantize_into` of a code of :func:`quantize_window`."""
    code = codes[idx]
    if code != UNPREDICTABLE:
        p = window_clamp(pred, win)
        t = np.int64(code) - code_radius(codes)
        a, b = _window_sides(p, win, inv_bin)
        m = np.int64(min(a, b))
        z = zigzag(t)
        q = t if z <= 2 * m else (z - m if b > a else m - z)
        x[idx] = p + np.float64(q) * bin_width


@njit(inline="always")
def unfold_lane(pred, q, inv_bin, win):
    """:func:`dequantize_window` without a branch, for loops that vectorize: ``(clamped
    prediction, unfolded q)`` of a code's ``q = code - radius`` (float64, an integer); the same
    values as the point-by-point decoder's (integers exact in float64)."""
    p = window_clamp(pred, win)
    a, b = _window_sides(p, win, inv_bin)
    m = min(a, b)
    z = select(q > 0, 2.0 * q - 1.0, -2.0 * q)
    return p, select(z <= 2.0 * m, q, select(b > a, z - m, m - z))


def quantize_reference(values: np.ndarray, preds: np.ndarray, eb: float):
    """NumPy reference of :func:`quantize_into` for whole arrays.

    Args:
        values: original values, float32 or float64, any shape.
        preds: predictions (float64), same shape.
        eb: absolute error bound (> 0).

    Returns:
        ``(codes, recon)``: int64 codes (``UNPREDICTABLE`` where stored exactly, ``MISSING``
        where ``values`` is NaN) and the reconstruction in the dtype of ``values``.
    """
    v64 = values.astype(np.float64)
    q = np.rint((v64 - preds) / (2.0 * eb))
    ok = np.abs(q) < RADIUS
    q = np.where(ok, q, 0.0)
    recon = (preds + q * (2.0 * eb)).astype(values.dtype)
    ok &= np.abs(recon.astype(np.float64) - v64) <= eb
    if eb == 0:
        ok &= np.signbit(recon) == np.signbit(values)
    missing = np.isnan(v64)
    codes = np.where(ok, q.astype(np.int64) + RADIUS, np.where(missing, MISSING, UNPREDICTABLE))
    recon = np.where(ok | missing, recon, values)
    return codes, recon
