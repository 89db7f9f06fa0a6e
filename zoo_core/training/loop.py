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
``on_checkpoint``, and ``resume=`` that state continues as if never stopped.
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
from .progress import TrainingProgress

Progress = TrainingProgress  # the name the training loops have always used


@dataclass
class TrainingResult:
    steps: int
    history: list[dict] = field(default_factory=list)
    update_seconds: float = 0.0
    tokens_seen: int = 0
    # Metrics a trainer measured itself (the card's `metrics` fields, e.g. a hand-built
    # network's accuracy); None: `zoo train` derives losses from the last history entry.
    metrics: dict[str, Any] | None = None

    @property
    def final(self) -> dict:
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


@dataclass
class TrainingJob:
    """What `zoo train` hands a trainer's ``run(network, job)``.

    ``corpus`` is None for a trainer whose ``uses_corpus`` is False. Every
    ``checkpoint_every`` steps a resumable trainer calls ``on_checkpoint`` with a
    ``TrainingState``; ``resume``, when given, is the state to continue from."""

    card: Any  # the variant's ModelCard (its config, tokenizer, context)
    recipe: Recipe  # the card's recipe with the command's overrides applied
    corpus: Corpus | None
    context_length: int
    progress: "Progress | None" = None
    resume: "TrainingState | None" = None
    checkpoint_every: int = 0
    on_checkpoint: "Callable[[TrainingState], None] | None" = None
    interim_eval_windows: int | None = None  # windows per split before the final evaluation
    compile: bool = False  # run forward and backward through torch.compile
    placement: "Placement | None" = None  # device, dtype and data-parallel share (default: CPU, float32, alone)


def learning_rate_at(step: int, recipe: Recipe, total_steps: int) -> float:
    """Constant, or linear warm-up then cosine decay to ``min_learning_rate``."""
    if recipe.lr_schedule == "constant":
        return recipe.learning_rate
    if step <= recipe.warmup_steps:
        return recipe.learning_rate * step / max(1, recipe.warmup_steps)
    progress = (step - recipe.warmup_steps) / max(1, total_steps - recipe.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return recipe.min_learning_rate + cosine * (recipe.learning_rate - recipe.min_learning_rate)


def make_optimizer(model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """The recipe's optimizer over every parameter.

    AdamW is torch's fused implementation where the parameters allow it (CPU and
    CUDA, floating point): one kernel over all tensors instead of a loop of small
    operations per tensor, which on the zoo's small models is a tenth of a step.
    It computes the same update; the last bits of float32 may differ from the
    per-tensor loop, so runs are bit-for-bit reproducible against each other,
    not against checkpoints trained before (their cards' metrics stand: they
    are measured on the saved weights).
    """
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    settings = dict(lr=recipe.learning_rate, betas=(recipe.beta1, recipe.beta2), weight_decay=recipe.weight_decay)
    parameters = list(model.parameters())
    if _fusable(parameters):
        return torch.optim.AdamW(parameters, fused=True, **settings)
    return torch.optim.AdamW(parameters, **settings)


def _fusable(parameters: list[torch.Tensor]) -> bool:
    return all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
        for p in parameters
    )


def interim_windows(recipe: Recipe, requested: int | None = None) -> int:
    """Windows per split for the evaluations before the last one.

    They only draw the loss curve, so by default they use a quarter of the
    recipe's windows (the first ones of the same fixed set, never fewer than 64):
    on a 2,000-step run, scoring every window at every evaluation was a fifth of
    the time. The final evaluation, the one a card records, always uses all.
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
    evaluation and the resumable state (any optimizer's ``state_dict``) stay."""

    uses_corpus = True

    def make_optimizer(self, model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
        return make_optimizer(model, recipe)

    def run(self, network: torch.nn.Module, job: TrainingJob) -> TrainingResult:
        """The trainer protocol's entry point: `train` with the job's parts."""
        return self.train(
            network,
            job.recipe,
            job.corpus,
            job.context_length,
            job.progress,
            resume=job.resume,
            checkpoint_every=job.checkpoint_every,
            on_checkpoint=job.on_checkpoint,
            interim_eval_windows=job.interim_eval_windows,
            compile=job.compile,
            placement=job.placement,
        )

    def train(
        self,
        model: torch.nn.Module,
        recipe: Recipe,
        corpus: Corpus,
        context_length: int,
        progress: Progress | None = None,
        *,
        resume: TrainingState | None = None,
        checkpoint_every: int = 0,
        on_checkpoint: Callable[[TrainingState], None] | None = None,
        interim_eval_windows: int | None = None,
        compile: bool = False,
        placement: Placement | None = None,
    ) -> TrainingResult:
        """Run the recipe (from ``resume``'s step, when given), calling
        ``on_checkpoint`` with the state every ``checkpoint_every`` steps.

        Evaluations before the last use ``interim_eval_windows`` windows per
        split (see `interim_windows`); ``compile`` runs the forward and backward
        through `torch.compile` (same weights, same state dict). ``placement``
        says on which device, in which dtype and as which share of a
        data-parallel run this process trains (default: the CPU, float32, alone)."""
        placement = placement or Placement()
        steps = recipe.steps
        sampler = BatchSampler(corpus.train, context_length, recipe.batch_size, recipe.seed)
        windows = {
            split: tuple(
                map(placement.to_device, fixed_windows(corpus.split(split), context_length, recipe.eval_windows))
            )
            for split in ("train", "validation")
        }
        interim = interim_windows(recipe, interim_eval_windows)
        forward = placement.prepare(model)  # before the optimizer: its state lives beside the weights
        if compile:
            forward = compiled(forward)
        optimizer = self.make_optimizer(model, recipe)
        result = TrainingResult(steps=steps)
        first_step = 1 if resume is None else _restore(resume, model, optimizer, sampler, result) + 1
        model.train()
        with interrupts_at_step_end() as interrupted:
            for step in range(first_step, steps + 1):
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate_at(step, recipe, steps)
                started = time.perf_counter()
                # Every process draws the whole batch (the same windows as a one-process
                # run) and keeps its share: the generator's state stays the same everywhere.
                inputs, targets = placement.local_batch(*sampler.next())
                with placement.autocast():
                    _, loss = forward(inputs, targets)
                optimizer.zero_grad(set_to_none=True)
                placement.backward(loss)
                placement.step(optimizer, model.parameters(), recipe.grad_clip)
                result.update_seconds += time.perf_counter() - started
                result.tokens_seen += targets.numel() * placement.world_size
                losses = None
                if step == 1 or step % recipe.eval_every == 0 or step == steps:
                    count = recipe.eval_windows if step == steps else interim
                    with placement.autocast():
                        losses = {split: mean_loss(model, x[:count], y[:count]) for split, (x, y) in windows.items()}
                    result.history.append(
                        {"step": step, "train_batch": placement.reported_loss(loss), **losses, "windows": count}
                    )
                if progress:
                    # The tensor, not .item(): no host sync per step on a GPU (read when drawn).
                    progress.update(step, result.update_seconds, result.tokens_seen, losses, batch_loss=loss.detach())
                if interrupted() and step < steps:
                    if progress:
                        progress.close()
                    if on_checkpoint:
                        on_checkpoint(_snapshot(step, model, optimizer, sampler, result))
                    raise TrainingInterrupted(step, saved=on_checkpoint is not None)
                if on_checkpoint and checkpoint_every and step % checkpoint_every == 0 and step < steps:
                    on_checkpoint(_snapshot(step, model, optimizer, sampler, result))
        return result


def compiled(model: torch.nn.Module):
    """``model`` through `torch.compile`, or a clear error where it cannot run.

    The compiled module shares the model's parameters: the optimizer, state dict
    and checkpoints are the eager model's, unchanged."""
    from ..errors import ZooError

    try:
        return torch.compile(model, fullgraph=True)
    except Exception as exc:  # noqa: BLE001 - any backend failure means "no compiling here"
        raise ZooError(f"--compile: torch.compile is not available here: {exc}") from exc


def _snapshot(step: int, model, optimizer, sampler: BatchSampler, result: TrainingResult) -> TrainingState:
    return TrainingState(
        step=step,
        model=model.state_dict(),
        optimizer=optimizer.state_dict(),
        sampler_rng=sampler.get_state(),
        torch_rng=torch.get_rng_state(),
        history=list(result.history),
        update_seconds=result.update_seconds,
        tokens_seen=result.tokens_seen,
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
