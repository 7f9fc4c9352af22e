"""strata.comm's fused Triton kernels on CPU tensors, run by Triton's interpreter (the checks in comm_kernel_checks;
tests/test_comm_cuda.py runs them compiled on a GPU), and the collectives with ``kernels="triton"`` against
``kernels="torch"`` on 2 gloo ranks.

Triton decides when it is imported whether it compiles or interprets: this module sets ``TRITON_INTERPRET=1`` first,
where no GPU is visible (with a GPU the checks run compiled, on it), and is skipped when Triton was already imported
without its interpreter. Spawned ranks inherit the variable.
"""
from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from strata.comm import (  # noqa: E402
    CommConfig,
    WeightAllGather,
    build_topology,
    kernels,
    reduce_scatter_two_level,
)
from strata.errors import InvalidInputError  # noqa: E402

from . import comm_kernel_checks as checks  # noqa: E402
from .test_comm_distributed import gather_all, spawn  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton was imported without its interpreter", allow_module_level=True)


def test_nearest_matches_the_reference_bit_for_bit():
    checks.check_nearest_matches_reference(DEVICE, 5000, backend="triton")


def test_weight_difference_in_one_pass():
    checks.check_weight_difference(DEVICE, 3000, backend="triton")


def test_hadamard_then_quantize():
    checks.check_hadamard_quantize(DEVICE, 4096, backend="triton")


def test_stochastic_rounding_within_a_bin_and_unbiased():
    checks.check_stochastic_within_a_bin_and_unbiased(DEVICE, 1000, 100, backend="triton")


def test_same_seed_same_bytes():
    checks.check_seeds(DEVICE, 3000, backend="triton")


def test_int4_packing():
    checks.check_packing(DEVICE, backend="triton")


def test_nonfinite_groups_propagate():
    checks.check_nonfinite_groups(DEVICE, backend="triton")


def test_stage_two_requantize_sum():
    checks.check_requantize_sum(DEVICE, 2500, backend="triton")


def test_receive_side_dequantize_add():
    checks.check_dequantize_add(DEVICE, 2080, backend="triton")


def test_bad_arguments_raise():
    x = torch.zeros(64, device=DEVICE)
    for kwargs in ({"bits": 4, "group_size": 7}, {"bits": 8, "group_size": 48, "hadamard": True},
                   {"bits": 3, "group_size": 8}, {"bits": 8, "group_size": 8, "seed": 1.5},
                   {"bits": 8, "group_size": 8, "subtract": torch.zeros(63, device=DEVICE)}):
        with pytest.raises(InvalidInputError):
            kernels.quantize(x, **kwargs)
    with pytest.raises(InvalidInputError):
        kernels.quantize(torch.zeros(48, device=DEVICE), 8, 32, hadamard=True)
    codes, scales = torch.zeros(2, 32, dtype=torch.int8, device=DEVICE), torch.zeros(2, 1, device=DEVICE)
    with pytest.raises(InvalidInputError):  # 2 rows of 32 values do not fill 3 * 32 values
        kernels.dequantize_add(codes, scales, 32, 8, 32, torch.zeros(96, device=DEVICE))
    with pytest.raises(InvalidInputError):  # 8-bit rows must be int8
        kernels.requantize_sum(codes.view(torch.uint8), scales, 32, 8, 32, 4, 32)
    assert kernels.use_fused("torch", x) is None and kernels.use_fused("triton", x) == "triton"
    assert kernels.use_fused("auto", x) == ("triton" if x.is_cuda else "numba")
    with pytest.raises(InvalidInputError):  # the numba kernels take CPU tensors only, and there are two backends
        kernels.quantize(x.to("meta"), 8, 8, backend="numba")
    with pytest.raises(InvalidInputError):
        kernels.quantize(x, 8, 8, backend="cuda")
    with pytest.raises(InvalidInputError):
        CommConfig(kernels="cuda")


def worker_fused_vs_torch(rank: int, world: int, device: str) -> None:
    """Round to nearest: the fused collectives give the PyTorch collectives' results (bit for bit, the inverse
    Hadamard transform within fp32 rounding); stochastic: the replicas stay bit-identical on every rank."""
    dev = torch.device(device, 0) if device == "cuda" else torch.device(device)
    g = torch.Generator().manual_seed(100 + rank)
    for per_node in (1, world):
        topo = build_topology(per_node)
        flat = (torch.randn(world * 512, generator=g) * torch.exp(torch.randn(world * 512, generator=g))).to(dev)
        for arm, extra in [("tlq", {}), ("qwz_qgz", {}), ("tlq_hs", {})]:
            outs = {}
            for mode in ("torch", "triton", "auto"):  # (auto: numba on the CPU)
                cfg = CommConfig.arm(arm, ranks_per_node=per_node, stochastic=False, kernels=mode, **extra)
                outs[mode] = reduce_scatter_two_level(flat, topo, cfg)
            for mode in ("triton", "auto"):
                assert outs[mode].device == dev
                if arm == "tlq_hs":
                    torch.testing.assert_close(outs[mode], outs["torch"], rtol=1e-5, atol=1e-5)
                else:
                    assert checks.same(outs[mode], outs["torch"]), (arm, per_node, mode)
        for weight_mode, dtype in [("qwd", "bfloat16"), ("direct", "float32")]:
            shard = torch.randn(512, generator=g).to(dev)
            base = gather_all(torch.randn(512, generator=g).to(dev)).reshape(-1).to(torch.bfloat16).float()
            reps = {}
            for mode in ("torch", "triton", "auto"):
                cfg = CommConfig(weight_mode=weight_mode, weight_bits=4, weight_group_size=128, param_dtype=dtype,
                                 stochastic=False, kernels=mode)
                reps[mode] = base.clone()
                WeightAllGather(cfg, topo)(shard, reps[mode])
            assert checks.same(reps["triton"], reps["torch"]) and checks.same(reps["auto"], reps["torch"])
        for mode in ("triton", "auto"):
            cfg = CommConfig.arm("sdp4bit", ranks_per_node=per_node, weight_group_size=128, kernels=mode)
            replica = gather_all(torch.randn(512, generator=torch.Generator().manual_seed(0)).to(dev)).reshape(-1)
            gen = torch.Generator(device=dev).manual_seed(rank)
            for _ in range(2):
                WeightAllGather(cfg, topo, generator=gen)(torch.randn(512, generator=g).to(dev), replica)
                assert bool((gather_all(replica) == replica).all())


@pytest.mark.timeout(240)
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="needs gloo")
def test_collectives_fused_equal_torch_two_ranks(tmp_path):
    spawn(worker_fused_vs_torch, 2, tmp_path, DEVICE)


@pytest.mark.skipif(DEVICE != "cpu", reason="the numba kernels run on CPU tensors")
def test_numba_kernels_give_the_triton_kernels_bytes():
    """The CPU kernels draw the same Philox numbers and round alike: stochastic codes equal bit for bit, for the
    weight difference (rounded to bf16 first), the intra-node stage and stage 2; the receive side alike."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4100, generator=g) * torch.exp(torch.randn(4100, generator=g))
    replica = torch.randn(4100, generator=g).to(torch.bfloat16)
    for args in [dict(bits=4, group_size=2048, subtract=replica, round_to=torch.bfloat16),
                 dict(bits=8, group_size=128), dict(bits=4, group_size=6)]:
        a, b = (kernels.quantize(x, seed=1234567, backend=be, **args) for be in ("triton", "numba"))
        checks.assert_same_quantized(b, a)
    codes, scales, _ = checks.quantized_rows(x[:4096], 2, 8, 128)
    a, b = (kernels.requantize_sum(codes, scales, 2048, 8, 128, 4, 128, seed=99, backend=be)
            for be in ("triton", "numba"))
    checks.assert_same_quantized(b, a)
    out = {be: replica.clone() for be in ("triton", "numba")}
    for be in out:
        kernels.dequantize_add(a.codes.view(1, -1), a.scales.view(1, -1), 2048, 4, 128, out[be][:2048], backend=be)
    assert checks.same(out["numba"], out["triton"])
