"""`POST /v1/chat/completions`: OpenAI's chat completions request, as its clients send it.

The conversation (``messages``: system, developer — OpenAI's newer name for
system —, user and assistant turns, each a string or a list of text parts) is
rendered with the variant's chat template as transformers renders it
(zoo_core.inference.chat) and continued by the same continuous batch as
``/v1/completions`` (zoo_core.web.completions), so choice ``i`` is drawn with
seed ``seed + i`` and the first choice is the reply `zoo chat --seed SEED` gives.
A reply ends before the template's end-of-sequence token or one of the card's
stop texts or the request's ``stop`` (finish_reason "stop"), or after
``max_completion_tokens`` (or ``max_tokens``; by default the server's limit:
finish_reason "length").

Honoured besides: ``n``, ``temperature``, ``top_p``, ``seed``, ``logprobs``
with ``top_logprobs`` (the model's own log-probabilities, before temperature
and filters), ``stream`` (chunks whose ``delta`` holds the new text, with
``stream_options.include_usage``), and the zoo's ``top_k`` and ``min_p``.
Anything else (tools, response formats, penalties other than 0) is refused
rather than ignored; a variant without a chat template is refused in one line
naming what to do instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ZooError
from ..inference.chat import chat_prompt_ids, chat_spec, chat_stops
from .batching import Drawn, QueueFull
from .completions import (
    MAX_LOGPROBS,
    Choice,
    Choices,
    CompletionRequest,
    Completions,
    MinP,
    Refused,
    Run,
    Seed,
    Stop,
    StreamOptions,
    Temperature,
    TopK,
    TopP,
    describe_error,
    off_loop,
    parse_body,
    response_head,
)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def as_template_message(self) -> dict:
        """The message as a chat template reads it: a role templates know, the text as one string."""
        text = self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": text}


class ChatCompletionRequest(BaseModel):
    """The fields of OpenAI's chat completions request this server honours (top_k
    and min_p are extensions); anything else is refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    top_k: TopK = None
    min_p: MinP = 0.0
    seed: Seed = 0
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Choices = 1
    stop: Stop = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    presence_penalty: Literal[0] = 0
    frequency_penalty: Literal[0] = 0
    logit_bias: None = None
    user: str | None = None


class ChatCompletions:
    """The chat endpoint: a conversation becomes a prompt, drawn by the completions' batches."""

    def __init__(self, completions: Completions):
        self.completions = completions

    def parse(self, body: bytes) -> ChatCompletionRequest:
        raw = parse_body(body)
        try:
            request = ChatCompletionRequest.model_validate(raw)
        except ValidationError as exc:
            raise Refused(400, describe_error(exc)) from None
        if request.top_logprobs is not None and not request.logprobs:
            raise Refused(400, "field 'top_logprobs': give it with 'logprobs': true")
        given = {request.max_tokens, request.max_completion_tokens} - {None}
        if len(given) > 1:
            raise Refused(400, "fields 'max_tokens' and 'max_completion_tokens' differ; give one of them")
        return request

    async def respond(self, request: Request, body: bytes) -> Response:
        service = self.completions
        try:
            params = self.parse(body)
            max_tokens = params.max_completion_tokens or params.max_tokens or service.limits.max_tokens
            snapshot = await asyncio.to_thread(service.catalogue.current)
            service.check_request(params.model, max_tokens, params.n, snapshot)
            try:
                stops = chat_stops(chat_spec(snapshot.variants[params.model].card))
            except ZooError as exc:
                raise Refused(400, str(exc)) from None
            messages = [message.as_template_message() for message in params.messages]
            characters = sum(len(message["content"]) for message in messages)
            if characters > service.limits.max_prompt_chars:
                raise Refused(
                    400,
                    f"the messages have {characters} characters; the limit max_prompt_chars="
                    f"{service.limits.max_prompt_chars}",
                    limit="max_prompt_chars",
                )
            try:
                model = await asyncio.to_thread(service.cache.get, params.model)
            except ZooError as exc:
                raise Refused(500, f"cannot load '{params.model}': {exc}", kind="server_error") from None
            try:
                ids = await off_loop(chat_prompt_ids, model, messages)
            except ZooError as exc:
                raise Refused(400, str(exc)) from None
            try:
                service.admission.claim(params.n)
            except QueueFull as exc:
                raise Refused(429, exc.message, limit=exc.limit) from None
        except Refused as refused:
            return refused.response()
        user_stops = [params.stop] if isinstance(params.stop, str) else params.stop or []
        # The prompt's ids drawn as /v1/completions draws them: its request, built from this one.
        drawing = CompletionRequest.model_construct(
            model=params.model,
            prompt=ids,
            max_tokens=max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            seed=params.seed,
            stream=params.stream,
            stream_options=params.stream_options,
            n=params.n,
            stop=[*user_stops, *stops],
            logprobs=(params.top_logprobs or 0) if params.logprobs else None,
        )
        return await service.run(request, ChatRun(service, model, drawing, [model.tokenizer.decode(ids)], [ids]))


class ChatRun(Run):
    """A chat completion's rows, answered as chat messages and as chunks with a ``delta``."""

    def __init__(self, service: Completions, model, params: CompletionRequest, prompts: list[str], encoded):
        super().__init__(service, model, params, prompts, encoded)
        kind = "chat.completion.chunk" if params.stream else "chat.completion"
        self.head = response_head(params.model, "chatcmpl-", kind)

    def _answer(self, choice: Choice, drawn: list[Drawn]) -> dict:
        assert choice.finished is not None
        return {
            "index": choice.index,
            "message": {"role": "assistant", "content": choice.finished.text, "refusal": None},
            "logprobs": self._logprobs(choice, drawn) if self.params.logprobs is not None else None,
            "finish_reason": choice.finished.finish_reason,
        }

    def _logprobs(self, choice: Choice, drawn: list[Drawn]) -> dict:
        decode = self.model.tokenizer.decode

        def entry(token: int, logprob: float) -> dict:
            text = decode([token])
            return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

        return {
            "content": [
                {
                    **entry(d.token, d.logprob),
                    "top_logprobs": [entry(t, lp) for t, lp in (d.top or {}).items()],
                }
                for d in drawn
                if d.logprob is not None
            ],
            "refusal": None,
        }

    def _chunk(self, choice: Choice, text: str, logprobs: dict | None, finish: str | None) -> str:
        return self._event(choice, {"content": text} if text else {}, logprobs, finish)

    def _openings(self):
        """Each choice opens with the assistant's role, as OpenAI's streams do."""
        for choice in self.choices:
            yield self._event(choice, {"role": "assistant", "content": ""}, None, None)

    def _event(self, choice: Choice, delta: dict, logprobs: dict | None, finish: str | None) -> str:
        body = {
            **self.head,
            "choices": [{"index": choice.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"
