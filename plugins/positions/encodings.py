"""Position encodings that add a vector to the residual stream."""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo_core.errors import ZooError
from zoo_core.plugin_api.components import PositionEncodingBase
from zoo_core.plugin_api.hook_points import HookPoint


class NoPositions(PositionEncodingBase):
    """The model sees an unordered set, apart from what the causal mask reveals."""

    def __init__(self, **_: object):
        super().__init__()


class LearnedPositions(PositionEncodingBase):
    """One trained vector per position, up to the context length.

    Hook point ``added``: the vectors added to the residual stream, (T, C)."""

    def __init__(self, d_model: int, context_length: int, **_: object):
        super().__init__()
        self.context_length = context_length
        self.table = nn.Embedding(context_length, d_model)
        self.added = HookPoint()

    def embed(self, x, positions):
        # No `positions.max()` check up front: reading it back stalls a GPU and
        # breaks a compiled graph, and the transformer already refuses windows
        # past the context. A direct caller with positions past the table still
        # gets a clear error from the lookup itself (on CPU).
        try:
            return x + self.added(self.table(positions))
        except IndexError:
            raise ZooError(
                f"learned positions stop at {self.context_length - 1}; crop the input to the context window"
            ) from None


class SinusoidalPositions(PositionEncodingBase):
    """Fixed sine/cosine vectors of "Attention is all you need" §3.5.

    Even features are sin(pos / 10000^(2i/d)), odd features the matching cosine.
    Only the frequencies are stored (a non-persistent buffer: nothing to train,
    nothing to save), so any position can be computed.

    Hook point ``added``: the vectors added to the residual stream, (T, C).
    """

    frequencies: torch.Tensor  # a buffer

    def __init__(self, d_model: int, **_: object):
        super().__init__()
        if d_model % 2:
            raise ValueError("sinusoidal positions need an even width")
        exponents = torch.arange(0, d_model, 2, dtype=torch.float32) / d_model
        self.register_buffer("frequencies", torch.exp(-math.log(10000.0) * exponents), persistent=False)
        self.added = HookPoint()

    def vectors(self, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float32)[:, None] * self.frequencies[None, :]
        table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, d/2, 2): sin, cos interleaved
        return table.flatten(1)

    def embed(self, x, positions):
        return x + self.added(self.vectors(positions).to(x.dtype))
