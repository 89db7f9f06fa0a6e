"""What every import shares: a card for weights trained elsewhere, written to the
user's catalogue, and a check that the name is free."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from ..catalogue.card_validation import describe_validation_error
from ..catalogue.cards import (
    EVALUATION_DATASET,
    CheckpointRef,
    ComponentSource,
    ImportRecord,
    ModelCard,
    Recipe,
    TokenizerSpec,
)
from ..catalogue.limits import limits
from ..catalogue.publishing import refuse_overwrite
from ..catalogue.registry import Variant
from ..errors import ZooError, printable
from ..loading.api import build_network, catalogue
from ..plugin_api.families import FamilyRecord
from ..plugin_api.manager import get_plugins
from ..plugin_api.sources import component_sources
from ..storage.checkpoints import expected_shapes, logical_parameters, shape_report, tied_names
from ..storage.files import describe_os_error, read_limited
from ..storage.initialisation import random_init_skipped
from ..storage.locations import user_registry_path
from ..storage.user_catalogue import USER_PLUGIN, add_user_variant

BUILTIN_CORPUS = EVALUATION_DATASET  # the registered dataset nanoGPT's Shakespeare checkpoints were trained on
MAX_JSON_TOKENIZER_BYTES = 64 * 1024 * 1024  # a character list or a tokenizer.json (Qwen2's is 7 MB)


def builtin_char_vocabulary() -> Path:
    """The built-in catalogue's 65-character vocabulary file (nanoGPT's
    shakespeare_char one), found through the catalogue wherever it is installed."""
    for variant in catalogue():
        spec = variant.card.tokenizer
        if variant.layer == "built-in" and spec.kind == "char" and spec.vocab_size == 65 and variant.tokenizer_path:
            return variant.tokenizer_path
    raise ZooError("the built-in catalogue has no 65-character vocabulary; give the tokenizer with --tokenizer FILE")


MAX_NAME_CHARS = 200


def check_name_is_free(name: str, replace: bool = False) -> None:
    """A name lives in one layer only: an import may replace the user's own
    variant of that name (with ``replace``: `--replace`), never a built-in or plugin one."""
    if not re.fullmatch(ModelCard.model_fields["name"].metadata[0].pattern, name):
        raise ZooError(
            f"--name '{printable(name)}': a variant name is lower-case letters, digits, '-' and '.', "
            "starting with a letter or digit"
        )
    # Its files are NAME.safetensors and NAME.tokenizer.json, and a file name has at most 255 bytes.
    if len(name) > MAX_NAME_CHARS:
        raise ZooError(f"--name '{printable(name, 40)}': a variant name has at most {MAX_NAME_CHARS} characters")
    try:
        existing = catalogue().get(name)
    except ZooError:
        return
    if existing.layer != USER_PLUGIN:
        raise ZooError(f"variant '{name}' already exists (plugin '{existing.plugin}'); choose another --name")
    if not replace and existing.card.checkpoint.sha256 is not None:
        refuse_overwrite(existing)


def tokenizer_for_vocabulary(vocab_size: int, tokenizer_file: Path | None) -> tuple[TokenizerSpec, Path]:
    """The tokenizer an imported model reads: the file given, or (for 65 tokens)
    the zoo's character vocabulary, which is exactly nanoGPT's shakespeare_char
    one (the sorted characters of the same corpus)."""
    if tokenizer_file is None:
        if vocab_size != 65:
            raise ZooError(
                f"the checkpoint has {vocab_size} tokens; give its tokenizer with --tokenizer FILE "
                "(a zoo character vocabulary .json, a tiktoken ranks file or a Hugging Face tokenizer.json)"
            )
        tokenizer_file = builtin_char_vocabulary()
    if not tokenizer_file.is_file():
        raise ZooError(f"{tokenizer_file}: tokenizer file not found")
    kind = tokenizer_kind(tokenizer_file)
    bos_id = added_bos(tokenizer_file) if kind == "hf" else None  # the zoo's own kinds have none
    return TokenizerSpec(kind=kind, vocab_size=vocab_size, file=str(tokenizer_file), bos_id=bos_id), tokenizer_file


# Any text the tokenizer encodes to at least one token will do.
_BOS_PROBE = "Hello"


def tokenizer_backend(path: Path):
    """The Hugging Face `tokenizers` object of a tokenizer.json (the gguf and hf
    extras' package: imported here, as imports.py is on every export's path too)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def added_bos(path: Path) -> int | None:
    """The token a Hugging Face tokenizer.json puts before a text it encodes with
    special tokens (its post-processor: transformers' ``add_special_tokens=True``;
    a GGUF's ``tokenizer.ggml.add_bos_token`` is written there), or None. The zoo
    encodes without them, so the card records it (``TokenizerSpec.bos_id``) and
    prompts get it from there."""
    try:
        backend = tokenizer_backend(path)
        plain = backend.encode(_BOS_PROBE, add_special_tokens=False).ids
        framed = backend.encode(_BOS_PROBE).ids
    except Exception:  # a file it cannot read is refused, in one line, when the tokenizer is built
        return None
    if plain and len(framed) > len(plain) and framed[1 : len(plain) + 1] == plain:
        return framed[0]
    return None


def tokenizer_kind(path: Path) -> str:
    """Which registered tokenizer reads the file: a Hugging Face tokenizer.json
    (a JSON object with a "model") is 'hf', another .json the zoo's character
    list ('char'), anything else tiktoken ranks ('bpe')."""
    if path.suffix != ".json":
        return "bpe"
    try:
        data = json.loads(read_limited(path, MAX_JSON_TOKENIZER_BYTES, "tokenizer file"))
    except OSError as exc:
        raise ZooError(f"{path}: cannot read tokenizer file: {describe_os_error(exc)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ZooError(f"{path}: damaged tokenizer file: not JSON") from None
    return "hf" if isinstance(data, dict) and "model" in data else "char"


def check_tokenizer(spec: TokenizerSpec, path: Path) -> None:
    """Build the tokenizer now: a file of another size is refused before anything is written."""
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
    recipe: Recipe | None,
    *,
    architecture: str,
    family: str | None = None,
    license: str = "unspecified",
    notes: str = "",
    hub_repository: str | None = None,
) -> ModelCard:
    """The card of an import, validated as any card is: an impossible
    configuration (``n_head 0``, ``n_layer -1``, a NaN epsilon) is one line.
    Its ``imported`` section says where the weights came from; ``recipe`` is
    None unless the source recorded how they were trained (nanoGPT's): a recipe
    the zoo made up would set evaluation's defaults and describe the model in
    its exports as trained on a text it never saw."""
    for key, value in config.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ZooError(f"{source}: configuration {key} is {value}; a model needs a finite number there")
    # A file name need not be UTF-8; the card is text, and holds it escaped.
    shown = os.fsencode(source.name).decode("utf-8", "backslashreplace")
    try:
        card = ModelCard(
            name=name,
            description=f"Imported from a {origin} checkpoint ({shown}).",
            architecture=architecture,
            family=family,
            config=config,
            tokenizer=tokenizer,
            context_length=context_length,
            recipe=recipe,
            imported=ImportRecord(
                format=origin, file=shown, sha256=source_sha256, notes=notes, hub_repository=hub_repository
            ),
            checkpoint=CheckpointRef(path=f"checkpoints/{name}.safetensors"),
            parameters=parameters,
            lineage=f"imported: {origin} checkpoint {shown}, source sha256 {source_sha256}",
            license=license,  # the weights' owner decides; the zoo never assumes one
            tags=["imported", origin.lower().replace(" ", "-")],
        )
    except ValidationError as exc:
        raise ZooError(f"{source}: cannot import: {describe_validation_error(exc)}") from None
    return card.model_copy(update={"components": imported_components(card)})


HUB_URL = re.compile(r"https?://huggingface\.co/([A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*)/?")


def hub_repository_of(*urls: str | None) -> str | None:
    """ORG/NAME of the first Hugging Face Hub address among ``urls`` (a source's own
    metadata); None when none is one: the zoo never guesses a repository from a name."""
    for url in urls:
        found = HUB_URL.fullmatch(url.strip()) if url else None
        if found:
            return found.group(1)
    return None


def _storage_key(tensor: torch.Tensor) -> tuple:
    """What one tensor under two names (a tied head) shares: its storage, offset and shape."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))


def check_tensors_are_dense(source: Path, tensors: dict[str, Any]) -> None:
    """Refuse, before any tensor is copied, what would make a small file a huge
    checkpoint: a sparse tensor, or a view larger than the data stored for it
    (``torch.zeros(1).expand(10**9)`` is one float in the file and 4 GB once
    made contiguous); and tensors that together exceed the parameter limit."""
    max_parameters, _ = limits()
    total, seen = 0, set()
    for name, tensor in tensors.items():
        shown = printable(str(name))
        if not isinstance(tensor, torch.Tensor):
            raise ZooError(f"{source}: '{shown}' is a {type(tensor).__name__}, not a tensor")
        if tensor.layout != torch.strided:
            raise ZooError(f"{source}: tensor '{shown}' is sparse ({tensor.layout}); only dense tensors import")
        view, stored = tensor.numel() * tensor.element_size(), tensor.untyped_storage().nbytes()
        if view > stored:
            raise ZooError(
                f"{source}: tensor '{shown}' is a view of {view:,} bytes over {stored:,} bytes of data "
                f"(an expanded tensor); refused rather than made whole"
            )
        key = _storage_key(tensor)
        if key not in seen:  # tied weights are one tensor under two names
            seen.add(key)
            total += tensor.numel()
    if total > max_parameters:
        raise ZooError(
            f"{source}: {total:,} values, more than the limit of {max_parameters:,} parameters "
            f"(raise it with --max-parameters or ZOO_MAX_PARAMETERS if you mean it)"
        )


def count_parameters(tensors: dict[str, Any]) -> int:
    """The values the tensors hold, a tied tensor (one tensor under two names) counted once."""
    seen, total = set(), 0
    for tensor in tensors.values():
        key = _storage_key(tensor)
        if key not in seen:
            seen.add(key)
            total += tensor.numel()
    return total


def check_card_fits_tensors(
    source: Path, card: ModelCard, tensors: dict[str, Any], family: FamilyRecord, prepare=None, shaped=None
) -> torch.nn.Module:
    """The configuration describes exactly these tensors: the family's count of
    layers, width and window first (a 4,672-parameter file that claims a billion
    layers is refused before anything is built), then the network the card
    builds (within the size limits), name by name and shape by shape, and its
    parameter count. Returns that network (its weights freshly initialised), for
    an import that runs it. ``prepare(network)``, when given, adapts the built
    network first (a GGUF import's packed layers: zoo_core.loading.packed_modules),
    and ``shaped`` stands for ``tensors`` in the family's size check (their values' shapes)."""
    problem = family.size_problem(card.config, card.context_length, tensors if shaped is None else shaped)
    if problem:
        raise ZooError(f"{source}: {problem}")
    with random_init_skipped():  # its weights are replaced: no page of them need be touched
        network = build_network(Variant(card, user_registry_path(), USER_PLUGIN, layer="user"))
    if prepare is not None:
        prepare(network)
    expected = expected_shapes(network.state_dict(), tied_names(network), tensors)  # a tied head: stored once or twice
    problem = shape_report(source, expected, {n: tuple(t.shape) for n, t in tensors.items()})
    if problem:
        raise ZooError(f"{problem} (the configuration does not describe this checkpoint)")
    built = logical_parameters(network)
    if built != card.parameters:
        raise ZooError(f"{source}: the configuration builds {built:,} parameters, the file holds {card.parameters:,}")
    return network


def imported_components(card: ModelCard) -> dict[str, ComponentSource]:
    """The plugins that build the imported weights here. No trainer: the weights
    were trained elsewhere, and the card's default recipe kind did not make them."""
    sources = component_sources(card, get_plugins())
    sources.pop("trainer", None)
    return {role: ComponentSource(**source) for role, source in sources.items()}


def publish_import(
    card: ModelCard, tensors: dict, tokenizer_file: Path, metadata: dict[str, str] | None = None
) -> Path:
    # Tied embeddings share one tensor; safetensors stores each name's own copy.
    copies = {name: tensor.detach().clone() for name, tensor in tensors.items()}
    return add_user_variant(card, copies, tokenizer_file, metadata=metadata)
