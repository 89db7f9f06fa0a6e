"""`zoo train`: from a card's recipe to a checkpoint and a card with measured metrics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .api import build_network, catalogue, load_tokenizer
from .cards import Metrics, ModelCard
from .checkpoints import save_checkpoint
from .data import Corpus, read_corpus_text
from .errors import ZooError
from .files import atomic_write_text, exclusive_lock
from .plugin_manager import get_plugins
from .registry import upsert_registry_entry
from .training import Progress, StandardTrainer, resolve_data_path, seeded_network


def train_variant(
    name: str,
    *,
    steps: int | None = None,
    seed: int | None = None,
    data: Path | None = None,
    out_dir: Path | None = None,
    publish: bool = False,
    show_progress: bool = True,
) -> tuple[ModelCard, Path]:
    """Train ``name`` from scratch and write its checkpoint and card.

    By default the result goes to ``out_dir`` (``runs/NAME``) as a one-variant
    registry that `ZOO_REGISTRY` can point at; ``publish`` replaces the variant's
    own checkpoint and registry entry instead. Returns the new card and the
    registry file that holds it.
    """
    plugins = get_plugins()
    variant = catalogue(plugins).get(name)
    card = variant.card
    if card.recipe.kind != "trained":
        raise ZooError(f"variant '{name}' is {card.recipe.kind}; it has no training recipe")
    overrides = {key: value for key, value in (("steps", steps), ("seed", seed)) if value is not None}
    if data is not None:
        overrides["data"] = str(data)
    recipe = card.recipe.model_validate({**card.recipe.model_dump(), **overrides})

    tokenizer = load_tokenizer(variant, plugins)
    text = read_corpus_text(resolve_data_path(card.recipe, variant.source, data))
    corpus = Corpus.from_text(text, tokenizer, recipe.train_fraction)
    network = seeded_network(lambda: build_network(variant, plugins), recipe.seed)
    progress = Progress(name, recipe.steps, enabled=show_progress)
    result = StandardTrainer().train(network, recipe, corpus, card.context_length, progress)

    final = result.final
    metrics = Metrics(
        train_loss=round(final["train"], 4),
        validation_loss=round(final["validation"], 4),
        training_seconds=round(result.update_seconds, 1),
        tokens_per_second=round(result.tokens_per_second),
    )
    new_card = card.model_copy(
        update={"recipe": recipe, "metrics": metrics, "parameters": sum(p.numel() for p in network.parameters())}
    )

    if publish:
        registry_file, checkpoint_path = variant.source, variant.checkpoint_path
    else:
        out_dir = (out_dir or Path("runs") / name).resolve()
        registry_file, checkpoint_path = out_dir / "registry.toml", out_dir / f"{name}.safetensors"
        tokenizer_update = {}
        if variant.tokenizer_path is not None:
            copied = out_dir / variant.tokenizer_path.name
            out_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(variant.tokenizer_path, copied)
            tokenizer_update = {"tokenizer": new_card.tokenizer.model_copy(update={"file": copied.name})}
        new_card = new_card.model_copy(update=tokenizer_update)
    new_card = new_card.model_copy(
        update={"checkpoint": new_card.checkpoint.model_copy(update={"path": _relative(checkpoint_path, registry_file.parent)})}
    )

    with exclusive_lock(registry_file):
        sha = save_checkpoint(checkpoint_path, network.state_dict(), new_card.header_json())
        new_card = new_card.model_copy(update={"checkpoint": new_card.checkpoint.model_copy(update={"sha256": sha})})
        upsert_registry_entry(registry_file, new_card)
    history_path = checkpoint_path.with_suffix(".history.json")
    atomic_write_text(history_path, json.dumps({"variant": name, "recipe": recipe.model_dump(), "history": result.history}, indent=1) + "\n")
    return new_card, registry_file


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())
