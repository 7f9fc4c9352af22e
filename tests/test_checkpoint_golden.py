"""Golden checkpoint streams: files written by this checkpoint format version (tests/golden/ckpt_*,
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
from strata.container import FORMAT_VERSION
from strata.errors import FormatError

GOLDEN = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden_checkpoint", GOLDEN / "make_golden_checkpoint.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
INFO = json.loads((GOLDEN / gen.INFO).read_text())


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
    assert set(INFO["files"]) == {gen.FULL, gen.DELTA}
    assert INFO["format_version"] == FORMAT_VERSION  # a new version adds files, keeping these
    for name in INFO["files"]:
        assert 1000 < (GOLDEN / name).stat().st_size < 8000


@pytest.mark.parametrize("name", [gen.FULL, gen.DELTA])
def test_golden_checkpoint_decodes_bit_for_bit(name):
    expect = INFO["files"][name]
    snap = ck.io.read(GOLDEN / name, workers=1)  # the raw-bytes path
    assert gen.digest(snap) == expect
    assert [t.name for t in snap.tensors] == list(expect["tensors"])
    state = ck.load(GOLDEN / name, workers=1)
    assert same(state, gen.states()[name == gen.DELTA])


def test_golden_delta_needs_its_base(tmp_path):
    h = ck.io.header(GOLDEN / gen.DELTA)
    assert h["base"] == {"file": gen.FULL, "id": gen.IDS[0]}
    assert [m["delta"] for m in h["segments"]] == [True, True, True, True, False]
    shutil.copy(GOLDEN / gen.DELTA, tmp_path / gen.DELTA)
    with pytest.raises(FormatError, match="missing"):
        ck.load(tmp_path / gen.DELTA)
    shutil.copy(GOLDEN / gen.FULL, tmp_path / gen.FULL)
    back = ck.io.read(tmp_path / gen.DELTA)
    assert hashlib.sha256(b"".join(t.data.tobytes() for t in back.tensors)).hexdigest() == \
        INFO["files"][gen.DELTA]["sha256"]
