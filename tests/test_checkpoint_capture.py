"""Lazy capture in AsyncCheckpointer (DataStates-LLM): ``save()`` returns while the copies to
host memory run, the optimizer hook of ``guard()`` waits for them, and ``debug`` finds a tensor
changed during a capture. CPU tensors here, the copies held back by a gate so that a capture is
still running when the test needs it to be; the same on a GPU is in ``test_checkpoint_cuda.py``."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from strata import checkpoint as ck
from strata.checkpoint import capture
from strata.errors import InvalidInputError, StateChangedError

torch = pytest.importorskip("torch")


@pytest.fixture
def gate(monkeypatch):
    """Hold every CPU capture's copies until ``gate.set()``."""
    g = threading.Event()
    copy = capture._copy_cpu

    def held(pairs):
        g.wait(10)
        copy(pairs)

    monkeypatch.setattr(capture, "_copy_cpu", held)
    return g


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.randn(8, 64)).square().sum().backward()
    return model, opt


def test_lazy_save_returns_before_the_copies_and_the_hook_waits_for_them(tmp_path, gate):
    model, opt = model_and_optimizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with ck.AsyncCheckpointer(lazy=True, workers=1) as saver:
        handle = saver.guard(opt)
        saver.save(model.state_dict(), tmp_path / "a.strata")  # returns with the copies held
        assert saver.capturing
        stepped = threading.Event()
        stepper = threading.Thread(target=lambda: (opt.step(), stepped.set()))
        stepper.start()
        assert not stepped.wait(0.3)  # the step waits in the hook for the capture
        gate.set()
        stepper.join(10)
        assert stepped.is_set() and not saver.capturing
        assert not torch.equal(model.weight, before["weight"])  # the step did change the state
        handle.remove()
    back = ck.load(tmp_path / "a.strata")
    assert all(torch.equal(back[k], before[k]) for k in before)  # the snapshot of save time


def test_eager_save_has_copied_when_it_returns(tmp_path, gate):
    model, _ = model_and_optimizer()
    gate.set()
    with ck.AsyncCheckpointer(workers=1) as saver:
        saver.save(model.state_dict(), tmp_path / "e.strata")
        assert not saver.capturing


def test_debug_finds_a_tensor_changed_during_the_capture(tmp_path, gate):
    model, _ = model_and_optimizer()
    saver = ck.AsyncCheckpointer(lazy=True, debug=True, workers=1)
    saver.save(model.state_dict(), tmp_path / "d.strata")
    with torch.no_grad():
        model.bias.add_(1.0)  # against the contract: the capture is still running
    gate.set()
    with pytest.raises(StateChangedError):
        saver.wait_for_capture()
    with pytest.raises(StateChangedError):
        saver.wait()  # (the writer found it too, and wrote nothing)
    assert not (tmp_path / "d.strata").exists()
    saver.save(model.state_dict(), tmp_path / "d.strata")  # the checkpointer goes on
    saver.close()
    assert torch.equal(ck.load(tmp_path / "d.strata")["bias"], model.bias)


def test_debug_is_quiet_when_the_contract_is_kept(tmp_path, gate):
    model, opt = model_and_optimizer()
    with ck.AsyncCheckpointer(lazy=True, debug=True, workers=1) as saver:
        saver.guard(opt)
        saver.save({"model": model.state_dict(), "step": 1}, tmp_path / "k.strata")
        gate.set()
        opt.step()  # the hook waited and checked
        saver.save({"model": model.state_dict(), "step": 2}, tmp_path / "k2.strata")
    assert torch.equal(ck.load(tmp_path / "k2.strata")["model"]["weight"], model.weight)


def test_guard_takes_a_wrapped_optimizer_and_refuses_other_objects(gate):
    _, opt = model_and_optimizer()

    class Wrapper:  # strata.comm.ShardedOptimizer keeps its torch optimizer as ``optimizer``
        optimizer = opt

    gate.set()
    with ck.AsyncCheckpointer(lazy=True) as saver:
        saver.guard(Wrapper()).remove()
        with pytest.raises(InvalidInputError):
            saver.guard(object())


def test_host_buffers_are_recycled_and_bounded():
    bufs = capture.HostBuffers(keep=2)
    a, b, c = (bufs.get(1000) for _ in range(3))
    bufs.put([a, b, c])  # one more than kept
    again = [bufs.get(1000) for _ in range(3)]
    assert sum(any(x is y for y in (a, b, c)) for x in again) == 2
    assert isinstance(bufs.get(10), np.ndarray) and bufs.get(10).size == 10
    pinned = bufs.get(1 << 16, pinned=True)  # (ordinary memory where pinning is refused: no CUDA here)
    pinned[:] = 7
    assert pinned.size == 1 << 16 and pinned.dtype == np.uint8 and (pinned == 7).all()


def test_wait_for_capture_waits_for_every_save_so_far(tmp_path, gate):
    model, _ = model_and_optimizer()
    first = {k: v.clone() for k, v in model.state_dict().items()}
    with ck.AsyncCheckpointer(lazy=True, workers=1, max_pending=3) as saver:
        saver.save(model.state_dict(), tmp_path / "1.strata")
        saver.save({"again": model.state_dict()}, tmp_path / "2.strata")  # (its own capture thread)
        assert saver.capturing
        gate.set()
        saver.wait_for_capture()
        assert not saver.capturing
        with torch.no_grad():
            model.weight.zero_()
    assert all(torch.equal(ck.load(tmp_path / "1.strata")[k], first[k]) for k in first)
    assert torch.equal(ck.load(tmp_path / "2.strata")["again"]["weight"], first["weight"])


def test_reserved_buffers_take_the_first_saves(tmp_path, gate):
    model, _ = model_and_optimizer()
    gate.set()
    with ck.AsyncCheckpointer(workers=1, max_pending=2) as saver:
        saver.reserve(model.state_dict())
        reserved = {a.ctypes.data for free in saver._buffers._free.values() for a in free}
        assert len(reserved) == 3  # (max_pending + 1 buffers of the one float32 segment)
        for i in range(3):
            saver.save(model.state_dict(), tmp_path / f"r{i}.strata")
            saver.wait()
            assert saver._prev[1].segments[0].ctypes.data in reserved  # no new buffer
    assert torch.equal(ck.load(tmp_path / "r2.strata")["weight"], model.weight)
