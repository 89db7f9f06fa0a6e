"""A training job: everything one run needs, in one frozen, validated object.

`zoo train` builds it once from its command line; `train_variant` takes it,
fills in what it prepares (the card, the recipe with the job's overrides, the
corpus, the progress display, the state to resume from, where checkpoints go,
the placement) and hands the completed job to the trainer's ``run(network, job)``
as it is. A trainer called directly (a test, a notebook) is handed a job with
just ``recipe``, ``corpus`` and ``context_length`` and whatever else it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import ZooError
from ..seed_range import check_seed
from .run_log import parse_log_targets

if TYPE_CHECKING:
    from ..catalogue.cards import Recipe
    from ..corpus.batches import Corpus
    from ..devices import Placement
    from .progress import TrainingProgress
    from .state import TrainingState


@dataclass(frozen=True, kw_only=True)
class TrainingJob:
    """One training run. The first group is what is asked for (`zoo train`'s
    options, by the same names); the second is what `train_variant` prepares
    for the trainer, which reads only these (the overrides are in ``recipe``)."""

    # What is asked for.
    variant: str | None = None  # the variant to train, by name (`train_variant` needs it)
    steps: int | None = None  # override of the recipe's steps
    seed: int | None = None  # override of the recipe's seed
    data: Path | str | None = None  # train on this registered dataset (by name) or text file instead
    from_weights: bool = False  # fine-tune: start from the variant's verified weights, not fresh ones
    recipe_overrides: Mapping[str, Any] | None = None  # recipe fields set for this run (`--set KEY=VALUE`)
    skip_unknown: bool = False  # drop characters the tokenizer cannot encode (counted) instead of refusing
    grad_accum: int = 1  # micro-batches per update (gradient accumulation); the update is the same
    log_to: tuple[str, ...] = ()  # run logs besides the default jsonl: "tensorboard", "mlflow", "csv", KIND=WHERE
    log_checkpoints: bool = False  # keep the weights in the MLflow run too (else only the card and history)
    out: Path | None = None  # the output folder (default runs/NAME)
    publish: bool = False  # into the user catalogue (or the last --registry file) instead
    new_name: str | None = None  # the trained variant's name (default: the variant's own)
    replace: bool = False  # publish over a variant of that name already in the destination catalogue
    resume: bool = False  # continue from the state an interrupted run saved
    resume_command: str | None = None  # how to say to continue after Ctrl-C (default: in words)
    checkpoint_every: int | None = None  # steps between saved states (None: the recipe's eval_every; 0: never)
    interim_eval_windows: int | None = None  # windows per split before the final evaluation (see `interim_windows`)
    log_every: int | None = None  # steps between progress lines off a terminal
    quiet: bool = False  # no progress display
    compile: bool = False  # run forward and backward through torch.compile
    device: str | None = None  # where to train (default "auto"), unless ``placement`` is given
    dtype: str | None = None  # in what precision (default float32), unless ``placement`` is given
    placement: Placement | None = None  # device, dtype and data-parallel share (default: CPU, float32, alone)

    # What `train_variant` prepares for the trainer.
    card: Any = None  # the variant's ModelCard (its config, tokenizer, context)
    recipe: Recipe | None = None  # the card's recipe with ``steps``, ``seed`` and ``data`` applied
    corpus: Corpus | None = None  # None for a trainer whose ``uses_corpus`` is False
    context_length: int | None = None
    progress: TrainingProgress | None = None
    resume_from: TrainingState | None = None  # the state to continue from
    on_checkpoint: Callable[[TrainingState], None] | None = None  # receives the state every checkpoint_every steps
    run_log: Any = None  # receives each step's and evaluation's metrics (log_step, log_evaluation) as the run goes

    def __post_init__(self):
        # Checked here, so `zoo train`, a data-parallel worker and the Python API
        # refuse the same mistakes with the same words (the command's).
        if self.variant is None and self.recipe is None:
            raise ZooError("a training job names the variant to train (or, handed to a trainer, carries its recipe)")
        if self.seed is not None:
            check_seed(self.seed)
        for flag, value in (("--steps", self.steps), ("--log-every", self.log_every)):
            if value is not None and value < 1:
                raise ZooError(f"{flag} must be at least 1, not {value}")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ZooError(f"--checkpoint-every must be a number of steps (0: never), not {self.checkpoint_every}")
        if self.grad_accum < 1:
            raise ZooError(f"--grad-accum must be at least 1, not {self.grad_accum}")
        if self.interim_eval_windows is not None and self.interim_eval_windows < 1:
            raise ZooError(f"--interim-eval-windows must be at least 1, not {self.interim_eval_windows}")
        if self.log_to:  # an unknown kind or a missing library, before anything is trained
            parse_log_targets(self.log_to)
        if self.log_checkpoints and not any(kind.partition("=")[0].strip().lower() == "mlflow" for kind in self.log_to):
            raise ZooError("--log-checkpoints keeps the weights in the MLflow run: add --log-to mlflow")

    @property
    def checkpoint_interval(self) -> int:
        """Steps between the states handed to ``on_checkpoint`` (0: none but at an interrupt)."""
        if self.checkpoint_every is not None:
            return self.checkpoint_every
        return self.recipe.eval_every if self.recipe is not None else 0
