"""Bounded before built: what a card would cost, checked before anything is allocated.

A card is data from whoever wrote the registry. A billion layers or
``context_length = 10**12`` would make building the network (or its first
forward pass) allocate until the machine gives up, so every card is checked in
two steps:

1. **Shape** (run whenever a card is validated, so `zoo show`, `zoo list`, `zoo
   load` and `zoo verify` all refuse it): the architecture's config model, which
   its plugin registers (``register(name, factory, config=...)``), checks the
   sizes, e.g. that they are positive whole numbers and the width divides into
   the heads. One line names the field (``ShapeError``).
2. **Cost** (`check_budget`, run before a network is built): the parameters,
   and the memory a run needs at most (weights, plus the KV cache of a full
   context and one forward pass over ``RUN_TOKENS`` positions attending to all
   of it: its activations, attention scores and logits, at batch 1 in float32),
   compared with limits. The parameters and the weights' bytes are
   counted exactly, for any architecture, by building it on torch's meta
   device, which allocates nothing (``zoo_core.loading.sizing.measure_on_meta``, handed
   in as ``measure``); the activations are estimated from the config's sizes.
   A config whose estimate from its sizes is already far (``SCREEN_FACTOR``
   times) beyond a limit is refused without building anything, even on meta.
   Where the architecture cannot be built on meta, the estimate from the
   config's sizes stands in (that of the first registered config model whose
   ``estimate_sizes`` recognises the config, an upper bound for the zoo's own
   architectures; else the square of the largest size),
   and a refusal says so; an architecture plugin may instead attach
   ``estimate_parameters(config) -> int`` to its factory, which is then used
   and nothing is built.

Why ``RUN_TOKENS`` positions and not a full window: nothing the zoo runs reads
more at once on a model with a long context, and a full window's logits alone
(context × vocabulary: 34 GB for Gemma 3's 32,768 × 262,144) would refuse
models that run in a few GiB. Sampling (`zoo sample`, ``model.generate``, the
server) keeps a KV cache of the whole context but feeds a prompt through it
``RUN_TOKENS`` positions at a time (``zoo_core.inference.sampling``), so
logits of at most that many positions exist; `zoo eval`, `compare`, `inspect`
size their windows and batches to a 2 GiB bound of their own
(``zoo_core.evaluation.budget``); an import's paragraph measurement reads a
paragraph. What can still read a full window at once is counted by nobody
here, on purpose: training (its windows are the recipe's ``context``, else the
card's context; on a long-context model give ``--set context=N``), sampling
with ``use_cache=False`` (the whole window each token), and a direct
``model.network(ids)`` call, whose caller chose the input's size.

Limits (defaults suit a laptop; raise them for bigger models):
    ZOO_MAX_PARAMETERS   or `zoo --max-parameters N`   default 1,000,000,000
    ZOO_MAX_MEMORY       or `zoo --max-memory BYTES`   default 16 GiB (suffixes K, M, G, T)
"""

from __future__ import annotations

import inspect
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeGuard

from ..errors import ZooError
from ..plugin_api.manager import get_plugins

DEFAULT_MAX_PARAMETERS = 1_000_000_000
DEFAULT_MAX_MEMORY = 16 * 1024**3
BYTES_PER_VALUE = 4  # float32


def _is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class ShapeError(ValueError):
    """An impossible setting in a card's config; ``field`` names the key (pydantic
    turns it into one line naming the registry, the variant and the field)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


# A config's size estimate this many times over a limit needs no count to be refused.
SCREEN_FACTOR = 100
# Positions one forward pass of a run reads at once, at most (see above): a
# cached prompt is fed in chunks of this many, as llama.cpp feeds one in batches
# of 2,048 by default (its n_batch).
RUN_TOKENS = 2048
ESTIMATED = "estimated from the config's sizes"
COUNTED = "counted exactly, built with nothing large allocated"


@dataclass(frozen=True)
class Estimate:
    parameters: int
    memory_bytes: int  # weights, a full context's KV cache and RUN_TOKENS positions' forward pass, batch 1
    method: str = ESTIMATED  # how the parameters are known: COUNTED, or ESTIMATED (and why)


class CannotMeasure(Exception):
    """A network could not be counted on the meta device; the message says why."""


def _registered_estimates() -> list[Callable[..., tuple[int, int] | None]]:
    """Every registered architecture's ``estimate_sizes``, once each, in name order."""
    models = get_plugins().components["models"]
    found: dict[int, Callable[..., tuple[int, int] | None]] = {}
    for name in models.names():
        estimate = getattr(models.declared(name, "config"), "estimate_sizes", None)
        if callable(estimate):
            found.setdefault(id(getattr(estimate, "__func__", estimate)), estimate)
    return list(found.values())


def _takes_tokens(estimate: Callable[..., Any]) -> bool:
    try:
        return "tokens" in inspect.signature(estimate).parameters
    except (TypeError, ValueError):
        return False


def _estimate_sizes(config: dict[str, Any]) -> tuple[int, int]:
    """(parameters, activation values of a run) estimated from the config's sizes:
    by a registered architecture that recognises them (reading ``RUN_TOKENS``
    positions at once where its estimate takes ``tokens``, else a full window),
    else from the largest size."""
    for estimate in _registered_estimates():
        given = estimate(config, tokens=RUN_TOKENS) if _takes_tokens(estimate) else estimate(config)
        if given is not None:
            return int(given[0]), int(given[1])
    T = int(config.get("context_length", 1))
    # Shaped like no registered architecture: bound by the largest size the config holds.
    sizes = [v for v in config.values() if _is_whole(v)] + [
        len(v) for v in config.values() if isinstance(v, (list, str))
    ]
    widest = max([1, *sizes])
    return widest * widest, T * widest


def estimate_cost(config: dict[str, Any], estimate_parameters: Callable[[dict], int] | None = None) -> Estimate:
    """What building ``config`` (an architecture config: the card's config plus
    context_length and vocab_size) and running one window through it costs,
    estimated from its sizes (or with the architecture's own ``estimate_parameters``)."""
    parameters, activations = _estimate_sizes(config)
    if estimate_parameters is not None:
        parameters = int(estimate_parameters(config))
        return Estimate(parameters, BYTES_PER_VALUE * (parameters + activations), "given by the architecture")
    return Estimate(parameters, BYTES_PER_VALUE * (parameters + activations))


def measured_cost(
    config: dict[str, Any], measure: Callable[[], tuple[int, int]], max_parameters: int, max_memory: int
) -> Estimate:
    """The cost with the parameters and weight bytes ``measure()`` counts (on the
    meta device); the estimate from the sizes when it cannot, or when that
    estimate is already ``SCREEN_FACTOR`` times over a limit (nothing is built)."""
    guess = estimate_cost(config)
    if guess.parameters > SCREEN_FACTOR * max_parameters or guess.memory_bytes > SCREEN_FACTOR * max_memory:
        return replace(guess, method=f"{ESTIMATED}, far beyond the limits: not built even on the meta device")
    try:
        parameters, weight_bytes = measure()
    except CannotMeasure as exc:
        return replace(guess, method=f"{ESTIMATED}: {exc}")
    activations = _estimate_sizes(config)[1]
    return Estimate(parameters, weight_bytes + BYTES_PER_VALUE * activations, COUNTED)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str, what: str) -> int:
    """``"16G"``, ``"512M"``, ``"1000000"``: a positive number of bytes (or things)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ZooError(f"{what} must be a positive number (suffixes K, M, G, T allowed), not {text!r}")
    value = float(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
    if not 1 <= value < 2**63 or not math.isfinite(value):
        raise ZooError(f"{what} must be a positive number, not {text!r}")
    return int(value)


def limits() -> tuple[int, int]:
    """(max parameters, max memory bytes), from the environment or the defaults."""
    parameters = os.environ.get("ZOO_MAX_PARAMETERS")
    memory = os.environ.get("ZOO_MAX_MEMORY")
    return (
        parse_size(parameters, "ZOO_MAX_PARAMETERS") if parameters else DEFAULT_MAX_PARAMETERS,
        parse_size(memory, "ZOO_MAX_MEMORY") if memory else DEFAULT_MAX_MEMORY,
    )


def check_budget(
    name: str,
    config: dict[str, Any],
    estimate_parameters: Callable[[dict], int] | None = None,
    measure: Callable[[], tuple[int, int]] | None = None,
) -> Estimate:
    """Refuse (one line) a variant whose cost exceeds the limits. ``measure``
    (zoo_core.loading.sizing.measure_on_meta on the architecture) counts it exactly;
    without it, or with the architecture's ``estimate_parameters``, the estimate is used."""
    max_parameters, max_memory = limits()
    try:
        if measure is not None and estimate_parameters is None:
            estimate = measured_cost(config, measure, max_parameters, max_memory)
        else:
            estimate = estimate_cost(config, estimate_parameters)
    except ZooError:
        raise
    except Exception as exc:  # a plugin's estimator is plugin code: its failure is the card's problem
        raise ZooError(f"variant '{name}': cannot estimate its size: {type(exc).__name__}: {exc}") from None
    how = "" if estimate.method == COUNTED else f"; {estimate.method}"
    if estimate.parameters > max_parameters:
        raise ZooError(
            f"variant '{name}': about {estimate.parameters:,} parameters, more than the limit of {max_parameters:,} "
            f"(raise it with --max-parameters or ZOO_MAX_PARAMETERS if you mean it{how})"
        )
    if estimate.memory_bytes > max_memory:
        raise ZooError(
            f"variant '{name}': needs about {_bytes(estimate.memory_bytes)} to build and run one window "
            f"(context_length {config.get('context_length')}), more than the limit of {_bytes(max_memory)} "
            f"(raise it with --max-memory or ZOO_MAX_MEMORY if you mean it{how})"
        )
    return estimate


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    return f"{count:,.1f} TiB"
