"""Bytes read by position, from several threads at once: a file (or a buffer) and segments
that lie in it as byte ranges.

The chunk coders run on several threads, and each reads its own chunk: :class:`Positional`
reads with ``os.pread``/``os.preadv`` (the file offset is never moved, so reads need no lock;
a lock and ``seek`` where the platform has no ``pread``). A :class:`Ranges` is a segment whose
bytes lie in such a file as ranges (a safetensors file's tensors of one dtype): a chunk is
gathered into a per-thread buffer when it is coded, so the segment is never in memory whole.
"""
from __future__ import annotations

import os
import threading
from bisect import bisect_right

import numpy as np

from ..atomic import open_regular
from ..errors import TruncatedStreamError


class Positional:
    """Random access to bytes in memory or in a file, safe from several threads at once.

    Args:
        source: a bytes-like object, or a path (opened here, closed by :meth:`close`).

    Attributes:
        size: the length in bytes.

    Raises:
        InvalidInputError: a path to a directory, FIFO, socket or device
            (:func:`strata.atomic.open_regular`).
        OSError: a path that cannot be opened.
    """

    def __init__(self, source):
        self._mem = self._file = None
        self._lock = threading.Lock()
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._mem = memoryview(source).cast("B")
            self.size = len(self._mem)
        else:
            self._file = open_regular(source)
            self.size = os.fstat(self._file.fileno()).st_size

    def read(self, offset: int, n: int, what: str = "stream"):
        """``n`` bytes at ``offset`` (bytes, or a memoryview of an in-memory source).

        Raises:
            TruncatedStreamError: fewer than ``n`` bytes are there.
        """
        self._check(offset, n, what)
        if self._mem is not None:
            return self._mem[offset:offset + n]
        if not hasattr(os, "pread"):  # (Windows)
            with self._lock:
                self._file.seek(offset)
                data = self._file.read(n)
        else:
            data = os.pread(self._file.fileno(), n, offset)
            if 0 < len(data) < n:  # (one read returns at most about 2 GiB)
                parts = [data]
                while parts[-1] and sum(map(len, parts)) < n:
                    got = sum(map(len, parts))
                    parts.append(os.pread(self._file.fileno(), n - got, offset + got))
                data = b"".join(parts)
        if len(data) != n:
            raise TruncatedStreamError(f"stream truncated while reading {what}")
        return data

    def read_into(self, offset: int, out: np.ndarray, what: str = "stream") -> None:
        """Fill ``out`` (uint8, contiguous) with the bytes at ``offset``.

        Raises:
            TruncatedStreamError: fewer than ``out.size`` bytes are there.
        """
        n = out.size
        if self._mem is None and hasattr(os, "preadv"):
            self._check(offset, n, what)
            got = 0
            while got < n:  # (one read returns at most about 2 GiB)
                k = os.preadv(self._file.fileno(), [out[got:]], offset + got)
                if k == 0:
                    raise TruncatedStreamError(f"stream truncated while reading {what}")
                got += k
        else:
            out[:] = np.frombuffer(self.read(offset, n, what), np.uint8)

    def _check(self, offset: int, n: int, what: str) -> None:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise TruncatedStreamError(f"stream truncated: {what} needs bytes {offset}..{offset + n}, "
                                       f"the stream has {self.size}")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_SCRATCH = threading.local()


class Ranges:
    """A run of bytes that lies in a :class:`Positional` source as ranges, read on demand.

    Args:
        source: where the bytes are.
        ranges: ``(offset, length)`` pairs, in order.

    Attributes:
        size: the total length in bytes.
    """

    def __init__(self, source: Positional, ranges: list[tuple[int, int]]):
        self.source = source
        self.ranges = [r for r in ranges if r[1]]
        self._starts = np.cumsum([0] + [n for _, n in self.ranges]).tolist()
        self.size = self._starts[-1]

    @classmethod
    def join(cls, parts: list[Ranges]) -> Ranges:
        """The bytes of ``parts`` (of one source) one after another."""
        return cls(parts[0].source if parts else None, [r for p in parts for r in p.ranges])

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Bytes ``lo .. hi`` (a uint8 array this thread reuses at its next call)."""
        out = getattr(_SCRATCH, "buf", None)
        if out is None or out.size < hi - lo:
            out = _SCRATCH.buf = np.empty(max(hi - lo, 1 << 20), np.uint8)
        out = out[:hi - lo]
        k, pos = bisect_right(self._starts, lo) - 1, lo
        while pos < hi:
            offset, n = self.ranges[k]
            a = pos - self._starts[k]
            b = min(n, hi - self._starts[k])
            self.source.read_into(offset + a, out[pos - lo:pos - lo + b - a], "a tensor")
            pos += b - a
            k += 1
        return out
