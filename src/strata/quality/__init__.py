"""strata.quality: predict compression ratio, PSNR and SSIM without compressing, and compress
to a quality or size target (after DeepCQ, Liu et al., arXiv 2512.21433).

Two stages, as DeepCQ: :func:`features` runs once per field on a fixed-size sample
(:mod:`strata.quality.features`) and its result serves every bound and compressor; light
predictors per (compressor, metric), mixtures of experts (:mod:`strata.quality.model`), turn
them into predictions (:func:`predict`). The predictors ship with the package and are
retrained by ``benchmarks/quality_train.py``; ``benchmarks/quality_prediction.py`` measures
them on held-out time steps and field families. :func:`compress_to_target` (and
``strata.compress(array, target_psnr=...)``) picks the bound with the predictor and corrects
it with at most three real compressions (:mod:`strata.quality.search`).
"""
from .features import Features, features
from .model import METRICS, Predictors, load
from .predict import COMPRESSORS, predict
from .search import compress_to_target

__all__ = ["COMPRESSORS", "METRICS", "Features", "Predictors", "compress_to_target", "features", "load", "predict"]
