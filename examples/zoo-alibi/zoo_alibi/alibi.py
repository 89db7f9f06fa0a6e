"""ALiBi: attention with linear biases (Press, Smith & Lewis, 2021).

Nothing is added to the residual stream. Instead each head h penalises a key by
its distance from the query, score += -m_h * (q - k), with head slopes forming
the geometric sequence m_h = 2^(-8h/H), h = 1..H. Steep heads look locally,
shallow heads far back. No parameters: the slopes are a non-persistent buffer,
so checkpoints hold no position tensors at all.
"""

from __future__ import annotations

import torch

from zoo_core.plugin_api.components import PositionEncodingBase


def alibi_slopes(n_head: int) -> torch.Tensor:
    """(H,) slopes 2^(-8/H), 2^(-16/H), ..., 2^(-8)."""
    heads = torch.arange(1, n_head + 1, dtype=torch.float32)
    return torch.pow(2.0, -8.0 * heads / n_head)


class ALiBiPositions(PositionEncodingBase):
    def __init__(self, n_head: int, **_: object):
        super().__init__()
        if n_head < 1:
            raise ValueError("ALiBi needs at least one head")
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
        # Future keys get a positive distance clipped to 0 here; the causal mask
        # in attention removes them anyway.
        distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0).to(self.slopes.dtype)  # (Tq, Tk)
        return -self.slopes[:, None, None] * distance  # (H, Tq, Tk)
