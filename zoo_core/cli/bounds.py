"""The bounds of every number a command line gives, checked in one place.

A typo (``--windows 1000000000``) must be one line naming the limit, never an
allocator's traceback or a run without end. `check_numbers` runs before every
command, on the options it has, with the limits below: what no variant could
use. `check_for_variant` narrows them, before loading, to what one variant
allows (windows that fit its context, top-k within its vocabulary); the heads
`--ablate` names are checked against the loaded network
(zoo_core.inspection.ablation.check_heads).

No torch, no pydantic: this runs in the front (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import math

from ..errors import ZooError

WINDOW_TOKENS = 1 << 22  # tokens of evaluation windows at once (inputs and targets: 64 MiB as int64)

# option dest: (lowest, highest, whether the lowest itself is refused)
NUMBERS: dict[str, tuple[float, float, bool]] = {
    # eval, compare, inspect
    "windows": (1, 1 << 16, False),
    "text_chars": (1, 1 << 30, False),
    # sample, compare
    "max_new_tokens": (1, 1 << 20, False),
    "num_samples": (1, 1024, False),
    "top_k": (1, 1 << 24, False),
    "threads": (1, 4096, False),
    # serve
    "port": (0, 65535, False),
    "max_tokens_limit": (1, 1 << 20, False),
    "max_concurrent": (1, 4096, False),
    "max_queue": (0, 1 << 20, False),
    "max_connections": (1, 1 << 20, False),
    "header_timeout": (0, 86400, True),
    "body_timeout": (0, 86400, True),
    "keep_alive_timeout": (0, 86400, True),
    # pull, install
    "deadline": (0, 1e7, True),
    "min_rate": (0, 1e12, False),
}


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse, in one line naming the flag and the bound, any number outside `NUMBERS`."""
    for dest, (low, high, open_low) in NUMBERS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isnan(value) or value < low or (open_low and value == low):
            raise ZooError(f"{flag(dest)} must be {'more than' if open_low else 'at least'} {low}, not {_shown(value)}")
        if value > high:
            raise ZooError(f"{flag(dest)} must be at most {_shown(high)}, not {_shown(value)}")


def _shown(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() and abs(number) < 1e18 else f"{number:g}"


def check_for_variant(args: argparse.Namespace, card) -> None:
    """Refuse numbers ``card``'s variant cannot use, before it is loaded:
    windows past `WINDOW_TOKENS` tokens of its context, top-k past its vocabulary."""
    windows = getattr(args, "windows", None)
    context = card.context_length
    if windows is not None and context and windows * context > WINDOW_TOKENS:
        most = max(WINDOW_TOKENS // context, 1)
        raise ZooError(
            f"--windows {windows:,}: '{card.name}' reads windows of {context:,} tokens, "
            f"so at most {most:,} windows ({WINDOW_TOKENS:,} tokens)"
        )
    top_k = getattr(args, "top_k", None)
    vocabulary = card.tokenizer.vocab_size
    if top_k is not None and vocabulary and top_k > vocabulary:
        raise ZooError(f"--top-k {top_k:,}: '{card.name}' has {vocabulary:,} tokens, so at most {vocabulary:,}")
