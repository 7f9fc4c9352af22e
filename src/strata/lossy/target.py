"""The target section of a lossy stream: the quality or size a compression was asked for, and
what it reached.

``strata.compress(array, target_psnr=... | target_ratio=... | target_ssim=...)`` searches for the
error bound that meets the target; the stream records the request and the outcome in this
section (lossy header extension flag 16, :func:`strata.lossy.codec.with_target`), which
``strata info`` and :attr:`strata.lossy.LossyReader.target` show. It is information only: the
decoder never needs it.

Layout (``docs/format.md``, section 9), 23 bytes, integers little-endian::

    u8  version (1)
    u8  metric code: 1 "psnr", 2 "ratio", 3 "ssim"
    f64 target    -- what was asked
    f64 achieved  -- what the chosen stream reached (measured by the encoder)
    u8  compressions: real compressions the search ran (1..255)
    u32 CRC-32 of the 19 bytes above

Values, by metric (the same on construction and on read):

* ``"psnr"``: peak signal-to-noise ratio in dB over the valid values (:func:`strata.metrics.psnr`);
  ``target`` finite, ``achieved`` finite or ``+inf`` (a lossless result: every valid value
  decoded exactly). ``-inf`` and NaN are refused.
* ``"ratio"``: compression ratio, uncompressed bytes over stream bytes (dimensionless);
  ``target`` and ``achieved`` finite and > 0.
* ``"ssim"``: structural similarity index (dimensionless); ``target`` and ``achieved``
  finite and in ``[-1, 1]`` (a search that computes 1 + rounding must clip it).
"""
from __future__ import annotations

import math
import numbers
import operator
import struct
from dataclasses import dataclass

from ..container import Reader, Writer, checked_body, crc32
from ..errors import CorruptStreamError, InvalidInputError

VERSION = 1
#: Metric names by code (the code is what the stream holds).
METRICS = {1: "psnr", 2: "ratio", 3: "ssim"}
METRIC_CODES = {name: code for code, name in METRICS.items()}
#: Unit of each metric, for display (empty: dimensionless).
UNITS = {"psnr": "dB", "ratio": "", "ssim": ""}
#: Most compressions a search may record (the field is a u8; 0 is refused).
MAX_COMPRESSIONS = 255
#: Bytes of the section: version, metric, target, achieved, compressions, CRC-32.
SIZE = 1 + 1 + 8 + 8 + 1 + 4
_BODY = SIZE - 4


def _problem(metric, target, achieved, compressions) -> str | None:
    """What is wrong with these fields (None: nothing). ``target``/``achieved`` are floats."""
    if metric not in METRIC_CODES:
        return f"unknown target metric {metric!r} (expected one of {', '.join(METRIC_CODES)})"
    if isinstance(compressions, bool) or not isinstance(compressions, int) \
            or not 1 <= compressions <= MAX_COMPRESSIONS:
        return f"number of compressions must be an integer in 1..{MAX_COMPRESSIONS}, got {compressions!r}"
    if not math.isfinite(target):
        return f"{metric} target must be finite, got {target}"
    if not (math.isfinite(achieved) or (metric == "psnr" and achieved == math.inf)):
        allowed = "finite or +inf (lossless)" if metric == "psnr" else "finite"
        return f"achieved {metric} must be {allowed}, got {achieved}"
    if metric == "ratio" and not (target > 0 and achieved > 0):
        return f"compression ratios must be > 0, got target {target}, achieved {achieved}"
    if metric == "ssim" and not (-1 <= target <= 1 and -1 <= achieved <= 1):
        return f"SSIM values must lie in [-1, 1], got target {target}, achieved {achieved}"
    return None


def _real(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidInputError(f"{name} must be a real number, not {type(v).__name__}")
    return float(v)


@dataclass(frozen=True)
class TargetRecord:
    """What a compression with a target was asked for and what it reached.

    Attributes:
        metric: ``"psnr"`` (dB), ``"ratio"`` (compression ratio: uncompressed bytes over stream
            bytes) or ``"ssim"`` (structural similarity, in ``[-1, 1]``).
        target: the value asked for, in the metric's unit; finite (> 0 for a ratio).
        achieved: the value the stored stream reached, in the same unit; finite, or ``+inf``
            for a PSNR (a lossless result).
        compressions: number of real compressions the search ran, 1..255.

    Raises:
        InvalidInputError: an unknown metric, a value out of its metric's range (see the
            module's docstring), or a number of compressions outside 1..255.
    """

    metric: str
    target: float
    achieved: float
    compressions: int

    def __post_init__(self):
        if not isinstance(self.metric, str):
            raise InvalidInputError(f"target metric must be a string, not {type(self.metric).__name__}")
        target, achieved = _real("target", self.target), _real("achieved", self.achieved)
        compressions = self.compressions
        if not isinstance(compressions, bool):
            try:
                compressions = operator.index(compressions)
            except TypeError:
                pass
        problem = _problem(self.metric, target, achieved, compressions)
        if problem is not None:
            raise InvalidInputError(problem)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "achieved", achieved)
        object.__setattr__(self, "compressions", compressions)

    @property
    def unit(self) -> str:
        """``"dB"`` for a PSNR, ``""`` for the dimensionless ratio and SSIM."""
        return UNITS[self.metric]

    def to_bytes(self) -> bytes:
        """The section (:data:`SIZE` bytes, layout in the module's docstring)."""
        w = Writer().u8(VERSION).u8(METRIC_CODES[self.metric]).f64(self.target).f64(self.achieved)
        body = w.u8(self.compressions).getvalue()
        return body + struct.pack("<I", crc32(body))

    @classmethod
    def from_bytes(cls, buf) -> TargetRecord:
        """Parse and validate a section.

        Raises:
            CorruptStreamError: wrong length, CRC mismatch, an unknown version or metric code,
                or a field out of range (the checks of construction).
        """
        b = bytes(buf)
        checked_body(b, "target section", 1)
        if b[0] != VERSION:
            raise CorruptStreamError(f"target section version {b[0]} is not supported (this reader knows {VERSION})")
        if len(b) != SIZE:
            raise CorruptStreamError(f"target section of {len(b)} bytes, version {VERSION} has {SIZE}")
        r = Reader(b[:_BODY], "target section")
        r.u8()
        code = r.u8()
        if code not in METRICS:
            raise CorruptStreamError(f"unknown target metric code {code}")
        metric, target, achieved, compressions = METRICS[code], r.f64(), r.f64(), r.u8()
        r.done()
        problem = _problem(metric, target, achieved, compressions)
        if problem is not None:
            raise CorruptStreamError(f"target section: {problem}")
        return cls(metric, target, achieved, compressions)


__all__ = ["METRICS", "SIZE", "TargetRecord", "VERSION"]
