"""Autoregressive sampling, shared by every language model in the zoo."""

from __future__ import annotations

import math

import torch

from .errors import ZooError


_SMALLEST_TEMPERATURE = torch.finfo(torch.float32).tiny


def check_sampling_arguments(max_new_tokens: int, temperature: float, top_k: int | None) -> None:
    if max_new_tokens < 1:
        raise ZooError(f"--max-new-tokens must be at least 1, not {max_new_tokens}")
    if not 0 < temperature < math.inf:  # also rejects NaN
        raise ZooError(f"--temperature must be greater than 0 and finite, not {temperature}")
    if top_k is not None and top_k < 1:
        raise ZooError(f"--top-k must be at least 1, not {top_k}")


@torch.no_grad()
def sample_tokens(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool | None = None,
) -> torch.Tensor:
    """Extend ``ids`` (B, T) by ``max_new_tokens`` sampled tokens.

    The model only ever sees its last ``context_length`` tokens, so sampling can
    run past the window. Draws come from ``generator`` alone: the same seed gives
    the same tokens. Models with ``supports_kv_cache`` (and ``make_cache()``) are
    sampled with a KV cache unless ``use_cache=False``: the same tokens, faster.
    """
    check_sampling_arguments(max_new_tokens, temperature, top_k)
    cached = getattr(model, "supports_kv_cache", False) if use_cache is None else use_cache
    window = model.context_length
    cache = None
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            if cached and cache is None:  # feed the prompt (its last window) once
                cache = model.make_cache()
                logits, _ = model(ids[:, -window:], cache=cache)
            elif cached and cache.length < window:
                logits, _ = model(ids[:, -1:], cache=cache)
            else:
                # No cache, or the window is full: cropping drops the oldest
                # token, which every cached key above the first layer has seen,
                # so the whole window is recomputed, exactly as uncached.
                logits, _ = model(ids[:, -window:])
            logits = logits[:, -1, :].float()  # (B, V)
            # Scale the gap to the best token, not the logits, and by no less than
            # float32's smallest normal number: nothing overflows or becomes 0/0,
            # so a tiny temperature means greedy decoding rather than NaN.
            logits = (logits - logits.amax(dim=-1, keepdim=True)) / max(temperature, _SMALLEST_TEMPERATURE)
            if top_k is not None and top_k < logits.size(-1):
                kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probabilities = torch.softmax(logits, dim=-1)
            if generator is not None and generator.device != probabilities.device:
                # Draw where the generator lives (the CPU, usually): the same seed
                # then gives the same tokens on a GPU as on the CPU.
                next_ids = torch.multinomial(probabilities.to(generator.device), 1, generator=generator).to(ids.device)
            else:
                next_ids = torch.multinomial(probabilities, 1, generator=generator)
            ids = torch.cat((ids, next_ids), dim=1)
    finally:
        model.train(was_training)
    return ids
