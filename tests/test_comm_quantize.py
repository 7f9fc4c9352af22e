"""strata.comm single-process properties: quantizer error bounds and unbiasedness, int4 packing, Hadamard
transform, configuration checks and the throughput model."""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from strata.comm import (  # noqa: E402
    CommConfig,
    dequantize,
    hadamard32,
    hadamard_matrix,
    inverse_hadamard32,
    pack_int4,
    quantize,
    unpack_int4,
    wire_bits_per_element,
)
from strata.comm.model import Cluster, Workload, paper_setting, speedup, step_time, wire_bits  # noqa: E402
from strata.comm.quantize import qmax  # noqa: E402
from strata.errors import InvalidInputError, NonFiniteValueError, UnsupportedDtypeError  # noqa: E402


def group_scale(x: torch.Tensor, group: int) -> torch.Tensor:
    """Per-element quantization bin (group absmax / qmax is applied by the caller), computed independently."""
    n = x.numel()
    pad = -n % group
    a = torch.cat([x.reshape(-1).double(), torch.zeros(pad, dtype=torch.float64)]).view(-1, group)
    return a.abs().amax(1, keepdim=True).expand(-1, group).reshape(-1)[:n]


def heavy_tailed(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp(2 * torch.randn(n, generator=g))  # magnitudes over decades
    return x


# ----------------------------------------------------------------------------------------------------------------
# error bounds
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@given(n=st.integers(1, 3000), group=st.sampled_from([1, 2, 7, 32, 128, 2048]), seed=st.integers(0, 2**16))
def test_stochastic_error_below_one_bin(bits, n, group, seed):
    x = heavy_tailed(n, seed)
    q = quantize(x, bits, group, generator=torch.Generator().manual_seed(seed))
    d = dequantize(q)
    assert d.shape == (n,) and d.dtype == torch.float32 and q.numel == n
    bin_ = group_scale(x, group) / qmax(bits)
    err = (d.double() - x.double()).abs()
    # |x - q s| < s exactly; the slack covers the fp32 products x * (qmax / absmax) and q * s
    assert bool((err <= bin_ * (1 + 1e-5) + 1e-30).all())


@pytest.mark.parametrize("bits", [4, 8])
def test_nearest_error_below_half_bin(bits):
    x = heavy_tailed(10_000, 3)
    d = dequantize(quantize(x, bits, 64, stochastic=False))
    bin_ = group_scale(x, 64) / qmax(bits)
    assert bool(((d.double() - x.double()).abs() <= 0.5 * bin_ * (1 + 1e-5) + 1e-30).all())


@pytest.mark.parametrize("bits", [4, 8])
def test_codes_use_symmetric_levels_and_hit_absmax(bits):
    x = heavy_tailed(4096, 5)
    q = quantize(x, bits, 256, generator=torch.Generator().manual_seed(1))
    codes = unpack_int4(q.codes, 4096) if bits == 4 else q.codes
    m = qmax(bits)
    assert int(codes.min()) >= -m and int(codes.max()) <= m  # -8 / -128 never used
    # the group's absmax element is exactly +-qmax (no rounding choice there)
    g = x.view(-1, 256)
    idx = g.abs().argmax(1)
    top = codes.view(-1, 256).gather(1, idx[:, None]).squeeze(1)
    assert torch.equal(top.abs().to(torch.int64), torch.full_like(top, m, dtype=torch.int64))


# ----------------------------------------------------------------------------------------------------------------
# unbiasedness
# ----------------------------------------------------------------------------------------------------------------


def per_element_mean_error(x: torch.Tensor, bits: int, group: int, trials: int, stochastic: bool = True):
    """Mean over ``trials`` independent quantizations of the error of each element, in bins."""
    n = x.numel()
    reps = x.repeat(trials)  # n % group == 0: every repetition has the same groups
    d = dequantize(quantize(reps, bits, group, stochastic=stochastic, generator=torch.Generator().manual_seed(7)))
    bin_ = group_scale(x, group) / qmax(bits)
    err = (d.double().view(trials, n) - x.double()) / bin_
    return err.mean(0)


def hoeffding(trials: int, n: int, delta: float = 1e-6) -> float:
    # the error of one trial, in bins, lies in an interval of width 1 ([frac - 1, frac]); Hoeffding for the
    # mean of `trials` independent draws plus a union bound over the n elements: P(any |mean| > t) <= delta
    return math.sqrt(math.log(2 * n / delta) / (2 * trials))


@pytest.mark.parametrize("bits", [4, 8])
def test_stochastic_rounding_is_unbiased_and_mean_error_shrinks(bits):
    n, group = 1024, 128
    x = heavy_tailed(n, 11)
    for trials in (64, 4096):
        mean = per_element_mean_error(x, bits, group, trials)
        assert float(mean.abs().max()) <= hoeffding(trials, n), trials
    # the bound at 4096 trials is 8x tighter than at 64: the mean error tends to zero like 1/sqrt(trials)
    assert hoeffding(4096, n) < hoeffding(64, n) / 7.9


def test_round_to_nearest_fails_the_unbiasedness_check():
    # the same check detects a biased rounding: it is not vacuous
    x = heavy_tailed(1024, 11)
    mean = per_element_mean_error(x, 4, 128, 4096, stochastic=False)
    assert float(mean.abs().max()) > 4 * hoeffding(4096, 1024)


# ----------------------------------------------------------------------------------------------------------------
# packing, zero groups, padding
# ----------------------------------------------------------------------------------------------------------------


def test_int4_pack_round_trip_bit_exact():
    every_byte = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    assert torch.equal(pack_int4(unpack_int4(every_byte)), every_byte)
    for n in (0, 1, 2, 15, 1001):
        c = torch.randint(-8, 8, (n,), generator=torch.Generator().manual_seed(n)).to(torch.int8)
        p = pack_int4(c)
        assert p.dtype == torch.uint8 and p.numel() == (n + 1) // 2
        assert torch.equal(unpack_int4(p, n), c)
    # nibble order: element 0 in the low nibble, element 1 in the high nibble, two's complement
    assert pack_int4(torch.tensor([-1, 3], dtype=torch.int8)).tolist() == [0x3F]


def test_zero_groups_have_zero_scale_and_decode_exactly():
    x = torch.zeros(5 * 64)
    x[64:128] = torch.linspace(-3, 2, 64)
    x[256 + 5] = 1e-30
    for bits in (4, 8):
        q = quantize(x, bits, 64, generator=torch.Generator().manual_seed(0))
        assert q.scales[0] == 0 and q.scales[2] == 0 and q.scales[3] == 0 and q.scales[1] > 0
        d = dequantize(q)
        assert torch.equal(d[:64], torch.zeros(64)) and torch.equal(d[128:256], torch.zeros(128))
        assert bool(torch.isfinite(d).all())


@pytest.mark.parametrize("n,group", [(1, 128), (129, 128), (1000, 7), (4097, 2048)])
def test_odd_lengths_are_padded(n, group):
    x = heavy_tailed(n, n)
    for bits in (4, 8):
        q = quantize(x, bits, group, generator=torch.Generator().manual_seed(0))
        padded = -(-n // group) * group
        assert q.scales.numel() == padded // group
        assert q.codes.numel() == ((padded + 1) // 2 if bits == 4 else padded)
        assert q.nbytes == q.codes.numel() + 4 * q.scales.numel()
        assert dequantize(q).shape == (n,)


def test_generator_makes_codes_reproducible_and_bf16_input():
    x = heavy_tailed(3000, 1).to(torch.bfloat16)
    a = quantize(x, 4, 128, generator=torch.Generator().manual_seed(42))
    b = quantize(x, 4, 128, generator=torch.Generator().manual_seed(42))
    c = quantize(x, 4, 128, generator=torch.Generator().manual_seed(43))
    assert torch.equal(a.codes, b.codes) and not torch.equal(a.codes, c.codes)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("stochastic", [True, False])
def test_nonfinite_groups_propagate_as_nan(bits, stochastic):
    """nonfinite="propagate" (what the collectives use): a group holding NaN or +-Inf gets scale NaN and codes 0, so
    all its values decode to NaN; every other group is coded exactly as without the bad values (same draws)."""
    x = heavy_tailed(1000, 3).to(torch.float16)
    bad = x.clone()
    bad[130], bad[600], bad[999] = float("inf"), float("nan"), float("-inf")
    zeroed = x.clone()
    groups = [1, 4, 7]
    for g in groups:
        zeroed[g * 128:(g + 1) * 128] = 0
    qb = quantize(bad, bits, 128, stochastic=stochastic, generator=torch.Generator().manual_seed(1),
                  nonfinite="propagate")
    qz = quantize(zeroed, bits, 128, stochastic=stochastic, generator=torch.Generator().manual_seed(1))
    assert torch.equal(qb.codes, qz.codes)
    is_bad = torch.zeros(qb.scales.numel(), dtype=torch.bool)
    is_bad[groups] = True
    assert bool(qb.scales[is_bad].isnan().all()) and torch.equal(qb.scales[~is_bad], qz.scales[~is_bad])
    d, dz = dequantize(qb), dequantize(qz)
    nan_at = is_bad.repeat_interleave(128)[:1000]
    assert torch.equal(d.isnan(), nan_at) and torch.equal(d[~nan_at], dz[~nan_at])
    with pytest.raises(NonFiniteValueError):
        quantize(bad, bits, 128)
    with pytest.raises(InvalidInputError):
        quantize(x, bits, 128, nonfinite="ignore")


def test_bad_input_raises():
    x = torch.randn(100)
    for bits in (0, 2, 3, 16, 4.0, True):
        with pytest.raises(InvalidInputError):
            quantize(x, bits, 32)
    for g in (0, -1, 1.5, None):
        with pytest.raises(InvalidInputError):
            quantize(x, 4, g)
    with pytest.raises(UnsupportedDtypeError):
        quantize(torch.arange(10), 8, 4)
    with pytest.raises(InvalidInputError):
        quantize(np.zeros(4, np.float32), 8, 4)
    bad = x.clone()
    bad[7] = float("nan")
    with pytest.raises(NonFiniteValueError):
        quantize(bad, 8, 32)
    bad[7] = float("inf")
    with pytest.raises(NonFiniteValueError):
        quantize(bad, 4, 32)
    with pytest.raises(UnsupportedDtypeError):
        pack_int4(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(InvalidInputError):
        unpack_int4(torch.zeros(2, dtype=torch.uint8), 5)
    q = quantize(x, 4, 32)
    with pytest.raises(InvalidInputError):
        dequantize(q._replace(numel=1000))
    with pytest.raises(InvalidInputError):
        dequantize(q._replace(bits=8))


# ----------------------------------------------------------------------------------------------------------------
# Hadamard
# ----------------------------------------------------------------------------------------------------------------


def test_hadamard_matrix_is_sylvester():
    h = hadamard_matrix(32, dtype=torch.float64).numpy()
    ref = np.array([[1.0]])
    for _ in range(5):
        ref = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), ref)
    assert np.array_equal(h, ref)
    assert np.array_equal(h @ h, 32 * np.eye(32))
    with pytest.raises(InvalidInputError):
        hadamard_matrix(12)


def test_hadamard_blocks_match_reference_and_invert():
    x = heavy_tailed(32 * 300, 2)
    y = hadamard32(x)
    h = hadamard_matrix(32, dtype=torch.float64)
    ref = (h @ x.double().view(-1, 32).T).T.reshape(-1)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * float(x.abs().max()))
    back = inverse_hadamard32(y)
    assert float((back - x).abs().max()) <= 1e-5 * float(x.abs().max())
    x64 = x.double().view(10, -1)
    assert float((inverse_hadamard32(hadamard32(x64)) - x64).abs().max()) < 1e-12 * float(x.abs().max())
    assert hadamard32(x64).shape == x64.shape


def test_hadamard_spreads_an_outlier():
    x = torch.full((32,), 0.01)
    x[3] = 10.0
    y = hadamard32(x)
    # the spike's energy is spread evenly: every coefficient has magnitude 10 +- 0.31
    assert float(y.abs().min()) > 9.6 and float(y.abs().max()) < 10.4
    assert torch.allclose((y * y).sum(), 32 * (x * x).sum(), rtol=1e-5)


def test_hadamard_bad_input():
    with pytest.raises(InvalidInputError):
        hadamard32(torch.zeros(33))
    with pytest.raises(UnsupportedDtypeError):
        hadamard32(torch.zeros(32, dtype=torch.bfloat16))


# ----------------------------------------------------------------------------------------------------------------
# configuration and model
# ----------------------------------------------------------------------------------------------------------------


def test_config_arms_and_validation():
    c = CommConfig.arm("sdp4bit", ranks_per_node=8)
    assert (c.weight_mode, c.grad_mode, c.hadamard, c.ranks_per_node) == ("qwd", "two_level", True, 8)
    assert c.alignment == 2048 and c.grad_alignment == 128
    assert CommConfig.arm("baseline").grad_alignment == 1
    for bad in ({"weight_bits": 3}, {"grad_bits_inter": 2}, {"weight_group_size": 0}, {"grad_group_size_intra": -4},
                {"weight_mode": "fp8"}, {"grad_mode": "ring"}, {"ranks_per_node": 0}, {"param_dtype": "int8"},
                {"hadamard": True}):
        with pytest.raises(InvalidInputError):
            CommConfig(**bad)
    with pytest.raises(InvalidInputError):
        CommConfig.arm("nope")
    assert CommConfig.arm("tlq").replace(hadamard=True) == CommConfig.arm("tlq_hs")


def test_wire_bits_meet_the_targets():
    w, gi, ge = wire_bits(CommConfig.arm("sdp4bit"))
    assert w == wire_bits_per_element(4, 2048) == 4 + 32 / 2048 <= 4.1
    assert ge == 4.25 <= 4.3 and gi == 8.25 <= 8.3
    assert wire_bits(CommConfig.arm("baseline")) == (16.0, 32.0, 32.0)
    assert wire_bits(CommConfig.arm("qwz_qgz")) == (8 + 32 / 2048, 4.25, 4.25)


def test_throughput_model_behaves():
    cluster, work = paper_setting()
    sdp = CommConfig.arm("sdp4bit")
    base = step_time(cluster, work, CommConfig())
    fast = step_time(cluster, work, sdp)
    assert base.quant == 0 and fast.quant > 0 and fast.compute == base.compute
    assert speedup(cluster, work, sdp) == pytest.approx(base.total / fast.total)
    # slower network: larger speedup; a network far faster than compute: the quantization kernels only cost
    slow, _ = paper_setting(inter_node_gbps=12.5)
    huge, _ = paper_setting(inter_node_gbps=1e6, intra_node_gbps=1e6)
    assert speedup(slow, work, sdp) > speedup(cluster, work, sdp) > 1 > speedup(huge, work, sdp)
    # the 6.7B model of the paper has ~6.7e9 parameters
    assert 6.5e9 < work.params < 6.9e9
    with pytest.raises(InvalidInputError):
        Cluster(gpus=100, gpus_per_node=8)
    with pytest.raises(InvalidInputError):
        step_time(Cluster(), Workload(tensor_parallel=3), sdp)


def test_import_strata_does_not_import_torch():
    code = "import sys, strata; assert 'torch' not in sys.modules; import strata.comm; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
