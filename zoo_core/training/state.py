"""A training run's resumable state, as a safetensors file: tensors and JSON, never pickle.

`zoo train` writes it atomically every ``--checkpoint-every`` steps beside where
the run's weights will go (``NAME.state.safetensors``) and removes it once the
weights are written; `zoo train NAME --resume` continues from it and ends with
exactly the weights an uninterrupted run would have. The file holds

    tensors   model.<name>             the weights
              optimizer.<index>.<key>  each parameter's optimizer state (AdamW's
                                       moments and step count, SGD's momentum)
              rng.torch                torch's global generator (dropout)
              rng.sampler              the training batches' generator
              best.<name>              the best evaluation's weights (keep = "best")
    metadata  zoo.training_state       JSON: what the run is (variant, card,
                                       recipe, corpus checksum), the step, the loss
                                       history, update time, tokens seen, the
                                       optimizer's parameter groups and any
                                       non-tensor optimizer state, the best
                                       evaluation so far (keep, patience)

and resuming refuses a state written by a different run, naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..catalogue.cards import ModelCard, Recipe, first_difference
from ..errors import ZooError, printable
from ..storage.checkpoints import one_line, read_header, shape_report
from ..storage.tensor_files import write_safetensors
from .optimizers import indexed_parameters

STATE_KEY = "zoo.training_state"
FORMAT = 1


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


def training_state_path(checkpoint_path: Path) -> Path:
    """Where a run writing ``checkpoint_path`` keeps its state: right beside it."""
    return checkpoint_path.with_name(checkpoint_path.name.removesuffix(".safetensors") + ".state.safetensors")


def run_identity(card: ModelCard, recipe: Recipe, corpus_text: str) -> dict[str, Any]:
    """What a state must have been written by to be continued: the same variant,
    network, recipe and corpus. Anything else would silently mix two runs."""
    return {
        "variant": card.name,
        "architecture": card.architecture,
        "config": card.architecture_config(),
        # The text's checksum is corpus_sha256 below, checked with its own message.
        "recipe": recipe.model_dump(mode="json", exclude={"data_sha256"}),
        "corpus_sha256": hashlib.sha256(corpus_text.encode("utf-8")).hexdigest(),
    }


def write_training_state(path: Path, state: TrainingState, identity: dict[str, Any] | None) -> None:
    """Write ``state`` to ``path`` with the `run_identity` it may be continued by
    (None from a trainer that reads no corpus: `zoo train` never resumes those)."""
    tensors = {f"model.{name}": tensor for name, tensor in state.model.items()}
    optimizer_tensors, optimizer_json = _flatten_optimizer(state.optimizer)
    tensors.update(optimizer_tensors)
    tensors["rng.torch"] = state.torch_rng
    tensors["rng.sampler"] = state.sampler_rng
    best = state.best
    if best is not None and best.weights is not None:
        tensors.update({f"best.{name}": tensor for name, tensor in best.weights.items()})
    document = {
        "format": FORMAT,
        "identity": identity,
        "step": state.step,
        "history": state.history,
        "update_seconds": state.update_seconds,
        "tokens_seen": state.tokens_seen,
        "optimizer": optimizer_json,
        "best": None
        if best is None
        else {
            "step": best.step,
            "loss": best.loss,
            "evaluations_since": best.evaluations_since,
            "keep": best.keep_weights,
        },
    }
    metadata = {STATE_KEY: json.dumps(document)}
    write_safetensors(path, tensors, metadata)


def read_training_state(path: Path, identity: dict[str, Any], network: torch.nn.Module) -> TrainingState:
    """The state in ``path``, checked against this run and its network."""
    header = read_header(path)  # bounds-checked before safetensors maps the file
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ZooError(f"{path}: damaged training state: {one_line(exc)}") from None
    text = (header.get("__metadata__") or {}).get(STATE_KEY)
    if text is None:
        raise ZooError(f"{path}: not a zoo training state (no '{STATE_KEY}' in its header)")
    try:
        document = json.loads(text)
        written_by = dict(document["identity"])
        state = _state_from(document, tensors)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, RuntimeError, RecursionError) as exc:
        raise ZooError(f"{path}: damaged training state ({type(exc).__name__}: {one_line(exc)})") from None
    _check_same_run(path, written_by, identity)
    problem = shape_report(path, _shapes(network.state_dict()), _shapes(state.model))
    if problem:
        raise ZooError(problem)
    _check_optimizer_shapes(
        path, state.optimizer, indexed_parameters(network, identity["recipe"].get("optimizer", "adamw"))
    )
    if state.step >= identity["recipe"]["steps"]:
        raise ZooError(
            f"{path}: the state is at step {state.step}, the run has only {identity['recipe']['steps']} steps"
        )
    return state


def _check_same_run(path: Path, stored: dict[str, Any], current: dict[str, Any]) -> None:
    if stored.get("variant") != current["variant"]:
        raise ZooError(
            f"{path}: cannot resume: the state belongs to a run of {stored.get('variant')!r}, not {current['variant']!r}"
        )
    difference = first_difference(stored, current)
    if difference:
        field_name, then, now = difference
        if field_name == "corpus_sha256":
            raise ZooError(
                f"{path}: cannot resume: the corpus is not the text the interrupted run trained on (its sha256 differs)"
            )
        hint = (
            " (resume with the same --steps, --seed and --data as the interrupted run)"
            if field_name.startswith("recipe.")
            else ""
        )
        raise ZooError(
            f"{path}: cannot resume: the state was written with {printable(field_name)} = {json.dumps(then)}, "
            f"this run has {json.dumps(now)}{hint}"
        )


def _check_optimizer_shapes(path: Path, optimizer: dict, parameters: Sequence[torch.Tensor]) -> None:
    """Moments shaped unlike their parameter would fail mid-run; refuse them now."""
    for index, entry in optimizer["state"].items():
        if not 0 <= index < len(parameters):
            raise ZooError(
                f"{path}: damaged training state: optimizer state for parameter {index} of {len(parameters)}"
            )
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != parameters[index].shape:
                raise ZooError(
                    f"{path}: damaged training state: optimizer {key} of parameter {index} is {list(value.shape)}, "
                    f"the parameter {list(parameters[index].shape)}"
                )


def _shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple]:
    return {name: tuple(tensor.shape) for name, tensor in tensors.items()}


def _flatten_optimizer(state_dict: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Optimizer.state_dict() as named tensors plus JSON for everything else
    (the parameter groups' settings, and values such as SGD's empty momentum)."""
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, dict[str, Any]] = {}
    for index, entry in state_dict["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value
            else:
                other.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "other": other}


def _unflatten_optimizer(optimizer_json: dict, tensors: dict[str, torch.Tensor]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = tensor
    for index, entry in optimizer_json["other"].items():
        state.setdefault(int(index), {}).update(entry)
    # JSON has no tuples; in a parameter group only 'params' is a list (betas is a tuple).
    groups = [
        {key: value if key == "params" or not isinstance(value, list) else tuple(value) for key, value in group.items()}
        for group in optimizer_json["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _state_from(document: dict, tensors: dict[str, torch.Tensor]) -> TrainingState:
    if document.get("format") != FORMAT:
        raise ValueError(f"format {document.get('format')!r}, this zoo reads format {FORMAT}")
    generators = tensors["rng.torch"], tensors["rng.sampler"]
    for state in generators:  # a damaged generator state must fail here, not mid-run
        torch.Generator().set_state(state)
    best = None
    if document.get("best") is not None:
        found = document["best"]
        best = BestSoFar(bool(found["keep"]), int(found["step"]), float(found["loss"]), int(found["evaluations_since"]))
        if best.keep_weights and best.step:
            best.weights = {name.removeprefix("best."): t for name, t in tensors.items() if name.startswith("best.")}
    return TrainingState(
        step=int(document["step"]),
        model={name.removeprefix("model."): t for name, t in tensors.items() if name.startswith("model.")},
        optimizer=_unflatten_optimizer(document["optimizer"], tensors),
        sampler_rng=generators[1],
        torch_rng=generators[0],
        history=list(document["history"]),
        update_seconds=float(document["update_seconds"]),
        tokens_seen=int(document["tokens_seen"]),
        best=best,
    )
