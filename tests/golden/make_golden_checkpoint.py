"""Write the golden checkpoint streams of the current format version ``V`` (run once per
checkpoint format change, from the repository root; the files of earlier versions stay):

    .venv/bin/python tests/golden/make_golden_checkpoint.py

* ``ckpt_vV_full.ckpt``: a full checkpoint of a small state dict of NumPy arrays (float32 with
  special values, bfloat16 bits as uint16, int64, float64, an empty tensor; from version 3 a
  64 KiB uint8 mask, whose plane is long enough for eight rANS states; from version 4 64 Ki
  int16 levels, whose low-byte plane takes 64 states) and plain values
  (nested dicts, a list, a tuple, an int key);
* ``ckpt_vV_delta.ckpt``: the next snapshot, stored as the XOR delta against the full one (its
  unchanged layouts as deltas, a new int32 tensor as a full segment);
* ``ckpt_vV.json``: the format version, and for each file the SHA-256 of every tensor's decoded
  bytes and of all of them in header order, their dtypes and shapes.

tests/test_checkpoint_golden.py checks that every version's files still decode, bit for bit. The
values are made with exact integer arithmetic (no random generator, no transcendental
functions), so :func:`states` gives the same bits with any NumPy; the snapshot ids are fixed,
so the files are reproducible. (The files do not end in ``.strata``: tests/test_golden.py reads
every ``*.strata`` file here as a lossy stream.)
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from strata.checkpoint import io
from strata.checkpoint.state import flatten
from strata.container import FORMAT_VERSION

HERE = Path(__file__).resolve().parent
IDS = ("00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100")


def names(version: int) -> tuple[str, str, str]:
    """The full file, the delta and the JSON of a format version."""
    return f"ckpt_v{version}_full.ckpt", f"ckpt_v{version}_delta.ckpt", f"ckpt_v{version}.json"


def versions() -> list[int]:
    """The format versions that have golden files here."""
    return sorted(int(p.name[6:-5]) for p in HERE.glob("ckpt_v*.json"))


def states(version: int = FORMAT_VERSION) -> tuple[dict, dict]:
    """The two state dicts of a version's files (the full snapshot's, then the delta's)."""
    i = np.arange(256, dtype=np.int64)
    w = (((i * 2654435761) % 65521 - 32760).astype(np.float32) / np.float32(4096)).reshape(16, 16)
    bits = w.view(np.uint32)
    bits[0, :5] = [0x80000000, 0x7F800000, 0xFF800000, 0x7FC12345, 0x00000001]  # -0, +-inf, NaN payload, subnormal
    first = {
        "model": {"layer.weight": w, "layer.bias": w[3].copy(), "emb_bf16": (bits >> 16).astype(np.uint16),
                  "empty": np.zeros((0, 3), np.float32)},
        "optim": {"step": 7, "exp_avg": (i[:48].astype(np.float64) / 8 - 3).reshape(6, 8),
                  "ids": i * i - 7 * i - (1 << 40)},
        "meta": ["strata", 1.5, None, True],
        "pair": (1, "x"),
        3: "int key",
    }
    w2 = w.copy()
    w2[5:9, ::3] += np.float32(1 / 64)
    second = {
        "model": {"layer.weight": w2, "layer.bias": w2[3].copy(),
                  "emb_bf16": (w2.view(np.uint32) >> 16).astype(np.uint16), "empty": np.zeros((0, 3), np.float32)},
        "optim": {"step": 8, "exp_avg": first["optim"]["exp_avg"] * 0.5,
                  "ids": first["optim"]["ids"] + (i % 5 == 0)},
        "meta": ["strata", 1.5, None, True],
        "pair": (1, "x"),
        3: "int key",
        "counts": np.arange(-6, 6, dtype=np.int32),
    }
    if version >= 3:  # 64 KiB of mostly zeros: a plane for eight rANS states, coded to ~2 KB
        j = np.arange(1 << 16, dtype=np.int64)
        mask = (17 * (((j * 2654435761) % 97 == 0) + 2 * ((j * 40503) % 89 == 0))).astype(np.uint8)
        first["model"]["mask"] = mask
        second["model"]["mask"] = mask.copy()
    if version >= 4:  # int16 whose 64 KiB low-byte plane is skewed (~3 bits a byte, uncorrelated): 64 states
        h = (np.arange(1 << 16, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)
        h ^= h >> np.uint64(15)  # (a mixed hash: consecutive values uncorrelated, as PREV would use)
        h = (h * np.uint64(2246822519)) % np.uint64(1 << 32)
        h ^= h >> np.uint64(13)
        levels = (100 + (h % np.uint64(7)) * (h % np.uint64(3))).astype(np.int16)  # (a segment of its own)
        first["model"]["levels"] = levels
        second["model"]["levels"] = levels.copy()
    return first, second


def digest(snap) -> dict:
    """The SHA-256 of each tensor's bytes and of all of them, with dtypes and shapes."""
    total = hashlib.sha256()
    tensors = {}
    for t in snap.tensors:
        b = np.ascontiguousarray(t.data).tobytes()
        total.update(b)
        tensors[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "sha256": hashlib.sha256(b).hexdigest()}
    return {"sha256": total.hexdigest(), "tensors": tensors}


def main() -> None:
    full_name, delta_name, info_name = names(FORMAT_VERSION)
    first, second = states()
    full = io.group(*flatten(first, copy=True))
    full.id = IDS[0]
    delta = io.group(*flatten(second, copy=True))
    delta.id = IDS[1]
    blobs = {full_name: io.encode(full, workers=1), delta_name: io.encode(delta, full, full_name, workers=1)}
    info = {"format_version": blobs[full_name][4], "files": {}}
    for name, blob in blobs.items():
        (HERE / name).write_bytes(blob)
        info["files"][name] = digest(io.read(HERE / name))
        print(name, len(blob), "bytes")
    (HERE / info_name).write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
