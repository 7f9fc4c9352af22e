"""The predictors of strata.lossy: one module per predictor behind one interface.

A predictor predicts the points of a refinement step (:mod:`strata.lossy.partition`) from the
reconstructed points of the coarser steps, pass by pass, closed loop: the encoder quantizes
each point against its prediction and keeps the reconstruction, the decoder rebuilds it from
its code, a progressive preview fills it with the prediction alone. Each step of a compression
plan (:class:`strata.lossy.plan.Plan`) names its predictor by an id (:data:`PREDICTORS`) and a
parameter of that predictor; encoder, reader and tuner find the module by that id.

==================  ====  ===============================================================
module              id    parameter of a step
==================  ====  ===============================================================
interpolation.py    0     1: cubic interpolation, 0: linear (SZ3's spline interpolation,
                          dimension by dimension)
multidim.py         1     1: cubic, 0: linear (HPEZ's multi-dimensional interpolation)
==================  ====  ===============================================================

A predictor's ``GROUPS`` says which passes its steps have: false, one per refined axis;
true, one per group of refined axes (:meth:`strata.lossy.partition.Partition.passes`).

:mod:`~strata.lossy.predictors.origin` codes the first point (the one-point starting grid of
every hierarchy) against the plan's first-point prediction, and
:mod:`~strata.lossy.predictors.lattice` is the value transform the predictors work under when
the data lie on a lattice (the plan's ``lattice``): it is no step predictor and has no id.

A new predictor is one new module with the functions of :class:`Predictor` and one new id in
:data:`PREDICTORS` (the stream's header stores the id of every step:
:class:`strata.lossy.header.LossyHeader`).
"""
from __future__ import annotations

from typing import Protocol

from ...errors import CorruptStreamError
from . import interpolation, multidim

#: Id of SZ3's interpolation (:mod:`strata.lossy.predictors.interpolation`).
INTERPOLATION = 0
#: Id of HPEZ's multi-dimensional interpolation (:mod:`strata.lossy.predictors.multidim`).
MULTIDIM = 1


class Predictor(Protocol):
    """What the encoder, the reader and the tuner call on a predictor module.

    A *table* is what the predictor's compiled passes take for the passes of some steps (the
    geometry of each pass, the bound and parameter of its step; opaque to the callers):
    ``pass_table(passes, bounds, param, part, key, rows, window)``, ``passes`` ``{step index:
    [Pass, ...]}``, ``bounds[i]`` the coding bound of step ``i``, ``param(i)`` its parameter; ``part``
    and ``key`` memoize the geometry in ``part.cache``; ``rows``, the passes' geometry in a
    region read's window (:meth:`strata.lossy.window.Window.rows`); ``window``, a residual
    layer's (:attr:`strata.lossy.plan.Plan.window`). ``geo`` places the arrays in the whole grid
    (a region read's window, :class:`strata.lossy.window.Window`; None: the whole array).
    """

    #: Whether its steps' passes are groups of axes (multi-dimensional) or one per axis.
    GROUPS: bool

    def pass_table(self, passes, bounds, param, part=None, key=None, rows=None, window=0.0): ...

    def encode_passes(self, x, codes, orig, missing, shape, table, geo=None) -> None:
        """Predict and quantize the table's points (reconstructions into ``x``, codes into ``codes``)."""

    def decode_passes(self, x, codes, missing, shape, table, geo=None) -> None:
        """Reconstruct the table's points from their codes."""

    def preview_passes(self, x, missing, shape, table, geo=None) -> None:
        """Fill the table's points with their prediction."""

    def count_codes(self, codes, flat, x, has_missing, shape, rows, hist, sse) -> None:
        """The tuner's cost estimate: a trial's codes counted per step (and their squared error)."""


#: Predictor module of each id.
PREDICTORS: dict[int, Predictor] = {INTERPOLATION: interpolation, MULTIDIM: multidim}


def get(predictor_id: int) -> Predictor:
    """The module of predictor ``predictor_id``.

    Raises:
        CorruptStreamError: no predictor has that id.
    """
    try:
        return PREDICTORS[predictor_id]
    except KeyError:
        raise CorruptStreamError(f"unknown predictor {predictor_id}") from None


__all__ = ["INTERPOLATION", "MULTIDIM", "PREDICTORS", "Predictor", "get"]
