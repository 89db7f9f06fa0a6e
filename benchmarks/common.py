"""Shared set-up for the benchmarks: shapes from the registry, the nanoGPT
reference, timing helpers that keep the spread and the machine's load."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
import statistics
import time
from pathlib import Path

import torch

import zoo_core
from zoo_core.loading.api import build_network

ROOT = Path(__file__).resolve().parent.parent
# nanoGPT's real model.py (MIT), kept outside the project; never copied into it.
NANOGPT_MODEL = ROOT.parent / "shared" / "reference" / "nanogpt" / "model.py"


def zoo_network(variant_name: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """A randomly initialised network of a registered variant, built through the plugin manager, and its config."""
    variant = zoo_core.get_variant(variant_name)
    torch.manual_seed(seed)
    return build_network(variant), variant.card.architecture_config()


def nanogpt():
    """nanoGPT's `model` module and a label saying which one it is.

    The real model.py when it is present (``ZOO_NANOGPT`` may point at it);
    otherwise the project's stand-in `benchmarks/reference_gpt.py` wrapped to
    the same interface, and the label says so."""
    path = Path(os.environ.get("ZOO_NANOGPT", NANOGPT_MODEL))
    if path.exists():
        spec = importlib.util.spec_from_file_location("nanogpt_model", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, f"nanoGPT model.py ({path})"
    from benchmarks import reference_gpt

    return reference_gpt.as_nanogpt_module(), "stand-in benchmarks/reference_gpt.py (nanoGPT's model.py not found)"


def nanogpt_model(module, vocab_size: int, context: int, d_model: int, n_layer: int, n_head: int, dropout: float = 0.0):
    """nanoGPT's GPT at a zoo variant's shape (bias=False, as its shakespeare_char config)."""
    config = module.GPTConfig(block_size=context, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head,
                              n_embd=d_model, dropout=dropout, bias=False)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        return module.GPT(config)


def nanogpt_optimizer(model, weight_decay: float, learning_rate: float, betas: tuple[float, float]):
    """nanoGPT's own `configure_optimizers` on CPU (it fuses AdamW on CUDA only)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return model.configure_optimizers(weight_decay, learning_rate, betas, "cpu")


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def machine_load() -> tuple[float, float, float]:
    """1, 5 and 15-minute load averages: how busy the machine was."""
    return os.getloadavg()


def spread_text(values: dict, fmt: str = ",.0f") -> str:
    """A `spread` as the page shows it: median (min–max)."""
    return f"{values['median']:{fmt}} ({values['min']:{fmt}}–{values['max']:{fmt}})"


def load_text(load) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def paired_step_seconds(steppers: dict, warmup: int, seconds: float) -> dict[str, list[float]]:
    """Seconds of each side's step, timed one step at a time in pairs: each
    side's step right after the other's, the order swapped at every pair, for
    ``seconds`` in all after ``warmup`` steps each. Pair ``i`` of every side's
    list ran back to back, so ratios taken pair by pair see the same machine:
    on a shared host its speed changes within seconds, which rounds of whole
    seconds per side cannot cancel."""
    for step in steppers.values():
        for _ in range(warmup):
            step()
    times = {side: [] for side in steppers}
    deadline, pair = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        for side in (list(steppers) if pair % 2 == 0 else list(reversed(steppers))):
            started = time.perf_counter()
            steppers[side]()
            times[side].append(time.perf_counter() - started)
        pair += 1
    return times


def median_interval(values: list[float], z: float = 1.96) -> dict:
    """The median of ``values`` and a distribution-free 95% confidence interval
    for it: the order statistics whose ranks a binomial(n, 1/2) count puts
    around the middle (normal approximation; fine from a few dozen values)."""
    ordered, n = sorted(values), len(values)
    low = max(1, math.floor(n / 2 - z * math.sqrt(n) / 2))
    high = min(n, math.ceil(1 + n / 2 + z * math.sqrt(n) / 2))
    return {"median": statistics.median(ordered), "low": ordered[low - 1], "high": ordered[high - 1], "n": n}


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def best_of(repeats: int, run) -> float:
    """The fastest of ``repeats`` timings: the least disturbed by the rest of the machine."""
    return min(timed(run) for _ in range(repeats))


def median(values):
    return statistics.median(values)


# --- sections of docs/benchmarks.md written by benchmarks run on their own ----------

BENCHMARKS_PAGE = ROOT / "docs" / "benchmarks.md"


def section_markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def write_section(name: str, section: str) -> None:
    """Put ``section`` (which starts and ends with its markers) into the page,
    replacing that benchmark's previous one; the rest of the page is kept."""
    begin, end = section_markers(name)
    text = BENCHMARKS_PAGE.read_text() if BENCHMARKS_PAGE.exists() else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    BENCHMARKS_PAGE.write_text(text)


def own_sections(text: str, names: tuple[str, ...]) -> list[str]:
    """The sections those benchmarks wrote, as they are in ``text``: `run_all`
    keeps them when it rewrites the page, since it does not measure them."""
    kept = []
    for name in names:
        begin, end = section_markers(name)
        if begin in text and end in text:
            kept.append(text[text.index(begin):text.index(end) + len(end)])
    return kept
