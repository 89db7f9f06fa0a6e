"""Training a variant from its card's recipe.

One seed fixes everything: the initial weights (torch's global generator, seeded
before the network is built), dropout, and the order of training batches (a
generator of their own). Evaluation uses fixed windows, the same at every step
and for every model of the same context, so losses are comparable; it draws on
no generator that training uses, so it never changes what training does.

`zoo train` reaches trainers through the plugin manager (hook
``register_trainers``); the standard trainer below is registered by a built-in
plugin under the name ``trained``, and a third-party trainer may subclass it.

A run can be stopped and continued: every ``checkpoint_every`` steps the trainer
hands a ``TrainingState`` (weights, optimizer state, both generators, history) to
the job's ``on_checkpoint``, and a job with ``resume_from=`` that state continues
as if never stopped.
Ctrl-C does the same at any step: the interrupt is held until the step in
progress is complete (an optimizer step cut in half cannot be resumed), the
state after it goes to ``on_checkpoint``, and ``TrainingInterrupted`` is raised.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ..catalogue.cards import Recipe
from ..corpus.batches import BatchSampler, Corpus, fixed_windows, mean_loss
from ..devices import Placement
from ..errors import ZooError, printable
from .job import TrainingJob
from .optimizers import make_optimizer, trainable_parameters  # noqa: F401 - trainable_parameters: its old home
from .step import training_step


@dataclass
class TrainingResult:
    steps: int
    history: list[dict] = field(default_factory=list)
    update_seconds: float = 0.0
    tokens_seen: int = 0
    stopped_at: int | None = None  # the step an early stop ended the run at (None: it ran every step)
    kept_step: int | None = None  # with keep="best": the step whose weights were kept
    # Metrics a trainer measured itself (the card's `metrics` fields, e.g. a hand-built
    # network's accuracy); None: `zoo train` derives losses from the last history entry.
    metrics: dict[str, Any] | None = None

    @property
    def final(self) -> dict:
        """The evaluation of the weights the run ends with: the kept step's, or the last."""
        if self.kept_step is not None:
            return next(entry for entry in self.history if entry["step"] == self.kept_step)
        return self.history[-1]

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_seen / self.update_seconds if self.update_seconds else 0.0


@dataclass
class TrainingState:
    """All that step ``step + 1`` depends on. The tensors are the live ones (not
    copies): whoever receives a state writes it out before training goes on."""

    step: int  # the last step taken
    model: dict[str, torch.Tensor]
    optimizer: dict  # Optimizer.state_dict()
    sampler_rng: torch.Tensor  # the training batches' generator
    torch_rng: torch.Tensor  # torch's global generator: dropout
    history: list[dict]
    update_seconds: float
    tokens_seen: int
    best: BestSoFar | None = None  # the best evaluation so far (keep="best", patience)


def interim_windows(recipe: Recipe, requested: int | None = None) -> int:
    """Windows per split for the evaluations before the last one.

    They only draw the loss curve, so by default they use a quarter of the
    recipe's windows (the first ones of the same fixed set, never fewer than 64):
    scoring every window at every evaluation was a large share of a long run.
    The final evaluation, the one a card records, always uses all.
    """
    count = requested if requested is not None else max(64, recipe.eval_windows // 4)
    return max(1, min(count, recipe.eval_windows))


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training, after the state of ``step`` was handed to ``on_checkpoint``."""

    def __init__(self, step: int, saved: bool):
        super().__init__(f"interrupted after step {step}")
        self.step, self.saved = step, saved


@contextlib.contextmanager
def interrupts_at_step_end() -> Iterator[Callable[[], bool]]:
    """Within the block, a first Ctrl-C only raises a flag (the returned function
    reads it) so the loop can stop between steps; a second one interrupts at once.
    Outside the main thread signals cannot be caught, and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    requested = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield requested.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


class StandardTrainer:
    """AdamW or SGD on seeded random windows, evaluated every ``eval_every`` steps.

    Subclasses may override ``make_optimizer`` alone: seeding, schedules,
    evaluation and the resumable state (any optimizer's ``state_dict``) stay.
    A subclass with settings of its own (``recipe.options``) overrides
    ``check_options``; this one takes none."""

    uses_corpus = True

    def make_optimizer(self, model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
        return make_optimizer(model, recipe)

    def prepare_network(self, network: torch.nn.Module, job: TrainingJob) -> torch.nn.Module:
        """What `zoo train` calls once the network is built (and loaded, for a fine-tune),
        before anything is written: the options are checked here, not after the lock is taken."""
        if job.recipe is not None:
            self.check_options(job.recipe)
        return network

    def check_options(self, recipe: Recipe) -> None:
        """Refuse ``recipe.options`` this trainer does not read: recorded in a card, they would claim settings that never applied."""
        if recipe.options:
            raise ZooError(
                f"recipe.options: the '{recipe.kind}' trainer takes no options (given: {', '.join(map(printable, recipe.options))})"
            )

    def run(self, network: torch.nn.Module, job: TrainingJob) -> TrainingResult:
        """Train ``network`` in place on ``job.recipe`` (from ``job.resume_from``'s
        step, when given), handing ``job.on_checkpoint`` the state every
        ``job.checkpoint_interval`` steps.

        Evaluations before the last use ``job.interim_eval_windows`` windows per
        split (see `interim_windows`); ``job.compile`` runs the forward and backward
        through `torch.compile` (same weights, same state dict). ``job.placement``
        says on which device, in which dtype and as which share of a
        data-parallel run this process trains (default: the CPU, float32, alone)."""
        recipe, corpus, context_length = _corpus_inputs(job)
        self.check_options(recipe)
        progress, run_log = job.progress, job.run_log
        placement = job.placement or Placement()
        steps = recipe.steps
        micro_batches = job.grad_accum
        check_batch_splits(recipe.batch_size, placement.world_size, micro_batches)
        sampler = BatchSampler(corpus.train, context_length, recipe.batch_size, recipe.seed)
        windows = {
            split: tuple(
                map(placement.to_device, fixed_windows(corpus.split(split), context_length, recipe.eval_windows))
            )
            for split in ("train", "validation")
        }
        # Keeping the best or stopping early compares evaluations: they all score every window.
        compares = recipe.keep == "best" or recipe.patience is not None
        interim = recipe.eval_windows if compares else interim_windows(recipe, job.interim_eval_windows)
        forward = placement.prepare(network)  # before the optimizer: its state lives beside the weights
        if job.compile:
            forward = compiled(forward)
        optimizer = self.make_optimizer(network, recipe)
        result = TrainingResult(steps=steps)
        best = BestSoFar(keep_weights=recipe.keep == "best")
        on_checkpoint, checkpoint_every = job.on_checkpoint, job.checkpoint_interval
        first_step = 1
        if job.resume_from is not None:
            first_step = _restore(job.resume_from, network, optimizer, sampler, result) + 1
            best = job.resume_from.best or best
        network.train()
        with interrupts_at_step_end() as interrupted:
            for step in range(first_step, steps + 1):
                started = time.perf_counter()
                # Every process draws the whole batch (the same windows as a one-process
                # run) and keeps its share: the generator's state stays the same everywhere.
                inputs, targets = placement.local_batch(*sampler.next())
                update = training_step(
                    network,
                    optimizer,
                    inputs,
                    targets,
                    step=step,
                    recipe=recipe,
                    placement=placement,
                    forward=forward,
                    micro_batches=micro_batches,
                )
                seconds = time.perf_counter() - started
                result.update_seconds += seconds
                tokens = targets.numel() * placement.world_size
                result.tokens_seen += tokens
                if run_log is not None:
                    # Tensors, not floats: the log reads them in batches (no host sync per step on a GPU).
                    run_log.log_step(
                        step,
                        {
                            "loss": update.loss,
                            "learning_rate": update.learning_rate,
                            "tokens_per_second": tokens / seconds if seconds else 0.0,
                            "grad_norm": update.grad_norm,
                        },
                    )
                losses = None
                stop_early = False
                if step == 1 or step % recipe.eval_every == 0 or step == steps:
                    count = recipe.eval_windows if step == steps else interim
                    with placement.autocast():
                        losses = {split: mean_loss(network, x[:count], y[:count]) for split, (x, y) in windows.items()}
                    result.history.append(
                        {"step": step, "train_batch": placement.reported_loss(update.loss), **losses, "windows": count}
                    )
                    if run_log is not None:
                        run_log.log_evaluation(step, {**losses, "windows": count})
                    best.observe(step, losses["validation"], network)
                    stop_early = recipe.patience is not None and best.evaluations_since >= recipe.patience
                if progress:
                    # The tensor, not .item(): no host sync per step on a GPU (read when drawn).
                    progress.update(
                        step, result.update_seconds, result.tokens_seen, losses, batch_loss=update.loss.detach()
                    )
                if stop_early and step < steps:
                    result.stopped_at = step
                    if progress:
                        progress.message(
                            f"stopping early at step {step}: no better validation loss in {recipe.patience} "
                            f"evaluations (best {best.loss:.4f} at step {best.step})"
                        )
                    break
                if interrupted() and step < steps:
                    if progress:
                        progress.close()
                    if on_checkpoint:
                        on_checkpoint(_snapshot(step, network, optimizer, sampler, result, best))
                    raise TrainingInterrupted(step, saved=on_checkpoint is not None)
                if on_checkpoint and checkpoint_every and step % checkpoint_every == 0 and step < steps:
                    on_checkpoint(_snapshot(step, network, optimizer, sampler, result, best))
        if best.weights is not None and best.step != result.history[-1]["step"]:
            with torch.no_grad():
                network.load_state_dict(best.weights)
            result.kept_step = best.step
        elif recipe.keep == "best":
            result.kept_step = result.history[-1]["step"]
        return result


class BestSoFar:
    """The evaluation with the lowest validation loss so far, how many have
    passed since, and (to keep the best) a copy of its weights."""

    def __init__(self, keep_weights: bool, step: int = 0, loss: float = math.inf, evaluations_since: int = 0):
        self.keep_weights = keep_weights
        self.step, self.loss, self.evaluations_since = step, loss, evaluations_since
        self.weights: dict[str, torch.Tensor] | None = None

    def observe(self, step: int, loss: float, network: torch.nn.Module) -> None:
        if loss < self.loss:
            self.step, self.loss, self.evaluations_since = step, loss, 0
            if self.keep_weights:
                self.weights = {name: t.detach().clone() for name, t in network.state_dict().items()}
        else:
            self.evaluations_since += 1


def check_batch_splits(batch_size: int, world_size: int, micro_batches: int = 1) -> None:
    """Refuse a batch that does not share out evenly over processes and micro-batches."""
    if batch_size % world_size:
        raise ZooError(
            f"the recipe's batch of {batch_size} windows does not split evenly over {world_size} processes; "
            f"use a number of processes that divides it"
        )
    if (batch_size // world_size) % micro_batches:
        raise ZooError(
            f"--grad-accum {micro_batches}: the batch of {batch_size // world_size} windows per process does not "
            f"split into {micro_batches} equal micro-batches; use a number that divides it"
        )


def _corpus_inputs(job: TrainingJob) -> tuple[Recipe, Corpus, int]:
    """The job's recipe, corpus and context length, which a trainer that reads the
    corpus cannot do without (`train_variant` fills them in; a direct caller must)."""
    if job.recipe is None or job.corpus is None or job.context_length is None:
        missing = [name for name in ("recipe", "corpus", "context_length") if getattr(job, name) is None]
        raise ZooError(f"the standard trainer needs a job with {', '.join(missing)} (train_variant fills them in)")
    return job.recipe, job.corpus, job.context_length


def compiled(model: torch.nn.Module):
    """``model`` through `torch.compile`, or a clear error where it cannot run.

    The compiled module shares the model's parameters: the optimizer, state dict
    and checkpoints are the eager model's, unchanged."""
    try:
        return torch.compile(model, fullgraph=True)
    except Exception as exc:  # noqa: BLE001 - any backend failure means "no compiling here"
        raise ZooError(f"--compile: torch.compile is not available here: {exc}") from exc


def _snapshot(
    step: int, model, optimizer, sampler: BatchSampler, result: TrainingResult, best: BestSoFar | None = None
) -> TrainingState:
    return TrainingState(
        step=step,
        model=model.state_dict(),
        optimizer=optimizer.state_dict(),
        sampler_rng=sampler.get_state(),
        torch_rng=torch.get_rng_state(),
        history=list(result.history),
        update_seconds=result.update_seconds,
        tokens_seen=result.tokens_seen,
        best=best,
    )


def _restore(state: TrainingState, model, optimizer, sampler: BatchSampler, result: TrainingResult) -> int:
    """Put everything back as it was after ``state.step``; return that step."""
    with torch.no_grad():
        model.load_state_dict(state.model, strict=True)
    optimizer.load_state_dict(state.optimizer)
    sampler.set_state(state.sampler_rng)
    torch.set_rng_state(state.torch_rng)  # building the network drew on it; this undoes that too
    result.history = list(state.history)
    result.update_seconds = state.update_seconds
    result.tokens_seen = state.tokens_seen
    return state.step


def seeded_network(build, seed: int) -> torch.nn.Module:
    """Build a network with torch's global generator at ``seed`` (dropout included)."""
    from ..seeding import seed_global

    seed_global(seed)
    return build()
