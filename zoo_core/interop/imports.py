"""What every import shares: a card for weights trained elsewhere, written to the
user's catalogue, and a check that the name is free."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..catalogue.cards import CheckpointRef, ComponentSource, ModelCard, Recipe, TokenizerSpec
from ..catalogue.user import USER_PLUGIN, add_user_variant
from ..errors import ZooError

BUILTIN_CORPUS = "tinyshakespeare"  # the registered dataset imported models are scored on


def builtin_char_vocabulary() -> Path:
    """The built-in catalogue's 65-character vocabulary file (nanoGPT's
    shakespeare_char one), found through the catalogue wherever it is installed."""
    from ..api import catalogue

    for variant in catalogue():
        spec = variant.card.tokenizer
        if variant.layer == "built-in" and spec.kind == "char" and spec.vocab_size == 65 and variant.tokenizer_path:
            return variant.tokenizer_path
    raise ZooError("the built-in catalogue has no 65-character vocabulary; give the tokenizer with --tokenizer FILE")


def check_name_is_free(name: str) -> None:
    """A name lives in one layer only: an import may replace the user's own
    variant of that name, never a built-in or plugin one."""
    from ..api import catalogue

    if not re.fullmatch(ModelCard.model_fields["name"].metadata[0].pattern, name):
        raise ZooError(
            f"--name '{name}': a variant name is lower-case letters, digits, '-' and '.', starting with a letter or digit"
        )
    try:
        existing = catalogue().get(name)
    except ZooError:
        return
    if existing.layer != USER_PLUGIN:
        raise ZooError(f"variant '{name}' already exists (plugin '{existing.plugin}'); choose another --name")


def tokenizer_for_vocabulary(vocab_size: int, tokenizer_file: Path | None) -> tuple[TokenizerSpec, Path]:
    """The tokenizer an imported model reads: the file given, or (for 65 tokens)
    the zoo's character vocabulary, which is exactly nanoGPT's shakespeare_char
    one (the sorted characters of the same corpus)."""
    if tokenizer_file is None:
        if vocab_size != 65:
            raise ZooError(
                f"the checkpoint has {vocab_size} tokens; give its tokenizer with --tokenizer FILE "
                "(a zoo character vocabulary .json or a tiktoken ranks file)"
            )
        tokenizer_file = builtin_char_vocabulary()
    if not tokenizer_file.is_file():
        raise ZooError(f"{tokenizer_file}: tokenizer file not found")
    kind = "char" if tokenizer_file.suffix == ".json" else "bpe"
    return TokenizerSpec(kind=kind, vocab_size=vocab_size, file=str(tokenizer_file)), tokenizer_file


def check_tokenizer(spec: TokenizerSpec, path: Path) -> None:
    """Build the tokenizer now: a file of another size is refused before anything is written."""
    from ..plugin_api.manager import get_plugins

    get_plugins().components["tokenizers"].create(spec.kind, spec, path)


def imported_card(
    name: str,
    config: dict[str, Any],
    context_length: int,
    tokenizer: TokenizerSpec,
    parameters: int,
    source: Path,
    source_sha256: str,
    origin: str,
    recipe: Recipe,
    license: str = "unspecified",
) -> ModelCard:
    card = ModelCard(
        name=name,
        description=f"Imported from a {origin} checkpoint ({source.name}).",
        architecture="gpt",
        config=config,
        tokenizer=tokenizer,
        context_length=context_length,
        recipe=recipe,
        checkpoint=CheckpointRef(path=f"checkpoints/{name}.safetensors"),
        parameters=parameters,
        lineage=f"imported: {origin} checkpoint {source.name}, source sha256 {source_sha256}",
        license=license,  # the weights' owner decides; the zoo never assumes one
        tags=["imported", origin.lower().replace(" ", "-")],
    )
    return card.model_copy(update={"components": imported_components(card)})


def imported_components(card: ModelCard) -> dict[str, ComponentSource]:
    """The plugins that build the imported weights here. No trainer: the weights
    were trained elsewhere, and the card's default recipe kind did not make them."""
    from ..plugin_api.manager import get_plugins
    from ..plugin_api.sources import component_sources

    sources = component_sources(card, get_plugins())
    sources.pop("trainer", None)
    return {role: ComponentSource(**source) for role, source in sources.items()}


def publish_import(card: ModelCard, tensors: dict, tokenizer_file: Path) -> Path:
    # Tied embeddings share one tensor; safetensors stores each name's own copy.
    copies = {name: tensor.detach().clone() for name, tensor in tensors.items()}
    return add_user_variant(card, copies, tokenizer_file)
