"""Precision layers: one stream readable at any error bound from a coarse one down to its finest.

A layered stream holds lossy streams (:mod:`strata.lossy.codec`) at decreasing absolute bounds
``e_0 > e_1 > ... > e_n``. Layer 0 is the data at ``e_0`` (with its missing values, exact
values and metadata); layer ``k >= 1`` is the *residual* ``x - S_{k-1}`` at a bound a little
under ``e_k``, where ``S_{k-1}`` is the float64 sum of the values decoded from layers
``0..k-1``. Reading at bound ``e`` reads and decodes the layers down to the first ``e_k <= e``
and returns ``S_k`` in the data's dtype: every valid value is within ``e_k`` (the encoder
decodes each layer as the reader will and checks this in float64 after the cast to the dtype,
tightening a layer's bound until it holds), missing values and infinities are layer 0's, bit
for bit. The layers share layer 0's pass order and flat axes (:func:`strata.lossy.tune.choose`
keeps them), so a level ``l`` of every layer holds the same grid: levels and regions are read
layer by layer as from one stream, each layer fetching only its chunks
(:meth:`strata.lossy.LossyReader.bytes_for`); the layers are laid out coarse to fine, so a
read at bound ``e`` of the whole array is a prefix of the stream.

Why residual streams rather than bit planes or conditional coding: ``docs/lossy.md``
("Precision layers"), measured by ``benchmarks/precision_candidates.py`` and
``benchmarks/progressive_precision.py``. The idea of refining a reconstruction by coding its
error again at a finer bound is the multi-stage / residual refinement of progressive
compressors (Magri et al., "Multilevel techniques for compression and reduction of scientific
data -- the univariate case" and MGARD-MDR's error-controlled refactoring; IPComp, Li et al.,
SC'25, codes bit planes of one stream instead).

Layout (``docs/format.md``, section 10): the strata container (kind 4) whose header is
``u8 combine (0: sum, 1: sum rounded to a lattice through the last layer) | varint layer count
n | n x (f64 absolute bound | varint stream length) | (combine 1: f64 offset | f64 step)``, then
the n lossy streams in that order.
"""
from __future__ import annotations

import math

import numpy as np

from ..container import KIND_LAYERS, PREAMBLE_BYTES, Reader, Source, Writer, pack, stream_kind, unpack_header
from ..errors import CorruptStreamError, InvalidInputError
from .codec import absolute_bound, compress, prepare_input
from .predictors import lattice
from .reader import LossyReader
from .tune import Settings

#: Most layers a stream may hold.
MAX_LAYERS = 64
#: Ratio of consecutive default layer bounds (a decade each).
LAYER_STEP = 10.0
#: The coarsest default layer, relative to the value range of the valid values.
COARSEST = 1e-2
#: Bytes from a stream's start a reader fetches first to know the prefix a bound needs
#: (:func:`prefix_length`): a layered stream's preamble and header up to a dozen layers (more
#: take a second request: :func:`header_end`).
HEAD_BYTES = 256
#: How each layer's values combine with the previous layers': added in float64 ...
COMBINE_SUM = 0
#: ... and, through the last layer (bound 0), rounded to a lattice (``offset + k * step``).
COMBINE_SNAP = 1
#: Relative share under its nominal bound that a coarser layer guarantees (:func:`layer_bounds`).
_SLACK = 1e-6
#: Times a layer's bound is tightened (halved) when its check fails, before it is coded losslessly.
_RETRIES = 3


def layer_bounds(finest: float, value_range: float, layers=None, relative: bool = False) -> list[float]:
    """Absolute bounds of the layers, coarse to fine, the last ``finest``: ``layers`` (coarser
    bounds, absolute, or relative to ``value_range`` when ``relative``), or by default every
    decade above ``finest`` up to :data:`COARSEST` of the value range (none for a zero range,
    nor relative ones).
    A bound of 0 (lossless) gets the default decades from ``1e-6`` of the range up. Every
    layer's bound is a relative 1e-6 under its nominal value (what the layer then guarantees).

    Raises:
        InvalidInputError: a layer bound not a finite number above ``finest``, repeated, or
            more than :data:`MAX_LAYERS` layers.
    """
    if relative and not value_range > 0:
        return [finest]  # (no valid values, or one value: nothing to layer)
    if layers is None:
        top = COARSEST * value_range * (1 + 1e-9)
        start = finest if finest > 0 else 1e-6 * value_range
        out = [start * LAYER_STEP ** j for j in range(MAX_LAYERS - 1, 0, -1) if 0 < start * LAYER_STEP ** j <= top]
        out += [start] if finest == 0 and start > 0 else []
    else:
        out = []
        for v in np.atleast_1d(np.asarray(layers, dtype=object)).tolist():
            try:
                b = float(v) * (value_range if relative else 1.0)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"layer bounds must be numbers, got {v!r}") from exc
            if not math.isfinite(b) or not b > finest:
                raise InvalidInputError(f"layer bounds must be finite and coarser than the finest bound, got {v!r}")
            out.append(b)
        if len(set(out)) != len(out):
            raise InvalidInputError("layer bounds repeated")
        out.sort(reverse=True)
    if len(out) >= MAX_LAYERS:
        raise InvalidInputError(f"at most {MAX_LAYERS} layers, got {len(out) + 1}")
    # (a layer guarantees a hair under its bound, so that a reader asking for that bound computed
    # its own way -- 1e-3 times a float32 range -- is served by it, not by the next layer or an error)
    return [e * (1 - _SLACK) for e in out + [finest]]


def compress_layers(array, *, abs_error=None, rel_error=None, layers=None, mask=None, fill_value=None,
                    metadata=None, objective: str = "ratio", progress=None) -> bytes:
    """Compress ``array`` into precision layers readable at any bound from the coarsest layer's
    down to ``abs_error`` / ``rel_error`` (the finest).

    Data on a lattice (integers stored as floats, a fixed step: :mod:`strata.lossy.predictors.lattice`)
    whose finest bound is below the step end with one *exact* layer (bound 0) instead of the
    layers under the step: its residual is coded within half a step and the sum rounded to the
    lattice, which gives back every value bit for bit.

    Args:
        array, abs_error, rel_error, mask, fill_value, metadata, objective: as
            :func:`strata.lossy.compress` (the bound is the finest layer's).
        layers: the coarser layers' bounds, absolute, or relative to the value range when the
            bound is ``rel_error``, in any order; default every decade from the finest bound up
            to :data:`COARSEST` of the range (``rel_error=1e-6``: 1e-2, 1e-3, 1e-4, 1e-5 and
            1e-6).
        progress: optional callable ``progress(done, total)`` after each layer.

    Returns:
        The layered stream (bytes): read it with :func:`strata.open` /
        :class:`strata.lossy.LayeredReader` or :func:`strata.decompress`.

    Raises:
        InvalidInputError: as :func:`strata.lossy.compress`, or bad ``layers``
            (:func:`layer_bounds`).
        UnsupportedDtypeError: ``array`` is not float32/float64.
    """
    a, prep = prepare_input(array, mask, fill_value)
    _, _, finest = absolute_bound(prep.valid_range, abs_error, rel_error)
    vrange = prep.valid_range[1] - prep.valid_range[0] if prep.valid_range is not None else 0.0
    bounds = layer_bounds(finest, vrange, layers, relative=rel_error is not None)
    if a.size == 0 or prep.valid_range is None:
        bounds = bounds[-1:]  # (nothing is lossy: one layer)
    snap = _lattice(a, prep, finest) if len(bounds) > 1 else None
    if snap is not None:  # (the layers under the step give way to one exact layer)
        bounds = [e for e in bounds if e >= snap[1]] + [0.0]
        if len(bounds) == 1:
            snap, bounds = None, [0.0]  # (one layer: lossless on the lattice, as the finest bound codes it)
    report = progress or (lambda done, total: None)
    # the first layer's settings chosen for the finer layers, which hold most of the bytes (at the
    # geometric middle of the lossy bounds), their pass order, flat axes and interpolation kept by
    # every layer: where a coarser layer's code is 0 its value is its rule's interpolation, which
    # the residual's prediction cancels only under the same rule. Against the first layer tuned
    # at its own bound (10 fields of sci + zoo, reads over dedicated streams, geomean): 1.11 /
    # 1.15 / 1.11 / 1.07 / 0.89 at 1e-2 .. 1e-6 against 1.02 / 1.15 / 1.16 / 1.11 / 0.91
    # (eraint_z's linear first layer made its smooth residuals cost 1.8x at 1e-4)
    lossy = [e for e in bounds if e > 0]
    first = compress(array, abs_error=bounds[0], mask=mask, fill_value=fill_value, metadata=metadata,
                     objective=objective, tune_bound=math.sqrt(lossy[0] * lossy[-1]) if lossy else None)
    streams = [first]
    report(1, len(bounds))
    if len(bounds) > 1:
        with LossyReader(first) as r0:
            y0 = r0.read(masked=True)
            h = r0.header
            keep = Settings(order=h.order, flat=h.flat, cubic=bool(h.cubic_mask))
        x = a.astype(np.float64).reshape(-1)
        valid = ~np.ma.getmaskarray(y0).reshape(-1) & np.isfinite(x)
        x[~valid] = 0.0
        total = np.where(valid, np.ma.getdata(y0).reshape(-1).astype(np.float64), 0.0)
        top = float(np.abs(x).max(initial=0.0)) + bounds[0]
        # the cast to the dtype and the float64 sums round: a layer's residual is coded that much tighter
        margin = float(np.spacing(a.dtype.type(top))) / 2 + 8 * float(np.spacing(top))
        for k in range(1, len(bounds)):
            exact = snap if k == len(bounds) - 1 else None
            layer = _Layer(x, valid, a, bounds[k], bounds[k - 1], margin, exact)
            stream, total = layer.code(total, keep, objective)
            streams.append(stream)
            report(k + 1, len(bounds))
    return pack(KIND_LAYERS, pack_header(bounds, [len(s) for s in streams], snap), streams)


def _lattice(a: np.ndarray, prep, finest: float) -> tuple[float, float] | None:
    """``(offset, step)`` of the lattice the valid values lie on when the finest bound codes
    them losslessly on it (:func:`strata.lossy.predictors.lattice.choose` with no step of
    error), else None."""
    on = lattice.choose(a.reshape(-1), prep.missing, finest, prep.valid_range)
    return (on.offset, on.step) if on is not None and on.m == 0 else None


class _Layer:
    """How one residual layer is coded and checked (:meth:`code`).

    ``x``: the data (flat float64, 0 where not ``valid``); ``a``: the data as given (its shape
    and dtype); ``e``: the layer's bound, ``above`` the previous layer's; ``margin``: what the
    float64 sums and the cast to the dtype may add; ``snap``: ``(offset, step)`` for the exact
    layer of data on a lattice (``e`` is 0: the sum is rounded to the lattice)."""

    def __init__(self, x, valid, a, e: float, above: float, margin: float, snap):
        self.x, self.valid, self.a, self.e, self.snap = x, valid, a, e, snap
        # (a residual is at most ``above``: coded in the data's dtype, it rounds by half a unit there)
        cast = float(np.spacing(a.dtype.type(above))) / 2 + margin
        # the window its codes are folded into: a little wider than ``above`` (what the sums and
        # casts may add); a residual outside it is stored exactly
        self.window = above * (1 + 1e-9) + 2 * cast
        target = (0.5 - lattice.SLACK) * snap[1] if snap is not None else e
        self.trials = ([(max(target - cast, target / 2), a.dtype)]
                       + [(target / 2 ** (i + 2), a.dtype) for i in range(_RETRIES - 1)] + [(0.0, np.float64)])

    def values(self, total: np.ndarray) -> np.ndarray:
        """The values a reader returns from the sum ``total`` (float64): cast to the dtype, or
        rounded to the lattice."""
        if self.snap is None:
            return total.astype(self.a.dtype)
        offset, step = self.snap
        return (offset + step * np.rint((total - offset) / step)).astype(self.a.dtype)

    def code(self, total: np.ndarray, keep, objective) -> tuple[bytes, np.ndarray]:
        """The layer's stream and the new sum: the residual ``x - total`` coded at the first of
        ``trials`` (bound, dtype) after which every valid value is within ``e`` (bit for bit
        for the exact layer).

        Raises:
            InvalidInputError: not even the lossless float64 residual does (a bound of 0 on
                float64 values near 0 beside large ones: the sums round).
        """
        residual = self.x - total
        for bound, dtype in self.trials:
            stream = compress(residual.astype(dtype).reshape(self.a.shape), abs_error=bound, keep=keep,
                              objective=objective, window=self.window)
            with LossyReader(stream) as r:
                new = total + r.read().reshape(-1)
            err = np.abs(self.values(new).astype(np.float64) - self.x)[self.valid]
            if not err.size or float(err.max()) <= self.e:
                return stream, new
        raise InvalidInputError(f"a layer at bound {self.e:g} cannot be held by float64 sums of layers for these "
                                "values: use a coarser finest bound")


def pack_header(bounds: list[float], lengths: list[int], snap: tuple[float, float] | None = None) -> bytes:
    """The layered container's header (see the module docstring)."""
    w = Writer().u8(COMBINE_SUM if snap is None else COMBINE_SNAP).varint(len(bounds))
    for e, n in zip(bounds, lengths):
        w.f64(e).varint(n)
    if snap is not None:
        w.f64(snap[0]).f64(snap[1])
    return w.getvalue()


def parse_header(raw) -> tuple[list[tuple[float, int]], tuple[float, float] | None]:
    """``([(bound, stream length), ...], snap)`` of a layered header, coarse to fine, and the
    lattice ``(offset, step)`` a read through the last layer rounds to (None without), checked: a
    known combination, 1..:data:`MAX_LAYERS` layers, finite non-negative strictly decreasing
    bounds, the last 0 with a lattice of finite offset and positive finite step (the reader
    checks the lengths against the bytes it holds).

    Raises:
        CorruptStreamError: otherwise.
    """
    r = Reader(raw, "layered header")
    combine = r.u8()
    if combine not in (COMBINE_SUM, COMBINE_SNAP):
        raise CorruptStreamError(f"unknown layer combination {combine}")
    n = r.varint(MAX_LAYERS)
    if n < 1:
        raise CorruptStreamError("a layered stream without layers")
    out = []
    for _ in range(n):
        e = r.f64()
        out.append((e, r.varint()))
    snap = (r.f64(), r.f64()) if combine == COMBINE_SNAP else None
    r.done()
    bounds = [e for e, _ in out]
    if not all(math.isfinite(e) and e >= 0 for e in bounds) or any(a <= b for a, b in zip(bounds, bounds[1:])):
        raise CorruptStreamError(f"layer bounds not finite, non-negative and decreasing: {bounds}")
    if snap is not None and not (math.isfinite(snap[0]) and math.isfinite(snap[1]) and snap[1] > 0
                                 and bounds[-1] == 0 and n > 1):
        raise CorruptStreamError(f"a lattice {snap} for the exact last layer of bounds {bounds}")
    return out, snap


def header_end(head) -> int | None:
    """Bytes from the start of a layered stream up to the end of its header (preamble, header
    and its CRC-32), from its first bytes ``head``; None for any other stream, or a ``head``
    shorter than the preamble."""
    src = Source(head)
    if stream_kind(src) != KIND_LAYERS:
        return None
    return PREAMBLE_BYTES + int.from_bytes(bytes(src.read(PREAMBLE_BYTES - 4, 4)), "little") + 4


def prefix_length(head, error_bound: float) -> int | None:
    """Bytes from the start of a stream that a read at ``error_bound`` (absolute) fetches, from
    its first bytes ``head`` (:data:`HEAD_BYTES`, or the whole stream if shorter): the header and
    the layers down to the first whose bound is at most ``error_bound``, for a layered stream;
    None for any other stream, or a bound finer than every layer's (the reader then says why).

    Raises:
        FormatError, CorruptStreamError, TruncatedStreamError: a layered stream whose header is
            damaged or cut short.
    """
    src = Source(head)
    if stream_kind(src) != KIND_LAYERS:
        return None
    raw, off = unpack_header(src, KIND_LAYERS)
    entries, _ = parse_header(raw)
    k = next((i for i, (b, _) in enumerate(entries) if b <= float(error_bound)), None)
    return None if k is None else off + sum(n for _, n in entries[:k + 1])


__all__ = ["COARSEST", "COMBINE_SNAP", "COMBINE_SUM", "HEAD_BYTES", "LAYER_STEP", "MAX_LAYERS", "compress_layers",
           "header_end", "layer_bounds", "pack_header", "parse_header", "prefix_length"]
