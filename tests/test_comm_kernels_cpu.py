"""strata.comm's fused kernels compiled for the CPU (the numba backend of strata.comm.kernels): the same checks as
the Triton kernels (tests/comm_kernel_checks.py) against the PyTorch reference; the bytes they share with the Triton
kernels are checked in tests/test_comm_kernels.py (Triton's interpreter). Needs no Triton."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from strata.comm import kernels  # noqa: E402

from . import comm_kernel_checks as checks  # noqa: E402


def test_nearest_matches_the_reference_bit_for_bit():
    checks.check_nearest_matches_reference("cpu", 5000, backend="numba")


def test_weight_difference_in_one_pass():
    checks.check_weight_difference("cpu", 3000, backend="numba")


def test_hadamard_then_quantize():
    checks.check_hadamard_quantize("cpu", 4096, backend="numba")


def test_stochastic_rounding_within_a_bin_and_unbiased():
    checks.check_stochastic_within_a_bin_and_unbiased("cpu", 1000, 100, backend="numba")


def test_same_seed_same_bytes():
    checks.check_seeds("cpu", 3000, backend="numba")


def test_int4_packing():
    checks.check_packing("cpu", backend="numba")


def test_nonfinite_groups_propagate():
    checks.check_nonfinite_groups("cpu", backend="numba")


def test_stage_two_requantize_sum():
    checks.check_requantize_sum("cpu", 2500, backend="numba")


def test_receive_side_dequantize_add():
    checks.check_dequantize_add("cpu", 2080, backend="numba")


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_split_the_work_without_changing_a_byte(threads):
    """Groups (and values, in 32-blocks) are split over torch's threads: the same bytes on any count, including
    splits that do not fall on the last group's end, and fp16 parameters through the fp32 copy."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(100_003, generator=g)
    replica = torch.randn(100_003, generator=g).half()
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ref = kernels.quantize(x, 4, 2048, seed=7, subtract=replica, round_to=torch.float16, backend="numba")
        out_ref = kernels.dequantize_add(ref.codes.view(1, -1), ref.scales.view(1, -1), 100_003, 4, 2048,
                                         replica.clone(), backend="numba")
        torch.set_num_threads(threads)
        got = kernels.quantize(x, 4, 2048, seed=7, subtract=replica, round_to=torch.float16, backend="numba")
        out = kernels.dequantize_add(got.codes.view(1, -1), got.scales.view(1, -1), 100_003, 4, 2048,
                                     replica.clone(), backend="numba")
    finally:
        torch.set_num_threads(old)
    checks.assert_same_quantized(got, ref)
    assert checks.same(out, out_ref) and out.dtype == torch.float16
    assert not checks.same(out, replica)
