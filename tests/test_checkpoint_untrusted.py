"""Checkpoint files as untrusted input: crafted headers, bases, records and chains each raise
their documented ``strata.errors`` type (never IndexError, TypeError, KeyError, MemoryError or
RecursionError) before anything large is allocated; long chains load without recursion."""
from __future__ import annotations

import json
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata import checkpoint as ck
from strata.checkpoint import codec, io, state
from strata.container import KIND_CHECKPOINT, Source, Writer, crc32, pack, unpack_header
from strata.errors import (
    CorruptStreamError,
    FormatError,
    InvalidInputError,
    ResourceLimitError,
    StrataError,
    TruncatedStreamError,
    UnsupportedDtypeError,
)

STATE = {"model": {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "b": np.ones(3, np.float32),
                   "ids": np.arange(5, dtype=np.int64)},
         "step": 3, "pair": (1, "x")}


def parts(path) -> tuple[dict, bytes]:
    """A checkpoint file's JSON header and its sections."""
    data = Path(path).read_bytes()
    raw, off = unpack_header(Source(data), KIND_CHECKPOINT)
    return json.loads(bytes(raw)), data[off:]


def repack(path, h, body, out=None) -> Path:
    """Write header ``h`` and sections ``body`` as a checkpoint (valid header checksum)."""
    out = Path(out or path)
    out.write_bytes(pack(KIND_CHECKPOINT, json.dumps(h).encode(), [body]))
    return out


@pytest.fixture
def full(tmp_path) -> Path:
    path = tmp_path / "full.strata"
    ck.save(STATE, path)
    return path


@pytest.fixture
def pair(tmp_path, full) -> tuple[Path, Path]:
    """A full checkpoint and a delta against it, in ``tmp_path``."""
    changed = {**STATE, "model": {**STATE["model"], "w": STATE["model"]["w"] + 1}}
    delta = tmp_path / "delta.strata"
    ck.save(changed, delta, base=full)
    return full, delta


@pytest.fixture
def opened(monkeypatch):
    """The paths :mod:`strata.checkpoint.io` opens, and the most files it held open at once."""
    log = {"paths": [], "open": 0, "most": 0}
    real = io.Source

    class Tracking(real):
        def __init__(self, source):
            super().__init__(source)
            log["paths"].append(os.path.realpath(source))
            log["open"] += 1
            log["most"] = max(log["most"], log["open"])

        def close(self):
            if self._own is not None:
                log["open"] -= 1
            super().close()

    monkeypatch.setattr(io, "Source", Tracking)
    return log


# ---------------------------------------------------------------------- the base's name
@pytest.mark.parametrize("name", ["ABS", "../outside.strata", "sub/full.strata", "..", ".", "", "a\\b.strata",
                                  "./full.strata", "x\0.strata", "\ud800.strata", "x" * 300 + ".strata"])
def test_base_must_be_a_bare_name_in_the_same_folder(tmp_path, pair, opened, name):
    full, delta = pair
    outside = tmp_path.parent / f"{tmp_path.name}_outside.strata"
    outside.write_bytes(full.read_bytes())  # same snapshot id: it would decode if it were followed
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "full.strata").write_bytes(full.read_bytes())
    h, body = parts(delta)
    h["base"]["file"] = str(outside) if name == "ABS" else name
    repack(delta, h, body)
    with pytest.raises(FormatError, match="not a file name in the same folder"):
        ck.load(delta)
    assert opened["paths"] == [os.path.realpath(delta)]  # nothing else was opened


def test_base_symlink_may_not_leave_the_folder(tmp_path, pair, opened):
    full, delta = pair
    elsewhere = tmp_path.parent / f"{tmp_path.name}_elsewhere"
    elsewhere.mkdir()
    os.replace(full, elsewhere / "full.strata")
    os.symlink(elsewhere / "full.strata", full)  # the base's name, now a link out of the folder
    with pytest.raises(FormatError, match="link out of its folder"):
        ck.load(delta)
    assert opened["paths"] == [os.path.realpath(delta)]
    # a link that stays in the folder is followed
    os.unlink(full)
    os.replace(elsewhere / "full.strata", tmp_path / "real.strata")
    os.symlink("real.strata", full)
    assert np.array_equal(ck.load(delta)["model"]["w"], STATE["model"]["w"] + 1)


def test_saving_against_a_base_elsewhere_is_refused(tmp_path, full):
    (tmp_path / "sub").mkdir()
    with pytest.raises(InvalidInputError, match="same folder"):
        ck.save(STATE, tmp_path / "sub" / "d.strata", base=full)
    os.symlink(full, tmp_path / "sub" / "link.strata")
    with pytest.raises(InvalidInputError, match="same folder"):
        ck.save(STATE, tmp_path / "sub" / "d.strata", base=tmp_path / "sub" / "link.strata")


# ---------------------------------------------------------------------- header schema
def _tensor(i, field, value):
    def mutate(h):
        h["tensors"][i][field] = value
    return mutate


def _set(path, value):
    def mutate(h):
        node = h
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return mutate


MALFORMED = {
    # tensor records: wrong types
    "name not a string": _tensor(0, 0, 7),
    "kind unknown": _tensor(0, 1, "pickle"),
    "kind a list": _tensor(0, 1, ["numpy"]),
    "dtype unknown": _tensor(0, 2, "F99"),
    "dtype a dict": _tensor(0, 2, {"F32": 1}),
    "BF16 for numpy": _tensor(0, 2, "BF16"),
    "shape a string": _tensor(0, 3, "4x6"),
    "shape of floats": _tensor(0, 3, [4.0, 6]),
    "negative dimension": _tensor(0, 3, [-4, -6]),
    "too many dimensions": _tensor(0, 3, [1] * 65 + [24]),
    "segment a string": _tensor(0, 4, "0"),
    "segment a bool": _tensor(0, 4, False),
    "offset a float": _tensor(0, 5, 0.0),
    "nbytes null": _tensor(0, 6, None),
    "record too short": lambda h: h["tensors"][0].pop(),
    "record too long": lambda h: h["tensors"][0].append(1),
    "record not a list": lambda h: h["tensors"].__setitem__(0, {"name": "w"}),
    "tensors not a list": _set(["tensors"], {"0": 1}),
    # tensor records: out of range, or inconsistent with segments
    "segment index past the end": _tensor(0, 4, 9),
    "negative segment index": _tensor(0, 4, -1),
    "huge segment index": _tensor(0, 4, 1 << 70),
    "offset past the segment": _tensor(1, 5, 10_000),
    "offset overlapping": _tensor(1, 5, 8),
    "nbytes past the segment": _tensor(1, 6, 13),
    "shape inconsistent with nbytes": _tensor(0, 3, [5, 6]),
    "dtype inconsistent with nbytes": _tensor(0, 2, "F64"),
    "dtype not the segment's": _tensor(2, 2, "F32"),
    "tensors not tiling the segment": _tensor(1, 6, 8),
    # segments
    "segment nbytes negative": _set(["segments", 0, "nbytes"], -1),
    "segment nbytes a string": _set(["segments", 0, "nbytes"], "108"),
    "segment length a float": _set(["segments", 0, "length"], 1e3),
    "segment crc too large": _set(["segments", 0, "crc"], 1 << 32),
    "segment delta not a bool": _set(["segments", 0, "delta"], 1),
    "segment dtype unknown": _set(["segments", 0, "dtype"], "Q8"),
    "segment missing a field": lambda h: h["segments"][0].pop("crc"),
    "segment without tensors": lambda h: h["segments"].append(dict(h["segments"][0], dtype="U8")),
    "delta segment without a base": _set(["segments", 0, "delta"], True),
    # top level
    "not an object": lambda h: [h],
    "missing key": lambda h: h.pop("skeleton"),
    "id not hex": _set(["id"], "not-an-id"),
    "id a number": _set(["id"], 12345),
    "source unknown": _set(["source"], "pickle"),
    "source a list": _set(["source"], ["state"]),
    "base not an object": _set(["base"], "full.strata"),
    "base file a number": _set(["base"], {"file": 3, "id": "0" * 32}),
    "safetensors header on a state dict": _set(["safetensors"], {"header_length": 8}),
    # skeleton
    "tensor reference out of range": _set(["skeleton", "model", "w"], {"__tensor__": 3}),
    "tensor reference a string": _set(["skeleton", "model", "w"], {"__tensor__": "0"}),
    "tensor referenced twice": _set(["skeleton", "model", "b"], {"__tensor__": 0}),
    "tensor not referenced": _set(["skeleton", "model", "b"], 1.0),
    "tuple not a list": _set(["skeleton", "pair"], {"__tuple__": 5}),
    "dict items not pairs": _set(["skeleton", "pair"], {"__dict__": [[1, 2, 3]]}),
    "dict key unhashable": _set(["skeleton", "pair"], {"__dict__": [[[1], 2]]}),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_header_is_a_corrupt_stream(full, case):
    h, body = parts(full)
    assert [t[0] for t in h["tensors"]] == ["model.w", "model.b", "model.ids"]  # what the cases assume
    new = MALFORMED[case](h)
    repack(full, h if new is None or case in ("record too short",) or not isinstance(new, list) else new, body)
    with pytest.raises(CorruptStreamError, match="full.strata"):
        ck.load(full)
    with pytest.raises(CorruptStreamError):
        ck.io.header(full)  # what `strata ckpt info` shows is validated too


def test_untouched_repack_still_loads(full):
    """The repacking of the cases above alone breaks nothing (so each case tests its mutation)."""
    h, body = parts(full)
    repack(full, h, body)
    back = ck.load(full)
    assert np.array_equal(back["model"]["w"], STATE["model"]["w"]) and back["pair"] == (1, "x")


def test_header_nested_beyond_the_interpreter_limit(full):
    h, body = parts(full)
    text = json.dumps(h).replace('"step": 3', '"step": ' + "[" * 100_000 + "]" * 100_000)
    assert len(text) > 200_000
    full.write_bytes(pack(KIND_CHECKPOINT, text.encode(), [body]))
    with pytest.raises(CorruptStreamError, match="malformed"):
        ck.load(full)


def test_deep_skeleton_round_trips_iteratively(tmp_path):
    deep = x = {}
    for _ in range(300):
        x["d"] = {}
        x = x["d"]
    x["t"] = np.arange(3.0)
    ck.save({"deep": deep}, tmp_path / "d.strata")
    back = ck.load(tmp_path / "d.strata")["deep"]
    for _ in range(300):
        back = back["d"]
    assert np.array_equal(back["t"], np.arange(3.0))


def test_user_dicts_that_look_like_tags_round_trip(tmp_path):
    st_ = {"a": {"__tensor__": 0}, "b": {"__tuple__": [1, 2]}, "c": {"__dict__": 5}, "t": np.arange(2)}
    ck.save(st_, tmp_path / "t.strata")
    back = ck.load(tmp_path / "t.strata")
    assert back["a"] == {"__tensor__": 0} and back["b"] == {"__tuple__": [1, 2]} and back["c"] == {"__dict__": 5}
    assert np.array_equal(back["t"], np.arange(2))


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=False)
                    | st.text(max_size=8), lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c,
                                                                                               max_size=4),
                    max_leaves=8)


def _leaves(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))
    yield path


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_header_mutation_raises_only_documented_errors(tmp_path, data):
    path = tmp_path / "f.strata"
    if not path.exists():
        ck.save(STATE, path)
        (tmp_path / "orig").write_bytes(path.read_bytes())
    h, body = parts(tmp_path / "orig")
    where = data.draw(st.sampled_from(sorted(_leaves(h), key=repr)))
    value = data.draw(JSON)
    if where:
        _set(list(where), value)(h)
    else:
        h = value
    repack(path, h, body)
    try:
        ck.load(path)
    except StrataError as exc:
        assert isinstance(exc, FormatError)  # documented types only; anything else fails the test


# ---------------------------------------------------------------------- sizes
def test_segment_declaring_a_tebibyte_is_refused_before_allocating(full):
    h, body = parts(full)
    for n, kind in [(1 << 40, "can hold"), ((1 << 40) + 8, "exceeds the limit")]:
        h["segments"][1]["nbytes"] = n  # the int64 segment of model.ids
        h["tensors"][2][3], h["tensors"][2][6] = [n // 8], n
        repack(full, h, body)
        tracemalloc.start()
        try:
            with pytest.raises(ResourceLimitError, match=kind):
                ck.load(full)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20


def _record(n, chunk_bytes, n_chunks, chunks, code=5, flags=codec.CRC32C) -> bytes:
    """A segment record as written (version 3: CRC-32C checksums, the head's own last) or, with
    ``flags`` 0, as version 2 wrote it (zlib CRC-32, no head checksum)."""
    check = codec.crc32c if flags & codec.CRC32C else crc32
    w = Writer().varint(n).u8(code).u8(flags).varint(chunk_bytes).varint(n_chunks)
    for c in chunks:
        w.varint(len(c)).u32(check(c))
    if flags & codec.CRC32C:
        w.u32(codec.crc32c(w.getvalue()))
    return w.getvalue() + b"".join(chunks)


CONST_CHUNK = bytes([2, 3, 0x5A])  # one U8 plane: varint length 2, model CONST, byte 0x5A


def test_constant_plane_cannot_expand_beyond_its_limits():
    assert codec.decode(_record(8, 1 << 20, 1, [CONST_CHUNK])).tobytes() == b"\x5a" * 8  # the honest case
    assert codec.decode(_record(8, 1 << 20, 1, [CONST_CHUNK], flags=0)).tobytes() == b"\x5a" * 8  # version 2
    cases = [
        (_record(1 << 36, 1 << 36, 1, [CONST_CHUNK]), ResourceLimitError, "chunks of"),  # one huge chunk
        (_record(4 << 20, 1 << 20, 4, [CONST_CHUNK]), CorruptStreamError, "too short"),  # chunks not there
        (_record(1 << 36, 1 << 20, 1 << 16, [CONST_CHUNK]), CorruptStreamError, "exceeds"),
        (_record(1 << 50, 1 << 20, 1 << 30, [CONST_CHUNK]), ResourceLimitError, "exceeds the limit"),
        (_record(16, 1 << 20, 1, [CONST_CHUNK]), None, None),  # declares 16: the plane must fill exactly 16
    ]
    tracemalloc.start()
    try:
        for rec, err, msg in cases:
            if err is None:
                assert codec.decode(rec).tobytes() == b"\x5a" * 16
                continue
            with pytest.raises(err, match=msg):
                codec.decode(rec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    with pytest.raises(ResourceLimitError):
        codec.decode(_record(64, 1 << 20, 1, [CONST_CHUNK]), max_bytes=32)


def test_constant_plane_record_in_a_file_declaring_a_huge_segment(full):
    h, body = parts(full)
    rec = _record(1 << 36, 1 << 36, 1, [CONST_CHUNK])
    n = 1 << 36
    h["segments"] = [dict(dtype="U8", nbytes=n, length=len(rec), crc=0, delta=False)]  # refused before any check
    h["tensors"] = [["x", "numpy", "U8", [n], 0, 0, n]]
    h["skeleton"] = {"x": {"__tensor__": 0}}
    repack(full, h, rec)
    with pytest.raises(ResourceLimitError, match="can hold"):
        ck.load(full)
    # the header and the record must agree on the size
    rec = _record(16, 1 << 20, 1, [CONST_CHUNK])
    h["segments"] = [dict(dtype="U8", nbytes=8, length=len(rec), crc=codec.head_checksum(rec), delta=False)]
    h["tensors"] = [["x", "numpy", "U8", [8], 0, 0, 8]]
    repack(full, h, rec)
    with pytest.raises(CorruptStreamError, match="disagrees"):
        ck.load(full)
    h["segments"][0]["nbytes"] = h["tensors"][0][6] = 16
    h["tensors"][0][3] = [16]
    repack(full, h, rec)
    assert ck.load(full)["x"].tobytes() == b"\x5a" * 16


def test_record_checks_follow_the_file_version(full):
    """A version-3 file's records carry CRC-32C checksums (flag bit 1) and its header's ``crc``
    is the one a record's head carries; a version-2 record in it, or another ``crc``, is refused."""
    h, body = parts(full)
    h["tensors"] = [["x", "numpy", "U8", [16], 0, 0, 16]]
    h["skeleton"] = {"x": {"__tensor__": 0}}
    rec = _record(16, 1 << 20, 1, [CONST_CHUNK])
    h["segments"] = [dict(dtype="U8", nbytes=16, length=len(rec), crc=codec.head_checksum(rec), delta=False)]
    assert ck.load(repack(full, h, rec))["x"].tobytes() == b"\x5a" * 16
    h["segments"][0]["crc"] ^= 1
    with pytest.raises(CorruptStreamError, match="checksum mismatch"):
        ck.load(repack(full, h, rec))
    old = _record(16, 1 << 20, 1, [CONST_CHUNK], flags=0)
    h["segments"] = [dict(dtype="U8", nbytes=16, length=len(old), crc=crc32(old), delta=False)]
    with pytest.raises(CorruptStreamError, match="disagrees"):
        ck.load(repack(full, h, old))


def test_every_truncation_is_a_truncated_stream(pair):
    for path in pair:
        data = path.read_bytes()
        cut = path.with_name("cut.strata")
        cut.write_bytes(data)
        for n in range(len(data) - 1, -1, -1):
            os.truncate(cut, n)  # (cheaper than rewriting the file)
            with pytest.raises(TruncatedStreamError):  # found from the header, before decoding anything
                ck.io.header(cut)
            if n % 5 == 0 and path.name == "full.strata":
                with pytest.raises(TruncatedStreamError):
                    ck.io.read(cut)
        cut.write_bytes(data + b"\0")
        with pytest.raises(CorruptStreamError, match="unexpected bytes"):
            ck.io.header(cut)


def test_truncated_delta_with_base_present(pair):
    full, delta = pair
    data = delta.read_bytes()
    delta.write_bytes(data[:-3])
    with pytest.raises(TruncatedStreamError, match="model.ids"):  # the tensors of the last segment
        ck.load(delta)


def test_delta_record_flag_must_match_header(pair):
    full, delta = pair
    h, body = parts(delta)
    assert h["segments"][0]["delta"]
    h["segments"][0]["delta"] = False
    repack(delta, h, body)
    with pytest.raises(CorruptStreamError, match="disagrees"):
        ck.load(delta)


def test_safetensors_source_header_must_describe_the_tensors(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    src = tmp_path / "m.safetensors"
    save_file({"a": np.arange(6, dtype=np.float32), "b": np.arange(3, dtype=np.int64)}, src)
    ck.compress_safetensors(src, tmp_path / "m.strata")
    h, body = parts(tmp_path / "m.strata")
    for mutate, err in [(_tensor(0, 0, "zzz"), CorruptStreamError),  # a name the safetensors header lacks
                        (_set(["safetensors", "header_length"], 1 << 40), CorruptStreamError),
                        (_set(["safetensors", "header_length"], 9), CorruptStreamError),
                        (_set(["safetensors"], None), CorruptStreamError),
                        (_set(["skeleton"], {"x": 1}), CorruptStreamError)]:
        h2 = json.loads(json.dumps(h))
        mutate(h2)
        repack(tmp_path / "m.strata", h2, body, tmp_path / "bad.strata")
        with pytest.raises(err):
            ck.decompress_safetensors(tmp_path / "bad.strata", tmp_path / "back.safetensors")
    assert not (tmp_path / "back.safetensors").exists()


def test_crafted_safetensors_input_is_a_format_error(tmp_path):
    for meta in [{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}},
                 {"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}},
                 {"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}},
                 {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]}},
                 {"a": 5}, [1, 2]]:
        text = json.dumps(meta).encode()
        (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 4)
        with pytest.raises(FormatError, match="not a safetensors file"):
            ck.compress_safetensors(tmp_path / "x.safetensors", tmp_path / "x.strata")


# ---------------------------------------------------------------------- chains
def build_chain(folder: Path, n: int) -> tuple[Path, np.ndarray]:
    """A full snapshot and ``n - 1`` deltas on it (written directly, without reading the chain
    back at every step), each changing one element; returns the last file and its weights."""
    w = np.arange(16, dtype=np.float32)
    prev = None
    for i in range(n):
        w = w.copy()
        w[i % 16] += 1
        snap = io.group(*state.flatten({"w": w, "i": np.array([i])}, copy=True))
        path = folder / f"c{i:05d}.strata"
        path.write_bytes(io.encode(snap, prev[1] if prev else None, prev[0].name if prev else None, workers=1))
        prev = (path, snap)
    return prev[0], w


@pytest.mark.timeout(60)
def test_chain_of_2000_deltas_saves_and_loads(tmp_path, opened):
    last, w = build_chain(tmp_path, 2000)
    assert io.header(last)["base"]["file"] == "c01998.strata"
    end = tmp_path / "end.strata"
    ck.save({"w": -w, "i": np.array([2000])}, end, base=last, workers=1)  # reads the chain: 2000 files
    back = ck.load(end, workers=1)
    assert np.array_equal(back["w"], -w) and back["i"].tolist() == [2000]
    assert ck.io.read(end, workers=1).depth == 2000
    assert opened["most"] == 1  # one file open at a time
    assert np.array_equal(ck.load(tmp_path / "c00007.strata", workers=1)["w"][:8], np.arange(8) + 1)


def test_chain_longer_than_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_CHAIN", 5)
    last, w = build_chain(tmp_path, 6)  # 5 deltas: the most allowed
    assert np.array_equal(ck.load(last)["w"], w)
    with pytest.raises(InvalidInputError, match="MAX_CHAIN"):
        ck.save({"w": w, "i": np.array([6])}, tmp_path / "more.strata", base=last)
    nxt = io.group(*state.flatten({"w": w, "i": np.array([6])}, copy=True))
    (tmp_path / "more.strata").write_bytes(io.encode(nxt, io.read(last), last.name))
    with pytest.raises(ResourceLimitError, match="chain of more than 5"):
        ck.load(tmp_path / "more.strata")


def test_async_checkpointer_starts_a_new_chain_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_CHAIN", 2)
    with ck.AsyncCheckpointer(full_every=100) as saver:
        for i in range(7):
            saver.save({"w": np.full(4, float(i))}, tmp_path / f"a{i}.strata")
    bases = [io.header(tmp_path / f"a{i}.strata")["base"] for i in range(7)]
    assert [b is None for b in bases] == [True, False, False, True, False, False, True]
    assert all(ck.load(tmp_path / f"a{i}.strata")["w"][0] == i for i in range(7))


def test_chain_loop_is_refused(tmp_path):
    last, _ = build_chain(tmp_path, 2)
    first = tmp_path / "c00000.strata"
    h0, body0 = parts(first)
    h1, body1 = parts(last)
    h0["base"] = {"file": last.name, "id": h1["id"]}  # the full snapshot now claims the delta as its base
    repack(first, h0, body0)
    with pytest.raises(FormatError, match="but not its content"):  # (its checksum changed with its header)
        ck.load(last)
    del h1["base"]["crc"]  # as deltas written before the checksum was recorded: checked by id alone
    repack(last, h1, body1)
    with pytest.raises(CorruptStreamError, match="loops"):
        ck.load(last)
    h0["base"] = {"file": first.name, "id": h0["id"]}  # its own base
    repack(first, h0, body0)
    with pytest.raises(CorruptStreamError, match="loops"):
        ck.load(first)


def test_base_replaced_by_another_snapshot(tmp_path):
    last, _ = build_chain(tmp_path, 3)
    ck.save({"w": np.zeros(16, np.float32), "i": np.array([0])}, tmp_path / "c00000.strata")  # new id
    with pytest.raises(FormatError, match="not the snapshot"):
        ck.load(last)
    (tmp_path / "c00000.strata").unlink()
    (tmp_path / "c00000.strata").mkdir()
    with pytest.raises(FormatError, match="missing"):
        ck.load(last)


# ---------------------------------------------------------------------- DCP
def _dcp_item(data: bytes, declared: int | None = None):
    """DCP's view of an item's stored bytes, declaring ``declared`` bytes."""
    import io as pyio

    from torch.distributed.checkpoint.utils import _create_file_view

    return _create_file_view(pyio.BytesIO(data), 0, len(data) if declared is None else declared)


def test_dcp_item_sizes_are_enforced():
    pytest.importorskip("torch")
    from strata.checkpoint.dcp import StrataTransform

    payload = np.arange(5000, dtype=np.float32).tobytes()
    rec = codec.encode(payload, "AUTO")
    t = StrataTransform()
    assert t.transform_from(_dcp_item(rec)).read() == payload
    v2_item = _record(8, 1 << 20, 1, [CONST_CHUNK], flags=0)  # as descriptor 1 wrote them
    assert t.transform_from(_dcp_item(v2_item)).read() == b"\x5a" * 8
    cases = [
        (_dcp_item(rec, len(rec) + 10), TruncatedStreamError, "declares"),  # the file holds less
        (_dcp_item(rec, len(rec) - 1), CorruptStreamError, "chunk index"),  # metadata length too small
        (_dcp_item(rec + b"\0\0"), CorruptStreamError, "chunk index"),  # more bytes than the record
        (_dcp_item(_record(1 << 40, 1 << 20, 1, [CONST_CHUNK])), ResourceLimitError, "can hold"),
        (_dcp_item(_record(1 << 36, 1 << 36, 1, [CONST_CHUNK])), ResourceLimitError, "can hold"),
        (_dcp_item(codec.encode(payload, "F32", base=bytes(len(payload)))), CorruptStreamError, "delta"),
        (_dcp_item(b""), CorruptStreamError, "ends early"),
    ]
    for item, err, msg in cases:
        with pytest.raises(err, match=msg):
            t.transform_from(item)
    assert t.get_descriptor() == "stream.strata/3"
    StrataTransform.from_descriptor("1")  # items written before format version 3
    StrataTransform.from_descriptor("2")  # format version 3
    with pytest.raises(FormatError):
        StrataTransform.from_descriptor("4")


@pytest.mark.timeout(120)
def test_dcp_load_with_inconsistent_sizes(tmp_path):
    torch = pytest.importorskip("torch")
    import pickle
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from strata.checkpoint.dcp import storage_reader, storage_writer

    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled")
    state_ = {"w": torch.arange(2000, dtype=torch.float32).reshape(40, 50), "b": torch.ones(7, dtype=torch.bfloat16)}
    dcp.save(state_, storage_writer=storage_writer(tmp_path))
    target = {"w": torch.zeros(40, 50), "b": torch.zeros(7, dtype=torch.bfloat16)}
    dcp.load(target, storage_reader=storage_reader(tmp_path))
    assert torch.equal(target["w"], state_["w"]) and torch.equal(target["b"], state_["b"])

    def failure():
        with pytest.raises(CheckpointException) as info:
            dcp.load(target, storage_reader=storage_reader(tmp_path))
        return next(iter(info.value.failures.values()))[0]

    meta_path = tmp_path / ".metadata"
    meta_bytes = meta_path.read_bytes()
    meta = pickle.loads(meta_bytes)
    first = min(meta.storage_data, key=lambda k: meta.storage_data[k].offset)
    info = meta.storage_data[first]
    info.length -= 3  # the metadata declares fewer bytes than the item's record
    meta_path.write_bytes(pickle.dumps(meta))
    assert isinstance(failure(), CorruptStreamError)
    meta_path.write_bytes(meta_bytes)
    data = next(tmp_path.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:-5])  # the file holds fewer bytes than the metadata declares
    assert isinstance(failure(), TruncatedStreamError)


def test_delta_replaced_between_the_two_passes(tmp_path, monkeypatch):
    """The chain's headers are checked first, then decoded: a delta replaced in between (here
    while its full snapshot is decoded) is refused, not decoded against the wrong base."""
    last, _ = build_chain(tmp_path, 2)
    other = tmp_path / "other.strata"
    ck.save({"w": np.zeros(16, np.float32), "i": np.array([0])}, other)  # same layout, another id
    real = io._decode

    def decode_then_replace(src, h, lay, name, base, workers, alloc=None):
        snap = real(src, h, lay, name, base, workers, alloc)
        if base is None:
            os.replace(other, last)
        return snap

    monkeypatch.setattr(io, "_decode", decode_then_replace)
    with pytest.raises(FormatError, match="changed"):
        ck.load(last)


def test_zero_dimensional_arrays_keep_their_shape(tmp_path):
    ck.save({"s": np.array(5, dtype=np.int16), "f": np.full((), 2.5, np.float32)}, tmp_path / "z.strata")
    back = ck.load(tmp_path / "z.strata")
    assert back["s"].shape == () and back["s"] == 5 and back["f"].shape == () and back["f"].dtype == np.float32


@pytest.mark.parametrize("shape, ok", [([0, 2**40, 2**40, 2**40], False), ([0, 2**40, 2**21], False),
                                       ([0, 2**40, 2**20], True), ([2**40, 0], True)])
def test_empty_tensor_beside_huge_dimensions(tmp_path, shape, ok):
    """A zero-length axis beside huge ones holds no bytes, but NumPy refuses a shape whose
    non-zero dimensions times the element size reach 2**63 ("array is too big", a ValueError):
    the schema refuses it first; a shape NumPy accepts loads."""
    path = tmp_path / "e.strata"
    ck.save({"e": np.zeros((0, 3), np.float32), "x": np.ones(3, np.float32)}, path)
    h, body = parts(path)
    h["tensors"][0][3] = shape
    repack(path, h, body)
    if ok:
        assert ck.load(path)["e"].shape == tuple(shape)
    else:
        with pytest.raises(CorruptStreamError, match="bad shape"):
            ck.load(path)


def test_shapes_a_reader_refuses_are_not_written(tmp_path):
    """NumPy makes an empty array with an axis beyond 2**40, which a reader refuses: saving
    it is refused instead of writing a checkpoint that cannot be loaded."""
    with pytest.raises(InvalidInputError, match="shape"):
        ck.save({"e": np.empty((0, 2**41), np.float32)}, tmp_path / "e.strata")
    assert not list(tmp_path.iterdir())


def test_a_header_a_reader_refuses_is_not_written(tmp_path):
    """Plain values are stored in the JSON header, which a reader takes up to 16 MiB
    (container.MAX_HEADER): a state dict with more was saved, then refused by load."""
    path = tmp_path / "h.strata"
    ck.save({"w": np.ones(3)}, path)
    with pytest.raises(InvalidInputError, match="header"):
        ck.save({"w": np.ones(3), "notes": "x" * (16 << 20)}, path)
    assert ck.load(path)["w"].tolist() == [1, 1, 1]  # the previous checkpoint is kept


def test_numpy_scalars_are_stored_exactly_or_refused(tmp_path):
    """np.longdouble has no exact JSON number: json.dumps raised a TypeError; NumPy scalars
    that have one come back as that Python number."""
    path = tmp_path / "s.strata"
    with pytest.raises(UnsupportedDtypeError, match="longdouble"):
        ck.save({"x": np.longdouble(1) / 3}, path)
    values = {"h": np.float16(0.1), "u": np.uint64(2**64 - 1), "b": np.bool_(True)}
    ck.save(values, path)
    back = ck.load(path)
    assert all(back[k] == v and type(back[k]) is type(v.item()) for k, v in values.items())
