"""Training a variant from its card's recipe.

One seed fixes everything: the initial weights (torch's global generator, seeded
before the network is built), dropout, and the order of training batches (a
generator of their own). Evaluation uses fixed windows, the same at every step
and for every model of the same context, so losses are comparable; it draws on
no generator that training uses, so it never changes what training does.

A run can be stopped and continued: every ``checkpoint_every`` steps the trainer
hands a ``TrainingState`` (weights, optimizer state, both generators, history) to
``on_checkpoint``, and ``resume=`` that state continues as if never stopped.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import torch

from .cards import Recipe
from .data import BatchSampler, Corpus, fixed_windows, mean_loss
from .devices import Placement


@dataclass
class TrainingResult:
    steps: int
    history: list[dict] = field(default_factory=list)
    update_seconds: float = 0.0
    tokens_seen: int = 0

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
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    return torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, betas=(recipe.beta1, recipe.beta2), weight_decay=recipe.weight_decay
    )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """Step, losses, tokens/s and ETA on stderr: one updating line on a terminal,
    a line per evaluation otherwise (logs stay readable)."""

    def __init__(self, name: str, total_steps: int, stream: TextIO | None = None, enabled: bool = True, start_step: int = 0):
        self.name, self.total = name, total_steps
        self.start_step = start_step  # a resumed run's ETA counts only the steps taken since
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and self.stream.isatty()
        self._last_draw = 0.0
        self._started = time.monotonic()

    def update(self, step: int, seconds: float, tokens: int, losses: dict | None = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not (losses or (self.interactive and now - self._last_draw > 0.5)):
            return
        self._last_draw = now
        rate = tokens / seconds if seconds else 0.0  # update time only: evaluation excluded
        elapsed = now - self._started  # the ETA uses wall time, evaluation included
        done = step - self.start_step
        eta = elapsed / done * (self.total - step) if done > 0 else 0.0
        text = f"{self.name}: step {step:>{len(str(self.total))}}/{self.total}"
        if losses:
            text += f"  train {losses['train']:.4f}  val {losses['validation']:.4f}"
        text += f"  {rate:,.0f} tok/s  ETA {_duration(eta)}"
        if self.interactive:
            self.stream.write("\r\033[K" + text + ("\n" if losses else ""))
        elif losses:
            self.stream.write(text + "\n")
        self.stream.flush()


class StandardTrainer:
    """AdamW or SGD on seeded random windows, evaluated every ``eval_every`` steps."""

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
        placement: Placement | None = None,
    ) -> TrainingResult:
        """Run the recipe (from ``resume``'s step, when given), calling
        ``on_checkpoint`` with the state every ``checkpoint_every`` steps.
        ``placement`` says on which device, in which dtype and as which share of
        a data-parallel run this process trains (default: the CPU, float32, alone)."""
        placement = placement or Placement()
        steps = recipe.steps
        sampler = BatchSampler(corpus.train, context_length, recipe.batch_size, recipe.seed)
        windows = {split: tuple(map(placement.to_device, fixed_windows(corpus.split(split), context_length, recipe.eval_windows)))
                   for split in ("train", "validation")}
        forward = placement.prepare(model)  # before the optimizer: its state lives beside the weights
        optimizer = make_optimizer(model, recipe)
        result = TrainingResult(steps=steps)
        first_step = 1 if resume is None else _restore(resume, model, optimizer, sampler, result) + 1
        model.train()
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
                with placement.autocast():
                    losses = {split: mean_loss(model, *windows[split]) for split in windows}
                result.history.append({"step": step, "train_batch": placement.reported_loss(loss), **losses})
            if progress:
                progress.update(step, result.update_seconds, result.tokens_seen, losses)
            if on_checkpoint and checkpoint_every and step % checkpoint_every == 0 and step < steps:
                on_checkpoint(_snapshot(step, model, optimizer, sampler, result))
        return result


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
    torch.manual_seed(seed)
    return build()


def resolve_data_path(recipe: Recipe, registry_file: Path, override: Path | None) -> Path:
    return override if override is not None else (registry_file.parent / recipe.data).resolve()
