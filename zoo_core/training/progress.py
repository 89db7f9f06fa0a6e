"""Progress of a training run: step, smoothed loss, tokens/s, ETA, evaluations.

On a terminal, a rich progress bar on stderr with the running (smoothed) loss,
tokens per second and an ETA, and each evaluation printed above the bar as it
comes. Anywhere else (a pipe, a log file, CI) plain lines: one every
``log_every`` steps and one per evaluation, so a log shows the run advancing.

The ETA is meant to hold still: it is the remaining steps times the recent
time of an update (a moving average that leaves out the first, slow steps and
the evaluation steps), plus the remaining evaluations times their measured
cost. Using the time since the start instead makes step 1 (which pays for an
evaluation and warm-up) predict hours for a one-minute run.
"""

from __future__ import annotations

import atexit
import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.text import Text

_SMOOTHING = 0.9  # weight of the past in the running loss and the step time


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class RunningAverage:
    """Exponential moving average with the start-up bias removed (as in Adam):
    the first values are not pulled towards zero. Values may be 0-d tensors: the
    average then stays on their device and is read back only by ``get``."""

    def __init__(self, smoothing: float = _SMOOTHING):
        self.smoothing, self.value, self.count = smoothing, 0.0, 0

    def add(self, x) -> None:
        self.count += 1
        self.value = self.smoothing * self.value + (1 - self.smoothing) * x

    def get(self) -> float | None:
        return float(self.value) / (1 - self.smoothing**self.count) if self.count else None


class TrainingProgress:
    """What a training loop reports to: ``update`` after every step, ``close`` at the end."""

    def __init__(
        self,
        name: str,
        total_steps: int,
        stream: TextIO | None = None,
        enabled: bool = True,
        start_step: int = 0,
        *,
        eval_every: int | None = None,
        log_every: int | None = None,
        interactive: bool | None = None,
    ):
        self.name, self.total = name, total_steps
        self.start_step = start_step  # a resumed run counts only the steps taken since
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and (self.stream.isatty() if interactive is None else interactive)
        self.eval_every = eval_every
        self.log_every = log_every or max(1, total_steps // 20)
        self.loss = RunningAverage()
        self.step_seconds = RunningAverage()
        self.eval_seconds: list[float] = []
        self._last_wall = time.monotonic()
        self._last_update_seconds: float | None = None
        self._steps_seen = 0
        self._bar: Progress | None = None  # the live display and its task, started together by _start_bar
        self._task: TaskID | None = None

    # -- the numbers ---------------------------------------------------------------------------

    def eta_seconds(self, step: int) -> float | None:
        per_step = self.step_seconds.get()
        if per_step is None:
            return None
        remaining = self.total - step
        evaluations = 0
        if self.eval_every and self.eval_seconds:
            # Evaluation steps still to come: multiples of eval_every, and the last step unless
            # it is one of them or is done (a finished run has nothing left: no ETA of 31 s at 4/4).
            last = 1 if self.total % self.eval_every and step < self.total else 0
            evaluations = self.total // self.eval_every - step // self.eval_every + last
        mean_eval = sum(self.eval_seconds) / len(self.eval_seconds) if self.eval_seconds else 0.0
        return remaining * per_step + evaluations * mean_eval

    def update(self, step: int, seconds: float, tokens: int, losses: dict | None = None, batch_loss=None) -> None:
        """After step ``step``: ``seconds`` and ``tokens`` are the run's update time
        and tokens so far, ``losses`` an evaluation's (if one ran), ``batch_loss``
        the step's training loss (a float or a 0-d tensor)."""
        if not self.enabled:
            return
        now = time.monotonic()
        wall, self._last_wall = now - self._last_wall, now
        update = seconds - self._last_update_seconds if self._last_update_seconds is not None else None
        self._last_update_seconds = seconds
        self._steps_seen += 1
        if batch_loss is not None:
            self.loss.add(batch_loss)
        if losses and update is not None:
            self.eval_seconds.append(max(0.0, wall - update))  # what the evaluation added to the step
        if not losses and self._steps_seen > 2:  # the first steps pay for warm-up
            self.step_seconds.add(wall)
        elif not losses and self._steps_seen == 2 and self.step_seconds.count == 0:
            self.step_seconds.add(wall)  # a first estimate, replaced as steps come
        rate = tokens / seconds if seconds else 0.0  # update time only: evaluation excluded
        if self.interactive:
            self._draw(step, rate, losses)
        elif losses or step % self.log_every == 0:
            self.stream.write(self._line(step, rate, losses) + "\n")
            self.stream.flush()
        if step >= self.total:
            self.close()

    def _line(self, step: int, rate: float, losses: dict | None) -> str:
        text = f"{self.name}: step {step:>{len(str(self.total))}}/{self.total}"
        running = self.loss.get()
        if running is not None:
            text += f"  loss {running:.4f}"
        if losses:
            text += f"  eval: train {losses['train']:.4f} val {losses['validation']:.4f}"
        eta = self.eta_seconds(step)
        text += f"  {rate:,.0f} tok/s  ETA {format_duration(eta) if eta is not None else '…'}"
        return text

    # -- the terminal ---------------------------------------------------------------------------

    def _draw(self, step: int, rate: float, losses: dict | None) -> None:
        bar, task = self._bar, self._task
        if bar is None or task is None:
            bar, task = self._start_bar()
        running = self.loss.get()
        eta = self.eta_seconds(step)
        bar.update(
            task,
            completed=step,
            loss=f"loss {running:.4f}" if running is not None else "loss …",
            rate=f"{rate:,.0f} tok/s",
            eta=f"ETA {format_duration(eta)}" if eta is not None else "ETA …",
        )
        if losses:
            bar.console.print(
                Text(
                    f"{self.name}: step {step}/{self.total}  train {losses['train']:.4f}  val {losses['validation']:.4f}"
                ),
                highlight=False,
            )

    def _start_bar(self) -> tuple[Progress, TaskID]:
        console = Console(file=self.stream, force_terminal=True)
        self._bar = Progress(
            TextColumn("{task.description}", style="bold", markup=False),  # the name is data, not markup
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[loss]}"),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[eta]}"),
            console=console,
            refresh_per_second=8,
        )
        self._task = self._bar.add_task(
            self.name, total=self.total, completed=self.start_step, loss="loss …", rate="", eta="ETA …"
        )
        self._bar.start()
        # However the loop ends (an exception, Ctrl-C), the bar is stopped before
        # exit: a live display left running keeps the terminal's cursor hidden.
        atexit.register(self.close)
        return self._bar, self._task

    def close(self) -> None:
        """Stop the bar (idempotent); the terminal is left as it was."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            atexit.unregister(self.close)

    def message(self, text: str) -> None:
        """A line above the bar (or in the log)."""
        if self._bar is not None:
            self._bar.console.print(Text(text), highlight=False)  # shown exactly as it is
        else:
            self.stream.write(text + "\n")
            self.stream.flush()


class WorkProgress:
    """Progress of work counted in units, in stages (`zoo eval`: the loss windows,
    then bits per byte over the validation text): a rich bar on stderr naming the
    variant and the stage, on a terminal only. Off a terminal, or when disabled
    (``--json``), it shows nothing: a log needs the result, not the bar."""

    def __init__(self, name: str, stream: TextIO | None = None, enabled: bool = True, interactive: bool | None = None):
        self.name = name
        self.stream = stream or sys.stderr
        self.shown = enabled and (self.stream.isatty() if interactive is None else interactive)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def stage(self, what: str, total: int) -> None:
        """Start counting ``total`` units of ``what``."""
        if not self.shown:
            return
        if self._bar is None:
            self._bar = Progress(
                TextColumn("{task.description}", markup=False),  # the name is data, not markup
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream, force_terminal=True),
                transient=True,  # the report replaces it
            )
            self._bar.start()
            atexit.register(self.close)  # a live display left running hides the cursor
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(f"{self.name}: {what}", total=total)

    def advance(self, units: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, units)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            atexit.unregister(self.close)
