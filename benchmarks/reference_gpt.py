"""The reference the zoo's GPT is measured against: a minimal, independent GPT.

Written for these benchmarks (not copied from anywhere) with the design
choices nanoGPT's `model.py` is known for: one fused QKV projection,
`scaled_dot_product_attention`, GELU MLP of 4x width, no biases, LayerNorm
without bias, tied input/output embeddings, uncached `generate` that crops to
the window. It is what a careful hand-written GPT costs on this machine.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width, bias=False)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.norm2 = nn.LayerNorm(width, bias=False)
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(4 * width, width, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.out(y)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class ReferenceGPT(nn.Module):
    def __init__(self, vocab_size: int, context_length: int, width: int, layers: int, heads: int):
        super().__init__()
        self.context_length = context_length
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(context_length, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width, bias=False)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.head.weight = self.tokens.weight  # tied

    def forward(self, idx, targets=None):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, new_tokens: int, generator=None):
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.context_length :])
            probabilities = torch.softmax(logits[:, -1], dim=-1)
            idx = torch.cat((idx, torch.multinomial(probabilities, 1, generator=generator)), dim=1)
        return idx


def as_nanogpt_module():
    """The stand-in behind the interface the benchmarks use from nanoGPT's model.py
    (`GPTConfig`, `GPT(config)`, `configure_optimizers`), for when that file is absent."""
    import types
    from dataclasses import dataclass

    @dataclass
    class GPTConfig:
        block_size: int
        vocab_size: int
        n_layer: int
        n_head: int
        n_embd: int
        dropout: float = 0.0
        bias: bool = False

    class GPT(ReferenceGPT):
        def __init__(self, config):
            super().__init__(config.vocab_size, config.block_size, config.n_embd, config.n_layer, config.n_head)

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            decay = [p for p in self.parameters() if p.dim() >= 2]
            no_decay = [p for p in self.parameters() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    return types.SimpleNamespace(GPTConfig=GPTConfig, GPT=GPT)
