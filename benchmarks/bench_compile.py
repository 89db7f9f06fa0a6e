"""`zoo train --compile` against the eager step, on this machine's CPU.

The zoo's own network at each benchmark shape, stepped eagerly and through
`zoo_core.training.compiled` (torch.compile with fullgraph=True: a graph break
is an error, not a silent fallback), with the same fused AdamW, timed in pairs of
steps after both have warmed up, as `bench_training` times its sides. The first compiled steps are timed apart:
that is what a `zoo train --compile` run pays before its first update.
Not part of `run_all` (compiling takes a while); writes its own section of
docs/benchmarks.md:

    .venv/bin/python -m benchmarks.bench_compile
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import torch

import zoo_core
from benchmarks.bench_training import SHAPES, THREADS, _stepper
from benchmarks.common import (load_text, machine_load, median, median_interval, paired_step_seconds, section_markers,
                               write_section, zoo_network)
from zoo_core.training import compiled, make_optimizer

WARMUP, SECONDS_PER_SHAPE = 3, 20.0


def measure(name: str) -> dict:
    card = zoo_core.get_variant(name).card
    recipe, context, vocab = card.recipe, card.context_length, card.tokenizer.vocab_size
    data = torch.randint(0, vocab, (200_000,), generator=torch.Generator().manual_seed(0))
    eager, _ = zoo_network(name)
    network, _ = zoo_network(name)
    steppers = {
        "eager": _stepper(eager, make_optimizer(eager, recipe), data, context, recipe.batch_size, recipe.grad_clip),
        "compiled": _stepper(compiled(network), make_optimizer(network, recipe), data, context, recipe.batch_size, recipe.grad_clip),
    }
    started = time.perf_counter()
    steppers["compiled"]()  # compiles forward and backward
    compile_seconds = time.perf_counter() - started
    seconds = paired_step_seconds(steppers, WARMUP, SECONDS_PER_SHAPE)
    tokens = recipe.batch_size * context
    return {"shape": name, "compile_seconds": compile_seconds,
            "eager": median([tokens / t for t in seconds["eager"]]),
            "compiled": median([tokens / t for t in seconds["compiled"]]),
            "ratio": median_interval([e / c for c, e in zip(seconds["compiled"], seconds["eager"])])}  # compiled's speed over eager's


def _verdict(ratios: list[float]) -> str:
    if all(r < 1 for r in ratios):
        return ("Compiling does not pay on this machine at these sizes (below 1.0× on every shape), and its "
                "compile time comes on top: `--compile` stays an option, off by default.")
    if all(r > 1 for r in ratios):
        return "Compiling pays on every shape here once compiled; whether it pays for a whole run depends on the compile time."
    return "Compiling pays on some shapes and not on others here: `--compile` stays an option, off by default."


def main() -> None:
    torch.set_num_threads(THREADS)
    load_before, started = machine_load(), time.perf_counter()
    rows = [measure(name) for name in SHAPES]
    load_after = machine_load()

    begin, end = section_markers("bench_compile")
    lines = [
        begin,
        "## `zoo train --compile` on this CPU",
        "",
        f"`python -m benchmarks.bench_compile`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{(time.perf_counter() - started) / 60:.1f} minutes, torch {torch.__version__}, {THREADS} thread; machine load "
        f"before {load_text(load_before)}, after {load_text(load_after)}. "
        "The zoo's network eager and through torch.compile (fullgraph: no graph breaks), same fused AdamW, "
        f"steps timed in pairs (one of each, back to back, the order swapped at every pair) for {SECONDS_PER_SHAPE:.0f} s "
        "per shape after warm-up; tokens/s are medians over the steps, the ratio the median of the pairs' ratios "
        "with its 95% confidence interval.",
        "",
        "| shape | first compiled step (s) | eager tokens/s | compiled tokens/s | pairs | compiled / eager (95% interval) |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {r['shape']} | {r['compile_seconds']:.1f} | {r['eager']:,.0f} | {r['compiled']:,.0f} | {r['ratio']['n']} | "
          f"**{r['ratio']['median']:.2f}× ({r['ratio']['low']:.2f}–{r['ratio']['high']:.2f})** |" for r in rows),
        "",
        _verdict([r["ratio"]["median"] for r in rows]),
        end,
    ]
    section = "\n".join(lines)
    print(section)
    write_section("bench_compile", section)


if __name__ == "__main__":
    main()
