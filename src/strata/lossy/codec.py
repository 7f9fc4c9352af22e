"""The lossy compressor: array -> levels -> predicted, quantized codes -> chunks -> stream.

Method (STZ, Wang et al., SC'25, with SZ3's interpolation, Zhao et al., ICDE'21):

1. Missing values (NaN, a fill value, a mask) are marked for the predictor, which gives them
   no symbol, and their mask is coded per level and chunk (:mod:`strata.lossy.missing`,
   :mod:`strata.lossy.mask`); +-Inf and unusual missing bit patterns are kept bit-exactly
   apart (:mod:`strata.lossy.exact`).
2. One way through: the tuner (:mod:`strata.lossy.tune`) chooses the settings -- pass order,
   flat axes, level-wise bounds, cubic or linear interpolation -- unless given, and they make
   the compression plan (:class:`strata.lossy.plan.Plan`) with the array's facts (bound,
   lattice, first-point prediction); the encoder and the header consume the plan.
3. The grid is refined step by step (:mod:`strata.lossy.partition`); every point is predicted
   from reconstructed coarser points by its step's predictor and quantized
   (:mod:`strata.lossy.encoder`, :mod:`strata.lossy.predictors`, :mod:`strata.lossy.quantize`),
   so each decoded value is within the bound of its step, never more than the user's bound.
4. Each level's codes are entropy coded chunk by chunk (:mod:`strata.lossy.encoder`,
   :mod:`strata.lossy.chunks`) and laid out level after level (:mod:`strata.lossy.header`,
   ``docs/format.md``).
"""
from __future__ import annotations

import math

import numpy as np

from .._numba import kernel_threads
from ..container import KIND_LOSSY, Source, pack, unpack_header
from ..errors import CorruptStreamError, InvalidInputError, TruncatedStreamError, UnsupportedDtypeError
from . import exact, missing
from . import metadata as meta
from .encoder import encode_level, predict_all
from .header import BOUND_ABS, BOUND_REL, DTYPE_CODES, LevelEntry, LossyHeader
from .predictors import lattice
from .quantize import RADIUS
from .target import TargetRecord
from .tune import Settings, check_objective, choose, make_plan


def validate_array(array) -> np.ndarray:
    """Contiguous, native-endian float32/float64 view or copy of ``array``.

    Raises:
        UnsupportedDtypeError: the dtype is not float32 or float64.
    """
    a = np.asarray(array)
    if a.dtype.kind != "f" or a.dtype.itemsize not in (4, 8):
        raise UnsupportedDtypeError(f"strata.lossy compresses float32 and float64 arrays, not {a.dtype}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return a if a.flags.c_contiguous else a.copy(order="C")


def prepare_input(array, mask=None, fill_value=None) -> tuple[np.ndarray, missing.Prepared]:
    """``(a, prep)``: ``array`` as :func:`validate_array` gives it and its missing values found
    (:func:`strata.lossy.missing.prepare`) from NaN, ``mask``, ``fill_value`` and a
    ``numpy.ma.MaskedArray``'s mask, as :func:`compress` takes them.

    Raises:
        InvalidInputError, UnsupportedDtypeError: as :func:`compress`.
    """
    data, ma_mask = missing.split_masked(array)
    a = validate_array(data)
    miss = None  # (NaN only: prepare finds them, without a mask array when there are none)
    if mask is not None or fill_value is not None or ma_mask is not None:
        miss = missing.find(a, mask, fill_value)
        if ma_mask is not None:
            miss |= ma_mask.reshape(-1)
    return a, missing.prepare(a, miss)


def absolute_bound(valid_range, abs_error, rel_error) -> tuple[int, float, float]:
    """``(mode, requested value, absolute bound)`` from exactly one of the two bounds.

    The value-range-relative bound is ``rel_error * (max - min)`` over the valid values
    (``valid_range``, None when there are none: the bound is then 0).

    Raises:
        InvalidInputError: both or neither bound given, or a negative, NaN or infinite bound.
    """
    if (abs_error is None) == (rel_error is None):
        raise InvalidInputError("give exactly one of abs_error and rel_error")
    mode, value = (BOUND_ABS, abs_error) if abs_error is not None else (BOUND_REL, rel_error)
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"error bound must be a number, not {value!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"error bound must be finite and >= 0, got {value}")
    if mode == BOUND_ABS:
        return mode, value, value
    vrange = valid_range[1] - valid_range[0] if valid_range is not None else 0.0
    eb = value * vrange
    if not math.isfinite(eb):
        raise InvalidInputError("value range times rel_error overflows float64")
    return mode, value, eb


@kernel_threads()
def compress(array, *, abs_error=None, rel_error=None, mask=None, fill_value=None, metadata=None,
             settings: Settings | None = None, objective: str = "ratio", progress=None,
             keep: Settings | None = None, tune_bound: float | None = None, window: float = 0.0) -> bytes:
    """Compress ``array`` with a point-wise error bound on its valid values.

    Args:
        array: float32 or float64 array, any shape (0-d to N-d), C or Fortran order; a
            ``numpy.ma.MaskedArray``'s masked points are missing.
        abs_error: absolute error bound (same unit as the data): every decoded valid value
            ``y`` of ``x`` satisfies ``|x - y| <= abs_error``, checked in float64.
        rel_error: value-range-relative bound: the absolute bound is
            ``rel_error * (max(x) - min(x))`` over the valid values (0 if there are none).
        mask: boolean array (``True`` = missing, numpy.ma convention), of the array's shape
            or broadcasting to it (e.g. one land mask for every time step).
        fill_value: values equal to it are missing (CF ``_FillValue`` / ``missing_value``);
            NaN is always missing.
        metadata: a dict kept in the stream as strict JSON (at most 4 MiB), returned by
            :attr:`strata.lossy.LossyReader.metadata`.
        settings: predictor settings; chosen by sampling the data when omitted.
        objective: what the choice optimizes (:data:`strata.lossy.tune.OBJECTIVES`):
            ``"ratio"`` (default), the smallest stream at the bound; ``"psnr"``, the fewest
            bits at equal PSNR (QoZ's rate-distortion tuning: tighter bounds on the coarse
            levels where they pay in PSNR; the bound still holds everywhere).
        progress: optional callable ``progress(done, total)`` called after each stage
            (tuning, prediction, each level's coding).
        keep: settings whose pass order, flat axes and interpolation the chosen settings keep,
            so that the stream has another's levels and rules (a precision layer's:
            :mod:`strata.lossy.layers`); ignored with ``settings``.
        tune_bound: the absolute bound the settings are chosen at, when not the stream's (a
            precision layer's first layer is tuned for the finer layers); not on a lattice.
        window: every valid value lies in ``[-window, window]`` (a residual precision layer,
            :mod:`strata.lossy.layers`): the codes are folded into that window
            (:func:`strata.lossy.quantize.quantize_window`), the values are not coded on a
            lattice; 0 for none. A value outside the window is stored exactly.

    Returns:
        The compressed stream (bytes), self-describing.

    Raises:
        InvalidInputError: bounds missing, doubled, negative or NaN; a mask that is not
            boolean or of another shape; a fill value not representable in the dtype;
            metadata not serializable or too large; an unknown objective.
        UnsupportedDtypeError: ``array`` is not float32/float64.

    Valid values are the finite, non-missing ones. A bound of 0 gives a lossless round trip
    (at a poor ratio). Missing points and +-Inf decode to their exact original bits (see
    :mod:`strata.lossy.missing` for the contract and the method).
    """
    check_objective(objective)
    if not (math.isfinite(window) and window >= 0):
        raise InvalidInputError(f"window must be finite and >= 0, got {window}")
    a, prep = prepare_input(array, mask, fill_value)
    mode, value, eb = absolute_bound(prep.valid_range, abs_error, rel_error)
    metadata_section = meta.section(metadata)
    on = lattice.choose(a.reshape(-1), prep.missing, eb, prep.valid_range) if not window else None
    if a.size == 0:
        header = LossyHeader(a.shape, a.dtype, mode, value, eb, valid_range=prep.valid_range,
                             metadata_len=len(metadata_section), lattice=on)
        return pack(KIND_LOSSY, header.to_bytes(), [metadata_section] if metadata_section else [])
    report = progress or (lambda done, total: None)
    # the values coded (on a lattice: its indices), their bound, the first point's prediction
    orig, coding_eb, origin_pred = prep.work, eb, 0.0
    if on is not None:
        orig, coding_eb = on.to_steps(prep.work), on.coding_bound
    if prep.count:
        origin_pred = prep.valid_mean if on is None else (prep.valid_mean - on.offset) / on.step
    # the prediction's working array (without missing points, one that need not hold the
    # data: see predict_all) and codes, lent to the tuner's trials first
    work = np.empty_like(orig) if prep.missing is None else None
    codes = np.empty(orig.size, np.int32)
    trial = None
    tuned_at = coding_eb if tune_bound is None or on is not None else float(tune_bound)
    if settings is None:
        settings, trial = choose(orig.reshape(a.shape), tuned_at, origin_pred, prep.missing, work, codes, objective,
                                 keep)
    plan = make_plan(settings, a.shape, a.dtype, coding_eb, on, origin_pred, window)
    stages = plan.partition.num_levels + 2
    report(1, stages)
    if trial is not None and not window and tuned_at == coding_eb:  # (the tuner's trials covered the whole
        # array at this bound: they are the plan's codes)
        codes = trial.codes
    else:
        predict_all(orig, missing.NO_MISSING if prep.missing is None else prep.missing, plan, work, codes)
    work = None  # (not held while the levels are coded: the peak memory of a compression)
    report(2, stages)
    sections = []
    exact_section = exact.section(a.reshape(-1), prep.exact)
    if exact_section:
        sections.append(exact_section)
    if metadata_section:
        sections.append(metadata_section)
    header = LossyHeader.of(plan, mode, value, eb, exact_len=len(exact_section), missing_count=prep.count,
                            fill_bits=prep.fill_bits if prep.count else b"", metadata_len=len(metadata_section),
                            valid_range=prep.valid_range)
    # the winning whole-array trial's histogram sizes the levels (it counts no missing points)
    step_hist = trial.hist if trial is not None and prep.missing is None else None
    for level in range(plan.partition.num_levels):
        head, mask_index, mask_payload, payload = encode_level(plan, level, codes, orig, prep.missing, step_hist)
        header.levels.append(LevelEntry(len(head), len(payload), len(mask_index), len(mask_payload)))
        sections += [head, mask_index, mask_payload, payload]
        report(3 + level, stages)
    return pack(KIND_LOSSY, header.to_bytes(), sections)


def with_enhancement(stream: bytes, section: bytes) -> bytes:
    """``stream`` (a lossy stream from :func:`compress`) with ``section`` as its enhancement
    section (:mod:`strata.enhance.section`), appended last (after the levels and the target
    section, if any); the header records its length (extension flag 8) and gets a new checksum."""
    src = Source(stream)
    raw, offset = unpack_header(src, KIND_LOSSY)
    header = LossyHeader.from_bytes(raw, src.size)
    if header.enhance_len:
        raise InvalidInputError("the stream already has an enhancement section")
    header.enhance_len = len(section)
    return pack(KIND_LOSSY, header.to_bytes(), [bytes(src.read(offset, src.size - offset)), section])


def with_target(stream: bytes, record: TargetRecord) -> bytes:
    """``stream`` (a lossy stream from :func:`compress`, maybe with an enhancement section) with
    ``record`` as its target section (:mod:`strata.lossy.target`): placed after the levels and
    before the enhancement section, which stays last; the header records its length (extension
    flag 16) and gets a new checksum. The decoded values do not change.

    Raises:
        InvalidInputError: ``record`` is not a :class:`TargetRecord`, or the stream already has
            a target section.
        FormatError, TruncatedStreamError, CorruptStreamError: ``stream`` is not a valid lossy
            stream, ends before its sections do, or holds bytes after them.
    """
    if not isinstance(record, TargetRecord):
        raise InvalidInputError(f"record must be a TargetRecord, not {type(record).__name__}")
    src = Source(stream)
    raw, offset = unpack_header(src, KIND_LOSSY)
    header = LossyHeader.from_bytes(raw, src.size)
    if header.target_len:
        raise InvalidInputError("the stream already has a target section")
    # (the sections as the reader locates them: exact values, metadata, levels, enhancement)
    levels_end = offset + header.exact_len + header.metadata_len + sum(lv.total for lv in header.levels)
    end = levels_end + header.enhance_len
    if end > src.size:
        raise TruncatedStreamError(f"stream truncated: its sections need {end} bytes, it has {src.size}")
    if end < src.size:
        raise CorruptStreamError(f"{src.size - end} unexpected bytes after the stream's sections")
    section = record.to_bytes()
    header.target_len = len(section)
    return pack(KIND_LOSSY, header.to_bytes(), [bytes(src.read(offset, levels_end - offset)), section,
                                                 bytes(src.read(levels_end, header.enhance_len))])


__all__ = ["Settings", "absolute_bound", "compress", "validate_array", "with_enhancement", "with_target", "RADIUS",
           "DTYPE_CODES"]
