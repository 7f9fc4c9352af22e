"""strata.checkpoint with tensors on a CUDA GPU; skipped where torch sees none (the project's CI
machine has none; run on a GPU machine by ``benchmarks/device_checks.sh``).

AsyncCheckpointer copies GPU tensors into pinned host buffers (recycled between saves) on a CUDA
stream of its own, after the work already queued on the current stream: eager ``save()`` has
the copy when it returns, lazy ``save()`` returns while the copies still wait behind the
current stream's work, and the optimizer hook waits for them; ``debug`` finds a tensor changed
before its copy ran. Every snapshot loads bit-exact to the CPU and to the GPU (bf16, fp16, fp32,
int64, bool, a non-contiguous view), ``save``/``load`` of CUDA tensors directly too, and
``torch.distributed.checkpoint.async_save`` with strata's writer.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from strata import checkpoint as ck  # noqa: E402
from strata.errors import StateChangedError  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

#: GPU cycles a stream sleeps (torch.cuda._sleep) so that what is queued after it is still
#: waiting when the host looks: about 0.5 s at 2 GHz.
SLEEP = 1_000_000_000


def gpu_state(seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(1024, 1024, device="cuda", generator=g)
    return {"w_bf16": w.bfloat16(), "w_fp16": w[:512].half(), "w_fp32": w.clone(),
            "m": {"exp_avg": torch.randn(4096, device="cuda", generator=g), "steps": torch.arange(5, device="cuda"),
                  "mask": torch.rand(999, device="cuda", generator=g) > 0.5},
            "view": w.t()[:100, :300], "lr": 3e-4}


def equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())
    return a == b


def test_eager_and_lazy_saves_load_bit_exact_to_cpu_and_gpu(tmp_path):
    state = gpu_state()
    want = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
    for lazy in (False, True):
        with ck.AsyncCheckpointer(full_every=2, lazy=lazy) as saver:
            for i in range(3):
                saver.save(state, tmp_path / f"{lazy}_{i}.strata")
                saver.wait_for_capture()
        seg = saver._prev[1].segments[0]  # (the last snapshot's host buffer)
        for i in range(3):
            assert equal(ck.load(tmp_path / f"{lazy}_{i}.strata"), want)
            on_gpu = ck.load(tmp_path / f"{lazy}_{i}.strata", device="cuda")
            assert on_gpu["w_bf16"].is_cuda and equal(on_gpu, want)
        assert torch.from_numpy(seg).is_pinned()


def test_lazy_save_returns_before_the_copies_and_the_hook_waits(tmp_path):
    model = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 256, device="cuda")).sum().backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with ck.AsyncCheckpointer(lazy=True) as saver:
        saver.guard(opt)
        torch.cuda._sleep(SLEEP)  # the copies are queued behind this
        saver.save(model.state_dict(), tmp_path / "lazy.strata")
        assert saver.capturing
        opt.step()  # waits in the hook, then changes the weights
        assert not saver.capturing
    assert equal(ck.load(tmp_path / "lazy.strata", device="cuda"), before)
    assert not torch.equal(model.weight, before["weight"])


def test_debug_finds_a_change_before_the_copy(tmp_path):
    state = {"w": torch.ones(1 << 20, device="cuda")}
    saver = ck.AsyncCheckpointer(lazy=True, debug=True)
    saver.save(state, tmp_path / "warm.strata")  # creates the capture stream
    saver.wait()
    stream = next(iter(saver._streams.values()))
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)  # the next copies wait behind this on the capture stream
    saver.save(state, tmp_path / "d.strata")
    state["w"].add_(1)  # against the contract: runs on the current stream before the copy
    with pytest.raises(StateChangedError):
        saver.wait_for_capture()
    with pytest.raises(StateChangedError):
        saver.close()


def test_save_and_load_of_cuda_tensors(tmp_path):
    state = gpu_state(1)
    ck.save(state, tmp_path / "s.strata")
    assert equal(ck.load(tmp_path / "s.strata", device="cuda"), state)
    ck.save(gpu_state(2), tmp_path / "s2.strata", base=tmp_path / "s.strata")
    assert equal(ck.load(tmp_path / "s2.strata", device="cuda"), gpu_state(2))


def test_dcp_async_save_of_cuda_tensors(tmp_path):
    import torch.distributed.checkpoint as dcp

    from strata.checkpoint.dcp import storage_reader, storage_writer

    state = {k: v for k, v in gpu_state(3).items() if k in ("w_bf16", "w_fp32", "m")}
    dcp.async_save(state, storage_writer=storage_writer(tmp_path / "dcp")).result()
    back = {"w_bf16": torch.zeros_like(state["w_bf16"]), "w_fp32": torch.zeros_like(state["w_fp32"]),
            "m": {k: torch.zeros_like(v) for k, v in state["m"].items()}}
    dcp.load(back, storage_reader=storage_reader(tmp_path / "dcp"))
    assert equal(back, state)
    assert np.isfinite(back["w_fp32"].cpu().numpy()).all()
