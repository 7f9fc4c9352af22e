"""The pure parts of ``benchmarks/sdp4bit_link.py``: link rates, tc arguments, and the throughput model fed with
measured quantities. The namespaces, tc and the training ranks need root and are not exercised here."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

link = pytest.importorskip("benchmarks.sdp4bit_link")

from strata.comm import CommConfig  # noqa: E402

P = 12_713_984
#: Measured rates (GB/s of fp32 input) of every kernel the two quantized arms run, made up.
KERNELS = {name: 0.5 + 0.25 * i for i, name in enumerate(
    dict.fromkeys(k for arm in ("qwz_qgz", "sdp4bit")
                  for k in link.kernel_values(CommConfig.arm(arm, ranks_per_node=2), P, 4, 2)))}


@pytest.mark.parametrize("text, bits", [("1gbit", 1e9), ("2.5Gbit", 2.5e9), ("500mbit", 5e8), ("10gbit/s", 1e10),
                                        ("1e9", 1e9), (" 250 kbit ", 2.5e5)])
def test_parse_rate(text, bits):
    assert link.parse_rate(text) == pytest.approx(bits)


@pytest.mark.parametrize("text", ["", "fast", "0gbit", "-1gbit", "1tbit", "1 gbyte"])
def test_parse_rate_rejects(text):
    with pytest.raises(ValueError):
        link.parse_rate(text)


def test_tbf_params():
    assert link.tbf_params(1e9) == {"rate": "1000000000bit", "burst": 256 * 1024, "latency": "20ms"}
    assert link.tbf_params(10e9)["burst"] == int(10e9 / 8 * 0.002)  # 2 ms of traffic beats the 256 KiB floor


def test_quant_values_match_the_model():
    """The per-kernel counts add up to what step_time charges (same values, so the same quant seconds)."""
    from strata.comm.model import Cluster, Workload, step_time

    work = Workload(params=P, tokens_per_step=256)
    cluster = Cluster(gpus=4, gpus_per_node=2, quant_gbps=2.0)
    for arm in ("baseline", "qwz_qgz", "qwd", "tlq", "tlq_hs", "sdp4bit", "direct4"):
        cfg = CommConfig.arm(arm, ranks_per_node=2)
        values = sum(link.model_quant_values(cfg, P, 4, 2).values())
        assert step_time(cluster, work, cfg).quant == pytest.approx(values * 4 / 2e9)


def test_effective_quant_rate_charges_the_kernels_time():
    """The model's quantization time at the effective rate is the time of the fused kernels the arm runs at their
    measured rates: stage 1 over the whole vector, stage 2 over the L received copies, the last stage over the
    copies of the own shard, the weight kernels over the own shard and the replica."""
    from strata.comm.model import Cluster, Workload, step_time

    assert link.effective_quant_gbps(CommConfig(), P, 4, 2, KERNELS) is None
    sdp = link.kernel_values(CommConfig.arm("sdp4bit", ranks_per_node=2), P, 4, 2)
    assert sorted(sdp.values()) == sorted([P / 4, P, P, P, 2 * P / 4])
    for arm in ("qwz_qgz", "sdp4bit"):
        cfg = CommConfig.arm(arm, ranks_per_node=2)
        q = link.effective_quant_gbps(cfg, P, 4, 2, KERNELS)
        seconds = sum(4 * v / (KERNELS[k] * 1e9) for k, v in link.kernel_values(cfg, P, 4, 2).items())
        t = step_time(Cluster(gpus=4, gpus_per_node=2, quant_gbps=q), Workload(params=P, tokens_per_step=256), cfg)
        assert t.quant == pytest.approx(seconds)
    with pytest.raises(KeyError):
        link.effective_quant_gbps(CommConfig.arm("tlq", ranks_per_node=2), P, 4, 2, KERNELS)


def test_kernel_ops_time_what_the_arms_run():
    """One fused kernel per name, each taking the same number of input values."""
    import torch

    configs = [CommConfig.arm(arm, ranks_per_node=2) for arm in ("qwz_qgz", "sdp4bit")]
    ops = link.kernel_ops(configs, torch.randn(8192), torch.Generator().manual_seed(0), 2, 4)
    assert sorted(ops) == sorted(KERNELS)
    for op in ops.values():
        op()


def test_projection_uses_the_measured_quantities():
    out = link.projection(params=P, tokens_per_step=256, compute_s=0.2, inter_gbps=0.12, intra_gbps=3.5,
                          kernel_gbps=KERNELS)
    assert list(out) == ["baseline", "qwz_qgz", "sdp4bit"]
    base = out["baseline"]
    assert base["speedup"] == 1.0 and base["quant_s"] == 0.0 and base["quant_gbps"] is None
    for r in out.values():
        assert r["compute_s"] == pytest.approx(0.2)
        assert r["step_s"] == pytest.approx(r["compute_s"] + r["weight_comm_s"] + r["grad_comm_s"] + r["quant_s"])
    # baseline over the link: 3/4 of P bf16 weights and fp32 gradients per node at 0.12 GB/s
    assert base["weight_comm_s"] == pytest.approx(0.75 * P * 2 / 0.12e9)
    assert base["grad_comm_s"] == pytest.approx(0.75 * P * 4 / 0.12e9)
    sdp = out["sdp4bit"]
    assert sdp["speedup"] == pytest.approx(base["step_s"] / sdp["step_s"])
    assert sdp["grad_comm_s"] < base["grad_comm_s"] / 5
    faster = link.projection(params=P, tokens_per_step=256, compute_s=0.2, inter_gbps=1.2, intra_gbps=3.5,
                             kernel_gbps=KERNELS)
    assert faster["sdp4bit"]["speedup"] < sdp["speedup"]


def test_model_inter_bytes():
    assert link.model_inter_bytes("baseline", P) == pytest.approx(0.75 * P * (2 + 4))
    w = 4 + 32 / 2048
    g = 4 + 32 / 128
    assert link.model_inter_bytes("sdp4bit", P) == pytest.approx(0.75 * P * w / 8 + 0.5 * P * g / 8)


def test_spread():
    s = link.spread([0.3, 0.1, 0.2])
    assert (s["median"], s["min"], s["max"]) == (0.2, 0.1, 0.3)
    assert math.isclose(sum(s["values"]), 0.6)
