"""Memory of checkpoint reading and writing, bounded before the work: a record is read chunk
by chunk as it is decoded (never copied whole), a safetensors file is coded from the file one
chunk at a time and rebuilt from views of the decoded segments (no joined copy).

Measured with tracemalloc (NumPy's buffers and Python's bytes are both traced), in this
process, after a warm-up run that leaves each thread's scratch buffers in place; the peak
resident memory of the same operations in a fresh process is in
``benchmarks/checkpoint_memory.py``. Arrays of a few MiB, one worker thread."""
from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest

from strata import checkpoint as ck
from strata.checkpoint import codec

MIB = 1 << 20


def peak(fn) -> int:
    """Most bytes traced at once while ``fn()`` runs (after one untraced warm-up run)."""
    fn()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def safetensors_file(path, rng) -> int:
    """A safetensors file of about 8 MiB (fp32, bf16 as uint16, int64), with padding between
    tensors; its size."""
    tensors = {"w": ("F32", rng.standard_normal(1 << 20).astype("<f4").tobytes()),
               "h": ("BF16", (rng.standard_normal(1 << 20).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()),
               "i": ("I64", np.arange(1 << 17, dtype="<i8").tobytes())}
    meta, pos = {}, 0
    for name, (dtype, data) in tensors.items():
        itemsize = {"F32": 4, "BF16": 2, "I64": 8}[dtype]
        meta[name] = {"dtype": dtype, "shape": [len(data) // itemsize], "data_offsets": [pos, pos + len(data)]}
        pos += len(data) + 24  # 24 bytes of padding after each
    head = json.dumps(meta).encode()
    blob = bytearray(struct.pack("<Q", len(head)) + head)
    for _, data in tensors.values():
        blob += data + b"\x00" * 24
    path.write_bytes(blob)
    return len(blob)


def test_safetensors_round_trip_holds_about_the_file_once(tmp_path):
    """compress_safetensors held the file, its segments, the records and their join (3.5x the
    file); decompress_safetensors the segments, each tensor's copy and their join (3x)."""
    src, dst, out = tmp_path / "m.safetensors", tmp_path / "m.strata", tmp_path / "back.safetensors"
    size = safetensors_file(src, np.random.default_rng(0))
    compressing = peak(lambda: ck.compress_safetensors(src, dst, workers=1))
    decompressing = peak(lambda: ck.decompress_safetensors(dst, out, workers=1))
    assert out.read_bytes() == src.read_bytes()
    assert compressing < 1.2 * size and decompressing < 1.2 * size, (compressing / size, decompressing / size)


def test_loading_does_not_copy_the_records(tmp_path):
    """A segment's record was read whole before it was decoded: incompressible bytes cost
    twice their size; now each chunk is read as it is decoded."""
    data = np.random.default_rng(1).integers(0, 256, 6 * MIB, dtype=np.uint8)
    ck.save({"x": data}, tmp_path / "x.strata")
    holding = peak(lambda: ck.load(tmp_path / "x.strata", workers=1))
    assert holding < data.nbytes + 2 * MIB, holding / data.nbytes


def test_dcp_item_decodes_without_holding_its_stored_bytes(monkeypatch):
    """A DCP item was read whole, decoded, then copied to bytes (stored + 2 x decoded); now
    its chunks are read as they are decoded and the decoded array is read through a view."""
    pytest.importorskip("torch")
    from strata.checkpoint import dcp

    monkeypatch.setattr(codec, "threads", lambda: 1)  # (DCP decodes on every core: one here)
    payload = np.random.default_rng(2).standard_normal(2 * MIB).astype(np.float32).tobytes()
    item = codec.encode(payload, "F32")

    class View:  # DCP's view of the item's bytes in its file: ``len``, seek, read
        def __init__(self, data):
            self.len, self._data, self._pos = len(data), data, 0

        def seek(self, offset):
            self._pos = offset

        def read(self, n=-1):
            end = self.len if n < 0 else min(self.len, self._pos + n)
            out, self._pos = self._data[self._pos:end], end
            return out

    holding = peak(lambda: dcp.StrataTransform().transform_from(View(item)).read(16))
    assert dcp.StrataTransform().transform_from(View(item)).read() == payload
    assert holding < len(payload) + 3 * MIB, holding / len(payload)


def test_ranges_gather_across_tensors_and_refuse_a_shrunk_file(tmp_path):
    """A chunk of a segment spans several tensors of the file (and skips empty ones); a file
    that shrinks while it is read gives TruncatedStreamError, never a short or stale chunk."""
    from strata.checkpoint.ranges import Ranges
    from strata.container import Source
    from strata.errors import TruncatedStreamError

    data = np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    with Source(path) as f:
        r = Ranges(f, [(0, 10), (100, 0), (200, 50), (4990, 10)])
        assert r.size == 70 and r.read(5, 65).tobytes() == data[5:10] + data[200:250] + data[4990:4995]
        with open(path, "r+b") as g:
            g.truncate(4995)
        with pytest.raises(TruncatedStreamError):
            r.read(60, 70)
        with pytest.raises(TruncatedStreamError):
            f.read(4990, 10)


@pytest.mark.parametrize("dtype,make", [
    ("F32", lambda r, n: r.standard_normal(n // 4).astype("<f4").view(np.uint8)),
    ("BF16", lambda r, n: (r.standard_normal(n // 2).astype("<f4").view("<u4") >> 16).astype("<u2").view(np.uint8))])
def test_encoding_maps_no_new_memory_per_chunk(dtype, make):
    """Each chunk had its byte planes, the byte coder's buffers and a bytes copy of its record
    in fresh memory: the kernel mapped and zeroed 2.3x the segment's bytes in new pages per
    encode (fp32, one thread, 0.63 GiB/s against 1.3 without), and the page faults of many
    threads contend (1.3x, 2.1x the segment's pages for this fp32 and bf16). Now the scratch
    is each thread's and the records share one buffer: at most the records' own pages fault,
    on two threads."""
    resource = pytest.importorskip("resource")
    data = make(np.random.default_rng(4), 16 * MIB)
    codec.encode_parts(lambda lo, hi: data[lo:hi], data.size, dtype, workers=2)  # (scratch in place)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    parts = codec.encode_parts(lambda lo, hi: data[lo:hi], data.size, dtype, workers=2)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    records = sum(len(p) for p in parts)
    assert faults < (records + 0.1 * data.size) / resource.getpagesize(), (faults, records)
    assert np.array_equal(codec.decode(b"".join(parts)), data)


@pytest.mark.parametrize("full_every,snapshots", [(1, 2), (4, 3)])
def test_async_checkpointer_holds_at_most_max_pending_plus_one_snapshots(tmp_path, full_every, snapshots):
    """save() copied the state before it waited for room in the queue, the writer kept the
    previous save even when the next was a full snapshot, and the coded file was held until it
    was written: 5.1 and 6.1 snapshots held here. Now a save waits for room first, a save is
    kept only as the base of a delta on it, and the coded chunks are written as they are coded:
    max_pending snapshots (2), one more where deltas are made (the base, or its buffers waiting
    for the next save), two chunk records a thread and the coder's per-thread scratch."""
    state = {"w": np.random.default_rng(6).standard_normal(4 * MIB).astype(np.float32)}
    size = state["w"].nbytes

    def run():
        with ck.AsyncCheckpointer(full_every=full_every, max_pending=2, workers=1) as saver:
            for i in range(8):
                state["w"][:64] += 1
                saver.save(state, tmp_path / f"s{i}.strata")

    held = peak(run)
    scratch = 4 * MIB  # (the ring of chunk records; what the warm-up run left of the per-thread scratch is not counted)
    assert held < snapshots * size + scratch, held / size


def test_save_codes_host_tensors_where_they_lie(tmp_path):
    """save() copied every tensor into a segment of its dtype before coding it: the state's size
    again (page faults on fresh memory; 0.03-0.74 s for 384 MiB here). Now the segments of host
    tensors read the tensors' own bytes (strata.checkpoint.ranges.Pieces): what is held is the
    coder's scratch, and the chunks that straddle two tensors."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    state = {"a": torch.from_numpy(rng.standard_normal(3 * MIB // 4 + 5).astype(np.float32)),
             "b": rng.standard_normal(MIB // 4).astype(np.float32),
             "c": torch.from_numpy(rng.standard_normal(MIB).astype(np.float32)).to(torch.bfloat16)}
    size = sum(int(v.numel() * v.element_size()) if isinstance(v, torch.Tensor) else v.nbytes for v in state.values())
    held = peak(lambda: ck.save(state, tmp_path / "s.strata", workers=1))
    assert held < 0.25 * size + 1 * MIB, held / size
    back = ck.load(tmp_path / "s.strata")
    assert torch.equal(back["a"], state["a"]) and np.array_equal(back["b"], state["b"])
    assert torch.equal(back["c"].view(torch.int16), state["c"].view(torch.int16))


def test_pieces_read_views_within_a_part_and_gather_across():
    from strata.checkpoint.ranges import Pieces

    parts = [np.arange(10, dtype=np.uint8), np.zeros(0, np.uint8), np.arange(10, 30, dtype=np.uint8)]
    p = Pieces(parts)
    assert p.size == 30
    inside = p.read(12, 20)
    assert np.shares_memory(inside, parts[2]) and inside.tolist() == list(range(12, 20))
    across = p.read(5, 25)
    assert not np.shares_memory(across, parts[0]) and across.tolist() == list(range(5, 25))
    assert p.read(7, 7).size == 0 and p.read(0, 30).tolist() == list(range(30))
