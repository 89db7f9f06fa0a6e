"""The log-probability of every token of a given text: what ``echo`` with ``logprobs`` returns.

A text longer than the context window is scored the way `zoo eval` scores
bits per byte (zoo_core.evaluation.bits.summed_nll): windows slide by half the
context, so every token is predicted from at least half a context of history,
and full windows go through the network together; an unbounded model (a
state carried forward) reads the text once, in chunks, the state carried. The
first token has no history, so no log-probability (null, as OpenAI's API gives it).
"""

from __future__ import annotations

import torch

from ..inference.carried import chunked_logits, is_unbounded

BATCH = 64  # full windows per forward call


@torch.inference_mode()
def prompt_logprobs(model, ids: list[int], top: int) -> dict:
    """OpenAI's logprobs object for the tokens ``ids``: tokens, token_logprobs, top_logprobs, text_offset."""
    network, decode = model.network.eval(), model.tokenizer.decode
    context = network.context_length
    stride = max(1, context // 2)
    tokens = torch.tensor(ids, dtype=torch.long, device=next(network.parameters()).device)
    windows = []  # (input start, first target, end target), as summed_nll cuts them
    target = 1
    while target < len(ids):
        end = min(target + stride if target > 1 else target + context, len(ids))
        windows.append((max(0, end - 1 - context), target, end))
        target = end
    full = [w for w in windows if w[2] - 1 - w[0] == context]
    groups = [full[i : i + BATCH] for i in range(0, len(full), BATCH)] + [[w] for w in windows if w not in full]
    chosen: dict[int, float] = {}
    best: dict[int, dict] = {}
    for logits, first, end in _scored_pieces(network, tokens, groups):
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        picked = logprobs.gather(1, tokens[first:end, None]).squeeze(1).tolist()
        chosen.update(zip(range(first, end), picked))
        if top:
            values, indices = torch.topk(logprobs, min(top, logprobs.shape[-1]))
            for position, row_indices, row_values in zip(range(first, end), indices.tolist(), values.tolist()):
                best[position] = {decode([t]): v for t, v in zip(row_indices, row_values)}
    pieces = [decode([t]) for t in ids]
    offsets = [0]
    for piece in pieces[:-1]:
        offsets.append(offsets[-1] + len(piece))
    return {
        "tokens": pieces,
        "token_logprobs": [None] + [chosen[i] for i in range(1, len(ids))],
        "top_logprobs": [None] + [best.get(i, {}) for i in range(1, len(ids))],
        "text_offset": offsets,
    }


def _scored_pieces(network, tokens: torch.Tensor, groups: list):
    """(logits of the positions that predict tokens[first:end], first, end), piece by piece:
    the windows of ``groups`` for a bounded model; for an unbounded one the text read
    once in chunks of its context, the state carried, so each token is scored from all before it."""
    if is_unbounded(network):
        for start, logits, _ in chunked_logits(network, tokens[None, :-1], network.context_length):
            yield logits[0], start + 1, start + 1 + logits.shape[1]
        return
    for group in groups:
        logits, _ = network(torch.stack([tokens[start : end - 1] for start, _, end in group]))
        for row, (start, first, end) in enumerate(group):
            yield logits[row, first - 1 - start :], first, end
