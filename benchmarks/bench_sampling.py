"""Sampling: the KV cache against the uncached path, cost per token against
reading the weights once, and the thread policy on a quiet and a loaded machine.

Random weights (gpt-char ships none; the cost of sampling does not depend on
what was learned). Both paths draw from the same seed and must give the same
tokens (checked). Runs stay inside the context window, where the cache helps;
past it both paths recompute the whole window at every token.
"""

from __future__ import annotations

import multiprocessing
import time

import torch

from benchmarks.common import best_of, median_interval, spread, timed, zoo_network
from zoo_core.inference.sampling import sample_tokens
from zoo_core.inference.threads import default_threads

ROUNDS = 3
GPT_CHAR_TOKENS = 255  # inside its 256-token window


def _sampler(model, new_tokens: int, use_cache: bool, outputs: dict):
    start = torch.zeros(1, 1, dtype=torch.long)

    def run():
        outputs[use_cache] = sample_tokens(model, start, new_tokens, generator=torch.Generator().manual_seed(1), use_cache=use_cache)

    return run


def _weights_read_seconds(model) -> float:
    """One pass over every weight with next to no arithmetic: the floor for a decoded token."""
    parameters = [p.detach() for p in model.parameters()]
    with torch.inference_mode():
        return best_of(20, lambda: torch._foreach_norm(parameters))


def cache_speedup(variant: str, new_tokens: int, threads: int, rounds: int | None = None) -> dict:
    torch.set_num_threads(threads)
    model, _ = zoo_network(variant)
    model.eval()
    outputs: dict = {}
    cached_run, uncached_run = _sampler(model, new_tokens, True, outputs), _sampler(model, new_tokens, False, outputs)
    cached_run()  # warm-up
    cached, uncached = [], []
    for _ in range(rounds or ROUNDS):
        cached.append(timed(cached_run))
        uncached.append(timed(uncached_run))
    per_token = min(cached) / new_tokens
    return {
        "variant": variant,
        "new_tokens": new_tokens,
        "threads": threads,
        "cached_tokens_per_second": spread([new_tokens / t for t in cached]),
        "uncached_tokens_per_second": spread([new_tokens / t for t in uncached]),
        "speedup": spread([u / c for c, u in zip(cached, uncached)]),
        "speedup_interval": median_interval([u / c for c, u in zip(cached, uncached)]),
        "same_tokens": torch.equal(outputs[True], outputs[False]),
        "per_token_over_weight_read": per_token / _weights_read_seconds(model),
    }


def _burn(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def thread_policy(variant: str, new_tokens: int = 31) -> dict:
    """Cached sampling with 1 and 2 threads, as the machine is and with two busy processes added."""
    model, _ = zoo_network(variant)
    model.eval()
    outputs: dict = {}
    run = _sampler(model, new_tokens, True, outputs)
    result = {"variant": variant, "parameters": sum(p.numel() for p in model.parameters()),
              "default_threads": default_threads(sum(p.numel() for p in model.parameters()))}
    for condition in ("as is", "two busy processes added"):
        stop, burners = multiprocessing.Event(), []
        if condition != "as is":
            burners = [multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(2)]
            for burner in burners:
                burner.start()
            time.sleep(0.5)
        try:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                run()
                result[f"{condition}, {threads} thread(s)"] = spread([new_tokens / timed(run) for _ in range(ROUNDS)])
        finally:
            stop.set()
            for burner in burners:
                burner.join()
    return result


def run() -> dict:
    threads_before = torch.get_num_threads()
    try:
        return {
            # gpt-char's uncached run takes most of the runner's sampling time: two rounds of it; gpt-char-mini's
            # rounds take a fraction of a second, and its ratio swings with the host's per-call overhead: 30 of them,
            # enough for a confidence interval of the median
            "cache": [cache_speedup("gpt-char", GPT_CHAR_TOKENS, 1, rounds=min(2, ROUNDS)), cache_speedup("gpt-char-mini", 63, 1, rounds=10 * ROUNDS)],
            "threads": [thread_policy("gpt-char-mini"), thread_policy("transformer-6b-sin")],
        }
    finally:
        torch.set_num_threads(threads_before)


if __name__ == "__main__":
    print(run())
