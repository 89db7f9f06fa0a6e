"""Rotary position embedding (RoPE; Su et al., 2021): positions inside attention.

Each query and key is cut into pairs of features and each pair is rotated by an
angle proportional to the token's position, with a different frequency per
pair (theta_i = base^(-2i/d), base 10000 as for sinusoids). The score between a
query at m and a key at n then depends on m - n only.

The pairs are INTERLEAVED: features 2i and 2i+1 of a head form pair i, as in
the RoFormer paper and Meta's original Llama code. Hugging Face's Llama, Qwen
and GPT-NeoX instead pair feature i with feature i + d/2 ("rotate_half"); the
two compute the same attention once the query and key rows of each head are
permuted, which is what importing such a checkpoint does (as llama.cpp does).

``fraction`` rotates only the first round(fraction * head_size) features of
each head and passes the rest through (GPT-NeoX and Pythia rotate a quarter).
``scaling`` stretches the frequencies for contexts longer than the training
one: ``{kind = "linear", factor = F}`` divides every frequency by F (position
interpolation); ``{kind = "llama3", factor, low_freq_factor, high_freq_factor,
original_context_length}`` divides the low frequencies by ``factor``, keeps the
high ones and blends in between, as Meta's Llama 3.1 does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from zoo_core.plugin_api.components import PositionEncodingBase

LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_context_length")


def scaled_frequencies(frequencies: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """``frequencies`` (radians per position) after a card's ``rope_scaling`` table."""
    kind = scaling.get("kind")
    keys = {"linear": ("factor",), "llama3": LLAMA3_KEYS}.get(str(kind))
    if keys is None:
        raise ValueError(f"rope_scaling kind is 'linear' or 'llama3', not {kind!r}")
    if set(scaling) != {"kind", *keys}:
        raise ValueError(f"rope_scaling of kind {kind!r} takes {', '.join(keys)} (got {', '.join(sorted(scaling))})")
    if kind == "linear":
        return frequencies / scaling["factor"]
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_context_length"]
    wavelengths = 2 * math.pi / frequencies
    # Wavelengths longer than original / low are slowed by `factor`, those shorter
    # than original / high are kept; in between, a blend linear in original / wavelength.
    smooth = (original / wavelengths - low) / (high - low)
    blended = (1 - smooth) * frequencies / factor + smooth * frequencies
    scaled = torch.where(wavelengths > original / low, frequencies / factor, frequencies)
    between = (wavelengths >= original / high) & (wavelengths <= original / low)
    return torch.where(between, blended, scaled)


class RotaryPositions(PositionEncodingBase):
    frequencies: torch.Tensor  # a buffer

    def __init__(
        self,
        d_model: int,
        n_head: int,
        context_length: int | None = None,
        base: float = 10000.0,
        head_size: int | None = None,
        fraction: float = 1.0,
        scaling: dict[str, Any] | None = None,
    ):
        super().__init__()
        del context_length  # every encoding is offered it; the rotation needs none
        head_size = d_model // n_head if head_size is None else head_size
        if not 0 < fraction <= 1:
            raise ValueError(f"rotary_fraction is in (0, 1], not {fraction}")
        self.rotated = round(fraction * head_size)
        if self.rotated % 2 or not self.rotated:
            raise ValueError(f"RoPE rotates pairs of features; {self.rotated} of a head's {head_size} is not even")
        exponents = torch.arange(0, self.rotated, 2, dtype=torch.float32) / self.rotated
        frequencies = base**-exponents
        if scaling is not None:
            frequencies = scaled_frequencies(frequencies, scaling)
        self.register_buffer("frequencies", frequencies, persistent=False)
        self.passed = head_size - self.rotated

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.passed:
            rotated, passed = x.split((self.rotated, self.passed), dim=-1)
            return torch.cat((self._rotate_pairs(rotated, positions), passed), dim=-1)
        return self._rotate_pairs(x, positions)

    def _rotate_pairs(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float32)[:, None] * self.frequencies[None, :]  # (T, D/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        pairs = x.unflatten(-1, (-1, 2))  # (B, H, T, D/2, 2)
        first, second = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1)
        return rotated.flatten(-2)

    def rotate(self, q, k, q_positions, k_positions):
        return self._rotate(q, q_positions), self._rotate(k, k_positions)
