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
) -> torch.Tensor:
    """Extend ``ids`` (B, T) by ``max_new_tokens`` sampled tokens.

    The model only ever sees its last ``context_length`` tokens, so sampling can
    run past the window. Draws come from ``generator`` alone: the same seed gives
    the same tokens.
    """
    check_sampling_arguments(max_new_tokens, temperature, top_k)
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            logits, _ = model(ids[:, -model.context_length :])
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
