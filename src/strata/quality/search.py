"""Compression to a quality or size target: ``strata.compress(array, target_psnr=...)``.

The predictor (:func:`strata.quality.predict`) gives the metric's curve over bounds; the search
takes the bound its curve puts at the target, compresses once and measures; if the measured
value misses the target by more than the tolerance, the curve is shifted by the miss (one
measured point corrects the predictor's offset) and, for a third try, the two measured points
are joined (secant in log bound). At most ``MAX_COMPRESSIONS`` compressions in all; the stream
closest to the target is returned with a target section (:mod:`strata.lossy.target`) recording
the target, the value reached and the number of compressions. Compare FRaZ (Underwood et al.,
IPDPS 2020), which searches for a fixed ratio by trial compressions alone.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidInputError
from . import model
from .features import features
from .predict import curve

#: Compressions a search may run.
MAX_COMPRESSIONS = 3
#: A result this close to the target ends the search: dB; share of the ratio; share of the
#: dissimilarity 1 - SSIM.
TOLERANCE = {"psnr": 0.2, "ratio": 0.02, "ssim": 0.05}
#: Relative bounds the predicted curve is evaluated at (half-decade steps).
GRID = tuple(10.0 ** (-k / 2) for k in range(2, 17))


def _check_target(metric: str, target) -> float:
    try:
        t = float(target)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"target_{metric} must be a number, not {target!r}") from exc
    if not math.isfinite(t):
        raise InvalidInputError(f"target_{metric} must be finite, got {t}")
    if metric == "psnr" and t <= 0:
        raise InvalidInputError(f"target_psnr {t} dB: a PSNR target must be > 0 dB")
    if metric == "ratio" and t <= 1:
        raise InvalidInputError(f"target_ratio {t}: a compression ratio target must be > 1")
    if metric == "ssim" and not 0 < t <= 1:
        raise InvalidInputError(f"target_ssim {t}: an SSIM target must be in (0, 1]")
    return t


def _as_target(metric: str, value: float) -> float:
    """A metric in the units the search works in: ratio as log, SSIM as log10(1 - SSIM)."""
    if metric == "psnr":
        return min(value, 1e3)
    return model.to_target(metric, value)


def compress_to_target(array, *, metric: str, target, mask=None, fill_value=None, metadata=None,
                       predictors=None) -> bytes:
    """Compress ``array`` with strata at the bound that meets ``target`` of ``metric``.

    Args:
        array: float32/float64 array (missing values as for :func:`strata.compress`).
        metric: "psnr" (dB over the valid values), "ratio" (compression ratio of the stream)
            or "ssim" (:func:`strata.metrics.ssim`, 2D slices of at least 7 x 7).
        target: the value to reach.
        predictors: :class:`strata.quality.model.Predictors` (default: the shipped ones).

    Returns:
        The stream with a target section recording ``target``, the value reached and the
        compressions run (:attr:`strata.lossy.LossyReader.target`). A target beyond what the
        bounds can give (a ratio above what the coarsest bound reaches) returns the closest
        stream found, which the section reports; a PSNR or SSIM target above what the
        finest bound reaches (or a constant field) gives a lossless stream (PSNR inf).

    Raises:
        InvalidInputError: a target that is not a number, PSNR <= 0, ratio <= 1, SSIM
            outside (0, 1]; SSIM of arrays without 7 x 7 slices; an empty array or no valid value.
        MissingDependencyError: SSIM without scikit-image.
    """
    from .. import metrics as measures
    from ..lossy import compress, missing
    from ..lossy.codec import with_target
    from ..lossy.reader import LossyReader
    from ..lossy.target import TargetRecord

    if metric not in TOLERANCE:
        raise InvalidInputError(f"unknown target metric {metric!r}: choose from {', '.join(TOLERANCE)}")
    goal = _check_target(metric, target)
    data, ma_mask = missing.split_masked(array)
    a = np.asarray(data)
    miss = None
    if ma_mask is not None or mask is not None or fill_value is not None:
        from ..lossy.codec import validate_array

        miss = missing.find(validate_array(a), mask, fill_value).reshape(a.shape)
        if ma_mask is not None:
            miss |= ma_mask
    if metric == "ssim" and (a.ndim < 2 or min(a.shape[-2:]) < measures.WINDOW):
        raise InvalidInputError(f"SSIM needs 2D slices of at least 7 x 7 values, not shape {a.shape}")
    f = features(a, mask=miss)
    valid = a if miss is None else np.where(miss, np.nan, a)
    tried = []  # (log10 rel bound, measured value in search units, stream, measured value)

    def run(rel: float | None):
        blob = compress(a, rel_error=rel if rel is not None else 0.0, mask=miss, metadata=metadata)
        if metric == "ratio":
            value = a.nbytes / (len(blob) + 24)  # (the target section and its length varint)
        else:
            with LossyReader(blob) as r:
                y = r.read(max_output_bytes=0)
            value = measures.psnr(valid, y) if metric == "psnr" else measures.ssim(a, y, missing=miss)
        tried.append((math.log10(rel) if rel else -math.inf, _as_target(metric, value), blob, value))
        return value

    if f.value_range == 0 or (metric == "ssim" and goal == 1):
        run(None)  # (a constant field is exact at any bound; SSIM 1 asks for exact values)
    else:
        logs = np.log10(np.array(GRID))
        predicted = np.array([_as_target(metric, v) for v in
                              curve(f, [g * f.value_range for g in GRID], "strata", (metric,),
                                    predictors if predictors is not None else model.load())[metric]])
        want = _as_target(metric, goal)
        offset = 0.0
        for attempt in range(MAX_COMPRESSIONS):
            if attempt < 2:
                log_rel = _solve(metric, logs, predicted + offset, want)
            else:
                log_rel = _secant(tried, want, logs, predicted)
            if log_rel is None:  # beyond the finest bound: lossless
                run(None)
                break
            value = run(10.0 ** log_rel)
            if _close(metric, value, goal):
                break
            offset = tried[-1][1] - float(np.interp(log_rel, logs[::-1], predicted[::-1]))
    best = min(tried, key=lambda t: (abs(t[1] - _as_target(metric, goal)), -len(t[2])))
    achieved = best[3]
    if metric == "ssim":
        achieved = min(max(achieved, -1.0), 1.0)
    record = TargetRecord(metric, goal, float(achieved), len(tried))
    out = with_target(best[2], record)
    if metric == "ratio":
        record = TargetRecord(metric, goal, a.nbytes / len(out), len(tried))
        out = with_target(best[2], record)
    return out


def _close(metric: str, value: float, goal: float) -> bool:
    if metric == "ratio":
        return abs(value / goal - 1) <= TOLERANCE[metric]
    if metric == "ssim":
        return abs((1 - value) / (1 - goal) - 1) <= TOLERANCE[metric]
    return abs(value - goal) <= TOLERANCE[metric]


def _solve(metric: str, logs: np.ndarray, values: np.ndarray, want: float) -> float | None:
    """Log10 relative bound where the predicted curve (``values`` at ``logs``, coarse to fine)
    crosses ``want``. Off the curve: the coarsest bound when even it does better than the
    target, the finest (ratio) or None (lossless: PSNR, SSIM) when even the finest misses it."""
    for i in range(len(logs) - 1):
        v0, v1 = values[i], values[i + 1]
        if (v0 - want) * (v1 - want) <= 0 and v0 != v1:
            return float(logs[i] + (want - v0) / (v1 - v0) * (logs[i + 1] - logs[i]))
    finer_is_up = values[-1] > values[0]  # PSNR rises with finer bounds; log ratio, log(1-SSIM) fall
    beyond_finest = (want > values[-1]) if finer_is_up else (want < values[-1])
    if not beyond_finest:
        return float(logs[0])
    return float(logs[-1]) if metric == "ratio" else None


def _secant(tried, want, logs, predicted) -> float | None:
    """Third try: the line through the two measured points (the predicted slope when they
    coincide), kept within the grid."""
    (x0, y0), (x1, y1) = [(t[0], t[1]) for t in tried[-2:]]
    if not (math.isfinite(x0) and math.isfinite(x1)) or x0 == x1 or y0 == y1:
        slope = float(np.polyfit(logs, predicted, 1)[0])
        x, y = (x1, y1) if math.isfinite(x1) else (x0, y0)
        if not math.isfinite(x) or slope == 0:
            return None
        return float(np.clip(x + (want - y) / slope, logs[-1], logs[0]))
    return float(np.clip(x1 + (want - y1) * (x1 - x0) / (y1 - y0), logs[-1] - 1, logs[0]))
