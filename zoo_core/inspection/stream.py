"""Where a network's residual stream and heads are, by hook point name, and how to read logits off the stream.

Any network whose blocks declare ``blocks.{i}.resid_pre`` / ``blocks.{i}.resid_post``
(every block built on the zoo's, or a third party's that names its points so)
and that ends in ``final_norm`` then ``lm_head`` can be read this way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..errors import ZooError
from ..plugin_api.hook_points import hook_point_names, run_with_cache
from ..plugin_api.protocols import CappedLogits, Inspectable, implements


@dataclass(frozen=True)
class StreamPoint:
    label: str  # "embeddings", "block 0", ...
    name: str  # the hook point holding the stream there


def _blocks_with(names: list[str], point: str) -> list[int]:
    pattern = re.compile(rf"blocks\.(\d+)\.{re.escape(point)}$")
    return sorted(int(m.group(1)) for m in map(pattern.match, names) if m)


def residual_stream(model) -> list[StreamPoint]:
    """The residual stream before the first block and after each block, in order."""
    names = hook_point_names(model.network)
    if not names:
        raise ZooError(f"'{model.name}' ({model.card.architecture}) declares no hook points to inspect")
    after = _blocks_with(names, "resid_post")
    if not after or "blocks.0.resid_pre" not in names:
        raise ZooError(
            f"'{model.name}' ({model.card.architecture}) has no residual stream of blocks to read "
            "(no blocks.{i}.resid_pre / resid_post hook points)"
        )
    return [StreamPoint("embeddings", "blocks.0.resid_pre")] + [
        StreamPoint(f"block {i}", f"blocks.{i}.resid_post") for i in after
    ]


def read_logits(model, stream: torch.Tensor) -> torch.Tensor:
    """Logits read from residual-stream activations (..., C) through the model's own
    final norm and vocabulary head (and its logit soft-cap, where it has one)."""
    network = model.network
    if not implements(network, Inspectable):
        raise ZooError(f"'{model.name}' has no final_norm and lm_head to read its residual stream through")
    logits = network.lm_head(network.final_norm(stream))
    return network.cap_logits(logits) if implements(network, CappedLogits) else logits


def head_counts(model) -> list[int]:
    """Attention heads per layer, from the shapes at ``blocks.{i}.attention.heads`` (B, T, H, D)."""
    names = hook_point_names(model.network)
    layers = _blocks_with(names, "attention.heads")
    if not layers:
        raise ZooError(f"'{model.name}' ({model.card.architecture}) has no attention heads to ablate")
    one_token = torch.zeros(1, 1, dtype=torch.long, device=model.device)
    with torch.no_grad():
        _, cache = run_with_cache(model.network, one_token, [f"blocks.{i}.attention.heads" for i in layers])
    return [cache[f"blocks.{i}.attention.heads"].shape[2] for i in layers]


def token_labels(model, ids: torch.Tensor) -> list[str]:
    """Each token of a (1, T) batch as short printable text, for tables and pictures."""
    return [printable_token(model.tokenizer.decode([i])) for i in ids[0].tolist()]


def printable_token(text: str) -> str:
    """A token as a label: spaces shown as ␣ (most tokens start with one), line breaks and tabs escaped."""
    return text.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t") or "∅"
