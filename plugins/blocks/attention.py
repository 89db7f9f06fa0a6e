"""Multi-head causal self-attention that can show its weights and cache its keys."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from zoo_core.plugin_api.components import encoding_does
from zoo_core.plugin_api.hook_points import HookPoint


class KVCache:
    """One layer's keys and values so far, (B, H, T, D), with their absolute positions.

    Sampling appends one token at a time instead of recomputing the whole window.
    Keys and values live side by side in one buffer, (2, B, H, capacity, D),
    allocated once for the whole window and filled in place: concatenating at
    every token copied the cache over and over.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.length = 0
        self.keys_values: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None

    @property
    def k(self) -> torch.Tensor | None:
        return None if self.keys_values is None else self.keys_values[0]

    @property
    def v(self) -> torch.Tensor | None:
        return None if self.keys_values is None else self.keys_values[1]

    def append(self, k, v, positions):
        """Store the keys and values (B, H, T, D) of T new tokens; return all of
        them so far, (B, H, length, D) each, and their positions."""
        slot = self._slot(k, positions)
        slot[0].copy_(k)
        slot[1].copy_(v)
        keys_values, positions = self._commit(positions)
        return keys_values[0], keys_values[1], positions

    def append_keys_values(self, keys_values, positions):
        """`append` for keys and values side by side, (2, B, H, T, D): one copy
        instead of two. Returns (2, B, H, length, D) and the positions."""
        self._slot(keys_values[0], positions).copy_(keys_values)
        return self._commit(positions)

    def _slot(self, k, positions):
        B, H, T, D = k.shape
        if self.keys_values is None:
            self.keys_values = k.new_empty(2, B, H, self.capacity, D)
            self.positions = positions.new_empty(self.capacity)
        if self.length + T > self.capacity:
            raise ValueError(f"the KV cache holds {self.capacity} tokens; {self.length + T} do not fit")
        # narrow + copy_ rather than slice assignment: the same copy without
        # indexing's per-call work, which shows when decoding one token at a time
        return self.keys_values.narrow(3, self.length, T)

    def _commit(self, positions):
        T = positions.shape[0]
        self.positions.narrow(0, self.length, T).copy_(positions)
        self.length += T
        return self.keys_values.narrow(3, 0, self.length), self.positions.narrow(0, 0, self.length)


def normalise_heads(t: torch.Tensor) -> torch.Tensor:
    """RMS norm over each head's channels (the last dimension), without a learned scale."""
    return F.rms_norm(t, (t.shape[-1],))


class CausalSelfAttention(nn.Module):
    """Heads side by side in one projection: (B, T, C) -> (B, T, C).

    With ``need_weights`` the scores are computed explicitly, softmaxed and
    returned (B, H, T, T); otherwise the same arithmetic goes through
    `scaled_dot_product_attention`, which is faster and gives the same numbers.
    The position encoding may rotate queries and keys or bias the scores.
    With a ``cache``, the new keys and values are appended to it and the queries
    attend to everything cached; causality is then decided by position.
    ``qk_norm`` RMS-normalises each head's queries and keys (no learned scale)
    before positions rotate them, as the nanoGPT speedrun does: the attention
    logits stay bounded however large the projections grow, which lets a high
    learning rate train without the softmax saturating.

    Hook points: ``input`` (B, T, C), ``pattern`` (B, H, Tq, Tk), the softmaxed
    weights, ``heads`` (B, T, H, D), each head's output before the output
    projection, and ``output`` (B, T, C). The pattern is computed only when a
    hook is set on it (or ``need_weights``); a hook that keeps it leaves the
    output computed as without hooks, one that replaces it is attended through.
    """

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0, bias: bool = False, qk_norm: bool = False):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"width {d_model} is not divisible by {n_head} heads")
        self.n_head = n_head
        self.head_size = d_model // n_head
        self.input = HookPoint()  # hook points registered in the order a forward passes them
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.pattern = HookPoint()
        self.heads = HookPoint()
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.residual_dropout = nn.Dropout(dropout)
        self.output = HookPoint()
        self.qk_norm = qk_norm

    def forward(self, x, positions, encoding, need_weights: bool = False, cache: KVCache | None = None):
        x = self.input(x)
        B, T, C = x.shape
        # 3 × (B, H, T, D). Split along the channels, then give each its heads: in the
        # backward pass the three gradients are joined by one concatenation, where
        # viewing all three as (B, T, 3, H, D) would stack them and then copy the stack.
        q, k, v = (t.view(B, T, self.n_head, self.head_size).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if self.qk_norm:
            q, k = normalise_heads(q), normalise_heads(k)
        if encoding_does(encoding, "rotates"):  # most encodings do not: skip the identity call
            q, k = encoding.rotate(q, k, positions, positions)  # new keys rotate before joining the cache
        k_positions = positions
        if cache is not None:
            k, v, k_positions = cache.append(k, v, positions)
        # (H, Tq, Tk) or None.
        bias = encoding.bias(positions, k_positions) if encoding_does(encoding, "biases") else None
        dropout = self.dropout if self.training else 0.0
        # Without a bias the common cases need no mask tensor at all: queries and
        # keys are the same tokens (training, or filling an empty cache), or a
        # single newest query that may see every cached key (decoding).
        plain_causal = bias is None and k.shape[2] == T
        sees_everything = bias is None and T == 1
        explicit = need_weights or bool(self.pattern.functions)  # `functions`: the cheapest look at the point
        if explicit or not (plain_causal or sees_everything):
            allowed = k_positions[None, :] <= positions[:, None]  # (Tq, Tk): no looking ahead
        weights = y = None
        if explicit:
            scores = (q @ k.transpose(-2, -1)) * self.head_size**-0.5  # (B, H, Tq, Tk)
            if bias is not None:
                scores = scores + bias
            computed = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            seen = self.pattern(computed)
            # A hook that only reads the pattern leaves the output as fast and
            # bit for bit as without it; a replaced pattern is what is attended through.
            if need_weights or seen is not computed:
                y = F.dropout(seen, dropout, self.training) @ v
            if need_weights:
                weights = seen
        if y is None:
            if plain_causal:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
            elif sees_everything:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
            else:
                mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, float("-inf"))
                if bias is not None:
                    mask = mask + bias.to(q.dtype)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        y = self.proj(self.heads(y.transpose(1, 2)).reshape(B, T, C))  # (B, T, H, D), then side by side again
        if self.training:  # dropout is the identity outside training: no call
            y = self.residual_dropout(y)
        return self.output(y), weights
