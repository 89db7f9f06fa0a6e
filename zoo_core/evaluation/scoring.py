"""Scoring a loaded language model on the fixed evaluation windows of its recipe."""

from __future__ import annotations

import math
from pathlib import Path

from ..catalogue.registry import upsert_registry_entry
from ..corpus.batches import Corpus, encodable_text, fixed_windows, mean_loss
from ..errors import ZooError
from ..inference.carried import carried_nll, is_unbounded
from ..loading.texts import variant_text
from ..plugin_api.protocols import BOUNDED, UNBOUNDED
from ..storage.files import exclusive_lock
from ..storage.locations import inside_installed_package
from .bits import bits_per_byte, validation_text
from .budget import COMPUTE_BUDGET, shape_of, size_windows, text_characters

DEFAULT_WINDOWS = 320  # a card's recipe.eval_windows when it names none


def evaluate_language_model(
    model,
    windows: int | None = None,
    data: Path | str | None = None,
    text_chars: int | None = None,
    progress=None,
    context: int | None = None,
) -> dict:
    """Train and validation loss (nats per token) and perplexity, next to the
    uniform baseline ln(V) that a model which learned nothing would score; and
    bits per byte and per character of the validation text (all of it, or its
    first ``text_chars`` characters), which compare across tokenizers. Windows
    and history are ``context`` tokens long (default: the card's context length).
    ``progress`` (a training.progress.WorkProgress) is told of each stage."""
    if windows is not None and windows < 1:  # 0 must not mean "the recipe's" by accident
        raise ZooError(f"--windows must be at least 1, not {windows}")
    card = model.card
    text = variant_text(model.variant, data)
    # Trained without the characters its vocabulary lacks: scored so too.
    source = encodable_text(text.text, model.tokenizer) if card.skips_unknown else text.text
    corpus = Corpus.from_text(source, model.tokenizer, card.train_fraction)
    # The recipe's windows and the card's context, or fewer where they would cost more
    # than the budget (an imported model of 8,192 tokens): half of it for the losses.
    shape = shape_of(model)
    default_windows = recipe_windows(card)
    sizing = size_windows(shape, windows, context, default_windows, passes=2, budget=COMPUTE_BUDGET / 2)
    count, context = sizing.windows, sizing.context
    unbounded = is_unbounded(model.network)
    losses = {}
    if progress is not None:
        batches = 2 if unbounded else 2 * math.ceil(count / sizing.batch_size)
        progress.stage(f"loss on {count} windows per split ({context} tokens each)", batches)
    for split in ("train", "validation"):
        tokens = corpus.split(split)
        if unbounded:
            losses[split] = _carried_loss(model.network, tokens, context, count)
            if progress is not None:
                progress.advance()
        else:
            inputs, targets = fixed_windows(tokens, context, count)
            losses[split] = mean_loss(model.network, inputs, targets, sizing.batch_size, progress)
    uniform = math.log(card.tokenizer.vocab_size)
    if text_chars is None:  # all of the validation text, or as much as the other half of the budget scores
        whole, _ = validation_text(source, card.train_fraction)
        text_chars = text_characters(shape, len(whole), len(corpus.split("validation")), context)
        sizing_note = sizing.note(shape, default_windows)
        if text_chars is not None:
            sizing_note = (sizing_note + "; " if sizing_note else "sized to the budget: ") + (
                f"bits per byte on the first {text_chars:,} of {len(whole):,} validation characters"
            )
    else:
        sizing_note = sizing.note(shape, default_windows)
    if sizing_note is not None:
        sizing_note += "; --windows, --context and --text-chars ask for more"
    scored, before = validation_text(source, card.train_fraction, text_chars)  # the text read once, above
    bits = bits_per_byte(model, scored, before, progress=progress, context=context)
    report = {
        "train_loss": losses["train"],
        "validation_loss": losses["validation"],
        "validation_perplexity": math.exp(losses["validation"]),
        "uniform_loss": uniform,
        "uniform_perplexity": float(card.tokenizer.vocab_size),
        "windows": count,
        "context_kind": UNBOUNDED if unbounded else BOUNDED,
        "loss_context": (
            f"the first {count} × {context} tokens of each split read as one text, state carried"
            if unbounded
            else f"{count} windows of {context} tokens per split, each read from its start"
        ),
        "dataset": text.name,
        "dataset_sha256": text.sha256,
        "loss_unit": card.metrics.loss_unit,
        "validation_bits_per_byte": bits["bits_per_byte"],
        "validation_bits_per_character": bits["bits_per_character"],
        "bits_scored_characters": bits["characters"],
        "bits_context": bits["context"],
    }
    if sizing_note is not None:  # only where a default was cut: the built-in variants' reports are unchanged
        report["sizing"] = sizing_note
    return report


def recipe_windows(card) -> int:
    """The evaluation windows the card's recipe names, or the zoo's default where
    it names none (an imported card carries no training recipe)."""
    return card.recipe.eval_windows if card.recipe is not None else DEFAULT_WINDOWS


def _carried_loss(network, tokens, context: int, count: int) -> float:
    """Mean nats per token of an unbounded model over the first ``count`` windows'
    worth of a split, read as one text: each token predicted from all before it."""
    length = min(len(tokens) - 1, count * context)
    if length < 1:
        raise ZooError(f"a split of {len(tokens)} tokens is too short to score")
    return carried_nll(network, tokens[: length + 1].tolist(), 1, context) / length


def recordable_registry(variant) -> Path:
    """The registry file `zoo eval --record` may rewrite for ``variant``: one of the
    user's own (their catalogue, a file they named, a checkout's registry.toml).
    A card shipped inside an installed package (the zoo's wheel, a plugin) is
    refused before any scoring, saying how to record on a copy of one's own: pip
    owns those files, and declaring the name again in the user's catalogue
    would be refused as declared twice."""
    if variant.layer == "plugin" or inside_installed_package(variant.source):
        name = variant.name
        raise ZooError(
            f"--record: '{name}' is declared in {variant.source}, inside an installed package, which the zoo never "
            f"rewrites; `zoo eval {name} --json` keeps the measurement, or record it on a copy of your own: "
            f"`zoo pack {name}`, `zoo install {name}.zoo --name my-{name}`, `zoo eval my-{name} --record`"
        )
    return variant.source


def record_bits_per_byte(model, report: dict) -> Path:
    """Write the measured bits per byte and per character into the variant's
    card in its own registry file (``recordable_registry``). The checkpoint is
    not rewritten: these metrics are left out when its header's card is
    compared with the registry's."""
    registry = recordable_registry(model.variant)
    card = model.card.model_copy(deep=True)
    card.metrics.validation_bits_per_byte = round(report["validation_bits_per_byte"], 4)
    card.metrics.validation_bits_per_character = round(report["validation_bits_per_character"], 4)
    with exclusive_lock(registry):
        upsert_registry_entry(registry, card)
    return registry
