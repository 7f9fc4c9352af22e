"""Stage 2 of the quality predictor: light per-(compressor, metric) predictors.

Each predictor is a mixture of experts (DeepCQ, arXiv 2512.21433, Sec. III-C; Jacobs et al.,
"Adaptive mixtures of local experts", 1991): ``K`` small MLPs (one hidden layer, tanh) and a
softmax gate, all on the same standardized inputs (:func:`inputs`); the output is
``sum_k gate_k(x) * expert_k(x)``, averaged over a few members trained from different seeds.
The gate lets experts specialise, e.g. on the regimes of a time-evolving simulation. The
predictors are trained by ``benchmarks/quality_train.py`` (torch, fixed seeds) and ship as
one ``.npz`` of float arrays plus a JSON manifest, loaded with ``allow_pickle=False``: no code
is ever unpickled. Inference is numpy only.

Each predictor corrects a model-free estimate (:meth:`Features.at`) rather than predicting
from scratch: the target is ``log(ratio) - log(estimated ratio)``, ``PSNR - estimated PSNR``
(dB) or ``log10(1 - SSIM) - log10(1 - estimated SSIM)``. Where strata codes a field losslessly
on its lattice (a bound below half the lattice step, :mod:`strata.lossy.predictors.lattice`), the PSNR is
infinite and the SSIM 1 by construction; only the ratio is predicted there.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from ..errors import ModelFileError
from .features import Features

#: Format version of the predictor file (2: the inputs of the sparse, lattice and mask
#: features, the model-free mask estimate in the ratio's baseline, ensembles of members).
VERSION = 2
#: The shipped predictors.
DEFAULT_PATH = Path(__file__).with_name("models") / "predictors.npz"
METRICS = ("ratio", "psnr", "ssim")
#: Names of the stage-2 inputs, in order (:func:`inputs`).
INPUTS = ("log10_rel_bound", "est_log2_ratio", "est_bits", "zero_share", "est_psnr_gap", "est_log10_1mssim",
          "log10_values", "itemsize", "long_axes", "missing_share", "log10_std", "log10_resid1", "slope12",
          "slope24", "flat_candidate", "log10_window_std", "est_ctx_bits", "value_zero_share", "value_mode_share",
          "lattice_log2_bound_steps", "lattice_used", "lattice_lossless", "level_factors", "est_mask_bits",
          "log10_mask_edges")
#: Bits of a mask point next to a boundary in the model-free mask estimate (:func:`mask_bits`):
#: strata's context coder (:mod:`strata.lossy.mask`) spends about a bit on a point whose known
#: neighbours disagree and almost nothing elsewhere.
MASK_EDGE_BITS = 1.0
#: Smallest bit rate of an estimate (a field of one value per bin costs its container).
MIN_BITS = 0.02
#: Smallest 1 - SSIM kept apart from 1.
MIN_DISSIMILARITY = 1e-9


def inputs(f: Features, eb: float, compressor: str = "strata") -> tuple[np.ndarray, dict]:
    """``(x, estimate)``: the stage-2 input vector (float64, ``len(INPUTS)``) of features ``f``
    at absolute bound ``eb`` (> 0) for ``compressor``, and :meth:`Features.at`'s estimate (for
    strata: with its lattice and level-wise bounds). Where strata codes the field on a lattice
    with ``m`` steps of error, the bound inputs are those of the lattice code's own bound
    (``m + 1/2`` steps less its slack), so that every bound giving the same stream gives the
    same prediction."""
    est = f.at(eb, strata=compressor == "strata")
    if est["lattice_m"] >= 0:  # (strata on a lattice: every bound of the same m gives the same stream)
        on = f.on_lattice(eb)
        eb = on.coding_bound * on.step
    rel = eb / f.value_range
    r = f.residuals  # (in units of the value range, as the other sampled features)
    mean_abs = [float(np.nanmean(np.abs(r[s]))) if np.isfinite(r[s]).any() else math.nan for s in range(r.shape[0])]

    def lg(v, floor=1e-12):
        return math.log10(max(v, floor)) if math.isfinite(v) else -12.0

    def slope(a, b):
        return math.log2(max(b, 1e-30) / max(a, 1e-30)) if math.isfinite(a) and math.isfinite(b) else 0.0

    win = f.window_var[np.isfinite(f.window_var)]
    step = float(f.lattice[1])
    # bound in lattice steps (log2, clipped): below -1 a lattice code is lossless; off a lattice +8
    steps = min(8.0, max(-8.0, math.log2(eb / step))) if step > 0 else 8.0
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
        est["ctx_bits"],
        f.zero_share,
        f.mode_share,
        steps,
        float(est["lattice_m"] >= 0),
        float(est["lattice_m"] == 0),
        float(est["level_factors"]),
        mask_bits(f),
        lg(float(f.mask_edges.sum()), 1e-6),
    ])
    return x, est


def mask_bits(f: Features) -> float:
    """Model-free bits per value of strata's mask: :data:`MASK_EDGE_BITS` for each point next
    to a boundary (about two per edge along each axis, :attr:`Features.mask_edges`), 0 without
    missing values."""
    if f.missing_share <= 0:
        return 0.0
    return MASK_EDGE_BITS * min(1.0, 2 * float(f.mask_edges.sum()))


def lossless(metric: str, est: dict) -> float | None:
    """The exact value of ``metric`` where the estimate says the field decodes exactly (PSNR
    inf, SSIM 1), else None."""
    if est.get("nmse", 1.0) > 0 or metric == "ratio":
        return None
    return math.inf if metric == "psnr" else 1.0


#: Bytes of a stream that do not grow with the data (container and level headers, tables).
FIXED_BYTES = 120


def _stream_bits(f: Features, est: dict) -> float:
    """Estimated bits per value of the whole array: the valid values' codes, the mask
    (:func:`mask_bits`), the chunks' framing (``framing_bits``, strata only) and the stream's
    fixed bytes."""
    return (max(est["bits"] * (1 - f.missing_share) + mask_bits(f), MIN_BITS) + est.get("framing_bits", 0.0)
            + 8 * FIXED_BYTES / f.n_values)


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
    """One (compressor, metric) predictor: ``M`` members, each a gate and ``K`` experts on
    standardized inputs; the prediction is the members' mean (an ensemble of the same
    schedule from different seeds: its spread across held-out families is smaller).

    Attributes (float64 arrays, a leading member axis): ``mean``, ``scale`` (inputs,
    (M, n)); ``gate_w`` (M, n, K), ``gate_b`` (M, K); ``w1`` (M, K, n, H), ``b1`` (M, K, H),
    ``w2`` (M, K, H), ``b2`` (M, K); ``out_mean``, ``out_scale`` ((M,): the target's
    standardization).
    """

    mean: np.ndarray
    scale: np.ndarray
    gate_w: np.ndarray
    gate_b: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    out_mean: np.ndarray
    out_scale: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Predictions (target units) for inputs ``x`` of shape (m, n)."""
        out = np.zeros(x.shape[0])
        members = self.gate_b.shape[0]
        for i in range(members):
            z = (x - self.mean[i]) / self.scale[i]
            g = z @ self.gate_w[i] + self.gate_b[i]
            g = np.exp(g - g.max(axis=1, keepdims=True))
            g /= g.sum(axis=1, keepdims=True)
            k, n, hidden = self.w1[i].shape
            w1 = self.w1[i].transpose(1, 0, 2).reshape(n, k * hidden)
            h = np.tanh((z @ w1).reshape(-1, k, hidden) + self.b1[i])
            e = (h * self.w2[i]).sum(axis=2) + self.b2[i]
            out += (g * e).sum(axis=1) * self.out_scale[i] + self.out_mean[i]
        return out / members

    @classmethod
    def stack(cls, members) -> Mixture:
        """One predictor of all the members of ``members`` (mixtures), in order."""
        return cls(*(np.concatenate([np.asarray(getattr(m, f.name), np.float64) for m in members])
                     for f in fields(cls)))

    ARRAYS = ("mean", "scale", "gate_w", "gate_b", "w1", "b1", "w2", "b2")


def save(path, predictors: dict, info: dict) -> None:
    """Write ``predictors`` ({(compressor, metric): Mixture}) and ``info`` (JSON-able: how they
    were trained) to ``path`` (.npz), atomically."""
    arrays = {}
    for (comp, metric), m in sorted(predictors.items()):
        for name in Mixture.ARRAYS:
            arrays[f"{comp}/{metric}/{name}"] = np.asarray(getattr(m, name), np.float64)
        arrays[f"{comp}/{metric}/out"] = np.stack([np.asarray(m.out_mean, np.float64).reshape(-1),
                                                   np.asarray(m.out_scale, np.float64).reshape(-1)], axis=1)
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
        if parts["gate_b"].ndim != 2 or parts["b1"].ndim != 3:
            raise ModelFileError(f"{p}: {name} has gate or hidden biases of the wrong rank")
        members, k_experts = parts["gate_b"].shape
        h = parts["b1"].shape[2]
        want = dict(mean=(members, n), scale=(members, n), gate_w=(members, n, k_experts),
                    gate_b=(members, k_experts), w1=(members, k_experts, n, h), b1=(members, k_experts, h),
                    w2=(members, k_experts, h), b2=(members, k_experts), out=(members, 2))
        for k, shape in want.items():
            if parts[k].shape != shape or members < 1 or k_experts < 1 or h < 1:
                raise ModelFileError(f"{p}: {name}/{k} has shape {parts[k].shape}, expected {shape}")
            if not np.isfinite(parts[k]).all():
                raise ModelFileError(f"{p}: {name}/{k} holds non-finite values")
        if (parts["scale"] <= 0).any() or (parts["out"][:, 1] <= 0).any():
            raise ModelFileError(f"{p}: {name} has a non-positive scale")
        out = parts.pop("out")
        table[(comp, metric)] = Mixture(**parts, out_mean=out[:, 0].copy(), out_scale=out[:, 1].copy())
    return Predictors(table, manifest.get("info") or {})
