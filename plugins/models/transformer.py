"""The transformer language-model wrapper of seed 000.

token ids -> token embedding (+ positions, for residual encodings) -> blocks
-> final LayerNorm -> vocabulary projection -> logits. The position encoding and
the block are looked up by name among the registered plugins, so a third-party
encoding or block works in any variant without touching this file.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.errors import ZooError

from .config import call_with_config


class TransformerLanguageModel(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_layer: int,
        n_head: int,
        *,
        components,
        d_ff: int | None = None,
        positions: str = "learned",
        block: str = "pre-norm",
        norm: str = "layernorm",
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if n_layer < 1:
            raise ZooError("a transformer needs at least one layer")
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = components["positions"].create(positions, d_model=d_model, n_head=n_head, context_length=context_length)
        self.blocks = nn.ModuleList(
            components["blocks"].create(block, d_model=d_model, n_head=n_head, d_ff=d_ff or 4 * d_model, dropout=dropout, norm=norm)
            for _ in range(n_layer)
        )
        self.final_norm = nn.RMSNorm(d_model) if norm == "rmsnorm" else nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=bias)

    def _run(self, idx: torch.Tensor, need_weights: bool):
        B, T = idx.shape
        if T > self.context_length:
            raise ZooError(f"{T} tokens exceed the context window of {self.context_length}; crop the input")
        positions = torch.arange(T, device=idx.device)
        x = self.positions.embed(self.token_embedding(idx), positions)  # (B, T, C)
        maps = []
        for block in self.blocks:
            x, weights = block(x, positions, self.positions, need_weights)
            maps.append(weights)
        return self.lm_head(self.final_norm(x)), maps  # (B, T, V)

    def forward(self, idx, targets=None):
        logits, _ = self._run(idx, need_weights=False)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def attention_maps(self, idx):
        return self._run(idx, need_weights=True)[1]


def build_transformer(config, components):
    return call_with_config(TransformerLanguageModel, config, "transformer", components=components)
