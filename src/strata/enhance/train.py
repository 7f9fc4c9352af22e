"""Online training of the enhancement network with PyTorch (NeurLZ, arXiv:2409.05785, sec. 3.2).

At compression time, on the decoded data the decoder will see: random patches of the slices
(inputs: :func:`strata.enhance.network.features`; targets: the compression error in units of
the bound, so in [-1, 1]), mean squared error over the valid points of each patch's interior
(the points whose receptive field lies inside the patch), Adam with a cosine-annealed step
size. The cost is ``steps x batch_points`` point visits. Only the weights leave this module;
inference runs in :mod:`strata.enhance.network`.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..errors import MissingDependencyError
from . import network


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError("strata.enhance trains its network with PyTorch: "
                                     "pip install 'strata[torch]'") from exc
    return torch


@contextmanager
def _threads(torch):
    """torch on one thread: a step on one patch runs about as fast on two (measured: 1.9 vs
    1.8 ms), and torch's spinning thread pool slows down badly when other work shares the
    cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _model(torch, channels: int, width: int):
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(channels, width, 3, padding=1)
            self.c2 = nn.Conv2d(width, width, 3, padding=1)
            self.c3 = nn.Conv2d(width, width, 3, padding=1)
            self.c4 = nn.Conv2d(width, 1, 3, padding=1)

        def forward(self, v):
            h = torch.relu(self.c1(v))
            h = h + torch.relu(self.c3(torch.relu(self.c2(h))))
            return self.c4(h)

    return Net()


def train(feats: np.ndarray, target: np.ndarray, valid: np.ndarray, width: int, steps: int, options,
          progress=None) -> np.ndarray:
    """Train the network; returns its parameters, float32 flat (:func:`network.unpack` order).

    Args:
        feats: float32 ``(D, C, H, W)`` input channels.
        target: float32 ``(D, H, W)``, the error of the plain decode in units of the bound.
        valid: bool ``(D, H, W)``, the points the loss counts.
        width: hidden channels; steps: optimizer steps.
        options: :class:`strata.enhance.EnhanceOptions` (batch points, patch, learning rate,
            slice share, seed).
        progress: a tqdm-like bar (``update(n)``) or None.

    Raises:
        MissingDependencyError: PyTorch is not installed.
    """
    torch = _torch()
    depth, channels, height, cols = feats.shape
    rng = np.random.default_rng(options.seed)
    n_slices = max(1, round(options.slice_share * depth))
    slices = np.sort(rng.choice(depth, n_slices, replace=False))
    ph, pw = min(options.patch, height), min(options.patch, cols)
    per_batch = max(1, options.batch_points // (ph * pw))
    trim_h = network.N_CONV if ph > 4 * network.N_CONV else 0
    trim_w = network.N_CONV if pw > 4 * network.N_CONV else 0
    f_t = torch.from_numpy(feats)
    t_t = torch.from_numpy(target)
    v_t = torch.from_numpy(valid.astype(np.float32))
    with _threads(torch), torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.seed)
        net = _model(torch, channels, width)
        opt = torch.optim.Adam(net.parameters(), lr=options.learning_rate)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        for _ in range(steps):
            d = slices[rng.integers(0, n_slices, per_batch)]
            i = rng.integers(0, height - ph + 1, per_batch)
            j = rng.integers(0, cols - pw + 1, per_batch)
            inp = torch.stack([f_t[a, :, b:b + ph, c:c + pw] for a, b, c in zip(d, i, j)])
            sl = (slice(trim_h, ph - trim_h), slice(trim_w, pw - trim_w))
            tgt = torch.stack([t_t[a, b:b + ph, c:c + pw][sl] for a, b, c in zip(d, i, j)])
            wgt = torch.stack([v_t[a, b:b + ph, c:c + pw][sl] for a, b, c in zip(d, i, j)])
            pred = net(inp)[:, 0][(slice(None), *sl)]
            loss = torch.sum(wgt * (pred - tgt) ** 2) / torch.clamp(torch.sum(wgt), min=1.0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if progress is not None:
                progress.update(1)
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy().astype(np.float32)
