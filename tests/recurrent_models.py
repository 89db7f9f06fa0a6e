"""Small unbounded language models for the tests: a GRU that keeps the context
contract, and two that break it in the ways the authors' kit must catch."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class TinyGRU(nn.Module):
    """Embedding, GRU, head: a state of (n_layer, B, hidden) carried forward."""

    context_kind = "unbounded"

    def __init__(self, vocab_size: int = 48, context_length: int = 8, d_model: int = 16, hidden: int = 24,
                 n_layer: int = 1):
        super().__init__()
        self.context_length = context_length
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, hidden, n_layer, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def step(self, idx, state=None):
        out, state = self.gru(self.embedding(idx), state)
        return self.head(out), state

    def forward(self, idx, targets=None):
        logits, _ = self.step(idx, None)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def attention_maps(self, idx):
        return []


def tiny_gru_parameters(vocab_size: int, d_model: int, hidden: int, n_layer: int = 1) -> int:
    """TinyGRU's parameter count by the formula: embedding, each layer's three gates (weights and two biases), head."""
    layers = sum(3 * ((d_model if i == 0 else hidden) * hidden + hidden * hidden + 2 * hidden) for i in range(n_layer))
    return vocab_size * d_model + layers + (hidden + 1) * vocab_size


class ForgetfulGRU(TinyGRU):
    """Drops the state it is given: chunks read apart no longer match one call."""

    def step(self, idx, state=None):
        return super().step(idx, None)


class GrowingMemory(TinyGRU):
    """Carries every token it has seen as its state: the state grows with the text."""

    def step(self, idx, state=None):
        seen = idx if state is None else torch.cat((state[1], idx), dim=1)
        logits, hidden = super().step(idx, None if state is None else state[0])
        return logits, (hidden, seen)
