"""Predicted compression ratio, PSNR and SSIM of a field at given error bounds (DeepCQ's two
stages: :mod:`strata.quality.features` once per field, :mod:`strata.quality.model` per
compressor, metric and bound)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..errors import InvalidInputError
from . import model
from .features import Features, features

#: Compressors the shipped predictors cover (``strata``; SZ3 through pysz and ZFP through zfpy
#: in fixed-accuracy mode, as ``benchmarks/`` runs them).
COMPRESSORS = ("strata", "sz3", "zfp")


def _bounds(f: Features, abs_error, rel_error) -> tuple[list[float], bool]:
    """Absolute bounds (data unit) and whether one bound (not a list) was given."""
    if (abs_error is None) == (rel_error is None):
        raise InvalidInputError("give exactly one of abs_error and rel_error")
    given = abs_error if abs_error is not None else rel_error
    single = np.ndim(given) == 0
    try:
        values = [float(v) for v in ([given] if single else list(given))]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"error bounds must be numbers, not {given!r}") from exc
    if not values:
        raise InvalidInputError("no error bound given")
    for v in values:
        if not math.isfinite(v) or v <= 0:
            raise InvalidInputError(f"a predicted error bound must be finite and > 0, got {v}")
    if f.value_range == 0:
        raise InvalidInputError("the field is constant: every bound decodes it exactly (PSNR inf, SSIM 1), "
                                "there is nothing to predict")
    ebs = values if abs_error is not None else [v * f.value_range for v in values]
    return ebs, single


def predict(data, *, compressor: str = "strata", abs_error=None, rel_error=None,
            metrics: Iterable[str] = model.METRICS, mask=None, fill_value=None, predictors=None) -> dict:
    """Predict compression ratio, PSNR and SSIM without compressing.

    Args:
        data: a float32/float64 array (features are computed, see
            :func:`strata.quality.features`) or the :class:`Features` of one (computed once,
            reused for every bound and compressor).
        compressor: "strata", "sz3" or "zfp" (fixed-accuracy mode).
        abs_error / rel_error: exactly one: the absolute bound (data unit) or the bound relative
            to the valid values' range; a number or a list of them (a curve).
        metrics: any of "ratio" (compression ratio, original bytes / compressed bytes), "psnr"
            (dB, value range over RMSE of the valid values; inf where strata codes the field
            losslessly on its lattice), "ssim" (mean SSIM of the 2D slices over the last two
            axes, as :func:`strata.metrics.ssim`; 1 where lossless).
        mask, fill_value: missing values, as for :func:`strata.compress` (with an array).
        predictors: a :class:`strata.quality.model.Predictors` (default: the shipped ones).

    Returns:
        ``{"abs_error": eb, "rel_error": rel, metric: value, ...}`` for one bound; with a list
        of bounds, each value is a list in the bounds' order.

    Raises:
        InvalidInputError: both or neither bound, a bound <= 0 or not finite, an unknown
            compressor or metric, an empty array, every value missing, a constant field.
        UnsupportedDtypeError: not float32/float64.
        ModelFileError: the predictor file fails validation.

    Method: DeepCQ (Liu et al., arXiv 2512.21433): features computed once, light predictors
    (mixtures of experts) per compressor and metric; see :mod:`strata.quality`.
    """
    metrics = tuple(metrics) if not isinstance(metrics, str) else (metrics,)
    for m in metrics:
        if m not in model.METRICS:
            raise InvalidInputError(f"unknown metric {m!r}: choose from {', '.join(model.METRICS)}")
    preds = predictors if predictors is not None else model.load()
    if compressor not in preds.compressors:
        raise InvalidInputError(f"unknown compressor {compressor!r}: choose from {', '.join(preds.compressors)}")
    f = data if isinstance(data, Features) else features(data, mask=mask, fill_value=fill_value)
    ebs, single = _bounds(f, abs_error, rel_error)
    out = {"abs_error": ebs, "rel_error": [eb / f.value_range for eb in ebs]}
    out.update(curve(f, ebs, compressor, metrics, preds))
    if single:
        out = {k: v[0] for k, v in out.items()}
    return out


def curve(f: Features, ebs: list[float], compressor: str, metrics, preds) -> dict:
    """``{metric: [predicted value per bound]}`` (checked arguments, see :func:`predict`)."""
    rows = [model.inputs(f, eb, compressor) for eb in ebs]
    x = np.stack([r[0] for r in rows])
    out = {}
    for m in metrics:
        base = np.array([model.baseline(m, f, est) for _, est in rows])
        t = base + preds.get(compressor, m)(x)
        values = [model.from_target(m, float(v)) for v in t]
        # (lossless on the lattice: PSNR inf and SSIM 1 are known, not predicted)
        out[m] = [v if (exact := model.lossless(m, est)) is None else exact for v, (_, est) in zip(values, rows)]
    return out
