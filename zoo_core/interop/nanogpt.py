"""Import a checkpoint written by nanoGPT's train.py.

The file is a torch pickle: ``{"model": state_dict, "optimizer": ...,
"model_args": {n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout},
"iter_num", "best_val_loss", "config"}``. It is read with
``torch.load(weights_only=True)``, which only rebuilds tensors and plain
containers: a pickle that asks for any other object (and so could run code) is
refused before anything in it is executed.

nanoGPT's GPT is GPT-2's layout (its names, in torch's Linear shapes): the family
record that reads it (`ReadsNanoGPT`, GPT-2's) gives the config and the tensors'
names; the tensors are renamed, never changed.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from ..catalogue.cards import ModelCard, Recipe
from ..errors import ZooError
from ..plugin_api import families
from ..plugin_api.families import ReadsNanoGPT
from ..storage.checkpoints import sha256_file
from ..storage.files import describe_os_error, open_regular
from .imports import (
    BUILTIN_CORPUS,
    check_card_fits_tensors,
    check_name_is_free,
    check_tensors_are_dense,
    check_tokenizer,
    count_parameters,
    imported_card,
    publish_import,
    tokenizer_for_vocabulary,
)

MAX_CHECKPOINT_BYTES = 8 * 1024**3


def read_nanogpt_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint dict, unpickled safely; any refusal is one line."""

    try:  # a FIFO or a device is refused without waiting on it, a missing file in words
        handle = open_regular(path, "checkpoint")
    except FileNotFoundError:
        raise ZooError(f"{path}: checkpoint file not found") from None
    except OSError as exc:
        raise ZooError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_CHECKPOINT_BYTES:
            raise ZooError(f"{path}: {size:,} bytes is more than a nanoGPT checkpoint this zoo can import")
        # The file checked is the file read (no swap in between), and torch, which
        # cannot open a name that is not UTF-8, is given one that always is.
        opened = Path(f"/proc/self/fd/{handle.fileno()}")
        checkpoint = _torch_load(path, opened if opened.exists() else path)
    if (
        not isinstance(checkpoint, dict)
        or not isinstance(checkpoint.get("model"), dict)
        or not isinstance(checkpoint.get("model_args"), dict)
    ):
        raise ZooError(f"{path}: not a nanoGPT checkpoint (no 'model' and 'model_args' entries)")
    return checkpoint


def _torch_load(path: Path, source: Path) -> Any:
    """``torch.load`` of ``source`` (standing for ``path``, named in messages),
    tensors and plain data only; mmap keeps the tensors in the file until used,
    so a large (or sparse) file is never read whole before they are checked."""
    try:
        return torch.load(source, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        # weights_only refuses any global it does not know: the message names it.
        first = str(exc).split("\n")[0] if "Unsupported global" not in str(exc) else _unsupported_global(str(exc))
        raise ZooError(
            f"{path}: refused: the pickle asks for {first}; only tensors and plain data are loaded, nothing is run"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        message = " ".join(str(exc).replace(str(source), "the file").split())[:200]
        raise ZooError(f"{path}: not a torch checkpoint ({message})") from None


def _unsupported_global(message: str) -> str:
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", message)
    return f"'{found.group(1)}'" if found else "an object that is not plain data"


def nanogpt_family() -> ReadsNanoGPT:
    """The registered family that reads nanoGPT's checkpoints."""
    for record in families.records():
        if isinstance(record, ReadsNanoGPT):
            return record
    raise ZooError("no installed family reads nanoGPT checkpoints (the built-in plugins register GPT-2's)")


def nanogpt_recipe(checkpoint: dict[str, Any]) -> Recipe:
    """What nanoGPT's own config says about the run, where the zoo's recipe has a field for it."""
    config = checkpoint.get("config")
    if not isinstance(config, dict):
        config = {}
    fields: dict[str, Any] = {}
    for theirs, ours in [
        ("learning_rate", "learning_rate"),
        ("weight_decay", "weight_decay"),
        ("beta1", "beta1"),
        ("beta2", "beta2"),
        ("batch_size", "batch_size"),
        ("warmup_iters", "warmup_steps"),
        ("min_lr", "min_learning_rate"),
        ("eval_interval", "eval_every"),
    ]:
        if isinstance(config.get(theirs), (int, float)) and not isinstance(config.get(theirs), bool):
            fields[ours] = config[theirs]
    if isinstance(config.get("grad_clip"), (int, float)) and config["grad_clip"] > 0:
        fields["grad_clip"] = float(config["grad_clip"])
    if config.get("decay_lr"):
        fields["lr_schedule"] = "cosine"
    iterations = checkpoint.get("iter_num")
    if isinstance(iterations, int) and iterations > 0:
        fields["steps"] = iterations
    try:
        best_text = f", best_val_loss {float(checkpoint['best_val_loss']):.4f} by nanoGPT's own estimate"
    except (KeyError, TypeError, ValueError):
        best_text = ""
    fields["data"] = str(BUILTIN_CORPUS)
    try:
        return Recipe(**fields, notes=f"trained by nanoGPT (iter_num {iterations}{best_text}); imported, not retrained")
    except ValueError:
        return Recipe(
            data=str(BUILTIN_CORPUS), notes=f"trained by nanoGPT (iter_num {iterations}{best_text}); imported"
        )


def import_nanogpt(
    path: Path, name: str, tokenizer_file: Path | None = None, license: str = "unspecified", replace: bool = False
) -> tuple[ModelCard, Path]:
    """Convert the checkpoint to safetensors with a card in the user's catalogue
    (over the user's own variant of that name only with ``replace``)."""
    check_name_is_free(name, replace)
    checkpoint = read_nanogpt_checkpoint(path)
    check_tensors_are_dense(path, checkpoint["model"])
    record = nanogpt_family()
    try:
        config, context = record.config_from_nanogpt(checkpoint["model_args"])
    except ZooError as exc:
        raise ZooError(f"{path}: {exc}") from None
    tensors = record.tensors_from_nanogpt(config, checkpoint["model"], path)
    vocab = record.vocab_size(tensors)
    spec, tokenizer_path = tokenizer_for_vocabulary(vocab, tokenizer_file)
    check_tokenizer(spec, tokenizer_path)
    source_sha256 = sha256_file(path, "checkpoint")  # in pieces: the file may be large
    card = imported_card(
        name,
        config,
        context,
        spec,
        count_parameters(tensors),
        path,
        source_sha256,
        "nanoGPT",
        nanogpt_recipe(checkpoint),
        license=license,
        architecture=record.architectures[0],
        family=record.name,
    )
    check_card_fits_tensors(path, card, tensors, record)
    return card, publish_import(card, tensors, tokenizer_path)
