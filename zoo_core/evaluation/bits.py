"""Bits per byte: a loss that compares across tokenizers.

Nats per token depend on what a token is: a character model predicts ~3.3
times as many tokens as a 1,024-token BPE on the same text. The total
information a model needs to encode a text does not, so the zoo also reports
bits per UTF-8 byte (and per character) of the text itself.

Method (the same for every model and every caller): the text to score is given
with the text before it. Each model tokenizes the preceding text and the scored
text separately with its own tokenizer (so its tokens cover exactly the scored
bytes, no token straddles the boundary), keeps at most one context window of
the preceding tokens as history, and predicts every token of the scored text.
Windows slide by half the context: every token is predicted from at least half
a context of history (a full one for the first half window). An unbounded
model (``context_kind = "unbounded"``, a recurrent state) has no window: it
reads the same history and then the whole scored text in chunks of its
context, the state carried, so every token is predicted from all the text
before it (zoo_core.inference.carried). A tokenizer that puts BOS first
(``TokenizerSpec.bos_id``: Gemma, an HF Llama 3) gets it at the start of every
window, as llama.cpp's perplexity starts each chunk: BOS, then at most a context
less one of the text, so a window cut mid-document opens as the model was trained
to read (models without one, SmolLM2 and the Shakespeare variants, are scored as
before). The bits are the
summed negative log-likelihoods / ln 2, divided by the scored text's UTF-8 bytes
(or characters).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ..corpus.batches import split_text
from ..errors import ZooError
from ..inference.bos import with_bos
from ..inference.carried import carried_nll, context_description, is_unbounded
from .budget import batch_size, shape_of

METHOD = (
    "each model tokenizes the scored text with its own tokenizer, separately from the text before it "
    "(one context of it as history), and predicts every token with windows sliding by half its context "
    "(a model that carries a state reads the whole text instead, the state carried from chunk to chunk); "
    "bits = summed NLL / ln 2, per UTF-8 byte and per character of the scored text"
)


@torch.no_grad()
def summed_nll(
    network, ids: list[int], first: int, context: int, batch_size: int = 64, progress=None, bos_id: int | None = None
) -> float:
    """Nats to predict ``ids[first:]``, each from at most ``context`` preceding tokens
    (``progress``: a WorkProgress told of each batch); an unbounded network
    predicts each from all the tokens before it, read in chunks of ``context``.
    With ``bos_id`` (a tokenizer that puts BOS first) every window starts as
    llama.cpp's perplexity starts each chunk: BOS first, then at most ``context`` - 1
    tokens of the text, so a window cut mid-document still opens as the model was
    trained to read; the BOS is history, never scored."""
    if first < 1:
        raise ZooError("the first token has no history to be predicted from; give preceding text")
    if is_unbounded(network):
        return carried_nll(network, ids, first, context, progress=progress)
    if bos_id is not None:
        if context < 2:
            raise ZooError("a window of BOS and the text needs a context of at least 2 tokens")
        context -= 1  # the text's share of each window; BOS takes the other place
    stride = max(1, context // 2)
    tokens = torch.tensor(ids, dtype=torch.long)
    windows = []  # (input start, first target, end target)
    target = first
    while target < len(ids):
        end = min(target + stride if target > first else target + context, len(ids))
        windows.append((max(0, end - 1 - context), target, end))
        target = end
    if bos_id is not None:
        return _nll_after_bos(network, tokens, windows, bos_id, context + 1, batch_size, progress)
    was_training = network.training
    network.eval()
    total = 0.0
    try:
        full = [w for w in windows if w[2] - 1 - w[0] == context]
        ragged = [w for w in windows if w[2] - 1 - w[0] != context]
        groups = [full[i : i + batch_size] for i in range(0, len(full), batch_size)] + [[w] for w in ragged]
        if progress is not None:
            progress.stage(f"bits per byte over {len(ids) - first:,} tokens", len(groups))
        for group in groups:
            if progress is not None:
                progress.advance()
            inputs = torch.stack([tokens[s : e - 1] for s, _, e in group])
            logits, _ = network(inputs)
            log_probs = F.log_softmax(logits.float(), dim=-1)
            for row, (s, a, e) in enumerate(group):
                positions = torch.arange(a - 1 - s, e - 1 - s)
                total -= float(log_probs[row, positions, tokens[a:e]].double().sum())
    finally:
        network.train(was_training)
    return total


@torch.no_grad()
def _nll_after_bos(network, tokens: torch.Tensor, windows, bos_id: int, context: int, batch_size: int, progress):
    """``summed_nll``'s windows, each read after a BOS (kept as it is where the text already starts with it)."""
    bos = torch.tensor([bos_id])
    rows = []  # (input ids, where the first target's prediction is, first target, end target)
    for s, a, e in windows:
        piece = tokens[s : e - 1]
        if int(piece[0]) == bos_id:
            rows.append((piece, a - 1 - s, a, e))
        else:
            rows.append((torch.cat([bos, piece]), a - s, a, e))
    was_training = network.training
    network.eval()
    total = 0.0
    try:
        full = [r for r in rows if len(r[0]) == context]
        ragged = [r for r in rows if len(r[0]) != context]
        groups = [full[i : i + batch_size] for i in range(0, len(full), batch_size)] + [[r] for r in ragged]
        if progress is not None:
            progress.stage(f"bits per byte over {sum(e - a for _, _, a, e in rows):,} tokens", len(groups))
        for group in groups:
            if progress is not None:
                progress.advance()
            logits, _ = network(torch.stack([row[0] for row in group]))
            log_probs = F.log_softmax(logits.float(), dim=-1)
            for i, (_, at, a, e) in enumerate(group):
                positions = torch.arange(at, at + e - a)
                total -= float(log_probs[i, positions, tokens[a:e]].double().sum())
    finally:
        network.train(was_training)
    return total


def scoring_context(model, context: int | None) -> int:
    """The tokens of context a score reads: the card's, or fewer (``--context N``).
    A model of 8,192 tokens scores a window in minutes on a CPU; with fewer, in seconds,
    and its score says how much history each prediction had."""
    longest = model.card.context_length
    if context is None:
        return longest
    if not 1 <= context <= longest:
        raise ZooError(f"--context must be from 1 to {longest:,} ('{model.name}' reads at most that), not {context:,}")
    return context


def bits_per_byte(model, text: str, before: str, progress=None, context: int | None = None) -> dict:
    """Score ``text`` (preceded by ``before``) with a loaded zoo model, each token
    from at most ``context`` tokens (default: the card's context length)."""
    context = scoring_context(model, context)
    batch = batch_size(shape_of(model), context)  # windows at once under the memory bound, or a refusal
    bos_id = model.card.tokenizer.bos_id
    return network_bits_per_byte(model.network, model.tokenizer, context, text, before, progress, batch, bos_id)


def network_bits_per_byte(
    network,
    tokenizer,
    context: int,
    text: str,
    before: str,
    progress=None,
    batch_size: int = 64,
    bos_id: int | None = None,
) -> dict:
    """Score ``text`` (preceded by ``before``) with a network and its tokenizer, each
    token from at most ``context`` tokens, ``batch_size`` windows at a time (a
    study's arm in training has no loaded model around it). A text read from its
    start (no ``before``) follows the tokenizer's beginning-of-sequence token
    ``bos_id`` where it has one, as llama.cpp's perplexity reads it, and every
    token of it is scored; without one, its first token is only history."""
    if not text:
        raise ZooError("no text to score")
    history = tokenizer.encode(before[-8 * context :])[-context:] if before else []
    ids = tokenizer.encode(text)
    if not history:  # nothing before: the first token is context, not scored
        ids = with_bos(bos_id, ids)
        history, ids = ids[:1], ids[1:]
        text = tokenizer.decode(history + ids)[len(tokenizer.decode(history)) :]
    nats = summed_nll(network, history + ids, len(history), context, batch_size, progress=progress, bos_id=bos_id)
    bits = nats / math.log(2)
    return {
        "bits_per_byte": bits / len(text.encode("utf-8")),
        "bits_per_character": bits / len(text),
        "nats_per_token": nats / len(ids),
        "tokens": len(ids),
        "bytes": len(text.encode("utf-8")),
        "characters": len(text),
        "context": context_description(network, context),
    }


def validation_text(text: str, train_fraction: float, characters: int | None = None) -> tuple[str, str]:
    """The validation split of ``text`` (or its first ``characters``) and the text before it."""
    train, validation = split_text(text, train_fraction)
    if characters is not None:
        if characters < 1:
            raise ZooError(f"--text-chars must be at least 1, not {characters}")
        validation = validation[:characters]
    return validation, train
