"""`zoo train`: from a card's recipe to a checkpoint and a card with measured metrics.

A run holds a lock on its destination for as long as it trains, so a second run
of the same variant into the same place is refused at once instead of both
overwriting each other; every few steps it writes its resumable state beside
the destination, so `--resume` after a crash or a kill loses only the steps
since then.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .api import build_network, catalogue, load_tokenizer
from .cards import Metrics, ModelCard
from .checkpoints import save_checkpoint
from .data import Corpus, read_corpus_text
from .errors import ZooError
from .files import atomic_copy, atomic_write_text, exclusive_lock, remove_stale_temporaries
from .plugin_manager import get_plugins
from .registry import Variant, upsert_registry_entry
from .training import Progress, StandardTrainer, resolve_data_path, seeded_network
from .trainstate import read_training_state, run_identity, training_state_path, write_training_state


def train_variant(
    name: str,
    *,
    steps: int | None = None,
    seed: int | None = None,
    data: Path | None = None,
    out_dir: Path | None = None,
    publish: bool = False,
    show_progress: bool = True,
    resume: bool = False,
    checkpoint_every: int | None = None,
    interim_eval_windows: int | None = None,
    compile: bool = False,
) -> tuple[ModelCard, Path]:
    """Train ``name`` and write its checkpoint and card.

    By default the result goes to ``out_dir`` (``runs/NAME``) as a one-variant
    registry that `ZOO_REGISTRY` can point at; ``publish`` replaces the variant's
    own checkpoint and registry entry instead. Every ``checkpoint_every`` steps
    (default: the recipe's ``eval_every``; 0: never) the run's state is saved
    beside the checkpoint, and ``resume`` continues from it. Returns the new card
    and the registry file that holds it. ``interim_eval_windows`` and
    ``compile`` are passed to the trainer (`StandardTrainer.train`).
    """
    plugins = get_plugins()
    variant = catalogue(plugins).get(name)
    card = variant.card
    if card.recipe.kind != "trained":
        raise ZooError(f"variant '{name}' is {card.recipe.kind}; it has no training recipe")
    if interim_eval_windows is not None and interim_eval_windows < 1:
        raise ZooError(f"--interim-eval-windows must be at least 1, not {interim_eval_windows}")
    if checkpoint_every is not None and checkpoint_every < 0:
        raise ZooError(f"--checkpoint-every must be a number of steps (0: never), not {checkpoint_every}")
    overrides = {key: value for key, value in (("steps", steps), ("seed", seed)) if value is not None}
    if data is not None:  # recorded absolute: the recipe's path is read relative to the registry file
        data = data.resolve()
        overrides["data"] = str(data)
    recipe = card.recipe.model_validate({**card.recipe.model_dump(), **overrides})
    registry_file, checkpoint_path = _destination(variant, publish, out_dir)
    state_path = training_state_path(checkpoint_path)
    if resume and not state_path.exists():  # checked first: nothing is written for a run that cannot start
        raise ZooError(f"{state_path}: nothing to resume (no training state; `zoo train {name}` writes one every --checkpoint-every steps)")

    tokenizer = load_tokenizer(variant, plugins)
    text = read_corpus_text(resolve_data_path(card.recipe, variant.source, data))
    corpus = Corpus.from_text(text, tokenizer, recipe.train_fraction)
    identity = run_identity(card, recipe, text)
    network = seeded_network(lambda: build_network(variant, plugins), recipe.seed)

    with exclusive_lock(checkpoint_path, wait=False):  # one run per destination, for the whole run
        for path in (state_path, checkpoint_path):  # left by a run killed while writing them
            remove_stale_temporaries(path)
        state = read_training_state(state_path, identity, network) if resume else None
        if show_progress and state is not None:
            print(f"{name}: resuming at step {state.step + 1} of {recipe.steps} from {state_path}", file=sys.stderr)
        elif show_progress and state_path.exists():
            print(f"{name}: note: starting over; {state_path} (an interrupted run) will be overwritten; "
                  f"--resume continues it instead", file=sys.stderr)
        every = recipe.eval_every if checkpoint_every is None else checkpoint_every
        progress = Progress(name, recipe.steps, enabled=show_progress, start_step=state.step if state else 0)
        try:
            result = StandardTrainer().train(
                network, recipe, corpus, card.context_length, progress,
                resume=state, checkpoint_every=every, interim_eval_windows=interim_eval_windows, compile=compile,
                on_checkpoint=lambda snapshot: write_training_state(state_path, snapshot, identity),
            )
        except KeyboardInterrupt:
            if state_path.exists():
                print(f"\n{name}: stopped; the same command with --resume continues from the state in {state_path}", file=sys.stderr)
            raise
        new_card = _trained_card(card, recipe, result, network)
        if not publish and variant.tokenizer_path is not None:
            copied = registry_file.parent / variant.tokenizer_path.name
            if copied.resolve() != variant.tokenizer_path:  # --out may be the variant's own folder
                atomic_copy(variant.tokenizer_path, copied)
            new_card = new_card.model_copy(update={"tokenizer": new_card.tokenizer.model_copy(update={"file": copied.name})})
        new_card = new_card.model_copy(
            update={"checkpoint": new_card.checkpoint.model_copy(update={"path": _relative(checkpoint_path, registry_file.parent)})}
        )

        with exclusive_lock(registry_file):
            sha = save_checkpoint(checkpoint_path, network.state_dict(), new_card.header_json())
            new_card = new_card.model_copy(update={"checkpoint": new_card.checkpoint.model_copy(update={"sha256": sha})})
            upsert_registry_entry(registry_file, new_card)
        history_path = checkpoint_path.with_suffix(".history.json")
        atomic_write_text(history_path, json.dumps({"variant": name, "recipe": recipe.model_dump(), "history": result.history}, indent=1) + "\n")
        state_path.unlink(missing_ok=True)  # the weights are safe: nothing is left to resume
    return new_card, registry_file


def _destination(variant: Variant, publish: bool, out_dir: Path | None) -> tuple[Path, Path]:
    """The registry file and checkpoint a run writes."""
    if publish:
        return variant.source, variant.checkpoint_path
    out_dir = (out_dir or Path("runs") / variant.name).resolve()
    return out_dir / "registry.toml", out_dir / f"{variant.name}.safetensors"


def _trained_card(card: ModelCard, recipe, result, network) -> ModelCard:
    final = result.final
    metrics = Metrics(
        train_loss=round(final["train"], 4),
        validation_loss=round(final["validation"], 4),
        validation_perplexity=round(math.exp(final["validation"]), 3),
        uniform_loss=round(math.log(card.tokenizer.vocab_size), 4),
        training_seconds=round(result.update_seconds, 1),
        tokens_per_second=round(result.tokens_per_second),
    )
    return card.model_copy(
        update={"recipe": recipe, "metrics": metrics, "parameters": sum(p.numel() for p in network.parameters())}
    )


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())
