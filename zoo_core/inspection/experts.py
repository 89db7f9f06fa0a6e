"""Expert counts: how many of a prompt's tokens each layer's router sent to each expert.

A network with experts names, per layer with a router, two hook points
(``RoutedExperts.routing_points``): the router's softmax over its experts (B, T, E) and
the experts each token went to (B, T, k). One forward reads both; a token counts once for each of its k experts, so a
layer's counts add up to k times the tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..errors import ZooError
from ..plugin_api.hook_points import run_with_cache
from ..plugin_api.protocols import RoutedExperts, implements
from .stream import token_labels


@dataclass
class ExpertCounts:
    tokens: list[str]  # the prompt, token by token
    layers: list[int]  # the layers with experts, shallowest first
    counts: list[list[int]]  # [layer][expert]: the tokens the expert took
    chosen: list[list[list[int]]]  # [layer][position]: the token's experts, most probable first

    def to_dict(self) -> dict:
        return asdict(self)


def expert_counts(model, prompt: str | torch.Tensor) -> ExpertCounts:
    """Per layer with experts, how many of ``prompt``'s tokens each expert took."""
    routers = model.network.routing_points() if implements(model.network, RoutedExperts) else {}
    if not routers:
        raise ZooError(f"'{model.name}' has no experts to count: its feed-forwards are dense")
    layers = sorted(routers)
    ids = model.prompt_ids(prompt)
    with torch.no_grad():
        _, cache = run_with_cache(model.network, ids, [point for i in layers for point in routers[i]])
    counts, chosen = [], []
    for i in layers:
        probabilities, picked = routers[i]
        experts = cache[probabilities].shape[-1]
        picks = cache[picked][0]  # (T, k)
        counts.append(torch.bincount(picks.flatten(), minlength=experts).tolist())
        chosen.append(picks.tolist())
    return ExpertCounts(tokens=token_labels(model, ids), layers=layers, counts=counts, chosen=chosen)
