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

from benchmarks import bench_coldstart, bench_loading, bench_sampling, bench_training, bench_trainloop
from benchmarks.common import BENCHMARKS_PAGE, machine_load, own_sections

# Benchmarks run on their own write their own sections; this runner keeps them.
OWN_SECTIONS = ("bench_compile", "bench_server")


def _s(spread: dict, fmt: str = ",.0f") -> str:
    return f"{spread['median']:{fmt}} ({spread['min']:{fmt}}–{spread['max']:{fmt}})"


def _load(load) -> str:
    return " / ".join(f"{x:.1f}" for x in load)


def _section(name: str, run):
    """Run one benchmark, saying on stderr when and under what load it ran."""
    started = time.perf_counter()
    result = run()
    print(f"[{name}: {time.perf_counter() - started:.0f} s, load {_load(machine_load())}]", file=sys.stderr, flush=True)
    print(json.dumps(result, default=str)[:2000], file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="Run every benchmark and write docs/benchmarks.md.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and a shorter training run, for a busy machine (the document says so)")
    args = parser.parse_args()
    if args.quick:
        bench_training.ROUNDS, bench_training.SECONDS_PER_ROUND = 3, 1.5
        bench_trainloop.STEPS, bench_trainloop.ROUNDS = 50, 1
        bench_sampling.ROUNDS, bench_sampling.GPT_CHAR_TOKENS = 2, 127
        bench_coldstart.ROUNDS = 2
    started, load_before = time.perf_counter(), machine_load()
    threads = torch.get_num_threads()
    training = _section("training", bench_training.run)
    trainloop = _section("whole run", bench_trainloop.run)
    sampling = _section("sampling", bench_sampling.run)
    coldstart = _section("cold start", bench_coldstart.run)
    loading = _section("loading", bench_loading.run)
    load_after, minutes = machine_load(), (time.perf_counter() - started) / 60
    lines = [
        "# Benchmarks",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC with `.venv/bin/python -m benchmarks.run_all` "
        f"({minutes:.1f} minutes) on {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{bench_training.THREADS} thread for training (both sides){', with --quick (fewer rounds, shorter runs)' if args.quick else ''}. Machine load (1/5/15-minute averages) before: {_load(load_before)}, "
        f"after: {_load(load_after)}. **This machine is shared** (eight engineers building and testing at once "
        "while these figures were taken): absolute rates are low and noisy; the ratios, taken round by round "
        "between sides that ran back to back, are what to read. Figures are median (min–max).",
        "",
        f"Reference: {training[0]['reference']}.",
        "",
        "Notes. The whole-run comparison is dominated, at 50 or 100 steps, by the zoo's final evaluation: 1,000 windows per split (what the card records and what makes cards comparable) against nanoGPT's 240; over the recipe's 2,000 steps that evaluation is a few per cent of the run. `zoo train --compile` is not in this runner: compiling takes minutes on a busy 2-core machine, more than the runner's budget; `tests/test_speed_paths.py::test_compiled_training_step_gives_the_eager_loss` (marked slow) checks it gives the eager losses.",
        "",
        "## Training throughput: the zoo's architectures against nanoGPT's model.py",
        "",
        "Forward, backward, gradient clipping where the recipe clips, optimizer step; batches drawn as nanoGPT's "
        "`get_batch` does. The zoo side is the network the plugin manager builds from the shipped card, with "
        "`make_optimizer` (fused AdamW); nanoGPT's side is its `GPT` at the same shape (bias=False, as its "
        "shakespeare_char config) with its own `configure_optimizers(..., 'cpu')`, which does not fuse on CPU. "
        f"{bench_training.ROUNDS} alternating rounds of {bench_training.SECONDS_PER_ROUND:.0f} s per side.",
        "",
        "| shape | batch × context | zoo params (tensors) | nanoGPT params (tensors) | zoo tokens/s | nanoGPT tokens/s | zoo / nanoGPT |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in training:
        lines.append(
            f"| {row['shape']} | {row['batch']} × {row['context']} | {row['zoo_parameters']:,} ({row['zoo_parameter_tensors']}) | "
            f"{row['nanogpt_parameters']:,} ({row['nanogpt_parameter_tensors']}) | {_s(row['zoo'])} | {_s(row['nanogpt'])} | "
            f"**{_s(row['ratio'], '.2f')}×** |"
        )
    lines += ["", "Target: at least 1.2× on both shapes.", "", "## Whole training run: `zoo train` against nanoGPT's train.py loop", ""]
    if "skipped" in trainloop:
        lines.append(f"Not measured: {trainloop['skipped']}.")
    else:
        lines += [
            f"gpt-char-mini's recipe, {trainloop['steps']} steps, two evaluations each (start and end), whole processes "
            "timed from start to exit. nanoGPT's train.py is not available here: its loop is emulated faithfully by "
            "`benchmarks/nanogpt_train_loop.py` with the real model.py (memmapped data, `estimate_loss` with "
            "eval_iters=20, cosine schedule, clipping, checkpoint when validation improves). The zoo's first "
            "evaluation uses a quarter of the recipe's 1,000 windows per split, its final one all 1,000 (what "
            f"the card records); nanoGPT scores 240 per split each time. {bench_trainloop.ROUNDS} alternating round(s), "
            f"OMP_NUM_THREADS={trainloop['threads']} for both.",
            "",
            "| side | seconds |",
            "|---|---:|",
            f"| `zoo train gpt-char-mini --steps {trainloop['steps']}` | {_s(trainloop['zoo'], '.1f')} |",
            f"| nanoGPT train.py loop, max_iters={trainloop['steps']} | {_s(trainloop['nanogpt'], '.1f')} |",
            "",
            f"**zoo / nanoGPT wall time: {_s(trainloop['ratio'], '.2f')}×** (target: at most 1.0×).",
        ]
    lines += [
        "",
        "## Sampling: KV cache against the uncached path (random weights, from one token, 1 thread)",
        "",
        "Both paths draw the same tokens from the same seed (checked). The last column divides the cached cost "
        "of one token by the time of one pass over every weight (`torch._foreach_norm`): 1.0 would mean decoding "
        "costs no more than reading the weights once.",
        "",
        "| shape | new tokens | cached tokens/s | uncached tokens/s | speed-up | same tokens | per token / weight read |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in sampling["cache"]:
        lines.append(
            f"| {row['variant']} | {row['new_tokens']} | {_s(row['cached_tokens_per_second'])} | {_s(row['uncached_tokens_per_second'])} | "
            f"**{_s(row['speedup'], '.1f')}×** | {'yes' if row['same_tokens'] else 'NO'} | {row['per_token_over_weight_read']:.1f} |"
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
        cells = [_s(row[f"{condition}, {threads} thread(s)"]) for condition in ("as is", "two busy processes added") for threads in (1, 2)]
        lines.append(f"| {row['variant']} | {row['parameters']:,} | {row['default_threads']} | " + " | ".join(cells) + " |")
    seconds, memory = coldstart["seconds"], coldstart["peak_rss_mb"]
    lines += [
        "",
        "## Cold start and memory (fresh processes, alternating rounds)",
        "",
        "| command | seconds | peak RSS (MB) |",
        "|---|---:|---:|",
        *(f"| `{name}` | {_s(seconds[name], '.2f')} | {_s(memory[name], '.0f')} |" for name in seconds),
        "",
        f"- `zoo list` / `import torch`: **{_s(coldstart['list_over_torch'], '.3f')}** (target ≤ 0.1). "
        "`zoo list` imports no torch; it validates every card with pydantic on each run.",
        f"- `zoo load transformer-6b-sin` − `import torch`: **{_s(coldstart['load_minus_torch'], '+.2f')} s** (target ≤ +0.1 s).",
        f"- `zoo sample gpt-char-mini` (20 tokens) − `import torch`: **{_s(coldstart['sample_minus_torch'], '+.2f')} s** (target ≤ +0.1 s).",
        f"- peak RSS of `zoo sample gpt-char-mini` − `import torch`: **{_s(coldstart['sample_rss_minus_torch'], '+.0f')} MB** (target ≤ +50 MB).",
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
