"""Compilation and threading helpers shared by the compiled kernels.

Threading contract (documented in the README, "Threads"):

- At import, strata pins numba's threading layer to a thread-safe one (``"threadsafe"``: TBB or
  OpenMP) unless ``NUMBA_THREADING_LAYER`` is set or neither is installed; then the default
  layer (workqueue, not thread-safe) is used and strata's calls take turns through a lock.
- Every compression or read runs inside :func:`kernel_threads`: calls running at the same time
  in one process share numba's threads (``NUMBA_NUM_THREADS // calls``, at most what the
  calling thread allows, see ``numba.set_num_threads``), and a call made inside a
  dask.distributed worker uses one thread, since dask already runs one task per worker thread
  (give dask the cores: ``n_workers * threads_per_worker`` = cores).
- A call allowed one thread runs the serial variant of each kernel.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import types

import numba
from llvmlite import ir
from numba import njit
from numba import types as nb_types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch_line(typingctx, arr, idx):
    """Hint the processor to bring the cache line of ``arr[idx]`` in (``llvm.prefetch``: read,
    all cache levels), for a compiled loop that will read or write it soon; changes no value, and
    an index outside ``arr`` does nothing (a prefetch never faults)."""
    if not isinstance(arr, nb_types.Array) or not isinstance(idx, nb_types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ptr = builder.gep(context.make_array(signature.args[0])(context, builder, args[0]).data, [args[1]])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return nb_types.void(arr, idx), codegen


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


def pick(kernel, serial, small: bool):
    """``serial`` (the :func:`serial_variant` of ``kernel``) when the work is ``small`` or the
    calling thread may use one thread, else the parallel ``kernel``."""
    return serial if small or numba.get_num_threads() == 1 else kernel


def serial_runner(*kernels):
    """``runner(kernel, small)``: the parallel ``kernel`` (one of ``kernels``) or its
    :func:`serial_variant`, by :func:`pick`; the serial variants are made once, here."""
    serial = {k: serial_variant(k) for k in kernels}

    def runner(kernel, small: bool):
        return pick(kernel, serial[kernel], small)

    return runner


def workers(n_items: int) -> int:
    """Parallel workers for ``n_items`` independent items (the kernels' ``n_workers``): one per
    thread the calling thread may use, each taking every ``n_workers``-th item."""
    return max(1, min(n_items, numba.get_num_threads()))


def _pin_threading_layer() -> bool:
    """Ask numba for a thread-safe layer; False when none is installed (or the user chose)."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return False
    for module in ("numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        numba.config.THREADING_LAYER = "threadsafe"
        return True
    return False


_pin_threading_layer()
_state = threading.Lock()
_active = 0
_turns = threading.Lock()


def _in_dask_worker() -> bool:
    if "distributed" not in sys.modules:
        return False
    try:
        sys.modules["distributed"].get_worker()
    except (ValueError, AttributeError):
        return False
    return True


def thread_budget() -> int:
    """Threads a call may use now: one inside a dask.distributed worker, else numba's
    current setting (which :func:`kernel_threads` shares among concurrent calls)."""
    return 1 if _in_dask_worker() else numba.get_num_threads()


@contextlib.contextmanager
def kernel_threads():
    """Run a compression or a read with its share of numba's threads (see the module
    docstring); restores the calling thread's setting afterwards."""
    global _active
    with _state:
        _active += 1
        share = max(1, numba.config.NUMBA_NUM_THREADS // _active)
    before = numba.get_num_threads()
    if _in_dask_worker():
        share = 1
    numba.set_num_threads(max(1, min(share, before)))
    turn = _turns if numba.threading_layer() == "workqueue" else contextlib.nullcontext()
    try:
        with turn:
            yield
    finally:
        numba.set_num_threads(before)
        with _state:
            _active -= 1
