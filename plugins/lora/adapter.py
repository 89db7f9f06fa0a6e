"""The registered adapter ``lora``: applies an adapter variant's A and B tensors to its base's network."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .layers import LoRASettings, attach, merge_into_weights, target_layers

WHERE = "adapter.config"


class LoRAAdapter:
    """Made from a card's ``adapter.config`` (rank, alpha, targets)."""

    def __init__(self, config: Any):
        self.settings = LoRASettings.parse(config, WHERE, allowed=("rank", "alpha", "targets"))

    def tensor_shapes(self, network: nn.Module) -> dict[str, tuple[int, ...]]:
        rank = self.settings.rank
        shapes: dict[str, tuple[int, ...]] = {}
        for name, layer in target_layers(network, self.settings, WHERE).items():
            shapes[f"{name}.lora_A"] = (rank, layer.in_features)
            shapes[f"{name}.lora_B"] = (layer.out_features, rank)
        return shapes

    def apply(self, network: nn.Module, tensors: dict[str, torch.Tensor], merge: bool = False) -> None:
        """Adapt ``network`` with ``tensors`` (checked against `tensor_shapes` by the caller)."""
        layers = attach(network, self.settings, WHERE, initialise=False)  # A and B are overwritten just below
        with torch.no_grad():
            for name, layer in layers.items():
                layer.lora_A.copy_(tensors[f"{name}.lora_A"])
                layer.lora_B.copy_(tensors[f"{name}.lora_B"])
        if merge:
            merge_into_weights(network)
