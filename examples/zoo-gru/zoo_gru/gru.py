"""A GRU language model: embedding, a stack of GRU layers, a linear head.

Unlike a transformer it has no window: what it knows of the text so far is
its hidden state, (n_layer, B, hidden). ``context_length`` is only the
window it is trained on (truncated backpropagation through time) and the
chunk in which the zoo feeds it a long text.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class GRULanguageModel(nn.Module):
    context_kind = "unbounded"  # a state carried forward, not a window (zoo_core.plugin_api.protocols)

    def __init__(self, vocab_size: int, context_length: int, d_model: int, hidden: int, n_layer: int = 1,
                 dropout: float = 0.0):
        super().__init__()
        self.context_length = context_length
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, hidden, n_layer, batch_first=True, dropout=dropout if n_layer > 1 else 0.0)
        self.head = nn.Linear(hidden, vocab_size)

    def step(self, idx: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, V) for ``idx`` (B, T) read after ``state`` (None: the
        start of the text), and the state after it, (n_layer, B, hidden)."""
        out, state = self.gru(self.embedding(idx), state)
        return self.head(out), state

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        logits, _ = self.step(idx, None)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        return logits, loss

    def attention_maps(self, idx: torch.Tensor) -> list:
        return []  # no attention to show


def build_gru(config: dict, components: dict) -> GRULanguageModel:
    """The card's config (plus context_length and vocab_size): d_model, hidden, n_layer, dropout."""
    known = ("vocab_size", "context_length", "d_model", "hidden", "n_layer", "dropout")
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise ValueError(f"unknown config keys for 'gru': {', '.join(unknown)} (it takes {', '.join(known)})")
    return GRULanguageModel(**config)
