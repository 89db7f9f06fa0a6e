"""The log-probability of every token of a given text: what ``echo`` with ``logprobs`` returns.

A text longer than the context window is scored the way `zoo eval` scores
bits per byte (zoo_core.evaluation.bits): windows slide by half the context,
so every token is predicted from at least half a context of history. The first
token has no history, so no log-probability (null, as OpenAI's API gives it).
"""

from __future__ import annotations

import torch


@torch.inference_mode()
def prompt_logprobs(model, ids: list[int], top: int) -> dict:
    """OpenAI's logprobs object for the tokens ``ids``: tokens, token_logprobs, top_logprobs, text_offset."""
    network, decode = model.network.eval(), model.tokenizer.decode
    context = network.context_length
    stride = max(1, context // 2)
    tokens = torch.tensor(ids, dtype=torch.long, device=next(network.parameters()).device)
    chosen: list[float | None] = [None]
    best: list[dict | None] = [None]
    target = 1
    while target < len(ids):
        end = min(target + stride if target > 1 else target + context, len(ids))
        start = max(0, end - 1 - context)
        logits, _ = network(tokens[start : end - 1].unsqueeze(0))
        logprobs = torch.log_softmax(logits[0, target - 1 - start :].float(), dim=-1)
        chosen += logprobs.gather(1, tokens[target:end, None]).squeeze(1).tolist()
        if top:
            values, indices = torch.topk(logprobs, min(top, logprobs.shape[-1]))
            best += [
                {decode([t]): v for t, v in zip(row_indices, row_values)}
                for row_indices, row_values in zip(indices.tolist(), values.tolist())
            ]
        else:
            best += [{} for _ in range(end - target)]
        target = end
    pieces = [decode([t]) for t in ids]
    offsets = [0]
    for piece in pieces[:-1]:
        offsets.append(offsets[-1] + len(piece))
    return {"tokens": pieces, "token_logprobs": chosen, "top_logprobs": best, "text_offset": offsets}
