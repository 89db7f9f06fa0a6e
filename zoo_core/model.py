"""A loaded variant: card, tokenizer and network, sampled with one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .checkpoints import Verification
from .devices import model_device
from .errors import ZooError
from .registry import Variant
from .sampling import sample_tokens


@dataclass
class ZooModel:
    variant: Variant
    tokenizer: Any
    network: torch.nn.Module
    verification: Verification | None = None

    @property
    def card(self):
        return self.variant.card

    @property
    def name(self) -> str:
        return self.variant.name

    def encode_prompt(self, prompt: str) -> list[int]:
        if not prompt:
            raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
        ids = self.tokenizer.encode(prompt)
        if not ids:
            raise ZooError(f"the prompt {prompt!r} encodes to no tokens")
        return ids

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 100,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
    ) -> str:
        """The prompt followed by ``max_new_tokens`` sampled tokens, as text."""
        ids = torch.tensor([self.encode_prompt(prompt)], dtype=torch.long, device=self.device)
        generator = torch.Generator().manual_seed(seed)  # on the CPU: a seed means the same draws on every device
        out = sample_tokens(self.network, ids, max_new_tokens, temperature, top_k, generator)
        return self.tokenizer.decode(out[0].tolist())

    @property
    def device(self) -> torch.device:
        return model_device(self.network)

    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> "ZooModel":
        """Move (and cast) the network, e.g. ``model.to("cuda", "bfloat16")``; returns the model."""
        from .devices import place, resolve_device, resolve_dtype

        target = device if isinstance(device, torch.device) else resolve_device(device) if device else self.device
        if isinstance(dtype, str) or dtype is None:
            dtype = resolve_dtype(dtype, target) if dtype else None
        place(self.network, target, dtype)
        return self

    def parameters(self) -> int:
        return sum(p.numel() for p in self.network.parameters())
