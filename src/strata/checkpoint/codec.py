"""Lossless coding of tensor bytes: a *segment* is the bytes of one dtype, coded chunk by chunk.

Method (LMC, Waddington & Constantinescu, arXiv:2505.09810; ZipNN, Hershcovitch et al.,
arXiv:2411.05239): the segment is cut into chunks of ``CHUNK_BYTES`` (whole elements), which
are coded independently and in parallel. In a chunk, floating-point elements are bit-rotated
so a byte holds exponent bits only, and split into byte planes
(:mod:`strata.checkpoint.planes`); each plane is coded by :mod:`strata.entropy.bytecoder`
(raw, constant, order-0 rANS, or rANS conditioned on the previous byte, whichever is
smallest). With a *base* (the same segment in an earlier snapshot), the chunk is first XORed
with the base's bytes, so unchanged bits become zero bytes (incremental snapshots).

Segment record (see ``docs/format.md``): ``varint n_bytes | u8 dtype code | u8 flags (bit 0:
XOR with a base) | varint chunk bytes | varint n_chunks | n_chunks x (varint length, u32
CRC-32) | chunks``; a chunk is ``itemsize x (varint length | plane record)``.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from ..container import Reader, Writer, check_crc, crc32
from ..entropy import bytecoder, tables
from ..errors import CorruptStreamError, InvalidInputError, ResourceLimitError
from . import planes

#: Bytes per chunk (a multiple of every element size).
CHUNK_BYTES = 1 << 20
#: Largest chunk a segment record may declare (the writer uses ``CHUNK_BYTES``): what the
#: few bytes of one chunk may expand to.
MAX_CHUNK_BYTES = 1 << 22
#: Largest segment :func:`decode` allocates unless its caller sets a smaller limit (1 TiB).
MAX_BYTES = 1 << 40
#: Fewest bytes of a record's head (``n_bytes``, dtype, flags, ``chunk_bytes``, ``n_chunks``),
#: and of one chunk: its index entry (varint length, CRC-32) and one constant byte plane
#: (varint length, model, byte) per element byte.
_MIN_HEAD = 5
_MIN_CHUNK = 5 + 3


def _min_chunk(itemsize: int) -> int:
    """Fewest bytes a chunk of elements of ``itemsize`` bytes takes in a segment record."""
    return _MIN_CHUNK + 3 * (itemsize - 1)


#: Element size and bit rotation of each dtype name (safetensors spelling).
DTYPES = {
    "BF16": (2, True), "F16": (2, True), "F32": (4, True), "F64": (8, True),
    "I8": (1, False), "U8": (1, False), "BOOL": (1, False), "F8_E4M3": (1, False), "F8_E5M2": (1, False),
    "I16": (2, False), "U16": (2, False), "I32": (4, False), "U32": (4, False), "I64": (8, False),
    "U64": (8, False), "C64": (4, True), "C128": (8, True),
}
_CODES = {name: i for i, name in enumerate(DTYPES)}
_NAMES = list(DTYPES)


def threads() -> int:
    """Worker threads for chunk coding: all cores."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def run_parallel(fn, n: int, workers: int | None = None) -> list:
    """``[fn(0), ..., fn(n - 1)]``, on a shared pool of ``workers`` threads (default: all
    cores; the chunk coders release the GIL). The pools live as long as the process, so a
    call does not pay for starting threads."""
    w = min(n, workers or threads())
    if w <= 1:
        return [fn(c) for c in range(n)]
    with _POOLS_LOCK:
        pool = _POOLS.get(w)
        if pool is None:
            pool = _POOLS[w] = ThreadPoolExecutor(w, thread_name_prefix="strata-codec")
    return list(pool.map(fn, range(n)))


def _as_u8(data) -> np.ndarray:
    return np.frombuffer(memoryview(data).cast("B"), np.uint8)


def _encode_chunk(chunk: np.ndarray, itemsize: int, rotate: bool) -> bytes:
    n = chunk.size // itemsize
    out = np.empty(itemsize * (bytecoder.max_record_bytes(n) + 10), np.uint8)
    return out[:_encode_chunk_into(chunk, itemsize, rotate, out)].tobytes()


@njit(nogil=True, cache=True)
def _encode_chunk_into(chunk, itemsize, rotate, out):
    """A chunk's record into ``out``: its byte planes, each ``varint length | plane record``
    (:func:`strata.entropy.bytecoder.encode_into`); returns the record's length."""
    n = chunk.shape[0] // itemsize
    ps = np.empty((itemsize, n), np.uint8)
    planes.split_into(chunk, itemsize, rotate, ps)
    rec = np.empty(out.shape[0] // itemsize, np.uint8)
    pos = 0
    for k in range(itemsize):
        m = bytecoder.encode_into(ps[k], rec, 0)
        pos = tables._put_varint(out, pos, m)
        out[pos:pos + m] = rec[:m]
        pos += m
    return pos


#: Errors of :func:`_decode_chunk_into` beyond the byte coder's (``bytecoder.ERRORS``).
_CHUNK_ERRORS = {20: "malformed plane length in a chunk", 21: "trailing bytes in a chunk"}


@njit(nogil=True, cache=True)
def _decode_chunk_into(buf, pos, end, itemsize, rotate, out):
    """Decode the chunk record ``buf[pos:end]`` into ``out`` (uint8, the chunk's bytes);
    returns 0 or an error status (``bytecoder.ERRORS`` or ``_CHUNK_ERRORS``)."""
    ps = np.empty((itemsize, out.shape[0] // itemsize), np.uint8)
    head = buf[:end]
    for k in range(itemsize):
        m, pos = tables._get_varint(head, pos)
        if m < 0 or pos + m > end:
            return 20
        status = bytecoder.decode_from(buf, pos, pos + m, ps[k])
        if status:
            return status
        pos += m
    if pos != end:
        return 21
    planes.merge_into(ps, itemsize, rotate, out)
    return 0


def _decode_chunk(buf, n: int, itemsize: int, rotate: bool, out: np.ndarray | None = None) -> np.ndarray:
    """Decode a chunk record (bytes-like) of ``n`` bytes.

    Raises:
        CorruptStreamError: the record is malformed or inconsistent.
    """
    b = np.frombuffer(buf, np.uint8)
    out = np.empty(n, np.uint8) if out is None else out
    status = _decode_chunk_into(b, 0, b.size, itemsize, rotate, out)
    if status:
        raise CorruptStreamError(bytecoder.ERRORS.get(status) or _CHUNK_ERRORS[status])
    return out


def encode(data, dtype: str, base=None, workers: int | None = None) -> bytes:
    """Code the bytes of one dtype.

    Args:
        data: bytes-like, the elements' little-endian bytes.
        dtype: safetensors dtype name (``"BF16"``, ``"F32"``, ``"I64"``...), or ``"AUTO"`` to
            pick the element layout that codes a sample best (:func:`guess_dtype`); unknown
            names, or a length that is not a whole number of elements, are coded as bytes.
        base: optional bytes-like of the same length (the same tensors in an earlier snapshot):
            the chunks are XORed with it first, and decoding needs the same base.
        workers: threads (default: all cores).

    Raises:
        InvalidInputError: ``base`` has another length.
    """
    raw = _as_u8(data)
    if dtype == "AUTO":
        dtype = guess_dtype(raw)
    if dtype not in DTYPES or raw.size % DTYPES[dtype][0]:
        dtype = "U8"
    itemsize, rotate = DTYPES[dtype]
    if base is not None:
        b = _as_u8(base)
        if b.size != raw.size:
            raise InvalidInputError(f"base has {b.size} bytes, data {raw.size}")
    n_chunks = -(-raw.size // CHUNK_BYTES)

    def one(c):
        chunk = raw[c * CHUNK_BYTES:(c + 1) * CHUNK_BYTES]
        if base is not None:
            chunk = np.bitwise_xor(chunk, b[c * CHUNK_BYTES:(c + 1) * CHUNK_BYTES])
        return _encode_chunk(chunk, itemsize, rotate)

    coded = run_parallel(one, n_chunks, workers)
    w = Writer().varint(raw.size).u8(_CODES[dtype]).u8(1 if base is not None else 0)
    w.varint(CHUNK_BYTES).varint(n_chunks)
    for c in coded:
        w.varint(len(c)).u32(crc32(c))
    return b"".join([w.getvalue(), *coded])


#: Layouts tried by :func:`guess_dtype`.
GUESSES = ("U8", "BF16", "F32", "F64")
_SAMPLE = 1 << 16


def guess_dtype(raw: np.ndarray) -> str:
    """The layout among :data:`GUESSES` whose byte planes code a few 64 KiB samples of ``raw``
    smallest (for streams of unknown element type, such as serialized tensors)."""
    n = raw.size
    if n < 64:
        return "U8"
    starts = sorted({0, (n // 2) & ~7, max(0, n - _SAMPLE) & ~7})
    best, best_bits = "U8", None
    for name in GUESSES:
        itemsize, rotate = DTYPES[name]
        bits = 0.0
        for a in starts:
            sample = raw[a:a + _SAMPLE]
            sample = sample[: sample.size - sample.size % itemsize]
            bits += sum(bytecoder.estimate_bits(p) for p in planes.split(sample, itemsize, rotate))
        if best_bits is None or bits < best_bits * 0.98:
            best, best_bits = name, bits
    return best


def max_decoded_bytes(length: int, itemsize: int = 1) -> int:
    """Most bytes a well-formed segment record of ``length`` bytes (of elements of ``itemsize``
    bytes) can decode to: every chunk takes at least ``5 + 3 * itemsize`` bytes of the record
    and holds at most ``MAX_CHUNK_BYTES``."""
    return max(0, length - _MIN_HEAD) // _min_chunk(itemsize) * MAX_CHUNK_BYTES


def info(buf) -> dict:
    """Header fields of a segment record: ``n_bytes``, ``dtype``, ``delta``."""
    r = Reader(buf, "segment")
    n = r.varint()
    code = r.u8()
    if code >= len(_NAMES):
        raise CorruptStreamError(f"unknown dtype code {code} in a segment")
    return dict(n_bytes=n, dtype=_NAMES[code], delta=bool(r.u8() & 1))


def decode(buf, base=None, workers: int | None = None, out: np.ndarray | None = None,
           max_bytes: int | None = None) -> np.ndarray:
    """Decode a segment record to its bytes (uint8 array, into ``out`` if given).

    Every size in the record is checked before anything is allocated: the chunk size is at
    most ``MAX_CHUNK_BYTES``, the chunk count must fit in the record (at least ``5 + 3 *
    itemsize`` bytes a chunk) and match the announced length, which is at most ``max_bytes``;
    a chunk, and each of its byte planes, decodes to exactly its share of that length.

    Args:
        buf: the record (bytes-like).
        base: the base's bytes, required if the record is a delta (XOR).
        workers: threads (default: all cores).
        out: optional destination (uint8, ``n_bytes`` long).
        max_bytes: refuse records announcing more than this many bytes (default ``MAX_BYTES``).

    Raises:
        CorruptStreamError: checksum mismatch, truncated or inconsistent record.
        ResourceLimitError: the record announces more than ``max_bytes`` or chunks larger than
            ``MAX_CHUNK_BYTES``, or the memory cannot be allocated.
        InvalidInputError: a delta without its base.
    """
    mv = memoryview(buf).cast("B")
    r = Reader(mv, "segment")
    limit = MAX_BYTES if max_bytes is None else max_bytes
    n = r.varint()
    if n > limit:
        raise ResourceLimitError(f"segment of {n} bytes exceeds the limit of {limit}")
    code = r.u8()
    flags = r.u8()
    if code >= len(_NAMES) or flags > 1:
        raise CorruptStreamError("invalid segment header")
    itemsize, rotate = DTYPES[_NAMES[code]]
    chunk_bytes = r.varint()
    if chunk_bytes > MAX_CHUNK_BYTES:
        raise ResourceLimitError(f"segment chunks of {chunk_bytes} bytes exceed the limit of {MAX_CHUNK_BYTES}")
    n_chunks = r.varint(len(mv))
    if chunk_bytes == 0 or chunk_bytes % itemsize or n_chunks != -(-n // chunk_bytes) or n % itemsize:
        raise CorruptStreamError("inconsistent segment chunking")
    if n_chunks * _min_chunk(itemsize) > len(mv) - r.pos:
        raise CorruptStreamError(f"segment record of {len(mv)} bytes is too short for its {n_chunks} chunks")
    lens, crcs = [], []
    for _ in range(n_chunks):
        lens.append(r.varint(len(mv)))
        crcs.append(r.u32())
    offsets = np.concatenate([[r.pos], r.pos + np.cumsum(lens, dtype=np.int64)]).tolist()
    if offsets[-1] != len(mv):
        raise CorruptStreamError("segment length does not match its chunk index")
    if flags & 1:
        if base is None:
            raise InvalidInputError("this segment is stored as a delta: decoding needs its base")
        bb = _as_u8(base)
        if bb.size != n:
            raise CorruptStreamError(f"base has {bb.size} bytes, the delta {n}")
    if out is None:
        try:
            out = np.empty(n, np.uint8)
        except MemoryError as exc:
            raise ResourceLimitError(f"cannot allocate a segment of {n} bytes") from exc
    elif out.size != n:
        raise InvalidInputError(f"out has {out.size} bytes, the segment {n}")

    def one(c):
        a, b_ = offsets[c], offsets[c + 1]
        check_crc(mv[a:b_], crcs[c], f"chunk {c}")
        lo, hi = c * chunk_bytes, min(n, (c + 1) * chunk_bytes)
        if flags & 1:
            np.bitwise_xor(_decode_chunk(mv[a:b_], hi - lo, itemsize, rotate), bb[lo:hi], out=out[lo:hi])
        else:
            _decode_chunk(mv[a:b_], hi - lo, itemsize, rotate, out[lo:hi])

    run_parallel(one, n_chunks, workers)
    return out


__all__ = ["CHUNK_BYTES", "DTYPES", "MAX_BYTES", "MAX_CHUNK_BYTES", "decode", "encode", "info",
           "max_decoded_bytes"]
