"""Multi-dimensional interpolation (HPEZ's), a predictor of the portfolio chosen per step: its
streams keep the bound, decode the same through every read path (whole, region, level,
preview, with missing values), record their step predictors in the header, and the tuner
chooses it by measured cost."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from strata import compress, decompress
from strata.container import KIND_LOSSY, Source, pack, unpack_header
from strata.errors import CorruptStreamError
from strata.lossy import codec
from strata.lossy.header import LossyHeader
from strata.lossy.partition import Partition, as_3d_shape
from strata.lossy.predictors import INTERPOLATION, MULTIDIM
from strata.lossy.reader import open_stream
from strata.lossy.tune import Settings, choose, estimate_bits, sample_boxes

from .synthetic import same_bits, waves

#: Every step multi-dimensional (bit i: step i).
EVERY = (1 << 128) - 1


def _field(shape, dtype=np.float32, seed=1):
    return waves(shape, seed, dtype, noise=1e-3)


def _points(p):
    return set(itertools.product(*[range(p.starts[a], p.box.hi[a], p.steps[a]) for a in range(3)]))


@pytest.mark.parametrize("shape", [(9, 10, 11), (3, 17, 2), (1, 5, 9), (33, 1, 65), (16, 16, 16)])
@pytest.mark.parametrize("flat", [(False, False, False), (True, False, False)])
def test_groups_cover_every_point_once_and_read_smaller_groups(shape, flat):
    """A multi-dimensional step's groups hold the step's points, each once, and a group's point
    reads (at distance ``stride`` along each of its axes) only coarser points or points of
    groups of fewer axes."""
    part = Partition(shape, (0, 1, 2), flat)
    done = {(0, 0, 0)}
    for step in part.steps:
        passes, _ = part.passes(step, multi=True)
        new = set()
        for p in passes:
            pts = _points(p)
            assert not (pts & done) and not (pts & new)
            for pt in pts:
                for a in p.along:
                    for d in (-p.stride, p.stride):
                        q = list(pt)
                        q[a] += d
                        if 0 <= q[a] < shape[a]:
                            assert tuple(q) in done or tuple(q) in new, (pt, a, q)
            new |= pts
        assert len(new) == sum(len(_points(p)) for p in part.passes(step)[0])
        done |= new
    assert len(done) == int(np.prod(shape))


@pytest.mark.parametrize("shape", [(64, 192), (9, 17, 33), (40, 64, 80), (5000,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cubic", [True, False])
def test_bound_and_every_read_path(shape, dtype, cubic):
    a = _field(shape, dtype)
    eb = 1e-3 * float(np.ptp(a))
    blob = codec.compress(a, abs_error=eb, settings=Settings(cubic=cubic, multi=EVERY))
    r = open_stream(blob)
    n_steps = len(r.header.partition().steps)
    assert r.header.predictors == (MULTIDIM,) * n_steps
    y = r.read()
    assert y.dtype == a.dtype and np.abs(y.astype(np.float64) - a).max() <= eb
    assert same_bits(decompress(blob), y)
    rng = np.random.default_rng(0)
    for _ in range(4):
        lo = [int(rng.integers(0, n)) for n in shape]
        region = tuple(slice(b, int(rng.integers(b + 1, n + 1))) for b, n in zip(lo, shape))
        assert same_bits(r.read(region=region), y[region])
    for level in range(r.header.partition().num_levels - 1):
        grid = r.read(level, full_resolution=False)
        info = r.levels[level]
        sl = tuple(slice(None, None, s) for s in info.stride[-len(shape):])
        assert np.abs(grid.astype(np.float64) - a[sl]).max() <= info.error_bound
        preview = r.read(level)
        assert preview.shape == a.shape and np.isfinite(preview).all()
        assert same_bits(preview[sl], grid)


def test_missing_values_and_zero_bound():
    a = _field((24, 40, 56), np.float32)
    miss = np.zeros(a.shape, bool)
    miss[5:12, 10:30, :] = True
    miss.reshape(-1)[::37] = True
    b = a.copy()
    b[miss] = np.nan
    eb = 1e-3 * float(np.ptp(a))
    blob = codec.compress(b, abs_error=eb, settings=Settings(multi=EVERY))
    r = open_stream(blob)
    y = r.read()
    assert np.isnan(y[miss]).all() and np.abs(y[~miss] - a[~miss]).max() <= eb
    region = (slice(3, 20), slice(7, 33), slice(40, 56))
    assert same_bits(r.read(region=region), y[region])
    exact = codec.compress(a, abs_error=0.0, settings=Settings(multi=EVERY))
    assert same_bits(decompress(exact), a)


def test_header_records_step_predictors_and_refuses_bad_ones():
    a = _field((16, 24, 40))
    blob = codec.compress(a, abs_error=1e-3, settings=Settings(multi=0b1010_0000))
    src = Source(blob)
    raw, offset = unpack_header(src, KIND_LOSSY)
    h = LossyHeader.from_bytes(raw, src.size)
    n = len(h.partition().steps)
    assert h.predictors == tuple(MULTIDIM if i in (5, 7) else INTERPOLATION for i in range(n))
    assert LossyHeader.from_bytes(h.to_bytes(), src.size) == h
    body = bytes(src.read(offset, src.size - offset))
    for bad in ((9,) * n, (MULTIDIM,) * (n + 1), (INTERPOLATION,) * n):
        broken = replace(h, predictors=bad)
        with pytest.raises(CorruptStreamError):
            open_stream(pack(KIND_LOSSY, broken.to_bytes(), [body]))
    # a stream interpolated dimension by dimension throughout records none (older readers read it)
    plain = codec.compress(a, abs_error=1e-3, settings=Settings())
    assert open_stream(plain).header.predictors is None


def test_trial_counts_the_same_points_for_both_predictors():
    """The tuner's estimate weighs the predictors on the same points: the sampled steps count
    the points inside the sample boxes, not the margins their passes also write (wider for
    multi-dimensional groups)."""
    a = _field((96, 96, 96))
    shape3 = as_3d_shape(a.shape)
    boxes = sample_boxes(shape3)
    assert boxes is not None
    eb = 1e-3 * float(np.ptp(a))
    hists = [estimate_bits(a.reshape(-1), shape3, eb, Settings(multi=m), boxes)[2] for m in (0, EVERY)]
    assert np.array_equal(hists[0].sum(axis=1), hists[1].sum(axis=1))


def test_tuner_chooses_multidim_where_it_is_smaller():
    """On a smooth isotropic 3D field multi-dimensional interpolation is chosen for some steps
    and its stream is smaller than the dimension-by-dimension one; along one axis there is
    nothing to choose."""
    a = waves((64, 64, 64), 4, np.float32, fmax=0.3)
    eb = 1e-2 * float(np.ptp(a))
    settings, _ = choose(a, eb)
    assert settings.multi
    chosen = compress(a, abs_error=eb)
    plain = codec.compress(a, abs_error=eb, settings=replace(settings, multi=0))
    assert len(chosen) < len(plain)
    assert np.abs(decompress(chosen).astype(np.float64) - a).max() <= eb
    line = waves((20000,), 4, np.float32)
    assert choose(line, 1e-3)[0].multi == 0


@pytest.mark.parametrize("shape", [(96, 96, 96), (40, 64, 80), (3, 300, 517), (700, 700)])
@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0)])
def test_sampled_trial_writes_every_point_it_counts(shape, order):
    """A multi-dimensional trial computes, step by step, every point of the sampled boxes that
    the dimension-by-dimension passes compute -- the points both are counted on -- and the
    boxes of coarser points each needs are the same."""
    from strata.lossy.tune import _box_plans

    shape3 = as_3d_shape(shape)
    part = Partition.get(shape3, order)
    boxes = sample_boxes(shape3)
    dim, multi = _box_plans(part, boxes, 0), _box_plans(part, boxes, EVERY)
    for d_plan, m_plan in zip(dim, multi):
        for i in d_plan:
            counted = set().union(*[_points_in(p) for p in d_plan[i]])
            written = set().union(*[_points_in(p) for p in m_plan[i]])
            assert counted <= written, i


def _points_in(p):
    return set(itertools.product(*[range(p.starts[a] + -(-max(0, p.box.lo[a] - p.starts[a]) // p.steps[a]) * p.steps[a],
                                         p.box.hi[a], p.steps[a]) for a in range(3)]))
