"""Golden checkpoint streams: the files each checkpoint format version wrote (tests/golden/ckpt_vV_*,
made by tests/golden/make_golden_checkpoint.py) must keep decoding, bit for bit, in every later
version (or be refused with an error naming their version). NumPy only: no torch needed."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from strata import checkpoint as ck
from strata import varint
from strata.checkpoint import codec
from strata.container import FORMAT_VERSION, KIND_CHECKPOINT, Source, unpack_header
from strata.entropy import bytecoder
from strata.errors import FormatError

GOLDEN = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden_checkpoint", GOLDEN / "make_golden_checkpoint.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
VERSIONS = gen.versions()
CASES = [(v, name) for v in VERSIONS for name in gen.names(v)[:2]]


def info(version: int) -> dict:
    return json.loads((GOLDEN / gen.names(version)[2]).read_text())


def same(a, b) -> bool:
    """Equal structure, types, dtypes, shapes and bits (NumPy arrays and plain values)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.ascontiguousarray(a).tobytes() == b.tobytes())
    return type(a) is type(b) and a == b


def test_golden_checkpoints_present():
    assert VERSIONS[0] == 2 and VERSIONS[-1] == FORMAT_VERSION  # a new version adds files, keeping these
    for v in VERSIONS:
        expect = info(v)
        assert expect["format_version"] == v
        assert set(expect["files"]) == set(gen.names(v)[:2])
        for name in expect["files"]:
            data = (GOLDEN / name).read_bytes()
            assert data[4] == v and 1000 < len(data) < 32000


def _records(path: Path):
    """The segment records of a checkpoint file, with the file's header."""
    src = Source(path.read_bytes())
    raw, off = unpack_header(src, KIND_CHECKPOINT)
    h = json.loads(bytes(raw))
    assert h["safetensors"] is None
    for m in h["segments"]:
        yield m, bytes(src.read(off, m["length"]))
        off += m["length"]


def _plane_models(rec: bytes) -> set[int]:
    """The byte-plane models of a segment record's chunks (split records: their parts')."""
    head = codec.Record.from_bytes(rec)
    b = np.frombuffer(rec, np.uint8)
    models = set()
    for c in range(len(head.checks)):
        pos = head.offsets[c]
        for _ in range(head.itemsize):
            m, pos = varint.get(b, pos, b.size)
            models.add(int(b[pos]))
            if b[pos] == bytecoder.SPLIT:  # its parts' models
                q, lens = pos + 2, []
                for _ in range(bytecoder.SPLIT_PARTS - 1):
                    ln, q = varint.get(b, q, b.size)
                    lens.append(ln)
                for ln in [*lens, None]:
                    models.add(int(b[q]))
                    q += ln or 0
            pos += m
    return models


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_checkpoint_checksums_and_models_follow_the_version(version):
    """Version 2 records: zlib CRC-32s, four rANS states; version 3: CRC-32C (the header's
    ``crc`` is the one the record's head carries), eight states on long order-0 planes;
    version 4: the same checks, 64 states on long order-0 planes."""
    models = set()
    for name in gen.names(version)[:2]:
        for m, rec in _records(GOLDEN / name):
            assert codec.info(rec)["crc32c"] == (version >= 3)
            assert m["crc"] == (codec.crc32(rec) if version < 3 else codec.head_checksum(rec))
            models |= _plane_models(rec)
    assert (bytecoder.ORDER0_8 in models) == (version == 3)
    assert (bytecoder.ORDER0_64 in models) == (version >= 4)


@pytest.mark.parametrize("version, name", CASES)
def test_golden_checkpoint_decodes_bit_for_bit(version, name):
    expect = info(version)["files"][name]
    snap = ck.io.read(GOLDEN / name, workers=1)  # the raw-bytes path
    assert gen.digest(snap) == expect
    assert [t.name for t in snap.tensors] == list(expect["tensors"])
    state = ck.load(GOLDEN / name, workers=1)
    assert same(state, gen.states(version)[name == gen.names(version)[1]])


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_delta_needs_its_base(tmp_path, version):
    full, delta, _ = gen.names(version)
    h = ck.io.header(GOLDEN / delta)
    assert h["base"] == {"file": full, "id": gen.IDS[0]}
    assert [m["delta"] for m in h["segments"]] == [True] * (4 + (version >= 3) + (version >= 4)) + [False]
    shutil.copy(GOLDEN / delta, tmp_path / delta)
    with pytest.raises(FormatError, match="missing"):
        ck.load(tmp_path / delta)
    shutil.copy(GOLDEN / full, tmp_path / full)
    back = ck.io.read(tmp_path / delta)
    assert hashlib.sha256(b"".join(t.data.tobytes() for t in back.tensors)).hexdigest() == \
        info(version)["files"][delta]["sha256"]
