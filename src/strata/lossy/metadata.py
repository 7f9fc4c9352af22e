"""The metadata section: a JSON object the stream carries for the user (a NetCDF variable's
name, dimensions, attributes and coordinates, see :mod:`strata.cf`).

Layout: ``UTF-8 JSON text | u32 CRC-32``. Strict JSON (no NaN or Infinity, no number past
float64's range such as ``1e400``, no pickle), an object at the top, at most
``MAX_METADATA_BYTES`` bytes.
"""
from __future__ import annotations

import json
import math
import struct

from ..container import checked_body, crc32
from ..errors import CorruptStreamError, InvalidInputError

#: Largest metadata section strata writes or reads.
MAX_METADATA_BYTES = 4 << 20


def section(metadata: dict | None) -> bytes:
    """The section for ``metadata`` (empty for None).

    Raises:
        InvalidInputError: not a dict, not serializable as strict JSON (a non-finite float
            among its values too), or larger than ``MAX_METADATA_BYTES``.
    """
    if metadata is None:
        return b""
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"metadata must be a dict, not {type(metadata).__name__}")
    try:
        text = json.dumps(metadata, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata is not serializable as JSON: {exc}") from exc
    if len(text) > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata of {len(text)} bytes exceeds the limit of {MAX_METADATA_BYTES}")
    return text + struct.pack("<I", crc32(text))


def parse(data) -> dict:
    """The metadata object of a section.

    Raises:
        CorruptStreamError: checksum mismatch, too large, not a JSON object, or a number
            that is not a finite float64 (``NaN``, ``Infinity``, ``1e400``).
    """
    data = bytes(data)
    if len(data) < 4 or len(data) > MAX_METADATA_BYTES + 4:
        raise CorruptStreamError(f"metadata section of {len(data)} bytes")
    checked_body(data, "metadata section")

    def _no_constants(name):
        raise ValueError(f"{name} is not JSON")

    def _finite(text):
        v = float(text)
        if not math.isfinite(v):  # (a number token past float64's range, e.g. 1e400)
            raise ValueError(f"number {text[:40]} is out of float64's range")
        return v

    try:
        obj = json.loads(data[:-4].decode(), parse_constant=_no_constants, parse_float=_finite)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptStreamError(f"metadata section is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CorruptStreamError("metadata section does not hold a JSON object")
    return obj
