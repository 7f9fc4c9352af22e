"""Compilation helpers shared by the compiled kernels."""
from __future__ import annotations

import types

from numba import njit


def serial_variant(kernel):
    """The same Python function as the ``parallel=True`` dispatcher ``kernel``, compiled
    without parallelism (``prange`` runs as ``range``), for work too small to pay for waking
    the worker threads: on a busy machine a parallel region can wait a scheduler time slice
    for a thread, more than a small array takes to code. The copy gets its own name, so the
    two keep separate on-disk caches."""
    f = kernel.py_func
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__)
    g.__qualname__ = f.__qualname__ + "_serial"
    g.__doc__ = f.__doc__
    g.__module__ = f.__module__
    return njit(nogil=True, cache=True)(g)
