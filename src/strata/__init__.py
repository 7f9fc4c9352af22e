"""strata: fast compression of scientific floating-point data and LLM training state,
with guarantees (error bounds, bit-exact round trips, checksums)."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["compress", "decompress", "open", "__version__"]


def compress(array, *, abs_error=None, rel_error=None, mask=None, fill_value=None, metadata=None, enhance=None,
             enhance_options=None, target_psnr=None, target_ratio=None, target_ssim=None, objective="ratio",
             progressive=None, layers=None) -> bytes:
    """Error-bounded lossy compression of a float32/float64 array.

    See :func:`strata.lossy.compress`: exactly one of ``abs_error`` (absolute) and
    ``rel_error`` (relative to the range of the valid values) bounds every decoded valid
    value; NaN, values equal to ``fill_value``, ``mask == True`` and the masked points of a
    ``numpy.ma.MaskedArray`` are missing and decode to their exact original bits.
    ``metadata`` (a JSON-serializable dict) travels in the stream. ``objective="psnr"`` tunes
    for the fewest bits at equal PSNR instead of the smallest stream at the bound (QoZ's
    rate-distortion tuning; the bound holds either way).

    ``enhance="2x"`` or ``"1x"`` trains an enhancement network at compression time and stores
    it in the stream (:func:`strata.enhance.compress`, NeurLZ; needs ``strata[torch]``):
    "2x" keeps every valid value within twice the bound, "1x" within the bound;
    ``enhance_options`` is a :class:`strata.enhance.EnhanceOptions`.

    Instead of a bound, ``target_psnr`` (dB), ``target_ratio`` or ``target_ssim`` asks for a
    quality or size: :func:`strata.quality.compress_to_target` picks the bound with the quality
    predictor and corrects it with at most three compressions; the stream records the target
    and the value reached (``strata info``, :attr:`strata.lossy.LossyReader.target`).

    ``progressive="precision"`` writes precision layers (:func:`strata.lossy.compress_layers`):
    one stream readable at any bound from its coarsest layer (``layers``: the coarser bounds,
    of the kind of the bound given; default every decade up to 1e-2 of the value range) down
    to the bound given, reading only the layers that bound needs (``strata.decompress(...,
    error_bound=...)``, :meth:`strata.lossy.LayeredReader.read` and ``refine``).
    """
    if progressive is not None or layers is not None:
        from .errors import InvalidInputError

        if progressive != "precision":
            raise InvalidInputError(f'progressive must be "precision" (layers need it), got {progressive!r}')
        if enhance is not None or enhance_options is not None or target_psnr is not None or target_ratio is not None \
                or target_ssim is not None:
            raise InvalidInputError("precision layers take a bound (abs_error or rel_error), without enhance")
        from .lossy import compress_layers

        return compress_layers(array, abs_error=abs_error, rel_error=rel_error, layers=layers, mask=mask,
                               fill_value=fill_value, metadata=metadata, objective=objective)
    targets = {m: v for m, v in (("psnr", target_psnr), ("ratio", target_ratio), ("ssim", target_ssim))
               if v is not None}
    if targets:
        from .errors import InvalidInputError

        if len(targets) > 1 or abs_error is not None or rel_error is not None:
            raise InvalidInputError("give one of abs_error, rel_error, target_psnr, target_ratio, target_ssim")
        if enhance is not None or enhance_options is not None:
            raise InvalidInputError("a quality target and enhance do not combine")
        if objective != "ratio":
            raise InvalidInputError("a quality target chooses its own bound; objective applies to a bound")
        from .quality import compress_to_target

        (metric, value), = targets.items()
        return compress_to_target(array, metric=metric, target=value, mask=mask, fill_value=fill_value,
                                  metadata=metadata)
    if enhance is not None:
        from .enhance import compress as _enhanced
        from .errors import InvalidInputError

        if objective != "ratio":
            raise InvalidInputError("enhance compresses with the default objective")
        return _enhanced(array, abs_error=abs_error, rel_error=rel_error, enhance=enhance, mask=mask,
                         fill_value=fill_value, metadata=metadata, options=enhance_options)
    if enhance_options is not None:
        from .errors import InvalidInputError

        raise InvalidInputError("enhance_options without enhance")
    from .lossy import compress as _compress

    return _compress(array, abs_error=abs_error, rel_error=rel_error, mask=mask, fill_value=fill_value,
                     metadata=metadata, objective=objective)


def decompress(data, *, level=None, region=None, masked=False, max_output_bytes=None, enhance=True,
               error_bound=None):
    """Decode a lossy stream (bytes, path or file object) to a numpy array.

    ``level=k`` decodes levels ``0..k`` and interpolates a full-resolution preview;
    ``region`` (a tuple of slices) decodes only that part, holding about that part in memory;
    ``masked=True`` returns a ``numpy.ma.MaskedArray`` marking the missing values; a read that
    would allocate more than ``max_output_bytes`` (default
    ``strata.lossy.reader.MAX_OUTPUT_BYTES``, 8 GiB; 0: no limit) raises
    ``ResourceLimitError`` before allocating. A stream with an enhancement network
    (``strata.compress(..., enhance=...)``) is enhanced on a full-resolution read (whole or
    region); ``enhance=False`` returns the plain decoded values. See
    :meth:`strata.lossy.LossyReader.read`.

    ``error_bound`` (absolute): read a stream in precision layers
    (``compress(..., progressive="precision")``) at that bound, fetching only the layers it
    needs; for a plain stream it must be at least the stream's bound. A bound finer than the
    stream holds raises ``InvalidInputError``.
    """
    from .lossy import open_array

    with open_array(data) as r:
        return r.read(level=level, region=region, masked=masked, max_output_bytes=max_output_bytes,
                      enhance=enhance, error_bound=error_bound)


def open(source):  # noqa: A001 - the public name the API asks for
    """Open a lossy stream (bytes, path or binary file object) for progressive or region
    reads; returns a :class:`strata.lossy.LossyReader`, or a
    :class:`strata.lossy.LayeredReader` for a stream in precision layers."""
    from .lossy import open_array

    return open_array(source)
