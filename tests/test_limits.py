"""Allocation only for what was asked: the output limit is enforced before allocating, and a
region read holds only the region and its neighbourhood."""
from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.errors import CorruptStreamError, ResourceLimitError
from strata.lossy import reader as lossy_reader
from strata.lossy import selection
from strata.lossy.header import LevelEntry

from . import crafted, rss
from .conftest import repack_header


@pytest.fixture(scope="module")
def stream():
    rng = np.random.default_rng(0)
    a = np.cumsum(np.cumsum(rng.standard_normal((48, 64, 80)), axis=2), axis=1).astype(np.float32)
    return a, strata.compress(a, abs_error=0.01)


def test_bomb_stream_is_refused_before_allocating(stream):
    # valid checksums, 8192^3 values declared, empty levels: refused, nothing allocated
    def bomb(h):
        h.shape = (8192, 8192, 8192)
        h.levels = [LevelEntry(0, 0) for _ in range(h.partition().num_levels)]
        h.predictors = None  # (the stream's step predictors are for its own shape's steps)

    blob = repack_header(stream[1], bomb)
    with pytest.raises(ResourceLimitError, match="limit"):
        strata.decompress(blob)


def test_limit_just_below_and_at_the_need(stream):
    a, blob = stream
    r = strata.open(blob)
    # values and codes, the compressed chunks (read and checked before decoding), the chunk
    # tables and the chunk decoders' scratch
    need = _need(r, a.size * (a.dtype.itemsize + 4))
    assert a.size * (a.dtype.itemsize + 4) + len(blob) // 2 <= need < a.size * (a.dtype.itemsize + 4) + len(blob) \
        + a.size // 4
    with pytest.raises(ResourceLimitError):
        r.read(max_output_bytes=need - 1)
    assert np.array_equal(r.read(max_output_bytes=need), strata.decompress(blob))
    # a region needs far less than the whole array
    box = (slice(20, 28), slice(30, 38), slice(40, 48))
    assert np.array_equal(r.read(region=box, max_output_bytes=need // 2), strata.decompress(blob)[box])
    with pytest.raises(ResourceLimitError):
        r.read(region=box, max_output_bytes=1000)
    # a level's grid needs about the grid
    lv = r.levels[1]
    grid = r.read(level=1, full_resolution=False, max_output_bytes=need // 4)
    assert grid.shape == lv.shape


def _need(r, limit):
    """The smallest limit a full read of ``r`` accepts, from the errors below it."""
    import re

    for _ in range(5):
        try:
            r.read(max_output_bytes=limit)
            return limit
        except ResourceLimitError as exc:
            limit = int(re.search(r"needs (\d+) bytes", str(exc)).group(1))
    raise AssertionError("the needed size does not settle")


def test_module_default_limit_applies(stream, monkeypatch):
    a, blob = stream
    monkeypatch.setattr(lossy_reader, "MAX_OUTPUT_BYTES", 1000)
    with pytest.raises(ResourceLimitError):
        strata.decompress(blob)
    assert strata.open(blob).read(max_output_bytes=0).shape == a.shape  # 0: no limit


def test_region_windows_stay_small():
    # the windows of a small box in a large array hold a few boxes' worth of points, not the array
    rng = np.random.default_rng(1)
    a = np.cumsum(rng.standard_normal((96, 96, 96)), axis=0).astype(np.float32)
    r = strata.open(strata.compress(a, abs_error=0.05))
    box = selection.box(selection.canonical((slice(40, 48),) * 3, r.shape), r.shape)
    plan = r._plan(len(r.levels) - 1, box, True)
    wins = r._windows(len(r.levels) - 1, box, True, plan)
    assert sum(w.size for w in wins.values()) < a.size / 8
    full = r.read()
    region = (slice(40, 48), slice(40, 48), slice(40, 48))
    assert np.array_equal(r.read(region=region), full[region])


# ---------------------------------------------------------------------------- issue 35: memory bounded before work
@pytest.mark.parametrize("fault", crafted.FAULTS)
def test_a_fault_met_last_fails_before_the_output_is_allocated(fault):
    """A stream of a few hundred bytes declaring 1 GiB of float32 whose last chunk (its bytes,
    or its lengths with the CRC recomputed) or exact-value section (its CRC, a position outside
    the array) is damaged raised CorruptStreamError only after decoding up to it: +1.5 to 2.0 GiB
    of resident memory, a 4x4x4 region read of it as much (one chunk a level). Every byte a read
    decodes is now checked before its output is allocated."""
    blob = crafted.zero_stream((1024, 1024, 256), fault)
    assert len(blob) < 300
    r = strata.open(blob)
    for region in (None, (slice(0, 4),) * 3):
        added = rss.peak_added_raising(lambda region=region: r.read(region=region), CorruptStreamError)
        assert added < 64 << 20, (fault, region, added)
    good = strata.decompress(crafted.zero_stream((16, 16, 16)))  # (the same stream without its fault)
    assert good.reshape(-1)[5] == np.inf and np.count_nonzero(good) == 1


def test_a_read_holds_about_what_it_accounts_for(tmp_path):
    """A lossless stream of noise read from a file held its compressed chunks (as many bytes as
    the output) and a file buffer beside the output and the codes: 1.6 times what it counted
    against max_output_bytes (the output and codes alone). The accounting now counts what a
    read reads before decoding; the peak stays within 1.25 times it."""
    a = np.random.default_rng(2).standard_normal((64, 128, 256)).astype(np.float32)
    path = tmp_path / "noise.strata"
    path.write_bytes(strata.compress(a, abs_error=0))
    r = strata.open(path)
    need = _need(r, 1)
    assert np.array_equal(r.read(max_output_bytes=need), a)  # (warm, and at the limit)
    added, out = rss.peak_added(lambda: r.read())
    assert added <= 1.25 * need, (added / a.nbytes, need / a.nbytes)
    del out
    with pytest.raises(ResourceLimitError):
        r.read(max_output_bytes=need - 1)
