"""strata checkpoint files: state dicts and safetensors files, full or as XOR deltas.

A checkpoint file is a strata container (``KIND_CHECKPOINT``, see ``docs/format.md``) whose
header is UTF-8 JSON::

    {"id": snapshot id (32 hex digits), "source": "state" | "safetensors",
     "base": null | {"file": name, "id": base snapshot id},
     "skeleton": ..., "tensors": [[name, kind, dtype, shape, segment, offset, nbytes], ...],
     "segments": [{"dtype": .., "nbytes": .., "length": .., "crc": .., "delta": bool}, ...],
     "safetensors": null | {"header_length": ..., "ranges": [[segment, offset, nbytes], ...]}}

followed by the raw safetensors header (for ``"safetensors"`` sources) and one section per
segment, a record of :mod:`strata.checkpoint.codec`. A segment holds the bytes of all tensors
of one dtype, in order, so small tensors share chunks. A delta's segments are XORed with the
base's segment of the same tensors (same names, shapes and dtype), whose file sits in the same
folder; loading a delta follows its chain of bases. Files are written atomically.

Errors: a truncated or corrupted file raises ``TruncatedStreamError`` /
``CorruptStreamError`` naming the tensors whose bytes are damaged.
"""
from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..container import KIND_CHECKPOINT, Source, atomic_write, check_crc, crc32, pack, unpack_header
from ..errors import CorruptStreamError, FormatError, InvalidInputError, ResourceLimitError
from . import codec
from .state import Tensor, TorchBytes, flatten, unflatten

#: Largest decoded segment strata will allocate (1 TiB).
MAX_SEGMENT_BYTES = 1 << 40
#: Most levels of bases a delta may chain to.
MAX_CHAIN = 1000


@dataclass
class Snapshot:
    """Decoded (or about-to-be-coded) checkpoint content: skeleton, tensors and their
    per-dtype segments (uint8 arrays), with the snapshot id."""

    skeleton: object
    tensors: list[Tensor]
    segments: list[np.ndarray]
    keys: list[tuple]
    seg_of: list[tuple[int, int]]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    source: str = "state"
    safetensors: dict | None = None
    raw_header: bytes = b""


def group(skeleton, tensors: list[Tensor], source: str = "state", segments: list | None = None,
          alloc=None) -> Snapshot:
    """Gather the tensors of each dtype into segments (in order of appearance).

    The bytes are copied once into the segments, and each tensor's ``data`` becomes a view
    of its segment (so the snapshot no longer shares memory with the caller's tensors).
    ``segments``, if given, are the already decoded segments of that layout. ``alloc(n)``
    gives the uint8 buffer of a segment of ``n`` bytes (default: a new array), e.g. a
    recycled one.
    """
    order: dict[str, list[int]] = {}
    for i, t in enumerate(tensors):
        order.setdefault(t.dtype, []).append(i)
    keys, built, copies = [], [], []
    seg_of = [(0, 0)] * len(tensors)
    for s, (dtype, idx) in enumerate(order.items()):
        off = 0
        for i in idx:
            seg_of[i] = (s, off)
            off += tensors[i].data.size
        keys.append((dtype, tuple((tensors[i].name, tuple(tensors[i].shape)) for i in idx)))
        if segments is None:
            seg = np.empty(off, np.uint8) if alloc is None else alloc(off)
            address = seg.ctypes.data
            for i in idx:
                a, d = seg_of[i][1], tensors[i].data
                if isinstance(d, TorchBytes):
                    copies.append((address + a, d))  # copied below, once every buffer exists
                else:
                    seg[a:a + d.size] = d
                tensors[i].data = seg[a:a + d.size]
            built.append(seg)
    for address, d in copies:
        d.copy_to(address)
    return Snapshot(skeleton, tensors, built if segments is None else segments, keys, seg_of, source=source)


def encode(snap: Snapshot, base: Snapshot | None = None, base_file: str | None = None,
           workers: int | None = None) -> bytes:
    """The checkpoint file's bytes; segments matching ``base``'s are stored as XOR deltas."""
    base_seg = {} if base is None else {k: s for k, s in zip(base.keys, base.segments)}
    records, seg_meta = [], []
    for key, seg in zip(snap.keys, snap.segments):
        b = base_seg.get(key)
        if b is not None and b.size != seg.size:
            b = None
        rec = codec.encode(seg, key[0], base=b, workers=workers)
        records.append(rec)
        seg_meta.append(dict(dtype=key[0], nbytes=int(seg.size), length=len(rec), crc=crc32(rec), delta=b is not None))
    use_base = base is not None and any(m["delta"] for m in seg_meta)
    tensors = [[t.name, t.kind, t.dtype, list(t.shape), s, off, int(t.data.size)]
               for t, (s, off) in zip(snap.tensors, snap.seg_of)]
    header = dict(id=snap.id, source=snap.source,
                  base=dict(file=base_file, id=base.id) if use_base else None,
                  skeleton=snap.skeleton, tensors=tensors, segments=seg_meta, safetensors=snap.safetensors)
    hb = json.dumps(header, separators=(",", ":")).encode()
    sections = [snap.raw_header, struct.pack("<I", crc32(snap.raw_header))] if snap.raw_header else []
    return pack(KIND_CHECKPOINT, hb, sections + records)


def header(path) -> dict:
    """The JSON header of a checkpoint file (segments, tensors, base), without decoding."""
    with Source(Path(path)) as src:
        raw, _ = unpack_header(src, KIND_CHECKPOINT)
    try:
        return json.loads(bytes(raw))
    except ValueError as exc:
        raise CorruptStreamError(f"{Path(path).name}: malformed checkpoint header") from exc


def read(path, workers: int | None = None, _depth: int = 0) -> Snapshot:
    """Decode a checkpoint file (following its chain of bases).

    Raises:
        FormatError and subclasses: not a checkpoint, truncated, corrupted (naming tensors),
            or a base that is missing or is not the one the delta was made from.
    """
    if _depth > MAX_CHAIN:
        raise CorruptStreamError("chain of delta snapshots too long (a loop?)")
    path = Path(path)
    with Source(path) as src:
        raw, off = unpack_header(src, KIND_CHECKPOINT)
        try:
            h = json.loads(bytes(raw))
            tensors_meta = h["tensors"]
            seg_meta = h["segments"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStreamError(f"{path.name}: malformed checkpoint header") from exc
        base = None
        if h.get("base"):
            bpath = path.parent / h["base"]["file"]
            if not bpath.exists():
                raise FormatError(f"{path.name} is a delta of {h['base']['file']}, which is missing")
            base = read(bpath, workers, _depth + 1)
            if base.id != h["base"]["id"]:
                raise FormatError(f"{bpath.name} is not the snapshot {path.name} was made from")
        raw_header = b""
        st = h.get("safetensors")
        if st:
            n = int(st["header_length"])
            raw_header = bytes(src.read(off, n, "safetensors header"))
            (crc,) = struct.unpack("<I", bytes(src.read(off + n, 4, "safetensors header checksum")))
            check_crc(raw_header, crc, "safetensors header")
            off += n + 4
        names_by_seg: dict[int, list] = {}
        for t in tensors_meta:
            names_by_seg.setdefault(t[4], []).append((t[5], t[5] + t[6], t[0], tuple(t[3])))
        base_seg = {} if base is None else dict(zip(base.keys, base.segments))
        segments = []
        for s, m in enumerate(seg_meta):
            if m["nbytes"] > MAX_SEGMENT_BYTES:
                raise ResourceLimitError(f"{path.name}: segment of {m['nbytes']} bytes exceeds the limit")
            what = _names(names_by_seg.get(s, []), 0, m["nbytes"])
            rec = src.read(off, m["length"], f"segment of tensors {what}")
            off += m["length"]
            try:
                check_crc(rec, m["crc"], f"segment of tensors {what}")
                b = None
                if m["delta"]:
                    key = (m["dtype"], tuple((n, shape) for _, _, n, shape in names_by_seg.get(s, [])))
                    b = base_seg.get(key)
                    if b is None or b.size != m["nbytes"]:
                        raise FormatError(f"{path.name}: the base has no segment for tensors {what}")
                segments.append(codec.decode(rec, base=b, workers=workers, max_bytes=m["nbytes"]))
            except CorruptStreamError as exc:
                raise CorruptStreamError(f"{path.name}: {exc} (tensors {what})") from exc
    tensors = [Tensor(t[0], t[1], t[2], tuple(t[3]), segments[t[4]][t[5]:t[5] + t[6]]) for t in tensors_meta]
    snap = group(h["skeleton"], tensors, h["source"], segments)
    snap.id = h["id"]
    snap.safetensors = st
    snap.raw_header = raw_header
    return snap


def _names(spans, lo, hi, most=5) -> str:
    names = [n for a, b, n, _ in spans if a < hi and b > lo]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


# ---------------------------------------------------------------------- public API
def save(state_dict, path, base=None, workers: int | None = None) -> None:
    """Save a state dict (nested dicts/lists of torch tensors and NumPy arrays) losslessly.

    Args:
        state_dict: the state (tensors of any layout and dtype: bf16, fp16, fp32, fp64,
            integers, bool...).
        path: output file, written atomically.
        base: optional path of an earlier checkpoint in the same folder: tensors unchanged in
            name, shape and dtype are stored as the bitwise XOR against it (an incremental
            snapshot), and loading this file will need that base.
        workers: coding threads (default: all cores).

    Raises:
        InvalidInputError, UnsupportedDtypeError: a value that cannot be stored.
        FormatError: ``base`` is not a readable checkpoint.
    """
    path = Path(path)
    snap = group(*flatten(state_dict, lazy=True))
    base_snap = None
    if base is not None:
        base = Path(base)
        if base.resolve().parent != path.resolve().parent:
            raise InvalidInputError("a base must be in the same folder as the delta")
        base_snap = read(base, workers)
    atomic_write(path, encode(snap, base_snap, base.name if base is not None else None, workers))


def load(path, device: str = "cpu", workers: int | None = None):
    """Load a checkpoint saved by :func:`save` (following its chain of bases): the same
    nesting, names, shapes and dtypes, torch tensors on ``device`` (NumPy arrays stay NumPy).

    Raises:
        FormatError and subclasses (``TruncatedStreamError``, ``CorruptStreamError`` naming the
        damaged tensors).
    """
    snap = read(path, workers)
    if snap.source != "state":
        raise FormatError(f"{Path(path).name} holds a safetensors file: use decompress_safetensors")
    return unflatten(snap.skeleton, snap.tensors, device)


def safetensors_snapshot(data) -> Snapshot:
    """Parse a safetensors file's bytes into a snapshot that rebuilds them byte for byte.

    Raises:
        FormatError: not a safetensors file.
    """
    mv = memoryview(data).cast("B")
    if len(mv) < 8:
        raise FormatError("not a safetensors file (too short)")
    (n,) = struct.unpack_from("<Q", mv, 0)
    if n > len(mv) - 8 or n > 100 << 20:
        raise FormatError("not a safetensors file (bad header length)")
    try:
        meta = json.loads(bytes(mv[8:8 + n]))
    except ValueError as exc:
        raise FormatError("not a safetensors file (header is not JSON)") from exc
    start = 8 + n
    entries = sorted(((v["data_offsets"][0], v["data_offsets"][1], k, v["dtype"], v["shape"])
                      for k, v in meta.items() if k != "__metadata__"), key=lambda e: e[0])
    tensors, pos = [], 0
    total = len(mv) - start

    def gap(a, b):  # bytes between tensors (padding), kept as they are
        return Tensor(f"__gap_{a}", "raw", "U8", (b - a,), np.frombuffer(mv, np.uint8, b - a, start + a))

    for a, b, name, dtype, shape in entries:
        if a < pos or b < a or b > total:
            raise FormatError("safetensors tensors overlap or exceed the file")
        if a > pos:
            tensors.append(gap(pos, a))
        tensors.append(Tensor(name, "raw", dtype if dtype in codec.DTYPES else "U8", tuple(shape),
                              np.frombuffer(mv, np.uint8, b - a, start + a)))
        pos = b
    if pos < total:
        tensors.append(gap(pos, total))
    snap = group(None, tensors, "safetensors")
    snap.safetensors = dict(header_length=start)
    snap.raw_header = bytes(mv[:start])
    return snap


def compress_safetensors(src, dst, base=None, workers: int | None = None) -> None:
    """Compress a ``.safetensors`` file to a strata checkpoint (optionally a delta against
    ``base``, an earlier strata checkpoint of the same model in the same folder)."""
    data = Path(src).read_bytes()
    snap = safetensors_snapshot(data)
    base_snap = read(base, workers) if base is not None else None
    atomic_write(dst, encode(snap, base_snap, Path(base).name if base is not None else None, workers))


def decompress_safetensors(src, dst, workers: int | None = None) -> None:
    """Rebuild the original ``.safetensors`` file, byte for byte (written atomically)."""
    atomic_write(dst, safetensors_bytes(read(src, workers)))


def safetensors_bytes(snap: Snapshot) -> bytes:
    """The original safetensors file of a ``"safetensors"`` snapshot."""
    if snap.source != "safetensors":
        raise FormatError("this checkpoint holds a state dict, not a safetensors file")
    meta = json.loads(snap.raw_header[8:].decode())

    def offset(t: Tensor) -> int:
        return int(t.name[6:]) if t.name.startswith("__gap_") else meta[t.name]["data_offsets"][0]

    return b"".join([snap.raw_header] + [t.data.tobytes() for t in sorted(snap.tensors, key=offset)])
