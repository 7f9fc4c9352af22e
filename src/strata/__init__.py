"""strata: fast compression of scientific floating-point data and LLM training state,
with guarantees (error bounds, bit-exact round trips, checksums)."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["compress", "decompress", "open", "__version__"]


def compress(array, *, abs_error=None, rel_error=None, mask=None, fill_value=None, metadata=None) -> bytes:
    """Error-bounded lossy compression of a float32/float64 array.

    See :func:`strata.lossy.compress`: exactly one of ``abs_error`` (absolute) and
    ``rel_error`` (relative to the range of the valid values) bounds every decoded valid
    value; NaN, values equal to ``fill_value``, ``mask == True`` and the masked points of a
    ``numpy.ma.MaskedArray`` are missing and decode to their exact original bits.
    ``metadata`` (a JSON-serializable dict) travels in the stream.
    """
    from .lossy import compress as _compress

    return _compress(array, abs_error=abs_error, rel_error=rel_error, mask=mask, fill_value=fill_value,
                     metadata=metadata)


def decompress(data, *, level=None, region=None, masked=False, max_output_bytes=None):
    """Decode a lossy stream (bytes, path or file object) to a numpy array.

    ``level=k`` decodes levels ``0..k`` and interpolates a full-resolution preview;
    ``region`` (a tuple of slices) decodes only that part, holding about that part in memory;
    ``masked=True`` returns a ``numpy.ma.MaskedArray`` marking the missing values; a read that
    would allocate more than ``max_output_bytes`` (default
    ``strata.lossy.reader.MAX_OUTPUT_BYTES``, 8 GiB; 0: no limit) raises
    ``ResourceLimitError`` before allocating. See :meth:`strata.lossy.LossyReader.read`.
    """
    from .lossy import LossyReader

    with LossyReader(data) as r:
        return r.read(level=level, region=region, masked=masked, max_output_bytes=max_output_bytes)


def open(source):  # noqa: A001 - the public name the API asks for
    """Open a lossy stream (bytes, path or binary file object) for progressive or region
    reads; returns a :class:`strata.lossy.LossyReader`."""
    from .lossy import LossyReader

    return LossyReader(source)
