"""Run every benchmark and write docs/benchmarks.md.

    .venv/bin/python -m benchmarks.run_all              # everything (a few minutes on a quiet machine)
    .venv/bin/python -m benchmarks.run_all --quick      # fewer rounds, shorter runs: for a busy machine

Every figure that compares is a ratio against a reference measured in the same
run, in alternating rounds, given as median with min and max; the machine's
load averages are recorded before and after. Absolute numbers are for this
machine at this moment only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone

import torch

from benchmarks import bench_coldstart, bench_loading, bench_memory, bench_sampling, bench_training, bench_trainloop
from benchmarks.common import BENCHMARKS_PAGE, load_text, machine_load, own_sections, spread_text

# Benchmarks run on their own write their own sections; this runner keeps them.
OWN_SECTIONS = ("bench_compile", "bench_server", "bench_batching", "bench_lora", "bench_pull", "bench_speedrun", "bench_hooks")


def _section(name: str, run):
    """Run one benchmark, saying on stderr when and under what load it ran."""
    started = time.perf_counter()
    result = run()
    print(f"[{name}: {time.perf_counter() - started:.0f} s, load {load_text(machine_load())}]", file=sys.stderr, flush=True)
    print(json.dumps(result, default=str)[:2000], file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="Run every benchmark and write docs/benchmarks.md.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and a shorter training run, for a busy machine (the document says so)")
    args = parser.parse_args()
    if args.quick:
        bench_training.PROCESSES, bench_training.SECONDS_PER_SHAPE = 2, 4.0
        bench_trainloop.ROUNDS = 1
        bench_sampling.ROUNDS, bench_sampling.GPT_CHAR_TOKENS = 2, 127
        bench_coldstart.ROUNDS = 2
    started, load_before = time.perf_counter(), machine_load()
    training = _section("training", bench_training.run)
    trainloop = _section("whole run", bench_trainloop.run)
    sampling = _section("sampling", bench_sampling.run)
    coldstart = _section("cold start", bench_coldstart.run)
    loading = _section("loading", bench_loading.run)
    memory_saving = _section("memory while saving", bench_memory.run)
    load_after, minutes = machine_load(), (time.perf_counter() - started) / 60
    lines = [
        "# Benchmarks",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC with `.venv/bin/python -m benchmarks.run_all` "
        f"({minutes:.1f} minutes) on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{bench_training.THREADS} thread for training (both sides){', with --quick (fewer rounds, shorter runs)' if args.quick else ''}. Machine load (1/5/15-minute averages) before: {load_text(load_before)}, "
        f"after: {load_text(load_after)}. **This machine is shared**: a virtual machine whose host other jobs use, so "
        "its speed drifts within a run and from one run to the next even when the load average is low (`import torch` "
        f"alone took {spread_text(coldstart['seconds']['import torch'], '.2f')} s in this run's cold-start rounds). Absolute "
        "rates are for this moment only; the ratios, taken round by round (or pair by pair) between sides that ran "
        "back to back, are what to read, and a target met by a median whose spread crosses it is met narrowly. "
        "Figures are median (min–max) unless a table says otherwise.",
        "",
        f"Reference: {training[0]['reference']}.",
        "",
        "Notes. `zoo train --compile` is measured by `benchmarks/bench_compile.py` on its own (compiling takes "
        "most of a minute per shape), in its section below; `tests/test_speed_paths.py::test_compiled_training_step_gives_the_eager_loss` "
        "(marked slow) checks it gives the eager losses.",
        "",
        "## Training throughput: the zoo's architectures against nanoGPT's model.py",
        "",
        "Forward, backward, gradient clipping where the recipe clips, optimizer step; batches drawn as nanoGPT's "
        "`get_batch` does. The zoo side is the network the plugin manager builds from the shipped card, with "
        "`make_optimizer` (fused AdamW); nanoGPT's side is its `GPT` at the same shape (bias=False, as its "
        "shakespeare_char config) with its own `configure_optimizers(..., 'cpu')`, which does not fuse on CPU. "
        f"Steps are timed one at a time in pairs, one step of each side back to back, the order swapped at every pair, "
        f"for {bench_training.SECONDS_PER_SHAPE:g} s per shape, in {bench_training.PROCESSES} fresh processes one after "
        "another: the host's speed changes within seconds, which the two halves of a pair share, and the ratio also "
        "moves from one process to the next. Each process gives the median of its pairs' ratios with a 95% confidence "
        "interval for that median; the last column is the median of the processes' medians. Tokens/s are the "
        "processes' medians: median (min–max).",
        "",
        "| shape | batch × context | zoo params (tensors) | nanoGPT params (tensors) | zoo tokens/s | nanoGPT tokens/s | pairs | zoo / nanoGPT in each process (95% interval) | zoo / nanoGPT |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in training:
        processes = ", ".join(f"{p['median']:.2f} ({p['low']:.2f}–{p['high']:.2f})" for p in row["processes"])
        lines.append(
            f"| {row['shape']} | {row['batch']} × {row['context']} | {row['zoo_parameters']:,} ({row['zoo_parameter_tensors']}) | "
            f"{row['nanogpt_parameters']:,} ({row['nanogpt_parameter_tensors']}) | {spread_text(row['zoo'])} | {spread_text(row['nanogpt'])} | "
            f"{row['pairs']} | {processes} | **{row['ratio']['median']:.2f}×** |"
        )
    lines += ["", "Target: at least 1.0× (parity) on both shapes; per-step speed is at its floor, and what a person waits for is time to quality (the speedrun section below).", "", "## Whole training run: `zoo train` against nanoGPT's train.py loop", ""]
    zoo_windows = trainloop.get("zoo_interim_windows", 0) + trainloop.get("eval_windows", 0)
    cache_rounds = " and ".join(f"{row['speedup']['n']} rounds for {row['variant']}" for row in sampling["cache"])
    if "skipped" in trainloop:
        lines.append(f"Not measured: {trainloop['skipped']}.")
    else:
        lines += [
            f"gpt-char-mini's recipe, {trainloop['steps']} steps, two evaluations each (start and end), whole processes "
            "timed from start to exit. nanoGPT's train.py is not available here: its loop is emulated faithfully by "
            "`benchmarks/nanogpt_train_loop.py` with the real model.py (memmapped data, `estimate_loss`, cosine "
            "schedule, clipping, checkpoint when validation improves). The recipe evaluates on "
            f"{trainloop['eval_windows']:,} windows per split (what the card records); nanoGPT runs it with "
            f"eval_iters={trainloop['recipe_eval_iters']} (batches of {trainloop['batch_size']}: the same windows) and, for "
            f"reference, with its README's CPU eval_iters={trainloop['readme_eval_iters']} "
            f"({trainloop['readme_eval_iters'] * trainloop['batch_size']} windows). The zoo's first evaluation uses a quarter "
            "of the recipe's windows (`--interim-eval-windows`' default), its final one all of them. "
            f"{bench_trainloop.ROUNDS} alternating round(s), OMP_NUM_THREADS={trainloop['threads']} for every process.",
            "",
            "| side | windows scored per split (first + last evaluation) | seconds | zoo / this side |",
            "|---|---:|---:|---:|",
            f"| `zoo train gpt-char-mini --steps {trainloop['steps']}` | {trainloop['zoo_interim_windows']:,} + {trainloop['eval_windows']:,} "
            f"| {spread_text(trainloop['zoo'], '.1f')} | |",
            f"| nanoGPT train.py loop, the recipe's windows (eval_iters={trainloop['recipe_eval_iters']}) | "
            f"{2 * trainloop['recipe_eval_iters'] * trainloop['batch_size']:,} | {spread_text(trainloop['nanogpt_recipe_windows'], '.1f')} | "
            f"**{spread_text(trainloop['ratio_nanogpt_recipe_windows'], '.2f')}×** |",
            f"| nanoGPT train.py loop, README's eval_iters={trainloop['readme_eval_iters']} | "
            f"{2 * trainloop['readme_eval_iters'] * trainloop['batch_size']:,} | {spread_text(trainloop['nanogpt_readme'], '.1f')} | "
            f"{spread_text(trainloop['ratio_nanogpt_readme'], '.2f')}× |",
            "",
            "Target: at most 1.0× for the same recipe and number of evaluations (the first comparison). Against the "
            f"README's smaller evaluation the zoo scores {zoo_windows / (2 * trainloop['readme_eval_iters'] * trainloop['batch_size']):.1f} "
            "times as many windows; over the recipe's 2,000 steps evaluation is a few per cent of the run either way.",
        ]
    lines += [
        "",
        "## Sampling: KV cache against the uncached path (random weights, from one token, 1 thread)",
        "",
        "Both paths draw the same tokens from the same seed (checked); each round times one cached and one uncached run, "
        f"{cache_rounds}. The cached path decodes each new token through the blocks' own forward "
        "with each layer's KV cache. "
        "The last column divides the cached cost "
        "of one token by the time of one pass over every weight (`torch._foreach_norm`): 1.0 would mean decoding "
        "costs no more than reading the weights once.",
        "",
        "| shape | new tokens | cached tokens/s | uncached tokens/s | speed-up | 95% interval of its median | same tokens | per token / weight read |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in sampling["cache"]:
        interval = row["speedup_interval"]
        lines.append(
            f"| {row['variant']} | {row['new_tokens']} | {spread_text(row['cached_tokens_per_second'])} | {spread_text(row['uncached_tokens_per_second'])} | "
            f"**{spread_text(row['speedup'], '.1f')}×** | {interval['low']:.2f}–{interval['high']:.2f} | {'yes' if row['same_tokens'] else 'NO'} | "
            f"{row['per_token_over_weight_read']:.1f} |"
        )
    lines += [
        "",
        "Targets: at least 5× at gpt-char's shape, at least 2× at gpt-char-mini's inside its window.",
        "",
        "## Thread policy: cached sampling tokens/s with 1 and 2 threads (31 new tokens)",
        "",
        "`zoo sample` and `zoo eval` take `--threads N`; the default is 1 thread below 5 M parameters, else torch's. "
        "\"Loaded\" adds two busy processes of the benchmark's own to whatever else the machine is doing.",
        "",
        "| shape | parameters | default threads | as is, 1 thread | as is, 2 threads | loaded, 1 thread | loaded, 2 threads |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in sampling["threads"]:
        cells = [spread_text(row[f"{condition}, {threads} thread(s)"]) for condition in ("as is", "two busy processes added") for threads in (1, 2)]
        lines.append(f"| {row['variant']} | {row['parameters']:,} | {row['default_threads']} | " + " | ".join(cells) + " |")
    seconds, memory = coldstart["seconds"], coldstart["peak_rss_mb"]
    lines += [
        "",
        "## Cold start and memory (fresh processes, alternating rounds)",
        "",
        "| command | seconds | peak RSS (MB) |",
        "|---|---:|---:|",
        *(f"| `{name}` | {spread_text(seconds[name], '.2f')} | {spread_text(memory[name], '.0f')} |" for name in seconds),
        "",
        f"- `zoo list` / `import torch`: **{spread_text(coldstart['list_over_torch'], '.3f')}** (target ≤ 0.1); against "
        f"`import torch` with the zoo's exit: {spread_text(coldstart['list_over_torch_same_exit'], '.3f')}. "
        "`zoo list` imports neither torch nor pydantic: cards validated once are read from the card cache "
        "(`zoo_core/catalogue/card_cache.py`), and rich only when a table is drawn.",
        "- The `zoo` script exits without Python's last garbage collection (`gc.freeze()` in `zoo_core.cli.console_main`): "
        "`import torch` leaves enough objects for that collection to take a good part of a second here. "
        "\"import torch, zoo's exit\" is `import torch` ending the same way, for like-for-like differences.",
        f"- `zoo load transformer-6b-sin` after `import torch`, inside a fresh process (from the end of the import to "
        f"the end of the command): **{spread_text(coldstart['after_torch']['zoo load transformer-6b-sin'], '.2f')} s** (target ≤ +0.1 s).",
        f"- `zoo sample gpt-char-mini` (20 tokens) − `import torch`: {spread_text(coldstart['sample_minus_torch'], '+.2f')} s between "
        f"whole processes ({spread_text(coldstart['sample_minus_torch_same_exit'], '+.2f')} s against `import torch` with the zoo's exit); after `import torch` inside the process: **{spread_text(coldstart['after_torch']['zoo sample gpt-char-mini'], '.2f')} s** "
        "(target ≤ +0.1 s; drawing the 20 tokens is part of it).",
        "- Whole-process differences subtract two noisy `import torch` times (see its spread above); the in-process "
        "figures time only what the zoo adds.",
        f"- peak RSS of `zoo sample gpt-char-mini` − `import torch`: **{spread_text(coldstart['sample_rss_minus_torch'], '+.0f')} MB** (target ≤ +50 MB).",
        "",
        "## Memory while training saves its state",
        "",
        f"`benchmarks/bench_memory.py`: {memory_saving['variant']}'s weights and AdamW moments ({memory_saving['state_mb']:.0f} MB), "
        "written as `zoo train` writes its resumable state, by each writer in turn in a fresh process; the growth of the peak "
        "resident memory during the write, in copies of that state.",
        "",
        "| writer | peak growth (MB) | extra copies held |",
        "|---|---:|---:|",
        f"| the zoo's (`zoo_core.storage.tensor_files`, from the tensors' memory) | {memory_saving['zoo']['peak_growth_mb']:.0f} | "
        f"**{memory_saving['zoo']['extra_copies']:.2f}** |",
        f"| `safetensors.torch.save`, then the bytes to disk (before) | {memory_saving['library']['peak_growth_mb']:.0f} | "
        f"{memory_saving['library']['extra_copies']:.2f} |",
        "",
        "Target: training never holds more than two copies of its weights and optimizer state (the live one and at most one more).",
        "",
        "## Loading gpt-char's weights (load_state_dict included)",
        "",
        f"A {loading['megabytes']:.1f} MB float32 checkpoint, best of 7.",
        "",
        "| path | ms |",
        "|---|---:|",
        f"| safetensors `load_file` | {loading['safetensors_ms']:.1f} |",
        f"| `torch.load(weights_only=True)` | {loading['torch_load_ms']:.1f} |",
        f"| zoo verified load (sha256 of the file, names, shapes, then load) | {loading['zoo_verified_ms']:.1f} |",
        "",
        f"torch.load / safetensors: {loading['torch_load_over_safetensors']:.1f}×. The verified load spends most of its "
        "time hashing the file; that is the price of refusing a corrupted checkpoint.",
        "",
    ]
    previous = BENCHMARKS_PAGE.read_text() if BENCHMARKS_PAGE.exists() else ""
    kept = own_sections(previous, OWN_SECTIONS)
    BENCHMARKS_PAGE.write_text("\n".join(lines) + "".join("\n" + section + "\n" for section in kept))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
