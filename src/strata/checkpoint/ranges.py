"""Segments that lie in a file as byte ranges, read from several threads at once.

The chunk coders run on several threads, and each reads its own chunk from a
:class:`strata.container.Source` (which reads a file by position: no lock, no moving offset).
A :class:`Ranges` is a segment whose bytes lie in such a file as ranges (a safetensors file's
tensors of one dtype): a chunk is gathered into a per-thread buffer when it is coded, so the
segment is never in memory whole.
"""
from __future__ import annotations

import threading
from bisect import bisect_right

import numpy as np

from ..container import Source

_SCRATCH = threading.local()


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
