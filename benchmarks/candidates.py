"""strata in the anchors' own harness (../shared/bench):

    python ../shared/bench/anchors_lossy.py ../shared/data/sci --candidate strata=benchmarks/candidates.py:Lossy

Lossy: ``compress(array, abs_eb) -> bytes``, ``decompress(blob) -> ndarray`` (self-describing).
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
