"""Golden streams: streams written by this format version (tests/golden, made by
tests/golden/make_golden.py) must keep decoding, bit for bit, in every later version."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import strata
import strata.errors

GOLDEN = Path(__file__).resolve().parent / "golden"
ALL_NAMES = sorted(p.name[:-len(".strata")] for p in GOLDEN.glob("*.strata"))
#: Field sets (strata.enhance.compress_fields) hold several lossy streams: decoded on their own.
FIELD_SETS = [n for n in ALL_NAMES if "fields" in json.loads((GOLDEN / f"{n}.json").read_text())]
#: Streams in precision layers (strata.lossy.layers): read at each layer's bound.
LAYERED = [n for n in ALL_NAMES if "layers" in json.loads((GOLDEN / f"{n}.json").read_text())]
NAMES = [n for n in ALL_NAMES if n not in FIELD_SETS and n not in LAYERED]


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
        # (twice the bound for a 2x enhancement; the bound itself otherwise)
        assert r.guaranteed_error == r.error_bound * (2 if info.get("enhancement", {}).get("mode") == "2x" else 1)
        assert np.abs(y[valid].astype(np.float64) - a[valid].astype(np.float64)).max() <= r.guaranteed_error
        assert np.array_equal(y[np.isinf(a)], a[np.isinf(a)])
        assert r.missing_count == int(missing.sum())
        assert r.metadata == kw.get("metadata")
        if r.missing_count:
            assert np.array_equal(r.read_mask(), missing)
        if "enhancement" in info:  # the network stored, the plain decode as it was
            e = r.enhancement
            assert {"mode": e.mode_name, "stored": e.stored, "width": e.width, "inputs": [f.name for f in e.inputs],
                    "fallback_count": e.fallback_count} == info["enhancement"]
            plain = r.read(enhance=False)
            assert hashlib.sha256(plain.tobytes()).hexdigest() == info["plain_sha256"]
            assert np.abs(plain[valid].astype(np.float64) - a[valid]).max() <= r.error_bound
            assert not np.array_equal(plain, y)
            region = (slice(1, 3), slice(2, 11), slice(-9, None))
            assert np.array_equal(r.read(region=region).view(bits), y[region].view(bits))
        else:
            assert r.enhancement is None
        if "coders" in info:  # (version 3 on) each level's coder, as written
            assert [r._level_tables(lv).coder for lv in range(len(r.levels))] == info["coders"]
        if "target" in info:  # the target section's fields, as recorded
            assert dataclasses.asdict(r.target) == info["target"]
        else:
            assert r.target is None


def test_golden_streams_present():
    assert {"lossy_masked_f32", "lossy_plain_f64", "lossy_enh2x_f32", "lossy_enh1x_f64", "lossy_target_f32",
            "lossy_lanes_f32", "lossy_v4_f32"} <= set(NAMES)
    # version 2 streams (serial coder only), version 3 ones with the lanes coder, version 4
    versions = {json.loads((GOLDEN / f"{n}.json").read_text())["format_version"] for n in NAMES}
    assert {2, 3, 4} <= versions
    assert 1 in json.loads((GOLDEN / "lossy_lanes_f32.json").read_text())["coders"]
    assert {"fields_cross_2x"} <= set(FIELD_SETS)
    assert {"layers_masked_f32"} <= set(LAYERED)


@pytest.mark.parametrize("name", LAYERED)
def test_golden_layered_stream_decodes(name):
    """A stream in precision layers (make_golden.py): a read at each layer's bound decodes bit for
    bit, within that bound, missing values and infinities exact; a region of each, too."""
    info = json.loads((GOLDEN / f"{name}.json").read_text())
    a = np.load(GOLDEN / f"{name}.source.npy", allow_pickle=False)
    missing = np.isnan(a) | (a == np.float32(info["kwargs"]["fill_value"]))
    valid = ~missing & np.isfinite(a)
    with strata.open(GOLDEN / f"{name}.strata") as r:
        assert [lay.error_bound for lay in r.layers] == info["layers"] and r.metadata == info["kwargs"]["metadata"]
        for e, sha in zip(info["layers"], info["decoded_sha256"]):
            y = r.read(error_bound=e)
            assert hashlib.sha256(y.tobytes()).hexdigest() == sha
            assert np.array_equal(y[~valid].view("u4"), a[~valid].view("u4"))
            assert np.abs(y[valid].astype(np.float64) - a[valid]).max() <= e
            region = (slice(2, 7), slice(3, 20), 11)
            assert np.array_equal(r.read(region=region, error_bound=e).view("u4"), y[region].view("u4"))


@pytest.mark.parametrize("name", FIELD_SETS)
def test_golden_field_set_decodes(name):
    """A field set with cross-field networks (make_golden.py): every field decodes bit for bit,
    enhanced and plain, within its bound; a region of every field too."""
    from strata.enhance import decompress_fields
    from strata.enhance.fields import open_fields

    info = json.loads((GOLDEN / f"{name}.json").read_text())
    src = np.load(GOLDEN / f"{name}.source.npy", allow_pickle=False)
    path = GOLDEN / f"{name}.strata"
    out, plain = decompress_fields(path), decompress_fields(path, enhance=False)
    assert list(out) == list(plain) == info["fields"]
    readers = open_fields(path)
    try:
        for k, n in enumerate(info["fields"]):
            a, r = src[k], readers[n]
            assert hashlib.sha256(out[n].tobytes()).hexdigest() == info["decoded_sha256"][n]
            assert hashlib.sha256(plain[n].tobytes()).hexdigest() == info["plain_sha256"][n]
            assert r.error_bound == info["error_bound"][n]
            e = r.enhancement
            assert {"mode": e.mode_name, "stored": e.stored, "width": e.width, "inputs": [f.name for f in e.inputs],
                    "fallback_count": e.fallback_count} == info["enhancement"][n]
            eb = r.guaranteed_error
            assert eb == r.error_bound * (2 if e.mode_name == "2x" else 1)
            assert np.abs(out[n].astype(np.float64) - a).max() <= eb
            assert np.abs(plain[n].astype(np.float64) - a).max() <= r.error_bound
    finally:
        for r in readers.values():
            r.close()
    region = (slice(1, 3), slice(4, 15), 7)
    part = decompress_fields(path, region=region)
    for n in info["fields"]:
        assert np.array_equal(part[n].view("u4"), out[n][region].view("u4"))
    with pytest.raises(strata.errors.FormatError, match="decompress_fields"):
        strata.decompress(path)


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
