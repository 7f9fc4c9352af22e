"""Exceptions raised by strata.

Every decoder validates a stream before it allocates or writes anything: sizes in a header
are checked against the bytes actually present and against ``MAX_ELEMENTS``, and every
section's CRC-32 is verified before its bytes are decoded. Each exception type is a
subclass of :class:`StrataError`; those about user input are also ``ValueError``/``TypeError``
so that ordinary ``except ValueError`` code keeps working.
"""
from __future__ import annotations


class StrataError(Exception):
    """Base class of every exception strata raises on purpose."""


class FormatError(StrataError, ValueError):
    """The bytes are not a strata stream of a supported version (bad magic or version)."""


class TruncatedStreamError(FormatError):
    """The stream ends before a section it announces."""


class CorruptStreamError(FormatError):
    """A checksum does not match, or a header field is inconsistent or out of range."""


class ResourceLimitError(CorruptStreamError):
    """A header announces a size beyond what strata will allocate (see ``MAX_ELEMENTS``)."""


class InvalidInputError(StrataError, ValueError):
    """An argument is invalid: wrong shape, negative or NaN error bound, bad region..."""


class UnsupportedDtypeError(StrataError, TypeError):
    """The array's dtype is not supported by this codec."""


class NonFiniteValueError(InvalidInputError):
    """The data hold NaN or Inf where the chosen mode cannot honour them."""


class MissingDependencyError(StrataError, ImportError):
    """An optional dependency needed by the requested feature is not installed; the message
    names the extra to install (e.g. ``pip install 'strata[torch]'``)."""


class ModelFileError(StrataError, ValueError):
    """A learned model file (``strata.quality``'s predictors) is missing, of another format or
    version, or fails validation (digest, shapes, non-finite weights)."""


class StateChangedError(StrataError, RuntimeError):
    """A tensor changed while a lazy checkpoint capture was still copying it (found by
    :class:`strata.checkpoint.AsyncCheckpointer` with ``debug=True``): the snapshot would mix
    values of two training steps. Wait for the capture before changing the state
    (``wait_for_capture()`` or the optimizer hook ``guard()``)."""
