"""strata.enhance: online neural enhancement of decompressed data (NeurLZ).

NeurLZ (Jia et al., arXiv:2409.05785) trains, at compression time, a small skip-connected CNN
(:mod:`strata.enhance.network`, 1,465 parameters for one field) that predicts the compression
error from the decompressed field, stores it beside the stream (f16 weights,
:mod:`strata.enhance.section`) and lets the decoder add the predicted error back, regulated
(:mod:`strata.enhance.regulate`): **2x** clips the correction to the bound (every value within
twice the bound, no side information), **1x** keeps the bound itself (the points where the
enhanced value would break it are stored and keep the plain value). Cross-field learning
(:func:`compress_fields`) feeds the other decoded fields of a snapshot to each network.

Training needs PyTorch (``pip install 'strata[torch]'``); decoding does not (the inference is
compiled with numba, deterministic on any number of threads). ``strata.compress(...,
enhance="2x")`` and ``strata.decompress`` use this package.
"""
from __future__ import annotations

from .codec import MODES, compress, compress_fields, decompress_fields
from .options import EnhanceOptions

__all__ = ["MODES", "EnhanceOptions", "compress", "compress_fields", "decompress_fields"]
