"""Bad input gets a clear strata.errors exception, before any damage."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import strata
from strata.atomic import atomic_write
from strata.errors import (
    CorruptStreamError,
    FormatError,
    InvalidInputError,
    ResourceLimitError,
    StrataError,
    TruncatedStreamError,
    UnsupportedDtypeError,
)

from .conftest import repack_header


@pytest.fixture(scope="module")
def blob():
    rng = np.random.default_rng(0)
    a = np.cumsum(rng.standard_normal((20, 40, 50)), axis=2).astype(np.float32)
    return strata.compress(a, rel_error=1e-3)


def test_truncated_streams_raise(blob):
    for n in [0, 3, 11, 12, 20, len(blob) // 2, len(blob) - 1]:
        with pytest.raises((TruncatedStreamError, CorruptStreamError)):
            strata.decompress(blob[:n])


def test_every_flipped_byte_is_detected(blob):
    rng = np.random.default_rng(1)
    positions = sorted(set(rng.integers(0, len(blob), 150).tolist()) | {0, 5, 8, 12, len(blob) - 1})
    for pos in positions:
        bad = bytearray(blob)
        bad[pos] ^= 0x20
        with pytest.raises(FormatError):
            strata.decompress(bytes(bad))


def test_region_and_level_reads_check_their_bytes(blob):
    r = strata.open(blob)
    last = r.levels[-1]
    bad = bytearray(blob)
    bad[last.offset + last.compressed_bytes - 3] ^= 1
    r = strata.open(bytes(bad))
    r.read(level=len(r.levels) - 2)  # the damaged level is not read
    with pytest.raises(CorruptStreamError):
        r.read()


def test_not_a_stream():
    with pytest.raises(FormatError, match="magic"):
        strata.decompress(b"PK\x03\x04" + b"\0" * 40)


def test_unsupported_version(blob):
    bad = bytearray(blob)
    bad[4] = 99
    with pytest.raises(FormatError, match="version"):
        strata.decompress(bytes(bad))


def test_absurd_shape_is_refused_before_allocating(blob):
    def huge(h):
        h.shape = (1 << 30, 1 << 30, 1 << 20)
    with pytest.raises(ResourceLimitError):
        strata.decompress(repack_header(blob, huge))


def test_inconsistent_header_is_refused(blob):
    def wrong(h):
        h.shape = (20, 40, 51)
    with pytest.raises(CorruptStreamError):
        strata.decompress(repack_header(blob, wrong))

    def long_level(h):
        h.levels[-1].payload_len += 10**9
    with pytest.raises((TruncatedStreamError, CorruptStreamError)):
        strata.decompress(repack_header(blob, long_level))


@pytest.mark.parametrize("kwargs", [{}, {"abs_error": 1, "rel_error": 1}, {"abs_error": -1},
                                    {"abs_error": float("nan")}, {"rel_error": float("inf")},
                                    {"abs_error": "x"}])
def test_bad_bounds(kwargs):
    with pytest.raises(InvalidInputError):
        strata.compress(np.zeros(10, np.float32), **kwargs)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.complex64, bool, object])
def test_unsupported_dtypes(dtype):
    with pytest.raises(UnsupportedDtypeError):
        strata.compress(np.zeros(10, dtype=dtype), abs_error=0.1)


def test_bad_read_arguments(blob):
    r = strata.open(blob)
    for level in (-1, len(r.levels), 1.5, "0"):
        with pytest.raises(InvalidInputError):
            r.read(level=level)
    for region in [(slice(0, 2),) * 4, ("a",), (100,), (0, 0, -51)]:
        with pytest.raises(InvalidInputError):
            r.read(region=region)
    with pytest.raises(InvalidInputError):
        r.read(level=0, region=(slice(0, 2),), full_resolution=False)


def test_errors_are_strata_errors():
    for exc in (FormatError, TruncatedStreamError, CorruptStreamError, ResourceLimitError, InvalidInputError,
                UnsupportedDtypeError):
        assert issubclass(exc, StrataError)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "out.strata"
    p.write_bytes(b"old contents")

    class Boom:
        def __buffer__(self, flags):
            raise RuntimeError("disk full")

    with pytest.raises((RuntimeError, TypeError)):
        atomic_write(p, Boom())
    assert p.read_bytes() == b"old contents"
    assert [q.name for q in tmp_path.iterdir()] == ["out.strata"]
    atomic_write(p, b"new")
    assert p.read_bytes() == b"new"


def test_checksum_field_layout(blob):
    # magic, version, kind, header length; the header checksum covers all of it
    import zlib

    assert blob[:4] == b"STRA"
    (hlen,) = struct.unpack_from("<I", blob, 6)
    (crc,) = struct.unpack_from("<I", blob, 10 + hlen)
    assert zlib.crc32(blob[:10 + hlen]) & 0xFFFFFFFF == crc


# ---------------------------------------------------------------------------- issue 35: errors that leaked
@pytest.mark.parametrize("region", [(slice(0, 4, 0),), (slice(0.0, 4),), (slice(0, 4.5),), (slice(0, 4, 2.0),),
                                    (slice(0, 4, 2**63),), (True,), (0, np.bool_(False)), (slice("a"),)])
def test_bad_regions_raise_invalid_input(blob, region):
    """A zero step, float bounds or steps raised numpy's ValueError/TypeError; a step of 2**63
    a TypeError from numpy's arange (it is a valid slice: it selects the first index, as numpy
    does, and so does strata now); a bool was read as the index 1."""
    r = strata.open(blob)
    if region == (slice(0, 4, 2**63),):
        full = r.read()
        assert np.array_equal(r.read(region=region), full[region])
        assert np.array_equal(r.read_mask(region=region), np.zeros(full[region].shape, bool))
        return
    for call in (lambda: r.read(region=region), lambda: r.read_mask(region=region)):
        with pytest.raises(InvalidInputError):
            call()


@pytest.mark.parametrize("limit", ["1e9", -1, 1.5, float("nan"), float("inf"), True, [10**9]])
def test_bad_max_output_bytes_raise_invalid_input(blob, limit):
    """A string raised ValueError from int(); a negative limit was a ResourceLimitError, a
    fractional one was rounded down. An integral float (300e6) is a number of bytes."""
    r = strata.open(blob)
    for call in (lambda: r.read(max_output_bytes=limit), lambda: r.read_mask(max_output_bytes=limit)):
        with pytest.raises(InvalidInputError, match="max_output_bytes"):
            call()
    assert r.read(max_output_bytes=300e6).shape == (20, 40, 50)


def test_an_empty_axis_beside_huge_ones_is_refused(blob):
    """``(0, 2**40, 2**40, 2**40)`` holds no value, yet numpy cannot make an array of that shape
    (``ValueError: array is too big``): the header's non-empty axes count against
    MAX_ELEMENTS. An empty array of a shape numpy makes still decodes."""
    def huge(h):
        h.shape, h.levels = (0, 1 << 40, 1 << 40, 1 << 40), []

    with pytest.raises(ResourceLimitError):
        strata.decompress(repack_header(blob, huge))

    def empty(h):
        h.shape, h.levels = (0, 1 << 20, 3), []

    assert strata.decompress(repack_header(blob, empty)).shape == (0, 1 << 20, 3)


@pytest.mark.parametrize("token", [b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity"])
def test_metadata_numbers_past_float64_are_refused(token):
    """``{"x": 1e400}`` parsed to inf under "strict JSON"; a number token past float64's range
    is now a CorruptStreamError, as NaN and Infinity were. Writing a non-finite number is an
    InvalidInputError."""
    from strata.container import crc32
    from strata.lossy import metadata

    text = b'{"x": [1, ' + token + b"]}"
    with pytest.raises(CorruptStreamError, match="JSON"):
        metadata.parse(text + struct.pack("<I", crc32(text)))
    for value in (float("inf"), float("nan"), np.float64(-np.inf)):
        with pytest.raises(InvalidInputError):
            metadata.section({"x": [1, value]})
    assert metadata.parse(metadata.section({"x": 1e308, "y": 10**400})) == {"x": 1e308, "y": 10**400}
