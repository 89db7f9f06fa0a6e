"""Scoring a loaded language model on the fixed evaluation windows of its recipe."""

from __future__ import annotations

import math
from pathlib import Path

from .data import Corpus, fixed_windows, mean_loss, read_corpus_text
from .training import resolve_data_path


def evaluate_language_model(model, windows: int | None = None, data: Path | None = None) -> dict:
    """Train and validation loss (nats per token) and perplexity, next to the
    uniform baseline ln(V) that a model which learned nothing would score."""
    card = model.card
    recipe = card.recipe
    text = read_corpus_text(resolve_data_path(recipe, model.variant.source, data, model.card.allow_external_paths))
    corpus = Corpus.from_text(text, model.tokenizer, recipe.train_fraction)
    count = windows or recipe.eval_windows
    losses = {
        split: mean_loss(model.network, *fixed_windows(corpus.split(split), card.context_length, count))
        for split in ("train", "validation")
    }
    uniform = math.log(card.tokenizer.vocab_size)
    return {
        "train_loss": losses["train"],
        "validation_loss": losses["validation"],
        "validation_perplexity": math.exp(losses["validation"]),
        "uniform_loss": uniform,
        "uniform_perplexity": float(card.tokenizer.vocab_size),
        "windows": count,
        "loss_unit": card.metrics.loss_unit,
    }
