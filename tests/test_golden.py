"""Golden streams: streams written by this format version (tests/golden, made by
tests/golden/make_golden.py) must keep decoding, bit for bit, in every later version."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import strata

GOLDEN = Path(__file__).resolve().parent / "golden"
NAMES = sorted(p.name[:-len(".strata")] for p in GOLDEN.glob("*.strata"))


@pytest.mark.parametrize("name", NAMES)
def test_golden_stream_decodes(name):
    info = json.loads((GOLDEN / f"{name}.json").read_text())
    a = np.load(GOLDEN / f"{name}.source.npy", allow_pickle=False)
    r = strata.open(GOLDEN / f"{name}.strata")
    with r:
        y = r.read()
        assert hashlib.sha256(y.tobytes()).hexdigest() == info["decoded_sha256"]
        kw = info["kwargs"]
        missing = np.isnan(a) | (a == np.float32(kw["fill_value"]) if "fill_value" in kw else np.isnan(a))
        bits = f"u{a.dtype.itemsize}"
        assert np.array_equal(y[missing].view(bits), a[missing].view(bits))
        valid = ~missing & np.isfinite(a)
        assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= r.error_bound
        assert np.array_equal(y[np.isinf(a)], a[np.isinf(a)])
        assert r.missing_count == int(missing.sum())
        assert r.metadata == kw.get("metadata")
        if r.missing_count:
            assert np.array_equal(r.read_mask(), missing)


def test_golden_streams_present():
    assert {"lossy_masked_f32", "lossy_plain_f64"} <= set(NAMES)


def test_golden_zarr_store_decodes():
    """A zarr v3 store written with the strata.lossy serializer (make_golden_zarr.py) opens
    from its metadata alone and decodes bit for bit."""
    zarr = pytest.importorskip("zarr")
    info = json.loads((GOLDEN / "zarr_v3_strata.json").read_text())
    a = np.load(GOLDEN / "zarr_v3_strata.source.npy", allow_pickle=False)
    z = zarr.open_array(str(GOLDEN / "zarr_v3_strata.zarr"), mode="r")
    assert z.metadata.to_dict()["codecs"][0] == info["codec"]
    y = z[:]
    assert hashlib.sha256(y.tobytes()).hexdigest() == info["decoded_sha256"]
    missing = np.isnan(a) | (a == np.float32(-9999.0)) | (a == np.float32(-1.0))
    assert np.array_equal(y[missing].view("u4"), a[missing].view("u4"))
    assert np.abs(y[~missing].astype(np.float64) - a[~missing]).max() <= info["abs_error"]
    assert np.array_equal(z[9:13, 14:18], y[9:13, 14:18], equal_nan=True)     # partial decode, 4 chunks
