"""Bounded before built: what a card would cost, checked before anything is allocated.

A card is data from whoever wrote the registry. ``n_layer = 10**9`` or
``context_length = 10**12`` would make building the network (or its first
forward pass) allocate until the machine gives up, so every card is checked in
two steps:

1. **Shape** (`check_config_shape`, run whenever a card is validated, so `zoo
   show`, `zoo list`, `zoo load` and `zoo verify` all refuse it): the common size
   keys are positive whole numbers and the width divides into the heads. One
   line names the field.
2. **Cost** (`check_budget`, run before a network is built): the parameters,
   and the memory one forward pass over a full window needs (weights, plus
   activations, attention scores, logits and the KV cache at batch 1 in
   float32), compared with limits. The parameters and the weights' bytes are
   counted exactly, for any architecture, by building it on torch's meta
   device, which allocates nothing (``zoo_core.loading.sizing.measure_on_meta``, handed
   in as ``measure``); the activations are estimated from the config's sizes.
   A config whose estimate from its sizes is already far (``SCREEN_FACTOR``
   times) beyond a limit is refused without building anything, even on meta.
   Where the architecture cannot be built on meta, the estimate from the
   config's sizes stands in (transformer-shaped from the common keys, an upper
   bound for the zoo's own architectures; else the square of the largest size),
   and a refusal says so; an architecture plugin may instead attach
   ``estimate_parameters(config) -> int`` to its factory, which is then used
   and nothing is built.

Limits (defaults suit a laptop; raise them for bigger models):
    ZOO_MAX_PARAMETERS   or `zoo --max-parameters N`   default 1,000,000,000
    ZOO_MAX_MEMORY       or `zoo --max-memory BYTES`   default 16 GiB (suffixes K, M, G, T)
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeGuard

from ..errors import ZooError

DEFAULT_MAX_PARAMETERS = 1_000_000_000
DEFAULT_MAX_MEMORY = 16 * 1024**3
BYTES_PER_VALUE = 4  # float32

# Sizes a config may hold: whole numbers, at least 1 (d_ff may be left out).
SIZE_KEYS = ("d_model", "n_layer", "n_head", "d_ff", "max_tokens", "n_kv_head", "head_size")
FRACTION_KEYS = ("dropout",)


def _is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class ShapeError(ValueError):
    """An impossible size in a card's config; ``field`` names the key."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_config_shape(config: dict[str, Any]) -> None:
    """Refuse impossible shapes with a ShapeError naming the field (pydantic
    turns it into one line naming the registry, the variant and the field)."""
    for key in SIZE_KEYS:
        if key not in config or (key == "d_ff" and config[key] is None):
            continue
        value = config[key]
        if not _is_whole(value):
            raise ShapeError(key, f"must be a whole number, not {value!r}")
        if value < 1:
            raise ShapeError(key, f"must be at least 1, not {value}")
    for key in FRACTION_KEYS:
        if key in config:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ShapeError(key, f"must be a number from 0 up to (not including) 1, not {value!r}")
    d_model, n_head = config.get("d_model"), config.get("n_head")
    # With its own head_size, a head need not be a slice of the width (Qwen3).
    if d_model is not None and n_head is not None and "head_size" not in config and d_model % n_head:
        raise ShapeError("n_head", f"the width d_model = {d_model} is not divisible by {n_head} heads")


# A config's size estimate this many times over a limit needs no count to be refused.
SCREEN_FACTOR = 100
ESTIMATED = "estimated from the config's sizes"
COUNTED = "counted exactly, built with nothing large allocated"


@dataclass(frozen=True)
class Estimate:
    parameters: int
    memory_bytes: int  # weights plus one forward pass over a full window, batch 1
    method: str = ESTIMATED  # how the parameters are known: COUNTED, or ESTIMATED (and why)


class CannotMeasure(Exception):
    """A network could not be counted on the meta device; the message says why."""


def _estimate_sizes(config: dict[str, Any]) -> tuple[int, int]:
    """(parameters, activation values of one window) estimated from the config's sizes."""
    V = int(config.get("vocab_size", 1))
    T = int(config.get("context_length", 1))
    C = config.get("d_model")
    if _is_whole(C):
        L = int(config.get("n_layer", 0))
        H = int(config.get("n_head", 1))
        F = int(config.get("d_ff") or 4 * C)
        heads = H * int(config.get("head_size") or C // H)  # the queries' width, and the output's input
        keys = int(config.get("n_kv_head") or H) * (heads // H)
        up = 2 * F if config.get("mlp") in ("swiglu", "geglu") else F  # a gated up projection is two
        # q, k, v, out; up, down; biases and norms
        per_layer = C * (2 * heads + 2 * keys) + C * (up + F) + up + 9 * C
        # A table of T vectors: trained for learned positions, a buffer (RoPE's angles) or nothing otherwise.
        learned = config.get("positions", "learned") not in ("none", "sinusoidal", "rope", "alibi")
        parameters = 2 * V * C + V + L * per_layer + 2 * C + (T * C if learned else 0)  # embedding, head, blocks, norm
        # Per layer, scores, logits, KV cache, positions.
        activations = L * T * (4 * C + F) + H * T * T + T * V + 2 * L * T * C + T * C
    else:
        # Not transformer-shaped: bound by the largest size the config holds.
        sizes = [v for v in config.values() if _is_whole(v)] + [
            len(v) for v in config.values() if isinstance(v, (list, str))
        ]
        widest = max([1, *sizes])
        parameters = widest * widest
        activations = T * widest
    return parameters, activations


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
