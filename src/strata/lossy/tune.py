"""Choice of predictor settings by trial on samples of the data: the only place a compression's
choices are made (:func:`choose`), turned into its plan by :func:`make_plan`.

Like SZ3's tuner for its interpolation compressor (Liang et al., "SZ3", IEEE TBD 2022,
Sec. V; Zhao et al., ICDE'21, Sec. V-C), each candidate setting is tried on a sample and
the one with the smallest estimated size wins. The candidates are cubic or linear
interpolation and, for each short axis, refining that axis first (a *flat* axis, for stacks
of unlike 2D fields such as pressure levels); then, on the best of them, the reverse pass order,
the level-wise bounds and, per step, multi-dimensional interpolation (HPEZ's).

The trial runs the real, closed-loop passes: the coarse steps on the whole array (they hold
about 1/64 of the points, but at high ratios much of the size), and the finest
``TRIAL_STEPS`` steps only where a few small boxes spread over the array need them -- the
plan a region decode follows. Small blocks compressed on their own would over-weight their
own coarse levels. The estimate is, per step, the order-0 entropy of the trial's codes scaled
to the step's size, plus the unpredictable values' bits.
"""
from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from ..errors import InvalidInputError
from .missing import NO_MISSING
from .partition import Box, Partition, as_3d_shape
from .plan import Plan, step_bounds
from .predictors import INTERPOLATION, MULTIDIM, get
from .predictors.interpolation import count_codes, count_points, geometry_rows
from .predictors.origin import encode_origin
from .quantize import HIST_CLIP, RADIUS, UNPREDICTABLE


@dataclass(frozen=True)
class Settings:
    """Predictor settings (chosen by :func:`strata.lossy.tune.choose` by default).

    Attributes:
        order: axis order of the passes within a step.
        flat: axes refined to stride 1 first (stacks of unlike 2D fields).
        alpha8, beta8: level-wise bound factors times 8 (SZ3's alpha, beta; 8 = 1.0).
        cubic: cubic interpolation (True) or linear.
        multi: bit mask of the refinement steps predicted by multi-dimensional interpolation
            (:mod:`strata.lossy.predictors.multidim`; bit ``i``: step ``i`` of the partition);
            the others dimension by dimension.
    """

    order: tuple[int, int, int] = (0, 1, 2)
    flat: tuple[bool, bool, bool] = (False, False, False)
    alpha8: int = 8
    beta8: int = 8
    cubic: bool = True
    multi: int = 0

    def predictors(self, n_steps: int) -> tuple[int, ...]:
        """The predictor id of each of ``n_steps`` steps."""
        return tuple(MULTIDIM if self.multi >> i & 1 else INTERPOLATION for i in range(n_steps))


def make_plan(settings: Settings, shape: tuple[int, ...], dtype, eb: float, lattice=None,
              origin_pred: float = 0.0, window: float = 0.0) -> Plan:
    """The compression plan (:class:`strata.lossy.plan.Plan`) of ``settings`` for an array of
    ``shape`` and ``dtype`` at coding bound ``eb``, on ``lattice`` (or None) with first-point
    prediction ``origin_pred``: every step interpolated, dimension by dimension or
    multi-dimensionally, cubic or linear, as ``settings`` say; ``window`` as
    :attr:`strata.lossy.plan.Plan.window`."""
    n_steps = len(Partition.get(as_3d_shape(shape), settings.order, settings.flat).steps)
    return Plan.make(shape, dtype, eb, settings.order, settings.flat, settings.alpha8, settings.beta8,
                     settings.cubic, lattice, origin_pred, settings.predictors(n_steps), window)


#: Level-wise bound factors ``(alpha8, beta8)`` tried after none, in this order while each
#: shrinks the estimate (SZ3's and QoZ's ``alpha``, ``beta`` times 8: the stride-``2**j`` step's
#: bound is ``eb / min(alpha**j, beta)``; Liu et al., QoZ, SC'22, Sec. IV-B) ...
LEVEL_FACTORS = ((9, 10),)
#: ... kept only when they shrink the estimated size by this share at least (the estimate's
#: error on the sampled finest steps). Both chosen with each family of the project's data held
#: out in turn (benchmarks/lofo_tuner_rules.py): every choice without a family was this one or
#: within 0.4 % of its ratio on that family.
LEVEL_MARGIN = 0.02
#: Pass orders tried after ``(0, 1, 2)`` on the best interpolation, as SZ3's tuner tries its
#: reverse (Liang et al., IEEE TBD 2022, Sec. V; ``interpDirection``) ...
ORDERS = ((2, 1, 0),)
#: ... kept only when they shrink the estimated size by this share at least. Chosen with each
#: family of the project's data held out (benchmarks/lofo_tuner_rules.py --rule pass-order): 15
#: of the 17 choices without a family were this one.
ORDER_MARGIN = 0.04
#: Step predictors tried after dimension-by-dimension interpolation on every step of the best
#: setting that refines several axes: multi-dimensional interpolation (HPEZ's) ...
STEP_PREDICTORS = (MULTIDIM,)
#: ... kept for a step when it shrinks that step's estimated size by this share at least. Both
#: chosen with each family of the project's data held out (benchmarks/lofo_tuner_rules.py --rule
#: step-predictors): all 17 choices without a family were this one.
STEP_MARGIN = 0.02
#: What :func:`choose` optimizes: ``"ratio"``, the estimated size at the bound (SZ3's tuner, QoZ's
#: compression-ratio target), or ``"psnr"``, bits at equal PSNR (QoZ's rate-distortion target).
OBJECTIVES = ("ratio", "psnr")
#: Level-wise bound factors ``(alpha8, beta8)`` weighed with the ``"psnr"`` objective: QoZ's
#: grid, alpha 1..2 by 1/4 and beta 1.5, 2, 3, 4, alpha <= beta (Liu et al., SC'22, Sec. IV-C),
#: times 8.
PSNR_FACTORS = tuple((a, b) for a in (8, 10, 12, 14, 16) for b in (12, 16, 24, 32) if a <= b)


def check_objective(objective) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`.

    Raises:
        InvalidInputError: anything else.
    """
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise InvalidInputError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    return objective


#: Sampled fraction of the values (at least one box, at most ``MAX_BOXES``).
SAMPLE_FRACTION = 0.01
MAX_BOXES = 16
#: Boxes the step predictors are chosen on at least (a sample of fewer is drawn again with
#: this many): on one box, comb_density and comb_xmomentum (47,025 values) took
#: multi-dimensional steps that cost 8-10 % more bytes at 1e-3, which four boxes saw; drawing
#: every sample with four boxes misled the pass order of ns2d_vorticity instead (+10 %).
STEP_MIN_BOXES = 4
#: Box edge by number of axes longer than 1.
EDGE = {0: 1, 1: 4096, 2: 48, 3: 12}
#: Steps tried (the finest ones).
TRIAL_STEPS = 3
#: Arrays this small are tried whole.
WHOLE_BELOW = 1 << 15
#: Axes this short or shorter are candidates for flat refinement...
FLAT_MAX = 64
#: ... when the data vary this many times more across them than along the others.
ROUGH_RATIO = 4.0


def candidates(a3: np.ndarray) -> list:
    """Settings tried for the 3D view ``a3`` of an array: cubic and linear interpolation, for
    each of :func:`flat_candidates`."""
    return [Settings(flat=f, cubic=c) for f in flat_candidates(a3) for c in (True, False)]


def flat_candidates(a3: np.ndarray, missing3: np.ndarray | None = None) -> list[tuple[bool, bool, bool]]:
    """The flat-axis settings tried for the 3D view ``a3`` (float array; its missing points NaN,
    or true in ``missing3``, bool or uint8 of its shape), none first.

    An axis is a flat candidate when it is short (``FLAT_MAX``) and the data vary across it far
    more than along the other axes (:func:`roughness`, ``ROUGH_RATIO`` times).
    """
    flats = [(False, False, False)]
    rough = roughness(a3, missing3)
    for d, n in enumerate(a3.shape):
        others = [rough[e] for e in range(3) if e != d and a3.shape[e] > 1]
        if 2 <= n <= FLAT_MAX and others and rough[d] > ROUGH_RATIO * max(others):
            flats.append(tuple(a == d for a in range(3)))
    return flats


def roughness(a3: np.ndarray, missing3: np.ndarray | None = None) -> list[float]:
    """Mean absolute difference of neighbours along each axis, on a subsample: about 64 whole
    lines along the axis, an eighth of each other axis apart; pairs with a missing point (true
    in ``missing3``, bool or uint8 of ``a3``'s shape) and differences that are not finite (NaN)
    are left out."""
    has_missing = missing3 is not None
    m3 = np.ascontiguousarray(missing3).view(np.uint8) if has_missing else np.zeros((1, 1, 1), np.uint8)
    return [float(v) for v in _roughness(np.ascontiguousarray(a3), m3, has_missing)]


@njit(nogil=True, cache=True)
def _roughness(a3, m3, has_missing):
    out = np.zeros(3)
    n = a3.shape
    for d in range(3):
        if n[d] < 2:
            continue
        e1, e2 = (1, 2) if d == 0 else ((0, 2) if d == 1 else (0, 1))
        k1, k2 = max(1, n[e1] // 8), max(1, n[e2] // 8)
        total, count = 0.0, 0
        for i1 in range(0, n[e1], k1):
            for i2 in range(0, n[e2], k2):
                for j in range(n[d] - 1):
                    if d == 0:
                        p, q = (j, i1, i2), (j + 1, i1, i2)
                    elif d == 1:
                        p, q = (i1, j, i2), (i1, j + 1, i2)
                    else:
                        p, q = (i1, i2, j), (i1, i2, j + 1)
                    if has_missing and (m3[p] or m3[q]):
                        continue
                    v = np.float64(a3[q]) - np.float64(a3[p])
                    if np.isfinite(v):
                        total += abs(v)
                        count += 1
        out[d] = total / count if count else 0.0
    return out


def sample_boxes(shape3, min_boxes: int = 1) -> list[Box] | None:
    """Boxes spread evenly over the array, at least ``min_boxes`` where they fit (None: try the
    whole array)."""
    size = math.prod(shape3)
    if size <= WHOLE_BELOW:
        return None
    nd = sum(n > 1 for n in shape3)
    edge = [min(n, EDGE[nd]) for n in shape3]
    want = min(MAX_BOXES, max(min_boxes, round(SAMPLE_FRACTION * size / math.prod(edge))))
    counts = [1, 1, 1]
    while math.prod(counts) < want:
        room = [shape3[d] // edge[d] / counts[d] for d in range(3)]
        d = int(np.argmax(room))
        if room[d] < 2:
            break
        counts[d] += 1
    axes = [[(shape3[d] - edge[d]) * (2 * i + 1) // (2 * counts[d]) for i in range(counts[d])] for d in range(3)]
    return [Box((a, b, c), (a + edge[0], b + edge[1], c + edge[2]))
            for a in axes[0] for b in axes[1] for c in axes[2]]


def estimate_bits(flat: np.ndarray, shape3, eb: float, settings, boxes, plans=None, x=None, origin_pred=0.0,
                  missing=None, codes=None, sq_error=None):
    """Estimated compressed bits of ``flat`` (values of internal 3D shape ``shape3``), the
    trial's quantization codes (int32, full-resolution layout; complete when ``boxes`` is
    None, i.e. the trial covered the whole array, and then equal to what
    :func:`strata.lossy.encoder.predict_all` computes for these settings) and their histogram
    per step (int64 ``(n_steps, HIST_CLIP + 2)``: ``|q|`` clipped, unpredictable values last;
    missing points left out).

    ``plans`` (from :func:`plan`) and the working copy ``x`` of ``flat`` may be shared by
    settings that differ only in interpolation order (a trial computes every point it
    writes before reading it; so without missing points ``x`` need not hold ``flat``'s values,
    only its size and dtype). Missing points (NaN in ``flat``, 1 in the flat uint8 ``missing``)
    are left out of the estimate; ``origin_pred`` is the first point's prediction. ``codes``
    (int32, ``flat.size``) may be given to reuse its memory. ``sq_error`` (float64, one per
    step), if given, receives each step's sum of squared errors over the trial's points (in the
    unit of ``flat``), which :func:`mean_sq_error` scales like the bits."""
    part, plans = plans or plan(shape3, settings, boxes)
    n_steps = len(part.steps)
    bounds = step_bounds(part.steps, eb, settings.alpha8, settings.beta8)
    codes = np.empty(flat.size, np.int32) if codes is None else codes
    x = flat.copy() if x is None else x
    encode_origin(x, codes, flat, bounds[0] if bounds else eb, origin_pred)
    hist = np.zeros((n_steps, HIST_CLIP + 2), np.int64)
    if n_steps == 0:
        return 0.0, codes, hist
    rows, counts, n_points, shape, level_points, counted = _trial_geometry(part, plans, boxes, settings.multi)
    eb_rows = np.repeat(np.stack([np.array(bounds, np.float64), np.zeros(len(bounds))], axis=1), counts, axis=0)
    cubic_rows = np.full(rows.shape[0], settings.cubic)
    mask = NO_MISSING if missing is None else missing
    if not settings.multi:
        get(INTERPOLATION).encode_passes(x, codes, flat, mask, shape, (rows, eb_rows, cubic_rows, n_points))
    else:  # each run of steps with one predictor, in order
        ends = np.cumsum(counts)
        for predictor, steps in Plan.runs_of(settings.predictors(n_steps), 0, n_steps - 1):
            a, b = int(ends[steps.start] - counts[steps.start]), int(ends[steps.stop - 1])
            predictor.encode_passes(x, codes, flat, mask, shape,
                                    (rows[a:b], eb_rows[a:b], cubic_rows[a:b], count_points(rows[a:b])))
    sse = _NO_ERROR if sq_error is None else sq_error
    sse[:] = 0.0
    count_codes(codes, flat, x, missing is not None, shape, counted, hist, sse)
    return _bits(hist, level_points, flat.dtype.itemsize * 8), codes, hist


def _trial_geometry(part: Partition, plans, boxes, multi: int = 0):
    """What a trial's passes need that depends on the partition and the boxes only (cached):
    the geometry rows of every step (the coarse steps once, the finest ``TRIAL_STEPS`` of every
    box), the passes per step, about the points they visit, the internal shape, the points per
    step, and the rows whose points the estimate counts: those of the dimension-by-dimension
    passes. Each sampled step's passes also write a margin around a box that the finer steps
    read, wider for multi-dimensional steps; counting the same points for every candidate
    weighs them on the same data (the margins add samples: counting the boxes alone misjudged
    the pass order of small arrays by 10 %)."""
    key = ("trial geometry", None if boxes is None else tuple(boxes), multi)
    if key not in part.cache:
        n_steps = len(part.steps)
        first = max(0, n_steps - TRIAL_STEPS)
        # step by step (a step's passes read only coarser steps); the coarse steps once
        merged = {i: [p for box_plan in (plans if i >= first else plans[:1]) for p in box_plan[i]]
                  for i in range(n_steps)}
        rows = geometry_rows(merged, part.shape)
        counted = rows if not multi else _trial_geometry(part, _box_plans(part, boxes, 0), boxes)[0]
        part.cache[key] = (rows, np.array([len(merged[i]) for i in range(n_steps)]), count_points(rows),
                           np.array(part.shape, np.int64), np.array(part.step_points, np.float64), counted)
    return part.cache[key]


@njit(nogil=True, cache=True)
def _bits(hist, level_points, value_bits):
    """Sum over steps of :func:`step_bits`."""
    return step_bits(hist, level_points, value_bits).sum()


@njit(nogil=True, cache=True)
def step_bits(hist, level_points, value_bits):
    """Per step (float64), the order-0 entropy of a trial's codes (``hist[step]``: ``|q|``
    clipped, unpredictable values last) scaled to the step's number of points (``level_points``)."""
    out = np.zeros(hist.shape[0])
    for i in range(hist.shape[0]):
        n = 0
        for v in hist[i]:
            n += v
        if n == 0:
            continue
        h = hist[i, -1] * np.float64(value_bits)
        for j in range(hist.shape[1] - 1):
            c = hist[i, j]
            if c > 0:
                h += c * np.log2(n / c)
        out[i] = h * level_points[i] / n
    return out


@njit(nogil=True, cache=True)
def sample_bits(sample, n_points, value_bits):
    """Estimated coded bits of ``n_points`` codes distributed like ``sample`` (int32 codes):
    order-0 entropy of ``|q|`` plus ``value_bits`` per unpredictable value (see :func:`_bits`)."""
    hist = np.zeros((1, HIST_CLIP + 2), np.int64)
    for c in sample:
        if c == UNPREDICTABLE:
            hist[0, HIST_CLIP + 1] += 1
        else:
            hist[0, min(abs(np.int64(c) - RADIUS), HIST_CLIP)] += 1
    return _bits(hist, np.full(1, np.float64(n_points)), value_bits)


@njit(nogil=True, cache=True)
def grid_bits(step_hist, n_steps, origin, n_points, value_bits):
    """:func:`sample_bits` of the codes of a whole grid -- the first point's (``origin``) and
    those of steps ``0 .. n_steps - 1``, counted in ``step_hist`` (a whole-array trial's
    histogram, :func:`estimate_bits`) -- with no pass over the codes."""
    hist = np.zeros((1, HIST_CLIP + 2), np.int64)
    for i in range(n_steps):
        for j in range(HIST_CLIP + 2):
            hist[0, j] += step_hist[i, j]
    hist[0, HIST_CLIP + 1 if origin == UNPREDICTABLE else min(abs(np.int64(origin) - RADIUS), HIST_CLIP)] += 1
    return _bits(hist, np.full(1, np.float64(n_points)), value_bits)


_NO_ERROR = np.zeros(0)


def mean_sq_error(sq_error: np.ndarray, hist: np.ndarray, level_points) -> float:
    """Estimated mean squared error over the array of a trial: each step's sum of squared
    errors (``sq_error``, :func:`estimate_bits`) per counted point (``hist``) scaled to the
    step's number of points (``level_points``), as :func:`_bits` scales the bits."""
    counts = hist.sum(axis=1)
    points = np.asarray(level_points, np.float64)
    total = float(points[counts > 0].sum())
    if total == 0:
        return 0.0
    return float((sq_error[counts > 0] / counts[counts > 0] * points[counts > 0]).sum()) / total


def plan(shape3, settings, boxes):
    """Partition and per-box pass plans (finest ``TRIAL_STEPS`` steps) of a candidate."""
    part = Partition.get(tuple(shape3), settings.order, settings.flat)
    return part, _box_plans(part, boxes, settings.multi)


def _box_plans(part: Partition, boxes, multi: int):
    """Per box (one plan for the whole array when ``boxes`` is None) the passes of every step
    of ``part`` a trial runs: the coarse steps whole, the finest ``TRIAL_STEPS`` for the box;
    the steps of the bit mask ``multi`` multi-dimensional (cached)."""
    key = ("trial plans", None if boxes is None else tuple(boxes), multi)
    if key not in part.cache:
        last = len(part.steps) - 1
        first = max(0, last + 1 - TRIAL_STEPS)
        steps = frozenset(i for i in range(last + 1) if multi >> i & 1)
        coarse = part.plan_passes(None, first - 1, 0, steps) if first > 0 else {}
        part.cache[key] = [{**coarse, **part.plan_passes(box, last, first, steps)} for box in (boxes or [None])]
    return part.cache[key]


#: The winning trial of :func:`choose` when the trials covered the whole array: its codes (int32,
#: full-resolution layout: what :func:`strata.lossy.encoder.predict_all` computes) and their
#: histogram per step (:func:`estimate_bits`), which sizes the levels without another pass.
Trial = namedtuple("Trial", "codes hist")


def choose(a: np.ndarray, eb: float, origin_pred: float = 0.0, missing: np.ndarray | None = None,
           work: np.ndarray | None = None, codes: np.ndarray | None = None, objective: str = "ratio",
           keep: Settings | None = None):
    """Settings for compressing ``a`` (float array, missing points NaN, flagged in the flat
    uint8 ``missing``) with absolute bound ``eb`` and first-point prediction ``origin_pred``,
    and the winning :data:`Trial` when the trials covered the whole array (small arrays), else
    None.

    ``objective`` (one of :data:`OBJECTIVES`): ``"ratio"`` takes the smallest estimated size
    at the bound; ``"psnr"`` then also weighs the level-wise bounds of :data:`PSNR_FACTORS`
    by bits at equal PSNR (:func:`_rate_distortion`).

    ``work`` (``a``'s size and dtype) and ``codes`` (int32, ``a``'s size) are memory the
    sampled trials may use (their contents are overwritten), so that a caller who needs such
    arrays next pays for touching their pages once.

    ``keep``: settings whose pass order, flat axes and interpolation the choice keeps (those of
    another stream: a precision layer's, :mod:`strata.lossy.layers`); the level-wise bounds and
    step predictors are chosen."""
    shape3 = as_3d_shape(a.shape)
    if keep is None:
        cands, orders = candidates(a.reshape(shape3)), ORDERS
    else:
        cands, orders = [Settings(order=keep.order, flat=keep.flat, cubic=keep.cubic)], ()
    check_objective(objective)
    if eb == 0 or len(cands) == 1 and keep is None:
        return cands[0] if keep is not None else Settings(), None
    flat = np.ascontiguousarray(a).reshape(-1)
    trials = _Trials(flat, shape3, eb, origin_pred, missing, work, codes)
    best, best_bits, best_trial = None, None, None
    for c in cands:
        bits, trial = trials.run(c)
        if best_bits is None or bits < best_bits:
            best, best_bits, best_trial = c, bits, trial
    # the pass order: the other directions on the best interpolation (none along one axis)
    first_bits = best_bits
    for order in orders if sum(n > 1 for n in shape3) > 1 else ():
        c = replace(best, order=order)
        bits, trial = trials.run(c)
        if bits < (1 - ORDER_MARGIN) * first_bits and bits < best_bits:
            best, best_bits, best_trial = c, bits, trial
    if objective == "psnr":
        best, best_bits, best_trial = _rate_distortion(trials, best)
    else:
        # level-wise bounds (QoZ): tried on the best interpolation, from the mildest on while
        # each one shrinks the estimate
        for alpha8, beta8 in LEVEL_FACTORS:
            c = replace(best, alpha8=alpha8, beta8=beta8)
            bits, trial = trials.run(c)
            if bits >= (1 - LEVEL_MARGIN) * best_bits:
                break
            best, best_bits, best_trial = c, bits, trial
    # the step predictors last: at the bounds chosen (tried before them, multi-dimensional steps
    # that shrank the estimate by less than the level-wise bounds would then have shrunk it
    # kept those from being taken: eraint_u at 1e-2 lost 15 %)
    best, best_bits, best_trial = _step_predictors(trials, best, best_bits, best_trial)
    return best, (best_trial if trials.boxes is None else None)


def _step_predictors(trials: _Trials, best: Settings, best_bits: float, best_trial):
    """Multi-dimensional interpolation on the steps of ``best`` that refine several axes (HPEZ,
    Liu et al., SIGMOD 2024, Sec. 4.2, chosen per level): a trial with every such step
    multi-dimensional, each step kept multi-dimensional where its estimated size is smaller by
    :data:`STEP_MARGIN` than ``best``'s (a step's codes depend on the coarser steps only
    through their reconstructions, which both predictors keep within the bound); on a sample of
    at least :data:`STEP_MIN_BOXES` boxes. Returns the best ``(settings, bits, trial)`` (bits of
    the sample it was chosen on; the trial None for a mixed choice, which no trial ran)."""
    part = plan(trials.shape3, best, trials.boxes)[0]
    every = sum(1 << i for i, st in enumerate(part.steps) if sum(st.refined) > 1)
    if not every or MULTIDIM not in STEP_PREDICTORS:
        return best, best_bits, best_trial
    if trials.boxes is not None and len(trials.boxes) < STEP_MIN_BOXES:
        # (the same memory, another sample: the trials write all they read)
        trials = _Trials(trials.flat, trials.shape3, trials.eb, trials.origin_pred, trials.missing, trials.work,
                         trials.codes, sample_boxes(trials.shape3, STEP_MIN_BOXES))
        best_bits, best_trial = trials.run(best)
    c = replace(best, multi=every)
    bits, trial = trials.run(c)
    value_bits = trials.flat.dtype.itemsize * 8
    points = np.array(part.step_points, np.float64)
    mine, theirs = step_bits(trial.hist, points, value_bits), step_bits(best_trial.hist, points, value_bits)
    keep = sum(1 << i for i in range(len(part.steps))
               if every >> i & 1 and mine[i] < (1 - STEP_MARGIN) * theirs[i])
    if not keep:
        return best, best_bits, best_trial
    if keep == every:
        return c, bits, trial
    # a mixed choice, not tried again (a trial is serial work: at 16 threads the tuner's
    # trials are most of a compression); its bits are the chosen steps' estimates
    chosen = np.array([keep >> i & 1 for i in range(len(mine))], bool)
    return replace(best, multi=keep), float(np.where(chosen, mine, theirs).sum()), None


class _Trials:
    """Runs trials of candidate settings on the sample of one array (:func:`estimate_bits`),
    sharing their plans and working memory (see :func:`choose`)."""

    def __init__(self, flat, shape3, eb, origin_pred, missing, work, codes, boxes=()):
        self.flat, self.shape3, self.eb, self.origin_pred, self.missing = flat, shape3, eb, origin_pred, missing
        self.boxes = sample_boxes(shape3) if boxes == () else boxes
        self.plans, self.works = {}, {}
        # sampled trials return no codes: they share one array (memory touched once, not per trial)
        self.codes = None
        if self.boxes is not None:
            self.codes = codes if codes is not None else np.empty(flat.size, np.int32)
        # a trial writes every point it reads (the origin first): without missing points its
        # working array needs no copy of the data, and one serves every trial
        self.work = None
        if missing is None:
            self.work = work if work is not None and self.boxes is not None else np.empty_like(flat)

    def run(self, settings: Settings, eb: float | None = None, sq_error: np.ndarray | None = None):
        """``(estimated bits, Trial)`` of ``settings`` at bound ``eb`` (default: the array's);
        ``sq_error`` as in :func:`estimate_bits`."""
        key = (settings.order, settings.flat, settings.multi)
        if key not in self.plans:
            self.plans[key] = plan(self.shape3, settings, self.boxes)
            self.works[key] = self.flat.copy() if self.missing is not None else self.work
        bits, codes, hist = estimate_bits(self.flat, self.shape3, self.eb if eb is None else eb, settings, self.boxes,
                                          self.plans[key], self.works[key], self.origin_pred, self.missing,
                                          self.codes, sq_error)
        return bits, Trial(codes, hist)

    def rate_and_psnr(self, settings: Settings, eb: float | None = None):
        """``(bits, PSNR in dB up to a constant, Trial)`` of ``settings``: the PSNR is
        ``-10 log10`` of the estimated mean squared error (:func:`mean_sq_error`), the same
        constant (the range) left out of every candidate."""
        part = plan(self.shape3, settings, self.boxes)[0]
        sse = np.zeros(len(part.steps))
        bits, trial = self.run(settings, eb, sse)
        mse = mean_sq_error(sse, trial.hist, part.step_points)
        return bits, (math.inf if mse == 0 else -10 * math.log10(mse)), trial


def _rate_distortion(trials: _Trials, best: Settings):
    """The level-wise bounds of :data:`PSNR_FACTORS` on ``best``'s interpolation, chosen by bits
    at equal PSNR as QoZ's rate-distortion tuning does (Liu et al., SC'22, Sec. IV-C): a
    candidate with fewer bits and a higher PSNR than the best so far wins, one with more bits
    and a lower PSNR loses; otherwise a second trial at the bound scaled by the ratio of their
    bits gives the candidate's local rate-distortion line, and it wins if that line passes
    above the best one's PSNR at the best one's bits. Candidates whose step bounds equal one
    tried already are skipped. (``best`` is tried again, for its squared error.) Returns the
    best ``(settings, bits, trial)``."""
    best_bits, best_psnr, best_trial = trials.rate_and_psnr(best)
    seen = {_bounds_of(trials, best)}
    for alpha8, beta8 in PSNR_FACTORS:
        c = replace(best, alpha8=alpha8, beta8=beta8)
        bounds = _bounds_of(trials, c)
        if bounds in seen:
            continue
        seen.add(bounds)
        bits, psnr, trial = trials.rate_and_psnr(c)
        if psnr >= best_psnr and bits <= best_bits:
            wins = True
        elif psnr <= best_psnr and bits >= best_bits:
            wins = False
        else:
            bits_r, psnr_r, _ = trials.rate_and_psnr(c, trials.eb * bits / best_bits)
            if bits_r == bits or not math.isfinite(psnr_r) or not math.isfinite(psnr):
                wins = False
            else:
                slope = (psnr - psnr_r) / (bits - bits_r)
                wins = psnr + slope * (best_bits - bits) > best_psnr
        if wins:
            best, best_bits, best_psnr, best_trial = c, bits, psnr, trial
    return best, best_bits, best_trial


def _bounds_of(trials: _Trials, settings: Settings) -> tuple[float, ...]:
    part = plan(trials.shape3, settings, trials.boxes)[0]
    return tuple(step_bounds(part.steps, trials.eb, settings.alpha8, settings.beta8))
