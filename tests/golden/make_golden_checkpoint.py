"""Write the golden checkpoint streams (run once per checkpoint format change, from the repository root):

    .venv/bin/python tests/golden/make_golden_checkpoint.py

* ``ckpt_v2_full.ckpt``: a full checkpoint of a small state dict of NumPy arrays (float32 with
  special values, bfloat16 bits as uint16, int64, float64, an empty tensor) and plain values
  (nested dicts, a list, a tuple, an int key);
* ``ckpt_v2_delta.ckpt``: the next snapshot, stored as the XOR delta against the full one (its
  unchanged layouts as deltas, a new int32 tensor as a full segment);
* ``ckpt_v2.json``: for each file, the SHA-256 of every tensor's decoded bytes and of all of
  them in header order, their dtypes and shapes.

tests/test_checkpoint_golden.py checks that this version still decodes both, bit for bit. The
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

HERE = Path(__file__).resolve().parent
FULL, DELTA, INFO = "ckpt_v2_full.ckpt", "ckpt_v2_delta.ckpt", "ckpt_v2.json"
IDS = ("00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100")


def states() -> tuple[dict, dict]:
    """The two state dicts (the full snapshot's, then the delta's)."""
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
    first, second = states()
    full = io.group(*flatten(first, copy=True))
    full.id = IDS[0]
    delta = io.group(*flatten(second, copy=True))
    delta.id = IDS[1]
    blobs = {FULL: io.encode(full, workers=1), DELTA: io.encode(delta, full, FULL, workers=1)}
    info = {"format_version": blobs[FULL][4], "files": {}}
    for name, blob in blobs.items():
        (HERE / name).write_bytes(blob)
        info["files"][name] = digest(io.read(HERE / name))
        print(name, len(blob), "bytes")
    (HERE / INFO).write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
