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
XOR with a base; bit 1: CRC-32C) | varint chunk bytes | varint n_chunks | n_chunks x (varint
length, u32 checksum) | [u32 CRC-32C of the head so far, with bit 1] | chunks``; a chunk is
``itemsize x (varint length | plane record)``. Records written now set bit 1 (format version
3 on): chunks are checked with CRC-32C (:func:`crc32c`, hardware-accelerated: 0.031 against zlib
CRC-32's 0.139 ns a byte on a 1 MiB chunk in cache, 0.06 against 0.14 streaming from memory, one
AMD EPYC core), the head carries its own, and order-0 planes of 64 KiB or more use 64 rANS
states (``bytecoder.ORDER0_64``, coded with SIMD; version 3 wrote eight, ``ORDER0_8``, still
read). Records without bit 1 (version 2) are checked with zlib's CRC-32 and decode as before.

Decoding a chunk writes its elements straight from the stream: planes stored raw are merged
from where they lie in the record, only entropy-coded planes go through a chunk-sized scratch.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np
from crc32c import crc32c as _crc32c
from numba import njit

from .. import varint
from ..container import Reader, Writer, crc32
from ..entropy import bytecoder
from ..errors import CorruptStreamError, InvalidInputError, ResourceLimitError
from . import planes

#: Bytes per chunk (a multiple of every element size).
CHUNK_BYTES = 1 << 20
#: Largest chunk a segment record may declare (the writer uses ``CHUNK_BYTES``): what the
#: few bytes of one chunk may expand to.
MAX_CHUNK_BYTES = 1 << 22
#: Largest segment :func:`decode` allocates unless its caller sets a smaller limit (1 TiB).
MAX_BYTES = 1 << 40
#: Bytes of each chunk length in a record head the encoder writes (a varint padded to this
#: width: 21 bits, enough for the longest record of a ``CHUNK_BYTES`` chunk).
_LENGTH_WIDTH = 3
#: Flag bits of a segment record.
DELTA, CRC32C = 1, 2
#: Fewest bytes of a record's head (``n_bytes``, dtype, flags, ``chunk_bytes``, ``n_chunks``),
#: and of one chunk: its index entry (varint length, checksum) and one constant byte plane
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


def _submit(k: int, fn, *args) -> Future:
    """``fn(*args)`` on the shared pool of ``k`` threads (made on first use, kept for the
    process); run here, at once, once the interpreter is shutting down: its pools then take no
    more work, and an ``atexit`` handler may still be writing a checkpoint."""
    with _POOLS_LOCK:
        pool = _POOLS.get(k)
        if pool is None:
            pool = _POOLS[k] = ThreadPoolExecutor(k, thread_name_prefix="strata-codec")
    try:
        return pool.submit(fn, *args)
    except RuntimeError:  # (cannot schedule new futures after interpreter shutdown)
        done = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:
            done.set_exception(exc)
        return done


def run_parallel(fn, n: int, workers: int | None = None) -> list:
    """``[fn(0), ..., fn(n - 1)]`` on ``workers`` threads (default: all cores; the chunk coders
    release the GIL): the calling thread and ``workers - 1`` of a shared pool, each taking the
    next item until none is left. The caller starts at once and the pool has one thread fewer
    to wake (a bf16 snapshot of 7 chunks decoded no faster on two threads than on one when both
    workers were pool threads woken after an idle spell); the pools live as long as the
    process, so a call does not pay for starting threads. An exception of ``fn`` is raised
    once every thread has stopped taking items."""
    w = min(n, workers or threads())
    if w <= 1:
        return [fn(c) for c in range(n)]
    out = [None] * n
    items = iter(range(n))  # (shared: next() on a range iterator is atomic under the GIL)
    failed = []

    def work():
        for c in items:
            if failed:
                return
            try:
                out[c] = fn(c)
            except BaseException as exc:
                failed.append(exc)
                return

    helpers = [_submit(w - 1, work) for _ in range(w - 1)]
    work()
    for h in helpers:
        h.result()
    if failed:
        raise failed[0]
    return out


def _as_u8(data) -> np.ndarray:
    return np.frombuffer(memoryview(data).cast("B"), np.uint8)


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of a bytes-like object, hardware-accelerated (SSE 4.2 / ARMv8
    instructions, through the ``crc32c`` package; the GIL is released for large buffers)."""
    return _crc32c(data)


def _encode_chunk(chunk: np.ndarray, itemsize: int, rotate: bool, out: np.ndarray) -> int:
    """A chunk's record into ``out`` (room: :func:`_max_chunk_record`); returns its length. The
    planes and the byte coder work in this thread's scratch."""
    n = chunk.size // itemsize
    ps = _scratch(chunk.size, "planes")[:chunk.size].reshape(itemsize, n)
    rec = _scratch(bytecoder.max_record_bytes(n), "plane record")
    work = _scratch(bytecoder.work_bytes(n), "work")
    return _encode_chunk_into(chunk, itemsize, rotate, out, ps, rec, work)


@njit(nogil=True, cache=True)
def _encode_chunk_into(chunk, itemsize, rotate, out, ps, rec, work):
    """A chunk's record into ``out``: its byte planes (split into ``ps``, ``(itemsize, n)``),
    each ``varint length | plane record`` (:func:`strata.entropy.bytecoder.encode_into`, coded
    into ``rec`` with ``work`` as its scratch); returns the record's length."""
    planes.split_into(chunk, itemsize, rotate, ps)
    pos = 0
    for k in range(itemsize):
        m = bytecoder.encode_into(ps[k], rec, 0, True, work)
        pos = varint.put(out, pos, m)
        bytecoder.copy_into(out[pos:], rec[:m])
        pos += m
    return pos


#: Errors of :func:`_decode_chunk_into` beyond the byte coder's (``bytecoder.ERRORS``).
_CHUNK_ERRORS = {20: "malformed plane length in a chunk", 21: "trailing bytes in a chunk"}


@njit(inline="always")
def _plane(buf, at, scratch, k, n):
    """Byte plane ``k`` (``n`` bytes): stored raw in ``buf`` from ``at``, else (``at < 0``)
    decoded into ``scratch``."""
    return buf[at:at + n] if at >= 0 else scratch[k * n:(k + 1) * n]


@njit(nogil=True, cache=True)
def _decode_chunk_into(buf, pos, end, itemsize, rotate, scratch, out):
    """Decode the chunk record ``buf[pos:end]`` into ``out`` (uint8, the chunk's bytes);
    returns 0 or an error status (``bytecoder.ERRORS`` or ``_CHUNK_ERRORS``).

    Raw planes are read where they lie in ``buf``; entropy-coded ones are decoded into
    ``scratch`` (uint8, at least the chunk's size); the merge reads both
    (:func:`strata.checkpoint.planes.merge4`)."""
    n = out.shape[0] // itemsize
    if itemsize == 1:
        m, pos = varint.get(buf, pos, end)
        if m < 0 or pos + m > end:
            return 20
        status = bytecoder.decode_from(buf, pos, pos + m, out)
        return status if status or pos + m == end else 21
    at = np.empty(itemsize, np.int64)
    for k in range(itemsize):
        m, pos = varint.get(buf, pos, end)
        if m < 0 or pos + m > end:
            return 20
        if m == n + 1 and buf[pos] == bytecoder.RAW:
            at[k] = pos + 1
        else:
            at[k] = -1
            status = bytecoder.decode_from(buf, pos, pos + m, scratch[k * n:(k + 1) * n])
            if status:
                return status
        pos += m
    if pos != end:
        return 21
    if itemsize == 2:
        planes.merge2(_plane(buf, at[0], scratch, 0, n), _plane(buf, at[1], scratch, 1, n), rotate, out)
    elif itemsize == 4:
        planes.merge4(_plane(buf, at[0], scratch, 0, n), _plane(buf, at[1], scratch, 1, n),
                      _plane(buf, at[2], scratch, 2, n), _plane(buf, at[3], scratch, 3, n), rotate, out)
    else:
        planes.merge8(_plane(buf, at[0], scratch, 0, n), _plane(buf, at[1], scratch, 1, n),
                      _plane(buf, at[2], scratch, 2, n), _plane(buf, at[3], scratch, 3, n),
                      _plane(buf, at[4], scratch, 4, n), _plane(buf, at[5], scratch, 5, n),
                      _plane(buf, at[6], scratch, 6, n), _plane(buf, at[7], scratch, 7, n), rotate, out)
    return 0


_SCRATCH = threading.local()
#: Fewest bytes of a block of :class:`_Records`.
RECORD_BLOCK = 1 << 20
#: Room per chunk beyond its bytes in a slot of :class:`_Ring` (a record rarely exceeds its
#: chunk; one that does not fit is copied to memory of its own).
RECORD_SLACK = 1 << 12


class _Ring:
    """``size`` slots of a chunk's record each, reused in turn: the record of chunk ``c`` is
    kept in slot ``c % size`` until it is written, which happens before chunk ``c + size`` is
    coded (see :func:`encode_to`)."""

    def __init__(self, size: int):
        self.slots = [np.empty(CHUNK_BYTES + RECORD_SLACK, np.uint8) for _ in range(size)]

    def keeper(self, c: int):
        """``keep(rec)`` of chunk ``c``: a view of a copy of ``rec`` (uint8) in its slot."""
        slot = self.slots[c % len(self.slots)]

        def keep(rec: np.ndarray) -> memoryview:
            dst = slot[:rec.size] if rec.size <= slot.size else np.empty(rec.size, np.uint8)
            dst[:] = rec
            return memoryview(dst)
        return keep


class _Records:
    """Where the encoder keeps chunk records: blocks of ``block`` bytes (or the record), each
    record copied in at the next free place of the current block (a lock guards only that
    place). The records are views of them, so what is held is the coded bytes and at most a
    block more. A new bytes object per record had the kernel map and zero new pages for each,
    and the page faults of many threads contend (fp32 encoding ran at 0.63 GiB/s on one thread,
    with minor faults over 2.3x the state's bytes; 1.3 GiB/s without)."""

    def __init__(self, block: int):
        self.lock = threading.Lock()
        self.block = max(RECORD_BLOCK, block)
        self.buf, self.at = np.empty(0, np.uint8), 0

    def keep(self, rec: np.ndarray) -> memoryview:
        """A view of a copy of ``rec`` (uint8) that lives as long as the view."""
        m = rec.size
        with self.lock:
            if self.buf.size - self.at < m:
                self.buf, self.at = np.empty(max(m, self.block), np.uint8), 0
            buf, at = self.buf, self.at
            self.at += m
        dst = buf[at:at + m]
        dst[:] = rec
        return memoryview(dst)


def _scratch(n: int, use: str = "decode") -> np.ndarray:
    """This thread's scratch for ``use`` (at least ``n`` bytes): entropy-coded planes of a
    decoded chunk, or the record of an encoded one, kept between chunks: a fresh one per
    chunk made the kernel map and zero new pages every time (up to 2 ns a byte of system time
    once encoding had churned the heap; encoding bf16 snapshot chunks 1.40 -> 1.02 ns a byte)."""
    s = getattr(_SCRATCH, use, None)
    if s is None or s.size < n:
        s = np.empty(n, np.uint8)
        setattr(_SCRATCH, use, s)
    return s


def _decode_chunk(buf, itemsize: int, rotate: bool, out: np.ndarray) -> None:
    """Decode a chunk record (bytes-like) into ``out`` (uint8, the chunk's bytes).

    Raises:
        CorruptStreamError: the record is malformed or inconsistent.
    """
    b = np.frombuffer(buf, np.uint8)
    status = _decode_chunk_into(b, 0, b.size, itemsize, rotate, _scratch(out.size), out)
    if status:
        raise CorruptStreamError(bytecoder.ERRORS.get(status) or _CHUNK_ERRORS[status])


def encode(data, dtype: str, base=None, workers: int | None = None) -> bytes:
    """Code the bytes of one dtype: the segment record, :func:`encode_parts` joined.

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
    return b"".join(encode_parts(lambda lo, hi: raw[lo:hi], raw.size, dtype, base, workers))


def encode_parts(read, n: int, dtype: str, base=None, workers: int | None = None) -> list:
    """The segment record of ``n`` bytes that ``read`` gives chunk by chunk, as the parts to
    write one after another (bytes-like): its head, then each chunk (views of buffers of an
    eighth of the segment). Arguments as :func:`encode_to`.

    Raises:
        InvalidInputError: ``base`` has another length.
    """
    parts: list = []
    head = encode_to(parts.append, read, n, dtype, base, workers)
    return [head, *parts]


def head_bytes(n: int) -> int:
    """Bytes of the head of the record of a segment of ``n`` bytes: its chunk lengths are
    written with a fixed width (:data:`_LENGTH_WIDTH`), so the head's size is known before the
    chunks are coded and a writer can leave room for it."""
    n_chunks = -(-n // CHUNK_BYTES)
    fields = _varint_bytes(n) + 2 + _varint_bytes(CHUNK_BYTES) + _varint_bytes(n_chunks)
    return fields + n_chunks * (_LENGTH_WIDTH + 4) + 4


def _varint_bytes(v: int) -> int:
    return max(1, -(-v.bit_length() // 7))


def encode_to(write, read, n: int, dtype: str, base=None, workers: int | None = None,
              stream: bool = False) -> bytes:
    """Code the segment of ``n`` bytes that ``read`` gives chunk by chunk, handing its chunk
    records to ``write`` in order; returns the record's head, which precedes the chunks in the
    record (:func:`head_bytes` long). The segment need not lie in memory whole (a safetensors
    file's tensors are read from the file one chunk at a time), nor, with ``stream``, its
    record: ``workers`` threads of a shared pool code the chunks while the calling thread
    writes them, at most two per thread coded ahead of the one written.

    Args:
        write: ``write(record)``, each chunk's record (bytes-like), in order; with ``stream``
            it is valid until ``write`` returns, else it lives as long as the view.
        read: ``read(lo, hi)`` gives bytes ``lo .. hi`` of the segment as a uint8 array; it is
            called from several threads at once, and the array it returns may be reused once
            the same thread calls it again.
        n: the segment's length in bytes.
        dtype: safetensors dtype name; an unknown name, or a length that is not a whole number
            of elements, is coded as bytes (``"U8"``).
        base: optional bytes-like of ``n`` bytes to XOR the segment with (see :func:`encode`).
        workers: threads (default: all cores).
        stream: write each record as soon as it and those before it are coded (else once all
            are, from buffers of an eighth of the segment each).

    Raises:
        InvalidInputError: ``base`` has another length.
    """
    if dtype not in DTYPES or n % DTYPES[dtype][0]:
        dtype = "U8"
    itemsize, rotate = DTYPES[dtype]
    if base is not None:
        b = _as_u8(base)
        if b.size != n:
            raise InvalidInputError(f"base has {b.size} bytes, data {n}")
    n_chunks = -(-n // CHUNK_BYTES)

    def one(c, keep):
        lo, hi = c * CHUNK_BYTES, min(n, (c + 1) * CHUNK_BYTES)
        chunk = read(lo, hi)
        if base is not None:
            chunk = np.bitwise_xor(chunk, b[lo:hi], out=_scratch(hi - lo, "delta")[:hi - lo])
        out = _scratch(_max_chunk_record(hi - lo, itemsize), "encode")
        coded = keep(out[:_encode_chunk(chunk, itemsize, rotate, out)])
        return coded, crc32c(coded)

    w = Writer().varint(n).u8(_CODES[dtype]).u8(CRC32C | (DELTA if base is not None else 0))
    w.varint(CHUNK_BYTES).varint(n_chunks)

    def emit(result):
        coded, check = result
        w.varint(len(coded), _LENGTH_WIDTH).u32(check)
        write(coded)

    if not stream:
        records = _Records(-(-n // 8))
        for result in run_parallel(lambda c: one(c, records.keep), n_chunks, workers):
            emit(result)
    else:
        k = workers or threads()
        ring, pending = _Ring(min(n_chunks, 2 * k)), deque()
        try:
            for c in range(n_chunks):
                if len(pending) == len(ring.slots):  # (chunk c takes the slot of the oldest: written first)
                    emit(pending.popleft().result())
                pending.append(_submit(k, one, c, ring.keeper(c)))
            while pending:
                emit(pending.popleft().result())
        finally:
            wait(pending)  # (after an error: no thread still codes into the ring)
    head = w.getvalue()
    return head + crc32c(head).to_bytes(4, "little")


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
    """Header fields of a segment record: ``n_bytes``, ``dtype``, ``delta`` (bool) and
    ``crc32c`` (bool: flag bit 1, a version-3 record).

    Raises:
        CorruptStreamError: the record is too short or holds an unknown dtype code.
    """
    r = Reader(buf, "segment")
    n = r.varint()
    code = r.u8()
    if code >= len(_NAMES):
        raise CorruptStreamError(f"unknown dtype code {code} in a segment")
    flags = r.u8()
    return dict(n_bytes=n, dtype=_NAMES[code], delta=bool(flags & DELTA), crc32c=bool(flags & CRC32C))


def _max_chunk_record(chunk_bytes: int, itemsize: int) -> int:
    """Longest record a chunk of ``chunk_bytes`` takes: what the encoder reserves for it."""
    return itemsize * (bytecoder.max_record_bytes(chunk_bytes // itemsize) + 10)


#: Bytes that hold a record head's fields before its chunk index (five varints or bytes).
_HEAD_PREFIX = 32


class Record:
    """A segment record read on demand, chunk by chunk: its head is read and checked here,
    each chunk is read when it is decoded, so a record in a file is never copied whole.

    Checks (before anything is allocated): ``n_bytes`` at most ``max_bytes``, a chunk size of
    at most ``MAX_CHUNK_BYTES``, a chunk count that fits in ``length`` bytes (at least ``5 + 3
    * itemsize`` bytes a chunk) and matches ``n_bytes``, no chunk longer than the encoder ever
    writes for a chunk (``3 x chunk_bytes`` and its tables), chunk lengths adding up to
    ``length``; with flag ``CRC32C``, the head's own CRC-32C.

    Args:
        read: ``read(offset, n)`` gives bytes ``offset .. offset + n`` of the record (bytes-like;
            called from several threads at once by :meth:`decode`).
        length: the record's length in bytes.
        max_bytes: refuse a record announcing more than this many bytes (default ``MAX_BYTES``).

    Attributes:
        n_bytes: decoded length; ``dtype``: dtype name, ``itemsize`` its element size;
        delta: an XOR delta (flag bit 0); ``crc32c``: checked with CRC-32C (flag bit 1,
        version 3 on); ``head_crc``: the head's CRC-32C (``None`` without bit 1);
        chunk_bytes: decoded bytes per chunk; ``offsets``: where each chunk starts in the
        record, then the record's length; ``checks``: each chunk's checksum.

    Raises:
        CorruptStreamError: a malformed, inconsistent or corrupted head.
        ResourceLimitError: more than ``max_bytes`` announced, or chunks beyond
            ``MAX_CHUNK_BYTES``.
    """

    def __init__(self, read, length: int, max_bytes: int | None = None):
        self._read, self.length = read, length
        first = memoryview(read(0, min(length, _HEAD_PREFIX))).cast("B")
        head_len = len(first)
        try:
            r = Reader(first, "segment")
            r.varint(), r.u8(), r.u8(), r.varint()
            head_len = min(length, r.pos + 14 * r.varint(length) + 4)  # (varint and u32 a chunk, head CRC)
        except CorruptStreamError:
            pass  # (the parse below says why)
        mv = first if head_len <= len(first) else memoryview(read(0, head_len)).cast("B")
        self._parse(mv, MAX_BYTES if max_bytes is None else max_bytes)

    def _parse(self, mv: memoryview, limit: int) -> None:
        length = self.length
        r = Reader(mv, "segment")
        n = r.varint()
        if n > limit:
            raise ResourceLimitError(f"segment of {n} bytes exceeds the limit of {limit}")
        code = r.u8()
        flags = r.u8()
        if code >= len(_NAMES) or flags > DELTA | CRC32C:
            raise CorruptStreamError("invalid segment header")
        itemsize, rotate = DTYPES[_NAMES[code]]
        chunk_bytes = r.varint()
        if chunk_bytes > MAX_CHUNK_BYTES:
            raise ResourceLimitError(f"segment chunks of {chunk_bytes} bytes exceed the limit of {MAX_CHUNK_BYTES}")
        n_chunks = r.varint(length)
        if chunk_bytes == 0 or chunk_bytes % itemsize or n_chunks != -(-n // chunk_bytes) or n % itemsize:
            raise CorruptStreamError("inconsistent segment chunking")
        if n_chunks * _min_chunk(itemsize) > length - r.pos:
            raise CorruptStreamError(f"segment record of {length} bytes is too short for its {n_chunks} chunks")
        lens, checks = [], []
        for _ in range(n_chunks):
            lens.append(r.varint(length))
            checks.append(r.u32())
        if lens and max(lens) > _max_chunk_record(chunk_bytes, itemsize):
            raise CorruptStreamError(f"a chunk of {max(lens)} bytes in a segment record of {chunk_bytes}-byte chunks")
        head_crc = None
        if flags & CRC32C:
            head_crc = r.u32()
            if crc32c(mv[:r.pos - 4]) != head_crc:
                raise CorruptStreamError("checksum mismatch in the segment head: the stream is corrupted")
        offsets = np.concatenate([[r.pos], r.pos + np.cumsum(lens, dtype=np.int64)]).tolist()
        if offsets[-1] != length:
            raise CorruptStreamError("segment length does not match its chunk index")
        self.n_bytes, self.dtype, self.itemsize, self._rotate = n, _NAMES[code], itemsize, rotate
        self.delta, self.crc32c, self.head_crc = bool(flags & DELTA), bool(flags & CRC32C), head_crc
        self.chunk_bytes, self.offsets, self.checks = chunk_bytes, offsets, checks

    def decode(self, base=None, workers: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The decoded bytes (uint8 array of ``n_bytes``, into ``out`` if given), each chunk
        checked against its checksum (CRC-32C, or zlib's CRC-32 without flag ``CRC32C``)
        before it is decoded; chunks are read and decoded in parallel, each into its place.

        Memory: the output, and per thread one chunk record and a chunk of scratch (the
        record is never held whole). ``out`` may be ``base`` itself: a delta is then
        applied in place (each chunk is decoded into scratch, then XORed into ``out``).

        Args:
            base: the base's bytes, required if the record is a delta (XOR).
            workers: threads (default: all cores).
            out: optional destination (uint8, ``n_bytes`` long).

        Raises:
            CorruptStreamError: checksum mismatch, truncated or inconsistent chunk.
            ResourceLimitError: the memory cannot be allocated.
            InvalidInputError: a delta without its base, or ``out`` of another length.
        """
        n, offsets = self.n_bytes, self.offsets
        if self.delta:
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
        check = crc32c if self.crc32c else crc32

        def one(c):
            rec = self._read(offsets[c], offsets[c + 1] - offsets[c])
            if check(rec) != self.checks[c]:
                raise CorruptStreamError(f"checksum mismatch in chunk {c}: the stream is corrupted")
            lo, hi = c * self.chunk_bytes, min(n, (c + 1) * self.chunk_bytes)
            if self.delta:
                chunk = _scratch(hi - lo, "delta")[:hi - lo]
                _decode_chunk(rec, self.itemsize, self._rotate, chunk)
                np.bitwise_xor(chunk, bb[lo:hi], out=out[lo:hi])
            else:
                _decode_chunk(rec, self.itemsize, self._rotate, out[lo:hi])

        run_parallel(one, len(self.checks), workers)
        return out

    @classmethod
    def from_bytes(cls, buf, max_bytes: int | None = None) -> Record:
        """The record held in the bytes-like ``buf`` (read without copying)."""
        mv = memoryview(buf).cast("B")
        return cls(lambda offset, n: mv[offset:offset + n], len(mv), max_bytes)


def head_checksum(buf) -> int | None:
    """The CRC-32C a version-3 segment record's head carries (checked against the head), or
    ``None`` for a version-2 record (see :class:`Record` for the checks and errors)."""
    return Record.from_bytes(buf).head_crc


def decode(buf, base=None, workers: int | None = None, out: np.ndarray | None = None,
           max_bytes: int | None = None) -> np.ndarray:
    """Decode a segment record held in memory to its bytes (uint8 array, into ``out`` if
    given): :class:`Record` (its checks, before anything is allocated) and
    :meth:`Record.decode`.

    Args:
        buf: the record (bytes-like).
        base: the base's bytes, required if the record is a delta (XOR).
        workers: threads (default: all cores).
        out: optional destination (uint8, ``n_bytes`` long; may be ``base``).
        max_bytes: refuse records announcing more than this many bytes (default ``MAX_BYTES``).

    Raises:
        CorruptStreamError: checksum mismatch, truncated or inconsistent record.
        ResourceLimitError: the record announces more than ``max_bytes`` or chunks larger than
            ``MAX_CHUNK_BYTES``, or the memory cannot be allocated.
        InvalidInputError: a delta without its base.
    """
    return Record.from_bytes(buf, max_bytes).decode(base, workers, out)


__all__ = ["CHUNK_BYTES", "CRC32C", "DELTA", "DTYPES", "MAX_BYTES", "MAX_CHUNK_BYTES", "Record", "crc32c", "decode",
           "encode", "encode_parts", "encode_to", "head_bytes", "head_checksum", "info", "max_decoded_bytes"]
