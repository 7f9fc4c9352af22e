"""One real compression by strata or an anchor compressor, measured: what the predictors are
trained on (``benchmarks/quality_train.py``) and what ``strata quality --verify`` shows.

SZ3 runs through pysz (absolute bound), ZFP through zfpy (fixed-accuracy mode, tolerance = the
bound); both take arrays without missing values only.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError, MissingDependencyError


def roundtrip(compressor: str, a: np.ndarray, eb: float, missing=None) -> tuple[int, np.ndarray]:
    """``(compressed bytes, decoded array)`` of ``a`` compressed by ``compressor`` with absolute
    bound ``eb`` (``missing``: boolean mask of missing points, strata only).

    Raises:
        InvalidInputError: an unknown compressor, missing values for an anchor.
        MissingDependencyError: pysz or zfpy is not installed.
    """
    if compressor == "strata":
        from ..lossy import LossyReader, compress

        blob = compress(a, abs_error=float(eb), mask=missing)
        with LossyReader(blob) as r:
            return len(blob), r.read(max_output_bytes=0)
    if compressor not in ("sz3", "zfp"):
        raise InvalidInputError(f"unknown compressor {compressor!r}: choose from strata, sz3, zfp")
    if missing is not None and np.any(missing) or not np.isfinite(a).all():
        raise InvalidInputError(f"{compressor} takes no missing or non-finite values")
    try:
        if compressor == "sz3":
            from pysz import sz, szConfig, szErrorBoundMode
        else:
            import zfpy
    except ImportError as exc:
        raise MissingDependencyError(f"{compressor} is not installed (pip install "
                                     f"{'pysz' if compressor == 'sz3' else 'zfpy'})") from exc
    if compressor == "sz3":
        cfg = szConfig()
        cfg.errorBoundMode = szErrorBoundMode.ABS
        cfg.absErrorBound = float(eb)
        blob = sz.compress(a, cfg)[0]
        return blob.nbytes, np.asarray(sz.decompress(blob, a.dtype, a.shape)[0]).reshape(a.shape)
    blob = zfpy.compress_numpy(a, tolerance=float(eb))
    return len(blob), np.asarray(zfpy.decompress_numpy(blob)).reshape(a.shape)


def measure(compressor: str, a: np.ndarray, eb: float, missing=None, ssim: bool = True) -> dict:
    """``{"bytes", "ratio", "psnr", "max_err", "ssim"}`` of one compression (errors over the
    valid values; ``ssim`` None when the slices are under 7 x 7 or ``ssim`` is False)."""
    from .. import metrics

    nbytes, y = roundtrip(compressor, a, eb, missing)
    valid = a if missing is None else np.where(missing, np.nan, a)
    row = dict(bytes=int(nbytes), ratio=a.nbytes / nbytes, psnr=metrics.psnr(valid, y),
               max_err=metrics.max_abs_error(valid, y), ssim=None)
    if ssim and a.ndim >= 2 and min(a.shape[-2:]) >= metrics.WINDOW:
        try:
            row["ssim"] = metrics.ssim(a, y, missing=missing)
        except InvalidInputError:  # (no complete window of valid values)
            pass
    return row
