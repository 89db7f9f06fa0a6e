"""Shared set-up for the benchmarks: shapes from the registry, timing helpers."""

from __future__ import annotations

import statistics
import time

import torch

import zoo_core
from zoo_core.api import build_network


def zoo_network(variant_name: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """A randomly initialised network of a registered variant, and its config."""
    variant = zoo_core.get_variant(variant_name)
    torch.manual_seed(seed)
    return build_network(variant), variant.card.architecture_config()


def best_of(repeats: int, run) -> float:
    """The fastest of ``repeats`` timings: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def median(values):
    return statistics.median(values)
