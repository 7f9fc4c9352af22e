"""AsyncCheckpointer's second level (``flush_to``, standing for a parallel file system): every
file written is copied there, atomically and in order, by a thread of its own; the local file
is loadable as soon as it is written."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from strata import checkpoint as ck
from strata.checkpoint import background
from strata.errors import InvalidInputError


def states(n):
    rng = np.random.default_rng(5)
    w = rng.standard_normal(4096).astype(np.float32)
    out = []
    for step in range(n):
        w = w + np.float32(1e-3) * rng.standard_normal(4096).astype(np.float32)
        out.append({"w": w.copy(), "step": step})
    return out


def test_flushed_files_load_where_they_were_copied(tmp_path):
    local, remote = tmp_path / "local", tmp_path / "pfs"
    local.mkdir()
    remote.mkdir()
    saved = states(5)
    with ck.AsyncCheckpointer(full_every=3, workers=1, flush_to=remote) as saver:
        for i, st in enumerate(saved):
            saver.save(st, local / f"step{i}.strata")
        saver.save(saved[-1], local / "latest.strata")
    for i, st in enumerate(saved):  # deltas on their bases, in both folders
        for folder in (local, remote):
            back = ck.load(folder / f"step{i}.strata")
            assert np.array_equal(back["w"], st["w"]) and back["step"] == i
    assert ck.io.header(remote / "step1.strata")["base"] is not None  # (a delta there too)
    assert sorted(p.name for p in remote.iterdir()) == sorted(p.name for p in local.iterdir())


def test_local_file_is_usable_before_the_slow_level(tmp_path, monkeypatch):
    local, remote = tmp_path / "local", tmp_path / "pfs"
    local.mkdir()
    remote.mkdir()
    gate = threading.Event()
    copy = background.shutil.copyfile

    def slow(src, dst):
        gate.wait(10)
        return copy(src, dst)

    monkeypatch.setattr(background.shutil, "copyfile", slow)
    st = states(2)
    saver = ck.AsyncCheckpointer(workers=1, flush_to=remote)
    saver.save(st[0], local / "a.strata")
    saver.save(st[1], local / "b.strata")
    saver.wait(flushed=False)
    assert np.array_equal(ck.load(local / "b.strata")["w"], st[1]["w"])
    assert not [p for p in remote.iterdir() if not p.name.startswith(".")]  # (the slow level is still copying a)
    (local / "a.strata").unlink()  # removed before its copy: skipped, no error, no debris
    gate.set()
    saver.close()
    assert [p.name for p in remote.iterdir()] == ["b.strata"]


def test_flush_to_must_be_a_folder(tmp_path):
    with pytest.raises(InvalidInputError):
        ck.AsyncCheckpointer(flush_to=tmp_path / "missing")
