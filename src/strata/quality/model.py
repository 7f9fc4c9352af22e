"""Stage 2 of the quality predictor: light per-(compressor, metric) predictors.

Each predictor is a mixture of experts (DeepCQ, arXiv 2512.21433, Sec. III-C; Jacobs et al.,
"Adaptive mixtures of local experts", 1991): ``K`` small MLPs (one hidden layer, tanh) and a
softmax gate, all on the same standardized inputs (:func:`inputs`); the output is
``sum_k gate_k(x) * expert_k(x)``. The gate lets experts specialise, e.g. on the regimes of a
time-evolving simulation. The predictors are trained by ``benchmarks/quality_train.py``
(torch, fixed seeds) and ship as one ``.npz`` of float arrays plus a JSON manifest, loaded
with ``allow_pickle=False``: no code is ever unpickled. Inference is numpy only.

Each predictor corrects a model-free estimate (:meth:`Features.at`) rather than predicting
from scratch: the target is ``log(ratio) - log(estimated ratio)``, ``PSNR - estimated PSNR``
(dB) or ``log10(1 - SSIM) - log10(1 - estimated SSIM)``.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..errors import ModelFileError
from .features import Features

#: Format version of the predictor file.
VERSION = 1
#: The shipped predictors.
DEFAULT_PATH = Path(__file__).with_name("models") / "predictors.npz"
METRICS = ("ratio", "psnr", "ssim")
#: Names of the stage-2 inputs, in order (:func:`inputs`).
INPUTS = ("log10_rel_bound", "est_log2_ratio", "est_bits", "zero_share", "est_psnr_gap", "est_log10_1mssim",
          "log10_values", "itemsize", "long_axes", "missing_share", "log10_std", "log10_resid1", "slope12",
          "slope24", "flat_candidate", "log10_window_std")
#: Smallest bit rate of an estimate (a field of one value per bin costs its container).
MIN_BITS = 0.02
#: Smallest 1 - SSIM kept apart from 1.
MIN_DISSIMILARITY = 1e-9


def inputs(f: Features, eb: float) -> tuple[np.ndarray, dict]:
    """``(x, estimate)``: the stage-2 input vector (float64, ``len(INPUTS)``) of features ``f``
    at absolute bound ``eb`` (> 0), and :meth:`Features.at`'s estimate."""
    est = f.at(eb)
    rel = eb / f.value_range
    r = f.residuals  # (in units of the value range, as the other sampled features)
    mean_abs = [float(np.nanmean(np.abs(r[s]))) if np.isfinite(r[s]).any() else math.nan for s in range(r.shape[0])]

    def lg(v, floor=1e-12):
        return math.log10(max(v, floor)) if math.isfinite(v) else -12.0

    def slope(a, b):
        return math.log2(max(b, 1e-30) / max(a, 1e-30)) if math.isfinite(a) and math.isfinite(b) else 0.0

    win = f.window_var[np.isfinite(f.window_var)]
    x = np.array([
        math.log10(rel),
        math.log2(8 * f.itemsize / _stream_bits(f, est)),
        est["bits"],
        est["zero_share"],
        (est["psnr"] + 20 * math.log10(rel)) if math.isfinite(est["psnr"]) else 40.0,
        math.log10(max(1 - est["ssim"], MIN_DISSIMILARITY)),
        math.log10(f.n_values),
        f.itemsize / 8,
        f.long_axes,
        f.missing_share,
        lg(f.std),
        lg(mean_abs[0]),
        slope(mean_abs[0], mean_abs[1]),
        slope(mean_abs[1], mean_abs[2]),
        float(len(f.flat) > 1 and f.flat[1:].any()),
        lg(math.sqrt(float(np.median(win)))) if win.size else -12.0,
    ])
    return x, est


#: Bytes of a stream that do not grow with the data (container and level headers, tables).
FIXED_BYTES = 120


def _stream_bits(f: Features, est: dict) -> float:
    """Estimated bits per value of the whole array: the valid values' codes and the stream's
    fixed bytes (missing values cost their mask, which the learned part accounts for)."""
    return max(est["bits"] * (1 - f.missing_share), MIN_BITS) + 8 * FIXED_BYTES / f.n_values


def baseline(metric: str, f: Features, est: dict) -> float:
    """The model-free value of ``metric`` the predictor's output corrects (in target units)."""
    if metric == "ratio":
        return math.log(8 * f.itemsize / _stream_bits(f, est))
    if metric == "psnr":
        return est["psnr"]
    return math.log10(max(1 - est["ssim"], MIN_DISSIMILARITY))


def to_target(metric: str, value: float) -> float:
    """A measured metric in target units (log ratio, dB, log10(1 - SSIM))."""
    if metric == "ratio":
        return math.log(value)
    if metric == "psnr":
        return value
    return math.log10(max(1 - value, MIN_DISSIMILARITY))


def from_target(metric: str, t: float) -> float:
    """Inverse of :func:`to_target`."""
    if metric == "ratio":
        return math.exp(t)
    if metric == "psnr":
        return t
    return 1 - 10 ** t


@dataclass(frozen=True)
class Mixture:
    """One (compressor, metric) predictor: a gate and ``K`` experts on standardized inputs.

    Attributes (float64 arrays): ``mean``, ``scale`` (inputs, (n,)); ``gate_w`` (n, K),
    ``gate_b`` (K,); ``w1`` (K, n, H), ``b1`` (K, H), ``w2`` (K, H), ``b2`` (K,); ``out_mean``,
    ``out_scale`` (scalars: the target's standardization).
    """

    mean: np.ndarray
    scale: np.ndarray
    gate_w: np.ndarray
    gate_b: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    out_mean: float
    out_scale: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Predictions (target units) for inputs ``x`` of shape (m, n)."""
        z = (x - self.mean) / self.scale
        g = z @ self.gate_w + self.gate_b
        g = np.exp(g - g.max(axis=1, keepdims=True))
        g /= g.sum(axis=1, keepdims=True)
        k, n, hidden = self.w1.shape
        w1 = self.w1.transpose(1, 0, 2).reshape(n, k * hidden)
        h = np.tanh((z @ w1).reshape(-1, k, hidden) + self.b1)
        e = (h * self.w2).sum(axis=2) + self.b2
        return (g * e).sum(axis=1) * self.out_scale + self.out_mean

    ARRAYS = ("mean", "scale", "gate_w", "gate_b", "w1", "b1", "w2", "b2")


def save(path, predictors: dict, info: dict) -> None:
    """Write ``predictors`` ({(compressor, metric): Mixture}) and ``info`` (JSON-able: how they
    were trained) to ``path`` (.npz), atomically."""
    arrays = {}
    for (comp, metric), m in sorted(predictors.items()):
        for name in Mixture.ARRAYS:
            arrays[f"{comp}/{metric}/{name}"] = np.asarray(getattr(m, name), np.float64)
        arrays[f"{comp}/{metric}/out"] = np.array([m.out_mean, m.out_scale], np.float64)
    digest = hashlib.sha256()
    for k in sorted(arrays):
        digest.update(k.encode() + arrays[k].tobytes())
    manifest = dict(format="strata.quality predictors", version=VERSION, inputs=list(INPUTS),
                    predictors=sorted(f"{c}/{m}" for c, m in predictors), sha256=digest.hexdigest(), info=info)
    arrays["manifest"] = np.frombuffer(json.dumps(manifest, sort_keys=True).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write(path, buf.getvalue())


@dataclass(frozen=True)
class Predictors:
    """The loaded predictor file: ``get(compressor, metric)`` and the training ``info``."""

    table: dict
    info: dict

    @property
    def compressors(self) -> tuple[str, ...]:
        return tuple(sorted({c for c, _ in self.table}))

    def get(self, compressor: str, metric: str) -> Mixture:
        return self.table[(compressor, metric)]


#: Largest predictor file read (bytes).
MAX_FILE_BYTES = 64 << 20


def load(path=None) -> Predictors:
    """Load and validate a predictor file (default: the shipped one).

    Raises:
        ModelFileError: missing or oversized file, not an npz of arrays, a manifest of another
            format/version or other inputs, a digest mismatch, arrays of inconsistent shapes or
            non-finite values.
    """
    return _load(str(DEFAULT_PATH if path is None else path))


@lru_cache(maxsize=4)
def _load(path: str) -> Predictors:
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ModelFileError(f"cannot read the predictor file {p}: {exc}") from exc
    if size > MAX_FILE_BYTES:
        raise ModelFileError(f"predictor file {p} is {size} bytes, over {MAX_FILE_BYTES}")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # (zip, npy header and pickle refusals all mean: not our file)
        raise ModelFileError(f"{p} is not a predictor file: {exc}") from exc
    try:
        manifest = json.loads(bytes(arrays.pop("manifest").astype(np.uint8)).decode())
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelFileError(f"{p}: no readable manifest") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != "strata.quality predictors":
        raise ModelFileError(f"{p}: not a strata.quality predictor file")
    if manifest.get("version") != VERSION:
        raise ModelFileError(f"{p}: predictor file version {manifest.get('version')!r}, this strata reads {VERSION}")
    if manifest.get("inputs") != list(INPUTS):
        raise ModelFileError(f"{p}: predictors of other inputs than this strata computes")
    digest = hashlib.sha256()
    for k in sorted(arrays):
        digest.update(k.encode() + np.asarray(arrays[k]).tobytes())
    if digest.hexdigest() != manifest.get("sha256"):
        raise ModelFileError(f"{p}: arrays do not match the manifest's digest")
    table = {}
    names = manifest.get("predictors")
    if not isinstance(names, list) or not names:
        raise ModelFileError(f"{p}: no predictors listed")
    n = len(INPUTS)
    for name in names:
        comp, _, metric = str(name).partition("/")
        if metric not in METRICS:
            raise ModelFileError(f"{p}: unknown metric in {name!r}")
        try:
            parts = {k: np.asarray(arrays[f"{name}/{k}"], np.float64) for k in Mixture.ARRAYS + ("out",)}
        except KeyError as exc:
            raise ModelFileError(f"{p}: predictor {name} lacks {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelFileError(f"{p}: predictor {name} holds non-numeric arrays") from exc
        if parts["gate_b"].ndim != 1 or parts["b1"].ndim != 2:
            raise ModelFileError(f"{p}: {name} has gate or hidden biases of the wrong rank")
        k_experts = parts["gate_b"].shape[0] if parts["gate_b"].ndim == 1 else -1
        h = parts["b1"].shape[1] if parts["b1"].ndim == 2 else -1
        want = dict(mean=(n,), scale=(n,), gate_w=(n, k_experts), gate_b=(k_experts,), w1=(k_experts, n, h),
                    b1=(k_experts, h), w2=(k_experts, h), b2=(k_experts,), out=(2,))
        for k, shape in want.items():
            if parts[k].shape != shape or k_experts < 1 or h < 1:
                raise ModelFileError(f"{p}: {name}/{k} has shape {parts[k].shape}, expected {shape}")
            if not np.isfinite(parts[k]).all():
                raise ModelFileError(f"{p}: {name}/{k} holds non-finite values")
        if (parts["scale"] <= 0).any() or parts["out"][1] <= 0:
            raise ModelFileError(f"{p}: {name} has a non-positive scale")
        out = parts.pop("out")
        table[(comp, metric)] = Mixture(**parts, out_mean=float(out[0]), out_scale=float(out[1]))
    return Predictors(table, manifest.get("info") or {})
