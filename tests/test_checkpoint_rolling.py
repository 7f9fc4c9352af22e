"""Checkpoint names that are reused, and bases that change: no save may destroy a checkpoint,
and no delta may decode against a base that is not the one it was made from.

A rolling name (``latest.strata``) saved again, names taken in turn, ``save(base=path)`` and
``strata ckpt compress -o m.strata --base m.strata``: every checkpoint that exists afterwards
loads to the tensors last saved under its name. NumPy only, small arrays."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from strata import checkpoint as ck
from strata.checkpoint import io
from strata.container import KIND_CHECKPOINT, Source, pack, unpack_header
from strata.errors import FormatError, InvalidInputError


def state(i: int) -> dict:
    """The ``i``-th state of a training run: one weight changes a little every step."""
    w = np.linspace(0, 1, 300, dtype=np.float32)
    w[:: 7] += np.float32(i) * 1e-3
    return {"w": w, "step": np.array([i], np.int64)}


def holds(path, i: int) -> bool:
    """Whether the checkpoint ``path`` loads to ``state(i)`` exactly."""
    back = ck.load(path, workers=1)
    expect = state(i)
    return back.keys() == expect.keys() and all(np.array_equal(back[k], expect[k]) for k in expect)


def check_all(folder: Path, last: dict[str, int]) -> None:
    """Every checkpoint in ``folder`` loads to the state last saved under its name."""
    assert {p.name for p in folder.glob("*.strata")} == set(last)
    for name, i in last.items():
        assert holds(folder / name, i), name


@pytest.mark.parametrize("names", [["latest.strata"], ["a.strata", "b.strata"], ["a.strata", "b.strata", "c.strata"]])
def test_async_checkpointer_reused_names(tmp_path, names):
    """Saving again under one name, or under names taken in turn (full_every=100: every save
    could be a delta): after every save, every file loads to the state last saved there."""
    last = {}
    with ck.AsyncCheckpointer(full_every=100, workers=1) as saver:
        for i in range(3 * len(names) + 1):
            name = names[i % len(names)]
            saver.save(state(i), tmp_path / name)
            saver.wait()
            last[name] = i
            check_all(tmp_path, last)
    # a new name after the reused ones is still a delta of the previous save
    with ck.AsyncCheckpointer(full_every=100, workers=1) as saver:
        saver.save(state(20), tmp_path / "s20.strata")
        saver.save(state(21), tmp_path / "s21.strata")
    assert io.header(tmp_path / "s21.strata")["base"]["file"] == "s20.strata"
    assert holds(tmp_path / "s21.strata", 21)


def test_save_with_the_destination_as_base_writes_a_full_snapshot(tmp_path):
    p = tmp_path / "latest.strata"
    ck.save(state(0), p)
    ck.save(state(1), p, base=p)
    assert holds(p, 1) and io.header(p)["base"] is None
    os.symlink("latest.strata", tmp_path / "link.strata")  # the base through a link to the destination
    ck.save(state(2), p, base=tmp_path / "link.strata")
    assert holds(p, 2) and holds(tmp_path / "link.strata", 2) and io.header(p)["base"] is None
    ck.save(state(3), tmp_path / "link.strata", base=p)  # the destination is a link to the base:
    assert io.header(tmp_path / "link.strata")["base"]["file"] == "latest.strata"  # the link is replaced
    assert holds(tmp_path / "link.strata", 3) and holds(p, 2) and not (tmp_path / "link.strata").is_symlink()


def test_save_over_a_file_the_base_needs_is_refused(tmp_path):
    a, b = tmp_path / "a.strata", tmp_path / "b.strata"
    ck.save(state(0), a)
    ck.save(state(1), b, base=a)
    with pytest.raises(InvalidInputError, match="chain of bases of b.strata"):
        ck.save(state(2), a, base=b)
    assert holds(a, 0) and holds(b, 1)


def test_safetensors_compressed_onto_its_base(tmp_path):
    """``compress_safetensors(X, m, base=m)`` writes a full snapshot; the CLI
    (``ckpt compress X -o m --base m``) either does that or refuses: m always holds a model."""
    pytest.importorskip("safetensors")
    from click.testing import CliRunner
    from safetensors.numpy import save_file

    from strata.cli import main

    models = []
    for i in range(3):
        models.append(tmp_path / f"m{i}.safetensors")
        save_file(state(i), models[-1])
    m, back = tmp_path / "m.strata", tmp_path / "back.safetensors"
    ck.compress_safetensors(models[0], m)
    ck.compress_safetensors(models[1], m, base=m)
    ck.decompress_safetensors(m, back)
    assert back.read_bytes() == models[1].read_bytes() and io.header(m)["base"] is None
    r = CliRunner().invoke(main, ["ckpt", "compress", str(models[2]), "-o", str(m), "--base", str(m)])
    back.unlink()
    ck.decompress_safetensors(m, back)
    assert back.read_bytes() == models[2 if r.exit_code == 0 else 1].read_bytes(), r.output


def test_delta_refuses_a_base_with_its_id_and_other_content(tmp_path):
    """The base is replaced by another checkpoint of the same layout that carries its id: the
    delta records the base's header checksum and refuses it (it decoded to wrong tensors)."""
    a, b = tmp_path / "a.strata", tmp_path / "b.strata"
    ck.save(state(0), a)
    ck.save(state(1), b, base=a)
    ident = io.header(a)["id"]
    ck.save(state(5), a)
    data = a.read_bytes()
    raw, off = unpack_header(Source(data), KIND_CHECKPOINT)
    h = json.loads(bytes(raw))
    h["id"] = ident  # the id of the base b was made from, other tensors
    a.write_bytes(pack(KIND_CHECKPOINT, json.dumps(h).encode(), [data[off:]]))
    with pytest.raises(FormatError, match="has the id of the snapshot b.strata was made from, but not its content"):
        ck.load(b)


def test_delta_records_the_file_a_link_leads_to(tmp_path):
    """``base=latest.strata``, a link to ``s1.strata``: the delta names ``s1.strata``, so moving
    the link to the new file keeps both loading (the delta named the link, which then led to
    itself)."""
    ck.save(state(1), tmp_path / "s1.strata")
    os.symlink("s1.strata", tmp_path / "latest.strata")
    ck.save(state(2), tmp_path / "s2.strata", base=tmp_path / "latest.strata")
    os.unlink(tmp_path / "latest.strata")
    os.symlink("s2.strata", tmp_path / "latest.strata")
    assert holds(tmp_path / "s2.strata", 2) and holds(tmp_path / "latest.strata", 2)
    assert io.header(tmp_path / "s2.strata")["base"]["file"] == "s1.strata"


def test_async_checkpointer_base_replaced_underneath(tmp_path):
    """The previous save's file is replaced by someone else before the next save: that save is
    written as a full snapshot, not as a delta of what the checkpointer remembers."""
    with ck.AsyncCheckpointer(full_every=100, workers=1) as saver:
        saver.save(state(0), tmp_path / "s0.strata")
        saver.wait()
        ck.save(state(7), tmp_path / "s0.strata")  # (another writer)
        saver.save(state(1), tmp_path / "s1.strata")
        saver.save(state(2), tmp_path / "s2.strata")
    assert holds(tmp_path / "s0.strata", 7) and holds(tmp_path / "s1.strata", 1) and holds(tmp_path / "s2.strata", 2)
    assert io.header(tmp_path / "s1.strata")["base"] is None
    assert io.header(tmp_path / "s2.strata")["base"]["file"] == "s1.strata"


def test_safetensors_output_never_replaces_its_input_or_a_base(tmp_path):
    """Rebuilding the safetensors file over the checkpoint (or over the base it needs) replaced
    it with the safetensors bytes, leaving the deltas on it unreadable; compressing over the
    safetensors input replaced the input."""
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    for i in range(2):
        save_file(state(i), tmp_path / f"m{i}.safetensors")
    a, b = tmp_path / "a.strata", tmp_path / "b.strata"
    ck.compress_safetensors(tmp_path / "m0.safetensors", a)
    ck.compress_safetensors(tmp_path / "m1.safetensors", b, base=a)
    for src, dst in [(b, b), (b, a), (a, a)]:
        with pytest.raises(InvalidInputError, match="write elsewhere"):
            ck.decompress_safetensors(src, dst)
    with pytest.raises(InvalidInputError, match="write elsewhere"):
        ck.compress_safetensors(tmp_path / "m1.safetensors", tmp_path / "m1.safetensors")
    ck.decompress_safetensors(b, tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == (tmp_path / "m1.safetensors").read_bytes()
    assert io.header(a)["safetensors"] and io.header(b)["base"]["file"] == "a.strata"


def test_writing_into_a_missing_folder_is_an_os_error_and_leaves_nothing(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    save_file(state(0), tmp_path / "m.safetensors")
    with pytest.raises(FileNotFoundError):
        ck.compress_safetensors(tmp_path / "m.safetensors", tmp_path / "missing" / "m.strata")
    with pytest.raises(FileNotFoundError):
        ck.save(state(0), tmp_path / "missing" / "s.strata")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


@pytest.mark.parametrize("workers", [1, 2])
def test_pending_saves_are_written_when_the_program_ends(tmp_path, workers):
    """A program that ends right after ``save`` (no ``wait``/``close``): its writer is a daemon
    thread, which the interpreter stopped with the saves still queued -- nothing was written
    and nothing said so. The saves left for the ``atexit`` handler then found the coding
    threads' pool shut down (more than one worker: "cannot schedule new futures after
    shutdown"), and were lost too (states of two chunks or more). A fresh process is the point of
    this test."""
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from strata import checkpoint as ck\n"
            f"saver = ck.AsyncCheckpointer(workers={workers})\n"
            "for i in range(3):\n"
            "    saver.save({'w': np.full(300_000, float(i), np.float32)}, f'{sys.argv[1]}/s{i}.strata')\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
    for i in range(3):
        assert np.array_equal(ck.load(tmp_path / f"s{i}.strata")["w"], np.full(300_000, float(i), np.float32))
