"""Training a variant from its card's recipe.

One seed fixes everything: the initial weights (torch's global generator, seeded
before the network is built), dropout, and the order of training batches (a
generator of their own). Evaluation uses fixed windows, the same at every step
and for every model of the same context, so losses are comparable; it draws on
no generator that training uses, so it never changes what training does.

There is one training loop, `train_together`: each `TrainingRun` in it draws its
batch, takes its `training_step`, logs and evaluates (the evaluation is the
run's own: fixed windows here, a study's target tokens in studies.py). The
standard trainer runs one (in every process of a data-parallel run, too); a
study (`zoo experiment`) runs one per arm, in lockstep, for each seed.

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
from typing import Any, Callable, Iterator, Sequence

import torch

from ..catalogue.cards import Recipe
from ..corpus.batches import BatchSampler, Corpus, fixed_windows, mean_loss
from ..devices import Placement
from ..errors import ZooError, printable
from ..seeding import seed_global
from .job import TrainingJob
from .optimizers import make_optimizer, trainable_parameters  # noqa: F401 - trainable_parameters: its old home
from .state import BestSoFar, TrainingState
from .step import StepResult, training_step


@dataclass
class TrainingResult:
    steps: int
    history: list[dict] = field(default_factory=list)
    update_seconds: float = 0.0
    # The process's CPU seconds in this run's updates (time.process_time): a cost that other
    # programs on a shared machine do not inflate as they do the wall clock. Not kept across a
    # resume: a study, which compares it, never resumes.
    cpu_seconds: float = 0.0
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
        run, sampler = self._start(network, job)
        first_step = 1
        if job.resume_from is not None:
            first_step = run.restore(job.resume_from, sampler) + 1
        network.train()
        with interrupts_at_step_end() as interrupted:
            train_together([run], first_step, lambda step: _after_step(run, sampler, job, step, interrupted))
        return run.finish()

    def _start(self, network: torch.nn.Module, job: TrainingJob) -> tuple[TrainingRun, BatchSampler]:
        """The run ``job`` asks for, before its first step, and the sampler its batches come from."""
        recipe, corpus, context_length = _corpus_inputs(job)
        self.check_options(recipe)
        placement = job.placement or Placement()
        check_batch_splits(recipe.batch_size, placement.world_size, job.grad_accum)
        sampler = BatchSampler(corpus.train, context_length, recipe.batch_size, recipe.seed)
        # Keeping the best or stopping early compares evaluations: they all score every window.
        compares = recipe.keep == "best" or recipe.patience is not None
        interim = recipe.eval_windows if compares else interim_windows(recipe, job.interim_eval_windows)
        evaluate = WindowEvaluation(network, corpus, context_length, recipe.eval_windows, interim, placement)
        forward = placement.prepare(network)  # before the optimizer: its state lives beside the weights
        if job.compile:
            forward = compiled(forward)
        # Every process draws the whole batch (the same windows as a one-process
        # run) and keeps its share: the generator's state stays the same everywhere.
        run = TrainingRun(
            network,
            self.make_optimizer(network, recipe),
            recipe,
            placement,
            batches=lambda: placement.local_batch(*sampler.next()),
            evaluate=evaluate,
            forward=forward,
            micro_batches=job.grad_accum,
            run_log=job.run_log,
        )
        return run, sampler


def train_together(runs: Sequence[TrainingRun], first_step: int, after_step: Callable[[int], bool]) -> None:
    """The training loop: every run takes step 1, 2, ... in turn (a study's arms
    in lockstep; the standard trainer's one run alone) up to their last
    step (they all have the same); after each, ``after_step(step)`` does the
    caller's duties and says whether to stop there."""
    for step in range(first_step, runs[0].recipe.steps + 1):
        for run in runs:
            run.advance(step)
        if after_step(step):
            return


def _after_step(
    run: TrainingRun, sampler: BatchSampler, job: TrainingJob, step: int, interrupted: Callable[[], bool]
) -> bool:
    """The standard trainer's duties after a step: progress, an early stop, Ctrl-C, checkpoints."""
    recipe, progress, on_checkpoint = run.recipe, job.progress, job.on_checkpoint
    if progress:
        # The tensor, not .item(): no host sync per step on a GPU (read when drawn).
        result = run.result
        losses = None if run.evaluated is None else {split: run.evaluated[split] for split in ("train", "validation")}
        progress.update(step, result.update_seconds, result.tokens_seen, losses, batch_loss=run.loss.detach())
    last = step == recipe.steps
    if run.stop_early and not last:
        run.result.stopped_at = step
        if progress:
            progress.message(
                f"stopping early at step {step}: no better validation loss in {recipe.patience} "
                f"evaluations (best {run.best.loss:.4f} at step {run.best.step})"
            )
        return True
    if interrupted() and not last:
        if progress:
            progress.close()
        if on_checkpoint:
            on_checkpoint(run.snapshot(step, sampler))
        raise TrainingInterrupted(step, saved=on_checkpoint is not None)
    every = job.checkpoint_interval
    if on_checkpoint and every and step % every == 0 and not last:
        if run.run_log is not None:
            run.run_log.sync()  # the logs reach the saved step before the state exists
        on_checkpoint(run.snapshot(step, sampler))
    return False


class WindowEvaluation:
    """The standard trainer's evaluation: mean loss on fixed windows per split, all
    of them at the last step and the first ``interim`` before it."""

    def __init__(self, network, corpus: Corpus, context: int, count: int, interim: int, placement: Placement):
        self.network, self.count, self.interim = network, count, interim
        self.windows = {
            split: tuple(map(placement.to_device, fixed_windows(corpus.split(split), context, count)))
            for split in ("train", "validation")
        }

    def __call__(self, step: int, last: bool) -> dict:
        count = self.count if last else self.interim
        losses = {split: mean_loss(self.network, x[:count], y[:count]) for split, (x, y) in self.windows.items()}
        return {**losses, "windows": count}


class TrainingRun:
    """One network's run of the loop: each `advance` draws its batch, updates
    once (`training_step`), logs the step and, on evaluation steps, scores the
    network with ``evaluate(step, last)`` into the history (the first step, every
    ``recipe.eval_every``, the last). The standard trainer, each process of a
    data-parallel run and each arm of a study are one of these."""

    def __init__(
        self,
        network: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        recipe: Recipe,
        placement: Placement,
        *,
        batches: Callable[[], tuple[torch.Tensor, torch.Tensor]],  # this process's share of the next batch
        evaluate: Callable[[int, bool], dict],  # the scores per split ("train", "validation"), and any more
        forward: Callable | None = None,
        micro_batches: int = 1,
        run_log: Any = None,
    ):
        self.network, self.optimizer, self.recipe, self.placement = network, optimizer, recipe, placement
        self.batches, self.evaluate, self.forward, self.micro_batches = batches, evaluate, forward, micro_batches
        self.run_log = run_log
        self.result = TrainingResult(steps=recipe.steps)
        self.best = BestSoFar(keep_weights=recipe.keep == "best")
        self.loss = torch.full((), math.nan)  # the last step's batch loss (a tensor: reading it syncs a GPU)
        self.evaluated: dict | None = None  # the last step's evaluation, None where it had none
        self.stop_early = False

    def advance(self, step: int) -> StepResult:
        """Take step ``step``."""
        started, cpu_started = time.perf_counter(), time.process_time()
        inputs, targets = self.batches()
        update = training_step(
            self.network,
            self.optimizer,
            inputs,
            targets,
            step=step,
            recipe=self.recipe,
            placement=self.placement,
            forward=self.forward,
            micro_batches=self.micro_batches,
        )
        seconds = time.perf_counter() - started
        self.loss = update.loss
        self.result.update_seconds += seconds
        self.result.cpu_seconds += time.process_time() - cpu_started
        tokens = targets.numel() * self.placement.world_size
        self.result.tokens_seen += tokens
        if self.run_log is not None:
            # Tensors, not floats: the log reads them in batches (no host sync per step on a GPU).
            self.run_log.log_step(
                step,
                {
                    "loss": update.loss,
                    "learning_rate": update.learning_rate,
                    "tokens_per_second": tokens / seconds if seconds else 0.0,
                    "grad_norm": update.grad_norm,
                },
            )
        self.evaluated, self.stop_early = None, False
        if step == 1 or step % self.recipe.eval_every == 0 or step == self.recipe.steps:
            self._evaluate(step, update)
        return update

    def _evaluate(self, step: int, update: StepResult) -> None:
        with self.placement.autocast():
            self.evaluated = scores = self.evaluate(step, step == self.recipe.steps)
        self.result.history.append({"step": step, "train_batch": self.placement.reported_loss(update.loss), **scores})
        if self.run_log is not None:
            self.run_log.log_evaluation(step, scores)
        self.best.observe(step, scores["validation"], self.network)
        patience = self.recipe.patience
        self.stop_early = patience is not None and self.best.evaluations_since >= patience

    def snapshot(self, step: int, sampler: BatchSampler) -> TrainingState:
        """The state after ``step``, to continue from (live tensors: write them out before going on)."""
        return _snapshot(step, self.network, self.optimizer, sampler, self.result, self.best)

    def restore(self, state: TrainingState, sampler: BatchSampler) -> int:
        """Put everything back as it was after ``state.step``; return that step."""
        self.best = state.best or self.best
        with torch.no_grad():
            self.network.load_state_dict(state.model, strict=True)
        self.optimizer.load_state_dict(state.optimizer)
        sampler.set_state(state.sampler_rng)
        torch.set_rng_state(state.torch_rng)  # building the network drew on it; this undoes that too
        self.result.history = list(state.history)
        self.result.update_seconds = state.update_seconds
        self.result.tokens_seen = state.tokens_seen
        return state.step

    def finish(self) -> TrainingResult:
        """The result, with the best evaluation's weights put back where the recipe keeps the best."""
        result, best = self.result, self.best
        if best.weights is not None and best.step != result.history[-1]["step"]:
            with torch.no_grad():
                self.network.load_state_dict(best.weights)
            result.kept_step = best.step
        elif self.recipe.keep == "best":
            result.kept_step = result.history[-1]["step"]
        return result


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


def seeded_network(build, seed: int) -> torch.nn.Module:
    """Build a network with torch's global generator at ``seed`` (dropout included)."""
    seed_global(seed)
    return build()
