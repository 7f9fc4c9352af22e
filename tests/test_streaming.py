"""Progressive and random-access decompression: what is read, and what comes back."""
from __future__ import annotations

import io

import numpy as np
import pytest

import strata
from strata.metrics import max_abs_error

from .conftest import SCI_FILES, load_field


class CountingFile(io.BytesIO):
    """A file object that records the byte ranges read from it."""

    def __init__(self, data):
        super().__init__(data)
        self.ranges = []

    def read(self, n=-1):
        start = self.tell()
        out = super().read(n)
        self.ranges.append((start, start + len(out)))
        return out

    def bytes_read(self):
        return sum(b - a for a, b in self.ranges)


def smooth_field(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    for ax in range(len(shape)):
        a = np.cumsum(a, axis=ax)
    return (a / np.abs(a).max()).astype(dtype)


@pytest.fixture(scope="module")
def stream3d():
    a = smooth_field((70, 101, 96), seed=1)
    eb = 1e-3
    return a, eb, strata.compress(a, abs_error=eb)


def test_levels_metadata(stream3d):
    a, eb, blob = stream3d
    r = strata.open(blob)
    assert r.shape == a.shape and r.dtype == a.dtype
    lv = r.levels
    assert len(lv) >= 3
    assert lv[-1].stride == (1, 1, 1) and lv[-1].shape == a.shape
    assert all(lv[k].offset + lv[k].compressed_bytes == lv[k + 1].offset for k in range(len(lv) - 1))
    assert lv[-1].offset + lv[-1].compressed_bytes == len(blob)
    assert sum(x.points for x in lv) == a.size
    assert all(x.error_bound <= eb for x in lv)


def test_each_level_meets_its_bound(stream3d):
    a, eb, blob = stream3d
    r = strata.open(blob)
    for info in r.levels:
        grid = r.read(level=info.index, full_resolution=False)
        s = info.stride
        ref = a[::s[0], ::s[1], ::s[2]]
        assert grid.shape == info.shape == ref.shape
        assert max_abs_error(ref, grid) <= info.error_bound
    # the finest level's grid is the full decode
    assert np.array_equal(r.read(level=len(r.levels) - 1, full_resolution=False), r.read())


def test_level_reads_only_its_prefix(stream3d):
    a, eb, blob = stream3d
    levels = strata.open(blob).levels
    for info in levels[:-1]:
        f = CountingFile(blob)
        r = strata.open(f)
        r.read(level=info.index)
        assert max(b for _, b in f.ranges) <= info.offset + info.compressed_bytes
        assert f.bytes_read() < len(blob)


def test_previews_improve_and_end_at_full_decode(stream3d):
    a, eb, blob = stream3d
    r = strata.open(blob)
    errs = []
    for info in r.levels:
        p = r.read(level=info.index)
        assert p.shape == a.shape
        errs.append(float(np.sqrt(np.mean((p.astype(np.float64) - a) ** 2))))
    assert errs[-1] <= eb
    assert errs[0] > errs[-1]
    assert np.array_equal(strata.decompress(blob, level=len(r.levels) - 1), strata.decompress(blob))


REGIONS = [
    (slice(0, 10), slice(0, 10), slice(0, 10)),
    (slice(30, 47), slice(50, 101), slice(17, 18)),
    (5, slice(None), slice(90, None)),
    (slice(None), slice(None), slice(None)),
    (slice(69, 70), slice(100, 101), slice(95, 96)),
    (slice(2, 60, 7), slice(None, None, -3), 40),
    (-1,),
]


@pytest.mark.parametrize("region", REGIONS)
def test_region_equals_full_decode(stream3d, region):
    a, eb, blob = stream3d
    full = strata.decompress(blob)
    part = strata.decompress(blob, region=region)
    assert part.shape == full[region].shape
    assert np.array_equal(part, full[region])


@pytest.mark.parametrize("region", REGIONS[:3])
def test_region_of_a_preview(stream3d, region):
    a, eb, blob = stream3d
    r = strata.open(blob)
    for k in range(len(r.levels)):
        assert np.array_equal(r.read(level=k, region=region), r.read(level=k)[region])


def test_region_reads_few_bytes():
    a = smooth_field((128, 128, 128), seed=2)
    blob = strata.compress(a, abs_error=1e-4)
    f = CountingFile(blob)
    r = strata.open(f)
    box = (slice(48, 80), slice(48, 80), slice(48, 80))
    assert np.array_equal(r.read(region=box), strata.decompress(blob)[box])
    assert f.bytes_read() < 0.35 * len(blob)


@pytest.mark.parametrize("shape", [(1000,), (37, 300), (1, 1, 513), (3, 1, 200, 17)])
def test_region_other_dimensions(shape):
    a = smooth_field(shape, seed=3, dtype=np.float64)
    blob = strata.compress(a, rel_error=1e-4)
    full = strata.decompress(blob)
    rng = np.random.default_rng(0)
    for _ in range(5):
        region = tuple(slice(*sorted(rng.integers(0, n + 1, 2))) for n in shape)
        assert np.array_equal(strata.decompress(blob, region=region), full[region])


@pytest.mark.skipif(not SCI_FILES, reason="../shared/data/sci not present")
def test_region_on_largest_shared_field(field_cache):
    path = max(SCI_FILES, key=lambda p: p.stat().st_size)
    a = load_field(path, field_cache)
    blob = strata.compress(a, rel_error=1e-3)
    full = strata.decompress(blob)
    q = [n // 4 for n in a.shape]
    box = tuple(slice(n // 2 - w // 2, n // 2 - w // 2 + w) for n, w in zip(a.shape, q))
    assert np.array_equal(strata.decompress(blob, region=box), full[box])


def test_sources_bytes_path_fileobj(tmp_path, stream3d):
    a, eb, blob = stream3d
    p = tmp_path / "x.strata"
    p.write_bytes(blob)
    ref = strata.decompress(blob)
    assert np.array_equal(strata.decompress(p), ref)
    assert np.array_equal(strata.decompress(str(p)), ref)
    with open(p, "rb") as f:
        assert np.array_equal(strata.decompress(f), ref)
    assert np.array_equal(strata.decompress(memoryview(blob)), ref)
    assert np.array_equal(strata.decompress(bytearray(blob)), ref)


def _chunk_edges(blob):
    """Per level: ``(log2 chunk edge, number of chunks)`` from the level heads."""
    from strata import varint
    from strata.lossy import LossyReader

    r = LossyReader(blob)
    out = []
    for k, entry in enumerate(r.header.levels):
        off = r._level_offsets[k]
        head = np.frombuffer(blob[off:off + entry.head_len], np.uint8)
        tlen, pos = varint.get(head, 2, len(head))
        n, _ = varint.get(head, pos + tlen, len(head))
        out.append((int(head[1]), int(n)))
    return out


def test_highly_compressible_levels_get_larger_chunks_and_read_alike():
    """A level whose chunks would average less than SMALL_CHUNK_BYTES takes a larger chunk edge
    (each chunk's framing is ~10 bytes): fewer chunks than the default edge gives, a smaller
    stream, and every region read still equals the whole read."""
    from strata.lossy import encoder

    z, y, x = np.meshgrid(np.arange(6), np.arange(120), np.arange(240), indexing="ij")
    a = (np.sin(x / 37.0 + z * 0.3) * np.cos(y / 23.0)).astype(np.float32)  # (ratio about 350 at 1e-2)
    blob = strata.compress(a, rel_error=1e-2)
    edges = _chunk_edges(blob)
    default = encoder.Partition.get(a.shape).default_tile().bit_length() - 1
    assert any(t > default for t, _ in edges[1:])
    saved = encoder.SMALL_CHUNK_BYTES
    encoder.SMALL_CHUNK_BYTES = 0
    try:
        plain = strata.compress(a, rel_error=1e-2)
    finally:
        encoder.SMALL_CHUNK_BYTES = saved
    assert all(t <= default for t, _ in _chunk_edges(plain)[1:])
    assert sum(n for _, n in edges) < sum(n for _, n in _chunk_edges(plain))
    assert len(blob) < len(plain)
    y = strata.decompress(blob)
    assert max_abs_error(a, y) <= 1e-2 * float(np.ptp(a))
    rng = np.random.default_rng(0)
    for _ in range(8):
        lo = [int(rng.integers(0, n)) for n in a.shape]
        region = tuple(slice(lo_, int(rng.integers(lo_ + 1, n + 1))) for lo_, n in zip(lo, a.shape))
        assert np.array_equal(strata.decompress(blob, region=region), y[region])
