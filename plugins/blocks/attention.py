"""Multi-head causal self-attention that can show its weights."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    """Heads side by side in one projection: (B, T, C) -> (B, T, C).

    With ``need_weights`` the scores are computed explicitly, softmaxed and
    returned (B, H, T, T); otherwise the same arithmetic goes through
    `scaled_dot_product_attention`, which is faster and gives the same numbers.
    The position encoding may rotate queries and keys or bias the scores.
    """

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"width {d_model} is not divisible by {n_head} heads")
        self.n_head = n_head
        self.head_size = d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.residual_dropout = nn.Dropout(dropout)

    def forward(self, x, positions, encoding, need_weights: bool = False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_size).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, D)
        q, k = encoding.rotate(q, k, positions, positions)
        bias = encoding.bias(positions, positions)  # (H, T, T) or None
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if need_weights:
            scores = (q @ k.transpose(-2, -1)) * self.head_size**-0.5  # (B, H, T, T)
            if bias is not None:
                scores = scores + bias
            weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            y = F.dropout(weights, self.dropout, self.training) @ v
        else:
            weights = None
            if bias is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
            else:
                mask = bias.masked_fill(~causal, float("-inf")).to(q.dtype)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, C)  # heads side by side again
        return self.residual_dropout(self.proj(y)), weights
