"""Segments whose bytes lie elsewhere, in parts, read chunk by chunk from several threads at once.

The chunk coders run on several threads, and each reads its own chunk (``read(lo, hi)``). A
:class:`Ranges` is a segment whose bytes lie in a file as ranges (a safetensors file's tensors of
one dtype), read from a :class:`strata.container.Source` (by position: no lock, no moving
offset); a :class:`Pieces` is one whose bytes are the caller's arrays (the tensors of a state
being saved). A chunk within one part is a view of it; one across parts is gathered into a
per-thread buffer when it is coded, so the segment is never copied whole.
"""
from __future__ import annotations

import threading
from bisect import bisect_right

import numpy as np

from ..container import Source

_SCRATCH = threading.local()


def _scratch(n: int) -> np.ndarray:
    """This thread's gather buffer, ``n`` bytes of it (at least 1 MiB kept, reused at its next call)."""
    out = getattr(_SCRATCH, "buf", None)
    if out is None or out.size < n:
        out = _SCRATCH.buf = np.empty(max(n, 1 << 20), np.uint8)
    return out[:n]


class Ranges:
    """A run of bytes that lies in a :class:`~strata.container.Source` as ranges, read on demand.

    Args:
        source: where the bytes are.
        ranges: ``(offset, length)`` pairs, in order.

    Attributes:
        size: the total length in bytes.
    """

    def __init__(self, source: Source, ranges: list[tuple[int, int]]):
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
        out = _scratch(hi - lo)
        k, pos = bisect_right(self._starts, lo) - 1, lo
        while pos < hi:
            offset, n = self.ranges[k]
            a = pos - self._starts[k]
            b = min(n, hi - self._starts[k])
            self.source.read_into(offset + a, out[pos - lo:pos - lo + b - a], "a tensor")
            pos += b - a
            k += 1
        return out


class Pieces:
    """A run of bytes that lies in memory as uint8 arrays, one after another, read on demand.

    Args:
        parts: uint8 arrays (1-D), in order.

    Attributes:
        size: the total length in bytes.
    """

    def __init__(self, parts: list[np.ndarray]):
        self.parts = [p for p in parts if p.size]
        self._starts = np.cumsum([0] + [p.size for p in self.parts]).tolist()
        self.size = self._starts[-1]

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Bytes ``lo .. hi``: a view of a part, or a uint8 array this thread reuses at its next
        call."""
        if hi <= lo:
            return np.empty(0, np.uint8)
        k = bisect_right(self._starts, lo) - 1
        if hi <= self._starts[k + 1]:  # (within one part)
            return self.parts[k][lo - self._starts[k]:hi - self._starts[k]]
        out, pos = _scratch(hi - lo), lo
        while pos < hi:
            a = pos - self._starts[k]
            b = min(self.parts[k].size, hi - self._starts[k])
            out[pos - lo:pos - lo + b - a] = self.parts[k][a:b]
            pos += b - a
            k += 1
        return out
