"""The lossy stream's header: what a reader needs before touching any level.

Fields (binary, in this order; see ``docs/format.md``): number of dimensions and the shape
(varints), dtype code, error-bound mode and requested value, the absolute bound in force, the
predictor settings (pass order, flat axes, level-wise bound factors, cubic/linear per step),
the length of the exact-value section, and per level the lengths of its head and payload;
then an optional extension (streams written before it have none): flags, the missing-value
fields (count, fill pattern, the first point's prediction, per level the lengths of its mask
index and mask payload), the metadata section's length, the valid range, the enhancement section's length,
the target section's length, the lattice the values are coded on (:mod:`strata.lossy.predictors.lattice`),
the predictor id of every step (:mod:`strata.lossy.predictors`; absent: every step interpolated
dimension by dimension), the window of a residual precision layer's codes (:mod:`strata.lossy.layers`).
Every size is validated against ``MAX_ELEMENTS`` and the stream length before anything is
allocated.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..container import Reader, Writer
from ..errors import CorruptStreamError, ResourceLimitError
from .partition import Partition, as_3d_shape
from .plan import Plan
from .predictors import INTERPOLATION, PREDICTORS
from .predictors.lattice import EXACT_INTEGER, Lattice

#: Largest number of values strata decodes (2**40, 4 TiB of float32).
MAX_ELEMENTS = 1 << 40
#: Largest number of dimensions.
MAX_NDIM = 32

DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f8")}
DTYPE_CODES = {np.dtype("float32"): 1, np.dtype("float64"): 2}
BOUND_ABS, BOUND_REL = 0, 1
#: Extension flags.
EXT_MISSING, EXT_METADATA, EXT_RANGE, EXT_ENHANCE, EXT_TARGET, EXT_LATTICE, EXT_PREDICTORS = 1, 2, 4, 8, 16, 32, 64
#: ... and the window of a residual precision layer's codes (:attr:`strata.lossy.plan.Plan.window`).
EXT_WINDOW = 128
#: Flags a reader knows; a stream with a higher bit set is refused (a later writer's section).
EXT_KNOWN = 256
#: Most refinement steps (three axes of at most 2**40 points).
MAX_STEPS = 3 * 41
ORDERS = list(itertools.permutations(range(3)))


@dataclass
class LevelEntry:
    head_len: int
    payload_len: int
    mask_index_len: int = 0
    mask_len: int = 0

    @property
    def total(self) -> int:
        """Bytes of the level's sections: head, mask index, mask payload, code payload."""
        return self.head_len + self.mask_index_len + self.mask_len + self.payload_len


@dataclass
class LossyHeader:
    """Decoded header of a lossy stream.

    ``alpha8``/``beta8`` are the level-wise bound factors times 8 (SZ3's ``alpha``,
    ``beta``): the stride-``s`` step uses ``eb / min(alpha**(log2(s)), beta)``.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    bound_mode: int
    bound_value: float
    eb: float
    order: tuple[int, int, int] = (0, 1, 2)
    flat: tuple[bool, bool, bool] = (False, False, False)
    alpha8: int = 8
    beta8: int = 8
    cubic_mask: int = 0
    exact_len: int = 0
    levels: list[LevelEntry] = field(default_factory=list)
    #: Missing points (0: the stream has no mask), their fill pattern (``itemsize`` bytes).
    missing_count: int = 0
    fill_bits: bytes = b""
    #: Prediction of the first point (the mean of the valid values when there is a mask, else 0).
    origin_pred: float = 0.0
    metadata_len: int = 0
    valid_range: tuple[float, float] | None = None
    #: Bytes of the enhancement section (:mod:`strata.enhance`), last in the stream; 0: none.
    enhance_len: int = 0
    #: Bytes of the target section (:mod:`strata.lossy.target`), after the levels and before the
    #: enhancement section; 0: none.
    target_len: int = 0
    #: The lattice the valid values are coded on (their index ``k``), or None (the values).
    lattice: Lattice | None = None
    #: The predictor id of each refinement step (:data:`strata.lossy.predictors.PREDICTORS`), or
    #: None: every step interpolated dimension by dimension (id 0).
    predictors: tuple[int, ...] | None = None
    #: The window of a residual precision layer's codes (:attr:`strata.lossy.plan.Plan.window`);
    #: 0: none.
    window: float = 0.0

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def partition(self) -> Partition:
        return Partition.get(as_3d_shape(self.shape), self.order, self.flat)

    @property
    def coding_eb(self) -> float:
        """The bound the predictor and quantizer work with (:attr:`strata.lossy.plan.Plan.eb`):
        ``eb``, or on a lattice the bound of the lattice index
        (:attr:`strata.lossy.predictors.lattice.Lattice.coding_bound`, in steps)."""
        return self.lattice.coding_bound if self.lattice is not None else self.eb

    def plan(self) -> Plan:
        """The compression plan the stream was coded with (:class:`strata.lossy.plan.Plan`):
        each step by its predictor (:attr:`predictors`), cubic where :attr:`cubic_mask` has its
        bit."""
        n = len(self.partition().steps)
        every = (1 << n) - 1
        cubic = self.cubic_mask & every
        params = 1 if cubic == every else 0 if cubic == 0 else [(cubic >> i) & 1 for i in range(n)]
        return Plan.make(self.shape, self.dtype, self.coding_eb, self.order, self.flat,
                         self.alpha8, self.beta8, params, self.lattice, self.origin_pred,
                         INTERPOLATION if self.predictors is None else self.predictors, self.window)

    @classmethod
    def of(cls, plan: Plan, bound_mode: int, bound_value: float, eb: float, **facts) -> LossyHeader:
        """The header of a stream coded with ``plan`` (what the header stores of it: pass order,
        flat axes, level-wise factors, predictor and cubic or linear per step, lattice,
        first-point prediction) under the user's bound (``bound_mode``, ``bound_value``, the
        absolute bound ``eb``); ``facts``: the other fields (valid range, missing values, section
        lengths)."""
        n = len(plan.predictors)
        predictors = None if plan.predictors.count(INTERPOLATION) == n else plan.predictors
        ones = plan.params.count(1)
        cubic_mask = ((1 << n) - 1 if ones == n else 0 if ones == 0
                      else sum(1 << i for i, p in enumerate(plan.params) if p))
        return cls(plan.shape, plan.dtype, bound_mode, bound_value, eb, plan.order, plan.flat, plan.alpha8,
                   plan.beta8, cubic_mask, lattice=plan.lattice, origin_pred=plan.origin_pred,
                   predictors=predictors, window=plan.window, **facts)

    def to_bytes(self) -> bytes:
        w = Writer().u8(len(self.shape))
        for n in self.shape:
            w.varint(n)
        w.u8(DTYPE_CODES[np.dtype(self.dtype).newbyteorder("=")])
        w.u8(self.bound_mode).f64(self.bound_value).f64(self.eb)
        w.u8(ORDERS.index(tuple(self.order)))
        w.u8(sum(1 << a for a in range(3) if self.flat[a]))
        w.u8(self.alpha8).u8(self.beta8).varint(self.cubic_mask)
        w.varint(self.exact_len)
        w.varint(len(self.levels))
        for lv in self.levels:
            w.varint(lv.head_len).varint(lv.payload_len)
        flags = ((EXT_MISSING if self.missing_count else 0) | (EXT_METADATA if self.metadata_len else 0)
                 | (EXT_RANGE if self.valid_range is not None else 0) | (EXT_ENHANCE if self.enhance_len else 0)
                 | (EXT_TARGET if self.target_len else 0) | (EXT_LATTICE if self.lattice is not None else 0)
                 | (EXT_PREDICTORS if self.predictors is not None else 0) | (EXT_WINDOW if self.window else 0))
        w.u8(flags)
        if self.missing_count:
            w.varint(self.missing_count).raw(self.fill_bits).f64(self.origin_pred)
            for lv in self.levels:
                w.varint(lv.mask_index_len).varint(lv.mask_len)
        if self.metadata_len:
            w.varint(self.metadata_len)
        if self.valid_range is not None:
            w.f64(self.valid_range[0]).f64(self.valid_range[1])
        if self.enhance_len:
            w.varint(self.enhance_len)
        if self.target_len:
            w.varint(self.target_len)
        if self.lattice is not None:
            w.f64(self.lattice.offset).f64(self.lattice.step).varint(self.lattice.m)
        if self.predictors is not None:
            w.blob(bytes(self.predictors))
        if self.window:
            w.f64(self.window)
        return w.getvalue()

    @classmethod
    def from_bytes(cls, buf, stream_size: int) -> LossyHeader:
        """Parse and validate.

        Raises:
            CorruptStreamError: a field is out of range or inconsistent.
            ResourceLimitError: the shape exceeds ``MAX_ELEMENTS`` (its non-empty axes
                multiplied).
        """
        r = Reader(buf, "lossy header")
        ndim = r.u8()
        if ndim > MAX_NDIM:
            raise CorruptStreamError(f"header announces {ndim} dimensions")
        shape = tuple(r.varint(MAX_ELEMENTS) for _ in range(ndim))
        # (the axes' product without the empty ones: numpy refuses an empty array whose other
        # axes multiply past its index range, e.g. (0, 2**40, 2**40, 2**40))
        if math.prod(max(n, 1) for n in shape) > MAX_ELEMENTS:
            raise ResourceLimitError(f"header announces shape {shape}: its axes multiply to more than "
                                     f"{MAX_ELEMENTS} values")
        code = r.u8()
        if code not in DTYPES:
            raise CorruptStreamError(f"unknown dtype code {code}")
        bound_mode = r.u8()
        if bound_mode not in (BOUND_ABS, BOUND_REL):
            raise CorruptStreamError(f"unknown error-bound mode {bound_mode}")
        bound_value, eb = r.f64(), r.f64()
        if not (math.isfinite(eb) and eb >= 0):
            raise CorruptStreamError(f"invalid error bound {eb}")
        order_i = r.u8()
        if order_i >= len(ORDERS):
            raise CorruptStreamError("invalid pass order")
        flat_bits = r.u8()
        if flat_bits >= 8:
            raise CorruptStreamError("invalid flat-axis mask")
        alpha8, beta8 = r.u8(), r.u8()
        if alpha8 < 8 or beta8 < 8:
            raise CorruptStreamError("invalid level-wise bound factors")
        cubic_mask = r.varint(1 << 64)
        exact_len = r.varint(stream_size)
        n_levels = r.varint(256)
        levels = [LevelEntry(r.varint(stream_size), r.varint(stream_size)) for _ in range(n_levels)]
        h = cls(shape, DTYPES[code], bound_mode, bound_value, eb, ORDERS[order_i],
                tuple(bool(flat_bits >> a & 1) for a in range(3)), alpha8, beta8, cubic_mask,
                exact_len, levels)
        if r.pos < len(r.buf):
            h._read_extension(r, stream_size)
        r.done()
        if h.size and n_levels != h.partition().num_levels:
            raise CorruptStreamError(f"header lists {n_levels} levels, the shape has "
                                     f"{h.partition().num_levels}")
        if not h.size and n_levels:
            raise CorruptStreamError("empty array with levels")
        if h.predictors is not None and len(h.predictors) != (len(h.partition().steps) if h.size else 0):
            raise CorruptStreamError(f"header lists {len(h.predictors)} step predictors, the shape has "
                                     f"{len(h.partition().steps) if h.size else 0} steps")
        return h

    def _read_extension(self, r: Reader, stream_size: int) -> None:
        flags = r.u8()
        if flags >= EXT_KNOWN:
            raise CorruptStreamError(f"unknown header extension flags {flags} (bits this reader knows: "
                                     f"{EXT_KNOWN - 1}; a stream from a later version of strata?)")
        if flags & EXT_MISSING:
            self.missing_count = r.varint(self.size)
            if self.missing_count == 0:
                raise CorruptStreamError("missing-value fields with no missing value")
            self.fill_bits = bytes(r.raw(np.dtype(self.dtype).itemsize))
            self.origin_pred = r.f64()
            if not math.isfinite(self.origin_pred):
                raise CorruptStreamError("invalid prediction of the first point")
            for lv in self.levels:
                lv.mask_index_len, lv.mask_len = r.varint(stream_size), r.varint(stream_size)
        if flags & EXT_METADATA:
            self.metadata_len = r.varint(stream_size)
        if flags & EXT_RANGE:
            lo, hi = r.f64(), r.f64()
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise CorruptStreamError("invalid valid range")
            self.valid_range = (lo, hi)
        if flags & EXT_ENHANCE:
            self.enhance_len = r.varint(stream_size)
            if self.enhance_len == 0:
                raise CorruptStreamError("empty enhancement section")
        if flags & EXT_TARGET:
            self.target_len = r.varint(stream_size)
            if self.target_len == 0:
                raise CorruptStreamError("empty target section")
        if flags & EXT_LATTICE:
            offset, step, m = r.f64(), r.f64(), r.varint(EXACT_INTEGER[8])
            if not (math.isfinite(offset) and math.isfinite(step) and step > 0 and m * step <= self.eb):
                raise CorruptStreamError(f"invalid lattice (offset {offset}, step {step}, {m} steps of error under "
                                         f"the bound {self.eb})")
            self.lattice = Lattice(offset, step, m)
        if flags & EXT_PREDICTORS:
            ids = tuple(r.blob(MAX_STEPS))
            unknown = sorted(set(ids) - set(PREDICTORS))
            if unknown:
                raise CorruptStreamError(f"unknown step predictor {unknown[0]} (a stream from a later version of "
                                         f"strata?)")
            if ids.count(INTERPOLATION) == len(ids):
                raise CorruptStreamError("step predictors recorded for a stream that interpolates every step")
            self.predictors = ids
        if flags & EXT_WINDOW:
            self.window = r.f64()
            if not (math.isfinite(self.window) and self.window > 0) or self.lattice is not None:
                raise CorruptStreamError(f"invalid window {self.window} of a residual layer's codes"
                                         + (" (on a lattice)" if self.lattice is not None else ""))
