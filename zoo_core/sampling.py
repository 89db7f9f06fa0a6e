"""Autoregressive sampling, shared by every language model in the zoo."""

from __future__ import annotations

import torch

from .errors import ZooError


def check_sampling_arguments(max_new_tokens: int, temperature: float, top_k: int | None) -> None:
    if max_new_tokens < 1:
        raise ZooError(f"--max-new-tokens must be at least 1, not {max_new_tokens}")
    if not temperature > 0:  # also rejects NaN
        raise ZooError(f"--temperature must be greater than 0, not {temperature}")
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
    the same tokens. Models that offer ``make_cache()`` are sampled with a KV
    cache (unless ``use_cache=False``), which gives the same tokens faster.
    """
    check_sampling_arguments(max_new_tokens, temperature, top_k)
    cached = hasattr(model, "make_cache") if use_cache is None else use_cache
    window = model.context_length
    cache = None
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            if cached and cache is None:  # feed the prompt (its last window) once
                cache = model.make_cache()
                logits, _ = model(ids[:, -window:], cache=cache)
            elif cached and (cache.length < window or cache.can_slide):
                if cache.length >= window:  # relative positions: sliding equals cropping
                    cache.drop_oldest(1)
                logits, _ = model(ids[:, -1:], cache=cache)
            else:
                # No cache, or a full window under absolute positions: every
                # token's position shifts, so the whole window is recomputed.
                logits, _ = model(ids[:, -window:])
            logits = logits[:, -1, :].float() / temperature  # (B, V)
            if top_k is not None and top_k < logits.size(-1):
                kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probabilities = torch.softmax(logits, dim=-1)
            next_ids = torch.multinomial(probabilities, 1, generator=generator)
            ids = torch.cat((ids, next_ids), dim=1)
    finally:
        model.train(was_training)
    return ids
