"""strata.checkpoint: lossless compression of LLM checkpoints and incremental snapshots.

``save``/``load`` for state dicts of torch tensors and NumPy arrays, XOR deltas against an
earlier snapshot, byte-identical safetensors round trips, and :class:`AsyncCheckpointer` for
saving in the background. The codec is :mod:`strata.checkpoint.codec`.
"""
from .background import AsyncCheckpointer
from .io import compress_safetensors, decompress_safetensors, load, save

__all__ = ["AsyncCheckpointer", "compress_safetensors", "decompress_safetensors", "load", "save"]
