"""Sampling speed: the KV cache against the uncached path.

Random weights: the cost of sampling does not depend on what was learned.
Both paths draw from the same seed and must produce the same tokens. Past the
context window the cached path recomputes the whole window at every token, as
the uncached path does (anything cheaper would change the tokens), so a run
that goes far past the window gains only on its first `context` tokens.
"""

from __future__ import annotations

import torch

from benchmarks.common import best_of, zoo_network
from benchmarks.reference_gpt import ReferenceGPT
from zoo_core.sampling import sample_tokens

def _measure(variant: str, repeats: int, new_tokens: int = 255) -> dict:
    model, config = zoo_network(variant)
    model.eval()
    start = torch.zeros(1, 1, dtype=torch.long)
    outputs = {}

    def sampler(use_cache):
        def run():
            outputs[use_cache] = sample_tokens(model, start, new_tokens, generator=torch.Generator().manual_seed(1), use_cache=use_cache)
        return run

    cached = best_of(repeats, sampler(True))
    uncached = best_of(repeats, sampler(False))
    reference = ReferenceGPT(config["vocab_size"], config["context_length"], config["d_model"], config["n_layer"], config["n_head"]).eval()
    reference_time = best_of(repeats, lambda: reference.generate(start, new_tokens, torch.Generator().manual_seed(1)))
    return {
        "cached_tokens_per_second": new_tokens / cached,
        "uncached_tokens_per_second": new_tokens / uncached,
        "reference_uncached_tokens_per_second": new_tokens / reference_time,
        "speedup": uncached / cached,
        "same_tokens": torch.equal(outputs[True], outputs[False]),
    }


def run() -> dict:
    return {
        ("gpt-char", 255): _measure("gpt-char", repeats=2),
        ("gpt-char-mini", 255): _measure("gpt-char-mini", repeats=3),
        ("gpt-char-mini", 63): _measure("gpt-char-mini", repeats=3, new_tokens=63),
    }


if __name__ == "__main__":
    print(run())
