"""`zoo train-tokenizer`: a vocabulary trained by whichever tokenizer plugin offers to.

A tokenizer plugin that can be trained registers ``train=`` beside its factory
(see ``register_tokenizers``); the core reaches it through the plugin manager
and knows no tokenizer by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import ZooError
from ..storage.files import atomic_write
from .datasets import resolve_named_or_path

if TYPE_CHECKING:
    # The registry sits above the corpus (it holds the datasets plugins register): the caller hands the plugins.
    from ..plugin_api.manager import PluginSet


@dataclass
class TrainedTokenizer:
    """What a tokenizer's ``train`` returns: its file, not yet written."""

    default_filename: str  # e.g. 'bpe-1024.tiktoken'; where a card's `tokenizer.file` would point
    write: Callable[[Path], None]  # writes the file to the given path
    summary: str  # one line for the user, e.g. '1024 tokens trained on 1,003,854 characters'


def trainable_kinds(plugins: PluginSet) -> list[str]:
    tokenizers = plugins.components["tokenizers"]
    return [name for name in tokenizers.names() if tokenizers.extra(name, "train") is not None]


def train_tokenizer(
    kind: str,
    data: str | Path,
    vocab_size: int,
    train_fraction: float,
    out: Path | None,
    default_folder: Path,
    plugins: PluginSet,
) -> tuple[Path, str]:
    """Train ``kind`` on ``data`` (a registered dataset's name or a text file), write its file (to ``out`` or ``default_folder``); return the path and a summary."""
    if not (isinstance(train_fraction, (int, float)) and math.isfinite(train_fraction) and 0 < train_fraction < 1):
        # 2 would train on the validation text too, and replace the shipped vocabulary with it
        raise ZooError(f"--train-fraction must lie between 0 and 1, not {train_fraction}")
    train = plugins.components["tokenizers"].extra(kind, "train")
    if train is None:
        raise ZooError(
            f"tokenizer '{kind}' cannot be trained here (trainable: {', '.join(trainable_kinds(plugins)) or 'none'})"
        )
    text = resolve_named_or_path(data, plugins.datasets).text
    try:
        trained = train(text, vocab_size=vocab_size, train_fraction=train_fraction)
    except ValueError as exc:  # e.g. a vocabulary too small for the tokenizer
        raise ZooError(f"tokenizer '{kind}': {exc}") from None
    path = out or default_folder / trained.default_filename
    atomic_write(path, trained.write)
    return path, trained.summary
