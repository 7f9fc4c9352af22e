"""The 64-state order-0 rANS coder (strata.entropy.rans64): the C extension's decoders (scalar,
AVX2, AVX-512) and the numba reference give the same bytes and verdicts on valid and hostile
streams and read nothing outside the stream; its AVX-512 encoder writes the numba encoder's
bytes; the extension is built by the install."""
from __future__ import annotations

import ctypes
import mmap
import shutil

import numpy as np
import pytest

from strata.entropy import bytecoder, rans, rans64, tables

from .test_checkpoint_codec import _models

_PROTO = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64)
KERNELS = rans64.kernels()
ENCODERS = rans64.encoders()


def _call(name: str, src, n: int, tab: np.ndarray) -> tuple[int, np.ndarray]:
    """Decode ``n`` bytes of ``src`` (a uint8 array or an (address, length) pair) with kernel ``name``."""
    out = np.zeros(n + 1, np.uint8)  # (one spare byte: n may be 0)
    addr, length = (src.ctypes.data, src.size) if isinstance(src, np.ndarray) else src
    status = _PROTO(KERNELS[name])(addr, length, tab.ctypes.data, out.ctypes.data, n)
    return status, out[:n]


def _freq(x: np.ndarray) -> np.ndarray:
    """The normalized order-0 table a record of ``x`` carries."""
    h0, _ = bytecoder._histograms(x)
    return tables.normalize(tables.approx_value(tables.approx_code(h0)))


def _stream(x: np.ndarray, lanes: int = rans64.LANES) -> tuple[np.ndarray, np.ndarray]:
    """(the coded stream of ``x``, the packed decode table of its order-0 table)."""
    freq = _freq(x)
    buf = np.empty(2 * x.size + 4 * lanes + 16, np.uint8)
    start = rans64.encode(x, rans.encoder_table(freq).ravel(), np.empty(lanes, np.int64), buf)
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
    assert rans64.KERNEL in KERNELS and rans64.KERNEL != "numba"


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
    cases = [src[:-1], src[:-2], src[:300], src[:255], np.concatenate([src, [0, 0]]), src[: rans64.STATE_BYTES]]
    for _ in range(200):
        bad = src.copy()
        for _ in range(int(rng.integers(1, 4))):
            bad[int(rng.integers(0, bad.size))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        cases.append(bad)
    for j, value in ((0, (1 << 31)), (5, rans.RANS_L - 1), (63, 0xFFFFFFFF)):
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
        for cut in (src.size, src.size - 1, src.size // 2, 260):
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
    assert rec[0] in (bytecoder.ORDER0_64, bytecoder.SPLIT)
    assert np.array_equal(bytecoder.decode(rec, x.size), x)


@pytest.mark.parametrize("n", [1, 5, 31, 32, 33, 1000, 65536 + 37])
@pytest.mark.parametrize("symbols", [1, 2, 40, 64, 65, 200])
def test_vectorized_encoder_writes_the_reference_bytes(n, symbols):
    """Byte for byte the numba encoder's stream for tables of up to 64 symbols (the rank
    permutes); it declines (-1) for more, and the caller then codes with the numba encoder."""
    if "avx512" not in ENCODERS:
        pytest.skip("no AVX-512 encoder on this CPU")
    rng = np.random.default_rng(n * symbols)
    x = (rng.zipf(1.3, n) % symbols).astype(np.uint8) * np.uint8(255 // max(symbols - 1, 1))
    x[: min(n, symbols)] = (np.arange(min(n, symbols)) * (255 // max(symbols - 1, 1))).astype(np.uint8)
    flat = rans.encoder_table(_freq(x)).ravel()
    room = 2 * n + rans64.STATE_BYTES + 16
    want_buf, got_buf = np.zeros(room, np.uint8), np.full(room, 7, np.uint8)
    want = rans64.encode(x, flat, np.empty(rans64.LANES, np.int64), want_buf)
    got = _PROTO(ENCODERS["avx512"])(x.ctypes.data, n, flat.ctypes.data, got_buf.ctypes.data, got_buf.size)
    used = len(np.unique(x))
    if used > 64:
        assert got == -1
    else:
        assert got == want and np.array_equal(got_buf[got:], want_buf[want:])
        assert (got_buf[:got] == 7).all()  # nothing written before the coded bytes


def test_without_the_vectorized_kernels_records_are_the_same(tmp_path):
    """A process bound to the numba reference decoder and no vectorized encoder (what a machine
    without the extension gets) writes the same records and decodes them, and this process's
    records, to the same bytes."""
    import os
    import subprocess
    import sys

    x = _bytes(3 * bytecoder.WIDE_MIN_BYTES + 11, 9)
    rec = bytecoder.encode(x, wide=True)
    (tmp_path / "x.npy").write_bytes(x.tobytes())
    (tmp_path / "rec.bin").write_bytes(rec)
    script = (
        "import numpy as np, sys\n"
        "from strata.entropy import bytecoder, rans64\n"
        "assert rans64.KERNEL == 'numba' and rans64.ENCODER == 'none'\n"
        "d = sys.argv[1]\n"
        "x = np.fromfile(d + '/x.npy', np.uint8)\n"
        "rec = open(d + '/rec.bin', 'rb').read()\n"
        "mine = bytecoder.encode(x, wide=True)\n"
        "assert mine == rec, 'records differ'\n"
        "assert np.array_equal(bytecoder.decode(rec, x.size), x)\n"
        "print('ok')\n")
    env = dict(os.environ, STRATA_RANS64="numba", STRATA_RANS64_ENCODER="none")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert _models(rec) == {bytecoder.ORDER0_64}
