"""Rotary position embedding (RoPE; Su et al., 2021): positions inside attention.

Each query and key is cut into pairs of features and each pair is rotated by an
angle proportional to the token's position, with a different frequency per
pair (theta_i = 10000^(-2i/d), as for sinusoids). The score between a query at
m and a key at n then depends on m - n only.
"""

from __future__ import annotations

import torch

from zoo_core.plugin_api.components import PositionEncodingBase


class RotaryPositions(PositionEncodingBase):
    frequencies: torch.Tensor  # a buffer

    def __init__(self, d_model: int, n_head: int, base: float = 10000.0, **_: object):
        super().__init__()
        head_size = d_model // n_head
        if head_size % 2:
            raise ValueError(f"RoPE needs an even head size, not {head_size}")
        exponents = torch.arange(0, head_size, 2, dtype=torch.float32) / head_size
        self.register_buffer("frequencies", base**-exponents, persistent=False)

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float32)[:, None] * self.frequencies[None, :]  # (T, D/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        pairs = x.unflatten(-1, (-1, 2))  # (B, H, T, D/2, 2)
        first, second = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1)
        return rotated.flatten(-2)

    def rotate(self, q, k, q_positions, k_positions):
        return self._rotate(q, q_positions), self._rotate(k, k_positions)
