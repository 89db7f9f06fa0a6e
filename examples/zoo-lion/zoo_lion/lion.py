"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

Each step moves every weight by the same amount, ``lr``, in the direction of
the sign of an interpolation between the gradient and its running average;
the running average (the optimizer's only state, ``exp_avg``) then moves
towards the gradient. Weight decay is decoupled, as in AdamW.
"""

from __future__ import annotations

import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0):
        if lr <= 0 or not all(0 <= beta < 1 for beta in betas) or weight_decay < 0:
            raise ValueError(f"Lion needs lr > 0, 0 <= betas < 1 and weight_decay >= 0 (got {lr}, {betas}, {weight_decay})")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return loss
