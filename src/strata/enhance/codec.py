"""Compression with online neural enhancement (NeurLZ, Jia et al., arXiv:2409.05785).

For each field: compress it with :mod:`strata.lossy`, decode it as the decoder will, train the
network (:mod:`strata.enhance.train`) to predict the compression error from the decoded data
(and, for cross-field learning, from the other decoded fields of the snapshot), compute the
enhanced values exactly as the decoder will (:mod:`strata.enhance.apply`), regulate them
(:mod:`strata.enhance.regulate`) and store the network beside the stream
(:mod:`strata.enhance.section`) -- only if it pays: the encoder compresses the field once more,
plainly, at half the bound, estimates from the two plain streams the size of a plain stream of
the enhanced PSNR, and keeps the network only when the enhanced stream is smaller. Otherwise the section says so
(``stored`` False, with the figures) and the decoder returns the plain values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import metrics
from ..errors import CorruptStreamError, InvalidInputError
from ..lossy import LossyReader
from ..lossy import codec as lossy_codec
from ..lossy import missing as lossy_missing
from ..lossy.partition import as_3d_shape
from . import network, regulate, train
from .apply import enhance_block, stack_inputs
from .options import SMALL_STREAM, EnhanceOptions
from .section import MODE_1X, MODE_2X, Enhancement, InputField, code_fallback

MODES = {"1x": MODE_1X, "2x": MODE_2X}
#: Feature masks: the field itself (value, detail, the slices below and above), another field.
OWN_FEATURES, OTHER_FEATURES = 0b1111, 0b0011


def _options(options) -> EnhanceOptions:
    if options is None:
        return EnhanceOptions()
    if not isinstance(options, EnhanceOptions):
        raise InvalidInputError(f"options must be a strata.enhance.EnhanceOptions, not {type(options).__name__}")
    return options


def parse_mode(enhance) -> int:
    """The mode code of ``"1x"`` / ``"2x"``.

    Raises:
        InvalidInputError: anything else.
    """
    if not isinstance(enhance, str) or enhance not in MODES:
        raise InvalidInputError(f'enhance must be "1x" or "2x" (or None), not {enhance!r}')
    return MODES[enhance]


@dataclass
class _Field:
    """A field during encoding: the original and plain decoded values on the internal 3D view."""

    name: str
    original: np.ndarray
    stream: bytes
    plain: np.ndarray
    missing: np.ndarray
    eb: float
    fill_value: object
    metadata: dict | None

    @classmethod
    def compress(cls, name, array, abs_error, rel_error, mask, fill_value, metadata) -> _Field:
        stream = lossy_codec.compress(array, abs_error=abs_error, rel_error=rel_error, mask=mask,
                                      fill_value=fill_value, metadata=metadata)
        data, _ = lossy_missing.split_masked(array)
        original = lossy_codec.validate_array(data)
        with LossyReader(stream) as r:
            decoded = r.read(masked=True, enhance=False)
            eb = r.error_bound
        shape3 = as_3d_shape(original.shape)
        return cls(name, original.reshape(shape3), stream, decoded.data.reshape(shape3),
                   np.ma.getmaskarray(decoded).reshape(shape3), eb, fill_value, metadata)

    def valid(self) -> np.ndarray:
        return ~self.missing & np.isfinite(self.original) & np.isfinite(self.plain)

    def input(self, name: str, features: int) -> InputField:
        """How the network reads this field (``name``: "" for the field itself)."""
        v = self.plain[~self.missing & np.isfinite(self.plain)]
        lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 0.0)
        scale = 2.0 / (hi - lo) if hi > lo else 1.0
        detail = 1.0 / (8.0 * self.eb) if self.eb > 0 else 0.0
        with np.errstate(over="ignore"):  # (beyond float32: not finite, so no network)
            return InputField(name, float(np.float32(lo / 2 + hi / 2)), float(np.float32(scale)),
                              float(np.float32(detail)), features)


def _psnr(f: _Field, values: np.ndarray, valid: np.ndarray) -> float:
    with np.errstate(over="ignore"):  # (values near the dtype's largest: PSNR -inf, no network)
        return metrics.psnr(f.original[valid], values[valid])


def _declined(mode: int, psnr: float, psnr_enhanced: float | None = None, plain_bytes: int = 0) -> Enhancement:
    """A section storing no network, with the figures the decision was made on."""
    return Enhancement(mode, False, psnr, psnr if psnr_enhanced is None else psnr_enhanced, plain_bytes)


def _enhance(f: _Field, others: list[_Field], mode: int, opts: EnhanceOptions, bar) -> Enhancement:
    """Train, regulate and decide for one field; returns its section (stored or declined)."""
    valid = f.valid()
    psnr_plain = _psnr(f, f.plain, valid) if valid.any() else math.inf
    inputs = [f.input("", OWN_FEATURES)] + [o.input(o.name, OTHER_FEATURES) for o in others]
    width = opts.width or (4 if len(f.stream) < SMALL_STREAM else 8)
    n_params = network.weight_count(network.channel_count(i.features for i in inputs), width)
    spec_ok = all(math.isfinite(v) and v != 0 for i in inputs for v in (i.value_scale, i.detail_scale)) and all(
        math.isfinite(i.center) for i in inputs)
    if f.eb == 0 or not valid.any() or not spec_ok or n_params >= len(f.stream):
        if bar is not None:
            bar.update(opts.steps_for(f.original.nbytes))
        return _declined(mode, psnr_plain)  # nothing to learn, or weights that cannot pay
    blocks = [(f.plain, f.missing)] + [(o.plain, o.missing) for o in others]
    e = Enhancement(mode, True, psnr_plain, psnr_plain, 0, width, inputs)
    feats = network.features(stack_inputs(blocks, [i.center for i in inputs]), e.spec())
    target = np.zeros(f.plain.shape, np.float32)
    with np.errstate(invalid="ignore"):  # (+-Inf: not valid)
        np.divide(f.original - f.plain.astype(np.float64), f.eb, out=target, where=valid, casting="unsafe")
    params = train.train(feats, target, valid, width, opts.steps_for(f.original.nbytes), opts, progress=bar)
    del feats, target
    if not np.isfinite(params).all():
        return _declined(mode, psnr_plain)
    e.set_params(params)
    enhanced = enhance_block(e, blocks, f.eb)
    if mode == MODE_1X:
        fb = regulate.fallback_points(f.original, enhanced, f.eb, valid)
        np.copyto(enhanced, f.plain, where=fb)
        e.fallback_count, e.fallback_coded = int(np.count_nonzero(fb)), code_fallback(fb.reshape(-1))
    e.psnr_enhanced = _psnr(f, enhanced, valid)
    e.plain_equivalent_bytes = _plain_bytes_at(f, valid, psnr_plain, e.psnr_enhanced)
    if len(f.stream) + len(e.to_bytes()) >= e.plain_equivalent_bytes:
        return _declined(mode, psnr_plain, e.psnr_enhanced, e.plain_equivalent_bytes)
    return e


def _plain_bytes_at(f: _Field, valid: np.ndarray, psnr_plain: float, psnr_target: float) -> int:
    """Estimated bytes of a plain stream of PSNR ``psnr_target``: the field compressed once
    more, plainly, at half the bound (about 6 dB more), and the bytes interpolated
    log-linearly in PSNR between the two plain streams (a secant over 6 dB: nearby bounds can
    differ in size by more than the gain, when the tuner picks other settings). 0 when
    enhancement loses PSNR."""
    gain = psnr_target - psnr_plain
    if not (gain > 0 and math.isfinite(gain)):
        return 0
    data = np.ma.MaskedArray(f.original, f.missing) if f.missing.any() else f.original
    stream1 = lossy_codec.compress(data, abs_error=f.eb / 2, fill_value=f.fill_value, metadata=f.metadata)
    with LossyReader(stream1) as r:
        plain1 = r.read(enhance=False).reshape(f.plain.shape)
    psnr1 = _psnr(f, plain1, valid)
    b0, b1 = len(f.stream), len(stream1)
    if not psnr1 > psnr_plain:
        return b1
    return int(b0 * (b1 / b0) ** min(4.0, gain / (psnr1 - psnr_plain)))


def _bar(opts: EnhanceOptions, total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="strata.enhance: training", unit="step",
                disable=None if opts.progress is None else not opts.progress, leave=False)


def compress(array, *, abs_error=None, rel_error=None, enhance="2x", mask=None, fill_value=None, metadata=None,
             options: EnhanceOptions | None = None) -> bytes:
    """Compress ``array`` with :func:`strata.lossy.compress` and an enhancement network.

    Args:
        array: float32/float64 array, any shape (the network runs on the 2D slices of its
            internal 3D view: leading axes merged, the last two axes a slice).
        abs_error, rel_error, mask, fill_value, metadata: as :func:`strata.lossy.compress`.
        enhance: ``"2x"`` (every decoded value within twice the bound, no side information) or
            ``"1x"`` (within the bound; the points where the enhanced value would break it
            are stored and keep the plain value).
        options: training settings (:class:`EnhanceOptions`).

    Returns:
        A lossy stream with an enhancement section: :func:`strata.decompress` applies it.
        When the network does not pay for its bytes at this bound, the section records
        that (``LossyReader.enhancement.stored`` is False) and the stream decodes plainly.

    Raises:
        InvalidInputError: an unknown mode or invalid options, and as
            :func:`strata.lossy.compress`.
        MissingDependencyError: PyTorch is not installed (``pip install 'strata[torch]'``).
    """
    mode = parse_mode(enhance)
    opts = _options(options)
    train._torch()  # (fail before compressing)
    f = _Field.compress("", array, abs_error, rel_error, mask, fill_value, metadata)
    with _bar(opts, opts.steps_for(f.original.nbytes)) as bar:
        e = _enhance(f, [], mode, opts, bar)
    return lossy_codec.with_enhancement(f.stream, e.to_bytes())


def compress_fields(fields: dict, *, abs_error=None, rel_error=None, enhance="2x", cross_field: bool = True,
                    masks: dict | None = None, fill_values: dict | None = None,
                    options: EnhanceOptions | None = None) -> bytes:
    """Compress several fields of one snapshot into one field-set stream, each with its own
    enhancement network; with ``cross_field`` every network also reads the other decoded
    fields (NeurLZ's cross-field learning).

    Args:
        fields: ``{name: array}``, float32/float64 arrays of one shape; names non-empty,
            at most 255 UTF-8 bytes.
        abs_error, rel_error: exactly one, a number or ``{name: number}`` for every field.
        enhance: ``"1x"``, ``"2x"`` or None (plain streams in one container).
        cross_field: feed the other fields to each network.
        masks, fill_values: optional ``{name: ...}`` as ``mask`` / ``fill_value`` of
            :func:`strata.lossy.compress`.
        options: training settings (:class:`EnhanceOptions`).

    Returns:
        A field-set stream (:func:`decompress_fields` reads it).

    Raises:
        InvalidInputError: no fields, names invalid, shapes differ, bounds missing for a
            field, unknown mode.
        MissingDependencyError: PyTorch is not installed and ``enhance`` is not None.
    """
    from .fields import check_names, pack_fields

    if not isinstance(fields, dict) or not fields:
        raise InvalidInputError("compress_fields takes a non-empty {name: array} dict")
    names = check_names(list(fields))
    shapes = {n: np.shape(fields[n]) for n in names}
    if len(set(shapes.values())) > 1:
        raise InvalidInputError(f"fields must share one shape, got {shapes}")
    mode = parse_mode(enhance) if enhance is not None else None
    opts = _options(options)
    if mode is not None:
        train._torch()

    def per_field(value, n, what):
        if isinstance(value, dict):
            if n not in value:
                raise InvalidInputError(f"{what} has no entry for field {n!r}")
            return value[n]
        return value

    encoded = {n: _Field.compress(n, fields[n], per_field(abs_error, n, "abs_error"),
                                  per_field(rel_error, n, "rel_error"), (masks or {}).get(n),
                                  (fill_values or {}).get(n), None) for n in names}
    if mode is None:
        return pack_fields(names, [encoded[n].stream for n in names])
    streams = []
    with _bar(opts, sum(opts.steps_for(encoded[n].original.nbytes) for n in names)) as bar:
        for n in names:
            others = [encoded[o] for o in names if o != n] if cross_field else []
            e = _enhance(encoded[n], others, mode, opts, bar)
            streams.append(lossy_codec.with_enhancement(encoded[n].stream, e.to_bytes()))
    return pack_fields(names, streams)


def decompress_fields(data, *, enhance: bool = True, region=None, max_output_bytes: int | None = None) -> dict:
    """Decode a field-set stream (:func:`compress_fields`) to ``{name: array}``.

    Every network reads the plain decoded fields, so the fields are decoded plainly first
    (only the region and the halo the networks need), then enhanced. ``enhance=False``
    returns the plain decoded fields; ``region`` (numpy basic indexing, as
    :meth:`strata.lossy.LossyReader.read`) decodes part of every field.

    Raises:
        FormatError, CorruptStreamError, TruncatedStreamError: not a field set, or damaged.
        ResourceLimitError: as :meth:`strata.lossy.LossyReader.read`.
    """
    from .fields import open_fields

    readers = open_fields(data)
    blocks = {}

    def block(name, lo, hi):
        """A field's plain block, decoded once for every network that reads it."""
        if name not in readers:
            raise CorruptStreamError(f"an enhancement network reads field {name!r}, which the field set lacks")
        key = (name, tuple(lo), tuple(hi))
        if key not in blocks:
            blocks[key] = readers[name].read_block(lo, hi, max_output_bytes=max_output_bytes)
        return blocks[key]

    try:
        return {n: r.read(region=region, enhance=enhance, max_output_bytes=max_output_bytes,
                          inputs=lambda name, lo, hi, own=n: block(name or own, lo, hi))
                for n, r in readers.items()}
    finally:
        for r in readers.values():
            r.close()


__all__ = ["EnhanceOptions", "MODES", "compress", "compress_fields", "decompress_fields", "parse_mode"]
