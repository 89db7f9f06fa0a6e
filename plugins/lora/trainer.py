"""The trainer ``lora``: the standard trainer, updating only low-rank adapters on a frozen base.

Seeding, schedules, evaluation, gradient accumulation, keeping the best,
resumable state and run logs are the standard trainer's: this one adapts the
network before it trains (every base parameter frozen, so it gets neither
gradients nor optimizer state), and tells `zoo train` to write only the adapter,
with a card whose ``adapter`` section names the base and its checkpoint sha256.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from zoo_core.catalogue.cards import AdapterSpec
from zoo_core.errors import ZooError
from zoo_core.training.loop import StandardTrainer, TrainingResult

from .layers import LoRASettings, adapter_tensors, attach

if TYPE_CHECKING:
    from zoo_core.catalogue.cards import ModelCard, Recipe
    from zoo_core.training.job import TrainingJob

WHERE = "recipe.options"


class LoRATrainer(StandardTrainer):
    """Settings in ``recipe.options`` (`zoo train ... --set options.rank=4`): rank
    (default 8), alpha (default: the rank; the update is scaled by alpha / rank),
    targets (patterns of Linear layers' module names; default the attention's
    query/key/value and output projections) and dropout (on the adapters' input)."""

    def check_options(self, recipe: Recipe) -> None:
        LoRASettings.parse(recipe.options, WHERE)

    def prepare_network(self, network: torch.nn.Module, job: TrainingJob) -> torch.nn.Module:
        """`zoo train`'s network, loaded with the base's weights: adapted before a saved state is read into it."""
        if not job.from_weights:
            adapter = getattr(job.card, "adapter", None)  # retraining an adapter variant: start from its base
            base = adapter.base if adapter is not None else job.variant
            raise ZooError(
                f"the lora trainer adapts a variant's trained weights: zoo train NEW --from {base} --trainer lora"
            )
        assert job.recipe is not None, "train_variant hands the recipe with the run's overrides"
        attach(network, LoRASettings.parse(job.recipe.options, WHERE), WHERE)
        return network

    def run(self, network: torch.nn.Module, job: TrainingJob) -> TrainingResult:
        if job.recipe is not None:  # a direct caller's network is adapted here (attaching twice adds nothing)
            attach(network, LoRASettings.parse(job.recipe.options, WHERE), WHERE)
        return super().run(network, job)

    def saved_weights(self, network: torch.nn.Module, card: ModelCard) -> tuple[dict[str, torch.Tensor], ModelCard]:
        """Only the adapter's tensors, and a card that says what they apply to."""
        recipe = card.training_recipe()
        if recipe.base is None or recipe.base_sha256 is None:
            raise ZooError("the lora trainer's adapter needs the base it was trained on (zoo train NEW --from VARIANT)")
        settings = LoRASettings.parse(recipe.options, WHERE)
        tensors = adapter_tensors(network)
        adapter = AdapterSpec(
            kind="lora", base=recipe.base, base_sha256=recipe.base_sha256, config=settings.adapter_config()
        )
        return tensors, card.model_copy(
            update={
                "adapter": adapter,
                "recipe": recipe.model_copy(update={"options": settings.as_options()}),  # what ran, defaults included
                "parameters": sum(t.numel() for t in tensors.values()),
                "description": f"{card.description} LoRA adapter (rank {settings.rank}, alpha {settings.alpha:g}) "
                f"on {', '.join(settings.targets)}.",
                "tags": [*card.tags, *(tag for tag in ("adapter", "lora") if tag not in card.tags)],
            }
        )
