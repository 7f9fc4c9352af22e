"""strata: fast compression of scientific floating-point data and LLM training state,
with guarantees (error bounds, bit-exact round trips, checksums)."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["compress", "decompress", "open", "__version__"]


def compress(array, *, abs_error=None, rel_error=None) -> bytes:
    """Error-bounded lossy compression of a float32/float64 array.

    See :func:`strata.lossy.compress`: exactly one of ``abs_error`` (absolute) and
    ``rel_error`` (value-range relative) bounds every decoded value.
    """
    from .lossy import compress as _compress

    return _compress(array, abs_error=abs_error, rel_error=rel_error)


def decompress(data, *, level=None, region=None):
    """Decode a lossy stream (bytes, path or file object) to a numpy array.

    ``level=k`` decodes levels ``0..k`` and interpolates a full-resolution preview;
    ``region`` (a tuple of slices) decodes only that part. See
    :meth:`strata.lossy.LossyReader.read`.
    """
    from .lossy import LossyReader

    with LossyReader(data) as r:
        return r.read(level=level, region=region)


def open(source):  # noqa: A001 - the public name the API asks for
    """Open a lossy stream (bytes, path or binary file object) for progressive or region
    reads; returns a :class:`strata.lossy.LossyReader`."""
    from .lossy import LossyReader

    return LossyReader(source)
