"""Atomic writes (strata.atomic): the destination is always the old or the whole new file or
store, temporary names say whose they are, what killed writers leave is tidied by the next write,
and errors name the user's path (issue 35)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest

import strata
from strata import atomic
from strata.atomic import atomic_dir, atomic_path, atomic_write, clean_stale
from strata.errors import InvalidInputError


def hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def fake_temp(folder, name, pid, tag="strata-tmp", host=None, directory=False):
    path = folder / f".{name}.{tag}.{pid}.{host or atomic._HOST}.abc123"
    if directory:
        path.mkdir()
        (path / "chunk").write_bytes(b"x" * 100)
    else:
        path.write_bytes(b"x" * 100)
    return path


def test_temporary_names_carry_the_writer(tmp_path):
    seen = []
    with atomic_path(tmp_path / "out.npy") as tmp:
        seen.append(os.path.basename(tmp))
    with atomic_dir(tmp_path / "s.zarr") as tmp:
        seen.append(tmp.name)
    for name, target in zip(seen, ("out.npy", "s.zarr")):
        m = atomic._TEMP_NAME.fullmatch(name)
        assert m and m["name"] == target and int(m["pid"]) == os.getpid() and m["tag"] == "strata-tmp"
    assert hidden(tmp_path) == []
    long = "x" * 240 + ".strata"  # a name near the limit of 255 bytes still gets a temporary
    atomic_write(tmp_path / long, b"long")
    assert (tmp_path / long).read_bytes() == b"long" and hidden(tmp_path) == []


def test_next_write_removes_what_killed_writers_left(tmp_path):
    gone = dead_pid()
    stale_file = fake_temp(tmp_path, "a.strata", gone)
    stale_dir = fake_temp(tmp_path, "s.zarr", gone, directory=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        live_file = fake_temp(tmp_path, "b.strata", live.pid)            # a live writer's: kept
        reused = fake_temp(tmp_path, "c.strata", live.pid)              # its id reused since: removed
        old = time.time() - 3600
        os.utime(reused, (old, old))
        other_host = fake_temp(tmp_path, "d.strata", gone, host="0badc0de")  # another machine's: kept
        mine = fake_temp(tmp_path, "e.strata", os.getpid())             # this process's: kept
        before_me = fake_temp(tmp_path, "g.strata", os.getpid())        # made before it started: removed
        os.utime(before_me, (old, old))
        unrelated = tmp_path / ".f.strata.tmp"
        unrelated.write_bytes(b"not ours")
        atomic_write(tmp_path / "new.strata", b"new")
        assert not stale_file.exists() and not stale_dir.exists() and not reused.exists() and not before_me.exists()
        assert live_file.exists() and other_host.exists() and mine.exists() and unrelated.exists()
    finally:
        live.kill()
        live.wait()
    assert (tmp_path / "new.strata").read_bytes() == b"new"


def test_a_stale_temporary_that_cannot_be_removed_does_not_stop_the_write(tmp_path, monkeypatch):
    stale = fake_temp(tmp_path, "a.strata", dead_pid())

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(atomic, "_remove", refuse)
    atomic_write(tmp_path / "b.strata", b"b")
    assert (tmp_path / "b.strata").read_bytes() == b"b" and stale.exists()


def test_stranded_old_store_is_put_back(tmp_path):
    gone = dead_pid()
    aside = fake_temp(tmp_path, "s.zarr", gone, tag="strata-old", directory=True)
    assert clean_stale(tmp_path) == [tmp_path / "s.zarr"]
    assert (tmp_path / "s.zarr" / "chunk").read_bytes() == b"x" * 100 and not aside.exists()
    # the replacement had finished (a store is there): the one moved aside goes
    aside = fake_temp(tmp_path, "s.zarr", gone, tag="strata-old", directory=True)
    clean_stale(tmp_path)
    assert not aside.exists() and (tmp_path / "s.zarr" / "chunk").exists()


def write_store(path, tag: bytes, replace=True):
    with atomic_dir(path, replace=replace) as tmp:
        for i in range(3):
            (tmp / f"c{i}").write_bytes(tag * 1000)


def store_state(path) -> bytes | None:
    """The tag of the complete store at ``path``; None when nothing is there."""
    if not path.exists():
        return None
    parts = {p.name: p.read_bytes() for p in path.iterdir()}
    assert sorted(parts) == ["c0", "c1", "c2"], parts
    tags = {v[:1] for v in parts.values()}
    assert len(tags) == 1 and all(len(v) == 1000 for v in parts.values())
    return tags.pop()


def crash_at(step: int, fn, exchange: bool) -> bool:
    """Run ``fn`` in a forked child killed (``os._exit``, no clean-up runs) right after its
    ``step``-th rename or removal (0: before the first); True when it finished first."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            calls = [0]
            rename_with, rename, remove = atomic._rename_with, os.rename, atomic._remove

            def counted(f):
                def g(*a):
                    out = f(*a)
                    calls[0] += 1
                    if calls[0] == step:
                        os._exit(17)
                    return out
                return g

            def no_exchange(src, dst, flags):
                return False if flags == atomic._RENAME_EXCHANGE else rename_with(src, dst, flags)

            atomic._rename_with = counted(rename_with if exchange else no_exchange)
            os.rename = counted(rename)
            atomic._remove = counted(remove)
            if step == 0:  # killed once the new store is written, before it is put in place
                atomic._install_dir = lambda *a: os._exit(17)
            fn()
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 17), code
    return code == 0


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_store_replacement_killed_at_every_step(tmp_path, exchange):
    """``convert --force`` killed between its two renames left no store (issue 35): at every
    step the destination is the old or the new store, or the next write puts the old one back."""
    if exchange and atomic._renameat2_function() is None:
        pytest.skip("no renameat2 here")
    dest = tmp_path / "s.zarr"
    outcomes = []
    for step in range(8):
        write_store(dest, b"o")
        finished = crash_at(step, lambda: write_store(dest, b"n"), exchange)
        now = store_state(dest)
        if exchange:
            assert now in (b"o", b"n"), step  # at every instant
        atomic_write(tmp_path / "other", b"next run")  # any later write into the folder
        after = store_state(dest)
        assert after in (b"o", b"n") and (now is None or after == now), (step, now, after)
        assert hidden(tmp_path) == [], step
        outcomes.append((now, after))
        if finished:
            break
    assert finished and outcomes[-1] == (b"n", b"n")
    assert (None, b"o") in outcomes or exchange  # the two-rename path was caught between its renames
    assert outcomes[0] == (b"o", b"o")


def test_store_without_replace(tmp_path):
    dest = tmp_path / "s.zarr"
    write_store(dest, b"o")
    with pytest.raises(FileExistsError, match="s.zarr"):
        write_store(dest, b"n", replace=False)
    assert store_state(dest) == b"o" and hidden(tmp_path) == []


def test_file_without_replace_keeps_a_file_made_meanwhile(tmp_path):
    p = tmp_path / "o.bin"
    with pytest.raises(FileExistsError):
        with atomic_path(p, replace=False) as tmp:
            p.write_bytes(b"someone else's")
            with open(tmp, "wb") as f:
                f.write(b"mine")
    assert p.read_bytes() == b"someone else's" and hidden(tmp_path) == []


def test_errors_name_the_users_path(tmp_path):
    """A message for an unwritable output named the temporary file (issue 35)."""
    with pytest.raises(FileNotFoundError) as e:
        atomic_write(tmp_path / "missing_dir" / "m.strata", b"x")
    assert e.value.filename == str(tmp_path / "missing_dir" / "m.strata")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    out = tmp_path / "big.bin"
    out.write_bytes(b"old")
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))  # writes past 64 KiB fail: EFBIG
    try:
        with pytest.raises(OSError) as e:
            atomic_write(out, b"x" * (1 << 17))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert e.value.filename == str(out) and "strata-tmp" not in str(e.value) and "too large" in str(e.value)
    assert out.read_bytes() == b"old" and hidden(tmp_path) == []


@pytest.mark.timeout(30)
def test_readers_refuse_what_is_not_a_regular_file(tmp_path):
    """``strata info`` on a FIFO hung (issue 35)."""
    fifo = tmp_path / "pipe.strata"
    os.mkfifo(fifo)
    for source in (fifo, tmp_path):
        with pytest.raises(InvalidInputError, match="regular file"):
            strata.open(source)


REPLACER = r"""
import sys
from pathlib import Path
from strata.atomic import atomic_dir

dest, n = Path(sys.argv[1]), 0
while True:
    tag = b"ab"[n % 2:n % 2 + 1]
    with atomic_dir(dest, replace=True) as tmp:
        for i in range(3):
            (tmp / f"c{i}").write_bytes(tag * 1000)
    n += 1
    if n == 1:
        print("ready", flush=True)
"""


def test_store_replacement_killed_for_real(tmp_path):
    """A few real kill -9 of a process replacing a store in a loop (the campaign in
    benchmarks/kill_campaign.py does 24 of each writer): the store is always a whole one and
    the next write leaves nothing behind."""
    import random
    import signal

    dest = tmp_path / "s.zarr"
    rng = random.Random(35)
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", REPLACER, str(dest)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, 0.05))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert store_state(dest) in (b"a", b"b")
        atomic_write(tmp_path / "next", b"next run")
        assert store_state(dest) in (b"a", b"b") and hidden(tmp_path) == []
