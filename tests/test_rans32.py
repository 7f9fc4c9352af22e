"""The 32-state order-0 rANS decoders (strata.entropy.rans32: the C extension's scalar, AVX2 and
AVX-512 kernels, and the numba reference): the same bytes and verdicts on valid and hostile
streams, no read outside the stream, and the extension built by the install."""
from __future__ import annotations

import ctypes
import mmap
import shutil

import numpy as np
import pytest

from strata.entropy import bytecoder, rans, rans32, tables

_PROTO = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64)
KERNELS = rans32.kernels()


def _call(name: str, src, n: int, tab: np.ndarray) -> tuple[int, np.ndarray]:
    """Decode ``n`` bytes of ``src`` (a uint8 array or an (address, length) pair) with kernel ``name``."""
    out = np.zeros(n + 1, np.uint8)  # (one spare byte: n may be 0)
    addr, length = (src.ctypes.data, src.size) if isinstance(src, np.ndarray) else src
    status = _PROTO(KERNELS[name])(addr, length, tab.ctypes.data, out.ctypes.data, n)
    return status, out[:n]


def _stream(x: np.ndarray, lanes: int = rans32.LANES) -> tuple[np.ndarray, np.ndarray]:
    """(the coded stream of ``x``, the packed decode table of its order-0 table)."""
    h0, _ = bytecoder._histograms(x)
    freq = tables.normalize(tables.approx_value(tables.approx_code(h0)))
    buf = np.empty(2 * x.size + 4 * lanes + 16, np.uint8)
    start = rans32.encode(x, rans.encoder_table(freq).ravel(), np.empty(lanes, np.int64), buf)
    return buf[start:].copy(), tables.packed_decode_table(freq)


def _bytes(n: int, seed: int, spread: float = 0.45) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (120 + rng.geometric(spread, n).clip(max=40) * 7 % 37).astype(np.uint8)


def test_the_extension_is_built_and_bound():
    """`make test` installs the package with its C extension; a build that failed silently
    (it is optional, for machines without a compiler) would leave only the numba reference."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the extension is not built here")
    assert "scalar" in KERNELS
    assert rans32.KERNEL in KERNELS and rans32.KERNEL != "numba"


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 95, 1000, 4099, 65536 + 37, 1 << 18])
@pytest.mark.parametrize("spread", [0.05, 0.45, 0.97])
def test_kernels_decode_what_the_encoder_wrote(n, spread):
    x = _bytes(n, n, spread)
    src, tab = _stream(x)
    for name in KERNELS:
        status, out = _call(name, src, n, tab)
        assert status == 0 and np.array_equal(out, x), name


def test_kernels_agree_on_hostile_streams():
    """Truncated, extended, bit-flipped streams and states out of range: every kernel gives the
    numba reference's verdict, and its bytes where it accepts."""
    rng = np.random.default_rng(7)
    x = _bytes(5000, 1)
    src, tab = _stream(x)
    cases = [src[:-1], src[:-2], src[:200], src[:127], np.concatenate([src, [0, 0]]), src[: rans32.STATE_BYTES]]
    for _ in range(200):
        bad = src.copy()
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(0, bad.size))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        cases.append(bad)
    for j, value in ((0, (1 << 31)), (5, rans.RANS_L - 1), (31, 0xFFFFFFFF)):
        bad = src.copy()
        bad[4 * j:4 * j + 4] = np.frombuffer(np.uint32(value).tobytes(), np.uint8)
        cases.append(bad)
    refused = 0
    for bad in cases:
        want, ref = _call("numba", bad, x.size, tab)
        refused += want != 0
        for name in KERNELS:
            status, out = _call(name, bad, x.size, tab)
            assert status == want, name
            if status == 0:
                assert np.array_equal(out, ref), name
    assert refused > len(cases) // 2  # (most damage is caught by the final states alone)


def test_kernels_read_nothing_past_the_stream():
    """The stream ends where an inaccessible page begins: a read past its end would crash."""
    page = mmap.PAGESIZE
    x = _bytes(20000, 3, 0.2)
    src, tab = _stream(x)
    pages = -(-src.size // page) + 1
    m = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(base + pages * page, page, 0) == 0  # PROT_NONE
    try:
        for cut in (src.size, src.size - 1, src.size // 2, 130):
            at = pages * page - cut
            m[at:at + cut] = src[:cut].tobytes()
            for name in KERNELS:
                status, out = _call(name, (base + at, cut), x.size, tab)
                assert (status == 0) == (cut == src.size), name
                if status == 0:
                    assert np.array_equal(out, x)
    finally:
        libc.mprotect(base + pages * page, page, 3)  # (read-write again, before unmapping)
        del base
        m.close()


def test_records_decode_through_the_bound_kernel():
    x = _bytes(3 * bytecoder.WIDE_MIN_BYTES + 11, 5)
    rec = bytecoder.encode(x, wide=True)
    assert rec[0] in (bytecoder.ORDER0_32, bytecoder.SPLIT)
    assert np.array_equal(bytecoder.decode(rec, x.size), x)
