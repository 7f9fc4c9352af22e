"""The strata container: preamble, checksummed header, then sections read on demand.

Layout (all integers little-endian; see ``docs/format.md``)::

    magic  b"STRA"          4 bytes
    version                 u8   (FORMAT_VERSION)
    kind                    u8   (KIND_LOSSY, ...)
    header length H         u32
    header                  H bytes, kind-specific
    header CRC-32           u32  over everything before it
    sections ...            kind-specific, each with its own CRC-32

A :class:`Source` reads a stream from bytes, a path or a binary file object by offset, so a
reader fetches the header and then only the sections it needs. Every length read from a
stream is checked against the bytes that are actually there before anything is allocated.
Files are written atomically by :mod:`strata.atomic`.
"""
from __future__ import annotations

import io
import os
import struct
import threading
import zlib
from typing import BinaryIO

import numpy as np

from .atomic import open_regular
from .checksum import crc32_parts
from .errors import CorruptStreamError, FormatError, ResourceLimitError, TruncatedStreamError
from .varint import put_many

MAGIC = b"STRA"
#: Version written. Version 3 (strata 0.4): lossy levels coded with interleaved rANS states and
#: contexts off the decoder's serial chain; checkpoint segments checked with CRC-32C. Version 4
#: (strata 0.5): checkpoint byte planes with 64 rANS states (SIMD decoding); lossy streams as in 3.
FORMAT_VERSION = 4
#: Versions read (docs/format.md, "Versions").
READABLE_VERSIONS = (2, 3, 4)
KIND_LOSSY = 1
KIND_CHECKPOINT = 2
#: Several lossy streams of one snapshot (:mod:`strata.enhance.fields`).
KIND_FIELDS = 3
#: An array in precision layers (:mod:`strata.lossy.layers`): lossy streams at decreasing bounds.
KIND_LAYERS = 4
KIND_NAMES = {KIND_LOSSY: "a lossy array", KIND_CHECKPOINT: "a checkpoint", KIND_FIELDS: "a field set",
              KIND_LAYERS: "an array in precision layers"}

_PREAMBLE = struct.Struct("<4sBBI")
#: Bytes of the preamble (magic, version, kind, header length).
PREAMBLE_BYTES = _PREAMBLE.size
#: Largest header strata accepts (a header holds sizes, not data).
MAX_HEADER = 1 << 24

SourceLike = bytes | bytearray | memoryview | str | os.PathLike | BinaryIO


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def check_crc(data, expected: int, what: str) -> None:
    """Raise :class:`CorruptStreamError` unless ``crc32(data) == expected``."""
    if crc32(data) != expected:
        raise CorruptStreamError(f"checksum mismatch in {what}: the stream is corrupted")


def checked_body(data, what: str, min_body: int = 0) -> memoryview:
    """The body of a section that ends with the CRC-32 of the rest (``data``: bytes-like).

    Raises:
        CorruptStreamError: fewer than ``min_body`` + 4 bytes, or a checksum mismatch.
    """
    data = memoryview(data).cast("B")
    if len(data) < min_body + 4:
        raise CorruptStreamError(f"{what} of {len(data)} bytes is too short")
    body = data[:-4]
    check_crc(body, struct.unpack("<I", data[-4:])[0], what)
    return body


class Source:
    """Random access to a stream held in memory, in a file, or behind a file object, safe from
    several threads at once (the checkpoint coders read their chunks in parallel).

    A file opened here is read with ``os.pread``/``os.preadv`` (the file offset never moves, so
    reads need no lock); a file object, or a platform without ``pread``, is read under a lock
    with ``seek``.

    Args:
        source: ``bytes``-like object, a path, or a binary file object opened for reading
            (seekable). A path is opened here (:func:`strata.atomic.open_regular`) and closed by
            :meth:`close`.

    Attributes:
        size: the stream's length in bytes (a file object's: from its position at the call).
        bytes_read: bytes read so far through this source and its parts (:meth:`part`), for
            the accounting of a read (:meth:`strata.lossy.LossyReader.bytes_for`).

    Raises:
        TypeError: ``source`` is none of these.
        InvalidInputError: a path to a directory, FIFO, socket or device.
        OSError: a path that cannot be opened.
    """

    def __init__(self, source: SourceLike):
        self._own = self._f = self._mem = None
        self._base = 0
        self._lock = threading.Lock()
        self._root = self
        self._pread = False
        self.bytes_read = 0
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._mem = memoryview(source).cast("B")
            self.size = len(self._mem)
        elif isinstance(source, (str, os.PathLike)):
            self._f = self._own = open_regular(source)
            self.size = os.fstat(self._f.fileno()).st_size
            self._pread = hasattr(os, "preadv")
        elif hasattr(source, "read") and hasattr(source, "seek"):
            self._f = source
            self._base = source.tell()
            self.size = source.seek(0, io.SEEK_END) - self._base
        else:
            raise TypeError(f"cannot read a strata stream from {type(source).__name__}")

    def _check(self, offset: int, n: int, what: str) -> None:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise TruncatedStreamError(f"stream truncated: {what} needs bytes "
                                       f"{offset}..{offset + n}, the stream has {self.size}")

    def _positional(self) -> bool:
        return self._pread

    def part(self, offset: int, n: int, what: str = "section") -> Source:
        """The ``n`` bytes at ``offset`` as a source of their own (offsets from 0), reading
        through this one's memory or file (which its :meth:`close` leaves open).

        Raises:
            TruncatedStreamError: fewer than ``n`` bytes are there.
        """
        self._check(offset, n, what)
        out = Source.__new__(Source)
        out._own, out._f, out._lock, out._root, out._pread = None, self._f, self._lock, self._root, self._pread
        out._mem = self._mem[offset:offset + n] if self._mem is not None else None
        out._base = self._base + offset
        out.size, out.bytes_read = n, 0
        return out

    def _count(self, n: int) -> None:
        self._root.bytes_read += n  # (statistics: threads reading at once may undercount)

    @property
    def in_memory(self) -> bool:
        """Whether the bytes are held in memory (bytes-like source)."""
        return self._mem is not None

    def read(self, offset: int, n: int, what: str = "stream"):
        """``n`` bytes at ``offset`` (a memoryview for in-memory sources, else bytes).

        Raises:
            TruncatedStreamError: fewer than ``n`` bytes are there.
        """
        self._check(offset, n, what)
        self._count(n)
        if self._mem is not None:
            return self._mem[offset:offset + n]
        if self._positional():
            data = os.pread(self._f.fileno(), n, self._base + offset)
            if 0 < len(data) < n:  # (one read returns at most about 2 GiB)
                out = bytearray(n)
                out[:len(data)] = data
                self.read_into(offset + len(data), np.frombuffer(out, np.uint8)[len(data):], what)
                self._count(len(data) - n)  # (counted twice over)
                data = bytes(out)
        else:
            with self._lock:
                self._f.seek(self._base + offset)
                data = self._f.read(n)
        if len(data) != n:
            raise TruncatedStreamError(f"stream truncated while reading {what}")
        return data

    def read_into(self, offset: int, out: np.ndarray, what: str = "stream") -> None:
        """Fill ``out`` (a contiguous uint8 array) with the bytes at ``offset``, without an
        intermediate copy for a file opened here.

        Raises:
            TruncatedStreamError: fewer than ``out.size`` bytes are there.
        """
        n = out.size
        if not self._positional():
            out[:] = np.frombuffer(self.read(offset, n, what), np.uint8)
            return
        self._check(offset, n, what)
        self._count(n)
        got = 0
        while got < n:  # (one read returns at most about 2 GiB)
            k = os.preadv(self._f.fileno(), [out[got:]], self._base + offset + got)
            if k == 0:
                raise TruncatedStreamError(f"stream truncated while reading {what}")
            got += k

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pack(kind: int, header: bytes, sections: list) -> bytes:
    """Assemble a stream from a header and already checksummed sections."""
    pre = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, kind, len(header))
    crc = struct.pack("<I", crc32(pre + header))
    return b"".join([pre, header, crc, *sections])


def unpack_header(src: Source, kind: int) -> tuple[memoryview | bytes, int]:
    """Validate the preamble and header checksum; return ``(header, offset of sections)``.

    Raises:
        FormatError: not a strata stream, another kind, or an unsupported version.
        TruncatedStreamError, CorruptStreamError: as their names say.
    """
    if src.size < _PREAMBLE.size:
        raise TruncatedStreamError(f"stream of {src.size} bytes is too short for a strata stream")
    pre = bytes(src.read(0, _PREAMBLE.size, "preamble"))
    magic, version, got_kind, hlen = _PREAMBLE.unpack(pre)
    if magic != MAGIC:
        raise FormatError("not a strata stream (bad magic bytes)")
    if version not in READABLE_VERSIONS:
        raise FormatError(f"strata format version {version} is not supported (this strata reads versions "
                          f"{', '.join(map(str, READABLE_VERSIONS))})")
    if got_kind != kind:
        raise FormatError(f"stream holds {KIND_NAMES.get(got_kind, f'kind {got_kind}')}, expected "
                          f"{KIND_NAMES[kind]}" + (" (read it with strata.enhance.decompress_fields)"
                                                   if got_kind == KIND_FIELDS else ""))
    if hlen > MAX_HEADER:
        raise ResourceLimitError(f"header length {hlen} exceeds {MAX_HEADER}")
    header = src.read(_PREAMBLE.size, hlen, "header")
    (crc,) = struct.unpack("<I", bytes(src.read(_PREAMBLE.size + hlen, 4, "header checksum")))
    check_crc(bytes(pre) + bytes(header), crc, "header")
    return header, _PREAMBLE.size + hlen + 4


def stream_kind(src: Source) -> int | None:
    """The kind byte of a stream that starts with strata's magic bytes (None otherwise): which
    reader opens it. Nothing is checked beyond the magic (the reader checks the rest)."""
    if src.size < _PREAMBLE.size:
        return None
    magic, _, kind, _ = _PREAMBLE.unpack(bytes(src.read(0, _PREAMBLE.size, "preamble")))
    return kind if magic == MAGIC else None


def stream_version(src: Source) -> int:
    """The format version of a stream whose header :func:`unpack_header` accepted."""
    return src.read(4, 1, "preamble")[0]


class Writer:
    """Little-endian byte builder with varints."""

    def __init__(self):
        self.buf = bytearray()

    def u8(self, v: int) -> Writer:
        self.buf.append(v)
        return self

    def u32(self, v: int) -> Writer:
        self.buf += struct.pack("<I", v)
        return self

    def f32(self, v: float) -> Writer:
        self.buf += struct.pack("<f", v)
        return self

    def f64(self, v: float) -> Writer:
        self.buf += struct.pack("<d", v)
        return self

    def varint(self, v: int, width: int = 1) -> Writer:
        """``v`` as a varint of at least ``width`` bytes (continuation bytes of zero bits pad
        it: every reader accepts them), so that a field written before its value is known
        keeps its place."""
        if v < 0:
            raise ValueError("varint must be non-negative")
        while v >= 0x80 or width > 1:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
            width -= 1
        self.buf.append(v)
        return self

    def varints(self, values) -> Writer:
        """The varints of ``values`` (integers >= 0, below ``2**56``) one after another."""
        out = put_many(np.asarray(values, np.int64))
        if out is None:
            raise ValueError("varints must be >= 0 and below 2**56")
        return self.raw(out.tobytes())

    def crcs(self, data, offsets) -> Writer:
        """The CRC-32 of each part of ``data`` (:func:`crc32_parts`), each as :meth:`u32`."""
        return self.raw(crc32_parts(data, offsets).astype("<u4").tobytes())

    def raw(self, b) -> Writer:
        self.buf += b
        return self

    def blob(self, b) -> Writer:
        """Length-prefixed bytes."""
        return self.varint(len(b)).raw(b)

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Bounds-checked reader matching :class:`Writer`; errors name ``what``."""

    def __init__(self, buf, what: str = "header"):
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.pos = 0
        self.what = what

    def _take(self, n: int):
        if self.pos + n > len(self.buf):
            raise CorruptStreamError(f"{self.what} ends early")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self) -> int:
        return self._take(1)[0]

    def u32(self) -> int:
        return struct.unpack("<I", self._take(4))[0]

    def f32(self) -> float:
        return struct.unpack("<f", self._take(4))[0]

    def f64(self) -> float:
        return struct.unpack("<d", self._take(8))[0]

    def varint(self, limit: int = 1 << 62) -> int:
        v = shift = 0
        while True:
            b = self._take(1)[0]
            v |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptStreamError(f"malformed varint in {self.what}")
        if v > limit:
            raise CorruptStreamError(f"value {v} in {self.what} exceeds {limit}")
        return v

    def raw(self, n: int):
        return self._take(n)

    def blob(self, limit: int = 1 << 40):
        return self._take(self.varint(limit))

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise CorruptStreamError(f"{len(self.buf) - self.pos} unexpected trailing bytes in {self.what}")
