"""Training throughput on a CUDA GPU at gpt-char's shape: the zoo's GPT against the reference.

    .venv/bin/python -m benchmarks.bench_gpu_training [--dtype bfloat16] [--json PATH]

gpt-char is seed 004's GPT (6 layers, 6 heads, width 384, context 256); the
batch is nanoGPT's shakespeare-char one (64 x 256). Both models take the same
steps (forward, backward, AdamW) on random tokens, under the same autocast,
timed in alternating rounds so that drift in the GPU's clocks hits both; the
CUDA queue is drained (synchronize) only at the edges of each round. Needs a
GPU: benchmarks/gpu_check.sh runs it and writes the figures to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.common import median, zoo_network
from benchmarks.reference_gpt import ReferenceGPT
from zoo_core.devices import Placement, resolve_dtype

BATCH, STEPS_PER_ROUND, ROUNDS, WARMUP = 64, 20, 5, 10


def _stepper(model, placement: Placement, context: int, vocab: int):
    model.to(placement.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator(device=placement.device).manual_seed(0)

    def step():
        idx = torch.randint(0, vocab, (BATCH, context + 1), generator=generator, device=placement.device)
        with placement.autocast():
            _, loss = model(idx[:, :-1], idx[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        placement.backward(loss)
        placement.step(optimizer, model.parameters(), None)

    return step


def run(dtype: str = "bfloat16") -> dict:
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu_training needs a CUDA GPU")
    device = torch.device("cuda")
    zoo_model, config = zoo_network("gpt-char")
    context, vocab = config["context_length"], config["vocab_size"]
    reference = ReferenceGPT(vocab, context, config["d_model"], config["n_layer"], config["n_head"])
    steppers = {
        name: _stepper(model, Placement(device, resolve_dtype(dtype, device)), context, vocab)
        for name, model in (("zoo", zoo_model), ("reference", reference))
    }
    for step in steppers.values():
        for _ in range(WARMUP):
            step()
    torch.cuda.synchronize()
    rates = {name: [] for name in steppers}
    for _ in range(ROUNDS):
        for name, step in steppers.items():
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(STEPS_PER_ROUND):
                step()
            torch.cuda.synchronize()
            rates[name].append(STEPS_PER_ROUND * BATCH * context / (time.perf_counter() - started))
    zoo_rate, reference_rate = median(rates["zoo"]), median(rates["reference"])
    return {
        "gpu": torch.cuda.get_device_name(device),
        "dtype": dtype,
        "batch": BATCH,
        "context": context,
        "zoo_tokens_per_second": round(zoo_rate),
        "reference_tokens_per_second": round(reference_rate),
        "ratio": round(zoo_rate / reference_rate, 3),
        "spread_zoo": [round(min(rates["zoo"])), round(max(rates["zoo"]))],
        "spread_reference": [round(min(rates["reference"])), round(max(rates["reference"]))],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"], help="autocast dtype (default bfloat16)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = run(args.dtype)
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=1)
