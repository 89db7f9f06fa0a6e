"""The logit lens: the next-token prediction read from each layer's residual stream.

The stream before the first block and after every block goes through the model's
own final norm and vocabulary head, as if the layers above it were not there.
Where in depth the final answer appears, and how the loss on the prompt's own
next tokens falls from layer to layer, shows what each block adds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..plugin_api.hook_points import run_with_cache
from .stream import printable_token, read_logits, residual_stream, token_labels


@dataclass
class LogitLens:
    tokens: list[str]  # the prompt, token by token
    layers: list[str]  # "embeddings", "block 0", ...: rows, shallowest first
    predictions: list[list[str]]  # [layer][position]: the top next token read there
    probabilities: list[list[float]]  # [layer][position]: its probability
    final_token_probabilities: list[list[float]]  # [layer][position]: the probability of the model's own prediction
    prompt_loss: list[float | None]  # [layer]: mean cross-entropy on the prompt's own next tokens (None: one token)

    def to_dict(self) -> dict:
        return asdict(self)


def logit_lens(model, prompt: str | torch.Tensor) -> LogitLens:
    """The logit lens of ``model`` (a ZooModel) on ``prompt``."""
    ids = model.prompt_ids(prompt)
    stream = residual_stream(model)
    with torch.no_grad():
        _, cache = run_with_cache(model.network, ids, [point.name for point in stream])
        layers = [read_logits(model, cache[point.name])[0].float() for point in stream]  # each (T, V)
    final = layers[-1].argmax(-1)
    predictions, probabilities, final_probabilities = [], [], []
    losses: list[float | None] = []
    for logits in layers:
        p = torch.softmax(logits, dim=-1)
        top = p.max(-1)
        predictions.append([printable_token(model.tokenizer.decode([i])) for i in top.indices.tolist()])
        probabilities.append(top.values.tolist())
        final_probabilities.append(p.gather(-1, final[:, None])[:, 0].tolist())
        if ids.shape[1] > 1:
            losses.append(float(torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])))
        else:
            losses.append(None)
    return LogitLens(
        tokens=token_labels(model, ids),
        layers=[point.label for point in stream],
        predictions=predictions,
        probabilities=probabilities,
        final_token_probabilities=final_probabilities,
        prompt_loss=losses,
    )
