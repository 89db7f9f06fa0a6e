"""`zoo compare`: several variants scored on exactly the same text.

Every model sees the same sampled train and validation windows, cut to the
shortest context among them so that each prediction has the same history; the
deltas are against the first model named. Then each continues the same prompt
with the same sampling seed. Losses per token only compare across models that
share a tokenizer: variants with different tokenizers (or any, with
``bits_per_byte``) are scored instead in bits per byte on the same validation
text, by the method of `zoo_core.evaluation.bits`; so are variants among which
one carries a state (``context_kind = "unbounded"``): windows cut for the others
would withhold its history, while on the validation text each model predicts
every token with its own kind of context, and each result says which.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import torch

from ..corpus.batches import Corpus, encodable_text, mean_loss, windows_at
from ..corpus.datasets import ResolvedText
from ..errors import ZooError
from ..inference.carried import is_unbounded
from ..inference.settings import SamplingSettings
from ..loading.api import load_many
from ..loading.texts import variant_text
from ..plugin_api.protocols import TaskModel, implements
from ..seeding import seeded_generator
from .bits import METHOD, bits_per_byte, validation_text
from .budget import COMPUTE_BUDGET, batch_size, default_context, shape_of, size_windows
from .scoring import DEFAULT_WINDOWS


def _shared_tokenizer(models) -> str | None:
    """None when every model shares the first one's tokenizer, else why not."""
    try:
        _check_shared_tokenizer(models)
    except ZooError as exc:
        return str(exc)
    return None


def _check_shared_tokenizer(models) -> None:
    first = models[0].card.tokenizer
    for model in models[1:]:
        spec = model.card.tokenizer
        if (spec.kind, spec.vocab_size) != (first.kind, first.vocab_size):
            raise ZooError(
                f"'{models[0].name}' ({first.kind}, {first.vocab_size} tokens) and '{model.name}' "
                f"({spec.kind}, {spec.vocab_size} tokens) use different tokenizers: their losses per token are not comparable"
            )
        if model.variant.tokenizer_path and models[0].variant.tokenizer_path:
            if model.variant.tokenizer_path.read_bytes() != models[0].variant.tokenizer_path.read_bytes():
                raise ZooError(f"'{models[0].name}' and '{model.name}' use different {spec.kind} vocabularies")


def shared_text(models, override: Path | str | None) -> ResolvedText:
    """The one text every model is scored on: ``override`` (``--data NAME|PATH``)
    when given, else the dataset all their cards name.
    Variants trained on different text are refused, whatever the order they are
    named in: the first one's text would favour it."""
    if override is not None:
        return variant_text(models[0].variant, override)
    texts = [variant_text(model.variant) for model in models]
    for model, text in zip(models[1:], texts[1:]):
        if text.sha256 != texts[0].sha256:
            raise ZooError(
                f"'{models[0].name}' was trained on {texts[0].name} and '{model.name}' on {text.name} "
                f"(sha256 {texts[0].sha256[:12]}… and {text.sha256[:12]}…); choose the text to score both on "
                f"with --data NAME|PATH"
            )
    return texts[0]


@contextlib.contextmanager
def _scoring(names: list[str], text: ResolvedText) -> Iterator[None]:
    """A text a model cannot score (characters its vocabulary lacks) is refused
    naming the model and the text, not only the characters."""
    try:
        yield
    except ZooError as exc:
        who = " and ".join(f"'{name}'" for name in names)
        raise ZooError(f"{who} cannot be scored on {text.name}: {exc}") from None


def shared_windows(tokens: torch.Tensor, context: int, count: int, generator: torch.Generator):
    starts = torch.randint(len(tokens) - context, (count,), generator=generator)
    return windows_at(tokens, starts, context)


def compare_variants(
    names: list[str],
    windows: int | None = None,
    seed: int = 42,
    prompt: str | None = None,
    max_new_tokens: int = 100,
    data: Path | str | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    bits_per_byte: bool = False,
    text_chars: int | None = None,
    context: int | None = None,
    progress=None,
) -> dict:
    """``context``: score with at most this many tokens of context (default: each card's).
    ``windows``, ``context`` and ``text_chars`` not given are sized to the models within the
    compute budget and memory bound (zoo_core.evaluation.budget); ``progress`` (a
    WorkProgress) is told of each batch."""
    if len(names) < 2:
        raise ZooError("compare needs at least two variants")
    if windows is not None and windows < 1:
        raise ZooError(f"windows must be at least 1, not {windows}")
    if text_chars is not None and text_chars < 1:
        raise ZooError(f"--text-chars must be at least 1, not {text_chars}")
    if context is not None and context < 1:
        raise ZooError(f"--context must be at least 1, not {context}")
    # Every model draws its sample with these same settings (temperature 1).
    sampling = SamplingSettings(max_new_tokens=max_new_tokens, seed=seed)
    models = load_many(names, device=device, dtype=dtype)  # an adapter shares its base's weights
    for model in models:
        if implements(model.network, TaskModel):
            raise ZooError(f"'{model.name}' answers questions rather than predicting text; it has no loss to compare")
    different = _shared_tokenizer(models)
    carrying = [model.name for model in models if is_unbounded(model.network)]
    if carrying and not different:
        different = (
            f"{' and '.join(repr(name) for name in carrying)} carr{'ies' if len(carrying) == 1 else 'y'} a state "
            f"rather than a window (context_kind 'unbounded'), so windows are not a shared measure"
        )
    if different or bits_per_byte:
        return compare_in_bits_per_byte(models, different, sampling, prompt, data, text_chars, context, progress)
    first = models[0]
    shapes = [shape_of(model) for model in models]
    # Sized as one model as costly per token as the costliest, read once per split per model.
    costliest = max(shapes, key=lambda s: s.flops_per_token(1))
    shared = replace(costliest, context=min(s.context for s in shapes))
    asked = min(context, shared.context) if context else None  # more than the shortest card reads: all it reads
    sizing = size_windows(shared, windows, asked, DEFAULT_WINDOWS, passes=2 * len(models))
    context, windows = sizing.context, sizing.windows
    batch = min(batch_size(s, context) for s in shapes)
    text = shared_text(models, data)
    # A fine-tune that dropped the characters its vocabulary lacks is compared on the
    # text without them, as it was trained: every model sees the same tokens.
    skip_unknown = any(model.card.skips_unknown for model in models)
    source = encodable_text(text.text, first.tokenizer) if skip_unknown else text.text
    with _scoring([model.name for model in models], text):
        corpus = Corpus.from_text(source, first.tokenizer, first.card.train_fraction)
    # A generator of its own: comparing never moves any other random stream.
    generator = seeded_generator(seed)
    batches = {
        split: shared_windows(corpus.split(split), context, windows, generator) for split in ("train", "validation")
    }
    if prompt is None:
        prompt = first.tokenizer.decode(corpus.train[:context].tolist())
    results = []
    if progress is not None:
        progress.stage(
            f"loss on {windows} windows per split ({context} tokens each)", 2 * len(models) * math.ceil(windows / batch)
        )
    for model in models:
        losses = {
            split: mean_loss(model.network, inputs, targets, batch, progress)
            for split, (inputs, targets) in batches.items()
        }
        results.append(
            {
                "name": model.name,
                **parameter_counts(model),
                "train_loss": losses["train"],
                "validation_loss": losses["validation"],
                "sample": model.generate(prompt, sampling),
            }
        )
    for result in results:
        for split in ("train", "validation"):
            result[f"{split}_delta"] = result[f"{split}_loss"] - results[0][f"{split}_loss"]
    return {
        "context": context,
        "windows": windows,
        "seed": seed,
        "unit": f"nats per {first.card.tokenizer.kind} token",
        "dataset": text.name,
        "dataset_sha256": text.sha256,
        "prompt": prompt,
        "baseline": first.name,
        "models": results,
        **({"sizing": note} if (note := sizing.note(shared, DEFAULT_WINDOWS)) else {}),
    }


def parameter_counts(model) -> dict[str, int]:
    """The parameters as `zoo list` and `zoo show` count them (the card's ``parameters``):
    an adapter variant's are the adapter's own, which is what it adds and what its
    file holds; its base's (``base_parameters``) are given beside them."""
    if model.card.adapter is None:
        return {"parameters": model.parameters()}
    own = model.card.parameters
    return {"parameters": own, "base_parameters": model.parameters() - own}


def compare_in_bits_per_byte(models, why, sampling, prompt, data, text_chars, context=None, progress=None) -> dict:
    """Every model scores the same validation text (its first ``text_chars``
    characters, or all of it) in bits per byte with its own tokenizer, from at most
    ``context`` tokens of its own (default: its card's context length)."""
    first = models[0]
    source = shared_text(models, data)  # never silently the first one's text: theirs differ, or it is named
    shapes = [shape_of(model) for model in models]
    contexts = [min(context, s.context) if context else default_context(s) for s in shapes]
    sized = None
    if text_chars is None:  # all of the validation text, or its start where scoring all would pass the budget
        whole, _ = validation_text(source.text, first.card.train_fraction)
        cost = 0.0
        for model, shape, length in zip(models, shapes, contexts):
            with _scoring([model.name], source):  # a text the model cannot spell is refused naming both
                cost += 2.0 * len(model.tokenizer.encode(whole)) * shape.flops_per_token(length)
        if cost > COMPUTE_BUDGET:
            text_chars = max(1, int(len(whole) * COMPUTE_BUDGET / cost))
            sized = (
                f"sized to the budget ({COMPUTE_BUDGET:.0e} operations): the first {text_chars:,} of "
                f"{len(whole):,} validation characters; --text-chars asks for more"
            )
    text, before = validation_text(source.text, first.card.train_fraction, text_chars)
    results = []
    try:
        for model, model_context in zip(models, contexts):
            if progress is not None:
                progress.name = model.name
            with _scoring([model.name], source):
                score = bits_per_byte(model, text, before, progress=progress, context=model_context)
            results.append(
                {
                    "name": model.name,
                    **parameter_counts(model),
                    "tokenizer": model.card.tokenizer.kind,
                    **score,
                    "sample": model.generate(prompt or before[:100], sampling),
                }
            )
    finally:
        if progress is not None:
            progress.close()
    for result in results:
        result["bits_per_byte_delta"] = result["bits_per_byte"] - results[0]["bits_per_byte"]
    return {
        "unit": "bits per byte",
        "reason": (why + "; scored in bits per byte instead") if why else "bits per byte requested",
        "method": METHOD,
        "dataset": source.name,
        "dataset_sha256": source.sha256,
        "text": f"the first {len(text):,} characters ({len(text.encode('utf-8')):,} bytes) of the validation split",
        "seed": sampling.seed,
        "prompt": prompt or before[:100],
        "baseline": first.name,
        "models": results,
        **({"sizing": sized} if sized else {}),
    }
