"""strata.checkpoint: bit-exact round trips, deltas, corruption, background saves, DCP, CLI."""
from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata import checkpoint as ck
from strata.checkpoint import codec
from strata.container import FORMAT_VERSION
from strata.errors import CorruptStreamError, FormatError, InvalidInputError, TruncatedStreamError

from .conftest import SHARED

torch = pytest.importorskip("torch")

SPECIAL32 = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA5A5A5, 0x00000001,
                      0x807FFFFF, 0x3F800000], dtype=np.uint32)


def same(a, b) -> bool:
    """Equal structure, types, dtypes, shapes and bits."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.ascontiguousarray(a).tobytes() == b.tobytes())
    return type(a) is type(b) and a == b


@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from(["float32", "float64", "float16", "bfloat16", "int64", "int8", "bool", "uint8"]))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=0, max_size=3)))
    n = int(np.prod(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    width = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int8": 1, "bool": 1, "uint8": 1}
    raw = rng.integers(0, 256, n * width[dtype], dtype=np.uint8)
    if dtype == "float32" and n:  # special values: NaN payloads, -0.0, inf, subnormals
        k = min(n, SPECIAL32.size)
        raw.view(np.uint32)[:k] = SPECIAL32[:k]
    if dtype == "bool":
        raw &= 1
    if n == 0:
        t = torch.empty(shape, dtype=getattr(torch, dtype))
    else:
        t = torch.from_numpy(raw.copy()).view(getattr(torch, dtype)).reshape(shape)
    if draw(st.booleans()) and t.dim() >= 2:
        t = t.transpose(0, 1)  # non-contiguous layout
    return t if draw(st.booleans()) or dtype == "bfloat16" else t.numpy()


@settings(max_examples=40, deadline=None)
@given(st.lists(arrays(), min_size=1, max_size=6))
def test_state_dict_round_trip_is_bit_exact(tmp_path_factory, tensors):
    path = tmp_path_factory.mktemp("ck") / "s.strata"
    state = {"layers": {f"t{i}": t for i, t in enumerate(tensors)}, "meta": [1, 2.5, "x", None, True],
             "pair": (3, "y"), 7: "int key"}
    ck.save(state, path)
    back = ck.load(path)
    expect = dict(state)
    expect["layers"] = {k: (v.contiguous() if isinstance(v, torch.Tensor) else np.array(v, order="C"))
                        for k, v in state["layers"].items()}
    assert same(expect, back)


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=3 * codec.CHUNK_BYTES // 1024 * 8),
       st.sampled_from(["F32", "BF16", "F16", "F64", "I64", "U8", "AUTO", "nonsense"]))
def test_segment_round_trip(data, dtype):
    blob = codec.encode(data, dtype)
    assert codec.decode(blob).tobytes() == data


def test_segment_xor_delta_and_multiple_chunks():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(codec.CHUNK_BYTES // 2).astype(np.float32)  # two chunks
    b = a.copy()
    b[::97] += 1e-3
    full = codec.encode(b.tobytes(), "F32")
    delta = codec.encode(b.tobytes(), "F32", base=a.tobytes())
    assert len(delta) < len(full) / 3
    assert codec.decode(delta, base=a.tobytes()).tobytes() == b.tobytes()
    with pytest.raises(InvalidInputError):
        codec.decode(delta)


def model_state(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.Linear(128, 8))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    return m, opt


def train_step(m, opt):
    m(torch.randn(16, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


def test_delta_chain(tmp_path):
    m, opt = model_state(0)
    states, names = [], []
    for i in range(4):
        train_step(m, opt)
        states.append({"model": {k: v.clone() for k, v in m.state_dict().items()},
                       "optim": {k: v.clone() for k, v in opt.state_dict()["state"][0].items()}})
        names.append(tmp_path / f"s{i}.strata")
        ck.save(states[-1], names[-1], base=names[-2] if i else None)
    for s, n in zip(states, names):
        assert same(s, ck.load(n))
    assert ck.io.header(names[3])["base"]["file"] == "s2.strata"
    # a missing base, or a base that is not the one the delta was made from
    os.rename(names[1], tmp_path / "moved.strata")
    with pytest.raises(FormatError, match="missing"):
        ck.load(names[3])
    ck.save(states[1], names[1])  # same content, another snapshot id
    with pytest.raises(FormatError, match="not the snapshot"):
        ck.load(names[3])


def test_corruption_names_the_tensor(tmp_path):
    rng = np.random.default_rng(1)
    state = {"big.weight": rng.standard_normal(40000).astype(np.float32), "small.bias": np.ones(3, np.float32)}
    path = tmp_path / "c.strata"
    ck.save(state, path)
    data = bytearray(path.read_bytes())
    bad = tmp_path / "bad.strata"
    bad.write_bytes(bytes(data[:-1000]))
    with pytest.raises(TruncatedStreamError, match="big.weight"):
        ck.load(bad)
    data[-500] ^= 0x10
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptStreamError, match="big.weight"):
        ck.load(bad)
    data[-500] ^= 0x10
    data[20] ^= 0x01  # header
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptStreamError):
        ck.load(bad)


def test_async_checkpointer_snapshot_is_the_state_at_save_time(tmp_path):
    m, opt = model_state(2)
    expected = []
    with ck.AsyncCheckpointer(full_every=3) as saver:
        for i in range(5):
            train_step(m, opt)
            expected.append({k: v.clone() for k, v in m.state_dict().items()})
            saver.save(m.state_dict(), tmp_path / f"a{i}.strata")
            with torch.no_grad():  # the loop changes the parameters right after save() returns
                for p in m.parameters():
                    p.mul_(-3.0)
        saver.wait()
    for i, e in enumerate(expected):
        assert same(e, ck.load(tmp_path / f"a{i}.strata"))
    bases = [ck.io.header(tmp_path / f"a{i}.strata")["base"] for i in range(5)]
    assert [b is None for b in bases] == [True, False, False, True, False]


def test_async_checkpointer_recycled_buffers_hold_each_save(tmp_path):
    """Host buffers are reused across saves: every file must still hold its own state, also
    while saves queue up behind the writer (deltas, full saves, strided tensors, arrays)."""
    rng = np.random.default_rng(7)
    w = torch.from_numpy(rng.standard_normal((64, 48)).astype(np.float32))
    expected = []
    with ck.AsyncCheckpointer(full_every=4, max_pending=2) as saver:
        for i in range(12):
            w.add_(torch.from_numpy(rng.standard_normal(w.shape).astype(np.float32)) * 1e-3)
            state = {"w": w, "wt": w.t(), "b": w[:, 0].to(torch.bfloat16), "a": rng.integers(0, 9, 7), "i": i}
            expected.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()})
            saver.save(state, tmp_path / f"r{i}.strata")
    for i, e in enumerate(expected):
        assert same(e, ck.load(tmp_path / f"r{i}.strata"))


def test_async_checkpointer_errors_surface(tmp_path):
    saver = ck.AsyncCheckpointer()
    saver.save({"x": np.zeros(3)}, tmp_path / "no_such_dir" / "x.strata")
    with pytest.raises(FileNotFoundError):
        saver.wait()
    saver.save({"x": np.zeros(3)}, tmp_path / "ok.strata")
    saver.close()
    assert (tmp_path / "ok.strata").exists()


def test_atomic_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.strata"
    ck.save({"x": np.arange(5.0)}, path)

    def boom(*a, **k):
        raise RuntimeError("crash while coding")

    monkeypatch.setattr(codec, "encode_to", boom)
    with pytest.raises(RuntimeError):
        ck.save({"x": np.arange(6.0)}, path)
    assert np.array_equal(ck.load(path)["x"], np.arange(5.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.strata"]
    monkeypatch.undo()

    def disk_full(write, *a, **k):  # chunks are written as they are coded: the disk fills up after the first
        write(b"the first chunk")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(codec, "encode_to", disk_full)
    with pytest.raises(OSError, match="No space"):
        ck.save({"x": np.arange(6.0)}, path)
    assert np.array_equal(ck.load(path)["x"], np.arange(5.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.strata"]


def make_safetensors(path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    f = rng.standard_normal((33, 17)).astype(np.float32)
    save_file({"a.f32": f, "b.f16": f.astype(np.float16), "c.i64": np.arange(9), "d.u8": np.arange(5, dtype=np.uint8),
               "e.bf16_as_u16": (f.view(np.uint32) >> 16).astype(np.uint16)}, path, metadata={"format": "pt"})


def test_safetensors_byte_identical(tmp_path):
    pytest.importorskip("safetensors")
    src = tmp_path / "m.safetensors"
    make_safetensors(src)
    ck.compress_safetensors(src, tmp_path / "m.strata")
    ck.decompress_safetensors(tmp_path / "m.strata", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == src.read_bytes()
    with pytest.raises(FormatError):
        ck.load(tmp_path / "m.strata")


@pytest.mark.skipif(not (SHARED / "data/llm/all-MiniLM-L6-v2.fp32.safetensors").exists(), reason="no shared model")
def test_real_model_safetensors_round_trip(tmp_path):
    src = SHARED / "data/llm/all-MiniLM-L6-v2.fp32.safetensors"
    ck.compress_safetensors(src, tmp_path / "m.strata")
    size = (tmp_path / "m.strata").stat().st_size
    assert src.stat().st_size / size > 1.2
    ck.decompress_safetensors(tmp_path / "m.strata", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == src.read_bytes()


def test_bad_files(tmp_path):
    p = tmp_path / "x.strata"
    p.write_bytes(b"STRA" + bytes([FORMAT_VERSION, 2]) + struct.pack("<I", 5) + b"{oops" + b"\0" * 4)
    with pytest.raises(CorruptStreamError):
        ck.load(p)
    p.write_bytes(b"not a checkpoint at all")
    with pytest.raises(FormatError):
        ck.load(p)
    with pytest.raises(InvalidInputError):
        ck.save({"x": object()}, tmp_path / "y.strata")


def _dcp_worker(rank, world, path, port):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from strata.checkpoint.dcp import storage_reader, storage_writer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(100 + rank)  # each rank holds its own shard
        state = {f"shard{rank}": {"w": torch.randn(300, 70), "h": torch.randn(64).to(torch.bfloat16)},
                 "step": torch.tensor(7)}
        dcp.save(state, storage_writer=storage_writer(path))
        target = {f"shard{rank}": {"w": torch.zeros(300, 70), "h": torch.zeros(64, dtype=torch.bfloat16)},
                  "step": torch.tensor(0)}
        dcp.load(target, storage_reader=storage_reader(path))
        assert same(state, target), f"rank {rank} differs"
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_dcp_two_processes(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_dcp_worker, args=(2, str(tmp_path / "dcp"), port), nprocs=2, join=True)
    files = os.listdir(tmp_path / "dcp")
    assert ".metadata" in files and len([f for f in files if f.endswith(".distcp")]) == 2
    meta = (tmp_path / "dcp" / ".metadata").read_bytes()
    assert b"stream.strata" in meta


def test_cli_ckpt_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    from click.testing import CliRunner

    from strata.cli import main

    src = tmp_path / "m.safetensors"
    make_safetensors(src)
    r = CliRunner().invoke(main, ["ckpt", "compress", str(src)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["ckpt", "info", str(src) + ".strata"])
    assert r.exit_code == 0 and "F32" in r.output and "tensors" in r.output
    r = CliRunner().invoke(main, ["ckpt", "decompress", str(src) + ".strata", "-o", str(tmp_path / "b.safetensors")])
    assert r.exit_code == 0 and (tmp_path / "b.safetensors").read_bytes() == src.read_bytes()
    shutil.copy(src, tmp_path / "m2.safetensors")
    r = CliRunner().invoke(main, ["ckpt", "compress", str(tmp_path / "m2.safetensors"), "--base", str(src) + ".strata"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_written_chunk_by_chunk_holds_the_records_coded_in_memory(tmp_path, workers):
    """write_snapshot writes each chunk as it is coded (a ring of two records a thread, which
    wraps around many times here) and the headers last, into the room left for them: the same
    records as the in-memory encoding and the same JSON header (but for the spaces that fill
    its room), for a full snapshot and a delta on it."""
    from strata.checkpoint import io, state

    rng = np.random.default_rng(8)
    values = {"w": rng.standard_normal(3 << 20).astype(np.float32), "b": np.arange(1000, dtype=np.int64),
              "h": (rng.standard_normal(1 << 20).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)}
    base = None
    for i in range(2):
        values["w"][: 1 << 16] += 1
        snap = io.group(*state.flatten(values, lazy=True))
        path, whole = tmp_path / f"s{i}.strata", tmp_path / f"whole{i}.strata"
        io.write_snapshot(path, snap, base, base and "s0.strata", workers=workers)
        crc = snap.file_crc
        parts = io.encode_parts(snap, base, base and "s0.strata", workers=workers)
        io.write(whole, parts)
        records = b"".join(bytes(p) for p in parts[1:])
        assert path.read_bytes().endswith(records) and path.stat().st_size >= whole.stat().st_size
        assert io.header(path) == io.header(whole) and io.header(path)["segments"][0]["delta"] == (i == 1)
        snap.file_crc = crc  # (that of the file written first, the base of the next)
        base = snap
    back = ck.load(tmp_path / "s1.strata")
    for k in values:
        assert np.array_equal(back[k], values[k])
