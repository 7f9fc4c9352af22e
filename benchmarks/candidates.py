"""strata in the anchors' own harness (../shared/bench):

    python ../shared/bench/anchors_lossy.py ../shared/data/sci --candidate strata=benchmarks/candidates.py:Lossy

Lossy: ``compress(array, abs_eb) -> bytes``, ``decompress(blob) -> ndarray`` (self-describing).
Lossless: ``compress(data, dtype) -> bytes``, ``decompress(blob) -> bytes-like``:

    python ../shared/bench/anchors_lossless.py ../shared/data/llm --candidate strata=benchmarks/candidates.py:Lossless
"""
from __future__ import annotations

import numba

import strata


class Lossy:
    """strata.lossy with an absolute error bound, on all cores."""

    THREADS = numba.config.NUMBA_NUM_THREADS

    def compress(self, array, abs_eb):
        return strata.compress(array, abs_error=float(abs_eb))

    def decompress(self, blob):
        return strata.decompress(blob)


class Lossless:
    """strata.checkpoint's segment codec (bit rotation, byte planes, rANS), on all cores.

    ``compress(data, dtype)``: ``dtype`` is a safetensors dtype name ('BF16', 'F32', ...,
    or 'HEADER' for the safetensors header, coded as bytes).
    """

    THREADS = numba.config.NUMBA_NUM_THREADS

    def compress(self, data, dtype):
        from strata.checkpoint import codec

        return codec.encode(data, dtype)

    def decompress(self, blob):
        from strata.checkpoint import codec

        return codec.decode(blob)
