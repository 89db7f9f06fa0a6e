"""One training step: the update every loop takes, whichever loop it is.

The standard trainer (`zoo train`, hence also each process of a data-parallel
run, whose `Placement` shares out the batch and averages the gradients) and the
paired-seed studies (`zoo experiment`) both call `training_step`, so a change
to what an update does (its learning rate, precision, clipping) reaches every
loop at once and their numbers stay comparable.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Callable, NamedTuple

import torch

if TYPE_CHECKING:
    from ..catalogue.cards import Recipe
    from ..devices import Placement


DEFAULT_COOLDOWN_FRACTION = 0.2


def learning_rate_at(step: int, recipe: Recipe, total_steps: int) -> float:
    """Constant; linear warm-up then cosine decay to ``min_learning_rate``; or
    warm-up, stable, decay ("wsd"): linear warm-up, the peak rate held, then a
    linear fall to ``min_learning_rate`` over the last ``cooldown_fraction`` of
    the steps (the nanoGPT speedrun's shape: most steps at the full rate)."""
    if recipe.lr_schedule == "constant":
        return recipe.learning_rate
    if step <= recipe.warmup_steps:
        return recipe.learning_rate * step / max(1, recipe.warmup_steps)
    if recipe.lr_schedule == "wsd":
        cooldown = max(1, round(total_steps * (recipe.cooldown_fraction or DEFAULT_COOLDOWN_FRACTION)))
        left = total_steps - step  # steps after this one
        if left >= cooldown:
            return recipe.learning_rate
        return recipe.min_learning_rate + (recipe.learning_rate - recipe.min_learning_rate) * (left + 1) / (
            cooldown + 1
        )
    progress = (step - recipe.warmup_steps) / max(1, total_steps - recipe.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return recipe.min_learning_rate + cosine * (recipe.learning_rate - recipe.min_learning_rate)


class StepResult(NamedTuple):
    """What one update measured; tensors, so reading them is the caller's choice
    (each read is a host synchronisation on a GPU)."""

    loss: torch.Tensor  # the batch's mean loss
    grad_norm: torch.Tensor  # the gradients' total norm before clipping
    learning_rate: float


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
    micro_batches: int = 1,
) -> StepResult:
    """Update ``model`` once on ``inputs``/``targets``, as step ``step`` of ``recipe``.

    The learning rate is the recipe's schedule at ``step``; the forward runs under
    the placement's autocast, the backward through its gradient scaler (float16),
    and the gradient norm is clipped where the recipe says so. ``forward`` is what
    to call instead of ``model`` (a compiled or DistributedDataParallel wrapper of
    it); the optimizer and the clipping act on ``model``'s own parameters.

    ``micro_batches`` > 1 accumulates gradients over that many equal slices of
    the batch before the one update (gradient accumulation): the slices' mean
    losses, each weighted by its share, sum to the whole batch's mean, so the
    update equals the whole batch's to float rounding, in less memory.
    """
    learning_rate = learning_rate_at(step, recipe, recipe.steps)
    for group in optimizer.param_groups:
        # lr_scale: a group's peak rate over the recipe's (Muon's matrices, see optimizers.py)
        group["lr"] = learning_rate * group.get("lr_scale", 1.0)
    call = model if forward is None else forward  # `is None`: a compiled wrapper refuses truth tests
    optimizer.zero_grad(set_to_none=True)
    slices = list(zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)))
    no_sync = getattr(call, "no_sync", None)  # DistributedDataParallel's: all-reduce once, after the last slice
    losses = []
    for index, (x, y) in enumerate(slices):
        last = index == len(slices) - 1
        with contextlib.nullcontext() if last or no_sync is None else no_sync():
            with placement.autocast():
                _, loss = call(x, y)
            placement.backward(loss / len(slices))
        losses.append(loss.detach())
    grad_norm = placement.step(optimizer, list(model.parameters()), recipe.grad_clip)
    return StepResult(losses[0] if len(losses) == 1 else torch.stack(losses).mean(), grad_norm, learning_rate)
