"""Autoregressive sampling, shared by every language model in the zoo.

Three layers, each usable on its own (the CLI, the Python API and a server all
sit on top of them), each taking one ``SamplingSettings`` (inference.settings)
that it passes down unchanged:

- ``stream_tokens``: a generator over token ids, one (B,) tensor per step, with
  temperature (0: greedy), top-k, top-p and min-p, through the model's KV cache.
- ``SampleStream``: rows of one prompt length, each with its own seed, turned
  into text pieces as they are drawn, cut at stop strings; ``.samples`` holds
  the finished rows (prompt, tokens, text, why it stopped).
- ``stream_text``: one prompt, text pieces as they are drawn.

Each also takes the options as keywords (``max_new_tokens=40, top_k=1``), which
``resolve_settings`` turns into the settings once.

Reproducibility: every row draws from its own generator, seeded with its own
seed, and a row's draws never depend on the other rows. Row ``i`` of a batch
sampled with seeds ``[s, s+1, ...]`` is the sample drawn alone with seed
``s+i`` (``sample_seeds`` names that rule; tests check it token for token),
except through quantised layers, whose activation rounding magnifies the
batch's last-bit differences (docs/scaling.md).
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from typing import Generator, Iterator, Sequence

import torch

from ..catalogue.limits import RUN_TOKENS
from ..errors import ZooError
from ..plugin_api.protocols import CachedDecoding, implements
from ..seed_range import LARGEST_SEED, SMALLEST_SEED
from ..seeding import seeded_generator
from .carried import feed, is_unbounded
from .settings import SamplingSettings, resolve_settings

_SMALLEST_TEMPERATURE = torch.finfo(torch.float32).tiny


def sample_seeds(seed: int, count: int) -> list[int]:
    """The seed of each of ``count`` samples asked for with ``seed``: sample ``i``
    uses ``seed + i`` (wrapping within the seeds zoo_core.seeding accepts), so
    it can be drawn again alone."""
    span = LARGEST_SEED - SMALLEST_SEED + 1
    return [(seed + i - SMALLEST_SEED) % span + SMALLEST_SEED for i in range(count)]


def filter_logits(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """(B, V) logits, tempered, with the tokens the settings exclude at -inf.

    In order: temperature, top-k, top-p (measured over what top-k left), then
    min-p: the tokens at least ``min_p`` times as likely as the best one. That
    ratio does not depend on which other tokens remain, so min-p drops the same
    tokens whatever ran before it; running last, it leaves top-p measuring what
    it measures without min-p. It uses the tempered probabilities, so a higher
    temperature lets more tokens through. The best token always stays. Greedy
    decoding (temperature 0) never gets here.
    """
    # Scale the gap to the best token, not the logits, and by no less than
    # float32's smallest normal number: nothing overflows or becomes 0/0, so a
    # tiny temperature means greedy decoding rather than NaN. The best token's
    # logit is then 0 and every logit is the log of its ratio to the best.
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / max(settings.temperature, _SMALLEST_TEMPERATURE)
    top_k, top_p, min_p = settings.top_k, settings.top_p, settings.min_p
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        # Nucleus: the most likely tokens whose probabilities first reach top_p
        # together; the best token always stays.
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        before = probabilities.cumsum(dim=-1) - probabilities
        drop_sorted = before >= top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if min_p:
        # p / p_best >= min_p, in logs: no softmax needed, and the best token
        # (log ratio 0) passes even at min_p 1.
        logits = logits.masked_fill(logits < math.log(min_p), float("-inf"))
    return logits


def _draw(logits: torch.Tensor, settings: SamplingSettings, generator) -> torch.Tensor:
    """One token per row: (B, V) float logits -> (B, 1) ids."""
    if settings.temperature == 0:  # greedy: no draw at all, so the seed does not matter
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(filter_logits(logits, settings), dim=-1)
    first = generator[0] if isinstance(generator, (list, tuple)) else generator
    if first is not None and first.device != probabilities.device:
        # Draw where the generator lives (the CPU): the same seed then gives the
        # same tokens on a GPU as on the CPU.
        return _draw_with(probabilities.to(first.device), generator).to(logits.device)
    return _draw_with(probabilities, generator)


def draw_tokens(logits: torch.Tensor, settings: SamplingSettings, generators: Sequence[torch.Generator]) -> list[int]:
    """The next token of each row of (B, V) logits, each drawn with its own
    generator, exactly as ``stream_tokens`` draws it (rows sampled together or alone)."""
    return _draw(logits.float(), settings, list(generators))[:, 0].tolist()


def _draw_with(probabilities: torch.Tensor, generator) -> torch.Tensor:
    if isinstance(generator, (list, tuple)):
        # One generator per row, each drawing from its own row only: a row's
        # tokens are those it gets when sampled alone with the same seed.
        return torch.cat([torch.multinomial(probabilities[i : i + 1], 1, generator=g) for i, g in enumerate(generator)])
    return torch.multinomial(probabilities, 1, generator=generator)


# inference_mode, not just no_grad: no version counters or view tracking on any
# tensor, which is a visible share of decoding one token at a time.
@torch.inference_mode()
def stream_tokens(
    model,
    ids: torch.Tensor,
    settings: SamplingSettings | int | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    **options,
) -> Generator[torch.Tensor, None, None]:
    """Yield the next token of every row of ``ids`` (B, T), a (B,) tensor per step.

    ``settings`` (or ``options``, see ``resolve_settings``) say how to draw;
    their seed is not used here: ``generator`` is one generator for the whole
    batch, or a list with one per row (each row reproducible alone), or None
    for torch's global one. A bounded model (the default ``context_kind``)
    only ever sees its last ``context_length`` tokens, so sampling can run
    past the window. An unbounded model reads the prompt once through
    ``step`` and then one token per step, its state carried: the same work
    and memory for every token, however long the sample. Models with
    ``supports_kv_cache`` (and ``make_cache()``) are sampled with a KV cache
    unless ``use_cache=False``: the same tokens, faster. Stopping early (closing
    the generator) is fine.
    """
    settings = resolve_settings(settings, **options)
    if isinstance(generator, (list, tuple)) and len(generator) != ids.shape[0]:
        raise ZooError(f"{len(generator)} generators for {ids.shape[0]} rows; give one per row")
    if is_unbounded(model):
        yield from _stream_carried(model, ids, settings, generator)
        return
    use_cache = settings.use_cache
    cached = implements(model, CachedDecoding) if use_cache is None else use_cache
    window = model.context_length
    cache = None
    was_training = model.training
    model.eval()
    try:
        for _ in range(settings.max_new_tokens):
            if cached and cache is None:  # feed the prompt (its last window) once
                cache = model.make_cache()
                logits = fill_cache(model, ids[:, -window:], cache)
            elif cache is not None and cache.length < window:  # only a cached run has one
                logits, _ = model(ids[:, -1:], cache=cache)
            else:
                # No cache, or the window is full: cropping drops the oldest
                # token, which every cached key above the first layer has seen,
                # so the whole window is recomputed, exactly as uncached (a cached
                # run with a window longer than a chunk: into a fresh cache, a chunk at a time).
                if cache is None or window <= RUN_TOKENS:
                    logits, _ = model(ids[:, -window:])
                else:
                    cache = model.make_cache()
                    logits = fill_cache(model, ids[:, -window:], cache)
            next_ids = _draw(logits[:, -1, :].float(), settings, generator)
            ids = torch.cat((ids, next_ids), dim=1)
            yield next_ids[:, 0]
    finally:
        model.train(was_training)


def fill_cache(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """The logits of the last of ``ids`` (B, 1, V), their keys fed into ``cache``
    ``RUN_TOKENS`` positions at a time: a prompt as long as the context never
    holds the logits of every position at once (the load-time budget counts
    no more, zoo_core.catalogue.limits)."""
    for start in range(0, ids.shape[1], RUN_TOKENS):
        logits, _ = model(ids[:, start : start + RUN_TOKENS], cache=cache)
    return logits[:, -1:]


def _stream_carried(model, ids: torch.Tensor, settings: SamplingSettings, generator):
    """``stream_tokens`` for an unbounded model: the prompt once (in chunks of
    its training window, so its logits never all exist at once), then each
    drawn token alone with the state; the drawn ids are not kept."""
    was_training = model.training
    model.eval()
    next_ids = ids
    try:
        if settings.max_new_tokens < 1:
            return
        logits, state = feed(model, ids, model.context_length)
        for drawn in range(settings.max_new_tokens):
            if drawn:  # the token drawn last, alone: the state holds everything before it
                step_logits, state = model.step(next_ids, state)
                logits = step_logits[:, -1]
            next_ids = _draw(logits.float(), settings, generator)
            yield next_ids[:, 0]
    finally:
        model.train(was_training)


def sample_tokens(
    model,
    ids: torch.Tensor,
    settings: SamplingSettings | int | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    **options,
) -> torch.Tensor:
    """``ids`` (B, T) extended by ``max_new_tokens`` sampled tokens (see ``stream_tokens``)."""
    drawn = list(stream_tokens(model, ids, resolve_settings(settings, **options), generator))
    return torch.cat((ids, torch.stack(drawn, dim=1)), dim=1)


@dataclass
class Sample:
    """One finished row: what was asked and what came back."""

    prompt: str
    prompt_tokens: list[int]
    tokens: list[int]  # the drawn tokens, up to the one that completed a stop string
    text: str  # the drawn text, without the stop string
    seed: int
    finish_reason: str  # "length" (max_new_tokens reached) or "stop" (a stop string appeared)

    def as_dict(self) -> dict:
        return asdict(self)


class TextRow:
    """One row's drawn tokens as text, handed out piece by piece and cut at stop strings.

    A piece is held back while it might be the start of a stop string or the
    first bytes of an incomplete character, so what was shown never has to be
    taken back. Shared by ``SampleStream`` and the server's continuous batches.
    """

    def __init__(self, tokenizer, stop_strings: Sequence[str] = ()):
        self.tokenizer, self.stop = tokenizer, tuple(stop_strings)
        self.tokens: list[int] = []
        self.text = ""
        self.emitted = 0  # characters of text already handed out
        self.stopped = False

    def advance(self, token: int) -> str:
        """Take one drawn token; return the text that can now be shown."""
        if self.stopped:
            return ""
        self.tokens.append(token)
        self.text = self.tokenizer.decode(self.tokens)
        cut = min((i for i in (self.text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.stopped = self.text[:cut], True
            return self.flush()
        shown = len(self.text) - self._held_back(self.text)
        piece, self.emitted = self.text[self.emitted : shown], max(self.emitted, shown)
        return piece

    def _held_back(self, text: str) -> int:
        """How many trailing characters might still change: the start of a stop
        string, or a replacement character standing for an unfinished byte sequence."""
        held = len(text) - len(text.rstrip("\ufffd"))
        for stop in self.stop:
            for length in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:length]):
                    held = length
                    break
        return held

    def flush(self) -> str:
        """Everything not yet shown (the row is finished)."""
        piece, self.emitted = self.text[self.emitted :], len(self.text)
        return piece


class SampleStream:
    """Rows of equal prompt length sampled together; iterate for text pieces.

    Each step yields one piece per row (``""`` for a row with nothing new to show,
    or already stopped). A piece is held back while it might be the start of a
    stop string or the first bytes of an incomplete character, so what was shown
    never has to be taken back. After the iteration ``samples`` holds every row.
    """

    def __init__(
        self,
        model,
        tokenizer,
        prompt_ids: Sequence[Sequence[int]],
        seeds: Sequence[int] | None = None,
        *,
        settings: SamplingSettings | None = None,
        prompts: Sequence[str] | None = None,
        **options,
    ):
        """``seeds``: one per row, by default ``sample_seeds(settings.seed, rows)``;
        ``settings`` or ``options`` as in ``resolve_settings``."""
        self.settings = resolve_settings(settings, **options)
        if seeds is None:
            seeds = sample_seeds(self.settings.seed, len(prompt_ids))
        if len({len(ids) for ids in prompt_ids}) != 1 or len(seeds) != len(prompt_ids):
            raise ZooError("a SampleStream needs prompts of one length and one seed per prompt")
        self.model, self.tokenizer = model, tokenizer
        self.prompt_ids = [list(ids) for ids in prompt_ids]
        self.prompts = list(prompts) if prompts is not None else [tokenizer.decode(ids) for ids in self.prompt_ids]
        self.seeds = list(seeds)
        self.stop = self.settings.stop
        self._rows = [TextRow(tokenizer, self.stop) for _ in self.prompt_ids]
        self.samples: list[Sample] = []

    def __iter__(self) -> Generator[list[str], None, None]:
        device = next(self.model.parameters(), torch.empty(0)).device  # the prompt goes where the weights are
        ids = torch.tensor(self.prompt_ids, dtype=torch.long, device=device)
        generators = [seeded_generator(seed, "seed") for seed in self.seeds]
        tokens = stream_tokens(self.model, ids, self.settings, generators)
        try:
            for step in tokens:
                pieces = [row.advance(int(token)) for row, token in zip(self._rows, step.tolist())]
                yield pieces
                if all(row.stopped for row in self._rows):
                    break
        finally:
            tokens.close()
            self._finish()
        tail = [row.flush() for row in self._rows]
        if any(tail):
            yield tail

    def _finish(self) -> None:
        self.samples = [
            Sample(prompt, ids, row.tokens, row.text, seed, "stop" if row.stopped else "length")
            for prompt, ids, row, seed in zip(self.prompts, self.prompt_ids, self._rows, self.seeds)
        ]

    def run(self) -> list[Sample]:
        """Draw everything without looking at the pieces."""
        for _ in self:
            pass
        return self.samples


def stream_text(
    model,
    tokenizer,
    prompt_ids: Sequence[int],
    *,
    settings: SamplingSettings | None = None,
    cancel: threading.Event | None = None,
    usage: dict | None = None,
    **options,
) -> Iterator[str]:
    """The text of one sample (seed ``settings.seed``), piece by piece as its
    tokens are drawn: the pieces join to the text ``SampleStream`` draws.

    Setting ``cancel`` ends it at the next token (a server's client went away);
    ``usage`` (a dict) counts the tokens drawn so far under "completion_tokens".
    """
    settings = resolve_settings(settings, **options)
    steps = iter(SampleStream(model, tokenizer, [prompt_ids], [settings.seed], settings=settings))
    try:
        for drawn, pieces in enumerate(steps, 1):
            if cancel is not None and cancel.is_set():
                return
            if usage is not None:
                # The step after the last token only hands out held-back text.
                usage["completion_tokens"] = min(drawn, settings.max_new_tokens)
            if pieces[0]:
                yield pieces[0]
    finally:
        steps.close()
