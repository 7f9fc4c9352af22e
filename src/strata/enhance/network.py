"""The enhancement network and its deterministic inference (numba, float32, fixed order).

NeurLZ (Jia et al., arXiv:2409.05785, sec. 3) trains a small skip-connected CNN that maps
decompressed data to the compression error. Ours works on the 2D slices of the array's
internal 3D view (axis 0 indexes the slices; a 2D array is one slice):

* input channels, per input field (the field itself first, then, for cross-field learning,
  the other decoded fields of the same snapshot): ``value`` -- ``(x - center) * value_scale``,
  the field scaled to about [-1, 1]; ``detail`` -- ``(x - mean3x3(x)) * detail_scale``, the
  high-pass part in units of 8 error bounds (clipped to +-4); and, for the field itself,
  ``below`` / ``above`` -- ``(x[k-1] - x[k]) * detail_scale`` and ``(x[k+1] - x[k]) *
  detail_scale`` (clipped), the neighbouring slices (2.5D). The detail channels are what
  make the error learnable: the error lives at the scale of the bound, far below the range.
  Edges repeat the nearest point (``mean3x3``, neighbouring slices).
* ``h1 = relu(conv(f, W1))``, ``h = h1 + relu(conv(relu(conv(h1, W2)), W3))``,
  ``r = conv(h, W4)``: four 3x3 convolutions (zero padding) of ``width`` channels, one skip
  connection; ``r`` is the predicted error in units of the error bound.

Inference is plain float32 arithmetic in a fixed order (each output sums its input channels,
then rows, then columns of the kernel, in that order, starting from the bias) with no
fast-math, so an encoder and a decoder compute identical values, on one thread or many
(threads split the slices, never a sum: plain Python threads running a ``nogil`` kernel,
cheaper to compile than a numba parallel loop). The receptive field reaches ``HALO`` points within a
slice and one slice either way (:data:`SLICE_HALO`): a region read decodes that much more, and
:mod:`strata.enhance.apply` computes a block in tiles with that halo (bit-identical results).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .._numba import thread_budget

#: Features of an input field (bit ``k`` of a field's feature mask).
VALUE, DETAIL, BELOW, ABOVE = 0, 1, 2, 3
FEATURES = ("value", "detail", "below", "above")
#: Detail channels are clipped to +-DETAIL_CLIP (units of 8 error bounds).
DETAIL_CLIP = 4.0
#: Points within a slice that influence an output: mean3x3 (1) + four 3x3 convolutions (4).
HALO = 5
#: Slices either way that influence an output (the below / above channels).
SLICE_HALO = 1
N_CONV = 4


def channel_count(masks) -> int:
    """Input channels given each field's feature mask."""
    return sum(bin(int(m)).count("1") for m in masks)


def weight_count(channels: int, width: int) -> int:
    """Parameters (weights and biases) of the network."""
    return (width * channels * 9 + width) + 2 * (width * width * 9 + width) + (width * 9 + 1)


def _shapes(channels: int, width: int):
    return [(width, channels, 3, 3), (width,), (width, width, 3, 3), (width,), (width, width, 3, 3), (width,),
            (1, width, 3, 3), (1,)]


def unpack(flat: np.ndarray, channels: int, width: int):
    """``(w1, b1, w2, b2, w3, b3, w4, b4)`` views of a flat float32 parameter vector, in the
    order :func:`weight_count` counts them (torch's ``Conv2d`` layouts, ``(out, in, 3, 3)``)."""
    out, pos = [], 0
    for s in _shapes(channels, width):
        n = int(np.prod(s))
        out.append(flat[pos:pos + n].reshape(s))
        pos += n
    return out


#: Parameter tensors of the network (each quantized with its own scale).
N_TENSORS = 8


def quantize(params: np.ndarray, channels: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """8-bit weights: ``(scales, q)`` with float32 ``scales`` (one per tensor, ``max|w| / 127``)
    and int8 ``q`` (flat), so that :func:`dequantize` gives ``q * scale`` per tensor."""
    scales, qs = [], []
    for t in unpack(params.astype(np.float32), channels, width):
        s = np.float32(np.abs(t).max() / 127.0) if t.size else np.float32(0)
        scales.append(s)
        qs.append(np.zeros(t.size, np.int8) if s == 0 else np.clip(np.rint(t.ravel() / s), -127, 127).astype(np.int8))
    return np.array(scales, np.float32), np.concatenate(qs)


def dequantize(scales: np.ndarray, q: np.ndarray, channels: int, width: int) -> np.ndarray:
    """float32 flat parameters ``q * scale`` of each tensor (a float32 product: exact and the
    same everywhere)."""
    per = np.repeat(np.asarray(scales, np.float32), [int(np.prod(s)) for s in _shapes(channels, width)])
    with np.errstate(over="ignore"):  # (a damaged scale: the caller refuses non-finite weights)
        return q.astype(np.float32) * per


@njit(cache=True)
def _slice_features(fields, spec, k, feat):
    """The input channels of slice ``k`` into ``feat`` (float32 ``(C, H + 2, W + 2)``, zero
    border). ``fields``: float32 ``(F, D, H, W)``; ``spec``: float32 ``(F, 4)`` rows
    ``(center, value_scale, detail_scale, feature mask)``."""
    n_fields, depth, height, width = fields.shape
    clip = np.float32(DETAIL_CLIP)
    ninth = np.float32(1.0 / 9.0)
    c = 0
    for f in range(n_fields):
        center, vscale, dscale = spec[f, 0], spec[f, 1], spec[f, 2]
        fmask = int(spec[f, 3])
        x = fields[f, k]
        if fmask & 1:
            for i in range(height):
                for j in range(width):
                    feat[c, i + 1, j + 1] = (x[i, j] - center) * vscale
            c += 1
        if fmask & 2:
            for i in range(height):
                i0, i2 = max(i - 1, 0), min(i + 1, height - 1)
                for j in range(width):
                    j0, j2 = max(j - 1, 0), min(j + 1, width - 1)
                    s = x[i0, j0] + x[i0, j] + x[i0, j2]
                    s += x[i, j0] + x[i, j] + x[i, j2]
                    s += x[i2, j0] + x[i2, j] + x[i2, j2]
                    v = (x[i, j] - s * ninth) * dscale
                    feat[c, i + 1, j + 1] = min(max(v, -clip), clip)
            c += 1
        for bit, step in ((4, -1), (8, 1)):
            if fmask & bit:
                y = fields[f, min(max(k + step, 0), depth - 1)]
                for i in range(height):
                    for j in range(width):
                        v = (y[i, j] - x[i, j]) * dscale
                        feat[c, i + 1, j + 1] = min(max(v, -clip), clip)
                c += 1


@njit(cache=True)
def _conv(src, w, b, dst, relu):
    """``dst[o] = b[o] + sum_i,dy,dx w[o, i, dy, dx] * src[i, shifted]`` on the interior of
    ``dst`` (both padded by one; the border of ``src`` is zero), then ReLU if asked. The sum
    order is fixed: bias, then input channel, kernel row, kernel column."""
    n_out, n_in = w.shape[0], w.shape[1]
    height, width = src.shape[1] - 2, src.shape[2] - 2
    zero = np.float32(0.0)
    for o in range(n_out):
        for i in range(height):
            for j in range(width):
                dst[o, i + 1, j + 1] = b[o]
        for c in range(n_in):
            for dy in range(3):
                for dx in range(3):
                    wv = w[o, c, dy, dx]
                    for i in range(height):
                        row = src[c, i + dy]
                        out = dst[o, i + 1]
                        for j in range(width):
                            out[j + 1] += wv * row[j + dx]
        if relu:
            for i in range(height):
                for j in range(width):
                    if dst[o, i + 1, j + 1] < zero:
                        dst[o, i + 1, j + 1] = zero


@njit(cache=True, nogil=True)
def _slice(fields, spec, k, weights, out):
    w1, b1, w2, b2, w3, b3, w4, b4 = weights
    n_ch, width = w1.shape[1], w1.shape[0]
    height, cols = fields.shape[2], fields.shape[3]
    feat = np.zeros((n_ch, height + 2, cols + 2), np.float32)
    h1 = np.zeros((width, height + 2, cols + 2), np.float32)
    h2 = np.zeros_like(h1)
    h3 = np.zeros_like(h1)
    r = np.zeros((1, height + 2, cols + 2), np.float32)
    _slice_features(fields, spec, k, feat)
    _conv(feat, w1, b1, h1, True)
    _conv(h1, w2, b2, h2, True)
    _conv(h2, w3, b3, h3, True)
    for c in range(width):
        for i in range(1, height + 1):
            for j in range(1, cols + 1):
                h3[c, i, j] += h1[c, i, j]
    _conv(h3, w4, b4, r, False)
    out[k] = r[0, 1:height + 1, 1:cols + 1]


@njit(cache=True, nogil=True)
def _predict_slices(fields, spec, weights, out, first, last):
    """Slices ``first .. last - 1`` of the prediction into ``out`` (float32 ``(D, H, W)``)."""
    for k in range(first, last):
        _slice(fields, spec, k, weights, out)


@njit(cache=True, nogil=True)
def _features_slices(fields, spec, out, first, last):
    """Slices ``first .. last - 1`` of the input channels into ``out`` (float32 ``(D, C, H, W)``)."""
    feat = np.zeros((out.shape[1], fields.shape[2] + 2, fields.shape[3] + 2), np.float32)
    for k in range(first, last):
        _slice_features(fields, spec, k, feat)
        out[k] = feat[:, 1:-1, 1:-1]


def _over_slices(kernel, n_slices: int, *args) -> None:
    """Run ``kernel(*args, first, last)`` over contiguous runs of slices on the threads numba
    may use (:func:`strata._numba.thread_budget`): each slice is computed whole by
    one thread, so the result does not depend on their number."""
    n = max(1, min(thread_budget(), n_slices))
    bounds = [n_slices * i // n for i in range(n + 1)]
    if n == 1:
        kernel(*args, 0, n_slices)
        return
    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(kernel, *args, a, b) for a, b in zip(bounds, bounds[1:])]:
            f.result()


def features(fields: np.ndarray, spec: np.ndarray) -> np.ndarray:
    """The network's input channels of every slice: float32 ``(D, C, H, W)`` from ``fields``
    (float32 ``(F, D, H, W)``, missing points already replaced) and ``spec`` (float32
    ``(F, 4)``: center, value scale, detail scale, feature mask per field). The training
    inputs, computed by the code inference runs."""
    out = np.empty((fields.shape[1], channel_count(spec[:, 3]), fields.shape[2], fields.shape[3]), np.float32)
    _over_slices(_features_slices, fields.shape[1], fields, spec, out)
    return out


def slice_bytes(channels: int, width: int, rows: int, cols: int) -> int:
    """Working bytes of the network on one slice of ``rows`` x ``cols`` points
    (:func:`predict_slice`): its input channels, three feature maps of ``width`` channels and
    the prediction, float32 with a one-point border."""
    return 4 * (channels + 3 * width + 1) * (rows + 2) * (cols + 2)


def predict_slice(fields: np.ndarray, spec: np.ndarray, weights, k: int) -> np.ndarray:
    """Predicted error of the first field on slice ``k``, in units of its error bound: float32
    ``(H, W)``.

    Args:
        fields: float32 ``(F, D, H, W)``, C-contiguous: the decoded input fields (missing and
            non-finite points replaced by their field's center), the slices ``k - 1 .. k + 1``
            that exist (the neighbouring slices the ``below`` / ``above`` channels read).
        spec: float32 ``(F, 4)``, see :func:`features`.
        weights: the network's tensors, :func:`unpack` of its float32 parameters.
        k: the slice, an index into ``fields``' axis 1.

    Working memory: :func:`slice_bytes` of ``H`` x ``W``, and ``D`` slices of float32 output.
    """
    out = np.empty(fields.shape[1:], np.float32)
    _predict_slices(fields, spec, weights, out, k, k + 1)
    return out[k]
