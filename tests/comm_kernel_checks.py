"""Checks of strata.comm's fused kernels against the PyTorch reference, for any device and backend: run on CPU
tensors by tests/test_comm_kernels.py (Triton's interpreter) and tests/test_comm_kernels_cpu.py (the numba kernels),
and on a GPU by tests/test_comm_cuda.py (compiled kernels).

The reference always runs on the CPU. Round-to-nearest must give its codes and scales bit for bit (with the Hadamard
transform: bit for bit on integer-valued input, whose transform is exact in fp32, else within one code); stochastic
rounding must stay within one quantization bin and be unbiased (Hoeffding bounds with failure probability below
1e-6, on fixed seeds); NaN and Inf must propagate per group as ``nonfinite="propagate"`` does.
"""
from __future__ import annotations

import math

import torch

from strata.comm import kernels
from strata.comm.hadamard import hadamard32, inverse_hadamard32
from strata.comm.quantize import dequantize, pack_int4, qmax, quantize, unpack_int4

from .test_comm_quantize import group_scale, heavy_tailed

# (bits, group size): the paper's weight and gradient layouts, odd and tiny groups, a group that is not a power of 2
LAYOUTS = [(4, 2048), (8, 128), (4, 128), (8, 7), (4, 6), (8, 96)]


def _quantize(backend, *args, **kwargs):
    return kernels.quantize(*args, backend=backend, **kwargs)


def _requantize_sum(backend, *args, **kwargs):
    return kernels.requantize_sum(*args, backend=backend, **kwargs)


def _dequantize_add(backend, *args, **kwargs):
    return kernels.dequantize_add(*args, backend=backend, **kwargs)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and values, NaN where NaN (bit for bit up to NaN payloads)."""
    a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def assert_same_quantized(got, ref) -> None:
    assert (got.numel, got.bits, got.group_size) == (ref.numel, ref.bits, ref.group_size)
    assert same(got.codes, ref.codes), "codes differ"
    assert same(got.scales, ref.scales), "scales differ"


def integer_valued(n: int, seed: int) -> torch.Tensor:
    """Values in 1/8 steps below 128: their 32-point Hadamard transform is exact in fp32 in any summation order."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1023, 1024, (n,), generator=g).float() * 0.125


def check_nearest_matches_reference(device: str, n: int, backend: str | None = None) -> None:
    x = heavy_tailed(n, 1)
    for bits, group in LAYOUTS:
        got = _quantize(backend, x.to(device), bits, group, stochastic=False)
        assert got.codes.device.type == torch.device(device).type
        assert_same_quantized(got, quantize(x, bits, group, stochastic=False, nonfinite="propagate"))


def check_weight_difference(device: str, n: int, backend: str | None = None) -> None:
    """qWD: the master shard rounded to bf16 minus the bf16 replica, quantized in one pass."""
    master, replica = heavy_tailed(n, 2), heavy_tailed(n, 3).bfloat16()
    ref = quantize(master.bfloat16().float() - replica.float(), 4, 256, stochastic=False, nonfinite="propagate")
    got = _quantize(backend, master.to(device), 4, 256, stochastic=False, subtract=replica.to(device),
                           round_to=torch.bfloat16)
    assert_same_quantized(got, ref)


def check_hadamard_quantize(device: str, n: int, backend: str | None = None) -> None:
    for bits, group in [(8, 128), (4, 2048), (8, 96)]:
        x = integer_valued(n, bits)
        ref = quantize(hadamard32(x), bits, group, stochastic=False, nonfinite="propagate")
        assert_same_quantized(_quantize(backend, x.to(device), bits, group, stochastic=False, hadamard=True), ref)
    # fp32 sums in another order (a matrix product, or the numba kernel's 5-level butterfly): scales within 8 ulp
    # (each output is 32 values summed through 5 roundings), codes within one level
    x = heavy_tailed(n, 4)
    ref = quantize(hadamard32(x), 8, 128, stochastic=False)
    got = _quantize(backend, x.to(device), 8, 128, stochastic=False, hadamard=True)
    torch.testing.assert_close(got.scales.cpu(), ref.scales, rtol=2.0**-20, atol=0)
    assert int((got.codes.cpu().int() - ref.codes.int()).abs().max()) <= 1


def check_stochastic_within_a_bin_and_unbiased(device: str, n: int, trials: int, backend: str | None = None) -> None:
    """Every draw within one bin; per value, and over all values and draws, the mean error is zero within a
    Hoeffding bound (failure probability below 1e-6 each; fixed seeds make the outcome deterministic)."""
    x = heavy_tailed(n, 5)
    for bits, group in [(4, 128), (8, 96)]:
        bin_ = (group_scale(x, group) / qmax(bits)).double()
        mean = torch.zeros(n, dtype=torch.float64)
        gen = torch.Generator(device=device).manual_seed(7)
        for _ in range(trials):
            d = dequantize(_quantize(backend, x.to(device), bits, group, seed=gen)).cpu().double()
            err = d - x.double()
            assert bool((err.abs() < bin_ * (1 + 1e-6) + 1e-30).all())
            mean += err / trials
        t = bin_ * math.sqrt(2 * math.log(2 * n / 1e-6) / trials)
        assert bool((mean.abs() <= t + 1e-30).all())
        live = bin_ > 0
        overall = float((mean[live] / bin_[live]).mean())  # n * trials independent terms in (-1, 1)
        assert abs(overall) <= math.sqrt(2 * math.log(2 / 1e-6) / (int(live.sum()) * trials)), overall


def check_seeds(device: str, n: int, backend: str | None = None) -> None:
    x = heavy_tailed(n, 6).to(device)
    a = _quantize(backend, x, 4, 128, seed=11)
    assert_same_quantized(_quantize(backend, x, 4, 128, seed=11), a)
    assert not torch.equal(_quantize(backend, x, 4, 128, seed=12).codes, a.codes)
    g1, g2 = torch.Generator(device=device).manual_seed(3), torch.Generator(device=device).manual_seed(3)
    b = _quantize(backend, x, 8, 128, seed=g1)
    assert_same_quantized(_quantize(backend, x, 8, 128, seed=g2), b)
    assert not torch.equal(_quantize(backend, x, 8, 128, seed=g1).codes, b.codes)  # the generator advanced


def check_packing(device: str, backend: str | None = None) -> None:
    """Element 2i in the low nibble, 2i + 1 in the high nibble, two's complement; an odd length is zero-padded."""
    x = torch.tensor([1.0, -1.0, 0.5, -0.25, 3.0])  # groups of 2: codes 7 -7 | 7 -4 (RTN of -3.5: even) | 7 0
    q = _quantize(backend, x.to(device), 4, 2, stochastic=False)
    assert q.codes.cpu().tolist() == [0x97, 0xC7, 0x07]
    assert unpack_int4(q.codes.cpu(), 5).tolist() == [7, -7, 7, -4, 7]
    assert torch.equal(q.codes.cpu(), pack_int4(torch.tensor([7, -7, 7, -4, 7, 0], dtype=torch.int8)))


def check_nonfinite_groups(device: str, backend: str | None = None) -> None:
    x = heavy_tailed(1000, 7)
    x[130], x[300], x[999] = float("nan"), float("inf"), float("-inf")
    for bits, group in [(4, 128), (8, 128)]:
        ref = quantize(x, bits, group, stochastic=False, nonfinite="propagate")
        assert_same_quantized(_quantize(backend, x.to(device), bits, group, stochastic=False), ref)
        d = dequantize(_quantize(backend, x.to(device), bits, group, seed=1)).cpu()
        bad = torch.zeros(1000, dtype=torch.bool)
        bad[128:256] = bad[256:384] = bad[896:] = True
        assert bool(d[bad].isnan().all()) and bool(d[~bad].isfinite().all())
    zeros = _quantize(backend, torch.zeros(300, device=device), 4, 128, seed=2)
    assert not bool(zeros.scales.cpu().any()) and not bool(zeros.codes.cpu().any())


def quantized_rows(x: torch.Tensor, k: int, bits: int, group: int):
    """Each of the ``k`` rows of ``x`` quantized on its own (a padded last group per row), round to nearest, as
    received from ``k`` ranks: codes ``(k, code_bytes)``, scales ``(k, n_groups)``, the dequantized rows."""
    qs = [quantize(row, bits, group, stochastic=False, nonfinite="propagate") for row in x.view(k, -1)]
    return (torch.stack([q.codes for q in qs]), torch.stack([q.scales for q in qs]),
            torch.stack([dequantize(q) for q in qs]))


def check_requantize_sum(device: str, per: int, backend: str | None = None) -> None:
    """Stage 2 (k received copies dequantized, summed, quantized) against the reference chain, round to nearest."""
    for in_bits, k in [(8, 2), (4, 3)]:
        x = heavy_tailed(k * per, 8 + k)
        x[per + 5] = float("nan")  # one group of copy 1 overflowed
        codes, scales, deq = quantized_rows(x, k, in_bits, 128)
        ref = quantize(deq.sum(0), 4, 256, stochastic=False, nonfinite="propagate")
        got = _requantize_sum(backend, codes.to(device), scales.to(device), per, in_bits, 128, 4, 256, stochastic=False)
        assert_same_quantized(got, ref)


def check_dequantize_add(device: str, per: int, backend: str | None = None) -> None:
    """The receiving side: qWD's add into a bf16 replica and the reduce-scatter's sum of k copies, against the
    reference; the inverse Hadamard transform within fp32 rounding of the reference's."""
    k = 3
    x = heavy_tailed(k * per, 12)
    x[7] = float("inf")
    for bits in (4, 8):
        codes, scales, deq = quantized_rows(x, k, bits, 256)
        codes, scales = codes.to(device), scales.to(device)
        replica = heavy_tailed(k * per, 13).bfloat16()
        out = replica.clone().to(device)
        _dequantize_add(backend, codes, scales, per, bits, 256, out)
        assert same(out, (deq.reshape(-1) + replica.float()).bfloat16())
        total = deq.sum(0)
        out = torch.full((per,), 5.0, device=device)
        assert same(_dequantize_add(backend, codes, scales, per, bits, 256, out, copies=k, accumulate=False), total)
        _dequantize_add(backend, codes, scales, per, bits, 256, out, copies=k, accumulate=False, inverse_hadamard=True)
        torch.testing.assert_close(out.cpu(), inverse_hadamard32(total), rtol=1e-6, atol=1e-6 * float(
            total.nan_to_num(0.0, 0.0, 0.0).abs().max()), equal_nan=True)
