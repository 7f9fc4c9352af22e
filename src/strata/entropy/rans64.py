"""Order-0 rANS with 64 interleaved states: the coder of :data:`strata.entropy.bytecoder.ORDER0_64`
(checkpoint byte planes, format version 4).

State ``k % 64`` codes byte ``k``; all states share one stream of 16-bit words, in the order a
decoder taking the states in turn reads them (:mod:`strata.entropy.rans`: 31-bit states, 2^11
slots a table). Sixty-four states is what SIMD coding needs: four AVX-512 vectors of states in
flight hide the latency of each one's table lookup (F. Giesen, "Interleaved entropy coders",
arXiv:1402.3392, 2014, section 5). Measured on one core of an AMD EPYC, on an exponent plane of
a bf16 training snapshot (2.6 bits a byte): 0.27 ns a byte to decode with AVX-512 and table
lookups by permutes (32 states: 0.47; gathers instead of permutes: 0.73, 0.5 with 32; eight scalar states,
``ORDER0_8``: 1.0-1.5).

The coder is a small C extension (``strata.entropy._rans64``, built by pip with the package;
``kernels()``/``encoders()`` give the kernels the CPU supports), called from compiled code by
symbol (:data:`decode`, :data:`encode_fast`), bound when this module is imported to the fastest
kernel of this CPU. Without the extension (no C compiler at install time) :data:`decode` is bound
to :func:`reference`, the same decoder compiled by numba, state by state. Every decoder gives the
same bytes and the same verdict for every input (tests/test_rans64.py). The AVX-512 encoder
(0.3 against 1.3 ns a byte for :func:`encode` on an exponent plane) writes :func:`encode`'s
bytes where a table has at most 64 symbols, and declines otherwise.

Layout: ``64 x u32 final state (state 0 first) | 16-bit words`` (little-endian).
"""
from __future__ import annotations

import os

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, njit, types

from . import rans, tables

LANES = 64
_LANE_MASK = LANES - 1
_SLOT_MASK = tables.SCALE - 1
#: Bytes of the final states.
STATE_BYTES = LANES * rans.STATE_BYTES
#: C signature of every kernel: ``int64 (const uint8 *src, int64 len, const uint32 *table,
#: uint8 *out, int64 n)``, returning 0 for a consistent stream.
SIGNATURE = types.int64(types.CPointer(types.uint8), types.int64, types.CPointer(types.uint32),
                        types.CPointer(types.uint8), types.int64)
#: C signature of the vectorized encoders: ``int64 (const uint8 *data, int64 n, const int64
#: *encoder_table, uint8 *buf, int64 cap)``, returning where the coded bytes start, or -1.
ENCODE_SIGNATURE = types.int64(types.CPointer(types.uint8), types.int64, types.CPointer(types.int64),
                               types.CPointer(types.uint8), types.int64)


@njit(inline="always")
def _put(state, buf, pos, flat, data, k):
    return rans.encode_put_select(state, buf, pos, flat, rans.encoder_offset(0, data[np.uint64(k)], 256))


@njit(nogil=True, cache=True, _nrt=False)
def encode(data, flat, st, buf):
    """Code ``data`` (uint8) backwards into the end of ``buf`` (``2 n + 4 L + 16`` bytes) with
    ``L = st.shape[0]`` interleaved states (a power of two; ``st``: int64 scratch), one table
    (``flat``: :func:`strata.entropy.rans.encoder_table` of one table, raveled); state ``k % L``
    codes byte ``k``. Returns the start of the coded bytes (the final states first, state 0
    first). ``L = 64`` is :data:`~strata.entropy.bytecoder.ORDER0_64`, ``L = 8`` ``ORDER0_8``."""
    n_st = st.shape[0]
    for j in range(n_st):
        st[j] = rans.RANS_L
    pos = buf.shape[0]
    for k in range(data.shape[0] - 1, -1, -1):
        j = k & (n_st - 1)
        st[j], pos = _put(st[j], buf, pos, flat, data, k)
    for j in range(n_st - 1, -1, -1):
        pos = rans.encode_flush(st[j], buf, pos)
    return pos


@njit(nogil=True, cache=True, _nrt=False)
def _decode(src, tab, out, st):
    """The reference decoder: ``src`` (uint8: the states, then the words), ``tab`` (uint32:
    the packed table of a complete order-0 table), into ``out``; 0 if consistent, else 1."""
    length = src.shape[0]
    if length < STATE_BYTES:
        return 1
    for j in range(LANES):
        x, _ = rans.decode_init(src, 4 * j, length)
        if x < rans.RANS_L or x >= (1 << 31):
            return 1
        st[j] = x
    pos = STATE_BYTES
    for k in range(out.shape[0]):
        j = k & _LANE_MASK
        x = st[j]
        e = np.int64(tab[x & _SLOT_MASK])
        out[k] = e & 0xFF
        x = (((e >> tables.PACKED_FREQ_SHIFT) & _SLOT_MASK) + 1) * (x >> tables.SCALE_BITS) + (
            e >> tables.PACKED_BIAS_SHIFT)
        if x < rans.RANS_L:
            if pos + 2 > length:
                return 1
            x = (x << 16) | np.int64(src[pos]) | (np.int64(src[pos + 1]) << 8)
            pos += 2
        st[j] = x
    for j in range(LANES):
        if st[j] != rans.RANS_L:
            return 1
    return 0 if pos == length else 1


@cfunc(SIGNATURE, nopython=True, cache=True)
def reference(src, length, tab, out, n):
    """:func:`_decode` with the kernels' C signature (the decoder without the extension)."""
    st = np.empty(LANES, np.int64)
    return _decode(carray(src, length), carray(tab, tables.SCALE), carray(out, n), st)


@cfunc(ENCODE_SIGNATURE, nopython=True, cache=True)
def no_encoder(data, n, enc, buf, cap):
    """The encoder bound to :data:`encode_fast` without a vectorized one: declines (-1)."""
    return -1


def _extension():
    try:
        from . import _rans64
    except ImportError:
        return None
    return _rans64


def kernels() -> dict[str, int]:
    """Addresses of the decoders this machine runs, by name: ``"numba"`` (:func:`reference`)
    and those of the C extension this CPU supports (``"scalar"``, ``"avx2"``, ``"avx512"``,
    ``"avx512-ranked"``)."""
    ext = _extension()
    return {"numba": reference.address, **(ext.kernels() if ext else {})}


def encoders() -> dict[str, int]:
    """Addresses of the encoders this machine runs, by name: ``"none"`` (:func:`no_encoder`)
    and the C extension's ``"avx512"`` where the CPU supports it."""
    ext = _extension()
    return {"none": no_encoder.address, **(ext.encoders() if ext else {})}


def _pick(found: dict[str, int], variable: str, order: tuple[str, ...]) -> str:
    """The kernel to bind: the environment ``variable`` if set (a name of ``found``), else the
    first of ``order`` found."""
    want = os.environ.get(variable)
    if want:
        if want not in found:
            raise RuntimeError(f"{variable}={want!r}: this machine has {', '.join(found)}")
        return want
    return next(k for k in order if k in found)


#: Names of the kernels bound to :data:`decode` and :data:`encode_fast` in this process
#: (``STRATA_RANS64`` and ``STRATA_RANS64_ENCODER`` choose others, for tests and benchmarks).
_DECODERS, _ENCODERS = kernels(), encoders()
KERNEL = _pick(_DECODERS, "STRATA_RANS64", ("avx512-ranked", "avx512", "avx2", "scalar", "numba"))
ENCODER = _pick(_ENCODERS, "STRATA_RANS64_ENCODER", ("avx512", "none"))
llvm.add_symbol("strata_rans64_decode", _DECODERS[KERNEL])
llvm.add_symbol("strata_rans64_encode", _ENCODERS[ENCODER])
#: The decoder, callable from compiled code: ``decode(src, len, table, out, n)`` with pointers
#: as integers (``array.ctypes.data``), see :data:`SIGNATURE`.
decode = types.ExternalFunction("strata_rans64_decode", types.int64(types.voidptr, types.int64, types.voidptr,
                                                                     types.voidptr, types.int64))
#: The vectorized encoder, callable from compiled code: ``encode_fast(data, n, enc, buf, cap)``
#: (pointers as integers; ``data`` contiguous uint8, ``enc`` the raveled int64
#: :func:`~strata.entropy.rans.encoder_table` of one table, ``buf`` of ``cap`` bytes, at least
#: ``2 n + STATE_BYTES``): where the coded bytes start in ``buf``, the same bytes as
#: :func:`encode` with 64 states writes, or -1 where it does not apply (tables of more than 64
#: symbols, no AVX-512): then call :func:`encode`.
encode_fast = types.ExternalFunction("strata_rans64_encode", types.int64(types.voidptr, types.int64, types.voidptr,
                                                                         types.voidptr, types.int64))

__all__ = ["ENCODER", "KERNEL", "LANES", "SIGNATURE", "STATE_BYTES", "decode", "encode", "encode_fast", "encoders",
           "kernels", "no_encoder", "reference"]
