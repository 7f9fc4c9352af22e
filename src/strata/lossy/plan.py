"""The compression plan: what the encoder and the decoder share, made once.

A :class:`Plan` holds every choice a compression makes before it codes anything: the array's
shape and dtype, the bound the predictor and quantizer work with, the partition (pass order and
flat axes: :mod:`strata.lossy.partition`), per refinement step its predictor (an id of
:mod:`strata.lossy.predictors` and that predictor's parameter) and its bound (SZ3's level-wise
factors), the lattice the values are coded on, and the first point's prediction.

Data flow one way: the tuner (:func:`strata.lossy.tune.choose`) chooses the settings, from which
:meth:`Plan.make` builds the plan with the facts of the array (shape, dtype, bound, lattice,
first-point prediction); the encoder (:mod:`strata.lossy.encoder`) consumes it, the header
(:class:`strata.lossy.header.LossyHeader`) writes what it holds, and the reader rebuilds it from
the header (:meth:`strata.lossy.header.LossyHeader.plan`). Nothing downstream of the plan
chooses how a point is predicted or quantized. (The chunk edge and coder of each level are
chosen by the encoder from the level's codes, :func:`strata.lossy.encoder.choose_tile`: a
layout decision that the level's head records and that changes no decoded value.)
"""
from __future__ import annotations

from collections import namedtuple
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .partition import Partition, Step, Vec, as_3d_shape
from .predictors import INTERPOLATION, Predictor, get
from .predictors.lattice import Lattice


def step_bounds(steps: tuple[Step, ...], eb: float, alpha8: int, beta8: int) -> tuple[float, ...]:
    """Absolute error bound of each of ``steps`` under the bound ``eb`` and SZ3's level-wise
    factors ``alpha8 / 8``, ``beta8 / 8`` (:func:`_step_bounds`; IEEE multiplications only:
    reproducible)."""
    return _step_bounds(tuple(st.level_number for st in steps), eb, alpha8, beta8)


@lru_cache(maxsize=256)
def _step_bounds(level_numbers: tuple[int, ...], eb: float, alpha8: int, beta8: int) -> tuple[float, ...]:
    """SZ3's level-wise bounds: ``eb / min(alpha**(level - 1), beta)`` per step."""
    alpha, beta = alpha8 / 8.0, beta8 / 8.0
    out = []
    for level in level_numbers:
        r = 1.0
        for _ in range(level - 1):
            r *= alpha
        out.append(eb / min(r, beta))
    return tuple(out)


class StepPlan(NamedTuple):
    """How one refinement step is predicted and quantized (:meth:`Plan.step`)."""

    #: Predictor id (a key of :data:`strata.lossy.predictors.PREDICTORS`).
    predictor: int
    #: The predictor's parameter (interpolation: 1 cubic, 0 linear).
    param: int
    #: Coding bound of the step's points.
    bound: float


#: Arrays the chunk kernels take for a level (:func:`level_geometry`): the internal 3D shape and
#: the level's per-axis stride (int64, 3), the axes its step refines (bool, 3; all for the base
#: level), whether it is the base level, and its chunk boxes (int64 ``(n_chunks, 6)``,
#: :meth:`strata.lossy.partition.Partition.chunk_boxes`). A tuple: numba takes it as one argument.
LevelGeometry = namedtuple("LevelGeometry", "shape stride refined base boxes")


def level_geometry(part: Partition, level: int, tile: int | None = None) -> LevelGeometry:
    """:data:`LevelGeometry` of ``level`` on chunk edge ``tile`` (default: the partition's;
    cached in ``part.cache``)."""
    key = ("geometry", level, tile)
    if key not in part.cache:
        stride = part.level_stride(level)
        steps = part.level_steps(level)
        refined = (np.array(steps[0].refined, dtype=np.bool_) if level > 0
                   else np.ones(3, dtype=np.bool_))
        part.cache[key] = LevelGeometry(np.array(part.shape, np.int64), np.array(stride, np.int64), refined,
                                        level == 0, part.chunk_boxes(level, tile))
    return part.cache[key]


class Plan(NamedTuple):
    """A compression plan (see the module docstring). Per refinement step ``i`` of
    :attr:`partition`: ``predictors[i]``, ``params[i]``, ``bounds[i]`` (:meth:`step`).
    Immutable; a named tuple, which a compression builds in a microsecond less than a frozen
    dataclass (a small array's whole compression takes about 0.4 ms).

    Attributes:
        shape: the array's shape (its internal 3D view: :attr:`partition`).
        dtype: its dtype (float32 or float64).
        eb: the coding bound: the absolute bound, or on a lattice the bound of the lattice
            index (:attr:`strata.lossy.predictors.lattice.Lattice.coding_bound`, in steps).
        order: axis order of the passes within a step.
        flat: axes refined to stride 1 first.
        alpha8, beta8: SZ3's level-wise bound factors times 8 (8 = 1.0), which give
            :attr:`bounds`.
        predictors: predictor id of each step (:data:`strata.lossy.predictors.PREDICTORS`).
        params: each step's parameter of its predictor (interpolation: 1 cubic, 0 linear).
        bounds: coding bound of each step.
        lattice: the lattice the valid values are coded on (their index), or None.
        origin_pred: prediction of the first point (the one-point starting grid).
        partition: steps, levels, passes and chunks of the internal 3D view (shared, cached).
        window: the values coded lie in ``[-window, window]`` (a residual precision layer,
            :mod:`strata.lossy.layers`): its codes are folded into that window
            (:func:`strata.lossy.quantize.quantize_window`); 0 for none.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    eb: float
    order: Vec
    flat: tuple[bool, bool, bool]
    alpha8: int
    beta8: int
    predictors: tuple[int, ...]
    params: tuple[int, ...]
    bounds: tuple[float, ...]
    lattice: Lattice | None
    origin_pred: float
    partition: Partition
    window: float = 0.0

    @staticmethod
    def make(shape: tuple[int, ...], dtype, eb: float, order: Vec = (0, 1, 2),
             flat: tuple[bool, bool, bool] = (False, False, False), alpha8: int = 8, beta8: int = 8,
             params=True, lattice: Lattice | None = None, origin_pred: float = 0.0,
             predictors=INTERPOLATION, window: float = 0.0) -> Plan:
        """The plan of the settings the tuner chose (:class:`strata.lossy.tune.Settings`'
        fields) for an array of ``shape`` and ``dtype`` at coding bound ``eb``: each step
        predicted by ``predictors`` (one id for every step, or a sequence of one per step) with
        parameter ``params`` (likewise), its bound by the level-wise factors; ``window`` as
        :attr:`window`."""
        part = Partition.get(as_3d_shape(shape), order, flat)
        return Plan(tuple(shape), np.dtype(dtype), float(eb), part.order, part.flat, int(alpha8), int(beta8),
                    _per_step(predictors, len(part.steps)), _per_step(params, len(part.steps)),
                    _step_bounds(part.level_numbers, float(eb), int(alpha8), int(beta8)), lattice, float(origin_pred),
                    part, float(window))

    @property
    def multi(self) -> frozenset:
        """The steps whose passes are groups of axes (a predictor with ``GROUPS``): what
        :meth:`strata.lossy.partition.Partition.plan_passes` takes as ``multi``."""
        return _multi(self.predictors)

    def passes(self, box=None, last: int | None = None, first: int = 0) -> dict:
        """:meth:`strata.lossy.partition.Partition.plan_passes` of steps ``first .. last``
        (default: the last step) under this plan's predictors."""
        last = len(self.partition.steps) - 1 if last is None else last
        return self.partition.plan_passes(box, last, first, self.multi)

    def step(self, i: int) -> StepPlan:
        """How step ``i`` is predicted and quantized."""
        return StepPlan(self.predictors[i], self.params[i], self.bounds[i])

    @property
    def origin_bound(self) -> float:
        """Coding bound of the first point: the first step's (the bound when there is none)."""
        return self.bounds[0] if self.bounds else self.eb

    def table(self, predictor: Predictor, passes: dict, **kwargs):
        """``predictor``'s pass table of ``passes`` under this plan (its bounds, parameters and
        window; ``kwargs``: :meth:`strata.lossy.predictors.Predictor.pass_table`'s ``part``,
        ``key``, ``rows``)."""
        return predictor.pass_table(passes, self.bounds, self.param, window=self.window, **kwargs)

    def param(self, step: int) -> int:
        """Predictor parameter of step ``step`` (the ``param`` of a predictor's pass table)."""
        return self.params[step]

    def predictor(self, step: int) -> Predictor:
        """Predictor module of step ``step``."""
        return get(self.predictors[step])

    def runs(self, first: int, last: int) -> tuple[tuple[Predictor, range], ...]:
        """Steps ``first .. last`` in runs of consecutive steps with one predictor: ``(predictor
        module, step indices)`` each, in order (one run while every step is interpolated: the
        passes of a run go to its predictor in one call)."""
        return Plan.runs_of(self.predictors, first, last)

    @staticmethod
    def runs_of(ids: tuple[int, ...], first: int, last: int) -> tuple[tuple[Predictor, range], ...]:
        """:meth:`runs` of the step predictor ids ``ids``."""
        if last < first:
            return ()
        if ids.count(ids[first]) == len(ids):  # (one predictor throughout)
            return ((get(ids[first]), range(first, last + 1)),)
        out, i = [], first
        while i <= last:
            j = i
            while j < last and ids[j + 1] == ids[i]:
                j += 1
            out.append((get(ids[i]), range(i, j + 1)))
            i = j + 1
        return tuple(out)

    def geometry(self, level: int, tile: int | None = None) -> LevelGeometry:
        """:func:`level_geometry` of ``level`` on chunk edge ``tile``."""
        return level_geometry(self.partition, level, tile)


def _per_step(value, n: int) -> tuple[int, ...]:
    """``value`` (one int for every step, or a sequence of one per step) as ``n`` ints."""
    return (int(value),) * n if isinstance(value, (bool, int, np.integer)) else tuple(int(v) for v in value)


@lru_cache(maxsize=256)
def _multi(predictors: tuple[int, ...]) -> frozenset:
    return frozenset(i for i, p in enumerate(predictors) if get(p).GROUPS)


__all__ = ["LevelGeometry", "Plan", "StepPlan", "level_geometry", "step_bounds"]
