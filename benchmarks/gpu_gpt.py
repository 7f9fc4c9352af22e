"""The GPT the GPU benchmarks train (``checkpoint_gpu.py``, ``sdp4bit_gpu_step.py``): a decoder of ``torch.nn``
transformer layers, bf16, about 330 M parameters (width 1024, 24 layers, vocabulary 50304), or a small one for
``--smoke`` runs on the CPU; random tokens (the speed of a step does not depend on the text)."""
from __future__ import annotations

import sys

import torch


def device_for(smoke: bool, script: str) -> torch.device:
    """The CPU for a ``--smoke`` run, else the GPU (exits naming ``script`` when torch sees none)."""
    if smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit(f"{script} needs a CUDA GPU (or --smoke)")
    return torch.device("cuda")


def gpt(device, smoke: bool = False):
    """``(model, vocab)``: a bf16 ``Sequential(embedding, encoder, head)`` on ``device``."""
    d, layers, vocab = (128, 2, 1000) if smoke else (1024, 24, 50304)
    layer = torch.nn.TransformerEncoderLayer(d, d // 64, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.TransformerEncoder(layer, layers),
                                torch.nn.Linear(d, vocab))
    return model.to(device=device, dtype=torch.bfloat16), vocab


def loss_fn(model, vocab: int, batch: int, seq: int, device, generator: torch.Generator):
    """A closure: the next-token cross-entropy of a random batch of ``batch`` sequences of ``seq`` tokens
    (causal mask), the loss in fp32."""
    mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device=device)

    def loss():
        x = torch.randint(0, vocab, (batch, seq + 1), device=device, generator=generator)
        emb, body, head = model
        logits = head(body(emb(x[:, :-1]), mask=mask, is_causal=True))
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
    return loss
