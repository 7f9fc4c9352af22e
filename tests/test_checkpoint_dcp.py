"""``torch.distributed.checkpoint.async_save`` with strata's storage writer on two gloo ranks:
torch stages the state on its own (a copy in host memory), strata codes each item in the
background write, and ``dcp.load`` with strata's reader gives every rank its tensors back bit
for bit (shared and rank-own, fp32 and bf16)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from .test_comm_distributed import spawn  # noqa: E402


def state(rank: int):
    g = torch.Generator().manual_seed(100 + rank)
    return {"shared": torch.linspace(-1, 1, 3000), f"own{rank}": torch.randn(4, 500, generator=g).bfloat16(),
            "step": 7}


def worker_async_save(rank: int, world: int, folder: str) -> None:
    import torch.distributed.checkpoint as dcp

    from strata.checkpoint.dcp import storage_reader, storage_writer

    saved = state(rank)
    future = dcp.async_save(saved, storage_writer=storage_writer(folder))
    saved[f"own{rank}"].zero_()  # torch staged its copy before async_save returned
    future.result()
    dist.barrier()
    back = {"shared": torch.zeros(3000), f"own{rank}": torch.zeros(4, 500, dtype=torch.bfloat16), "step": 0}
    dcp.load(back, storage_reader=storage_reader(folder))
    want = state(rank)
    assert torch.equal(back["shared"], want["shared"]) and back["step"] == 7
    assert torch.equal(back[f"own{rank}"], want[f"own{rank}"])


def test_async_save_on_two_ranks(tmp_path):
    spawn(worker_async_save, 2, tmp_path, str(tmp_path / "ckpt"))
    assert any(p.suffix == ".distcp" for p in (tmp_path / "ckpt").iterdir())
