"""Low-rank adapters on a network's Linear layers: settings, the adapted layer, attaching and merging.

A ``LoRALinear`` computes ``W x + b + (alpha / rank) · B (A x)``: the base
layer's weight and bias, frozen, plus a product of two small matrices, A
(rank × inputs) and B (outputs × rank). B starts at zero, so an adapted network
computes exactly what its base does until the first update. The layer keeps
the base's ``weight`` and ``bias`` under their own names, so the adapted
network's state dict is the base's plus ``NAME.lora_A`` and ``NAME.lora_B``
for each adapted layer, and those alone are the adapter.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Mapping, cast

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.errors import ZooError, did_you_mean, printable

# The attention's query/key/value projection (one fused layer in the zoo's
# attention) and its output projection, in every block.
DEFAULT_TARGETS = ("*.attention.qkv", "*.attention.proj")
ADAPTER_TENSORS = ("lora_A", "lora_B")


@dataclass(frozen=True)
class LoRASettings:
    rank: int = 8
    alpha: float = 8.0  # the update is scaled by alpha / rank
    targets: tuple[str, ...] = DEFAULT_TARGETS  # shell-style patterns of Linear layers' module names
    dropout: float = 0.0  # on the adapter's input, while training

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @classmethod
    def parse(cls, options: Any, where: str, allowed: tuple[str, ...] = ("rank", "alpha", "targets", "dropout")):
        """Settings from a card's table (``recipe.options`` or ``adapter.config``);
        a bad one is one ZooError line naming the entry. ``alpha`` defaults to ``rank``."""
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ZooError(f"{where} must be a table of lora settings ({', '.join(allowed)})")
        unknown = [key for key in options if key not in allowed]
        if unknown:
            shown = printable(str(unknown[0]))
            hint = did_you_mean(str(unknown[0]), allowed)
            raise ZooError(f"{where}.{shown}: lora has no such setting{hint} (its settings: {', '.join(allowed)})")
        rank = options.get("rank", cls.rank)
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise ZooError(f"{where}.rank must be a whole number of at least 1, not {rank!r}")
        alpha = options.get("alpha", rank)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < math.inf:
            raise ZooError(f"{where}.alpha must be a number above 0, not {alpha!r}")
        dropout = options.get("dropout", cls.dropout)
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise ZooError(f"{where}.dropout must be at least 0 and below 1, not {dropout!r}")
        targets = options.get("targets", list(cls.targets))
        if isinstance(targets, str):  # --set options.targets=lm_head: one pattern
            targets = [targets]
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
            raise ZooError(
                f"{where}.targets must be a list of Linear layers' module-name patterns, e.g. "
                f"{list(DEFAULT_TARGETS)}, not {targets!r}"
            )
        return cls(rank, float(alpha), tuple(targets), float(dropout))

    def as_options(self) -> dict[str, Any]:
        """Every setting, as the card's ``recipe.options`` records what a run used."""
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "dropout": self.dropout}

    def adapter_config(self) -> dict[str, Any]:
        """What loading needs to rebuild the adapted layers (the card's ``adapter.config``)."""
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}


class LoRALinear(nn.Module):
    """A Linear layer plus a low-rank update: ``W x + b + scale · B (A x)``.

    ``weight`` and ``bias`` are the base layer's own parameters (not copies);
    ``lora_A`` and ``lora_B`` are new. ``forward`` takes what nn.Linear takes,
    so the attention's and the decoder's calls of ``layer.forward(x)`` work unchanged."""

    in_features: int
    out_features: int
    weight: nn.Parameter
    bias: nn.Parameter | None
    lora_A: nn.Parameter
    lora_B: nn.Parameter

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0, initialise: bool = True):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        self.weight = cast(nn.Parameter, base.weight)  # the base's parameter itself: its state-dict name stays
        self.register_parameter("bias", base.bias)  # may be None
        device, dtype = base.weight.device, base.weight.dtype
        self.lora_A = nn.Parameter(torch.zeros(rank, self.in_features, device=device, dtype=dtype))
        # B starts at zero: until the first update the layer computes exactly the base's.
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, device=device, dtype=dtype))
        if initialise:  # as nn.Linear initialises its weight (and as LoRA's authors do A)
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B)
        return F.linear(x, self.weight, self.bias) + update * self.scale

    def merged(self) -> nn.Linear:
        """A plain Linear layer computing the same (up to float rounding), the update
        folded into this layer's weight, which it shares."""
        with torch.no_grad():
            self.weight.add_((self.lora_B @ self.lora_A).to(self.weight.dtype), alpha=self.scale)
        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        plain.weight = self.weight
        plain.register_parameter("bias", self.bias)
        return plain

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, rank={self.rank}, alpha={self.alpha:g}"


def target_layers(network: nn.Module, settings: LoRASettings, where: str) -> dict[str, nn.Linear | LoRALinear]:
    """The Linear layers (adapted already or not) the settings' patterns name, in
    the network's order; a pattern that names none, or a rank above a layer's
    size, is one ZooError line."""
    linears: dict[str, nn.Linear | LoRALinear] = {
        name: module for name, module in network.named_modules() if name and isinstance(module, (nn.Linear, LoRALinear))
    }
    for pattern in settings.targets:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in linears):
            shown = ", ".join(list(linears)[:6]) + (", ..." if len(linears) > 6 else "")
            raise ZooError(
                f"{where}.targets: '{printable(pattern)}' matches no Linear layer of the network "
                f"(its Linear layers: {shown or 'none'})"
            )
    chosen = {name: m for name, m in linears.items() if any(fnmatch.fnmatchcase(name, p) for p in settings.targets)}
    for name, module in chosen.items():
        smallest = min(module.in_features, module.out_features)
        if settings.rank > smallest:
            raise ZooError(
                f"{where}.rank {settings.rank} is above {name}'s {module.in_features} inputs × "
                f"{module.out_features} outputs: a rank above {smallest} adds nothing there"
            )
    return chosen


def attach(network: nn.Module, settings: LoRASettings, where: str, initialise: bool = True) -> dict[str, LoRALinear]:
    """Adapt the layers the settings name (once: layers adapted already are kept)
    and freeze every other parameter; returns the adapted layers by module name."""
    adapted = {}
    for name, module in target_layers(network, settings, where).items():
        if isinstance(module, LoRALinear):
            if (module.rank, module.alpha) != (settings.rank, settings.alpha):
                raise ZooError(f"{name} is adapted already with rank {module.rank}, alpha {module.alpha:g}")
            adapted[name] = module
            continue
        parent, _, child = name.rpartition(".")
        layer = LoRALinear(module, settings.rank, settings.alpha, settings.dropout, initialise)
        setattr(network.get_submodule(parent) if parent else network, child, layer)
        adapted[name] = layer
    trainable = {id(p) for layer in adapted.values() for p in (layer.lora_A, layer.lora_B)}
    for parameter in network.parameters():
        parameter.requires_grad_(id(parameter) in trainable)
    return adapted


def adapter_tensors(network: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter alone: each adapted layer's A and B, by their state-dict names."""
    return {
        f"{name}.{tensor}": getattr(module, tensor).detach()
        for name, module in network.named_modules()
        if isinstance(module, LoRALinear)
        for tensor in ADAPTER_TENSORS
    }


def merge_into_weights(network: nn.Module) -> None:
    """Fold every adapted layer into its weight and put a plain Linear layer back:
    the network is then shaped exactly as its base (and costs what its base costs)."""
    uses: dict[int, int] = {}
    for _, parameter in network.named_parameters(remove_duplicate=False):
        uses[id(parameter)] = uses.get(id(parameter), 0) + 1
    layers = [(name, m) for name, m in network.named_modules() if isinstance(m, LoRALinear)]
    for name, layer in layers:
        if uses[id(layer.weight)] > 1:  # tied embeddings: merging would change the other user too
            raise ZooError(
                f"cannot merge the adapter of {name}: its weight is shared with another layer; load it unmerged"
            )
    for name, layer in layers:
        parent, _, child = name.rpartition(".")
        setattr(network.get_submodule(parent) if parent else network, child, layer.merged())
