"""`POST /v1/completions`: OpenAI's legacy completions request, as its clients send it.

Honoured: ``prompt`` (a string, a list of strings, or token ids: a list of
ids or a list of such lists), ``max_tokens`` (0 with
``echo`` scores the prompt), ``n`` (choice ``i`` of prompt ``p`` is drawn with
seed ``seed + p * n + i``, the rule of `zoo sample --num-samples`), ``stop``
(a string or a list; the text ends before it, finish_reason "stop"), ``echo``,
``logprobs`` (the top-k log-probabilities of every token under the model itself,
before temperature and filters: tokens, token_logprobs, top_logprobs,
text_offset), ``stream`` (with ``stream_options.include_usage``), ``seed``,
``temperature``, ``top_p``, plus the zoo's ``top_k`` and ``min_p``. Refused:
``suffix`` (these models only continue text), penalties other than 0,
``best_of`` other than ``n``, ``logit_bias``. Types are strict: a bool is not
a number and a string is not a number.

Samples are drawn by the variant's continuous batch (zoo_core.web.batching):
the same prompt, settings and seed give the tokens `zoo sample` gives.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import ZooError
from ..inference.sampling import sample_seeds
from ..inference.settings import OPTION_NAMES, SamplingSettings
from .batching import Admission, Batcher, Drawn, Finished, QueueFull, Row
from .generation import ModelCache, answer_text, is_task_model
from .live_catalogue import LiveCatalogue, Snapshot
from .scoring import prompt_logprobs

MAX_LOGPROBS = 20


# The sampling fields the completions and chat completions requests share, bounded
# in one place (each request keeps its own field order: its first error is the one reported).
Temperature = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
TopK = Annotated[int | None, Field(ge=1)]
MinP = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
Choices = Annotated[int, Field(ge=1)]
Stop = Annotated[str | list[str] | None, Field(max_length=4)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    include_usage: bool = False


class CompletionRequest(BaseModel):
    """The fields of OpenAI's completions request this server honours (top_k and
    min_p are extensions). Fields OpenAI clients send at their defaults are
    accepted; anything else is refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]  # text, or token ids (what lm-eval sends)
    suffix: None = None  # given, it is refused with its own message (see parse)
    max_tokens: int = Field(16, ge=0)
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    top_k: TopK = None
    min_p: MinP = 0.0
    seed: Seed = 0
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Choices = 1
    best_of: int | None = None
    echo: bool = False
    stop: Stop = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    presence_penalty: Literal[0] = 0
    frequency_penalty: Literal[0] = 0
    logit_bias: None = None
    user: str | None = None

    def sampling_settings(self, seed: int, max_tokens: int) -> SamplingSettings:
        """One row's settings: fields named like a sampling option pass through by
        name; OpenAI's max_tokens is max_new_tokens."""
        same_name = {name: getattr(self, name) for name in OPTION_NAMES if name in type(self).model_fields}
        same_name.update(seed=seed, stop=self.stop or ())
        return SamplingSettings(**same_name, max_new_tokens=max_tokens)


class Refused(Exception):
    """A request answered with an error: status, message, and the limit it hit, if any."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", limit: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.limit = status, message, kind, limit

    def response(self) -> JSONResponse:
        body: dict = {"error": {"message": self.message, "type": self.kind}}
        if self.limit:
            body["error"]["limit"] = self.limit
        return JSONResponse(body, status_code=self.status)


def parse_body(body: bytes) -> dict:
    """The request's JSON object; a client's mistake in it is a 400, never a 500:
    not JSON, nested past the parser's recursion (30,000 brackets), an integer of
    more digits than Python converts (its 4,300-digit guard), a lone surrogate
    (text that cannot be UTF-8, which no tokenizer takes)."""
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Refused(400, f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise Refused(400, "the body is nested too deeply to be a request") from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise Refused(
            400, f"the body holds a number too long to be a request's: {' '.join(str(exc).split())[:120]}"
        ) from None
    if not isinstance(raw, dict):
        raise Refused(400, "the body must be a JSON object")
    try:
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(400, "the body holds a lone surrogate (\\ud800-\\udfff alone): that is not text") from None
    return raw


# Per-request work that can take time (tokenising, rendering a chat template) runs
# on these threads, off the event loop and apart from asyncio's default threads, so
# that slow requests wait for each other, never for /v1/models, /health or the loop.
REQUEST_WORK = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zoo-request")


async def off_loop(function, *arguments):
    """``function(*arguments)`` on a `REQUEST_WORK` thread, awaited."""
    return await asyncio.get_running_loop().run_in_executor(REQUEST_WORK, function, *arguments)


def describe_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    if first["type"] == "extra_forbidden":
        return f"unsupported field '{where}'"
    if first["type"] == "missing":
        return f"missing field '{where}'"
    return f"field '{where}': {first['msg']}"


class Completions:
    """The completions endpoint: parsing, the batches (one per variant) and the replies."""

    def __init__(self, cache: ModelCache, limits, catalogue: LiveCatalogue, metrics=None):
        self.cache, self.limits, self.catalogue = cache, limits, catalogue
        self.metrics = metrics  # a web.metrics.ServerMetrics, or None
        self.admission = Admission(limits.max_concurrent_generations, limits.max_queued_generations)
        self._batchers: dict[str, Batcher] = {}
        self._guard = threading.Lock()

    @property
    def generations(self) -> int:
        """Requests being answered (their rows running or waiting)."""
        return self.admission.requests

    def rows(self) -> tuple[int, int]:
        """Rows decoding now and rows waiting for a place, over every variant's batch."""
        with self._guard:
            batchers = list(self._batchers.values())
        return sum(len(b.rows) for b in batchers), sum(len(b.waiting) for b in batchers)

    def parse(self, body: bytes, snapshot: Snapshot) -> tuple[CompletionRequest, list]:
        """The request and its prompts (each a string or a list of token ids); its
        model must be one of ``snapshot``'s with weights."""
        raw = parse_body(body)
        if raw.get("suffix") not in (None, ""):
            raise Refused(
                400, "field 'suffix' is not supported: these models only continue text (no fill-in-the-middle)"
            )
        raw.pop("suffix", None)
        try:
            request = CompletionRequest.model_validate(raw)
        except ValidationError as exc:
            raise Refused(400, describe_error(exc)) from None
        given = request.prompt
        one = isinstance(given, str) or (given and isinstance(given[0], int))
        prompts: list = [given] if one else list(given)
        if not prompts:
            raise Refused(400, "field 'prompt': give at least one prompt")
        for prompt in prompts:
            if not prompt:
                raise Refused(400, "field 'prompt': the prompt is empty")
            # A token stands for at least one character: the same bound for ids as for text.
            if len(prompt) > self.limits.max_prompt_chars:
                raise Refused(
                    400,
                    f"the prompt has {len(prompt)} characters; the limit max_prompt_chars={self.limits.max_prompt_chars}",
                    limit="max_prompt_chars",
                )
        if request.max_tokens == 0 and not request.echo:
            raise Refused(400, "field 'max_tokens': 0 returns nothing unless 'echo' is true (to score the prompt)")
        if request.best_of not in (None, request.n):
            raise Refused(400, "field 'best_of': only best_of equal to n is supported (every choice is returned)")
        self.check_request(request.model, request.max_tokens, len(prompts) * request.n, snapshot)
        return request, prompts

    def check_request(self, model: str, max_tokens: int, rows: int, snapshot: Snapshot) -> None:
        """What every generation request must satisfy: tokens and samples within the
        limits, and a model of ``snapshot``'s with weights."""
        if max_tokens > self.limits.max_tokens:
            raise Refused(
                400,
                f"max_tokens={max_tokens} exceeds the limit max_tokens={self.limits.max_tokens}",
                limit="max_tokens",
            )
        capacity = self.limits.max_concurrent_generations + self.limits.max_queued_generations
        if rows > capacity:
            raise Refused(
                400,
                f"field 'n': {rows} samples in one request; the server runs and queues at most {capacity}",
                limit="max_queued_generations",
            )
        if model not in snapshot.variants:
            raise Refused(404, f"unknown model '{model}'; GET /v1/models lists them", kind="not_found_error")
        if model not in snapshot.servable:
            raise Refused(404, f"model '{model}' has no published weights", kind="not_found_error")

    def submit(self, model, rows: list[Row]) -> None:
        """Hand rows to the model's batch (made on first use); under the guard, so a batch is never retired between."""
        with self._guard:
            batcher = self._batchers.get(model.name)
            if batcher is None or batcher.model is not model:  # published anew: a new model, a batch of its own
                if batcher is not None:
                    batcher.retire()
                batcher = self._batchers[model.name] = Batcher(model, self.limits.max_concurrent_generations)
            batcher.submit(rows)

    def retire(self, names) -> None:
        """The batches of variants whose cards changed or went away end once their rows are done."""
        with self._guard:
            for name in names:
                batcher = self._batchers.pop(name, None)
                if batcher is not None:
                    batcher.retire()

    async def respond(self, request: Request, body: bytes) -> Response:
        try:
            params, prompts = self.parse(body, await asyncio.to_thread(self.catalogue.current))
            try:
                model = await asyncio.to_thread(self.cache.get, params.model)
            except ZooError as exc:
                raise Refused(500, f"cannot load '{params.model}': {exc}", kind="server_error") from None
            if is_task_model(model):
                return await self._answer(model, params, prompts)
            encoded = [await off_loop(_token_ids, model, prompt) for prompt in prompts]
            prompts = [prompt if isinstance(prompt, str) else model.tokenizer.decode(prompt) for prompt in prompts]
            rows = len(prompts) * params.n
            try:
                self.admission.claim(rows)
            except QueueFull as exc:
                raise Refused(429, exc.message, limit=exc.limit) from None
        except Refused as refused:
            return refused.response()
        return await self.run(request, Run(self, model, params, prompts, encoded))

    async def run(self, request: Request, run: Run) -> Response:
        """Draw ``run``'s rows (their admission claimed) and answer: a stream of events, or one reply."""
        try:
            await asyncio.to_thread(run.score_prompts)  # only where echo asks for the prompt's log-probabilities
            run.start()
        except BaseException:
            run.close()
            raise
        if run.params.stream:
            return StreamingResponse(
                run.events(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            return await run.reply(request)
        finally:
            run.close()

    async def _answer(self, model, params: CompletionRequest, prompts: list[str]) -> Response:
        """Task models (the puzzle) answer instead of continuing: one answer per prompt, as `zoo sample` prints."""
        if params.n != 1 or params.logprobs is not None or params.stream or params.stop:
            raise Refused(400, f"'{params.model}' answers questions: n, logprobs, stop and stream do not apply")
        try:
            self.admission.claim(1)
        except QueueFull as exc:
            raise Refused(429, exc.message, limit=exc.limit) from None
        try:
            answers = [await asyncio.to_thread(answer_text, model, prompt) for prompt in prompts]
        except ZooError as exc:
            return Refused(400, str(exc)).response()
        finally:
            self.admission.release(1)
        choices = [
            {"text": (prompt if params.echo else "") + answer, "index": i, "logprobs": None, "finish_reason": "stop"}
            for i, (prompt, answer) in enumerate(zip(prompts, answers))
        ]
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        return JSONResponse({**response_head(params.model), "choices": choices, "usage": usage})


def _token_ids(model, prompt: str | list[int]) -> list[int]:
    if isinstance(prompt, str):
        try:
            return model.encode_prompt(prompt)
        except ZooError as exc:
            raise Refused(400, str(exc)) from None
    vocabulary = model.tokenizer.vocab_size
    if not all(0 <= token < vocabulary for token in prompt):
        raise Refused(400, f"field 'prompt': token ids must be from 0 to {vocabulary - 1} for '{model.name}'")
    return list(prompt)


def response_head(model: str, prefix: str = "cmpl-", kind: str = "text_completion") -> dict:
    return {
        "id": f"{prefix}{uuid.uuid4().hex[:24]}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
    }


class Choice:
    """One choice's text and log-probabilities as they come in; a token's
    log-probabilities are handed out once its text is (a held-back token that a
    stop string swallows never is)."""

    def __init__(self, index: int, prompt: str, seed: int, tokenizer, echo_offset: int):
        self.index, self.prompt, self.seed, self.tokenizer = index, prompt, seed, tokenizer
        self.echo_offset = echo_offset  # characters of echoed prompt before the completion
        self.shown = 0
        self.pending: list[Drawn] = []
        self.finished: Finished | None = None

    def take(self, drawn: Drawn) -> tuple[str, list[Drawn]]:
        self.pending.append(drawn)
        self.shown += len(drawn.piece)
        return drawn.piece, self._release(self.shown)

    def finish(self, finished: Finished) -> tuple[str, list[Drawn]]:
        self.finished = finished
        released = self._release(len(finished.text))
        self.pending = []
        return finished.tail, released

    def _release(self, shown: int) -> list[Drawn]:
        out = [d for d in self.pending if d.offset < shown]
        self.pending = [d for d in self.pending if d.offset >= shown]
        return out

    def logprobs(self, drawn: list[Drawn]) -> dict:
        decode = self.tokenizer.decode
        return {
            "tokens": [decode([d.token]) for d in drawn],
            "token_logprobs": [d.logprob for d in drawn],
            "top_logprobs": [{decode([t]): lp for t, lp in (d.top or {}).items()} for d in drawn],
            "text_offset": [self.echo_offset + d.offset for d in drawn],
        }


class Run:
    """One request's rows: submitted to the batch, their tokens gathered into choices.

    What the answer looks like is ``_answer``, ``_chunk`` and ``_openings``: a
    chat completion (zoo_core.web.chat_completions) draws the same way and
    answers in its own shape."""

    def __init__(self, service: Completions, model, params: CompletionRequest, prompts: list[str], encoded):
        self.service, self.model, self.params = service, model, params
        self.prompts, self.encoded = prompts, encoded
        self.rows_held = len(prompts) * params.n
        seeds = sample_seeds(params.seed, self.rows_held)
        echo = params.echo
        self.choices = [
            Choice(i, prompts[i // params.n], seeds[i], model.tokenizer, len(prompts[i // params.n]) if echo else 0)
            for i in range(self.rows_held)
        ]
        self.prompt_scores: list[dict | None] = [None] * len(prompts)
        self.cancel = threading.Event()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.head = response_head(params.model)
        self._closed = False
        self._started, self._first = time.perf_counter(), True
        if service.metrics is not None:
            service.metrics.generation_started()

    def score_prompts(self) -> None:
        if self.params.echo and self.params.logprobs is not None:
            for p, ids in enumerate(self.encoded):
                self.prompt_scores[p] = prompt_logprobs(self.model, ids, self.params.logprobs)

    def start(self) -> None:
        if self.params.max_tokens == 0:
            for choice in self.choices:
                self.queue.put_nowait((choice, Finished("", [], "", "length")))
            return
        loop = asyncio.get_running_loop()
        rows = []
        for choice in self.choices:

            def deliver(item, choice=choice):  # called in this loop (batching.Batcher._send)
                self.queue.put_nowait((choice, item))

            settings = self.params.sampling_settings(choice.seed, self.params.max_tokens)
            ids = self.encoded[choice.index // self.params.n]
            rows.append(Row(ids, settings, deliver, loop, self.cancel, self.params.logprobs))
        self.service.submit(self.model, rows)

    def close(self) -> None:
        self.cancel.set()  # rows still running or waiting leave at the next round
        if not self._closed:
            self._closed = True
            self.service.admission.release(self.rows_held)
            if self.service.metrics is not None:
                self.service.metrics.generation_finished(self.params.model, self._usage()["completion_tokens"])

    async def _items(self):
        """(choice, text, released tokens, finished?) as the rows draw; ends when every row has finished.

        Whatever arrived since the last look is joined per choice: a client that
        reads slower than the tokens come gets fewer, longer chunks, not a backlog."""
        left = len(self.choices)
        while left:
            arrived = [await self.queue.get()]
            if self._first and self.service.metrics is not None:
                self._first = False
                self.service.metrics.first_token(self.params.model, time.perf_counter() - self._started)
            while not self.queue.empty():
                arrived.append(self.queue.get_nowait())
            joined: dict[Choice, tuple[str, list[Drawn], bool]] = {}
            for choice, item in arrived:
                if isinstance(item, ZooError):
                    raise item
                text, released, finished = joined.get(choice, ("", [], False))
                if isinstance(item, Finished):
                    left -= 1
                    more, newly = choice.finish(item)
                    finished = True
                else:
                    more, newly = choice.take(item)
                joined[choice] = (text + more, released + newly, finished)
            for choice, (text, released, finished) in joined.items():
                yield choice, text, released, finished

    def _echo(self, choice: Choice) -> tuple[str, dict | None]:
        """The echoed prompt and its log-probabilities (its first token has none)."""
        return choice.prompt, self.prompt_scores[choice.index // self.params.n]

    def _usage(self) -> dict:
        prompt_tokens = sum(len(ids) for ids in self.encoded)
        completion = sum(len(c.finished.tokens) for c in self.choices if c.finished)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }

    async def reply(self, request: Request) -> Response:
        async def watch_for_departure():
            # Without a stream nothing is sent until the end, so nothing would
            # notice a client that left: ask the connection instead.
            while not self.cancel.is_set():
                if await request.is_disconnected():
                    self.cancel.set()
                    self.queue.put_nowait((None, ZooError("the client left")))  # ends the wait for its rows
                    return
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch_for_departure())
        drawn: dict[int, list[Drawn]] = {c.index: [] for c in self.choices}
        try:
            async for choice, _, released, _ in self._items():
                drawn[choice.index] += released
        except ZooError as exc:
            return Refused(400, str(exc)).response()
        finally:
            watcher.cancel()
        out = [self._answer(choice, drawn[choice.index]) for choice in self.choices]
        return JSONResponse({**self.head, "choices": out, "usage": self._usage()})

    def _answer(self, choice: Choice, drawn: list[Drawn]) -> dict:
        """A finished choice as the reply without a stream shows it."""
        assert choice.finished is not None
        text, logprobs = choice.finished.text, None
        if self.params.logprobs is not None:
            logprobs = self._logprobs(choice, drawn)
        if self.params.echo:
            prompt, scores = self._echo(choice)
            text = prompt + text
            if logprobs is not None and scores is not None:
                logprobs = {key: scores[key] + logprobs[key] for key in logprobs}
        return {
            "text": text,
            "index": choice.index,
            "logprobs": logprobs,
            "finish_reason": choice.finished.finish_reason,
        }

    def _logprobs(self, choice: Choice, drawn: list[Drawn]) -> dict:
        """The log-probabilities of a choice's tokens, in this endpoint's shape."""
        return choice.logprobs(drawn)

    def _chunk(self, choice: Choice, text: str, logprobs: dict | None, finish: str | None) -> str:
        """One event: new text of a choice, its tokens' log-probabilities when asked for, and why it finished."""
        body = {
            **self.head,
            "choices": [{"text": text, "index": choice.index, "logprobs": logprobs, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    def _openings(self):
        """The events before the first token: the echoed prompts."""
        if self.params.echo:
            for choice in self.choices:
                prompt, scores = self._echo(choice)
                yield self._chunk(choice, prompt, scores, None)

    async def events(self):
        wants_logprobs = self.params.logprobs is not None
        try:
            for opening in self._openings():
                yield opening
            async for choice, text, released, finished in self._items():
                if text or released or finished:
                    logprobs = self._logprobs(choice, released) if wants_logprobs else None
                    reason = choice.finished.finish_reason if finished and choice.finished else None
                    yield self._chunk(choice, text, logprobs, reason)
            if self.params.stream_options and self.params.stream_options.include_usage:
                yield f"data: {json.dumps({**self.head, 'choices': [], 'usage': self._usage()})}\n\n"
        except ZooError as exc:
            yield f"data: {json.dumps({'error': {'message': str(exc), 'type': 'server_error'}})}\n\n"
        finally:
            self.close()
        yield "data: [DONE]\n\n"
