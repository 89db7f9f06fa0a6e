"""Continuous batching: one running batch per variant, joined and left at token boundaries.

A request's samples become rows. Each variant has one scheduler thread that,
round after round, draws one token for every row it runs, then lets waiting
rows in (up to ``max_rows``) and lets finished or abandoned rows go. A new row
is fed its prompt alone, through the model's own forward, exactly as `zoo
sample` feeds it; after that:

- rows of a model that can batch them (``network.make_row_batch``, the zoo's
  transformers) take their next tokens together, each row with its own keys
  and values and its own length (``RowBatch`` in zoo_plugins.models.transformer);
- rows of other cached models take theirs one by one through the model's cache;
- rows whose context window is full (and rows of models without a cache, like
  the bigram) are recomputed over their last window, as `zoo sample` does,
  rows of one window length together.

Every row keeps its own seeded generator and settings and draws from its own
logits, so it gets the tokens `zoo sample` draws for its prompt and seed,
whatever else runs beside it; quantised layers excepted, whose activation
rounding magnifies the batch's last-bit differences (docs/scaling.md). ``Admission`` bounds the rows running and
waiting across all variants; past that a request is refused (HTTP 429).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import ZooError
from ..inference.carried import feed
from ..inference.sampling import TextRow, draw_tokens, fill_cache
from ..inference.settings import SamplingSettings
from ..plugin_api.protocols import UNBOUNDED, CachedDecoding, RowBatching, context_kind, implements
from ..seeding import seeded_generator


class QueueFull(Exception):
    """No room for a request's rows, running or waiting."""

    def __init__(self, limit: str, message: str):
        super().__init__(message)
        self.limit, self.message = limit, message


class Admission:
    """Rows running plus rows waiting, across every variant: at most ``max_rows + max_waiting``."""

    def __init__(self, max_rows: int, max_waiting: int):
        self.max_rows, self.max_waiting = max_rows, max_waiting
        self.held = 0
        self.requests = 0  # requests holding rows (what /health reports as generations)
        self._lock = threading.Lock()

    def claim(self, rows: int) -> None:
        with self._lock:
            if self.held + rows > self.max_rows + self.max_waiting:
                # Without a queue the limit that bites is the batch size itself.
                limit = "max_queued_generations" if self.max_waiting else "max_concurrent_generations"
                raise QueueFull(
                    limit,
                    f"too many generations at once: {self.held} running or waiting, the limits are "
                    f"max_concurrent_generations={self.max_rows} and max_queued_generations={self.max_waiting}; "
                    "retry later",
                )
            self.held += rows
            self.requests += 1

    def release(self, rows: int) -> None:
        with self._lock:
            self.held -= rows
            self.requests -= 1


@dataclass
class Drawn:
    """One token of a row, as the scheduler hands it to the request."""

    token: int
    piece: str  # the text that can be shown now (may be "" while held back)
    offset: int  # where the token's text starts in the row's text
    logprob: float | None = None
    top: dict[int, float] | None = None  # the most likely tokens and their log-probabilities


@dataclass
class Finished:
    tail: str  # text held back until the end
    tokens: list[int]
    text: str
    finish_reason: str  # "length" or "stop"


@dataclass(eq=False)
class Row:
    """One sample being drawn: its prompt, its settings (with its own seed) and where its tokens go.

    ``deliver`` is called in the event loop ``loop`` with each ``Drawn``, then a
    ``Finished`` (or a ``ZooError``); setting ``cancel`` drops the row at the next round."""

    prompt_ids: list[int]
    settings: SamplingSettings
    deliver: Callable[[object], None]
    loop: asyncio.AbstractEventLoop
    cancel: threading.Event
    top_logprobs: int | None = None  # None: no log-probabilities wanted
    ids: list[int] = field(default_factory=list)
    cache: Any = None  # the row's own cache while it is not in the row batch
    in_batch: bool = False
    text: Any = None  # sampling.TextRow, once the row runs
    generator: Any = None


class Batcher:
    """The scheduler of one variant: a thread running its rows round by round."""

    def __init__(self, model, max_rows: int):
        self.model, self.max_rows = model, max_rows
        network = model.network
        network.eval()
        self.window = network.context_length
        # An unbounded model's rows each carry their state (in ``Row.cache``), as `zoo sample` does.
        self.carried = context_kind(network) == UNBOUNDED
        self.cached = implements(network, CachedDecoding) and not self.carried
        self.batch: Any = network.make_row_batch(max_rows) if self.cached and implements(network, RowBatching) else None
        self.rows: list[Row] = []
        self.waiting: list[Row] = []
        self._outbox: list[tuple[Row, object]] = []
        self._wake = threading.Condition()
        self._retired = False
        threading.Thread(target=self._run, name=f"zoo-batch-{model.name}", daemon=True).start()

    def submit(self, rows: list[Row]) -> None:
        with self._wake:
            self.waiting.extend(rows)
            self._wake.notify()

    def retire(self) -> None:
        """End the thread (and let the model go) once the rows it holds are done:
        its variant was removed or published anew. Nothing is submitted after this."""
        with self._wake:
            self._retired = True
            self._wake.notify()

    def _run(self) -> None:
        with torch.inference_mode():
            while True:
                with self._wake:
                    while not self.waiting and not self.rows:
                        if self._retired:
                            return
                        self._wake.wait()
                    joining = self.waiting[: self.max_rows - len(self.rows)]
                    del self.waiting[: len(joining)]
                try:
                    self._round(joining)
                except Exception as exc:  # a failed round ends its rows with one line each, never the thread
                    error = (
                        exc
                        if isinstance(exc, ZooError)
                        else ZooError(f"generation failed: {type(exc).__name__}: {exc}")
                    )
                    for row in dict.fromkeys(self.rows + joining):
                        self._leave(row)
                        self._outbox.append((row, error))
                    self.rows = []
                self._send()

    def _send(self) -> None:
        """Hand the round's tokens to their requests: one wake-up of each event loop per
        round, not one per token, which would cost the loop more than the tokens."""
        by_loop: dict = {}
        for row, item in self._outbox:
            by_loop.setdefault(row.loop, []).append((row, item))
        self._outbox = []
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_deliver_all, items)

    def _round(self, joining: list[Row]) -> None:
        """One token for every running row, then the first token of every joining row."""
        for row in [r for r in self.rows if r.cancel.is_set()]:
            self._leave(row)
        network = self.model.network
        drawn = self._step(network)
        for row in joining:
            self.rows.append(row)
            if row.cancel.is_set():
                self._leave(row)
                continue
            drawn.append((row, self._feed_prompt(network, row)))
        self._take(drawn)

    def _feed_prompt(self, network, row: Row):
        row.ids = list(row.prompt_ids)
        row.text = TextRow(self.model.tokenizer, row.settings.stop)
        row.generator = seeded_generator(row.settings.seed, "seed")
        if self.carried:
            logits, row.cache = feed(network, torch.tensor([row.ids], device=_device(network)), self.window)
            return logits[0]
        ids = torch.tensor([row.ids[-self.window :]], device=_device(network))
        if not self.cached:
            return network(ids)[0][0, -1]
        cache = network.make_cache()
        logits = fill_cache(network, ids, cache)[0, -1]  # in chunks, as `zoo sample` feeds a prompt
        if self.batch is not None and self.batch.accepts(network, cache):
            self.batch.add(row, cache)
            row.in_batch = True
        else:
            row.cache = cache
        return logits

    def _step(self, network):
        """(row, next-token logits) for every running row, each computed as `zoo sample` computes it."""
        done = []
        if self.batch is not None:
            for row in [r for r in self.batch.rows if not self.batch.room(r)]:
                self.batch.remove(row)  # its window is full: recomputed from now on, as uncached
                row.in_batch = False
            if self.batch.rows:
                logits = self.batch.step([row.ids[-1] for row in self.batch.rows])
                done += zip(list(self.batch.rows), logits)
        by_window: dict[int, list[Row]] = {}
        for row in self.rows:
            if row.in_batch:
                continue
            if self.carried:  # the last token alone, with the state it was drawn from
                logits, row.cache = network.step(torch.tensor([row.ids[-1:]], device=_device(network)), row.cache)
                done.append((row, logits[0, -1]))
            elif row.cache is not None and row.cache.length < self.window:
                tokens = torch.tensor([row.ids[-1:]], device=_device(network))
                done.append((row, network(tokens, cache=row.cache)[0][0, -1]))
            else:
                row.cache = None
                by_window.setdefault(min(len(row.ids), self.window), []).append(row)
        for length, rows in by_window.items():
            ids = torch.tensor([row.ids[-length:] for row in rows], device=_device(network))
            done += zip(rows, network(ids)[0][:, -1])
        return done

    def _take(self, drawn: list) -> None:
        """Draw each row's token from its logits: rows that sample alike are filtered
        together, each still drawing with its own generator from its own row."""
        alike: dict = {}
        for row, logits in drawn:
            s = row.settings
            alike.setdefault((s.temperature, s.top_k, s.top_p, s.min_p), []).append((row, logits))
        for group in alike.values():
            rows = [row for row, _ in group]
            stacked = torch.stack([logits for _, logits in group])
            tokens = draw_tokens(stacked, rows[0].settings, [row.generator for row in rows])
            for row, logits, token in zip(rows, stacked, tokens):
                self._record(row, logits, token)

    def _record(self, row: Row, logits, token: int) -> None:
        row.ids.append(token)
        logprob = top = None
        if row.top_logprobs is not None:
            # The model's own distribution, before temperature and filters (as vLLM reports it).
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            logprob = float(logprobs[token])
            if row.top_logprobs:
                best = torch.topk(logprobs, min(row.top_logprobs, logprobs.shape[-1]))
                top = dict(zip(best.indices.tolist(), best.values.tolist()))
        offset = len(row.text.text)
        self._outbox.append((row, Drawn(token, row.text.advance(token), offset, logprob, top)))
        if row.text.stopped or len(row.text.tokens) >= row.settings.max_new_tokens:
            self._leave(row)
            reason = "stop" if row.text.stopped else "length"
            self._outbox.append((row, Finished(row.text.flush(), row.text.tokens, row.text.text, reason)))

    def _leave(self, row: Row) -> None:
        if row in self.rows:
            self.rows.remove(row)
        if row.in_batch:
            self.batch.remove(row)
            row.in_batch = False
        row.cache = None


def _deliver_all(items: list) -> None:
    for row, item in items:
        row.deliver(item)


def _device(network):
    return next(network.parameters(), torch.empty(0)).device
