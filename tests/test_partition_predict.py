"""Level partition and predictor: every point belongs to exactly one pass and one chunk;
the compiled quantizer matches its reference."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from strata.lossy import chunks
from strata.lossy.missing import NO_MISSING
from strata.lossy.partition import Box, Partition, as_3d_shape, grid_shape
from strata.lossy.plan import level_geometry
from strata.lossy.predictors.interpolation import encode_passes, pass_table
from strata.lossy.predictors.origin import encode_origin
from strata.lossy.quantize import RADIUS, UNPREDICTABLE, quantize_reference

SHAPES = [(1, 1, 1), (1, 1, 7), (1, 5, 9), (3, 17, 2), (33, 1, 65), (9, 10, 11), (64, 64, 64), (6, 241, 30)]


def _points(p):
    axes = [range(p.starts[a], p.box.hi[a], p.steps[a]) if p.starts[a] < p.box.hi[a] else range(0)
            for a in range(3)]
    return set(itertools.product(*axes))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("flat", [(False, False, False), (True, False, False)])
def test_passes_cover_every_point_once(shape, flat):
    part = Partition(shape, (0, 1, 2), flat)
    seen = {(0, 0, 0)}
    total = 1
    for step in part.steps:
        passes, _ = part.passes(step)
        for p in passes:
            pts = _points(p)
            assert not (pts & seen)
            seen |= pts
            total += len(pts)
    assert total == len(seen) == int(np.prod(shape))
    assert sum(part.level_points(k) for k in range(part.num_levels)) == int(np.prod(shape))


@pytest.mark.parametrize("shape", SHAPES)
def test_chunks_cover_each_level_once(shape):
    part = Partition(shape)
    for lv in range(part.num_levels):
        _, stride, refined, base, boxes = level_geometry(part, lv)
        sizes = chunks.chunk_sizes(boxes, refined, base)
        assert sizes.sum() == part.level_points(lv)
        g = grid_shape(shape, tuple(stride))
        cover = np.zeros(g, np.int64)
        for b in boxes:
            cover[b[0]:b[1], b[2]:b[3], b[4]:b[5]] += 1
        assert np.all(cover == 1)


def test_base_grid_is_small_and_levels_refine_by_two():
    part = Partition((256, 300, 128))
    assert part.points(part.level_stride(0)) <= 4096
    for k in range(1, part.num_levels):
        prev, cur = part.level_stride(k - 1), part.level_stride(k)
        assert all(c in (p, p // 2) for c, p in zip(cur, prev))
    assert part.level_stride(part.num_levels - 1) == (1, 1, 1)


def test_flat_axis_is_refined_first():
    part = Partition((6, 241, 480), flat=(True, False, False))
    assert part.steps[0].refined == (True, False, False)
    assert all(not st.refined[0] for st in part.steps[3:])


def test_region_pass_boxes_grow_backwards():
    part = Partition((64, 64, 64))
    box = Box((10, 10, 10), (20, 20, 20))
    passes, coarse = part.passes(part.steps[-1], box)
    assert passes[-1].box == box
    for a, b in zip(passes, passes[1:]):
        assert all(x <= y for x, y in zip(a.box.lo, b.box.lo)) and all(x >= y for x, y in zip(a.box.hi, b.box.hi))
    assert coarse.lo[0] < passes[0].box.lo[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantizer_matches_reference(dtype):
    """Passes at one stride from an exact coarse grid: kernel codes equal the NumPy reference."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 1, 4097)).astype(dtype) * 10
    part = Partition(as_3d_shape(a.shape))
    flat = a.reshape(-1)
    x = flat.copy()
    codes = np.zeros(flat.size, np.int32)
    eb = 0.01
    step = part.steps[-1]  # stride 1: odd points from the (exact) even ones
    passes, _ = part.passes(step)
    encode_passes(x, codes, flat, NO_MISSING, np.array(part.shape, np.int64),
                  pass_table({0: passes}, {0: eb}, lambda i: False))
    odd = flat[1:-1:2]
    pred = 0.5 * (flat[0:-2:2].astype(np.float64) + flat[2::2].astype(np.float64))
    ref_codes, ref_rec = quantize_reference(odd, pred, eb)
    assert np.array_equal(codes[1:-1:2], ref_codes)
    assert np.array_equal(x[1:-1:2], ref_rec)
    assert np.all(np.abs(x.astype(np.float64) - flat) <= eb)


def test_unpredictable_values_are_exact():
    a = np.array([0.0, 1e30, 0.0, -1e30, 5.0], dtype=np.float32)
    x = a.copy()
    codes = np.zeros(a.size, np.int32)
    encode_origin(x, codes, a, 1e-3)
    part = Partition(as_3d_shape(a.shape))
    plan = part.plan_passes(None, len(part.steps) - 1)
    encode_passes(x, codes, a, NO_MISSING, np.array(part.shape, np.int64),
                  pass_table(plan, [1e-3] * len(part.steps), lambda i: True, part))
    assert (codes == UNPREDICTABLE).any()
    assert np.all((codes == UNPREDICTABLE) | (np.abs(codes.astype(np.int64) - RADIUS) < RADIUS))
    assert np.all(np.abs(x.astype(np.float64) - a) <= 1e-3)


@pytest.mark.parametrize("shape", [(64, 192), (9, 17, 33), (5000,)])
def test_whole_array_trial_codes_are_the_final_codes(shape):
    """On small arrays the tuner's winning trial covers every point; the compressor reuses
    its codes, which must equal a full prediction pass with the chosen settings."""
    from strata.lossy.encoder import predict_all
    from strata.lossy.tune import choose, make_plan

    rng = np.random.default_rng(3)
    a = np.cumsum(rng.standard_normal(shape), axis=-1).astype(np.float32)
    eb = 1e-3 * float(np.ptp(a))
    settings, trial = choose(a, eb)
    assert trial is not None
    codes = trial.codes
    plan = make_plan(settings, a.shape, a.dtype, eb)
    assert np.array_equal(codes, predict_all(a.reshape(-1), NO_MISSING, plan))


@pytest.mark.parametrize("shape", [(64, 192), (9, 17, 33), (5000,)])
def test_trial_histogram_sizes_levels_as_their_codes_do(shape):
    """The level coder sizes a level from the codes of its grid (encoder.choose_tile); after a
    whole-array trial it reads the trial's histogram per step instead: the estimate must be
    the one the codes give, bit for bit, on every level."""
    from strata.lossy.tune import choose, grid_bits, sample_bits

    rng = np.random.default_rng(7)
    a = np.cumsum(rng.standard_normal(shape), axis=-1).astype(np.float32)
    a.reshape(-1)[::97] *= 1e4  # (some unpredictable values)
    settings, trial = choose(a, 1e-3 * float(np.ptp(a)))
    assert trial is not None
    part = Partition.get(as_3d_shape(a.shape), settings.order, settings.flat)
    grid = trial.codes.reshape(part.shape)
    for level in range(part.num_levels):
        q = part.level_stride(level)
        n = part.level_points(level)
        want = sample_bits(np.ascontiguousarray(grid[::q[0], ::q[1], ::q[2]]).ravel(), n, 32)
        assert grid_bits(trial.hist, part.base_steps + level, trial.codes[0], n, 32) == want


@pytest.mark.parametrize("shape", [(64, 192), (9, 17, 33), (40, 64, 80), (3, 300, 517), (200000,)])
@pytest.mark.parametrize("cubic", [True, False])
@pytest.mark.parametrize("multi", [0, (1 << 128) - 1])
def test_trials_read_only_points_they_wrote(shape, cubic, multi):
    """The tuner's trials run on an uninitialized working array (no copy of the data): every
    point a trial reads it has written first. A working array of NaN must give the same
    estimate (and, for whole-array trials, codes) as a copy of the data, sampled boxes too,
    multi-dimensional steps too."""
    from strata.lossy.tune import Settings, estimate_bits, plan, sample_boxes

    rng = np.random.default_rng(5)
    a = np.cumsum(np.cumsum(rng.standard_normal(shape), axis=-1), axis=0).astype(np.float32)
    shape3 = as_3d_shape(a.shape)
    flat = a.reshape(-1)
    eb = 1e-3 * float(np.ptp(a))
    boxes = sample_boxes(shape3)
    settings = Settings(cubic=cubic, multi=multi)
    plans = plan(shape3, settings, boxes)
    bits, codes, hist = estimate_bits(flat, shape3, eb, settings, boxes, plans, flat.copy())
    bits_nan, codes_nan, hist_nan = estimate_bits(flat, shape3, eb, settings, boxes, plans, np.full_like(flat, np.nan))
    assert bits == bits_nan and bits > 0
    assert np.array_equal(hist, hist_nan)
    if boxes is None:
        assert np.array_equal(codes, codes_nan)


@pytest.mark.parametrize("shape", [(1, 1, 100000), (1, 300, 517), (40, 64, 80), (7, 9, 1000)])
def test_chunk_count_matches_the_chunks(shape):
    part = Partition(shape)
    for level in range(part.num_levels):
        for tile in (None, 1, 2, 5, 16, 64):
            assert part.chunk_count(level, tile) == part.chunk_boxes(level, tile).shape[0]


def test_level_wise_bounds_are_kept_when_they_shrink_the_estimate():
    """The tuner tries SZ3's/QoZ's level-wise bounds on its best interpolation and keeps them only
    when the estimated size shrinks by LEVEL_MARGIN; a smooth 3-D field takes them."""
    from dataclasses import replace

    from strata.lossy.tune import LEVEL_FACTORS, LEVEL_MARGIN, choose, estimate_bits, sample_boxes

    from .synthetic import waves

    taken = 0
    for shape, seed, rel in (((48, 48, 48), 0, 1e-2), ((48, 48, 48), 1, 1e-2), ((48, 48, 48), 1, 1e-3),
                             ((40, 200), 2, 1e-2)):
        a = waves(shape, seed, np.float32)
        eb = rel * float(np.ptp(a))
        settings, _ = choose(a, eb)
        shape3 = as_3d_shape(a.shape)
        flat = a.reshape(-1)

        def bits(s, flat=flat, shape3=shape3, eb=eb):
            return estimate_bits(flat, shape3, eb, s, sample_boxes(shape3))[0]

        base = replace(settings, multi=0)  # (the step predictors are chosen after the bounds)
        plain = bits(replace(base, alpha8=8, beta8=8))
        if (settings.alpha8, settings.beta8) != (8, 8):
            taken += 1
            assert (settings.alpha8, settings.beta8) in LEVEL_FACTORS
            assert bits(base) < (1 - LEVEL_MARGIN) * plain
        else:
            alpha8, beta8 = LEVEL_FACTORS[0]
            assert bits(replace(base, alpha8=alpha8, beta8=beta8)) >= (1 - LEVEL_MARGIN) * plain
    assert taken


@pytest.mark.parametrize("shape", [(64, 192), (9, 17, 33), (5000,)])
def test_trial_mean_squared_error_is_the_reconstructions(shape):
    """The "psnr" objective weighs a trial's estimated mean squared error; after a whole-array
    trial it must be the mean squared error of the reconstruction the compressor keeps (every
    point but the first, which no step holds), for level-wise bounds too."""
    from strata.lossy.tune import Settings, estimate_bits, mean_sq_error, plan

    rng = np.random.default_rng(11)
    a = np.cumsum(rng.standard_normal(shape), axis=-1).astype(np.float32)
    shape3 = as_3d_shape(a.shape)
    flat = a.reshape(-1)
    for settings in (Settings(), Settings(alpha8=12, beta8=24, cubic=False)):
        plans = plan(shape3, settings, None)
        part = plans[0]
        x = flat.copy()
        sse = np.zeros(len(part.steps))
        _, codes, hist = estimate_bits(flat, shape3, 1e-2 * float(np.ptp(a)), settings, None, plans, x, sq_error=sse)
        want = np.mean((x[1:].astype(np.float64) - flat[1:]) ** 2)
        assert mean_sq_error(sse, hist, part.step_points) == pytest.approx(want, rel=1e-9)


def test_psnr_objective_buys_psnr_with_bits_and_keeps_the_bound():
    """With objective="psnr" the tuner weighs QoZ's level-wise bounds by bits at equal PSNR: on a
    smooth field it takes tighter coarse-level bounds than the "ratio" objective, the stream
    gains PSNR, more than 6.02 dB per extra bit per value would give back (the high-rate slope;
    here it even costs fewer bits), and the bound holds everywhere."""
    from strata import compress, decompress
    from strata.errors import InvalidInputError
    from strata.lossy import LossyReader
    from strata.lossy.tune import PSNR_FACTORS

    from .synthetic import waves

    a = waves((48, 48, 48), 0, np.float32)
    vr = float(np.ptp(a))
    out = {}
    for objective in ("ratio", "psnr"):
        blob = compress(a, rel_error=1e-2, objective=objective)
        y = decompress(blob)
        assert float(np.max(np.abs(y.astype(np.float64) - a))) <= 1e-2 * vr
        h = LossyReader(blob).header
        psnr = 20 * np.log10(vr) - 10 * np.log10(np.mean((y.astype(np.float64) - a) ** 2))
        out[objective] = (8 * len(blob) / a.size, psnr, (h.alpha8, h.beta8))
    assert out["psnr"][2] in PSNR_FACTORS
    extra_bits = out["psnr"][0] - out["ratio"][0]
    gain = out["psnr"][1] - out["ratio"][1]
    assert gain > 0 and gain > 6.02 * extra_bits
    with pytest.raises(InvalidInputError):
        compress(a, rel_error=1e-2, objective="ssim")


def test_reverse_pass_order_is_kept_when_it_shrinks_the_estimate():
    """After the interpolation, the tuner tries the reverse pass order (SZ3's other direction) and
    keeps it only when the estimated size shrinks by ORDER_MARGIN; fields rougher along their
    first axis take it, and their streams keep the bound."""
    from dataclasses import replace

    from strata import compress, decompress
    from strata.lossy.tune import ORDER_MARGIN, ORDERS, choose, estimate_bits, sample_boxes

    from .synthetic import waves

    rng = np.random.default_rng(0)
    taken = 0
    for shape, seed in (((24, 64, 64), 0), ((40, 200), 1), ((200, 40), 2), ((48, 48, 48), 3)):
        a = waves(shape, seed, np.float32)
        if seed < 3:  # (rough along the first axis)
            a += 0.05 * np.cumsum(rng.standard_normal(shape), axis=0).astype(np.float32)
        eb = 1e-2 * float(np.ptp(a))
        settings, _ = choose(a, eb)
        shape3 = as_3d_shape(a.shape)
        base = replace(settings, alpha8=8, beta8=8, multi=0)  # (what the pass order was chosen on)

        def bits(order, a=a, shape3=shape3, eb=eb, base=base):
            return estimate_bits(a.reshape(-1), shape3, eb, replace(base, order=order), sample_boxes(shape3))[0]

        shrinks = bits(ORDERS[0]) < (1 - ORDER_MARGIN) * bits((0, 1, 2))
        assert (settings.order == ORDERS[0]) == shrinks
        taken += shrinks
        if shrinks:
            assert np.abs(decompress(compress(a, abs_error=eb)).astype(np.float64) - a).max() <= eb
    assert taken
