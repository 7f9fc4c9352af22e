"""strata.comm on a CUDA GPU; skipped where torch sees none (the project's CI machine has none).

The quantizers on the GPU against the same calls on the CPU: round-to-nearest codes bit-identical, scales and
dequantized values within one unit in the last place (CUDA divides by a scalar through its reciprocal),
stochastic rounding within one quantization bin and unbiased, int4 packing bit-exact, the Hadamard transform
within fp32 rounding of the CPU's and inverted. Then sharded training of a small net whose parameters live on
the GPU: 2 gloo ranks sharing the GPU (1 and 2 ranks per node, so both the intra-node int8 and the inter-node
int4 reduce-scatter run), and 1 NCCL rank: the exact arm equals single-process training, every arm keeps the
replicas bit-identical on all ranks after every step. Last, FSDP2 (``fully_shard`` on a CUDA mesh) with the
quantized all-gather and reduce-scatter hooks, on 2 gloo ranks sharing the GPU (FSDP2 on one rank calls no
collective at all): the hooks run on the GPU's buffers, keep their qWD replicas there, identical on both ranks
after every step, and the net trains. With Triton installed, the fused kernels (strata.comm.kernels, compiled) pass
the checks tests/test_comm_kernels.py runs in Triton's interpreter, at larger sizes, and give the collectives' results
of the PyTorch ops on 2 gloo ranks sharing the GPU (the training above uses them: ``kernels="auto"``).
"""
from __future__ import annotations

import importlib.util
import math
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from strata.comm import (  # noqa: E402
    ARMS,
    CommConfig,
    CommStats,
    ShardedOptimizer,
    apply_fsdp2_comm,
    build_topology,
    dequantize,
    hadamard32,
    inverse_hadamard32,
    pack_int4,
    quantize,
    unpack_int4,
)
from strata.comm.fsdp import QuantizedAllGather, QuantizedReduceScatter  # noqa: E402
from strata.comm.model import wire_bits  # noqa: E402
from strata.comm.quantize import qmax  # noqa: E402

from . import comm_kernel_checks as checks  # noqa: E402
from .test_comm_distributed import DEADLINE_S, TinyNet, batch, gather_all, make_net_and_optimizer, spawn  # noqa: E402
from .test_comm_quantize import group_scale, heavy_tailed  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = "cuda"
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [1, 7, 128, 2048])
def test_nearest_codes_match_the_cpu_bit_for_bit(bits, group):
    x = heavy_tailed(100_003, bits * group)
    cpu = quantize(x, bits, group, stochastic=False)
    gpu = quantize(x.to(CUDA), bits, group, stochastic=False)
    assert gpu.codes.is_cuda and gpu.scales.is_cuda
    assert torch.equal(gpu.codes.cpu(), cpu.codes)
    ulp = 2.0**-23  # fp32: absmax / qmax on the GPU is absmax * (1 / qmax), one rounding more
    torch.testing.assert_close(gpu.scales.cpu(), cpu.scales, rtol=ulp, atol=0)
    torch.testing.assert_close(dequantize(gpu).cpu(), dequantize(cpu), rtol=2 * ulp, atol=0)


@pytest.mark.parametrize("bits", [4, 8])
def test_stochastic_rounding_on_the_gpu_is_within_a_bin_and_unbiased(bits):
    n, group, trials = 8192, 128, 400
    x = heavy_tailed(n, 11).to(CUDA)
    gen = torch.Generator(device=CUDA).manual_seed(5)
    bin_ = (group_scale(x.cpu(), group) / qmax(bits)).to(CUDA)
    mean = torch.zeros(n, dtype=torch.float64, device=CUDA)
    for _ in range(trials):
        d = dequantize(quantize(x, bits, group, generator=gen))
        assert d.is_cuda
        err = (d.double() - x.double()).abs()
        assert bool((err <= bin_ * (1 + 1e-5) + 1e-30).all())
        mean += d.double() / trials
    # each draw's error lies in (-bin, bin) with mean zero: Hoeffding + union bound over n, failure < 1e-6
    t = bin_ * math.sqrt(2 * math.log(2 * n / 1e-6) / trials)
    assert bool(((mean - x.double()).abs() <= t + 1e-30).all())
    # and rounding is random: the same call twice differs somewhere
    assert not torch.equal(quantize(x, bits, group, generator=gen).codes, quantize(x, bits, group, generator=gen).codes)


def test_int4_packing_on_the_gpu_is_bit_exact_and_matches_the_cpu():
    codes = torch.randint(-7, 8, (10_001,), generator=torch.Generator().manual_seed(2)).to(torch.int8)
    packed = pack_int4(codes.to(CUDA))
    assert torch.equal(packed.cpu(), pack_int4(codes))
    assert torch.equal(unpack_int4(packed, codes.numel()).cpu(), codes)


def test_nonfinite_groups_propagate_as_nan_on_the_gpu():
    x = heavy_tailed(1024, 4).to(CUDA)
    x[300] = float("nan")
    x[700] = float("inf")
    d = dequantize(quantize(x, 4, 128, stochastic=False, nonfinite="propagate"))
    bad = torch.zeros(1024, dtype=torch.bool, device=CUDA)
    bad[256:384] = bad[640:768] = True
    assert bool(d[bad].isnan().all()) and bool(d[~bad].isfinite().all())


def test_hadamard_on_the_gpu_matches_the_cpu_and_inverts():
    x = heavy_tailed(32 * 4096, 9)
    y = hadamard32(x.to(CUDA))
    torch.testing.assert_close(y.cpu(), hadamard32(x), rtol=1e-5, atol=1e-5 * float(x.abs().max()))
    torch.testing.assert_close(inverse_hadamard32(y).cpu(), x, rtol=1e-5, atol=1e-5 * float(x.abs().max()))


def worker_cuda_training(rank: int, world: int) -> None:
    device = torch.device(CUDA, torch.cuda.current_device() if dist.get_backend() == "nccl" else 0)
    share = slice(rank * 16 // world, (rank + 1) * 16 // world)  # this rank's part of the global batch of 16

    def local_loss(net, x, y):
        return torch.nn.functional.cross_entropy(net(x[share]), y[share])

    for per_node in sorted({1, world}):
        topo = build_topology(per_node)

        net, opt = make_net_and_optimizer(device=device)
        ref_net, ref_opt = make_net_and_optimizer(device=device)
        sdp = ShardedOptimizer(net, opt, CommConfig(ranks_per_node=per_node, param_dtype="float32"), topology=topo)
        assert sdp.replica.is_cuda
        for step in range(3):
            x, y = (t.to(device) for t in batch(step))
            sdp.zero_grad()
            local_loss(net, x, y).backward()
            sdp.step()
            ref_opt.zero_grad()
            torch.nn.functional.cross_entropy(ref_net(x), y).backward()
            ref_opt.step()
            for p, q in zip(net.parameters(), ref_net.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)

        for arm in ARMS:
            net, opt = make_net_and_optimizer(device=device)
            cfg = CommConfig.arm(arm, ranks_per_node=per_node, weight_group_size=256)
            sdp = ShardedOptimizer(net, opt, cfg, topology=topo, seed=3)
            for step in range(4):
                x, y = (t.to(device) for t in batch(step))
                loss = local_loss(net, x, y)
                sdp.zero_grad()
                loss.backward()
                sdp.step()
                assert math.isfinite(loss.item()), (arm, step)
                assert bool((gather_all(sdp.replica) == sdp.replica).all()), (arm, per_node, step)
            assert sdp.replica.is_cuda and net.emb.weight.data_ptr() == sdp.replica.data_ptr()


@pytest.mark.timeout(DEADLINE_S + 30)
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_sharded_training_on_the_gpu_two_gloo_ranks(tmp_path):
    spawn(worker_cuda_training, 2, tmp_path)


@pytest.mark.timeout(DEADLINE_S + 30)
@pytest.mark.skipif(not dist.is_available() or not dist.is_nccl_available(), reason="needs nccl")
def test_sharded_training_on_the_gpu_one_nccl_rank(tmp_path):
    spawn(worker_cuda_training, 1, tmp_path, backend="nccl")


def worker_fsdp2_cuda(rank: int, world: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    device = torch.device(CUDA, 0)
    torch.cuda.set_device(device)
    x, y = batch(0)
    xs, ys = x.view(world, -1, 12)[rank].to(device), y.view(world, -1)[rank].to(device)
    probe = torch.randn(4, 12, generator=torch.Generator().manual_seed(99)).to(device)
    for per_node in sorted({1, world}):
        torch.manual_seed(0)
        net = TinyNet().to(device)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        mesh = init_device_mesh(CUDA, (world,))
        for m in (net.emb, net.head, net):
            fully_shard(m, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
        stats = CommStats()
        cfg = CommConfig.arm("sdp4bit", ranks_per_node=per_node, weight_group_size=64)
        comms = apply_fsdp2_comm([net.emb, net.head, net], cfg, build_topology(per_node), stats, seed=1)
        assert sum(isinstance(c, QuantizedAllGather) for c in comms) == 3
        assert sum(isinstance(c, QuantizedReduceScatter) for c in comms) == 3
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        losses = []
        for step in range(5):
            loss = torch.nn.functional.cross_entropy(net(xs).float(), ys)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            with torch.no_grad():
                o = net(probe).float()
            assert o.is_cuda and bool((gather_all(o) == o).all()), (per_node, step)
            for c in comms:  # every unit's qWD replica lives on the GPU, the same on every rank
                if isinstance(c, QuantizedAllGather):
                    assert c.replica is not None and c.replica.is_cuda, (per_node, step)
                    assert bool((gather_all(c.replica) == c.replica).all()), (per_node, step)
        assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
        assert stats.summary()["weight_allgather"]["calls"] >= 5 * 2
        _, intra, inter = wire_bits(cfg)  # one node: the 8-bit intra-node stage only; one rank a node: 4-bit inter
        level, bits = ("intra", intra) if per_node == world else ("inter", inter)
        assert stats.bits_per_element("grad_reduce_scatter", level) == bits


@pytest.mark.timeout(DEADLINE_S + 30)
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_fsdp2_hooks_on_the_gpu_two_gloo_ranks(tmp_path):
    spawn(worker_fsdp2_cuda, 2, tmp_path)


# ------------------------------------------------------------------------------------- the fused Triton kernels


@pytest.fixture
def compiled():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("Triton runs in its interpreter in this process")


@needs_triton
def test_fused_nearest_matches_the_cpu_bit_for_bit(compiled):
    checks.check_nearest_matches_reference(CUDA, 100_003)
    checks.check_weight_difference(CUDA, 100_003)
    checks.check_hadamard_quantize(CUDA, 32 * 4096)
    checks.check_packing(CUDA)
    checks.check_nonfinite_groups(CUDA)


@needs_triton
def test_fused_nearest_codes_match_the_gpu_reference(compiled):
    from strata.comm import kernels

    x = heavy_tailed(100_003, 21).to(CUDA)
    for bits, group in checks.LAYOUTS:
        ref = quantize(x, bits, group, stochastic=False)
        got = kernels.quantize(x, bits, group, stochastic=False)
        assert torch.equal(got.codes, ref.codes)
        torch.testing.assert_close(got.scales, ref.scales, rtol=2.0**-23, atol=0)


@needs_triton
def test_fused_stochastic_seeds_and_stages(compiled):
    checks.check_stochastic_within_a_bin_and_unbiased(CUDA, 8192, 400)
    checks.check_seeds(CUDA, 100_003)
    checks.check_requantize_sum(CUDA, 50_000)
    checks.check_dequantize_add(CUDA, 50_016)


@pytest.mark.timeout(DEADLINE_S + 30)
@needs_triton
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_fused_collectives_equal_torch_on_the_gpu_two_gloo_ranks(tmp_path, compiled):
    from .test_comm_kernels import worker_fused_vs_torch

    spawn(worker_fused_vs_torch, 2, tmp_path, CUDA)
