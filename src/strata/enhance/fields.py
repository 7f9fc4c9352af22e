"""The field-set container: several lossy streams of one snapshot under one header
(:func:`strata.enhance.compress_fields`).

Layout (``docs/format.md``, section 8): the strata container (kind 3) whose header is
``varint field count F | F x (blob name (UTF-8) | varint stream length)``, then the F lossy
streams in that order, each a whole lossy stream with its own checksums (and, usually, an
enhancement section whose inputs name other fields of the set).
"""
from __future__ import annotations

from ..container import KIND_FIELDS, Reader, Source, Writer, pack, unpack_header
from ..errors import CorruptStreamError, InvalidInputError, TruncatedStreamError
from ..lossy import LossyReader
from .section import MAX_NAME_BYTES

MAX_FIELDS = 1024


def check_names(names: list) -> list[str]:
    """The names, checked: strings of 1..255 UTF-8 bytes, at most 1024 of them.

    Raises:
        InvalidInputError: otherwise.
    """
    if len(names) > MAX_FIELDS:
        raise InvalidInputError(f"at most {MAX_FIELDS} fields, got {len(names)}")
    for n in names:
        if not isinstance(n, str) or not 0 < len(n.encode()) <= MAX_NAME_BYTES:
            raise InvalidInputError(f"field names must be strings of 1..{MAX_NAME_BYTES} UTF-8 bytes, got {n!r}")
    return list(names)


def pack_fields(names: list[str], streams: list[bytes]) -> bytes:
    """The field-set stream of ``streams`` named ``names``."""
    w = Writer().varint(len(names))
    for n, s in zip(names, streams):
        w.blob(n.encode()).varint(len(s))
    return pack(KIND_FIELDS, w.getvalue(), streams)


def open_fields(data) -> dict[str, LossyReader]:
    """``{name: LossyReader}`` of a field-set stream (bytes-like or path), in stored order.

    Raises:
        FormatError: not a field set; CorruptStreamError, TruncatedStreamError: damaged.
    """
    src = Source(data)
    try:
        raw, offset = unpack_header(src, KIND_FIELDS)
        r = Reader(raw, "field-set header")
        n = r.varint(MAX_FIELDS)
        entries = []
        for _ in range(n):
            try:
                name = bytes(r.blob(MAX_NAME_BYTES)).decode()
            except UnicodeDecodeError as exc:
                raise CorruptStreamError("field name is not UTF-8") from exc
            entries.append((name, r.varint(src.size)))
        r.done()
        if len({e[0] for e in entries}) != n or any(not e[0] for e in entries):
            raise CorruptStreamError("field names empty or repeated")
        if offset + sum(e[1] for e in entries) > src.size:
            raise TruncatedStreamError("stream truncated: the field set announces more bytes than it has")
        readers = {}
        for name, length in entries:
            readers[name] = LossyReader(bytes(src.read(offset, length, f"field {name!r}")))
            offset += length
        return readers
    finally:
        src.close()
