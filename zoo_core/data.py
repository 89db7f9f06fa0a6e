"""The corpus as token streams, seeded training batches and fixed evaluation windows.

The text is split by characters before tokenising (the first ``train_fraction``
trains, the rest validates), so the tokenizer, trained on the same first part,
never sees validation text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import ZooError


def read_corpus_text(path: Path) -> str:
    """The corpus text; if a ``.sha256`` file lies beside it, the text must match it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ZooError(f"{path}: corpus not found (pass --data PATH)") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read corpus: {exc.strerror or exc}") from None
    checksum_file = path.with_name(path.name + ".sha256")
    if checksum_file.exists():
        expected = checksum_file.read_text().split()[0]
        actual = hashlib.sha256(raw).hexdigest()
        if actual != expected:
            raise ZooError(f"{path}: sha256 {actual[:12]}… does not match {checksum_file.name} ({expected[:12]}…)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZooError(f"{path}: corpus is not UTF-8 text (byte {exc.start})") from None
    if len(text) < 100:
        raise ZooError(f"{path}: corpus has only {len(text)} characters; training needs real text")
    return text


def split_text(text: str, train_fraction: float) -> tuple[str, str]:
    cut = int(len(text) * train_fraction)
    return text[:cut], text[cut:]


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
        self.generator = torch.Generator().manual_seed(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.tokens) - self.context, (self.batch_size,), generator=self.generator)
        return windows_at(self.tokens, starts, self.context)

    def get_state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def fixed_windows(tokens: torch.Tensor, context: int, count: int, seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` evaluation windows chosen once by ``seed``: every model scored on
    them sees exactly the same text."""
    if len(tokens) <= context + 1:
        raise ZooError(f"a split of {len(tokens)} tokens is too short for windows of {context}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(tokens) - context, (count,), generator=generator)
    return windows_at(tokens, starts, context)


@torch.no_grad()
def mean_loss(model, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy (nats per token) over the given windows."""
    from .devices import model_device

    device = model_device(model)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for i in range(0, len(inputs), batch_size):
            x, y = inputs[i : i + batch_size].to(device), targets[i : i + batch_size].to(device)
            _, loss = model(x, y)
            total += loss.item() * y.numel()
            count += y.numel()
    finally:
        model.train(was_training)
    return total / count
