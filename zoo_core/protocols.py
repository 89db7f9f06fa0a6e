"""The contracts between the core and its plugins.

These are structural (`typing.Protocol`): a plugin satisfies them by shape, not by
inheritance. Tensor types are written as strings so that importing this module
does not import torch.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """Text to token ids and back."""

    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; raises ZooError for text it cannot represent."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 decode with replacement."""


@runtime_checkable
class PositionEncoding(Protocol):
    """Where a token is, told to the network.

    Two families exist and the contract leaves room for both: encodings that add
    to the residual stream before the first block (learned, sinusoidal), and
    encodings that act inside attention, by rotating queries and keys (RoPE) or
    by biasing the scores (ALiBi). An encoding implements all three methods and
    makes the ones it does not use the identity (or ``None`` for ``bias``).
    ``positions`` are absolute indices, shape (T,), so cached decoding can pass
    positions that do not start at zero.
    """

    def embed(self, x: "Tensor", positions: "Tensor") -> "Tensor":
        """The residual stream (B, T, C) after adding position information."""

    def rotate(self, q: "Tensor", k: "Tensor", q_positions: "Tensor", k_positions: "Tensor") -> tuple["Tensor", "Tensor"]:
        """Queries and keys (B, H, T, D) after position-dependent rotation."""

    def bias(self, q_positions: "Tensor", k_positions: "Tensor") -> "Tensor | None":
        """An additive bias for attention scores, (H, Tq, Tk), or None."""


@runtime_checkable
class Block(Protocol):
    """One transformer block: attention and feed-forward with residuals and norms."""

    def __call__(
        self, x: "Tensor", positions: "Tensor", encoding: PositionEncoding, need_weights: bool = False, cache: Any = None
    ) -> tuple["Tensor", "Tensor | None"]:
        """(B, T, C) -> (B, T, C), and the attention weights (B, H, T, T) when asked.

        ``cache`` (a layer's KVCache) is passed only while sampling with a KV
        cache; a block without the parameter is simply sampled uncached."""


@runtime_checkable
class LanguageModel(Protocol):
    """Token ids to next-token logits."""

    context_length: int

    def __call__(self, idx: "Tensor", targets: "Tensor | None" = None) -> tuple["Tensor", "Tensor | None"]:
        """Logits (B, T, V) and, when targets are given, the mean cross-entropy."""

    def attention_maps(self, idx: "Tensor") -> list["Tensor"]:
        """Per-layer attention weights (B, H, T, T), in layer order (empty if none)."""


@runtime_checkable
class Trainer(Protocol):
    """Turns a freshly built model and a recipe into trained weights and metrics."""

    def train(self, model: Any, recipe: Any, corpus: Any) -> Any:
        """Run the recipe; return a result with the loss history and final metrics."""
