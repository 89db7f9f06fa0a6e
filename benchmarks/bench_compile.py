"""`zoo train --compile` against the eager step, on this machine's CPU, for the
zoo and for nanoGPT alike.

At each benchmark shape four steppers take turns: the zoo's network eagerly and
through `zoo_core.training.loop.compiled` (torch.compile with fullgraph=True: a graph
break is an error, not a silent fallback), each with the same fused AdamW; and
nanoGPT's model.py eagerly and through `torch.compile(model)`, as its train.py
compiles, each with its own optimizer. Steps are timed in rounds of one step of
each, the order reversed every round, as `bench_training` times its pairs, so
every ratio is taken round by round. nanoGPT compiled too, because a speed-up
from compiling the zoo alone would not say whether the zoo is ahead or torch
is. The first compiled steps are timed apart, with an empty compile cache:
that is what a first `zoo train --compile` run pays before its first update.
Not part of `run_all` (compiling takes a while); writes its own section of
docs/benchmarks.md:

    .venv/bin/python -m benchmarks.bench_compile
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import datetime, timezone

import torch

from benchmarks.bench_training import SHAPES, THREADS, nanogpt_stepper, shape_data, zoo_stepper
from benchmarks.common import (
    load_text,
    machine_load,
    median,
    median_interval,
    nanogpt,
    nanogpt_model,
    paired_step_seconds,
    section_markers,
    write_section,
    zoo_network,
)
from zoo_core.training.loop import compiled

WARMUP, SECONDS_PER_SHAPE = 3, 30.0
# name: (side, other side); each ratio is the side's speed over the other's, round by round
RATIOS = {"zoo_gain": ("zoo compiled", "zoo"), "nanogpt_gain": ("nanoGPT compiled", "nanoGPT"),
          "compiled_vs_compiled": ("zoo compiled", "nanoGPT compiled"), "compiled_vs_eager": ("zoo compiled", "nanoGPT")}


def measure(name: str, module) -> dict:
    recipe, context, vocab, data = shape_data(name)
    zoo_eager, config = zoo_network(name)
    zoo_compiled, _ = zoo_network(name)
    torch.manual_seed(0)
    shape = (vocab, context, config["d_model"], config["n_layer"], config["n_head"])
    nanogpt_eager, nanogpt_compiled = nanogpt_model(module, *shape), nanogpt_model(module, *shape)
    steppers = {
        "zoo": zoo_stepper(zoo_eager, recipe, data, context),
        "zoo compiled": zoo_stepper(zoo_compiled, recipe, data, context, run=compiled(zoo_compiled)),
        "nanoGPT": nanogpt_stepper(nanogpt_eager, recipe, data, context),
        "nanoGPT compiled": nanogpt_stepper(nanogpt_compiled, recipe, data, context, run=torch.compile(nanogpt_compiled)),
    }
    compile_seconds = {}
    for side in ("zoo compiled", "nanoGPT compiled"):
        started = time.perf_counter()
        steppers[side]()  # compiles forward and backward
        compile_seconds[side] = time.perf_counter() - started
    seconds = paired_step_seconds(steppers, WARMUP, SECONDS_PER_SHAPE)
    tokens = recipe.batch_size * context
    return {"shape": name, "compile_seconds": compile_seconds, "rounds": len(seconds["zoo"]),
            "tokens_per_second": {side: median([tokens / t for t in times]) for side, times in seconds.items()},
            **{key: median_interval([o / s for s, o in zip(seconds[side], seconds[other])])
               for key, (side, other) in RATIOS.items()}}


def _verdict(gains: list[float]) -> str:
    if all(g < 1 for g in gains):
        return ("Compiling the zoo does not pay on this machine at these sizes (below 1.0× on every shape), and its "
                "compile time comes on top: `--compile` stays an option, off by default.")
    if all(g > 1 for g in gains):
        return ("Compiling the zoo pays on every shape here once compiled. Whether it pays for a whole run depends on the "
                "first step's compile time against the steps saved, so `--compile` stays an option, off by default.")
    return "Compiling the zoo pays on some shapes and not on others here: `--compile` stays an option, off by default."


def _ratio(interval: dict) -> str:
    return f"{interval['median']:.2f}× ({interval['low']:.2f}–{interval['high']:.2f})"


def main() -> None:
    torch.set_num_threads(THREADS)
    module, reference_label = nanogpt()
    load_before, started = machine_load(), time.perf_counter()
    # A fresh inductor cache: the first compiled step is then what a first
    # `zoo train --compile` pays, not a lookup of an earlier run's kernels.
    with tempfile.TemporaryDirectory(prefix="zoo-bench-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        rows = [measure(name, module) for name in SHAPES]
    load_after = machine_load()

    begin, end = section_markers("bench_compile")
    lines = [
        begin,
        "## `zoo train --compile` on this CPU",
        "",
        f"`python -m benchmarks.bench_compile`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{(time.perf_counter() - started) / 60:.1f} minutes, torch {torch.__version__}, {THREADS} thread; machine load "
        f"before {load_text(load_before)}, after {load_text(load_after)}. Reference: {reference_label}. "
        "The first compiled step starts from an empty inductor cache. "
        "Four steppers per shape: the zoo's network eager and through torch.compile (fullgraph: no graph breaks), both "
        "with fused AdamW; nanoGPT eager and through `torch.compile(model)` as its train.py compiles, both with its own "
        "optimizer. Steps timed in rounds of one step of each, the order reversed every round, for "
        f"{SECONDS_PER_SHAPE:.0f} s per shape after warm-up; tokens/s are medians over the steps, each ratio the median "
        "of the rounds' ratios (speed of the first side over the second) with its 95% confidence interval.",
        "",
        "| shape | first compiled step, zoo / nanoGPT (s) | tokens/s: zoo, compiled / nanoGPT, compiled | rounds | "
        "zoo: compiled / eager | nanoGPT: compiled / eager | zoo compiled / nanoGPT compiled | zoo compiled / nanoGPT eager |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(f"| {r['shape']} | {r['compile_seconds']['zoo compiled']:.1f} / {r['compile_seconds']['nanoGPT compiled']:.1f} | "
          f"{r['tokens_per_second']['zoo']:,.0f}, {r['tokens_per_second']['zoo compiled']:,.0f} / "
          f"{r['tokens_per_second']['nanoGPT']:,.0f}, {r['tokens_per_second']['nanoGPT compiled']:,.0f} | {r['rounds']} | "
          f"**{_ratio(r['zoo_gain'])}** | {_ratio(r['nanogpt_gain'])} | **{_ratio(r['compiled_vs_compiled'])}** | "
          f"{_ratio(r['compiled_vs_eager'])} |" for r in rows),
        "",
        _verdict([r["zoo_gain"]["median"] for r in rows]),
        end,
    ]
    section = "\n".join(lines)
    print(section)
    write_section("bench_compile", section)


if __name__ == "__main__":
    main()
