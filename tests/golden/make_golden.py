"""Write the golden streams of the test suite (run once per format change, from the repository root):

    .venv/bin/python tests/golden/make_golden.py

Each stream is kept with its source array and the SHA-256 of its decoded bytes; tests/test_golden.py
checks that this version still decodes every one of them, bit for bit, within the bound recorded.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

import strata

HERE = Path(__file__).resolve().parent


def sources() -> dict:
    """``{name: (array, compress kwargs)}``: small, covering each section of the stream."""
    i, j, k = np.meshgrid(np.arange(6), np.arange(20), np.arange(24), indexing="ij")
    smooth = (280 + 5 * np.sin(j / 4.0) * np.cos(k / 5.0) + 0.3 * i).astype(np.float32)
    masked = smooth.copy()
    land = (j - 10) ** 2 + (k - 12) ** 2 < 30 + 4 * i          # land growing along axis 0
    masked[land] = np.float32(1e20)
    masked[0, 0, 0] = np.float32(np.nan)                          # NaN and a NaN payload
    masked[1, 2, 3] = np.array([0x7FC12345], np.uint32).view(np.float32)[0]
    masked[2, 19, 23] = np.inf
    meta = {"name": "tos", "dims": ["time", "lat", "lon"], "attrs": {"units": "K"}}
    plain = np.cumsum(np.sin(np.arange(3000) / 37.0)).astype(np.float64).reshape(30, 100)
    return {
        "lossy_masked_f32": (masked, dict(rel_error=1e-3, fill_value=1e20, metadata=meta)),
        "lossy_plain_f64": (plain, dict(abs_error=1e-4)),
    }


def main() -> None:
    for name, (a, kwargs) in sources().items():
        blob = strata.compress(a, **kwargs)
        y = strata.decompress(blob)
        np.save(HERE / f"{name}.source.npy", a, allow_pickle=False)
        (HERE / f"{name}.strata").write_bytes(blob)
        info = {"decoded_sha256": hashlib.sha256(y.tobytes()).hexdigest(), "kwargs": kwargs,
                "format_version": blob[4]}
        (HERE / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
        print(name, len(blob), "bytes")


if __name__ == "__main__":
    main()
