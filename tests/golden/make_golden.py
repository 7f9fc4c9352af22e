"""Write the golden streams of the test suite (run once per format change, from the repository root):

    .venv/bin/python tests/golden/make_golden.py [NAME ...]

Each stream is kept with its source array and the SHA-256 of its decoded bytes; tests/test_golden.py
checks that this version still decodes every one of them, bit for bit, within the bound recorded.
Give names to write only those streams (the others stay as written by earlier versions).

Enhanced streams (``strata.enhance``: a 2x stream, a 1x stream with fallback points, a field set
with cross-field networks) store their network whatever it gains (the decoder is what they
test; the training itself is not reproducible across machines, the decoding is), and record
the plain decode's hash too. A field set's source is its fields stacked along a new first axis.

A stream with a target section (``strata.lossy.target``) gets it from ``kwargs["target"]``
(metric, target, compressions; the achieved value is the decode's PSNR) through
``strata.lossy.codec.with_target``; its info records the section's fields.

A stream in precision layers (``strata.lossy.layers``, container kind 4) records each layer's
bound and the SHA-256 of a read at each of them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import strata
from strata import metrics

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from synthetic import waves  # noqa: E402


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
    enh2 = waves((6, 24, 32), 11, np.float32)
    enh2[1:3, 4:10, 5:13] = np.nan                                 # missing values and infinities
    enh2[4, 0, 0], enh2[5, 23, 31] = np.inf, -np.inf
    opts = {"steps": 30, "batch_points": 2000, "seed": 0, "progress": False}
    lanes = (waves((10, 36, 40), 16, np.float32)
             + np.random.default_rng(16).standard_normal((10, 36, 40)).astype(np.float32))
    lanes[3:5, 10:20, 7:33] = np.nan
    return {
        "lossy_masked_f32": (masked, dict(rel_error=1e-3, fill_value=1e20, metadata=meta)),
        "lossy_plain_f64": (plain, dict(abs_error=1e-4)),
        "lossy_enh2x_f32": (enh2, dict(rel_error=1e-2, enhance="2x", enhance_options=opts)),
        "lossy_enh1x_f64": (waves((4, 20, 24), 12, np.float64), dict(abs_error=2e-2, enhance="1x",
                                                                    enhance_options=opts)),
        "lossy_target_f32": (waves((5, 18, 22), 15, np.float32),
                             dict(rel_error=1e-3, target={"metric": "psnr", "target": 60.0, "compressions": 2})),
        # version 3: a finest level big enough for the lanes coder, with missing values in its rows
        "lossy_lanes_f32": (lanes, dict(abs_error=1e-3)),
        # version 4 (lossy streams as in version 3 but for the version byte): the same field, 1e-2
        "lossy_v4_f32": (lanes, dict(abs_error=1e-2)),
    }


def layered() -> dict:
    """``{name: (array, compress kwargs)}`` of streams in precision layers."""
    a = waves((8, 22, 26), 17, np.float32, noise=0.05)
    a[1:3, 4:12, 5:9] = np.nan
    a[5, 5:8, 20] = np.float32(-9999.0)
    a[6, 0, 0] = np.inf
    return {"layers_masked_f32": (a, dict(rel_error=1e-5, fill_value=-9999.0, progressive="precision",
                                          metadata={"units": "K"}))}


def field_sets() -> dict:
    """``{name: ({field: array}, compress_fields kwargs)}``."""
    u = waves((4, 20, 24), 13, np.float32)
    v = (0.5 * u + 0.5 * waves((4, 20, 24), 14, np.float32)).astype(np.float32)
    opts = {"steps": 30, "batch_points": 2000, "seed": 0, "progress": False}
    return {"fields_cross_2x": ({"u": u, "v": v}, dict(rel_error={"u": 2e-3, "v": 4e-3}, enhance="2x",
                                                        cross_field=True, options=opts))}


def _sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _enhancement(r) -> dict:
    e = r.enhancement
    return {"mode": e.mode_name, "stored": e.stored, "width": e.width, "inputs": [f.name for f in e.inputs],
            "fallback_count": e.fallback_count}


def _always_stored():
    """Store the network whether or not it pays (restored by the caller)."""
    from strata.enhance import codec

    saved = codec._plain_bytes_at
    codec._plain_bytes_at = lambda *args, **kwargs: 1 << 40
    return lambda: setattr(codec, "_plain_bytes_at", saved)


def main(names=None) -> None:
    from strata.enhance import EnhanceOptions, compress_fields, decompress_fields
    from strata.enhance.fields import open_fields

    for name, (a, kwargs) in sources().items():
        if names and name not in names:
            continue
        kw = dict(kwargs)
        if "enhance_options" in kw:
            kw["enhance_options"] = EnhanceOptions(**kw["enhance_options"])
        target = kw.pop("target", None)
        restore = _always_stored() if "enhance" in kw else (lambda: None)
        try:
            blob = strata.compress(a, **kw)
        finally:
            restore()
        y = strata.decompress(blob)
        if target is not None:
            from strata.lossy.codec import with_target
            from strata.lossy.target import TargetRecord

            record = TargetRecord(achieved=metrics.psnr(a, y), **target)
            blob = with_target(blob, record)
            assert np.array_equal(strata.decompress(blob), y), name
        np.save(HERE / f"{name}.source.npy", a, allow_pickle=False)
        (HERE / f"{name}.strata").write_bytes(blob)
        info = {"decoded_sha256": _sha(y), "kwargs": kwargs, "format_version": blob[4]}
        if blob[4] >= 3:  # the coder of each level (version 3 on)
            with strata.open(blob) as r:
                info["coders"] = [r._level_tables(lv).coder for lv in range(len(r.levels))]
        if "enhance" in kw:
            with strata.open(blob) as r:
                info["plain_sha256"] = _sha(r.read(enhance=False))
                info["enhancement"] = _enhancement(r)
            assert info["enhancement"]["stored"], name
            assert info["enhancement"]["mode"] == "2x" or info["enhancement"]["fallback_count"] > 0, name
        if target is not None:
            with strata.open(blob) as r:
                info["target"] = dataclasses.asdict(r.target)
            assert info["target"] == dataclasses.asdict(record), name
        (HERE / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
        print(name, len(blob), "bytes")
    for name, (a, kwargs) in layered().items():
        if names and name not in names:
            continue
        blob = strata.compress(a, **kwargs)
        with strata.open(blob) as r:
            bounds = [lay.error_bound for lay in r.layers]
            info = {"kwargs": kwargs, "format_version": blob[4], "layers": bounds,
                    "decoded_sha256": [_sha(r.read(error_bound=e)) for e in bounds]}
        np.save(HERE / f"{name}.source.npy", a, allow_pickle=False)
        (HERE / f"{name}.strata").write_bytes(blob)
        (HERE / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
        print(name, len(blob), "bytes")
    for name, (fields, kwargs) in field_sets().items():
        if names and name not in names:
            continue
        restore = _always_stored()
        try:
            blob = compress_fields(fields, **{**kwargs, "options": EnhanceOptions(**kwargs["options"])})
        finally:
            restore()
        out, plain = decompress_fields(blob), decompress_fields(blob, enhance=False)
        readers = open_fields(blob)
        info = {"fields": list(fields), "kwargs": kwargs, "format_version": blob[4],
                "decoded_sha256": {n: _sha(out[n]) for n in fields},
                "plain_sha256": {n: _sha(plain[n]) for n in fields},
                "error_bound": {n: readers[n].error_bound for n in fields},
                "enhancement": {n: _enhancement(readers[n]) for n in fields}}
        for r in readers.values():
            r.close()
        assert all(e["stored"] for e in info["enhancement"].values()), name
        np.save(HERE / f"{name}.source.npy", np.stack([fields[n] for n in fields]), allow_pickle=False)
        (HERE / f"{name}.strata").write_bytes(blob)
        (HERE / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
        print(name, len(blob), "bytes")


if __name__ == "__main__":
    main(set(sys.argv[1:]) or None)
