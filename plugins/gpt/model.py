"""Seed 004's GPT: the transformer wrapper with GPT-style defaults and initialisation.

token + learned position embeddings -> pre-norm blocks with dropout -> final
LayerNorm -> vocabulary head, loss in forward when targets are given. The
blocks and positions are the registered components, so `positions = "rope"`
and `norm = "rmsnorm"` give seed 004's "next step" with nothing else changed.
"""

from __future__ import annotations

import math

from torch import nn

from ..models.transformer import TransformerLanguageModel

# Seed 004's settings where a card says nothing.
GPT_DEFAULTS = {"positions": "learned", "block": "pre-norm", "dropout": 0.2}


class GPTLanguageModel(TransformerLanguageModel):
    architecture = "gpt"
    defaults = GPT_DEFAULTS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.apply(self._init_weights)
        # GPT-2's scaled initialisation: each block adds two projections to the
        # residual stream, so their std shrinks with depth to keep it in scale.
        residual_std = 0.02 / math.sqrt(2 * len(self.blocks))
        for name, parameter in self.named_parameters():
            if name.endswith(("attention.proj.weight", "feed_forward.down.weight")):
                nn.init.normal_(parameter, mean=0.0, std=residual_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)


def build_gpt(config, components):
    return GPTLanguageModel(components=components, **config)
