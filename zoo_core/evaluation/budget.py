"""How much a measurement may cost on a model: a budget in compute and a bound on memory.

`zoo eval`, `zoo compare`, `zoo inspect` and the gallery read fixed windows of
text through the network many times over (an ablation sweep reads them once per
head). On the built-in variants (thousands to a million parameters, contexts of
8 to 256 tokens) the recipe's defaults cost seconds; on an imported model of a
hundred million parameters and an 8,192-token context the same defaults cost
tens of minutes and, read 64 windows at a time, tens of gigabytes of logits.

So every default is sized to the model from its shape (parameters, layers,
width, vocabulary, context) and to this machine's memory:

- compute: a forward pass costs about ``2 × parameters`` floating-point
  operations per token, plus ``2 × layers × width × context`` for causal
  attention. A default reads at most ``COMPUTE_BUDGET`` operations in all
  (about a minute on two laptop cores): past it, the context is halved first
  (down to ``MIN_CONTEXT``) while fewer than ``MIN_WINDOWS`` windows would fit,
  then fewer windows are read. The recipe's own numbers stand whenever they fit,
  which is every built-in variant: their results do not change.
- memory: what one window costs above the loaded weights (its logits over the
  vocabulary, a few copies of the residual stream) sets how many windows are
  read at once, so that a batch stays under ``memory_bound()``: ``MEMORY_BOUND``,
  or half the memory this machine has available when that is less. An explicit
  request (``--context``, ``--windows``) whose single window, or whose windows
  held at once, would not fit is refused in one line naming the option to lower;
  one that only costs time is run, with a progress bar and its estimate.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from ..errors import ZooError

# Floating-point operations a default may spend: about a minute on two shared laptop
# cores (30-50 GFLOP/s measured there on SmolLM2-135M), seconds on a workstation.
COMPUTE_BUDGET = 2e12
MEMORY_BOUND = 2 * 2**30  # bytes of activations above the loaded model, at most
MIN_CONTEXT = 128  # a default never cuts a card's context below this (nor raises a shorter one)
MIN_WINDOWS = 16  # fewer windows than this and the context is cut first
MAX_BATCH = 64  # windows per forward pass, at most (what mean_loss always read)
# Bytes per token of a forward pass above the weights, in units of the element
# size: the logits (and their float copy and log-softmax) over the vocabulary,
# and a dozen tensors of the residual width alive at once inside a block.
LOGIT_COPIES = 3
STREAM_COPIES = 16


@dataclass(frozen=True)
class Shape:
    """What sets a model's cost per token: read off the loaded network and its card."""

    name: str
    parameters: int
    layers: int
    width: int
    vocabulary: int
    context: int  # the card's context length
    element_bytes: int  # of its activations (4 for float32)

    def flops_per_token(self, context: int) -> float:
        return 2.0 * self.parameters + 2.0 * self.layers * self.width * context

    def window_bytes(self, context: int) -> int:
        """Memory one window of ``context`` tokens takes in a forward pass, above the weights."""
        per_token = self.vocabulary * LOGIT_COPIES + self.width * STREAM_COPIES
        return context * per_token * max(4, self.element_bytes)  # losses are computed in float32


def shape_of(model) -> Shape:
    """The shape of a loaded ZooModel, from its network (any architecture: what is
    not found is estimated from the parameter count)."""
    network = model.network
    parameters = sum(p.numel() for p in network.parameters())
    vocabulary = model.card.tokenizer.vocab_size
    width = 0
    for module in network.modules():
        if isinstance(module, torch.nn.Embedding) and module.num_embeddings == vocabulary:
            width = module.embedding_dim
            break
    # The layers: the longest list of modules (a transformer's blocks), whatever it is called.
    layers = max(
        (len(m) for m in network.modules() if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential))), default=1
    )
    if width == 0:  # no vocabulary embedding: the width of a network of that size
        width = max(1, int(math.sqrt(parameters / (12 * layers))))
    first = next(network.parameters(), None)
    element = first.element_size() if first is not None and first.is_floating_point() else 4
    return Shape(model.name, parameters, max(1, layers), width, vocabulary, model.card.context_length, element)


def available_memory() -> int | None:
    """Bytes this machine can still give (MemAvailable on Linux), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_bound() -> int:
    """Bytes a measurement may take above the loaded model: MEMORY_BOUND, or half
    of what the machine has available when that is less (never under 256 MiB)."""
    available = available_memory()
    return MEMORY_BOUND if available is None else max(256 * 2**20, min(MEMORY_BOUND, available // 2))


def gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Sizing:
    """Windows and context a measurement reads, how many at once, and why."""

    windows: int
    context: int
    batch_size: int
    sized: bool  # the defaults were cut to the budget

    def note(self, shape: Shape, default_windows: int) -> str | None:
        """What was cut, for a report; None when the defaults stood."""
        if not self.sized:
            return None
        return (
            f"sized to the budget ({COMPUTE_BUDGET:.0e} operations): {self.windows} windows of {self.context} tokens "
            f"rather than {default_windows} of {shape.context}"
        )


def batch_size(shape: Shape, context: int, bound: int | None = None, option: str = "--context") -> int:
    """Windows of ``context`` tokens read at once under the memory bound (at most
    MAX_BATCH); a single window that does not fit is refused naming ``option``."""
    bound = memory_bound() if bound is None else bound
    one = shape.window_bytes(context)
    if one > bound:
        fits = max(1, bound // max(1, shape.window_bytes(1)))
        raise ZooError(
            f"one window of {context:,} tokens of '{shape.name}' needs about {gib(one)} above the model, more than "
            f"the {gib(bound)} this machine allows a measurement; lower {option} (about {fits:,} tokens fit)"
        )
    return max(1, min(MAX_BATCH, bound // one))


def size_windows(
    shape: Shape,
    windows: int | None,
    context: int | None,
    default_windows: int,
    passes: float = 1.0,
    budget: float = COMPUTE_BUDGET,
    bound: int | None = None,
    min_context: int = MIN_CONTEXT,
) -> Sizing:
    """The windows and context a measurement reads ``passes`` times over (an ablation
    sweep: once per head, and once intact): what was asked for, or defaults sized so
    that their reads stay within ``budget`` operations and ``bound`` bytes (a context
    is cut no lower than ``min_context``; at least one window is read, whatever it costs).
    Explicit values are kept (only memory refuses them); missing ones are sized."""
    bound = memory_bound() if bound is None else bound
    if windows is not None and windows < 1:
        raise ZooError(f"--windows must be at least 1, not {windows}")
    if context is not None and not 1 <= context <= shape.context:
        raise ZooError(
            f"--context must be from 1 to {shape.context:,} ('{shape.name}' reads at most that), not {context:,}"
        )
    chosen_context = context if context is not None else shape.context
    chosen_windows = windows if windows is not None else default_windows

    def affordable(length: int) -> int:  # windows of `length` tokens within the budget
        return int(budget / (passes * length * shape.flops_per_token(length)))

    sized = False
    if context is None:
        while chosen_context > min_context and (
            affordable(chosen_context) < min(chosen_windows, MIN_WINDOWS) or shape.window_bytes(chosen_context) > bound
        ):
            chosen_context = max(min_context, chosen_context // 2)
            sized = True
    if windows is None and affordable(chosen_context) < chosen_windows:
        chosen_windows = max(1, affordable(chosen_context))
        sized = True
    batch = batch_size(shape, chosen_context, bound, "--context")
    held = chosen_windows * (chosen_context + 1) * 8 * 2  # the windows' token ids, inputs and targets
    if held > bound:
        raise ZooError(
            f"{chosen_windows:,} windows of {chosen_context:,} tokens hold {gib(held)} of token ids, more than the "
            f"{gib(bound)} this machine allows a measurement; lower --windows"
        )
    return Sizing(chosen_windows, chosen_context, batch, sized)


def default_context(shape: Shape, bound: int | None = None) -> int:
    """The context a default score reads: the card's, halved (not below MIN_CONTEXT)
    while one window would not fit under the memory bound or its attention would
    cost more than the rest of the network (2 × layers × width × context > 2 × parameters)."""
    bound = memory_bound() if bound is None else bound
    context = shape.context
    while context > MIN_CONTEXT and (
        shape.window_bytes(context) > bound or shape.layers * shape.width * context > shape.parameters
    ):
        context = max(MIN_CONTEXT, context // 2)
    return context


def text_characters(
    shape: Shape, characters: int, tokens: int, context: int, share: float = 0.5, budget: float = COMPUTE_BUDGET
) -> int | None:
    """How many characters of a text of ``characters`` (``tokens`` tokens) bits per
    byte may score within ``share`` of the budget (windows sliding by half the
    context read each token about twice); None when the whole text fits."""
    cost = 2.0 * tokens * shape.flops_per_token(context)
    if cost <= share * budget:
        return None
    return max(1, int(characters * share * budget / cost))
