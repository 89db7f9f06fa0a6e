"""LoRA against full fine-tuning: memory and time per training step.

Each arm runs in a fresh process, so its peak resident memory is its own: the
network of a variant (random weights: a step costs the same whatever their
values) and, for the LoRA arm, the lora trainer's default adapters (rank 8 on
every block's attention qkv and output projections, everything else frozen),
then the zoo's own update (`zoo_core.training.step.training_step` with
`make_optimizer`, fused AdamW over the trainable parameters) for a few warm-up
steps and the timed ones. Memory is the process's high-water mark of resident
memory (VmHWM, read from /proc: torch allocates outside Python's heap, where
tracemalloc sees nothing) before the first step and after the last: their
difference is what training added (gradients, optimizer state, activations).
Arms alternate within each round, the order reversed every round; each figure
is the median over rounds with the smallest and largest. Not part of `run_all`
(it starts a dozen processes); writes its own section of docs/benchmarks.md:

    .venv/bin/python -m benchmarks.bench_lora [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

from benchmarks.common import ROOT, load_text, machine_load, section_markers, spread, spread_text, write_section

THREADS = 1  # the same for every arm; on a shared machine a second thread mostly waits for a core
WARMUP = 2
# variant: (windows per step, timed steps). gpt-char's recipe batch of 64 windows of 256 tokens
# would make each of its steps take many seconds on one thread; 4 windows keep the benchmark to minutes.
SHAPES = {"gpt-char-mini": (12, 20), "gpt-char": (4, 5)}
MODES = ("full", "lora")
ROUNDS = 3


def worker(variant_name: str, mode: str, batch: int, steps: int) -> dict:
    """One arm, in this (fresh) process."""
    import torch

    import zoo_core
    from zoo_core.corpus.batches import BatchSampler
    from zoo_core.devices import Placement
    from zoo_core.training.loop import make_optimizer, seeded_network
    from zoo_core.training.step import training_step
    from zoo_plugins.lora.layers import LoRASettings, attach

    torch.set_num_threads(THREADS)
    variant = zoo_core.get_variant(variant_name)
    card = variant.card
    recipe = card.recipe.model_copy(update={"batch_size": batch, "steps": WARMUP + steps})
    network = seeded_network(lambda: zoo_core.build_network(variant), 0)
    if mode == "lora":
        attach(network, LoRASettings(), "benchmark")  # what the lora trainer does before it trains
    tokens = torch.randint(0, card.tokenizer.vocab_size, (200_000,), generator=torch.Generator().manual_seed(0))
    sampler = BatchSampler(tokens, card.context_length, batch, 0)
    before = _high_water_mark()
    optimizer = make_optimizer(network, recipe)
    placement = Placement()
    network.train()
    seconds = []
    for step in range(1, WARMUP + steps + 1):
        inputs, targets = sampler.next()
        started = time.perf_counter()
        training_step(network, optimizer, inputs, targets, step=step, recipe=recipe, placement=placement)
        seconds.append(time.perf_counter() - started)
    after = _high_water_mark()
    optimizer_bytes = sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for value in state.values()
        if torch.is_tensor(value)
    )
    gradient_bytes = sum(p.grad.numel() * p.grad.element_size() for p in network.parameters() if p.grad is not None)
    return {
        "variant": variant_name,
        "mode": mode,
        "batch": batch,
        "context": card.context_length,
        "parameters": sum(p.numel() for p in network.parameters()),
        "trainable": sum(p.numel() for p in network.parameters() if p.requires_grad),
        "step_seconds": statistics.median(seconds[WARMUP:]),
        "peak_rss": after,
        "growth": after - before,
        "optimizer_bytes": optimizer_bytes,
        "gradient_bytes": gradient_bytes,
    }


def _high_water_mark() -> int:
    """This process's peak resident memory in bytes (VmHWM; ru_maxrss could carry the forking parent's)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024


def _run_arm(variant: str, mode: str) -> dict:
    batch, steps = SHAPES[variant]
    command = [sys.executable, "-m", "benchmarks.bench_lora", "--worker", variant, mode, str(batch), str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(rounds: int = ROUNDS) -> dict:
    arms = [(variant, mode) for variant in SHAPES for mode in MODES]
    load_before, started = machine_load(), time.perf_counter()
    measured: dict[tuple[str, str], list[dict]] = {arm: [] for arm in arms}
    for index in range(rounds):
        for arm in arms if index % 2 == 0 else reversed(arms):
            measured[arm].append(_run_arm(*arm))
    rows = []
    for variant in SHAPES:
        full, lora = measured[(variant, "full")], measured[(variant, "lora")]
        for mode, results in (("full", full), ("lora", lora)):
            first = results[0]
            rows.append(
                {
                    **{key: first[key] for key in ("variant", "mode", "batch", "context", "parameters", "trainable")},
                    **{key: first[key] for key in ("optimizer_bytes", "gradient_bytes")},
                    "step_ms": spread([r["step_seconds"] * 1000 for r in results]),
                    "peak_rss_mb": spread([r["peak_rss"] / 2**20 for r in results]),
                    "growth_mb": spread([r["growth"] / 2**20 for r in results]),
                }
            )
        # Ratios round by round: the two arms of a round ran back to back.
        rows[-1]["time_ratio"] = spread([b["step_seconds"] / a["step_seconds"] for a, b in zip(full, lora)])
        rows[-1]["growth_ratio"] = spread([b["growth"] / max(a["growth"], 1) for a, b in zip(full, lora)])
    return {
        "rows": rows,
        "rounds": rounds,
        "minutes": (time.perf_counter() - started) / 60,
        "load_before": load_before,
        "load_after": machine_load(),
    }


def section(result: dict) -> str:
    import torch

    begin, end = section_markers("bench_lora")
    lines = [
        begin,
        "## LoRA against full fine-tuning: memory and time per step",
        "",
        f"`python -m benchmarks.bench_lora`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{result['minutes']:.1f} minutes, torch {torch.__version__}, {THREADS} thread; machine load before "
        f"{load_text(result['load_before'])}, after {load_text(result['load_after'])}. Each arm in a fresh process, "
        f"{result['rounds']} rounds, the arms' order reversed every round; figures are median (min–max) over rounds. "
        "Random weights (a step costs the same whatever their values); the zoo's update (`training_step`, fused AdamW "
        f"over the trainable parameters), {WARMUP} warm-up steps, then the timed ones "
        f"({', '.join(f'{v}: {s}' for v, (_, s) in SHAPES.items())}). LoRA: the lora trainer's defaults, rank 8 "
        "on every block's attention qkv and output projections, everything else frozen. Peak RSS is the process's "
        "high-water mark (VmHWM) after the last step; \"added by training\" is that minus the mark before the "
        "optimizer existed (gradients, optimizer state, activations). gpt-char trains on "
        f"{SHAPES['gpt-char'][0]} windows per step here, not its recipe's 64.",
        "",
        "| variant | windows × context | arm | trainable / all parameters | optimizer state (MB) | gradients (MB) "
        "| peak RSS (MB) | added by training (MB) | ms per step |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['variant']} | {row['batch']} × {row['context']} | {row['mode']} | "
            f"{row['trainable']:,} / {row['parameters']:,} | {row['optimizer_bytes'] / 2**20:.1f} | "
            f"{row['gradient_bytes'] / 2**20:.1f} | {spread_text(row['peak_rss_mb'])} | "
            f"{spread_text(row['growth_mb'], '.1f')} | {spread_text(row['step_ms'], '.1f')} |"
        )
    lines.append("")
    for row in result["rows"]:
        if "time_ratio" in row:
            lines.append(
                f"- {row['variant']}: LoRA / full, round by round: time per step "
                f"**{spread_text(row['time_ratio'], '.2f')}×**, memory added by training "
                f"**{spread_text(row['growth_ratio'], '.2f')}×**."
            )
    lines += [
        "",
        "LoRA keeps gradients and AdamW's two moments for the adapters only (the optimizer-state and gradient "
        "columns). The peak falls by less than those two columns: it comes during the backward pass, while the "
        "activations are held, and LoRA holds about as many (the backward still runs through every frozen layer, since the "
        "adapters below need the gradient of their input); the moments are allocated after it. What a LoRA step saves "
        "in time is the weight gradients of the frozen layers and the optimizer's update over them.",
        end,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=4, metavar=("VARIANT", "MODE", "BATCH", "STEPS"), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of every arm (default {ROUNDS})")
    args = parser.parse_args()
    if args.worker:
        variant, mode, batch, steps = args.worker
        print(json.dumps(worker(variant, mode, int(batch), int(steps))))
        return
    text = section(run(args.rounds))
    print(text)
    write_section("bench_lora", text)


if __name__ == "__main__":
    main()
