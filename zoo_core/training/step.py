"""One training step: the update every loop takes, whichever loop it is.

The standard trainer (`zoo train`, hence also each process of a data-parallel
run, whose `Placement` shares out the batch and averages the gradients) and the
paired-seed studies (`zoo experiment`) both call `training_step`, so a change
to what an update does (its learning rate, precision, clipping) reaches every
loop at once and their numbers stay comparable.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from ..catalogue.cards import Recipe
    from ..devices import Placement


def learning_rate_at(step: int, recipe: Recipe, total_steps: int) -> float:
    """Constant, or linear warm-up then cosine decay to ``min_learning_rate``."""
    if recipe.lr_schedule == "constant":
        return recipe.learning_rate
    if step <= recipe.warmup_steps:
        return recipe.learning_rate * step / max(1, recipe.warmup_steps)
    progress = (step - recipe.warmup_steps) / max(1, total_steps - recipe.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return recipe.min_learning_rate + cosine * (recipe.learning_rate - recipe.min_learning_rate)


def training_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    step: int,
    recipe: Recipe,
    placement: Placement,
    forward: Callable | None = None,
) -> torch.Tensor:
    """Update ``model`` once on ``inputs``/``targets``, as step ``step`` of ``recipe``; return the loss.

    The learning rate is the recipe's schedule at ``step``; the forward runs under
    the placement's autocast, the backward through its gradient scaler (float16),
    and the gradient norm is clipped where the recipe says so. ``forward`` is what
    to call instead of ``model`` (a compiled or DistributedDataParallel wrapper of
    it); the optimizer and the clipping act on ``model``'s own parameters.
    """
    for group in optimizer.param_groups:
        group["lr"] = learning_rate_at(step, recipe, recipe.steps)
    with placement.autocast():
        # `is None`, not `or`: a compiled wrapper has a __len__ that refuses truth tests.
        _, loss = (model if forward is None else forward)(inputs, targets)
    optimizer.zero_grad(set_to_none=True)
    placement.backward(loss)
    placement.step(optimizer, model.parameters(), recipe.grad_clip)
    return loss
