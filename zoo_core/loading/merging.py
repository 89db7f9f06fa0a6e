"""`zoo merge`: an adapter variant folded into its base, kept as a variant of its own.

Loading an adapter variant with ``merge_adapter=True`` already folds the adapter
into the base's weights (for LoRA, W + (alpha / rank)·B·A, as peft's
``merge_and_unload``); merging keeps that network: the whole weights as a
standalone variant in the user's catalogue, which loads, exports and serves
without its base. Its card names the adapter and the base (with their checkpoint
sha256) in its lineage. Before anything is written, the merged network's logits
are checked against the adapter applied on the fly.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..catalogue.cards import VARIANT_NAME, CheckpointRef, ModelCard
from ..errors import ZooError, printable
from ..storage.user_catalogue import add_user_variant
from .api import catalogue, load

# Folding B·A into W changes the order of the sums, not the function: float32
# rounding only (measured on gpt-char-mini's LoRA: about 1e-6).
LOGIT_TOLERANCE = 1e-5


def merge_adapter_variant(name: str, new_name: str) -> tuple[ModelCard, Path, float]:
    """Write ``new_name``: adapter variant ``name`` merged into its base. Returns
    its card, the user registry holding it, and the largest logit difference from
    the adapter applied on the fly."""
    variant = catalogue().get(name)
    adapter = variant.card.adapter
    if adapter is None:
        raise ZooError(
            f"'{printable(name)}' is not an adapter variant (its weights are its own); zoo merge folds an adapter "
            f"(zoo train NEW --from BASE --trainer lora) into its base"
        )
    _check_new_name(new_name)
    on_the_fly = load(name)
    merged = load(name, merge_adapter=True)
    difference = _logit_difference(on_the_fly, merged)
    if difference > LOGIT_TOLERANCE:
        raise ZooError(
            f"'{name}' merged into '{adapter.base}' differs from the adapter applied on the fly by "
            f"{difference:.1e} (> {LOGIT_TOLERANCE}); nothing was written"
        )
    card = merged_card(merged.card, new_name, sum(p.numel() for p in merged.network.parameters()))
    registry = add_user_variant(card, merged.network.state_dict(), variant.tokenizer_path)
    return catalogue().get(new_name).card, registry, difference


def merged_card(card: ModelCard, new_name: str, parameters: int) -> ModelCard:
    """The adapter variant's card for the merged weights: no adapter section, the
    whole network's parameters, and the adapter and base named in the lineage. The
    recipe stays the adapter's (the run that made these weights), and so do its
    metrics: the merged network computes the same logits."""
    adapter = card.adapter
    assert adapter is not None, "called for an adapter variant"
    components = {role: source for role, source in (card.components or {}).items() if role != "adapter"}
    return card.model_copy(
        update={
            "name": new_name,
            "description": f"'{card.name}' (a {adapter.kind} adapter) merged into its base '{adapter.base}': "
            f"whole weights that load without the base.",
            "lineage": f"zoo merge: {adapter.kind} adapter '{card.name}' (checkpoint sha256 {card.checkpoint.sha256}) "
            f"folded into base '{adapter.base}' (checkpoint sha256 {adapter.base_sha256}); "
            f"'{card.name}' in turn: {card.lineage}",
            "adapter": None,
            "parameters": parameters,
            "checkpoint": CheckpointRef(path=f"checkpoints/{new_name}.safetensors"),
            "tags": [*(tag for tag in card.tags if tag != "adapter"), "merged"],
            "origin": None,
            "components": components or None,
        }
    )


def _check_new_name(new_name: str) -> None:
    if not VARIANT_NAME.fullmatch(new_name):
        raise ZooError(
            f"--name '{printable(new_name)}': a variant name is lower-case letters, digits, '.' and '-', "
            f"starting with a letter or digit"
        )
    holder = catalogue().find(new_name)
    if holder is not None:
        raise ZooError(
            f"variant '{new_name}' already exists in the {holder.layer} catalogue ({holder.source}); "
            f"choose another --name"
        )


def _logit_difference(first, second) -> float:
    """The largest difference of the two networks' logits over one whole window."""
    card = first.card
    ids = torch.arange(card.context_length)[None] % card.tokenizer.vocab_size  # every position, many tokens
    with torch.no_grad():
        return float((first.network(ids)[0] - second.network(ids)[0]).abs().max())
