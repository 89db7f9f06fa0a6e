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
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from ..catalogue.card_validation import describe_validation_error
from ..catalogue.cards import VARIANT_NAME, ComponentSource, Metrics, ModelCard, Recipe, TrainedWith
from ..catalogue.layers import command_line_registries
from ..catalogue.publishing import (
    content_named_tokenizer,
    history_of,
    publish_card,
    refuse_overwrite,
    remove_unnamed,
)
from ..catalogue.registry import Variant, read_registry_file
from ..catalogue.suggestions import plugin_training_advice
from ..corpus.batches import Corpus, describe_characters, drop_characters, unknown_characters
from ..devices import Placement, resolve_device, resolve_dtype
from ..errors import ZooError, did_you_mean, printable
from ..loading.api import build_network, catalogue, load_tokenizer
from ..loading.texts import variant_text
from ..plugin_api.manager import get_plugins
from ..plugin_api.sources import component_sources, missing_component_problem
from ..storage.checkpoints import load_verified, save_checkpoint, sha256_file
from ..storage.files import (
    atomic_copy,
    atomic_write_text,
    content_named,
    exclusive_lock,
    make_folder,
    remove_stale_temporaries,
)
from ..storage.locations import inside_installed_package, user_registry_path
from .destination import check_destination, trained_bytes, weight_bytes
from .job import TrainingJob
from .loop import TrainingInterrupted, TrainingResult, check_batch_splits, seeded_network
from .progress import TrainingProgress
from .run_log import RunDescription, open_run_log
from .state import TrainingState, read_training_state, run_identity, training_state_path, write_training_state


def train_variant(job: TrainingJob) -> tuple[ModelCard, Path]:
    """Train ``job.variant`` and write its checkpoint and card.

    By default the result goes to ``job.out`` (``runs/NAME``) as a one-variant
    registry that `--registry` can name; ``job.publish`` writes it into the user
    catalogue (``$ZOO_HOME``), or into the last ``--registry`` file when one was
    given, under ``job.new_name`` or the variant's own name (refused when another
    layer already holds that name). Every ``job.checkpoint_every`` steps
    (default: the recipe's ``eval_every``; 0: never) the run's state is saved
    beside the checkpoint, and ``job.resume`` continues from it. Returns the new
    card and the registry file that holds it. The trainer receives ``job`` with
    what this prepares filled in (see `TrainingJob`).

    Ctrl-C stops after the step in progress, saves the state (whatever
    ``checkpoint_every`` says) and says how to continue: ``job.resume_command``
    when given (the CLI passes the command line with ``--resume``), else in words.

    ``job.device`` and ``job.dtype`` say where and in what precision to train
    (default: "auto", float32); a data-parallel worker's job carries its
    ``placement`` instead, and only its rank 0 writes anything.

    The run's metrics go to its logs as it goes (`open_run_log`): NAME.log.jsonl
    and those ``job.log_to`` names, in `run_log_folder`; a resumed run appends.
    """
    plan = plan_training(job)
    prepared = prepare_training(plan, job)
    # One run per destination, for the whole run; in a data-parallel run the
    # writer (rank 0) holds it for all its processes.
    with (
        exclusive_lock(plan.checkpoint_path, wait=False) if plan.writer else contextlib.nullcontext(),
        contextlib.ExitStack() as logs,
    ):
        result, run_log = run_training(plan, prepared, job, logs)
        return publish_training(plan, prepared, job, result, run_log)


@dataclass
class TrainingPlan:
    """What a run is to do and where its results go, settled before anything is
    loaded or written: the first of `train_variant`'s stages (plan, prepare, run, publish)."""

    name: str  # the variant trained
    target_name: str  # the variant made (a new name, or the same)
    variant: Variant
    card: ModelCard  # the card the run starts from, under the target name
    recipe: Recipe  # the card's, with the job's overrides, data and base
    trainer: Any
    text: Any  # the training text (`variant_text`), None for a trainer that reads none
    placement: Placement
    plugins: Any
    registry_file: Path
    checkpoint_path: Path

    @property
    def writer(self) -> bool:
        """Whether this process writes: in a data-parallel run only rank 0 does."""
        return self.placement.rank == 0

    @property
    def state_path(self) -> Path:
        return training_state_path(self.checkpoint_path)


@dataclass
class PreparedRun:
    """The second stage: the network built (loaded, prepared by the trainer), the corpus read."""

    network: torch.nn.Module
    recipe: Recipe  # the plan's, with skip_unknown where characters were dropped
    corpus: Corpus | None
    identity: dict[str, Any] | None  # what a resumable state must match (`run_identity`)


def plan_training(job: TrainingJob) -> TrainingPlan:
    """Settle what ``job`` trains, with which trainer and recipe, and where it goes; refuse what cannot run."""
    name = _variant_name(job, "train_variant")
    placement = job.placement
    if placement is None:
        target = resolve_device(job.device)
        placement = Placement(target, resolve_dtype(job.dtype, target))
    plugins = get_plugins()
    variant = _variant_to_train(name, job, plugins)
    overrides = recipe_overrides(job)
    if not job.from_weights:
        variant.card.training_recipe()  # weights trained elsewhere have none to train again: refused here
    trainer = _trainer_for(name, variant, job, overrides, plugins)
    if job.from_weights:
        base = verified_base(variant)
        overrides.update(base=name, base_sha256=base)
        # The base's notes say how the base was made, not this run: a fine-tune starts with none of its own.
        overrides.setdefault("notes", "")
    text = None
    if trainer.uses_corpus:
        text = variant_text(variant, job.data)
        # The card records what the weights were trained on: a dataset's name, or
        # the absolute path of the file given with --data; and its sha256 either way.
        overrides.update(data=text.name, data_sha256=text.sha256)
    # Fine-tuning weights trained elsewhere starts from the standard trainer's defaults.
    recipe = override_recipe(variant.card.recipe or Recipe(), overrides)
    if recipe.context is not None and recipe.context > variant.card.context_length:
        raise ZooError(
            f"--set context={recipe.context}: '{name}' reads at most {variant.card.context_length:,} tokens; "
            "give a training window that long or shorter"
        )
    check_batch_splits(recipe.batch_size, placement.world_size, job.grad_accum)
    target_name = job.new_name or name
    card = _target_card(variant.card, name, target_name, job, recipe, text)
    registry_file, checkpoint_path = _destination(variant, target_name, job.publish, job.out, plugins, job.replace)
    plan = TrainingPlan(
        name, target_name, variant, card, recipe, trainer, text, placement, plugins, registry_file, checkpoint_path
    )
    _check_resumable(job, plan.state_path)  # checked first: nothing is written for a run that cannot start
    return plan


def _trainer_for(name: str, variant: Variant, job: TrainingJob, overrides: dict[str, Any], plugins):
    """The trainer the recipe (or ``--trainer``) names, refused options it cannot take."""
    kind = overrides.get("kind", variant.card.recipe.kind if variant.card.recipe is not None else "trained")
    missing = missing_component_problem(
        variant.index, plugins, conflicts=False, only_recorded=True
    )  # names what to reinstall
    if missing is not None and "kind" not in overrides:
        raise ZooError(missing)
    trainer = plugins.components["trainers"].create(kind)  # the recipe names its trainer
    if not trainer.uses_corpus:
        given = [
            option
            for option, value in (
                ("--steps", job.steps),
                ("--seed", job.seed),
                ("--data", job.data),
                ("--from", job.from_weights or None),
                ("--set", job.recipe_overrides or None),
            )
            if value is not None
        ]
        if given or job.resume:
            raise ZooError(
                f"variant '{name}' is {kind}: its trainer reads no text and takes no {', '.join(given) or '--resume'}"
            )
    return trainer


def _target_card(card: ModelCard, name: str, target_name: str, job: TrainingJob, recipe: Recipe, text) -> ModelCard:
    """The card the run starts from, named for the variant it makes (a fine-tune says so)."""
    if job.from_weights and target_name == name:
        raise ZooError(
            f"fine-tuning '{name}' makes a new variant: give it a name of its own (zoo train NEW --from {name})"
        )
    if target_name != name:
        if not VARIANT_NAME.fullmatch(target_name):
            raise ZooError(
                f"--name '{printable(target_name)}': a variant name is lower-case letters, digits, '.' and '-', starting with a letter or digit"
            )
        card = card.model_copy(update={"name": target_name})
    if job.from_weights:
        base = card
        card = card.model_copy(
            update={
                "description": fine_tune_description(name, text, recipe),
                # The base's lineage is the document the base reproduces; the fine-tune's starts from the base.
                "lineage": f"fine-tuned from '{name}' (checkpoint sha256 {recipe.base_sha256}); "
                f"'{name}' in turn: {base.lineage}",
                # A seed tag names the run that made the base's weights, which these are not.
                "tags": list(dict.fromkeys([*(tag for tag in base.tags if not SEED_TAG.fullmatch(tag)), "fine-tuned"])),
                "imported": None,  # trained here, from imported weights: the lineage names them
            }
        )
    return card


SEED_TAG = re.compile(r"seed-\d+")


def fine_tune_description(base: str, text, recipe: Recipe, stopped_at: int | None = None) -> str:
    """A fine-tune's own description: its base, its text and how far it ran (an early stop says so)."""
    data = Path(text.name).name if text else "its corpus"
    if stopped_at is None:
        return f"Fine-tuned from '{base}' on {data} for {recipe.steps} steps."
    return f"Fine-tuned from '{base}' on {data}; {early_stop(stopped_at, recipe)}."


# What `_card_description` adds to a card's own description after an early stop (and takes off before a new run).
EARLY_STOP_SENTENCE = re.compile(r" This run stopped early at step \d+ of \d+ \([^)]*\)\.$")


def _card_description(
    plan: TrainingPlan, job: TrainingJob, description: str, recipe: Recipe, stopped_at: int | None
) -> str:
    """The trained card's description, which was written before the run knew whether it would stop early."""
    if job.from_weights:
        return fine_tune_description(plan.name, plan.text, recipe, stopped_at)
    description = EARLY_STOP_SENTENCE.sub("", description)  # an earlier run's stop is not this one's
    return description if stopped_at is None else f"{description} This run {early_stop(stopped_at, recipe)}."


def early_stop(stopped_at: int, recipe: Recipe) -> str:
    """How an early-stopped run ended, in the words its card and summary use."""
    return (
        f"stopped early at step {stopped_at} of {recipe.steps} "
        f"(no better validation loss in {recipe.patience} evaluation{'s' if recipe.patience != 1 else ''})"
    )


def prepare_training(plan: TrainingPlan, job: TrainingJob) -> PreparedRun:
    """Read the corpus and build the network (loaded for a fine-tune, prepared by
    the trainer); check the destination can take the result before any step."""
    recipe, corpus, identity = plan.recipe, None, None
    if plan.text is not None:
        recipe, corpus, identity = _read_corpus(plan, job)
    variant, plugins = plan.variant, plan.plugins
    network = seeded_network(lambda: build_network(variant, plugins), recipe.seed)
    if job.from_weights:
        load_verified(
            variant.checkpoint_path,
            variant.card.checkpoint.sha256,
            network,
            variant.card.parameters,
            card=variant.card,
        )
    network = _prepared_network(plan.trainer, network, replace(job, card=plan.card, recipe=recipe))
    if plan.writer:  # before the first step, not when the first state or the result is saved
        keeps_state = plan.trainer.uses_corpus and replace(job, recipe=recipe).checkpoint_interval > 0
        folders = [plan.checkpoint_path.parent, plan.registry_file.parent]
        check_destination(folders, weight_bytes(network), keeps_state, trained_bytes(network))
    return PreparedRun(network, recipe, corpus, identity)


def _read_corpus(plan: TrainingPlan, job: TrainingJob) -> tuple[Recipe, Corpus, dict[str, Any]]:
    """The training text tokenized, characters the tokenizer lacks refused or
    (``--skip-unknown``) dropped and recorded in the recipe; and the run's identity."""
    text, card, recipe = plan.text, plan.card, plan.recipe
    tokenizer = load_tokenizer(plan.variant, plan.plugins)
    unknown = unknown_characters(text.text, tokenizer)
    if unknown and not job.skip_unknown:
        raise ZooError(
            f"{text.name}: {len(unknown)} character(s) of the text are not in the vocabulary of '{plan.name}' "
            f"({card.tokenizer.kind}, {card.tokenizer.vocab_size} tokens): {describe_characters(unknown)}; "
            f"pass --skip-unknown to drop them, or start from a variant whose tokenizer encodes any text (bpe)"
        )
    if unknown:
        recipe = override_recipe(recipe, {"skip_unknown": True})
        if plan.writer and not job.quiet:
            print(
                f"{plan.target_name}: dropped {sum(unknown.values()):,} occurrences of {len(unknown)} character(s) "
                f"not in the vocabulary: {describe_characters(unknown)}",
                file=sys.stderr,
            )
    source = drop_characters(text.text, unknown) if unknown else text.text  # found once, above
    corpus = Corpus.from_text(source, tokenizer, recipe.train_fraction)
    return recipe, corpus, run_identity(card, recipe, text.text)


def run_training(
    plan: TrainingPlan, prepared: PreparedRun, job: TrainingJob, logs: contextlib.ExitStack
) -> tuple[TrainingResult, Any]:
    """Run the trainer on the prepared network (from the saved state, to resume),
    its logs entered into ``logs``; returns the result and the run's log (the writer's)."""
    for path in (
        (plan.state_path, plan.checkpoint_path) if plan.writer else ()
    ):  # left by a run killed while writing them
        remove_stale_temporaries(path)
    recipe, state_path = prepared.recipe, plan.state_path
    state = _state_to_resume(plan, prepared, job)
    run_log = None
    if plan.writer:  # closed when the run ends, however it ends (the logs say how)
        run_log = logs.enter_context(
            open_run_log(
                job.log_to,
                run_log_folder(plan.registry_file, plan.target_name, job.publish),
                plan.target_name,
                _run_description(plan.target_name, recipe),
                resumed_at=state.step if state else None,
            )
        )
        if not job.quiet:  # said before the first step, in a terminal and in a pipe alike
            print(f"{plan.target_name}: {run_log.whereabouts()}", file=sys.stderr, flush=True)
    progress = TrainingProgress(
        plan.target_name,
        recipe.steps,
        enabled=plan.writer and not job.quiet and plan.trainer.uses_corpus,
        start_step=state.step if state else 0,
        eval_every=recipe.eval_every,
        log_every=job.log_every,
    )
    identity = prepared.identity
    trainer_job = replace(
        job,
        card=plan.card,
        recipe=recipe,
        corpus=prepared.corpus,
        context_length=recipe.context or plan.card.context_length,
        progress=progress,
        resume_from=state,
        on_checkpoint=(lambda snapshot: write_training_state(state_path, snapshot, identity)) if plan.writer else None,
        placement=plan.placement,
        run_log=run_log,
    )
    try:
        return _run_trainer(plan, prepared.network, trainer_job), run_log
    finally:
        progress.close()


def _state_to_resume(plan: TrainingPlan, prepared: PreparedRun, job: TrainingJob) -> TrainingState | None:
    """The saved state ``job.resume`` continues from (None: a fresh start), said on stderr."""
    state, state_path = None, plan.state_path
    if job.resume:
        assert prepared.identity is not None, "resuming is refused above for a trainer that reads no corpus"
        state = read_training_state(state_path, prepared.identity, prepared.network)
    show_progress = plan.writer and not job.quiet
    if show_progress and state is not None:
        print(
            f"{plan.target_name}: resuming at step {state.step + 1} of {prepared.recipe.steps} from {state_path}",
            file=sys.stderr,
        )
    elif show_progress and state_path.exists():
        print(
            f"{plan.target_name}: note: starting over; {state_path} (an interrupted run) will be overwritten; "
            f"--resume continues it instead",
            file=sys.stderr,
        )
    return state


def _run_trainer(plan: TrainingPlan, network: torch.nn.Module, job: TrainingJob) -> TrainingResult:
    """``plan.trainer.run``; after Ctrl-C the writer says where the state is and how to continue."""
    target_name, state_path = plan.target_name, plan.state_path
    try:
        return plan.trainer.run(network, job)
    except TrainingInterrupted as stop:
        if not plan.writer:
            raise
        how = job.resume_command or "the same command with --resume (or a job with resume=True)"
        assert job.recipe is not None, "the run's job carries its recipe"
        print(
            f"\n{target_name}: stopped after step {stop.step} of {job.recipe.steps}; state saved in {state_path}\n"
            f"  continue with: {how}",
            file=sys.stderr,
        )
        raise
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the steps
        if plan.writer and state_path.exists():
            print(
                f"\n{target_name}: stopped; the same command with --resume continues from the state in {state_path}",
                file=sys.stderr,
            )
        raise


def publish_training(
    plan: TrainingPlan, prepared: PreparedRun, job: TrainingJob, result: TrainingResult, run_log: Any
) -> tuple[ModelCard, Path]:
    """The trained card; the writer also writes the weights, tokenizer, history and
    card where the plan says, removes the state and ends the run's log."""
    network, recipe, registry_file = prepared.network, prepared.recipe, plan.registry_file
    new_card = _trained_card(plan.card, recipe, result, network, plan.placement)
    new_card = new_card.model_copy(
        update={"description": _card_description(plan, job, new_card.description, recipe, result.stopped_at)}
    )
    tensors, new_card = _saved_weights(plan.trainer, network, new_card)
    new_card = new_card.model_copy(update={"components": _component_sources(new_card, plan.plugins)})
    if not plan.writer:
        return new_card, registry_file
    new_card = _card_files(plan, job, new_card)
    history = None
    if result.history:  # hand-set weights have no history to keep
        history = {"variant": plan.target_name, "recipe": recipe.model_dump(), "history": result.history}
    with exclusive_lock(registry_file):
        new_card, checkpoint_path = _publish(
            registry_file, plan.checkpoint_path, tensors, new_card, history, plan.state_path
        )
    history_path = history_of(checkpoint_path)
    plan.state_path.unlink(missing_ok=True)  # the weights are safe: nothing is left to resume
    sha = new_card.checkpoint.sha256
    assert run_log is not None, "the writer opened the run's logs"
    run_log.log_end(
        new_card.metrics.model_dump(exclude_none=True),
        checkpoint=checkpoint_path,
        sha256=sha,
        # The weights are in the catalogue (or --out) already: a second copy only when asked.
        files=[history_path, *([checkpoint_path] if job.log_checkpoints else [])],
        documents={"card.json": json.dumps(new_card.model_dump(mode="json", exclude_none=True), indent=1) + "\n"},
    )
    return new_card, registry_file


def run_log_folder(registry_file: Path, name: str, published: bool) -> Path:
    """Where a run's logs go: beside its results, never among a catalogue's weights.
    A run written to ``--out DIR`` (the folder of ``registry_file``) logs there; one
    published into a catalogue logs in ``runs/NAME/`` beside that catalogue's
    registry file (``$ZOO_HOME/runs/NAME/`` for the user catalogue)."""
    return registry_file.parent / "runs" / name if published else registry_file.parent


def _card_files(plan: TrainingPlan, job: TrainingJob, card: ModelCard) -> ModelCard:
    """``card`` pointing at its files as written: the tokenizer (copied beside the
    checkpoint), the checkpoint, and a user's --data file outside its folder."""
    registry_file, text = plan.registry_file, plan.text
    if plan.variant.tokenizer_path is not None:
        copied, copied_sha = _place_tokenizer(
            plan.variant.tokenizer_path, plan.checkpoint_path.parent, plan.target_name
        )
        card = card.model_copy(
            update={
                "tokenizer": card.tokenizer.model_copy(
                    update={"file": _relative(copied, registry_file.parent), "sha256": copied_sha}
                )
            }
        )
    card = card.model_copy(
        update={
            "checkpoint": card.checkpoint.model_copy(
                update={"path": _relative(plan.checkpoint_path, registry_file.parent)}
            )
        }
    )
    # A file named with --data (not a registered dataset): recorded by its absolute path.
    user_file = text.path if text is not None and job.data is not None and text.name == str(text.path) else None
    if user_file is not None and registry_file.parent.resolve() not in user_file.parents:
        # The user named this corpus (--data) and this card is theirs: it may point outside its folder.
        card = card.model_copy(update={"allow_external_paths": True})
    return card


def _publish(
    registry_file: Path, checkpoint_path: Path, tensors, card: ModelCard, history: dict | None, state_path: Path
) -> tuple[ModelCard, Path]:
    """Write the weights and history under names of their own and switch the
    registry to them (zoo_core.catalogue.publishing); returns the card as
    published and its checkpoint. A failure before the switch deletes the new
    files and says what is left to resume."""
    try:
        sha = save_checkpoint(checkpoint_path, tensors, card.header_json(), by_content=True)
        staged = content_named(checkpoint_path, sha)
        if history is not None:
            atomic_write_text(history_of(staged), json.dumps(history, indent=1) + "\n")
        moves = {staged: checkpoint_path, **({history_of(staged): history_of(checkpoint_path)} if history else {})}

        def naming(path: Path) -> ModelCard:
            relative = _relative(path, registry_file.parent)
            return card.model_copy(
                update={"checkpoint": card.checkpoint.model_copy(update={"path": relative, "sha256": sha})}
            )

        published = publish_card(registry_file, naming(staged), naming(checkpoint_path), moves)
    except ZooError as exc:
        remove_unnamed(registry_file, card.name, [])  # what this run wrote before it failed
        kept = (
            f"the training state in {state_path} is kept: --resume continues from it"
            if state_path.exists()
            else "no training state was saved, so the run's work is lost (--checkpoint-every N keeps one)"
        )
        raise ZooError(f"{exc}; {kept}") from None
    return published, registry_file.parent / published.checkpoint.path


def _run_description(target_name: str, recipe: Recipe) -> RunDescription:
    """What a run's logs say about it: named after the variant it makes, tagged
    with its dataset, seed and (fine-tuned) base."""
    tags: dict[str, str | int] = {"variant": target_name, "dataset": recipe.data, "seed": recipe.seed}
    if recipe.base is not None:
        tags["base"] = recipe.base
    return RunDescription(
        name=target_name, experiment=target_name, recipe=recipe.model_dump(exclude_none=True), tags=tags
    )


def recipe_overrides(job: TrainingJob) -> dict[str, Any]:
    """The recipe fields this run sets: ``--set KEY=VALUE``, then ``--steps`` and ``--seed``.
    A dotted key sets one entry of a table field: ``options.rank`` is ``{"options": {"rank": ...}}``."""
    overrides: dict[str, Any] = {}
    for key, value in (job.recipe_overrides or {}).items():
        field, dotted, entry = key.partition(".")
        if not dotted:
            overrides[key] = value
        elif isinstance(overrides.setdefault(field, {}), dict):
            overrides[field][entry] = value
        else:
            raise ZooError(f"--set {key}: {field} is set as a whole too; set it once or entry by entry")
    overrides.update({key: value for key, value in (("steps", job.steps), ("seed", job.seed)) if value is not None})
    for key in ("data", "data_sha256", "base", "base_sha256", "skip_unknown"):
        if key in overrides:  # what the run records about itself, from the text and weights it was given
            raise ZooError(f"--set {key}: the run records {key} itself; use --data, --from or --skip-unknown")
    return overrides


def override_recipe(recipe: Recipe, overrides: dict[str, Any]) -> Recipe:
    """``recipe`` with ``overrides`` applied, validated as a card's recipe is."""
    fields = recipe.model_dump()
    unknown = next((key for key in overrides if key not in fields), None)
    if unknown is not None:  # a typo (--set learning_rat=...): name the field meant, not all thirty
        hint = did_you_mean(unknown, fields) or "; `zoo card-schema` lists the fields"
        raise ZooError(f"--set {printable(unknown)}: a recipe has no field '{printable(unknown)}'{hint}")
    for key, value in overrides.items():
        # A table field (options) takes the entries given on top of the card's own.
        table = fields.get(key)
        fields[key] = {**table, **value} if isinstance(table, dict) and isinstance(value, dict) else value
    try:
        return type(recipe).model_validate(fields)
    except ValidationError as exc:
        raise ZooError(f"recipe override: {describe_validation_error(exc)}") from None


def verified_base(variant: Variant) -> str:
    """The checkpoint sha256 of the variant a fine-tune starts from; refused
    when it has no published weights to start from."""
    sha = variant.card.checkpoint.sha256
    adapter = variant.card.adapter
    if adapter is not None:
        raise ZooError(
            f"--from {variant.name}: is an adapter on '{adapter.base}', not weights of its own; "
            f"fine-tune '{adapter.base}' instead"
        )
    if sha is None:
        raise ZooError(
            f"--from {variant.name}: the variant has no published weights yet (its card records no sha256); "
            f"train it first, or fine-tune a variant `zoo list` shows with weights"
        )
    return sha


def _publishing_registry() -> Path | None:
    """The registry file `--publish` writes when one was named: the last `--registry`."""
    named = command_line_registries()  # only an explicit --registry redirects publishing, not ZOO_REGISTRY
    return named[-1].expanduser().resolve() if named else None


def _variant_to_train(name: str, job: TrainingJob, plugins) -> Variant:
    """The declaration of ``name`` a run trains. `zoo train NAME --publish
    --registry FILE` where FILE itself declares NAME trains that declaration
    into FILE: how a plugin's author, in the package's source checkout, trains
    the package's variant whether the package is installed editable (FILE is
    then the installed one) or not (the installed copy in site-packages
    declares the same name, and is left alone)."""
    registry_file = _publishing_registry() if job.publish and not job.new_name else None
    if registry_file is not None and registry_file.is_file():
        own = next((v for v in read_registry_file(registry_file, "extra", layer="extra") if v.name == name), None)
        if own is not None:
            return own
    return catalogue(plugins).get(name)


def _destination(
    variant: Variant, target_name: str, publish: bool, out_dir: Path | None, plugins, replace: bool = False
) -> tuple[Path, Path]:
    """The registry file and checkpoint a run writes. Publishing over another
    variant of the destination catalogue (`--from`, `--name`) needs ``replace``."""
    if not publish:
        out_dir = (out_dir or Path("runs") / target_name).resolve()
        return out_dir / "registry.toml", out_dir / f"{target_name}.safetensors"
    registry_file = _publishing_registry() or user_registry_path().expanduser().resolve()
    if inside_installed_package(registry_file):
        raise ZooError(
            f"{registry_file}: is inside an installed package, which pip owns; publish into your own catalogue "
            f"(the default), or train a plugin's variant in its source checkout (docs/plugins.md)"
        )
    if registry_file == variant.source and target_name == variant.name:
        return registry_file, variant.checkpoint_path  # retraining a variant where it is declared
    holder = catalogue(plugins).find(target_name)
    if holder is not None and holder.source != registry_file:
        if holder.layer == "plugin":
            raise ZooError(
                f"variant '{target_name}' is shipped by plugin '{holder.plugin}' ({holder.source}): "
                f"{plugin_training_advice(holder)}"
            )
        raise ZooError(
            f"variant '{target_name}' already exists in the {holder.layer} catalogue ({holder.source}); "
            f"publish under a new name with --name NEW"
        )
    if holder is not None and holder.card.checkpoint.sha256 is not None and not replace:
        refuse_overwrite(holder)
    return registry_file, registry_file.parent / "checkpoints" / f"{target_name}.safetensors"


def _place_tokenizer(source: Path, folder: Path, variant_name: str) -> tuple[Path, str]:
    """Copy the tokenizer file beside the new checkpoint, sharing an identical
    copy already there (variants of one vocabulary compare as such); returns
    the copy and its sha256."""
    make_folder(folder)
    wanted = sha256_file(source)
    target = folder / source.name
    if target.resolve() != source.resolve():
        if target.exists() and sha256_file(target) != wanted:
            # Another vocabulary of that name, which a card may name: never
            # overwritten, this one gets a name only its content can have.
            target = content_named_tokenizer(folder, variant_name, source, wanted)
        if not target.exists() or sha256_file(target) != wanted:
            atomic_copy(source, target)
    return target, wanted


def _prepared_network(trainer, network, job: TrainingJob):
    """The network the trainer trains: one with ``prepare_network(network, job)``
    may change the network built (and loaded) here, e.g. add adapters and freeze
    the rest, before a saved state is read into it; ``job`` carries the card and
    the recipe with this run's overrides."""
    prepare = getattr(trainer, "prepare_network", None)
    return network if prepare is None else prepare(network, job)


def _saved_weights(trainer, network, card: ModelCard) -> tuple[dict[str, Any], ModelCard]:
    """The tensors the run writes and the card that describes them: the whole
    state dict, unless the trainer's ``saved_weights(network, card)`` says
    otherwise (an adapter trainer keeps only the adapter, and says so in the card)."""
    saved = getattr(trainer, "saved_weights", None)
    return (network.state_dict(), card) if saved is None else saved(network, card)


def _trained_card(card: ModelCard, recipe, result, network, placement) -> ModelCard:
    parameters = sum(p.numel() for p in network.parameters())
    # Whole weights unless the trainer's saved_weights says they are an adapter.
    card = card.model_copy(update={"adapter": None})
    if result.metrics is not None:  # the trainer measured what matters for its kind of network
        return card.model_copy(
            update={"recipe": recipe, "metrics": Metrics(**result.metrics), "parameters": parameters}
        )
    final = result.final
    metrics = Metrics(
        train_loss=round(final["train"], 4),
        validation_loss=round(final["validation"], 4),
        validation_perplexity=round(math.exp(final["validation"]), 3),
        uniform_loss=round(math.log(card.tokenizer.vocab_size), 4),
        training_seconds=round(result.update_seconds, 1),
        tokens_per_second=round(result.tokens_per_second),
        stopped_at=result.stopped_at,
        kept_step=result.kept_step,
    )
    return card.model_copy(
        update={
            "recipe": recipe,
            "metrics": metrics,
            "parameters": parameters,
            "trained_with": TrainedWith(**placement.describe()),
        }
    )


def _component_sources(card: ModelCard, plugins) -> dict[str, Any]:
    """The plugins (and their versions) that built these weights, as the card records them."""
    return {role: ComponentSource(**source) for role, source in component_sources(card, plugins).items()}


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def _variant_name(job: TrainingJob, caller: str) -> str:
    if job.variant is None:
        raise ZooError(f"{caller}: the job names no variant to train")
    return job.variant


def _check_resumable(job: TrainingJob, state_path: Path) -> None:
    if job.resume and not state_path.exists():
        raise ZooError(
            f"{state_path}: nothing to resume (no training state; `zoo train {job.variant}` writes one every --checkpoint-every steps)"
        )


def check_data_parallel_run(job: TrainingJob, world_size: int) -> Path:
    """What the launcher checks before starting any process (a mistake is one line,
    not one per process); returns where the run keeps its resumable state."""
    name = _variant_name(job, "check_data_parallel_run")
    plugins = get_plugins()
    variant = catalogue(plugins).get(name)
    card = variant.card
    recipe = (card.recipe or Recipe()) if job.from_weights else card.training_recipe()
    if not plugins.components["trainers"].create(recipe.kind).uses_corpus:
        raise ZooError(
            f"variant '{name}' is {recipe.kind}: its weights are not trained, so there is nothing to split over processes"
        )
    check_batch_splits(recipe.batch_size, world_size, job.grad_accum)
    state_path = training_state_path(
        _destination(variant, job.new_name or name, job.publish, job.out, plugins, job.replace)[1]
    )
    _check_resumable(job, state_path)
    return state_path
