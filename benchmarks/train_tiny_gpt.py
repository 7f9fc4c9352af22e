"""Train a tiny character-level GPT on Tiny Shakespeare (CPU, PyTorch) and save training snapshots.

The snapshots are real LLM training state for benchmarking lossless checkpoint compression: every
``--save-every`` steps (and at the last step) two files are written to ``--out``:

* ``step_{step:06d}.fp32.safetensors`` - the fp32 master weights (``model.<param name>``) and the AdamW
  moment tensors of every parameter (``optim.exp_avg.<param name>``, ``optim.exp_avg_sq.<param name>``);
* ``step_{step:06d}.bf16.safetensors`` - a bf16 copy of the model weights only (``model.<param name>``),
  made with ``tensor.to(torch.bfloat16)`` (round to nearest even), as bf16 checkpoints usually are.

``train_log.json`` in the same folder records the config, the parameter count, train/val loss at each logged
step, the wall time and the list of snapshot files. All files are written atomically (temp name + os.replace).
Each safetensors file carries one metadata key, ``snapshot``: sorted JSON with step, seed, model config, dtype and
content, so that the files are byte-for-byte reproducible from the seed.

The model is a standard small decoder-only transformer: token + learned position embeddings, pre-LayerNorm
blocks (causal self-attention via ``scaled_dot_product_attention`` and a 4x GELU MLP), a final LayerNorm and an
*untied* linear LM head (untied so that every parameter is its own tensor: no shared storage in the
snapshots, and one independent gradient per parameter for data-parallel experiments). With the defaults it has
about 3.2 M parameters.

The building blocks (``GPTConfig``, ``GPT``, ``load_corpus``, ``get_batch``, ``estimate_loss``,
``configure_optimizer``, ``save_snapshot``) import without side effects (with the repository root on
sys.path), e.g. for data-parallel experiments::

    from benchmarks.train_tiny_gpt import GPT, GPTConfig, get_batch, load_corpus

Run (from the repository root; about 3-5 minutes on 2 CPU cores with the defaults)::

    .venv/bin/python benchmarks/train_tiny_gpt.py
    .venv/bin/python benchmarks/train_tiny_gpt.py --steps 600 --save-every 50 --out /tmp/snaps

The run is deterministic given ``--seed`` and ``--threads`` (weights are initialised after
``torch.manual_seed(seed)``, training batches come from a ``torch.Generator`` seeded with ``seed`` and
evaluation batches from a separate fixed generator, so evaluating does not change the training data order).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from strata.atomic import atomic_write

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "text" / "tinyshakespeare.txt"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "tiny_gpt_snapshots"


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd={cfg.n_embd} is not a multiple of n_head={cfg.n_head}")
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Small decoder-only transformer with an untied LM head.

    ``forward(idx, targets=None)`` takes token ids of shape (B, T) with T <= block_size and returns
    ``(logits, loss)``: logits of shape (B, T, vocab_size) and the mean cross-entropy against ``targets``
    (same shape as ``idx``), or ``None`` when no targets are given.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2 style: scale the residual output projections by 1/sqrt(2 * n_layer).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.config.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def configure_optimizer(
    model: nn.Module, lr: float, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95)
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices/embeddings (dim >= 2) only, not on biases and LayerNorm parameters."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------


def load_corpus(path: str | os.PathLike, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Read a text file as characters; return (train_ids, val_ids, vocab) with a contiguous 90/10 split.

    ``vocab`` is the sorted list of distinct characters; ids are int64 indices into it.
    """
    text = Path(path).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = int(train_fraction * len(ids))
    return ids[:n], ids[n:], vocab


def get_batch(
    ids: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``batch_size`` random windows of ``block_size`` tokens; y is x shifted by one token.

    The window starts come from ``generator`` only, so the data order is reproducible from its seed.
    """
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = ids[starts[:, None] + offsets]
    y = ids[starts[:, None] + offsets + 1]
    return x, y


@torch.no_grad()
def estimate_loss(
    model: nn.Module, ids: torch.Tensor, batch_size: int, block_size: int, iters: int, generator: torch.Generator
) -> float:
    """Mean loss of ``model`` over ``iters`` random batches of ``ids`` (model put in eval mode, then restored)."""
    was_training = model.training
    model.eval()
    losses = []
    for _ in range(iters):
        x, y = get_batch(ids, batch_size, block_size, generator)
        _, loss = model(x, y)
        losses.append(loss.item())
    model.train(was_training)
    return sum(losses) / len(losses)


# ----------------------------------------------------------------------------------------------------------------
# Snapshots
# ----------------------------------------------------------------------------------------------------------------


def snapshot_tensors(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """fp32 weights as ``model.<name>`` plus AdamW moments as ``optim.exp_avg.<name>`` / ``optim.exp_avg_sq.<name>``."""
    tensors: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        tensors[f"model.{name}"] = p.detach().contiguous().clone()
    for name, p in model.named_parameters():
        state = optimizer.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            t = state.get(key)
            if t is None:  # before the first step: moments are zero
                t = torch.zeros_like(p)
            tensors[f"optim.{key}.{name}"] = t.detach().contiguous().clone()
    return tensors


def _atomic_save_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        os.chmod(tmp, 0o644)  # safetensors creates files 0600; make snapshots readable like other results
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_snapshot(
    model: nn.Module, optimizer: torch.optim.Optimizer, step: int, out_dir: Path, metadata: dict | None = None
) -> list[str]:
    """Write ``step_{step:06d}.fp32.safetensors`` (weights + Adam moments) and ``.bf16.safetensors`` (weights).

    The safetensors metadata has one key, ``snapshot``: a sorted JSON object with the step, dtype,
    content and the entries of ``metadata``.
    Returns the two file names (relative to ``out_dir``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = snapshot_tensors(model, optimizer)
    bf16 = {k: v.to(torch.bfloat16).contiguous() for k, v in fp32.items() if k.startswith("model.")}
    names = [f"step_{step:06d}.fp32.safetensors", f"step_{step:06d}.bf16.safetensors"]
    for name, tensors, extra in ((names[0], fp32, {"dtype": "float32", "content": "weights+adam"}),
                                 (names[1], bf16, {"dtype": "bfloat16", "content": "weights"})):
        # One metadata key holding sorted JSON: safetensors writes several keys in a random order, and a single
        # key keeps the files byte-for-byte reproducible from the seed.
        meta = {"snapshot": json.dumps({"step": step, **(metadata or {}), **extra}, sort_keys=True)}
        _atomic_save_safetensors(tensors, out_dir / name, meta)
    return names


# ----------------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="character-level text corpus (default: %(default)s)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="snapshot folder (default: %(default)s)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: %(default)s)")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1234, help="seed for init and data order (default: %(default)s)")
    p.add_argument("--save-every", type=int, default=25, help="snapshot interval in steps (default: %(default)s)")
    p.add_argument("--log-every", type=int, default=25, help="train/val loss interval (default: %(default)s)")
    p.add_argument("--eval-iters", type=int, default=10, help="batches per loss estimate (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default: %(default)s)")
    p.add_argument("--block-size", type=int, default=GPTConfig.block_size, help="context length (default: %(default)s)")
    p.add_argument("--n-layer", type=int, default=GPTConfig.n_layer, help="(default: %(default)s)")
    p.add_argument("--n-head", type=int, default=GPTConfig.n_head, help="(default: %(default)s)")
    p.add_argument("--n-embd", type=int, default=GPTConfig.n_embd, help="(default: %(default)s)")
    p.add_argument("--dropout", type=float, default=GPTConfig.dropout, help="(default: %(default)s)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)  # now, not after a long run
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train_ids, val_ids, vocab = load_corpus(args.data)
    cfg = GPTConfig(
        vocab_size=len(vocab),
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        dropout=args.dropout,
    )
    model = GPT(cfg)
    n_params = model.num_params()
    print(f"corpus: {args.data} ({len(train_ids)} train / {len(val_ids)} val chars, vocab {len(vocab)})")
    print(f"model: {cfg}")
    print(f"parameters: {n_params:,}")
    optimizer = configure_optimizer(model, lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))

    train_gen = torch.Generator().manual_seed(args.seed)

    def evaluate() -> tuple[float, float]:
        # Fresh fixed-seed generators: the same eval batches at every logged step, independent of train_gen.
        tr = estimate_loss(model, train_ids, args.batch_size, cfg.block_size, args.eval_iters,
                           torch.Generator().manual_seed(args.seed + 1))
        va = estimate_loss(model, val_ids, args.batch_size, cfg.block_size, args.eval_iters,
                           torch.Generator().manual_seed(args.seed + 2))
        return tr, va

    out_dir: Path = args.out
    meta = {"seed": args.seed, "config": asdict(cfg)}
    history: list[dict] = []
    snapshots: list[str] = []

    tr, va = evaluate()
    history.append({"step": 0, "train_loss": tr, "val_loss": va, "elapsed_s": 0.0})
    print(f"step {0:5d}  train {tr:.4f}  val {va:.4f}")

    model.train()
    t0 = time.perf_counter()
    train_time = 0.0
    for step in range(1, args.steps + 1):
        ts = time.perf_counter()
        x, y = get_batch(train_ids, args.batch_size, cfg.block_size, train_gen)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        train_time += time.perf_counter() - ts

        last = step == args.steps
        if step % args.log_every == 0 or last:
            tr, va = evaluate()
            elapsed = time.perf_counter() - t0
            history.append({"step": step, "train_loss": tr, "val_loss": va, "batch_loss": loss.item(),
                            "elapsed_s": round(elapsed, 3)})
            print(f"step {step:5d}  train {tr:.4f}  val {va:.4f}  ({elapsed:.1f}s, "
                  f"{1000 * train_time / step:.0f} ms/step)")
        if step % args.save_every == 0 or last:
            snapshots += save_snapshot(model, optimizer, step, out_dir, meta)

    wall = time.perf_counter() - t0
    log = {
        "config": asdict(cfg),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "optimizer": {"type": "AdamW", "lr": args.lr, "betas": [0.9, 0.95], "weight_decay": args.weight_decay,
                      "weight_decay_on": "parameters with dim >= 2"},
        "param_count": n_params,
        "vocab": "".join(vocab),
        "history": history,
        "wall_time_s": round(wall, 3),
        "train_time_s": round(train_time, 3),
        "snapshots": snapshots,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, threads={args.threads}",
    }
    atomic_write(out_dir / "train_log.json", json.dumps(log, indent=2) + "\n")
    print(f"wall time {wall:.1f}s ({train_time:.1f}s in training steps); {len(snapshots)} files in {out_dir}")
    return log


if __name__ == "__main__":
    main()
