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


def check_nucleus(top_p: float | None) -> None:
    if top_p is not None and not 0 < top_p <= 1:  # also rejects NaN
        raise ZooError(f"top_p must be greater than 0 and at most 1, not {top_p}")


def _next_token(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
                generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of ``logits`` (B, V) -> (B, 1)."""
    if temperature == 0:  # greedy: no draw, so the generator does not move
        return logits.argmax(dim=-1, keepdim=True)
    # Scale the gap to the best token, not the logits, and by no less than
    # float32's smallest normal number: nothing overflows or becomes 0/0,
    # so a tiny temperature means greedy decoding rather than NaN.
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / max(temperature, _SMALLEST_TEMPERATURE)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1:
        # Nucleus: keep the most likely tokens until their mass reaches top_p
        # (always the best one), then renormalise.
        ordered, order = torch.sort(probabilities, dim=-1, descending=True)
        mass_before = torch.cumsum(ordered, dim=-1) - ordered
        ordered = ordered.masked_fill(mass_before >= top_p, 0.0)
        probabilities = torch.zeros_like(probabilities).scatter(-1, order, ordered)
        probabilities = probabilities / probabilities.sum(dim=-1, keepdim=True)
    return torch.multinomial(probabilities, 1, generator=generator)


@torch.no_grad()
def stream_tokens(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool | None = None,
):
    """Yield ``max_new_tokens`` sampled token ids (B, 1), one step at a time.

    ``temperature=0`` is greedy decoding; ``top_k`` keeps the k likeliest tokens,
    ``top_p`` the smallest set whose probability reaches p. The model only ever
    sees its last ``context_length`` tokens, so sampling can run past the window.
    Draws come from ``generator`` alone: the same seed gives the same tokens.
    Models with ``supports_kv_cache`` (and ``make_cache()``) are sampled with a
    KV cache unless ``use_cache=False``: the same tokens, faster. Stopping early
    (closing the generator) stops the work: a server drops a departed client so.
    """
    if temperature != 0:
        check_sampling_arguments(max_new_tokens, temperature, top_k)
    else:
        check_sampling_arguments(max_new_tokens, 1.0, top_k)
    check_nucleus(top_p)
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
            next_ids = _next_token(logits[:, -1, :].float(), temperature, top_k, top_p, generator)
            ids = torch.cat((ids, next_ids), dim=1)
            yield next_ids
    finally:
        model.train(was_training)


def sample_tokens(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Extend ``ids`` (B, T) by ``max_new_tokens`` sampled tokens (see ``stream_tokens``).

    Unlike ``stream_tokens`` it refuses temperature 0, as `zoo sample --temperature`
    does; the server's temperature 0 (greedy, as in OpenAI's API) goes through
    ``stream_tokens``."""
    check_sampling_arguments(max_new_tokens, temperature, top_k)
    steps = list(stream_tokens(model, ids, max_new_tokens, temperature, top_k, top_p, generator, use_cache))
    return torch.cat((ids, *steps), dim=1)
