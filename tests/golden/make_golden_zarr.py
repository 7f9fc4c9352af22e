"""Write the golden zarr v3 store of the test suite (run once per codec format change, from the
repository root):

    .venv/bin/python tests/golden/make_golden_zarr.py

A small array written with the ``strata.lossy`` serializer (a CF fill value in the codec
configuration, NaN holes, the array's own fill value, edge chunks), kept with its source array
and the SHA-256 of its decoded bytes; tests/test_golden.py checks that this version still opens
the store from its metadata alone and decodes it bit for bit.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import zarr

from strata.zarr import StrataCodec

HERE = Path(__file__).resolve().parent
NAME = "zarr_v3_strata"


def source() -> np.ndarray:
    j, k = np.meshgrid(np.arange(20), np.arange(30), indexing="ij")
    a = (280 + 5 * np.sin(j / 4.0) * np.cos(k / 5.0) + 0.01 * ((j * 7 + k * 13) % 11)).astype(np.float32)
    a[:3, :4] = np.nan
    a[10, 5:9] = np.float32(-9999.0)     # the CF fill value of the codec configuration
    a[15, 20] = np.float32(-1.0)         # the array's fill value
    return a


def main() -> None:
    a = source()
    store = HERE / f"{NAME}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    z = zarr.create_array(str(store), shape=a.shape, chunks=(8, 16), dtype="f4", fill_value=-1.0,
                          serializer=StrataCodec(abs_error=0.01, fill_value=-9999.0), compressors=None)
    z[:] = a
    y = zarr.open_array(str(store), mode="r")[:]
    np.save(HERE / f"{NAME}.source.npy", a)
    info = {"abs_error": 0.01, "decoded_sha256": hashlib.sha256(y.tobytes()).hexdigest(),
            "codec": z.metadata.to_dict()["codecs"][0]}
    (HERE / f"{NAME}.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
