"""Project step time and speedup of every SDP4Bit arm in the paper's speed-test setting with ``strata.comm.model``.

Setting (``strata.comm.model.paper_setting``): GPT 6.7B, 128 GPUs, TP 4, global batch 32 x 2048 tokens, 8 all-to-all
pipeline chunks, on H800 nodes (8 GPUs) or A100 nodes (4 GPUs). The cluster rates are parameters; the defaults are
nominal link speeds stated in ``docs/comm.md``. The script prints and writes (atomically, to ``--out``)
``sdp4bit_model.json`` and ``.md``:

* the per-arm step-time breakdown and speedup over the baseline for both clusters;
* SDP4Bit's speedup on H800 nodes as the effective inter-node bandwidth and the compute utilisation vary, and the
  bandwidth at which the model reproduces the paper's 4.08x;
* the H800 projection with the quantization throughput this CPU measured (``comm_quant_throughput.json``, if
  present), to show what unfused kernels at that speed would cost.

Run from the repository root: ``.venv/bin/python benchmarks/sdp4bit_model.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from strata.atomic import atomic_write  # noqa: E402
from strata.comm import CommConfig  # noqa: E402
from strata.comm.model import paper_setting, speedup, step_time  # noqa: E402

ARMS = ["baseline", "qwz_qgz", "qwd", "tlq", "tlq_hs", "sdp4bit", "direct4"]
PAPER_SPEEDUP = 4.08




def bandwidth_for(target: float, cluster: str, **overrides) -> float | None:
    """Inter-node GB/s per node at which SDP4Bit's projected speedup equals ``target`` (bisection; None if never)."""
    sdp = CommConfig.arm("sdp4bit")

    def s(bw: float) -> float:
        c, work = paper_setting(cluster, inter_node_gbps=bw, **overrides)
        return speedup(c, work, sdp)

    lo, hi = 0.1, 10_000.0  # speedup falls as bandwidth grows
    if not s(lo) >= target >= s(hi):
        return None
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if s(mid) > target else (lo, mid)
    return round(lo, 2)


# the kernels one SDP4Bit step runs, as measured by comm_quant_throughput.py
CPU_OPS = ["quantize int4 g2048 stochastic (qWD)", "dequantize int4 g2048", "hadamard32 forward",
           "quantize int8 g128 stochastic", "dequantize int8 g128", "quantize int4 g128 stochastic",
           "dequantize int4 g128", "hadamard32 inverse"]


def arm_table(cluster_name: str) -> tuple[dict, list[str]]:
    cluster, work = paper_setting(cluster_name)
    arms = {}
    for arm in ARMS:
        t = step_time(cluster, work, CommConfig.arm(arm))
        arms[arm] = {**{k: round(v, 5) for k, v in asdict(t).items()}, "total": round(t.total, 5),
                     "speedup": round(speedup(cluster, work, CommConfig.arm(arm)), 3)}
    md = [f"**{cluster_name.upper()}**: GPT {work.params / 1e9:.2f}B, {cluster.gpus} GPUs ({cluster.gpus_per_node} "
          f"per node), TP {work.tensor_parallel}, {work.tokens_per_step:.0f} tokens per step; NVLink "
          f"{cluster.intra_node_gbps:g} GB/s per GPU, network {cluster.inter_node_gbps:g} GB/s per node, "
          f"{cluster.flops / 1e12:.0f} TFLOP/s per GPU, quantization kernels {cluster.quant_gbps:g} GB/s.", "",
          "| arm | compute s | weight comm s | grad comm s | quant s | step s | speedup |",
          "|---|---|---|---|---|---|---|"]
    md += [f"| {a} | {r['compute']:.3f} | {r['weight_comm']:.3f} | {r['grad_comm']:.3f} | {r['quant']:.3f} | "
           f"{r['total']:.3f} | {r['speedup']:.2f}x |" for a, r in arms.items()]
    return {"cluster": asdict(cluster), "workload": asdict(work), "arms": arms}, md


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sdp = CommConfig.arm("sdp4bit")
    report = {"paper_speedup": PAPER_SPEEDUP, "settings": {}}
    md: list[str] = []
    for name in ("h800", "a100"):
        report["settings"][name], lines = arm_table(name)
        md += lines + [""]
    bandwidths = [12.5, 25, 50, 100, 200, 400]
    utilisations = [0.15, 0.35, 0.55]
    grid = {f"{u:.2f}": {str(bw): round(speedup(*paper_setting("h800", inter_node_gbps=bw, flops=989e12 * u), sdp),
                                         3) for bw in bandwidths} for u in utilisations}
    match = {f"{u:.2f}": bandwidth_for(PAPER_SPEEDUP, "h800", flops=989e12 * u) for u in utilisations}
    report["h800_sdp4bit_speedup_by_utilisation_and_inter_node_gbps"] = grid
    report["h800_inter_node_gbps_for_paper_speedup_by_utilisation"] = match
    md += ["H800 setting: SDP4Bit speedup by compute utilisation (rows) and effective network GB/s per node "
           f"(columns); last column: the bandwidth at which the model gives the paper's {PAPER_SPEEDUP}x.", "",
           "| utilisation | " + " | ".join(f"{bw:g} GB/s" for bw in bandwidths) + f" | {PAPER_SPEEDUP}x at |",
           "|---|" + "---|" * (len(bandwidths) + 1)]
    md += [f"| {u} | " + " | ".join(f"{v:.2f}x" for v in row.values()) + f" | {match[u]} GB/s |"
           for u, row in grid.items()]
    measured = ROOT / "benchmarks" / "results" / "comm_quant_throughput.json"
    if measured.exists():
        ops = json.loads(measured.read_text())["operations"]
        rates = [ops[k]["gb_per_s"] for k in CPU_OPS if k in ops]
        cpu = round(len(rates) / sum(1 / r for r in rates), 3)  # harmonic mean: equal work per kernel
        cluster, work = paper_setting("h800", quant_gbps=cpu)
        t = step_time(cluster, work, sdp)
        report["h800_with_this_cpu_quant_gbps"] = {"quant_gbps": cpu, "sdp4bit_quant_s": round(t.quant, 3),
                                                   "sdp4bit_speedup": round(speedup(cluster, work, sdp), 4)}
        md += ["", f"With this CPU's measured quantization throughput (harmonic mean {cpu} GB/s, one thread) in place "
               f"of fused GPU kernels, SDP4Bit's (de)quantization alone would take {t.quant:.1f} s per step in the "
               f"H800 setting, a speedup of {report['h800_with_this_cpu_quant_gbps']['sdp4bit_speedup']}x."]
    atomic_write(args.out / "sdp4bit_model.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / "sdp4bit_model.md", "\n".join(md) + "\n")
    print("\n".join(md))
    return report


if __name__ == "__main__":
    main()
