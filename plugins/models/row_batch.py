"""Rows of different lengths decoded together: the transformer's side of continuous batching.

`zoo serve` keeps one running batch per variant; requests join it and leave it
at token boundaries (zoo_core.web.batching). Each row is first fed its prompt
alone, through the model's own cached forward, exactly as `zoo sample` feeds
it; its keys and values then move into one buffer per layer shared by all rows,
a slot per row. A step feeds one new token per row: embeddings, norms, linear
layers and the vocabulary head see all rows in one call each, and attention
sees each row's own keys through a mask of its own length. Each row sits at its
own position: the rows are handed to the position encoding as if they were the
time axis of one sequence, which is what an encoding that works position by
position computes for each row alone.

Only for the blocks `decoding.decode` writes out (`can_decode`); anything else
is decoded row by row through the model's own forward. While a hook is set on
any hook point (zoo_core.plugin_api.hook_points), a step feeds each row through
the model's own cached forward too, its cache a view of the row's slot, so that
hooks see every row's activations.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from zoo_core.plugin_api.components import encoding_does
from zoo_core.plugin_api.hook_points import HookPoint

from ..blocks.attention import CausalSelfAttention, normalise_heads
from ..blocks.blocks import FeedForward, PreNormBlock
from .decoding import GenerationCache, can_decode


class RowBatch:
    """Up to ``max_rows`` rows, each with its keys and values in a slot of a shared buffer.

    ``rows`` are the callers' handles in slot order: ``step`` returns one row of
    logits per handle, in that order. A row leaves by moving the last row into
    its slot, so the slots in use are always the first ``len(rows)``.
    """

    def __init__(self, model, max_rows: int):
        self.model, self.max_rows = model, max_rows
        self.rows: list = []
        self.lengths: list[int] = []  # tokens cached per row
        self._buffers: list[torch.Tensor] = []  # per layer (2, max_rows, H, context, D)

    @staticmethod
    def accepts(model, cache) -> bool:
        """Whether a row fed through ``cache`` (the model's GenerationCache) can join."""
        return hasattr(model, "blocks") and cache.length < model.context_length and can_decode(model, cache)

    def full(self) -> bool:
        return len(self.rows) >= self.max_rows

    def add(self, handle, cache) -> None:
        """Take a row whose prompt went through the model's own forward into ``cache``."""
        slot = len(self.rows)
        if not self._buffers:
            for layer in cache.layers:
                _, _, heads, capacity, width = layer.keys_values.shape
                # Zeros, not uninitialised memory: a masked key's weight is 0, and 0 × NaN
                # in a slot nothing wrote yet would still be NaN.
                self._buffers.append(layer.keys_values.new_zeros(2, self.max_rows, heads, capacity, width))
        for buffer, layer in zip(self._buffers, cache.layers):
            buffer[:, slot, :, : cache.length].copy_(layer.keys_values[:, 0, :, : cache.length])
        self.rows.append(handle)
        self.lengths.append(cache.length)

    def remove(self, handle) -> None:
        slot, last = self.rows.index(handle), len(self.rows) - 1
        if slot != last:
            longest = self.lengths[last]
            for buffer in self._buffers:
                buffer[:, slot, :, :longest].copy_(buffer[:, last, :, :longest])
            self.rows[slot], self.lengths[slot] = self.rows[last], self.lengths[last]
        self.rows.pop()
        self.lengths.pop()

    def room(self, handle) -> bool:
        """Whether the row can take another token without its window sliding."""
        return self.lengths[self.rows.index(handle)] < self.model.context_length

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one token per row (in ``rows`` order); return the next-token logits (B, V)."""
        if HookPoint.active:
            return self._step_through_forward(tokens)
        model = self.model
        device = self._buffers[0].device
        B = len(self.rows)
        positions = torch.tensor(self.lengths, device=device)  # where each row's new token goes
        x = model.token_embedding.forward(torch.tensor(tokens, device=device).view(B, 1))
        if model._embeds_positions:
            x = model.positions.embed(x.view(1, B, -1), positions)
        x = x.view(B, -1)
        longest = max(self.lengths) + 1
        # (B, 1, 1, longest): a row sees its own cached tokens and the new one, not another row's padding
        mask = (torch.arange(longest, device=device)[None, :] <= positions[:, None]).view(B, 1, 1, longest)
        rows = torch.arange(B, device=device)
        for block, buffer in zip(model.blocks, self._buffers):
            attend = (block.attention, model.positions, positions, rows, buffer, longest, mask)
            if type(block) is PreNormBlock:
                x = x + _attend(*attend, block.norm1.forward(x))
                x = x + _feed_forward(block.feed_forward, block.norm2.forward(x))
            else:  # PostNormBlock
                x = block.norm1.forward(x + _attend(*attend, x))
                x = block.norm2.forward(x + _feed_forward(block.feed_forward, x))
        self.lengths = [length + 1 for length in self.lengths]
        return model.cap_logits(model.lm_head.forward(model.final_norm.forward(x)))

    def _step_through_forward(self, tokens: list[int]) -> torch.Tensor:
        """`step` row by row through the model's own cached forward: each row's
        cache is a view of its slot, so its new keys and values land there."""
        model, device = self.model, self._buffers[0].device
        logits = []
        for slot, (token, length) in enumerate(zip(tokens, self.lengths)):
            cache = GenerationCache(len(self._buffers), model.context_length)
            cache.length = length
            for layer, buffer in zip(cache.layers, self._buffers):
                layer.keys_values = buffer[:, slot : slot + 1]  # (2, 1, H, context, D), a view
                layer.positions = torch.arange(model.context_length, device=device)
                layer.length = length
            logits.append(model(torch.tensor([[token]], device=device), cache=cache)[0][0, -1])
        self.lengths = [length + 1 for length in self.lengths]
        return torch.stack(logits)


def _attend(attention: CausalSelfAttention, encoding, positions, rows, buffer, longest, mask, x) -> torch.Tensor:
    B, C = x.shape
    H, D = attention.n_head, attention.head_size
    qkv = attention.qkv.forward(x).view(B, 3, H, 1, D)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    if attention.qk_norm:
        q, k = normalise_heads(q), normalise_heads(k)
    if encoding_does(encoding, "rotates"):
        # (B, H, 1, D) -> (1, H, B, D): the rows as a time axis, each at its own position
        q, k = (t.transpose(0, 2) for t in encoding.rotate(q.transpose(0, 2), k.transpose(0, 2), positions, positions))
    # Each row's new key and value go to its own next position: (B, 2, H, D) at [:, row, :, position].
    buffer[:, rows, :, positions] = torch.stack((k[:, :, 0], v[:, :, 0]), dim=1)
    seen = buffer[:, :B, :, :longest]
    y = F.scaled_dot_product_attention(q, seen[0], seen[1], attn_mask=mask)
    return attention.proj.forward(y.reshape(B, C))


def _feed_forward(feed_forward: FeedForward, x: torch.Tensor) -> torch.Tensor:
    return feed_forward.down.forward(feed_forward.activation(feed_forward.up.forward(x)))
