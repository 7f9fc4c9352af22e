"""Crafted lossy streams for the memory and validation tests (``tests/test_limits.py``) and
``benchmarks/read_memory.py``: a few hundred bytes that declare a large array.

A stream of zeros takes one chunk per level (chunk edge ``2**20``) and frequency tables that
give symbol 0 every slot: each chunk is its 4-byte rANS state, whatever the shape. Its
variants hold one fault where a read meets it last: the last chunk's bytes (its CRC no longer
matches), the last chunk's lengths (CRC recomputed), the exact-value section's CRC, an
exact-value position outside the array. Built with the fuzzer's field tree
(:mod:`tests.fuzzing`), which recomputes every length and CRC that follows a changed field.
"""
from __future__ import annotations

import numpy as np

from .fuzzing import F, G, _find, _fit_levels, crc, parse_lossy, serialize

#: Faults :func:`zero_stream` can build in.
FAULTS = ("last chunk", "last chunk lengths", "exact CRC", "exact position")


def zero_tree(shape, dtype=np.float32) -> G:
    """The field tree of a valid stream of zeros of ``shape`` (float32 or float64): one chunk
    per level."""
    import strata

    root = parse_lossy(strata.compress(np.zeros((64, 64, 64), dtype), abs_error=0.1))
    shape_g = _find(root, "header: shape", G)[0]
    shape_g.items = [F("varint", int(n), "header: shape") for n in shape]
    _fit_levels(root)
    for lv in root.items[5].items:
        lv.items[0].items[0].items[1].value = 20  # chunk-edge log2: the whole level is one chunk
        del lv.items[3].items[1:]
    return root


def _exact_values(root: G, gaps, values: bytes, bad_crc: bool = False) -> None:
    """Give the tree an exact-value section: positions from ``gaps``, raw ``values``."""
    exact = root.items[3]
    g = G([F("varint", int(v), "exact: gaps") for v in gaps], "exact: gaps", seq=True)
    vals = F("bytes", values, "exact: values")
    count = F("varint", len(gaps), "exact: count")
    check = F("u32", 0, "exact: CRC", auto=None if bad_crc else (lambda: crc(count, g, vals)))
    if bad_crc:
        check.value = crc(count, g, vals) ^ 1
    exact.items = [count, g, vals, check]


def zero_stream(shape, fault: str | None = None, dtype=np.float32) -> bytes:
    """A stream of zeros of ``shape`` with one ``fault`` (one of :data:`FAULTS`) or none; the
    valid stream (``fault=None``) holds one exact value, +Inf at flat position 5."""
    root = zero_tree(shape, dtype)
    itemsize = np.dtype(dtype).itemsize
    inf = np.array([np.inf], dtype).tobytes()
    size = int(np.prod(shape))
    if fault in (None, "exact CRC"):
        _exact_values(root, [5], inf, bad_crc=fault == "exact CRC")
    elif fault == "exact position":
        _exact_values(root, [5, size], inf * 2)
    elif fault == "last chunk lengths":
        chunk = root.items[5].items[-1].items[3].items[-1]
        chunk.items[0].auto, chunk.items[0].value = None, 1 << 20  # n_rans past the chunk's end
    elif fault not in ("last chunk",):
        raise ValueError(f"unknown fault {fault!r}")
    data = bytearray(serialize(root))
    if fault == "last chunk":
        data[-1] ^= 0x40  # (the last level's last chunk ends the stream: its CRC no longer matches)
    assert itemsize in (4, 8)
    return bytes(data)


def enhanced_zero_stream(shape, width: int, seed: int = 0) -> bytes:
    """:func:`zero_stream` (valid, float32) with a stored 2x enhancement network of ``width``
    channels and random weights."""
    from strata.enhance import network
    from strata.enhance.section import MODE_2X, Enhancement, InputField
    from strata.lossy.codec import with_enhancement

    e = Enhancement(MODE_2X, True, 40.0, 41.0, 10 ** 6, width, [InputField("", 0.0, 1.0, 1.0, 15)])
    rng = np.random.default_rng(seed)
    e.set_params(rng.standard_normal(network.weight_count(e.channels, width)).astype(np.float32) * 0.3)
    return with_enhancement(zero_stream(shape), e.to_bytes())
