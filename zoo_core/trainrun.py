"""`zoo train`: from a card's recipe to a checkpoint and a card with measured metrics.

A run holds a lock on its destination for as long as it trains, so a second run
of the same variant into the same place is refused at once instead of both
overwriting each other; every few steps it writes its resumable state beside
the destination, so `--resume` after a crash or a kill loses only the steps
since then.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from pathlib import Path

from .api import build_network, catalogue, load_tokenizer
from .cards import Metrics, ModelCard, TrainedWith
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
    device: str | None = None,
    dtype: str | None = None,
    placement=None,
) -> tuple[ModelCard, Path]:
    """Train ``name`` and write its checkpoint and card.

    By default the result goes to ``out_dir`` (``runs/NAME``) as a one-variant
    registry that `ZOO_REGISTRY` can point at; ``publish`` replaces the variant's
    own checkpoint and registry entry instead. Every ``checkpoint_every`` steps
    (default: the recipe's ``eval_every``; 0: never) the run's state is saved
    beside the checkpoint, and ``resume`` continues from it. ``device`` and
    ``dtype`` say where and in what precision to train (default: "auto",
    float32); a data-parallel worker passes its ``placement`` instead, and only
    its rank 0 writes anything. Returns the new card and the registry file that
    holds it.
    """
    if placement is None:
        from .devices import Placement, resolve_device, resolve_dtype

        target = resolve_device(device)
        placement = Placement(target, resolve_dtype(dtype, target))
    writer = placement.rank == 0
    plugins = get_plugins()
    variant = catalogue(plugins).get(name)
    card = variant.card
    if card.recipe.kind != "trained":
        raise ZooError(f"variant '{name}' is {card.recipe.kind}; it has no training recipe")
    if checkpoint_every is not None and checkpoint_every < 0:
        raise ZooError(f"--checkpoint-every must be a number of steps (0: never), not {checkpoint_every}")
    overrides = {key: value for key, value in (("steps", steps), ("seed", seed)) if value is not None}
    if data is not None:  # recorded absolute: the recipe's path is read relative to the registry file
        data = data.resolve()
        overrides["data"] = str(data)
    recipe = card.recipe.model_validate({**card.recipe.model_dump(), **overrides})
    if recipe.batch_size % placement.world_size:
        raise ZooError(f"the recipe's batch of {recipe.batch_size} windows does not split evenly over {placement.world_size} processes; "
                       f"use a number of processes that divides it")
    registry_file, checkpoint_path = _destination(variant, publish, out_dir)
    state_path = training_state_path(checkpoint_path)
    if resume and not state_path.exists():  # checked first: nothing is written for a run that cannot start
        raise ZooError(f"{state_path}: nothing to resume (no training state; `zoo train {name}` writes one every --checkpoint-every steps)")

    tokenizer = load_tokenizer(variant, plugins)
    text = read_corpus_text(resolve_data_path(card.recipe, variant.source, data))
    corpus = Corpus.from_text(text, tokenizer, recipe.train_fraction)
    identity = run_identity(card, recipe, text)
    network = seeded_network(lambda: build_network(variant, plugins), recipe.seed)

    # One run per destination, for the whole run; in a data-parallel run the
    # writer (rank 0) holds it for all its processes.
    with exclusive_lock(checkpoint_path, wait=False) if writer else contextlib.nullcontext():
        for path in (state_path, checkpoint_path) if writer else ():  # left by a run killed while writing them
            remove_stale_temporaries(path)
        state = read_training_state(state_path, identity, network) if resume else None
        show_progress = show_progress and writer
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
                resume=state, checkpoint_every=every, placement=placement,
                on_checkpoint=(lambda snapshot: write_training_state(state_path, snapshot, identity)) if writer else None,
            )
        except KeyboardInterrupt:
            if writer and state_path.exists():
                print(f"\n{name}: stopped; the same command with --resume continues from the state in {state_path}", file=sys.stderr)
            raise
        if not writer:
            return _trained_card(card, recipe, result, network, placement), registry_file
        new_card = _trained_card(card, recipe, result, network, placement)
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


def _trained_card(card: ModelCard, recipe, result, network, placement) -> ModelCard:
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
        update={"recipe": recipe, "metrics": metrics, "parameters": sum(p.numel() for p in network.parameters()),
                "trained_with": TrainedWith(**placement.describe())}
    )


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def check_data_parallel_run(name: str, world_size: int, *, out_dir=None, publish=False, resume=False) -> Path:
    """What the launcher checks before starting any process (a mistake is one line,
    not one per process); returns where the run keeps its resumable state."""
    variant = catalogue().get(name)
    card = variant.card
    if card.recipe.kind != "trained":
        raise ZooError(f"variant '{name}' is {card.recipe.kind}; it has no training recipe")
    batch_size = card.recipe.batch_size
    if batch_size % world_size:
        raise ZooError(f"the recipe's batch of {batch_size} windows does not split evenly over {world_size} processes; "
                       f"use a number of processes that divides it")
    state_path = training_state_path(_destination(variant, publish, out_dir)[1])
    if resume and not state_path.exists():
        raise ZooError(f"{state_path}: nothing to resume (no training state; `zoo train {name}` writes one every --checkpoint-every steps)")
    return state_path
