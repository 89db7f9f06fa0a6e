"""The corpus as token streams, seeded training batches and fixed evaluation windows.

The text is split by characters before tokenising (the first ``train_fraction``
trains, the rest validates), so the tokenizer, trained on the same first part,
never sees validation text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..devices import model_device
from ..errors import ZooError
from ..seeding import seeded_generator


def split_text(text: str, train_fraction: float) -> tuple[str, str]:
    cut = int(len(text) * train_fraction)
    return text[:cut], text[cut:]


def unknown_characters(text: str, tokenizer) -> dict[str, int]:
    """The characters of ``text`` that ``tokenizer`` has no token for, with how
    often each occurs; empty for a tokenizer that encodes any text (byte-level BPE)
    or cannot tell (it has no ``unknown_characters`` method)."""
    find = getattr(tokenizer, "unknown_characters", None)
    return {c: text.count(c) for c in find(text)} if find is not None else {}


def drop_characters(text: str, characters) -> str:
    return text.translate(str.maketrans("", "", "".join(characters)))


def encodable_text(text: str, tokenizer) -> str:
    """``text`` without the characters ``tokenizer`` has no token for: what a
    recipe with ``skip_unknown`` trained on, and is scored on."""
    unknown = unknown_characters(text, tokenizer)
    return drop_characters(text, unknown) if unknown else text


def describe_characters(counts: dict[str, int], shown: int = 8) -> str:
    """``'é' ×12, 'ü' ×3 …`` for an error line."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{c!r} ×{n:,}" for c, n in ordered[:shown]) + (" …" if len(ordered) > shown else "")


@dataclass
class Corpus:
    train: torch.Tensor  # (N,) int64 token ids
    validation: torch.Tensor

    @classmethod
    def from_text(cls, text: str, tokenizer, train_fraction: float) -> "Corpus":
        train_text, validation_text = split_text(text, train_fraction)
        return cls(
            torch.tensor(tokenizer.encode(train_text), dtype=torch.long),
            torch.tensor(tokenizer.encode(validation_text), dtype=torch.long),
        )

    def split(self, name: str) -> torch.Tensor:
        return {"train": self.train, "validation": self.validation}[name]


def windows_at(tokens: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (B, T) starting at ``starts`` and their targets, the same tokens shifted by one."""
    offsets = torch.arange(context)
    index = starts[:, None] + offsets[None, :]  # (B, T)
    return tokens[index], tokens[index + 1]


class BatchSampler:
    """Random training windows from a seeded generator: same seed, same batches."""

    def __init__(self, tokens: torch.Tensor, context: int, batch_size: int, seed: int):
        if len(tokens) <= context + 1:
            raise ZooError(f"the training split has {len(tokens)} tokens, too few for a context of {context}")
        self.tokens, self.context, self.batch_size = tokens, context, batch_size
        self.generator = seeded_generator(seed, "recipe.seed")

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.tokens) - self.context, (self.batch_size,), generator=self.generator)
        return windows_at(self.tokens, starts, self.context)

    def get_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def fixed_windows(
    tokens: torch.Tensor, context: int, count: int, seed: int = 1234
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` evaluation windows chosen once by ``seed``: every model scored on
    them sees exactly the same text."""
    if len(tokens) <= context + 1:
        raise ZooError(f"a split of {len(tokens)} tokens is too short for windows of {context}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(tokens) - context, (count,), generator=generator)
    return windows_at(tokens, starts, context)


@torch.inference_mode()
def mean_loss(model, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 64, progress=None) -> float:
    """Mean next-token cross-entropy (nats per token) over the given windows, read
    ``batch_size`` at a time (``progress``: a WorkProgress told of each batch).

    Under `inference_mode`, not just `no_grad`: no autograd bookkeeping at all.
    The losses are summed as float tensors and read back once at the end,
    instead of a `.item()` per batch (a synchronisation per batch on a GPU)."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for i in range(0, len(inputs), batch_size):
            x, y = inputs[i : i + batch_size].to(device), targets[i : i + batch_size].to(device)
            _, loss = model(x, y)
            total = total + loss.double() * y.numel()
            count += y.numel()
            if progress is not None:
                progress.advance()
    finally:
        model.train(was_training)
    return float(total) / count
