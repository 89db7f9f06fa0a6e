"""The standard trainer's optimizers: AdamW, SGD, and Muon for matrices beside AdamW for the rest.

Muon (Keller Jordan's optimizer of the nanoGPT speedrun, `torch.optim.Muon`
since torch 2.9) orthogonalises each hidden matrix's momentum before the
update, so every direction of the matrix moves at the same rate. It is made for
2-D weights inside the network; the speedrun trains embeddings, the vocabulary
head, norms and biases with AdamW. `MuonWithAdamW` does the same as one
optimizer: one `state_dict`, one set of parameter groups (Muon's first), so
training states, resuming and the learning-rate schedule treat it like any other.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from ..catalogue.cards import Recipe

DEFAULT_MUON_LEARNING_RATE = 0.02


def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """The recipe's optimizer over every trainable parameter (``requires_grad``:
    a frozen one, such as a base's weight under an adapter, gets no optimizer state).

    AdamW is torch's fused implementation where the parameters allow it (CPU and
    CUDA, floating point): one kernel over all tensors instead of a loop of small
    operations per tensor, which on the zoo's small models is a visible share of a step.
    It computes the same update; the last bits of float32 may differ from the
    per-tensor loop, so runs are bit-for-bit reproducible against each other,
    not against checkpoints trained before (their cards' metrics stand: they
    are measured on the saved weights).
    """
    parameters = trainable_parameters(model)
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    if recipe.optimizer == "muon":
        return MuonWithAdamW(model, recipe)
    return _adamw(parameters, recipe)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an optimizer updates, in the model's order (all of them unless some are frozen)."""
    return [p for p in model.parameters() if p.requires_grad]


def indexed_parameters(model: nn.Module, optimizer: str) -> list[torch.Tensor]:
    """The parameters in the order the named optimizer's ``state_dict`` numbers them
    (group by group): what a saved optimizer state is checked against."""
    if optimizer != "muon":
        return list(trainable_parameters(model))
    matrices, others = muon_split(model)
    return matrices + others


def muon_split(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`muon_matrices(model)`, and every other trainable parameter (AdamW's), in the model's order."""
    matrices = muon_matrices(model)
    chosen = {id(p) for p in matrices}
    return matrices, [p for p in trainable_parameters(model) if id(p) not in chosen]


def muon_matrices(model: nn.Module) -> list[torch.Tensor]:
    """The weights Muon updates: every trainable 2-D weight of a linear layer,
    except the vocabulary head (the module named ``lm_head``, the zoo's and
    Hugging Face's convention) and any weight shared with an embedding (a tied
    head). Embeddings are lookups, not linear maps, and stay with AdamW."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    matrices = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or name.rsplit(".", 1)[-1] == "lm_head":
            continue
        weight = module.weight
        if weight.requires_grad and weight.dim() == 2 and id(weight) not in embedded:
            matrices.append(weight)
    return matrices


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon on `muon_matrices(model)` (group 0, at ``recipe.muon_learning_rate``),
    AdamW on every other trainable parameter (group 1, at ``recipe.learning_rate``).

    Each group carries ``lr_scale``, its peak learning rate over the recipe's, which
    `training_step` multiplies the schedule by: both groups warm up and cool down together.
    AdamW is torch's (fused), sharing this optimizer's group and state, so `state_dict`
    and `load_state_dict` are the standard ones.

    Muon's update is written here rather than taken from `torch.optim.Muon`, which
    orthogonalises in bfloat16: on a CPU without bfloat16 matrix units that made
    one step of gpt-char-mini's matrices take seconds instead of milliseconds. The
    arithmetic is the published algorithm's, in float32: Nesterov momentum, five
    Newton–Schulz iterations with the speedrun's coefficients, the update scaled by
    sqrt(max(1, rows / columns)), decoupled weight decay. Matrices of one shape are
    orthogonalised together, as one batched product.
    """

    def __init__(self, model: nn.Module, recipe: Recipe, momentum: float = 0.95):
        matrices, others = muon_split(model)
        muon_rate = recipe.muon_learning_rate or DEFAULT_MUON_LEARNING_RATE
        groups = [
            {"params": matrices, "muon": True, "lr": muon_rate, "lr_scale": muon_rate / recipe.learning_rate},
            {"params": others, "muon": False, "lr": recipe.learning_rate, "lr_scale": 1.0},
        ]
        super().__init__(
            [g for g in groups if g["params"]], {"weight_decay": recipe.weight_decay, "momentum": momentum}
        )
        # Built on a placeholder for its defaults and step code; its group is replaced below.
        self._adamw = _adamw(others or [torch.zeros(1)], recipe)
        self._share_adamw_group()

    def _share_adamw_group(self) -> None:
        # AdamW reads its settings from this optimizer's group (given AdamW's defaults
        # for keys it does not set) and keeps its moments in this optimizer's state.
        self._adamw.param_groups = [g for g in self.param_groups if not g["muon"]]
        for group in self._adamw.param_groups:
            for key, value in self._adamw.defaults.items():
                group.setdefault(key, value)
        self._adamw.state = self.state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share_adamw_group()  # loading replaced the groups and the state with new objects

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            if group["muon"]:
                self._muon_step(group)
        if self._adamw.param_groups:
            self._adamw.step()

    def _muon_step(self, group: dict) -> None:
        momentum, rate, decay = group["momentum"], group["lr"], group["weight_decay"]
        by_shape: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for parameter in group["params"]:
            grad = parameter.grad
            if grad is None:
                continue
            state = self.state[parameter]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(parameter)
            state["momentum_buffer"].lerp_(grad, 1 - momentum)
            by_shape.setdefault(tuple(parameter.shape), []).append((parameter, grad))
        for shape, pairs in by_shape.items():
            parameters = [p for p, _ in pairs]
            nesterov = torch.stack([g.lerp(self.state[p]["momentum_buffer"], momentum) for p, g in pairs])
            updates = orthogonalise(nesterov)
            scale = rate * math.sqrt(max(1.0, shape[0] / shape[1]))
            for parameter, update in zip(parameters, updates):
                parameter.mul_(1 - rate * decay)
                parameter.add_(update, alpha=-scale)


NEWTON_SCHULZ_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # the speedrun's quintic, steepest at zero


def orthogonalise(matrices: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately U Vᵀ for each matrix U S Vᵀ of ``matrices`` (N, rows, columns):
    every singular value moved towards 1 (roughly into [0.7, 1.2]) by Newton–Schulz
    iterations, which need only matrix products."""
    a, b, c = NEWTON_SCHULZ_COEFFICIENTS
    tall = matrices.shape[-2] > matrices.shape[-1]
    x = matrices.mT if tall else matrices  # the smaller Gram matrix: rows <= columns
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if tall else x


def _adamw(parameters: Sequence[torch.Tensor], recipe: Recipe) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        parameters,
        lr=recipe.learning_rate,
        betas=(recipe.beta1, recipe.beta2),
        weight_decay=recipe.weight_decay,
        fused=True if _fusable(parameters) else None,  # None: torch's own default
    )


def _fusable(parameters: Sequence[torch.Tensor]) -> bool:
    return all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
        for p in parameters
    )
