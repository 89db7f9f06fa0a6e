"""Run every benchmark and write docs/benchmarks.md.

    .venv/bin/python -m benchmarks.run_all

Each figure is a ratio against a reference measured in the same run, so it
means something on any machine; absolute numbers are for this one only.
"""

from __future__ import annotations

import os
import platform
from datetime import date
from pathlib import Path

import torch

from benchmarks import bench_loading, bench_sampling, bench_training

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def main() -> None:
    training = bench_training.run()
    sampling = bench_sampling.run()
    loading = bench_loading.run()
    lines = [
        "# Benchmarks",
        "",
        f"Measured {date.today().isoformat()} with `.venv/bin/python -m benchmarks.run_all` on {platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads. "
        "Each row compares against a reference timed in the same run.",
        "",
        "## Training throughput (gpt-char-mini's shape: 4 layers, 4 heads, width 128, context 64, batch 12)",
        "",
        "Forward, backward and AdamW step on random tokens, median of 5 alternating rounds of 50 steps. "
        "The reference (`benchmarks/reference_gpt.py`) is an independent minimal GPT with nanoGPT's design "
        "choices (fused QKV, `scaled_dot_product_attention`, no biases, tied embeddings); nanoGPT itself is not vendored. "
        "For scale: nanoGPT's `model.py` was measured at about 26,000 tokens/s on this configuration on this kind of machine.",
        "",
        "| model | parameters | tokens/s |",
        "|---|---:|---:|",
        f"| zoo `gpt` | {training['zoo_parameters']:,} | {training['zoo_tokens_per_second']:,.0f} |",
        f"| reference | {training['reference_parameters']:,} | {training['reference_tokens_per_second']:,.0f} |",
        "",
        f"**zoo / reference: {training['ratio']:.2f}×** (target: at least 1.0×).",
        "",
        "## Sampling: KV cache against the uncached path (random weights, from one token)",
        "",
        "Cached and uncached draw the same tokens from the same seed (checked in the run). Past the context "
        "window the cache cannot help: cropping changes every position, so both paths recompute the whole window "
        "at every token. gpt-char-mini's 255 tokens run 191 past its 64-token window; the 63-token row stays inside it.",
        "",
        "| shape | new tokens | cached tokens/s | uncached tokens/s | speed-up | same tokens | reference uncached tokens/s |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    targets = {("gpt-char", 255): " (target ≥ 5×)", ("gpt-char-mini", 255): " (target ≥ 2×)", ("gpt-char-mini", 63): ""}
    for (shape, new_tokens), result in sampling.items():
        lines.append(
            f"| {shape} | {new_tokens} | {result['cached_tokens_per_second']:,.0f} | {result['uncached_tokens_per_second']:,.0f} | "
            f"**{result['speedup']:.1f}×**{targets[(shape, new_tokens)]} | {'yes' if result['same_tokens'] else 'NO'} | "
            f"{result['reference_uncached_tokens_per_second']:,.0f} |"
        )
    lines += [
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
        f"**torch.load / safetensors: {loading['torch_load_over_safetensors']:.1f}×** (target: at least 1.0×). "
        "The verified load spends most of its time hashing the file; that is the price of refusing a corrupted checkpoint.",
        "",
    ]
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
