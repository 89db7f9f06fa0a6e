"""How many CPU threads sampling and evaluation use.

Small models gain nothing from splitting their matrix products across threads:
each product is a few microseconds of work, and on a busy machine a second
thread mostly waits for a core, so on a loaded machine a small model samples
several times faster on one thread than on torch's default count
(benchmarks/run_all.py measures both). Large models do gain, so the default
depends on the model's size.
"""

from __future__ import annotations

import os

import torch

from ..errors import ZooError

# Below this many parameters one thread is the default: the measured crossover
# on 2 cores lies between gpt-char-mini (0.8 M) and gpt-char (10.8 M).
SMALL_MODEL_PARAMETERS = 5_000_000


def default_threads(parameters: int) -> int:
    """One thread for small models; torch's own default for the rest, unless
    OMP_NUM_THREADS says otherwise (then torch already follows it)."""
    if parameters < SMALL_MODEL_PARAMETERS and "OMP_NUM_THREADS" not in os.environ:
        return 1
    return torch.get_num_threads()


def check_threads(requested: int | None) -> None:
    if requested is not None and requested < 1:
        raise ZooError(f"--threads must be at least 1, not {requested}")


def use_threads_before_loading(parameters: int | None, requested: int | None = None) -> None:
    """Set, before the network exists, the count ``use_threads`` will set once it
    does, from the parameter count its card records: loading is torch work too
    (the weights are checked and copied), and on a busy machine a small model
    loads more slowly on two threads than on one. A card that
    records no count leaves torch's default until ``use_threads``."""
    check_threads(requested)  # so a given count is at least 1
    if requested is not None:
        torch.set_num_threads(requested)
    elif parameters is not None:
        torch.set_num_threads(default_threads(parameters))


def use_threads(network: torch.nn.Module, requested: int | None = None) -> int:
    """Set torch's intra-op threads for ``network`` (``requested``, or the
    default for its size) and return the number set."""
    check_threads(requested)
    count = requested or default_threads(sum(p.numel() for p in network.parameters()))
    torch.set_num_threads(count)
    return count
