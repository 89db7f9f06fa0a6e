"""The bigram baseline: the next token depends on the current token only."""

from __future__ import annotations

from torch import nn

from zoo_core.plugin_api.hook_points import HookPoint
from zoo_core.training.losses import cross_entropy

from .config import call_with_config


class BigramLanguageModel(nn.Module):
    """Token embedding -> vocabulary projection, position by position.

    Its embedding and head have the same shapes as the transformer's, so paired
    experiments can start both from identical values. Hook points: ``embed``, ``logits``.
    """

    def __init__(self, vocab_size: int, d_model: int, context_length: int):
        super().__init__()
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.lm_head = nn.Linear(d_model, vocab_size)
        self.embed = HookPoint()
        self.logits = HookPoint()

    def forward(self, idx, targets=None):
        logits = self.logits(self.lm_head(self.embed(self.token_embedding(idx))))  # (B, T, V)
        loss = None if targets is None else cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def attention_maps(self, idx):
        return []


def build_bigram(config, components):
    return call_with_config(BigramLanguageModel, config, "bigram")
