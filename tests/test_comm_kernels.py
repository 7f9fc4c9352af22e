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
    checks.check_nearest_matches_reference(DEVICE, 5000)


def test_weight_difference_in_one_pass():
    checks.check_weight_difference(DEVICE, 3000)


def test_hadamard_then_quantize():
    checks.check_hadamard_quantize(DEVICE, 4096)


def test_stochastic_rounding_within_a_bin_and_unbiased():
    checks.check_stochastic_within_a_bin_and_unbiased(DEVICE, 1000, 100)


def test_same_seed_same_bytes():
    checks.check_seeds(DEVICE, 3000)


def test_int4_packing():
    checks.check_packing(DEVICE)


def test_nonfinite_groups_propagate():
    checks.check_nonfinite_groups(DEVICE)


def test_stage_two_requantize_sum():
    checks.check_requantize_sum(DEVICE, 2500)


def test_receive_side_dequantize_add():
    checks.check_dequantize_add(DEVICE, 2080)


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
    assert kernels.use_fused("torch", x) is False and kernels.use_fused("triton", x) is True
    assert kernels.use_fused("auto", x) is x.is_cuda
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
            for mode in ("torch", "triton"):
                cfg = CommConfig.arm(arm, ranks_per_node=per_node, stochastic=False, kernels=mode, **extra)
                outs[mode] = reduce_scatter_two_level(flat, topo, cfg)
            assert outs["triton"].device == dev
            if arm == "tlq_hs":
                torch.testing.assert_close(outs["triton"], outs["torch"], rtol=1e-5, atol=1e-5)
            else:
                assert checks.same(outs["triton"], outs["torch"]), (arm, per_node)
        for weight_mode, dtype in [("qwd", "bfloat16"), ("direct", "float32")]:
            shard = torch.randn(512, generator=g).to(dev)
            base = gather_all(torch.randn(512, generator=g).to(dev)).reshape(-1).to(torch.bfloat16).float()
            reps = {}
            for mode in ("torch", "triton"):
                cfg = CommConfig(weight_mode=weight_mode, weight_bits=4, weight_group_size=128, param_dtype=dtype,
                                 stochastic=False, kernels=mode)
                reps[mode] = base.clone()
                WeightAllGather(cfg, topo)(shard, reps[mode])
            assert checks.same(reps["triton"], reps["torch"]), (weight_mode, per_node)
        cfg = CommConfig.arm("sdp4bit", ranks_per_node=per_node, weight_group_size=128, kernels="triton")
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
