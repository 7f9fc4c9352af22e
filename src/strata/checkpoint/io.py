"""strata checkpoint files: state dicts and safetensors files, full or as XOR deltas.

A checkpoint file is a strata container (``KIND_CHECKPOINT``, see ``docs/format.md``) whose
header is UTF-8 JSON::

    {"id": snapshot id (32 hex digits), "source": "state" | "safetensors",
     "base": null | {"file": name, "id": base snapshot id, "crc": its header CRC-32},
     "skeleton": ..., "tensors": [[name, kind, dtype, shape, segment, offset, nbytes], ...],
     "segments": [{"dtype": .., "nbytes": .., "length": .., "crc": .., "delta": bool}, ...],
     "safetensors": null | {"header_length": ...}}

followed by the raw safetensors header (for ``"safetensors"`` sources) and one section per
segment, a record of :mod:`strata.checkpoint.codec`. A segment holds the bytes of all tensors
of one dtype, in order, so small tensors share chunks. A delta's segments are XORed with the
base's segment of the same tensors (same names, shapes and dtype), whose file sits in the same
folder; loading a delta follows its chain of bases. Files are written atomically.

A delta names its base by the name of the file it resolves to, with its id and the CRC-32 of
its container header (which covers the checksums of its segments, so another file that carries
the same id is refused). A delta never names the file it is written to, nor a file of its own
chain: saving to the base's name (a rolling ``latest.strata``) writes a full snapshot, and
saving over a file deeper in the base's chain, which the base needs, is refused.

A segment's ``crc`` depends on the file's format version (``docs/format.md``, section 5): in
versions 3 and 4 (written now) it is the CRC-32C its record's head carries -- the record checks its
head and each chunk itself, so its bytes are read once; in version 2 it is the zlib CRC-32 of
the whole record, checked before decoding.

A file is untrusted input: its header is checked against the schema of ``docs/format.md``
(section 5) before anything else is read or allocated -- types and ranges of every field,
tensor records tiling their segments, shapes and dtypes matching byte counts, sections inside
the file, and every decoded size within ``MAX_SEGMENT_BYTES`` and what its record can hold
(:func:`strata.checkpoint.codec.max_decoded_bytes`). A base is a bare file name in the same
folder (a symlink may not lead out of it). A chain of bases is walked iteratively, one file
open at a time: every header of the chain is checked first, then the files are decoded from
the full snapshot up, each delta into the snapshot below it, in place; at most ``MAX_CHAIN``
deltas. Records are read chunk by chunk as they are decoded (:class:`codec.Record`), never whole.

Errors: ``FormatError`` (not a checkpoint, a base that is missing, not the one the delta was
made from -- another id or another checksum -- or not a bare name in the same folder),
``TruncatedStreamError`` /
``CorruptStreamError`` naming the tensors whose bytes are damaged, ``ResourceLimitError`` (a
size beyond the limits), all ``strata.errors`` types.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..atomic import atomic_path
from ..container import KIND_CHECKPOINT, MAX_HEADER, Source, check_crc, crc32, pack, stream_version, unpack_header
from ..errors import CorruptStreamError, FormatError, InvalidInputError, ResourceLimitError, TruncatedStreamError
from . import codec
from .capture import pinned_buffer
from .ranges import Pieces, Ranges
from .state import NUMPY_DTYPES, TORCH_NAMES, Tensor, TorchBytes, check_skeleton, flatten, on_device, unflatten

#: Largest decoded segment strata will allocate (1 TiB); larger ones raise ``ResourceLimitError``.
MAX_SEGMENT_BYTES = codec.MAX_BYTES
#: Most deltas a chain may hold above its full snapshot (a longer chain, or a loop, is refused).
MAX_CHAIN = 10_000
#: Most dimensions of a tensor.
MAX_NDIM = 64
#: Bound on a shape's non-zero dimensions times its element size (NumPy's: they must fit its
#: index type even when the array is empty).
MAX_SHAPE_BYTES = 1 << 63
#: Largest safetensors header (its 8-byte length and JSON) a checkpoint may carry.
MAX_SAFETENSORS_HEADER = (100 << 20) + 8

#: Bytes of chain headers kept between the two passes of :func:`read` (not parsed twice).
_KEEP_HEADERS = 8 << 20
_KEYS = ("id", "source", "base", "skeleton", "tensors", "segments", "safetensors")
_ID = re.compile(r"[0-9a-f]{32}\Z")
_TORCH_DTYPES = frozenset(TORCH_NAMES.values())


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
    depth: int = 0  # deltas below this snapshot in its chain (0: a full snapshot)
    #: The container header CRC-32 of the file this snapshot was read from or encoded to (what
    #: a delta on it records as ``base.crc``); ``None`` before it is encoded.
    file_crc: int | None = None
    #: Per file of its chain, from this snapshot's own down to the full one: the directory
    #: entries that lead to it (:func:`entries`); empty for a snapshot not read from files.
    chain: list[frozenset[str]] = field(default_factory=list)


def group(skeleton, tensors: list[Tensor], source: str = "state", segments: list | None = None,
          alloc=None, copy=None, share: bool = False) -> Snapshot:
    """Gather the tensors of each dtype into segments (in order of appearance).

    The bytes are copied once into the segments, and each tensor's ``data`` becomes a view
    of its segment (so the snapshot no longer shares memory with the caller's tensors).
    Tensors whose bytes lie in a file (``data`` a :class:`~strata.checkpoint.ranges.Ranges`)
    are not copied: their segment is the ranges one after another, read when it is coded.
    ``segments``, if given, are the already decoded segments of that layout. ``alloc(n)``
    gives the uint8 buffer of a segment of ``n`` bytes (default: a new array), e.g. a
    recycled one. Tensors whose bytes come as :class:`~strata.checkpoint.state.TorchBytes`
    are copied once every buffer exists, by ``copy(pairs)`` if given (``pairs``: a list of
    ``(uint8 destination view, TorchBytes)``; e.g. :func:`strata.checkpoint.capture.start`,
    which may still be copying when ``group`` returns), else here. With ``share`` the
    segments of tensors in host memory are their own bytes, read where they lie
    (:class:`~strata.checkpoint.ranges.Pieces`): nothing is copied, for a caller that codes the
    snapshot before the tensors may change.

    Raises:
        InvalidInputError: a tensor whose shape a checkpoint cannot hold (more than
            ``MAX_NDIM`` dimensions, a dimension beyond ``MAX_SEGMENT_BYTES``, or non-zero
            dimensions that reach ``MAX_SHAPE_BYTES`` with the element size: a reader
            refuses such a shape, so it is not written).
    """
    order: dict[str, list[int]] = {}
    for i, t in enumerate(tensors):
        if segments is None and not _shape(list(t.shape), codec.DTYPES.get(t.dtype, (1,))[0]):
            raise InvalidInputError(f"tensor {_short(t.name)}: shape {_short(tuple(t.shape))} is beyond what a "
                                    f"checkpoint holds (at most {MAX_NDIM} dimensions of at most {MAX_SEGMENT_BYTES})")
        order.setdefault(t.dtype, []).append(i)
    keys, built, copies = [], [], []
    seg_of = [(0, 0)] * len(tensors)
    for s, (dtype, idx) in enumerate(order.items()):
        off = 0
        for i in idx:
            seg_of[i] = (s, off)
            off += tensors[i].data.size
        keys.append((dtype, tuple((tensors[i].name, tuple(tensors[i].shape)) for i in idx)))
        if segments is None and all(isinstance(tensors[i].data, Ranges) for i in idx):
            built.append(Ranges.join([tensors[i].data for i in idx]))
        elif segments is None and share and not any(_on_device(tensors[i].data) for i in idx):
            built.append(Pieces([_host(tensors[i].data) for i in idx]))
        elif segments is None:
            seg = np.empty(off, np.uint8) if alloc is None else alloc(off)
            for i in idx:
                a, d = seg_of[i][1], tensors[i].data
                if isinstance(d, TorchBytes):
                    copies.append((seg[a:a + d.size], d))  # copied below, once every buffer exists
                else:
                    seg[a:a + d.size] = d
                tensors[i].data = seg[a:a + d.size]
            built.append(seg)
    if copy is not None:
        copy(copies)
    else:
        for out, d in copies:
            d.copy_to(out)
    return Snapshot(skeleton, tensors, built if segments is None else segments, keys, seg_of, source=source)


def _on_device(data) -> bool:
    return isinstance(data, TorchBytes) and data.on_device


def _host(data) -> np.ndarray:
    """The uint8 bytes of a tensor in host memory (a view of a torch tensor's)."""
    return data.host_view() if isinstance(data, TorchBytes) else data


def encode(snap: Snapshot, base: Snapshot | None = None, base_file: str | None = None,
           workers: int | None = None) -> bytes:
    """The checkpoint file's bytes: :func:`encode_parts` joined."""
    return b"".join(encode_parts(snap, base, base_file, workers))


def encode_parts(snap: Snapshot, base: Snapshot | None = None, base_file: str | None = None,
                 workers: int | None = None) -> list[bytes]:
    """The checkpoint file, as the parts to write one after another (the container header,
    the safetensors header, each coded chunk: nothing is copied to join them); what
    :func:`write_snapshot` writes, in memory. Arguments, errors and what is set on ``snap`` as
    there."""
    pairs = _pairs(snap, base)
    records, meta = [], []
    for key, seg, b in pairs:
        rec = codec.encode_parts(_reader(seg), seg.size, key[0], base=b, workers=workers)
        records += rec
        meta.append(_meta(key[0], seg.size, rec[0], sum(map(len, rec)), b is not None))
    return [_head(snap, base, base_file, meta), *_sections(snap), *records]


def write_snapshot(path, snap: Snapshot, base: Snapshot | None = None, base_file: str | None = None,
                   workers: int | None = None) -> None:
    """Code ``snap`` and write it to ``path`` atomically, the coded chunks written as they are
    coded (at most two a thread wait): the coded file is never held in memory. Room is left
    for the headers, which are written last (the container header's JSON padded with spaces
    to the room it was given, the chunk lengths of each segment record with a fixed width).

    Segments matching ``base``'s are stored as XOR deltas against the file ``base_file`` (in
    the same folder), whose content ``base.file_crc`` identifies. Sets ``snap.file_crc`` and
    ``snap.depth``.

    Raises:
        InvalidInputError: ``base`` was never written to a file (it has no ``file_crc``); a
            segment beyond ``MAX_SEGMENT_BYTES`` or a header (skeleton and tensor list) beyond
            the container's ``MAX_HEADER``, which a reader would refuse (nothing is written).
        OSError: the file cannot be written (``path`` keeps its previous content; nothing is
            left behind).
    """
    pairs = _pairs(snap, base)
    widest = [_meta(key[0], seg.size, b"\xff" * 4, 1 << 62, b is not None) for key, seg, b in pairs]
    room = len(_head(snap, base, base_file, widest))  # (no real length or checksum has more digits)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.seek(room)
        for part in _sections(snap):
            f.write(part)
        meta = []
        for key, seg, b in pairs:
            at = f.tell()
            f.seek(at + codec.head_bytes(seg.size))
            head = codec.encode_to(f.write, _reader(seg), seg.size, key[0], base=b, workers=workers, stream=True)
            end = f.tell()
            f.seek(at)
            f.write(head)
            f.seek(end)
            meta.append(_meta(key[0], seg.size, head, end - at, b is not None))
        f.seek(0)
        f.write(_head(snap, base, base_file, meta, room))


def _pairs(snap: Snapshot, base: Snapshot | None) -> list[tuple]:
    """Each segment of ``snap`` with its key and the segment of ``base`` it is a delta on
    (``None``: coded whole).

    Raises:
        InvalidInputError: a segment beyond ``MAX_SEGMENT_BYTES``.
    """
    base_seg = {} if base is None else {k: s for k, s in zip(base.keys, base.segments)}
    pairs = []
    for key, seg in zip(snap.keys, snap.segments):
        if seg.size > MAX_SEGMENT_BYTES:
            raise InvalidInputError(f"the {key[0]} tensors hold {seg.size} bytes, more than a checkpoint segment "
                                    f"holds (MAX_SEGMENT_BYTES, {MAX_SEGMENT_BYTES})")
        b = base_seg.get(key)
        pairs.append((key, seg, b if b is not None and b.size == seg.size else None))
    return pairs


def _reader(seg):
    """``read(lo, hi)`` of a segment (an array, or ranges of a file)."""
    return seg.read if isinstance(seg, (Ranges, Pieces)) else (lambda lo, hi: seg[lo:hi])


def _meta(dtype: str, nbytes: int, head: bytes, length: int, delta: bool) -> dict:
    """A segment's entry in the checkpoint header (its record's head ends with its checksum)."""
    return dict(dtype=dtype, nbytes=int(nbytes), length=int(length), crc=int.from_bytes(head[-4:], "little"),
                delta=delta)


def _sections(snap: Snapshot) -> list[bytes]:
    """What follows the container header: a safetensors file's own header and its CRC-32."""
    return [snap.raw_header, struct.pack("<I", crc32(snap.raw_header))] if snap.raw_header else []


def _head(snap: Snapshot, base: Snapshot | None, base_file: str | None, meta: list[dict],
          room: int | None = None) -> bytes:
    """The container header (preamble, JSON header, CRC-32) of ``snap`` with segment entries
    ``meta``, the JSON padded with spaces to ``room`` bytes in all if given. Sets
    ``snap.file_crc`` and ``snap.depth``.

    Raises:
        InvalidInputError: ``base`` was never written to a file; a header beyond ``MAX_HEADER``.
    """
    use_base = base is not None and any(m["delta"] for m in meta)
    snap.depth = base.depth + 1 if use_base else 0
    tensors = [[t.name, t.kind, t.dtype, list(t.shape), s, off, int(t.data.size)]
               for t, (s, off) in zip(snap.tensors, snap.seg_of)]
    if use_base and base.file_crc is None:
        raise InvalidInputError("the base snapshot was never written to a file: a delta needs its file's checksum")
    header = dict(id=snap.id, source=snap.source,
                  base=dict(file=base_file, id=base.id, crc=base.file_crc) if use_base else None,
                  skeleton=snap.skeleton, tensors=tensors, segments=meta, safetensors=snap.safetensors)
    hb = json.dumps(header, separators=(",", ":")).encode()
    if room is not None:
        hb += b" " * (room - len(pack(KIND_CHECKPOINT, hb, [])))
    if len(hb) > MAX_HEADER:
        raise InvalidInputError(f"the checkpoint header (skeleton and tensor list) would take {len(hb)} bytes, more "
                                f"than a reader accepts ({MAX_HEADER}): store large values other than tensors "
                                f"as arrays")
    head = pack(KIND_CHECKPOINT, hb, [])  # the preamble, the header and its CRC-32
    snap.file_crc = int.from_bytes(head[-4:], "little")
    return head


def write(path, parts: list) -> None:
    """Write ``parts`` (bytes-like) one after another to ``path``, atomically: ``path`` holds
    its previous content or the whole new file, never a part, and nothing else is left.

    Raises:
        OSError: the file cannot be written.
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for part in parts:
            f.write(part)


# ---------------------------------------------------------------------- reading, validated
@dataclass
class _Layout:
    """Where a validated header's sections are, and the tensors of each segment."""

    spans: list[list[tuple[int, int, str, tuple]]]  # per segment: (start, end, name, shape)
    raw_header_at: int  # offset of the safetensors header section (-1: none)
    record_at: list[int]  # offset of each segment's record


def _short(x, most: int = 60) -> str:
    """``repr(x)`` for an error message, cut to ``most`` characters (``x`` comes from a file)."""
    r = repr(x)
    return r if len(r) <= most else r[:most - 3] + "..."


def _int(x, lo: int = 0, hi: int | None = None) -> bool:
    return type(x) is int and x >= lo and (hi is None or x <= hi)


def _shape(shape, itemsize: int = 1) -> bool:
    """Whether ``shape`` is a list of at most ``MAX_NDIM`` integers in ``0 .. 2**40`` that
    NumPy can give elements of ``itemsize`` bytes: its non-zero dimensions times ``itemsize``
    below ``2**63`` (NumPy refuses ``(0, 2**40, 2**40)``, which holds nothing, with "array is
    too big")."""
    return (isinstance(shape, list) and len(shape) <= MAX_NDIM
            and all(_int(d, 0, MAX_SEGMENT_BYTES) for d in shape)
            and math.prod(d for d in shape if d) * itemsize < MAX_SHAPE_BYTES)


def _check(h, name: str, size: int, off: int) -> _Layout:
    """Check a parsed header against the schema and the file's ``size`` (its sections start
    at ``off``); return where everything is.

    Raises:
        CorruptStreamError: a field of the wrong type, out of range or inconsistent.
        TruncatedStreamError: a section ends past the end of the file.
        ResourceLimitError: a segment larger than ``MAX_SEGMENT_BYTES`` or than its record can hold.
    """
    def bad(what: str) -> CorruptStreamError:
        return CorruptStreamError(f"{name}: invalid checkpoint header: {what}")

    if not isinstance(h, dict) or any(k not in h for k in _KEYS):
        raise bad("not a JSON object with the keys " + ", ".join(_KEYS))
    if not (isinstance(h["id"], str) and _ID.match(h["id"])):
        raise bad("the snapshot id is not 32 hex digits")
    source = h["source"]
    if not isinstance(source, str) or source not in ("state", "safetensors"):
        raise bad(f"unknown source {_short(source)}")
    base = h["base"]
    if base is not None and not (isinstance(base, dict) and isinstance(base.get("file"), str)
                                 and isinstance(base.get("id"), str) and _ID.match(base["id"])
                                 and ("crc" not in base or _int(base["crc"], 0, 0xFFFFFFFF))):
        raise bad("base is not {\"file\": name, \"id\": 32 hex digits, \"crc\": u32 (optional)}")
    segs = h["segments"]
    if not isinstance(segs, list):
        raise bad("segments is not a list")
    for s, m in enumerate(segs):
        if not (isinstance(m, dict) and isinstance(m.get("dtype"), str) and m["dtype"] in codec.DTYPES
                and _int(m.get("nbytes")) and _int(m.get("length")) and _int(m.get("crc"), 0, 0xFFFFFFFF)
                and type(m.get("delta")) is bool):
            raise bad(f"segment {s} is not {{dtype, nbytes, length, crc, delta}} of the right types")
        if m["delta"] and base is None:
            raise bad(f"segment {s} is a delta but the file has no base")
    tensors = h["tensors"]
    if not isinstance(tensors, list):
        raise bad("tensors is not a list")
    kinds = ("numpy", "torch") if source == "state" else ("raw",)
    spans: list[list] = [[] for _ in segs]
    order: dict[str, int] = {}  # dtype -> its segment, in order of first appearance
    for i, t in enumerate(tensors):
        if not (isinstance(t, list) and len(t) == 7):
            raise bad(f"tensor record {i} is not a list of 7 fields")
        tname, kind, dtype, shape, s, o, nb = t
        if not (isinstance(tname, str) and isinstance(kind, str) and kind in kinds
                and isinstance(dtype, str) and dtype in codec.DTYPES):
            raise bad(f"tensor record {i} has a bad name, kind or dtype")
        if (kind == "numpy" and dtype not in NUMPY_DTYPES) or (kind == "torch" and dtype not in _TORCH_DTYPES):
            raise bad(f"tensor {_short(tname)}: dtype {dtype} is not a {kind} dtype")
        if not _shape(shape, codec.DTYPES[dtype][0]):
            raise bad(f"tensor {_short(tname)}: bad shape {_short(shape)} (at most {MAX_NDIM} integers in "
                      f"0..{MAX_SEGMENT_BYTES}, the non-zero ones times the element size below 2**63)")
        if not (_int(s, 0, len(segs) - 1) and _int(o) and _int(nb)):
            raise bad(f"tensor {_short(tname)}: segment index, offset or byte count out of range")
        if s != order.setdefault(dtype, len(order)) or segs[s]["dtype"] != dtype:
            raise bad(f"tensor {_short(tname)} ({dtype}) is not in the segment of its dtype")
        start = spans[s][-1][1] if spans[s] else 0
        if o != start or o + nb > segs[s]["nbytes"]:
            raise bad(f"tensor {_short(tname)}: bytes {o}..{o + nb} do not follow the previous tensor ({start}) "
                      f"inside segment {s} ({segs[s]['nbytes']} bytes)")
        if kind != "raw" and math.prod(shape) * codec.DTYPES[dtype][0] != nb:
            raise bad(f"tensor {_short(tname)}: shape {_short(shape)} of {dtype} does not hold {nb} bytes")
        spans[s].append((o, o + nb, tname, tuple(shape)))
    for s, m in enumerate(segs):
        end = spans[s][-1][1] if spans[s] else -1
        if end != m["nbytes"]:
            raise bad(f"segment {s} holds {m['nbytes']} bytes, its tensors {max(end, 0)}")
    if source == "state":
        if h["safetensors"] is not None:
            raise bad("a state dict with a safetensors header")
        why = check_skeleton(h["skeleton"], len(tensors))
        if why:
            raise bad(why)
    else:
        st = h["safetensors"]
        if h["skeleton"] is not None or not (isinstance(st, dict)
                                             and _int(st.get("header_length"), 8, MAX_SAFETENSORS_HEADER)):
            raise bad(f"a safetensors source needs no skeleton and a header_length of 8..{MAX_SAFETENSORS_HEADER}")
    pos, raw_at = off, -1
    if source == "safetensors":
        raw_at, pos = pos, pos + h["safetensors"]["header_length"] + 4
        if pos > size:
            raise TruncatedStreamError(f"{name}: stream truncated: the safetensors header needs bytes "
                                       f"{raw_at}..{pos}, the file has {size}")
    record_at = []
    for s, m in enumerate(segs):
        record_at.append(pos)
        pos += m["length"]
        cap = codec.max_decoded_bytes(m["length"])
        if pos <= size and m["nbytes"] <= min(cap, MAX_SEGMENT_BYTES):
            continue
        what = _names(spans[s], 0, m["nbytes"])
        if pos > size:
            raise TruncatedStreamError(f"{name}: stream truncated: the segment of tensors {what} needs bytes "
                                       f"{record_at[-1]}..{pos}, the file has {size}")
        if m["nbytes"] > MAX_SEGMENT_BYTES:
            raise ResourceLimitError(f"{name}: segment of {m['nbytes']} bytes (tensors {what}) exceeds the limit "
                                     f"of {MAX_SEGMENT_BYTES}")
        raise ResourceLimitError(f"{name}: segment of tensors {what} declares {m['nbytes']} bytes, more than "
                                 f"its record of {m['length']} bytes can hold ({cap})")
    if pos != size:
        raise CorruptStreamError(f"{name}: {size - pos} unexpected bytes after the last segment")
    return _Layout(spans, raw_at, record_at)


def _read_header(src: Source, name: str, seen: tuple | None = None) -> tuple[dict, _Layout, bytes, int]:
    """The validated JSON header of the checkpoint stream ``src``, its layout, its raw bytes
    and the container header's CRC-32 (what identifies the file's content: it covers the
    segments' checksums); ``seen``: ``(raw header, stream size, header, layout)`` of an
    earlier read of the same file, reused if the raw header and the size are still those."""
    raw, off = unpack_header(src, KIND_CHECKPOINT)
    raw = bytes(raw)
    (crc,) = struct.unpack("<I", bytes(src.read(off - 4, 4, "header checksum")))
    if seen is not None and seen[1] == src.size and seen[0] == raw:
        return seen[2], seen[3], raw, crc
    try:
        h = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested beyond the interpreter's limit
        raise CorruptStreamError(f"{name}: malformed checkpoint header") from exc
    return h, _check(h, name, src.size, off), raw, crc


def _storable(folder: Path, file: str) -> bool:
    """Whether ``file`` is a name the file system of ``folder`` can hold: encodable (JSON text
    may carry lone UTF-16 surrogates, ``"\\ud800"``, that no file name encodes) and no longer
    than its longest name (``ENAMETOOLONG`` otherwise)."""
    try:
        size = len(os.fsencode(file))
    except UnicodeError:
        return False
    try:
        most = os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # (no pathconf on Windows)
        most = 255
    return size <= most


def _base_path(path: Path, file: str) -> Path:
    """The base file ``file`` named by the delta ``path``: a bare name in the same folder,
    which (through symlinks) stays in that folder. Nothing is opened.

    Raises:
        FormatError: a path, ``..``, an absolute name, or a symlink out of the folder.
    """
    seps = {os.sep, "/", "\\"} | ({os.altsep} if os.altsep else set())
    if (not file or file in (".", "..") or any(c in file for c in seps) or "\0" in file
            or not _storable(path.parent, file) or os.path.isabs(file) or Path(file).name != file):
        raise FormatError(f"{path.name}: base {_short(file)} is not a file name in the same folder")
    folder = path.parent
    bpath = folder / file
    if os.path.dirname(os.path.realpath(bpath)) != os.path.realpath(folder):
        raise FormatError(f"{path.name}: base {_short(file)} is a link out of its folder")
    return bpath


def header(path) -> dict:
    """The JSON header of a checkpoint file (segments, tensors, base), validated, without
    decoding."""
    path = Path(path)
    with Source(path) as src:
        return _read_header(src, path.name)[0]


def entry(path) -> str:
    """The directory entry ``path`` names: absolute, its folder's symlinks resolved, its own
    name kept (the entry an atomic write to ``path`` replaces)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def entries(path) -> frozenset[str]:
    """The directory entries that lead to the file at ``path``: its own (:func:`entry`), each
    symbolic link's target in turn, and the file it resolves to. Replacing any of them
    replaces what ``path`` reads."""
    e, out = entry(path), set()
    for _ in range(40):  # (the operating systems' bound on links followed)
        out.add(e)
        if not os.path.islink(e):
            break
        e = entry(os.path.join(os.path.dirname(e), os.readlink(e)))
    out.add(os.path.realpath(path))
    return frozenset(out)


def read(path, workers: int | None = None, alloc=None) -> Snapshot:
    """Decode a checkpoint file (following its chain of bases, iteratively); ``alloc(n)``, if
    given, is the uint8 buffer each segment is decoded into (deltas decode into their base's).

    The headers of the whole chain are read and checked first (one file open at a time),
    from ``path`` down to its full snapshot, which is decoded; then every delta is decoded
    on top of the snapshot below it. A delta's base must carry the recorded id and, where the
    delta records one (deltas written before it was recorded, such as the golden files of
    versions 2 to 4, are checked by id alone), the recorded checksum of its content
    (``base.crc``: the base's container header CRC-32, which covers its segments' checksums).

    Raises:
        FormatError and subclasses: not a checkpoint, truncated, corrupted (naming tensors),
            a base that is missing, is not the one the delta was made from (another id, or
            the same id with other content), or is not a file name in the same folder;
            ``ResourceLimitError``: sizes beyond the limits, or a chain of more than
            ``MAX_CHAIN`` deltas (or a loop).
    """
    path = Path(path)
    chain: list[tuple[Path, str, tuple | None]] = []  # the deltas, from ``path`` down
    links = [entries(path)]
    kept = 0  # bytes of the headers kept for the second pass
    seen = {os.path.realpath(path)}
    p, want, want_crc = path, None, None
    while True:
        try:
            src = Source(p)
        except OSError as exc:
            if want is None:
                raise
            raise FormatError(f"{chain[-1][0].name} is a delta of {p.name}, which cannot be read: {exc}") from exc
        with src:
            h, lay, raw, crc = _read_header(src, p.name)
            if want is not None and h["id"] != want:
                raise FormatError(f"{p.name} is not the snapshot {chain[-1][0].name} was made from")
            if want_crc is not None and crc != want_crc:
                raise FormatError(f"{p.name} has the id of the snapshot {chain[-1][0].name} was made from, but not "
                                  f"its content (checksum {crc:08x}, recorded {want_crc:08x}): it was replaced")
            if h["base"] is None:
                snap = _decode(src, h, lay, p.name, None, workers, alloc)
                snap.file_crc = crc
                break
        keep = kept + len(raw) <= _KEEP_HEADERS
        kept += len(raw) if keep else 0
        chain.append((p, h["id"], (raw, src.size, h, lay) if keep else None))
        if len(chain) > MAX_CHAIN:
            raise ResourceLimitError(f"{path.name}: chain of more than {MAX_CHAIN} delta snapshots")
        bpath = _base_path(p, h["base"]["file"])
        if not bpath.is_file():
            raise FormatError(f"{p.name} is a delta of {h['base']['file']}, which is missing")
        real = os.path.realpath(bpath)
        if real in seen:
            raise CorruptStreamError(f"{path.name}: the chain of bases loops back to {bpath.name}")
        seen.add(real)
        links.append(entries(bpath))
        p, want, want_crc = bpath, h["base"]["id"], h["base"].get("crc")
    for p, want, header_seen in reversed(chain):
        with Source(p) as src:
            h, lay, _, crc = _read_header(src, p.name, header_seen)
            if (h["id"] != want or h["base"] is None or h["base"]["id"] != snap.id
                    or h["base"].get("crc", snap.file_crc) != snap.file_crc):
                raise FormatError(f"{p.name} changed while its chain of bases was read")
            snap = _decode(src, h, lay, p.name, snap, workers, alloc)
            snap.file_crc = crc
    snap.chain = links
    return snap


def _decode(src: Source, h: dict, lay: _Layout, name: str, base: Snapshot | None, workers, alloc=None) -> Snapshot:
    """Decode the sections of a checkpoint whose header ``h`` is validated, over ``base``
    (segments that are not deltas into ``alloc(n)`` if given).

    Records of version 3 on are read chunk by chunk as they are decoded (never whole); a delta
    segment is decoded into its base's segment, in place, so a chain holds one snapshot.
    ``base`` is consumed."""
    raw_header = b""
    st = h["safetensors"]
    if st:
        n = st["header_length"]
        raw_header = bytes(src.read(lay.raw_header_at, n, "safetensors header"))
        (crc,) = struct.unpack("<I", bytes(src.read(lay.raw_header_at + n, 4, "safetensors header checksum")))
        try:
            check_crc(raw_header, crc, "safetensors header")
        except CorruptStreamError as exc:
            raise CorruptStreamError(f"{name}: {exc}") from exc
    base_seg = {} if base is None else dict(zip(base.keys, base.segments))
    v3 = stream_version(src) >= 3
    segments = []
    for s, m in enumerate(h["segments"]):
        spans = lay.spans[s]
        names = _names(spans, 0, m["nbytes"])
        what = f"segment of tensors {names}"
        try:
            if v3:
                at = lay.record_at[s]
                rec = codec.Record(lambda offset, n, at=at, what=what: src.read(at + offset, n, what), m["length"])
            else:  # version 2: the header's crc covers the whole record, read whole
                buf = src.read(lay.record_at[s], m["length"], what)
                check_crc(buf, m["crc"], what)
                rec = codec.Record.from_bytes(buf)
            if rec.n_bytes != m["nbytes"] or rec.delta != m["delta"] or rec.crc32c != v3:
                raise CorruptStreamError("the segment record disagrees with the header")
            if v3 and rec.head_crc != m["crc"]:
                raise CorruptStreamError("checksum mismatch between the header and the segment record's head")
            b = None
            if m["delta"]:
                key = (m["dtype"], tuple((n, shape) for _, _, n, shape in spans))
                b = base_seg.pop(key, None)
                if b is None or b.size != m["nbytes"]:
                    raise FormatError(f"{name}: the base has no {what}")
            out = b if b is not None or alloc is None else alloc(m["nbytes"])
            segments.append(rec.decode(base=b, workers=workers, out=out))
        except CorruptStreamError as exc:
            raise type(exc)(f"{name}: {exc} (tensors {names})") from exc
    tensors = [Tensor(t[0], t[1], t[2], tuple(t[3]), segments[t[4]][t[5]:t[5] + t[6]]) for t in h["tensors"]]
    snap = group(h["skeleton"], tensors, h["source"], segments)
    snap.id = h["id"]
    snap.safetensors = st
    snap.raw_header = raw_header
    snap.depth = 0 if base is None else base.depth + 1
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
            snapshot), and loading this file will need that base (the file a symbolic link
            ``base`` leads to; its name is recorded). If writing ``path`` would replace the
            base (``path`` is ``base``, or the file the link ``base`` leads to), as when a
            rolling name such as ``latest.strata`` is saved again, a full snapshot is
            written: a delta cannot replace its own base.
        workers: coding threads (default: all cores).

    Raises:
        InvalidInputError: a value that cannot be stored; a ``base`` in another folder; a
            ``path`` deeper in the chain of bases of ``base`` (replacing it would leave
            ``base`` unreadable), or a chain that would exceed ``MAX_CHAIN``.
        UnsupportedDtypeError: a dtype that cannot be stored.
        FormatError: ``base`` is not a readable checkpoint.
        OSError: the file cannot be written (nothing is left behind).
    """
    path = Path(path)
    skeleton, tensors = flatten(state_dict, lazy=True)
    # (GPU tensors: one copy, into pinned memory; host tensors are coded where they lie)
    snap = group(skeleton, tensors, alloc=pinned_buffer if on_device(tensors) else None, share=True)
    base_snap, base_file = _read_base(base, path, workers)
    write_snapshot(path, snap, base_snap, base_file, workers)


def _read_base(base, path: Path, workers) -> tuple[Snapshot | None, str | None]:
    """The decoded base of a delta about to be written to ``path`` and the name the delta
    records for it (that of the file ``base`` resolves to); ``(None, None)`` without a base,
    or when writing ``path`` would replace the base itself (a full snapshot is written then).

    Raises:
        InvalidInputError: the base is not in the folder of ``path``; ``path`` leads to a file
            deeper in the base's chain, which the base needs; or the delta would make its
            chain longer than ``MAX_CHAIN``.
    """
    if base is None:
        return None, None
    dest, real = entry(path), os.path.realpath(base)
    if os.path.dirname(real) != os.path.dirname(dest):
        raise InvalidInputError("a base must be in the same folder as the delta")
    if dest in entries(base):
        return None, None
    snap = read(base, workers)
    for below in snap.chain[1:]:
        if dest in below:
            raise InvalidInputError(f"{Path(path).name} is in the chain of bases of {Path(base).name}: replacing "
                                    f"it would leave {Path(base).name} unreadable (save to another name)")
    if snap.depth >= MAX_CHAIN:
        raise InvalidInputError(f"{Path(base).name} is the end of a chain of {snap.depth} deltas: a delta on it would "
                                f"exceed MAX_CHAIN ({MAX_CHAIN}); save a full snapshot")
    return snap, os.path.basename(real)


def load(path, device: str = "cpu", workers: int | None = None):
    """Load a checkpoint saved by :func:`save` (following its chain of bases): the same
    nesting, names, shapes and dtypes, torch tensors on ``device`` (NumPy arrays stay NumPy).
    For a CUDA device the segments are decoded into pinned host memory and copied to the GPU
    asynchronously, then synchronized once.

    Raises:
        FormatError and subclasses (``TruncatedStreamError``, ``CorruptStreamError`` naming the
        damaged tensors).
    """
    cuda = device != "cpu" and _is_cuda(device)
    snap = read(path, workers, alloc=pinned_buffer if cuda else None)
    if snap.source != "state":
        raise FormatError(f"{Path(path).name} holds a safetensors file: use decompress_safetensors")
    state = unflatten(snap.skeleton, snap.tensors, device)
    if cuda:  # (the copies from the pinned segments are asynchronous: done before they are freed)
        __import__("torch").cuda.synchronize(device)
    return state


def _is_cuda(device) -> bool:
    import torch

    return torch.device(device).type == "cuda"



def safetensors_snapshot(data) -> Snapshot:
    """Parse a safetensors file into a snapshot that rebuilds it byte for byte. Only its
    header is read here: the tensors' bytes stay where they are (:class:`Ranges`) and are
    read chunk by chunk when the snapshot is coded.

    Args:
        data: the file's bytes (bytes-like), or a :class:`~strata.container.Source`
            open on it (which must stay open until the snapshot is coded).

    Raises:
        FormatError: not a safetensors file.
    """
    src = data if isinstance(data, Source) else Source(data)
    if src.size < 8:
        raise FormatError("not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", bytes(src.read(0, 8, "safetensors header length")))
    if n > src.size - 8 or n > MAX_SAFETENSORS_HEADER - 8:
        raise FormatError("not a safetensors file (bad header length)")
    start = 8 + n
    raw_header = bytes(src.read(0, start, "safetensors header"))
    try:
        meta = json.loads(raw_header[8:])
    except (ValueError, RecursionError) as exc:
        raise FormatError("not a safetensors file (header is not JSON)") from exc
    try:
        entries = sorted(((v["data_offsets"][0], v["data_offsets"][1], k, v["dtype"], v["shape"])
                          for k, v in meta.items() if k != "__metadata__"), key=lambda e: e[0])
        for a, b, _, dtype, shape in entries:
            if not (_int(a) and _int(b) and isinstance(dtype, str)
                    and _shape(shape, codec.DTYPES.get(dtype, (1,))[0])):
                raise TypeError
    except (AttributeError, KeyError, IndexError, TypeError) as exc:
        raise FormatError("not a safetensors file (malformed tensor entries)") from exc
    tensors, pos = [], 0
    total = src.size - start

    def gap(a, b):  # bytes between tensors (padding), kept as they are
        return Tensor(f"__gap_{a}", "raw", "U8", (b - a,), Ranges(src, [(start + a, b - a)]))

    for a, b, name, dtype, shape in entries:
        if a < pos or b < a or b > total:
            raise FormatError("safetensors tensors overlap or exceed the file")
        if a > pos:
            tensors.append(gap(pos, a))
        tensors.append(Tensor(name, "raw", dtype if dtype in codec.DTYPES else "U8", tuple(shape),
                              Ranges(src, [(start + a, b - a)])))
        pos = b
    if pos < total:
        tensors.append(gap(pos, total))
    snap = group(None, tensors, "safetensors")
    snap.safetensors = dict(header_length=start)
    snap.raw_header = raw_header
    return snap


def compress_safetensors(src, dst, base=None, workers: int | None = None) -> None:
    """Compress a ``.safetensors`` file to a strata checkpoint (optionally a delta against
    ``base``, an earlier strata checkpoint of the same model in the same folder; as in
    :func:`save`, a ``dst`` that is ``base`` gets a full snapshot).

    Memory: with a base, the decoded base; the tensors are read from ``src`` one chunk per
    thread at a time, never whole, and the coded chunks written as they are coded
    (:func:`write_snapshot`).

    Raises:
        FormatError: ``src`` is not a safetensors file, or ``base`` not a readable checkpoint.
        InvalidInputError: ``dst`` would replace ``src``; as :func:`save` (a base elsewhere, a
            ``dst`` deeper in its chain).
        OSError: ``src`` cannot be read or ``dst`` written (nothing is left behind).
    """
    if entry(dst) in entries(src):
        raise InvalidInputError(f"{Path(dst).name} is the safetensors file being compressed: write elsewhere")
    with Source(src) as file:
        snap = safetensors_snapshot(file)
        base_snap, base_file = _read_base(base, Path(dst), workers)
        write_snapshot(dst, snap, base_snap, base_file, workers)


def decompress_safetensors(src, dst, workers: int | None = None) -> None:
    """Rebuild the original ``.safetensors`` file, byte for byte (written atomically).

    Memory: the decoded snapshot, written tensor by tensor without a copy (peak resident
    memory about 1.0 times the file size).

    Raises:
        FormatError and subclasses: as :func:`read`; the checkpoint holds a state dict.
        InvalidInputError: ``dst`` would replace ``src`` or a file of its chain of bases.
        OSError: ``dst`` cannot be written (nothing is left behind).
    """
    dest = entry(dst)
    if dest in entries(src):
        raise InvalidInputError(f"{Path(dst).name} is the checkpoint being decompressed: write elsewhere")
    snap = read(src, workers)
    if any(dest in links for links in snap.chain):
        raise InvalidInputError(f"{Path(dst).name} is a base that {Path(src).name} needs: write elsewhere")
    write(dst, safetensors_parts(snap))


def safetensors_parts(snap: Snapshot) -> list:
    """The original safetensors file of a ``"safetensors"`` snapshot, as the parts to write
    one after another: its header, then every tensor's bytes (views, not copies) in file order.

    Raises:
        FormatError: the snapshot holds a state dict.
        CorruptStreamError: the stored safetensors header does not describe the tensors
            (every byte after the header must belong to exactly one tensor or gap).
    """
    if snap.source != "safetensors":
        raise FormatError("this checkpoint holds a state dict, not a safetensors file")
    raw = snap.raw_header
    try:
        (n,) = struct.unpack_from("<Q", raw, 0)
        meta = json.loads(raw[8:]) if n + 8 == len(raw) else None
    except (struct.error, ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict):
        raise CorruptStreamError("the stored safetensors header is malformed")
    placed = []
    for t in snap.tensors:
        gap = t.name[6:]
        if t.name not in meta and t.name.startswith("__gap_") and gap.isascii() and gap.isdigit():
            a, b = int(gap), int(gap) + t.data.size
        else:
            e = meta.get(t.name) if t.name != "__metadata__" else None
            r = e.get("data_offsets") if isinstance(e, dict) else None
            if not (isinstance(r, list) and len(r) == 2 and _int(r[0]) and _int(r[1])):
                raise CorruptStreamError(f"tensor {_short(t.name)} is not in the stored safetensors header")
            a, b = r
        if b - a != t.data.size:
            raise CorruptStreamError(f"tensor {_short(t.name)}: the safetensors header gives {b - a} bytes, "
                                     f"the checkpoint {t.data.size}")
        placed.append((a, t))
    placed.sort(key=lambda e: e[0])
    pos = 0
    for a, t in placed:
        if a != pos:
            raise CorruptStreamError(f"tensor {_short(t.name)} at byte {a} of the safetensors data, expected {pos}")
        pos += t.data.size
    return [raw] + [t.data for _, t in placed]
