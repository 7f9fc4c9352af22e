"""Write the numcodecs backwards-compatibility fixtures of the test suite (run once per codec
format change, from the repository root):

    .venv/bin/python tests/golden/make_golden_numcodecs.py

numcodecs' own ``numcodecs.tests.common.check_backwards_compatibility`` writes them, in its
layout (``fixture/strata/array.NN.npy``, ``codec.NN/config.json``, ``codec.NN/encoded.NN.dat``
under tests/golden/numcodecs): small arrays in both memory orders and both byte orders, with
NaN holes, each encoded by a lossless (``abs_error=0``) and a lossy codec.
tests/test_numcodecs_peers.py runs the same helper on them: this version must decode them, the
lossless ones bit for bit, in the dtype and memory order they were encoded from.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "numcodecs"
#: Precision (decimal places, numcodecs' ``assert_array_almost_equal``) per codec: exact, then
#: 1.5e-2 for the lossy codec's bound of 1e-2.
PRECISION = [None, 2]


def codecs():
    from strata.numcodecs import Strata

    return [Strata(abs_error=0.0), Strata(abs_error=0.01)]


def arrays() -> list[np.ndarray]:
    j, k, m = np.meshgrid(np.arange(12), np.arange(17), np.arange(5), indexing="ij")
    smooth = (280 + 5 * np.sin(j / 3.0) * np.cos(k / 4.0) + 0.3 * m + 0.01 * ((j * 7 + k * 13) % 11))
    holed = smooth.astype(np.float32)
    holed[2:4, 3:6, 1] = np.nan
    return [holed,                                                   # C, float32, NaN holes
            np.asfortranarray(smooth),                               # Fortran, float64
            np.asfortranarray(holed).astype(">f4", order="F"),       # Fortran, big-endian float32
            smooth[:, :, 0].astype(">f8")]                           # C, big-endian float64


def main() -> None:
    from numcodecs.tests.common import check_backwards_compatibility

    shutil.rmtree(HERE / "fixture", ignore_errors=True)
    HERE.mkdir(exist_ok=True)
    os.chdir(HERE)
    check_backwards_compatibility("strata", arrays(), codecs(), precision=PRECISION)


if __name__ == "__main__":
    main()
