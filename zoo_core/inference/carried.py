"""Running an unbounded model over a text of any length, its state carried forward.

A model whose ``context_kind`` is ``"unbounded"`` (see
``zoo_core.plugin_api.protocols.LanguageModel``) has no window to crop to: it
reads a text through ``step(idx, state) -> (logits, state)``. The text goes in
chunks of the model's ``context_length`` (the window it was trained on), so the
logits held at once stay bounded however long the text, and every token is
predicted from all the text before it.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.nn import functional as F

from ..plugin_api.protocols import BOUNDED, UNBOUNDED, context_kind


def is_unbounded(model: Any) -> bool:
    """True for a model that carries a state forward instead of seeing a window."""
    return context_kind(model) == UNBOUNDED


def chunked_logits(
    network, ids: torch.Tensor, chunk: int, state: Any = None
) -> Iterator[tuple[int, torch.Tensor, Any]]:
    """Feed ``ids`` (B, T) through ``network.step`` ``chunk`` tokens at a time,
    carrying the state: yields (start, logits of ids[:, start:start + chunk], state after it)."""
    chunk = max(1, chunk)
    for start in range(0, ids.shape[1], chunk):
        logits, state = network.step(ids[:, start : start + chunk], state)
        yield start, logits, state


def feed(network, ids: torch.Tensor, chunk: int, state: Any = None) -> tuple[torch.Tensor, Any]:
    """The last position's logits (B, V) after reading ``ids`` (B, T), and the state then."""
    last = None
    for _, logits, state in chunked_logits(network, ids, chunk, state):
        last = logits[:, -1]
    if last is None:
        raise ValueError("nothing to feed: ids has no tokens")
    return last, state


@torch.no_grad()
def carried_nll(network, ids: list[int], first: int, chunk: int, progress=None) -> float:
    """Nats to predict ``ids[first:]``, each from every token before it: the text
    is read once, in chunks of ``chunk`` tokens, the state carried across them
    (``progress``: a WorkProgress told of each chunk)."""
    device = next(network.parameters(), torch.empty(0)).device
    tokens = torch.tensor(ids, dtype=torch.long, device=device)
    inputs, targets = tokens[None, :-1], tokens[1:]
    was_training = network.training
    network.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    try:
        if progress is not None:
            progress.stage(
                f"bits per byte over {len(ids) - first:,} tokens, state carried", -(-inputs.shape[1] // chunk)
            )
        for start, logits, _ in chunked_logits(network, inputs, chunk):
            if progress is not None:
                progress.advance()
            end = start + logits.shape[1]
            scored = max(start, first - 1)  # input position p predicts token p + 1
            if scored >= end:
                continue
            log_probs = F.log_softmax(logits[0, scored - start :].float(), dim=-1)
            total -= log_probs.gather(1, targets[scored:end, None]).double().sum()
    finally:
        network.train(was_training)
    return float(total)


def context_description(network, context: int) -> str:
    """How a scoring run gave ``network`` its history, for reports and JSON."""
    if is_unbounded(network):
        return f"unbounded, state carried across the whole text (read in chunks of {context} tokens)"
    return f"window of {context} tokens, sliding by {max(1, context // 2)}"


__all__ = ["BOUNDED", "UNBOUNDED", "carried_nll", "chunked_logits", "context_description", "feed", "is_unbounded"]
