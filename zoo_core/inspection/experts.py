"""Expert counts: how many of a prompt's tokens each layer's router sent to each expert.

A mixture-of-experts feed-forward declares two hook points (plugins/blocks/experts.py):
``blocks.{i}.feed_forward.probabilities`` (B, T, E), the router's softmax over its
experts, and ``blocks.{i}.feed_forward.chosen`` (B, T, k), the experts each token went
to. One forward reads both; a token counts once for each of its k experts, so a
layer's counts add up to k times the tokens.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch

from ..errors import ZooError
from ..plugin_api.hook_points import hook_point_names, run_with_cache
from .stream import token_labels

CHOSEN = re.compile(r"blocks\.(\d+)\.feed_forward\.chosen$")


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
    names = hook_point_names(model.network)
    layers = sorted(int(found.group(1)) for found in map(CHOSEN.match, names) if found)
    if not layers:
        raise ZooError(
            f"'{model.name}' has no experts to count (no blocks.{{i}}.feed_forward.chosen hook points: "
            "its feed-forwards are dense)"
        )
    ids = model.prompt_ids(prompt)
    points = [f"blocks.{i}.feed_forward.{what}" for i in layers for what in ("probabilities", "chosen")]
    with torch.no_grad():
        _, cache = run_with_cache(model.network, ids, points)
    counts, chosen = [], []
    for i in layers:
        experts = cache[f"blocks.{i}.feed_forward.probabilities"].shape[-1]
        picks = cache[f"blocks.{i}.feed_forward.chosen"][0]  # (T, k)
        counts.append(torch.bincount(picks.flatten(), minlength=experts).tolist())
        chosen.append(picks.tolist())
    return ExpertCounts(tokens=token_labels(model, ids), layers=layers, counts=counts, chosen=chosen)
