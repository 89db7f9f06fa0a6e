"""The norms a block (and the final norm) is built with, by the card's name."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

NORM_KINDS = ("layernorm", "rmsnorm", "rmsnorm-unit-offset")


class UnitOffsetRMSNorm(nn.Module):
    """RMSNorm whose stored weight w scales by (1 + w), as Gemma stores it: a
    checkpoint's zeros are a scale of one. The weight starts at zero."""

    def __init__(self, d_model: int, eps: float | None = None):
        super().__init__()
        self.normalized_shape = (d_model,)
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, 1 + self.weight, self.eps)


def make_norm(kind: str, d_model: int, bias: bool = True, eps: float | None = None) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(d_model, bias=bias, eps=1e-5 if eps is None else eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    if kind == "rmsnorm-unit-offset":
        return UnitOffsetRMSNorm(d_model, eps=eps)
    raise ValueError(f"unknown norm '{kind}' (known: {', '.join(NORM_KINDS)})")
