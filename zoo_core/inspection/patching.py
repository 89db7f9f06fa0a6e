"""Activation patching of the residual stream between a clean and a corrupted prompt.

Both prompts are run; the clean prompt's next token is the answer and the
corrupted prompt's own prediction (another token) the wrong one. Their logit
difference at the last position, answer minus wrong, is high on the clean run
and low on the corrupted one. Then, for each layer's residual stream and each
position, the corrupted run is repeated with the clean activation put in at
that one place: the fraction of the logit difference it recovers,
(patched - corrupted) / (clean - corrupted), says where in depth and position
the information that decides the answer lives. 1 is all of it, 0 none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..errors import ZooError
from ..evaluation.budget import batch_size, shape_of
from ..plugin_api.hook_points import hooks, run_with_cache
from .stream import printable_token, residual_stream, token_labels


@dataclass
class Patching:
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    answer: str  # the clean run's next token
    wrong: str  # the corrupted run's
    clean_difference: float  # logit(answer) - logit(wrong), last position
    corrupted_difference: float
    layers: list[str]  # rows: "embeddings", "block 0", ...
    recovered: list[list[float]]  # [layer][position]: the fraction of the difference recovered

    def to_dict(self) -> dict:
        return asdict(self)


def _difference(logits: torch.Tensor, answer: int, wrong: int) -> float:
    last = logits[0, -1].float()
    return float(last[answer] - last[wrong])


def patch_residual(model, clean: str | torch.Tensor, corrupted: str | torch.Tensor, progress=None) -> Patching:
    """Patch the clean prompt's residual stream into the corrupted run, layer by layer and
    position by position (``progress``, a WorkProgress, told of each run)."""
    clean_ids, corrupted_ids = model.prompt_ids(clean), model.prompt_ids(corrupted)
    if clean_ids.shape != corrupted_ids.shape:
        raise ZooError(
            f"the clean prompt is {clean_ids.shape[1]} tokens and the corrupted one {corrupted_ids.shape[1]}: "
            "patching compares them position by position, so give prompts of the same length"
        )
    # One prompt at a time under the memory bound, or one line naming what to shorten.
    batch_size(shape_of(model), clean_ids.shape[1], option="the prompts' length")
    stream = residual_stream(model)
    network = model.network
    with torch.no_grad():
        clean_logits, clean_cache = run_with_cache(network, clean_ids, [point.name for point in stream])
        corrupted_logits = network(corrupted_ids)[0]
        answer = int(clean_logits[0, -1].argmax())
        ranked = corrupted_logits[0, -1].argsort(descending=True).tolist()
        wrong = next(token for token in ranked if token != answer)
        clean_difference = _difference(clean_logits, answer, wrong)
        corrupted_difference = _difference(corrupted_logits, answer, wrong)
        span = clean_difference - corrupted_difference
        if abs(span) < 1e-6:
            raise ZooError(
                "the corruption does not change the logit difference between the clean answer and the corrupted "
                "prediction: there is nothing to recover; corrupt a token the answer depends on"
            )
        recovered = []
        if progress is not None:
            progress.stage(
                f"patching {len(stream)} layers × {clean_ids.shape[1]} positions", len(stream) * clean_ids.shape[1]
            )
        for point in stream:
            row = []
            for position in range(clean_ids.shape[1]):
                source = clean_cache[point.name][:, position]

                def patch(activation, name, source=source, position=position):
                    patched = activation.clone()
                    patched[:, position] = source
                    return patched

                with hooks(network, {point.name: patch}):
                    patched_logits = network(corrupted_ids)[0]
                row.append((_difference(patched_logits, answer, wrong) - corrupted_difference) / span)
                if progress is not None:
                    progress.advance()
            recovered.append(row)
    return Patching(
        clean_tokens=token_labels(model, clean_ids),
        corrupted_tokens=token_labels(model, corrupted_ids),
        answer=printable_token(model.tokenizer.decode([answer])),
        wrong=printable_token(model.tokenizer.decode([wrong])),
        clean_difference=clean_difference,
        corrupted_difference=corrupted_difference,
        layers=[point.label for point in stream],
        recovered=recovered,
    )
