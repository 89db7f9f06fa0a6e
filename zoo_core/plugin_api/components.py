"""Small torch base classes that plugin components may build on.

Kept apart from `protocols` because these import torch; the core never builds a
network itself, but it does give plugin authors defaults to override.
"""

from __future__ import annotations

import torch
from torch import nn

_ACTIONS = (("embeds", "embed"), ("rotates", "rotate"), ("biases", "bias"))


class PositionEncodingBase(nn.Module):
    """A position encoding that does nothing until a subclass overrides a method.

    Residual encodings override `embed`; RoPE-like ones override `rotate`;
    ALiBi-like ones override `bias`.

    The class attributes ``embeds``, ``rotates`` and ``biases`` declare which of
    the three the encoding really does, so a model can skip the identity calls
    (three calls per layer per step on small models are a measurable share of
    the time). They are worked out from the methods a subclass overrides; a
    subclass may also set them itself.
    """

    embeds = False
    rotates = False
    biases = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for flag, method in _ACTIONS:
            if flag not in cls.__dict__:
                setattr(cls, flag, getattr(cls, method) is not getattr(PositionEncodingBase, method))

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotate(self, q, k, q_positions, k_positions):
        return q, k

    def bias(self, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor | None:
        return None


def encoding_does(encoding, action: str) -> bool:
    """Whether ``encoding`` declares it ``embeds``, ``rotates`` or ``biases``.

    An encoding that declares nothing (one not built on `PositionEncodingBase`)
    is assumed to do all three: calling an identity is only slower, skipping a
    real one would be wrong."""
    return getattr(encoding, action, True)
