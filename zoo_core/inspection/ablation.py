"""Head ablation: the change in validation loss when attention heads are removed.

A head is removed at ``blocks.{layer}.attention.heads`` (B, T, H, D), its output
before the output projection: "zero" sets it to 0, "mean" to its mean over the
validation windows at each position (what the head says on average there, so
that only what it says about *this* text is lost). The loss is the mean
next-token cross-entropy on the same fixed validation windows `zoo eval` scores.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Sequence

import torch
from torch.nn import functional as F

from ..corpus.batches import Corpus, encodable_text, fixed_windows, mean_loss
from ..errors import ZooError, printable
from ..evaluation.bits import scoring_context
from ..evaluation.budget import shape_of, size_windows
from ..evaluation.scoring import recipe_windows
from ..loading.texts import variant_text
from ..plugin_api.hook_points import hooks
from .stream import head_counts

METHODS = ("zero", "mean")
SWEEP_MIN_CONTEXT = 32  # the shortest windows a sized sweep reads
Head = tuple[int, int]  # (layer, head), both counted from 0 as in the hook point names


@dataclass
class HeadAblation:
    heads: list[str]  # "layer.head" of the heads removed together
    loss: float
    delta: float  # loss minus the intact model's


@dataclass
class AblationReport:
    method: str
    windows: int
    context: int
    dataset: str
    loss: float  # the intact model's
    ablations: list[HeadAblation]
    sizing: str | None = None  # what the budget cut from the defaults (zoo_core.evaluation.budget), if anything

    def to_dict(self) -> dict:
        return asdict(self)


def parse_heads(text: str) -> list[Head]:
    """``"0.1,2.0"`` -> [(0, 1), (2, 0)]."""
    heads: list[Head] = []
    seen: set[Head] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d{1,6})\.(\d{1,6})\s*", part)  # no network has a million layers
        if match is None:
            raise ZooError(
                f"--ablate takes LAYER.HEAD[,LAYER.HEAD...] counted from 0, e.g. 0.1,1.0; not '{printable(part.strip(), 40)}'"
            )
        head = (int(match.group(1)), int(match.group(2)))
        if head in seen:
            raise ZooError(f"--ablate names head {head[0]}.{head[1]} twice; name each head once")
        seen.add(head)
        heads.append(head)
    return heads


def check_heads(model, heads: Sequence[Head], counts: list[int] | None = None) -> None:
    """Refuse heads ``model`` lacks (``counts``: its heads per layer, when already known)."""
    counts = head_counts(model) if counts is None else counts
    if len(heads) > sum(counts):  # before each is looked at: a list of 20,000 is one line, at once
        raise ZooError(
            f"--ablate names {len(heads):,} heads; '{model.name}' has {sum(counts)} "
            f"({len(counts)} layers of {', '.join(map(str, sorted(set(counts))))} heads)"
        )
    for layer, head in heads:
        if layer >= len(counts):
            raise ZooError(f"layer {layer}: '{model.name}' has {len(counts)} layers, 0 to {len(counts) - 1}")
        if head >= counts[layer]:
            raise ZooError(
                f"head {layer}.{head}: layer {layer} of '{model.name}' has {counts[layer]} heads, 0 to {counts[layer] - 1}"
            )


def validation_windows(
    model, windows: int | None = None, context: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The fixed validation windows `zoo eval` scores the variant on (``context`` tokens
    long, default the card's context length): inputs, targets, dataset name."""
    card = model.card
    if windows is not None and windows < 1:
        raise ZooError(f"--windows must be at least 1, not {windows}")
    context = scoring_context(model, context)
    text = variant_text(model.variant)
    source = encodable_text(text.text, model.tokenizer) if card.skips_unknown else text.text
    corpus = Corpus.from_text(source, model.tokenizer, card.train_fraction)
    inputs, targets = fixed_windows(corpus.split("validation"), context, windows or recipe_windows(card))
    return inputs, targets, text.name


def mean_head_outputs(
    model, layers: set[int], inputs: torch.Tensor, batch_size: int = 64, progress=None
) -> dict[int, torch.Tensor]:
    """Each layer's head outputs (T, H, D) averaged over the windows, position by position."""
    sums: dict[int, torch.Tensor] = {}

    def add(activation, name):
        layer = int(name.split(".")[1])
        total = activation.double().sum(0)
        sums[layer] = total if layer not in sums else sums[layer] + total

    device = model.device
    with torch.inference_mode(), hooks(model.network, {f"blocks.{layer}.attention.heads": add for layer in layers}):
        for i in range(0, len(inputs), batch_size):
            model.network(inputs[i : i + batch_size].to(device))
            if progress is not None:
                progress.advance()
    return {layer: (total / len(inputs)).to(model.device) for layer, total in sums.items()}


def _replacing(heads: Sequence[Head], means: dict[int, torch.Tensor] | None):
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def remove(activation, name):
        layer = int(name.split(".")[1])
        ablated = activation.clone()
        for head in by_layer[layer]:
            if means is None:
                ablated[:, :, head] = 0
            else:
                ablated[:, :, head] = means[layer][: activation.shape[1], head].to(activation.dtype)
        return ablated

    return {f"blocks.{layer}.attention.heads": remove for layer in by_layer}


def ablate_heads(
    model,
    groups: Sequence[Sequence[Head]],
    method: str = "zero",
    windows: int | None = None,
    context: int | None = None,
    progress=None,
) -> AblationReport:
    """The validation loss with each group of heads removed together (``method`` "zero" or "mean"),
    against the intact model's, on the same windows (``context`` tokens long, default the card's).
    Windows and context not given are sized so that the whole sweep, one pass per group and
    one intact, stays within the compute budget (zoo_core.evaluation.budget); ``progress``
    (a WorkProgress) is told of each batch."""
    if method not in METHODS:
        raise ZooError(f"--ablation is one of {', '.join(METHODS)}, not {method!r}")
    counts = head_counts(model)  # a forward pass: once, not once per group
    for group in groups:
        check_heads(model, group, counts)
    shape = shape_of(model)
    passes = len(groups) + 1 + (method == "mean")
    default_windows = recipe_windows(model.card)
    # A sweep of hundreds of heads reads short windows rather than blow the budget many times over.
    sizing = size_windows(shape, windows, context, default_windows, passes=passes, min_context=SWEEP_MIN_CONTEXT)
    inputs, targets, dataset = validation_windows(model, sizing.windows, sizing.context)
    batch = sizing.batch_size
    # Few windows (a sized sweep over many heads): several groups share each forward pass,
    # whose cost on a large model is reading its weights, not the few tokens.
    packed = max(1, batch // len(inputs)) if len(groups) > 1 and len(inputs) < batch else 1
    if progress is not None:
        per_pass = math.ceil(len(inputs) / batch)
        sweep = math.ceil(len(groups) / packed) if packed > 1 else len(groups) * per_pass
        progress.stage(
            f"ablating {len(groups)} head groups on {len(inputs)} windows of {inputs.shape[1]} tokens",
            (passes - len(groups)) * per_pass + sweep,
        )
    means = None
    if method == "mean":
        means = mean_head_outputs(model, {layer for group in groups for layer, _ in group}, inputs, batch, progress)
    intact = mean_loss(model.network, inputs, targets, batch, progress)
    if packed > 1:
        losses = _packed_losses(model, groups, means, inputs, targets, packed, progress)
    else:
        losses = []
        for group in groups:
            with hooks(model.network, _replacing(group, means)):
                losses.append(mean_loss(model.network, inputs, targets, batch, progress))
    results = [
        HeadAblation([f"{layer}.{head}" for layer, head in group], loss, loss - intact)
        for group, loss in zip(groups, losses)
    ]
    note = sizing.note(shape, default_windows)
    return AblationReport(method, len(inputs), inputs.shape[1], dataset, intact, results, note)


def _packed_losses(model, groups, means, inputs, targets, per_batch: int, progress=None) -> list[float]:
    """Each group's mean loss on ``inputs``, ``per_batch`` groups to a forward pass: the
    windows repeated once per group, each copy with its own group's heads removed."""
    network, device = model.network, model.device
    count = len(inputs)
    losses: list[float] = []
    was_training = network.training
    network.eval()
    try:
        for start in range(0, len(groups), per_batch):
            chunk = groups[start : start + per_batch]
            removed: dict[int, list[tuple[int, int, int]]] = {}  # layer: (first row, end row, head)
            for i, group in enumerate(chunk):
                for layer, head in group:
                    removed.setdefault(layer, []).append((i * count, (i + 1) * count, head))

            def remove(activation, name):
                layer = int(name.split(".")[1])
                ablated = activation.clone()
                for first, end, head in removed[layer]:
                    if means is None:
                        ablated[first:end, :, head] = 0
                    else:
                        ablated[first:end, :, head] = means[layer][: activation.shape[1], head].to(activation.dtype)
                return ablated

            x = inputs.repeat(len(chunk), 1).to(device)
            y = targets.repeat(len(chunk), 1).to(device)
            with (
                torch.inference_mode(),
                hooks(network, {f"blocks.{layer}.attention.heads": remove for layer in removed}),
            ):
                logits = network(x)[0]
                nats = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view(len(chunk), -1)
            losses.extend(float(row.double().mean()) for row in nats)
            if progress is not None:
                progress.advance()
    finally:
        network.train(was_training)
    return losses


def every_head(model) -> list[list[Head]]:
    """One group per head of the model: each head removed alone."""
    return [[(layer, head)] for layer, count in enumerate(head_counts(model)) for head in range(count)]
