"""Small torch base classes that plugin components may build on.

Kept apart from `protocols` because these import torch; the core never builds a
network itself, but it does give plugin authors defaults to override.
"""

from __future__ import annotations

import torch
from torch import nn


class PositionEncodingBase(nn.Module):
    """A position encoding that does nothing until a subclass overrides a method.

    Residual encodings override `embed`; RoPE-like ones override `rotate`;
    ALiBi-like ones override `bias`.
    """

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(self, q, k, q_positions, k_positions):
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        return None
