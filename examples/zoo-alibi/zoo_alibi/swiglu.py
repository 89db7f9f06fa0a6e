"""A pre-norm block whose feed-forward network is SwiGLU (Shazeer, 2020).

FFN(x) = W_down (silu(W_gate x) * W_up x): a gated variant of the ReLU network.
It has three matrices instead of two, so a variant that wants the parameter
count of a ReLU FFN of width 4C sets d_ff to about 2/3 of that.
"""

from __future__ import annotations

from torch import nn
from torch.nn import functional as F

# The zoo's own attention already handles every kind of position encoding
# (embed, rotate, bias) and can return its weights; reuse it rather than copy it.
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import make_norm


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


class SwiGLUPreNormBlock(nn.Module):
    """x + Attention(Norm(x)), then x + SwiGLU(Norm(x))."""

    def __init__(self, d_model: int, n_head: int, d_ff: int | None = None, dropout: float = 0.0, norm: str = "layernorm"):
        super().__init__()
        self.norm1 = make_norm(norm, d_model)
        self.attention = CausalSelfAttention(d_model, n_head, dropout)
        self.norm2 = make_norm(norm, d_model)
        self.feed_forward = SwiGLU(d_model, d_ff or (8 * d_model) // 3, dropout)

    def forward(self, x, positions, encoding, need_weights: bool = False, cache=None):
        # ``cache`` is the layer's KV cache during sampling; attention owns it.
        update, weights = self.attention(self.norm1(x), positions, encoding, need_weights, cache)
        x = x + update
        x = x + self.feed_forward(self.norm2(x))
        return x, weights
