"""`zoo serve`: the gallery, a sampling page and an OpenAI-style completions API.

- ``GET /`` the gallery (built by `zoo gallery`), ``GET /sample`` the sampling page
- ``GET /v1/models``, ``POST /v1/completions`` (``"stream": true`` answers with
  server-sent events: ``data: {chunk}`` lines, then ``data: [DONE]``)
- ``GET /metrics``: Prometheus' text format (zoo_core.web.metrics)
- ``GET /catalogue/index.json`` and ``GET /catalogue/archives/NAME.zoo``: the
  read-only catalogue other machines pull from (`zoo pull`, see zoo_core.sharing);
  archives carry their sha256 as a strong ETag and answer byte ranges

Every model is loaded once and shared. Generation runs in worker threads, so the
event loop keeps answering while tokens are drawn; a client that goes away stops
its generation at the next token. Nothing here writes to a catalogue.
Which requests are answered at all (Host, Origin, API key) is zoo_core.web.security;
how slow a client may be and how many may connect, zoo_core.web.connections.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import ZooError
from ..inference.settings import OPTION_NAMES, SamplingSettings
from .connections import ConnectionLimits
from .generation import ModelCache, answer_text, is_task_model
from .metrics import MetricsMiddleware, ServerMetrics
from .security import Security, bind_notice, check_bind
from .security import middleware as security_middleware

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; anything beyond is a 4xx naming the limit."""

    max_body_bytes: int = 64 * 1024
    max_prompt_chars: int = 8000
    max_tokens: int = 1024
    max_concurrent_generations: int = 4


class LimitExceeded(Exception):
    def __init__(self, status: int, limit: str, message: str):
        super().__init__(message)
        self.status, self.limit, self.message = status, limit, message


class CompletionRequest(BaseModel):
    """The fields of OpenAI's completions request this server honours (top_k and
    min_p are extensions). Fields OpenAI clients send at their defaults are
    accepted; anything else is refused rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: str | list[str]
    max_tokens: StrictInt = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0, le=100, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=1)
    min_p: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    seed: int = Field(0, ge=0, lt=2**63)
    stream: bool = False
    n: Literal[1] = 1
    echo: bool = False
    stop: None = None
    logprobs: None = None
    presence_penalty: Literal[0] = 0
    frequency_penalty: Literal[0] = 0
    user: str | None = None

    def sampling_settings(self) -> SamplingSettings:
        """The request as the sampler takes it: fields named like a sampling
        option pass through by name; OpenAI's max_tokens is max_new_tokens."""
        same_name = {name: getattr(self, name) for name in OPTION_NAMES if name in type(self).model_fields}
        return SamplingSettings(**same_name, max_new_tokens=self.max_tokens)


def _error(status: int, message: str, kind: str = "invalid_request_error", limit: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind}}
    if limit:
        body["error"]["limit"] = limit
    return JSONResponse(body, status_code=status)


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    if first["type"] == "extra_forbidden":
        return f"unsupported field '{where}'"
    if first["type"] == "missing":
        return f"missing field '{where}'"
    return f"field '{where}': {first['msg']}"


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise LimitExceeded(
            413, "max_body_bytes", f"request body of {declared} bytes exceeds the limit max_body_bytes={limit}"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise LimitExceeded(413, "max_body_bytes", f"request body exceeds the limit max_body_bytes={limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    site: Path | None = None,
    limits: Limits = Limits(),
    cache: ModelCache | None = None,
    security: Security = Security(),
    metrics: ServerMetrics | None = None,
) -> Starlette:
    """The ASGI app; ``site`` is a folder written by `zoo gallery` (optional)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from ..api import catalogue

    cache = cache or ModelCache()
    metrics = metrics or ServerMetrics()
    variants = {v.name: v for v in catalogue()}
    servable = {name for name, v in variants.items() if _has_weights(v)}
    generations = {"running": 0}
    generation_lock = threading.Lock()
    templates = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape())

    def claim_slot() -> None:
        with generation_lock:
            if generations["running"] >= limits.max_concurrent_generations:
                raise LimitExceeded(
                    429,
                    "max_concurrent_generations",
                    f"too many generations at once: the limit max_concurrent_generations={limits.max_concurrent_generations} is reached; retry later",
                )
            generations["running"] += 1
        metrics.generation_started()

    def release_slot() -> None:
        with generation_lock:
            generations["running"] -= 1

    async def models(request: Request) -> Response:
        data = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": variants[name].plugin,
                "context_length": variants[name].card.context_length,
            }
            for name in sorted(servable)
        ]
        return JSONResponse({"object": "list", "data": data})

    def parse(body: bytes) -> tuple[CompletionRequest, str]:
        """The request, and its one prompt (a list of one string is accepted for OpenAI's clients)."""
        try:
            raw = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ZooError(f"the body is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ZooError("the body must be a JSON object")
        try:
            request = CompletionRequest.model_validate(raw)
        except ValidationError as exc:
            raise ZooError(_describe(exc)) from None
        prompt = request.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise ZooError("field 'prompt': give one prompt (a string or a list of one string)")
            prompt = prompt[0]
        if not prompt:
            raise ZooError("field 'prompt': the prompt is empty")
        if len(prompt) > limits.max_prompt_chars:
            raise LimitExceeded(
                400,
                "max_prompt_chars",
                f"the prompt has {len(prompt)} characters; the limit max_prompt_chars={limits.max_prompt_chars}",
            )
        if request.max_tokens > limits.max_tokens:
            raise LimitExceeded(
                400, "max_tokens", f"max_tokens={request.max_tokens} exceeds the limit max_tokens={limits.max_tokens}"
            )
        if request.model not in variants:
            raise LookupError(f"unknown model '{request.model}'; GET /v1/models lists them")
        if request.model not in servable:
            raise LookupError(f"model '{request.model}' has no published weights")
        return request, prompt

    def chunk(ident: str, created: int, model: str, text: str, finish: str | None) -> dict:
        return {
            "id": ident,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
        }

    async def completions(request: Request) -> Response:
        try:
            body = await _read_body(request, limits.max_body_bytes)
            params, prompt = parse(body)
            settings = params.sampling_settings()
        except LimitExceeded as exc:
            return _error(exc.status, exc.message, limit=exc.limit)
        except LookupError as exc:
            return _error(404, str(exc.args[0]), kind="not_found_error")
        except ZooError as exc:
            return _error(400, str(exc))
        try:
            model = await asyncio.to_thread(cache.get, params.model)
        except ZooError as exc:
            return _error(500, f"cannot load '{params.model}': {exc}", kind="server_error")
        try:
            prompt_ids = model.encode_prompt(prompt)
        except ZooError as exc:
            return _error(400, str(exc))
        try:
            claim_slot()
        except LimitExceeded as exc:
            return _error(exc.status, exc.message, limit=exc.limit)
        ident, created, started = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time()), time.perf_counter()
        stop = threading.Event()
        usage = {"completion_tokens": 0}
        if is_task_model(model):
            pieces = iter_answer(model, prompt)
        else:
            from ..inference.sampling import stream_text  # torch, loaded with the first model anyway

            # The sampler behind `zoo sample`: the same settings and seed give the same text.
            pieces = stream_text(
                model.network, model.tokenizer, prompt_ids, settings=settings, cancel=stop, usage=usage
            )
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        done = object()

        def produce():
            # A worker thread: torch releases the GIL while it computes, so the
            # event loop and other generations keep going.
            try:
                for piece in pieces:
                    loop.call_soon_threadsafe(queue.put_nowait, piece)
                    if stop.is_set():
                        break
                loop.call_soon_threadsafe(queue.put_nowait, done)
            except ZooError as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            except Exception as exc:  # reported as one line, never a traceback page
                loop.call_soon_threadsafe(queue.put_nowait, ZooError(f"generation failed: {type(exc).__name__}: {exc}"))
            finally:
                pieces.close() if hasattr(pieces, "close") else None
                release_slot()
                metrics.generation_finished(params.model, usage["completion_tokens"])

        worker = loop.run_in_executor(None, produce)

        async def pieces_out():
            try:
                first = True
                while True:
                    item = await queue.get()
                    if item is done:
                        return
                    if isinstance(item, ZooError):
                        raise item
                    if first:
                        metrics.first_token(params.model, time.perf_counter() - started)
                        first = False
                    yield item
            finally:
                stop.set()  # the client left (or we finished): the worker stops at its next token

        if params.stream:

            async def events():
                try:
                    if params.echo:
                        yield f"data: {json.dumps(chunk(ident, created, params.model, prompt, None))}\n\n"
                    async for piece in pieces_out():
                        yield f"data: {json.dumps(chunk(ident, created, params.model, piece, None))}\n\n"
                    final = chunk(ident, created, params.model, "", "length")
                    yield f"data: {json.dumps(final)}\n\n"
                except ZooError as exc:
                    yield f"data: {json.dumps({'error': {'message': str(exc), 'type': 'server_error'}})}\n\n"
                finally:
                    stop.set()
                yield "data: [DONE]\n\n"

            return StreamingResponse(
                events(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )

        async def watch_for_departure():
            # Without a stream nothing is sent until the end, so nothing would
            # notice a client that left: ask the connection instead.
            while not stop.is_set():
                if await request.is_disconnected():
                    stop.set()
                    return
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch_for_departure())
        text = []
        try:
            async for piece in pieces_out():
                text.append(piece)
        except ZooError as exc:
            return _error(400, str(exc))
        finally:
            watcher.cancel()
        await worker
        completion = "".join(text)
        completion_tokens = usage["completion_tokens"]
        reply = chunk(ident, created, params.model, (prompt if params.echo else "") + completion, "length")
        reply["usage"] = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        }
        return JSONResponse(reply)

    def iter_answer(model, prompt):
        yield answer_text(model, prompt)

    async def sample_page(request: Request) -> Response:
        names = sorted(servable)
        page = templates.get_template("sample.html").render(
            variants=names, limits=limits, gallery=site is not None, needs_key=bool(security.api_key)
        )
        return Response(page, media_type="text/html")

    async def index(request: Request) -> Response:
        if site is not None and (site / "index.html").is_file():
            return FileResponse(site / "index.html")
        return RedirectResponse("/sample")

    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics.exposition()
        return Response(body, headers={"Content-Type": content_type})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "loaded": cache.loaded(), "generations": generations["running"]})

    shared: dict = {}
    shared_lock = threading.Lock()

    def shared_catalogue() -> tuple[dict, dict[str, Path]]:
        # Built on first use, not at start: packing the archives is work a server
        # that nobody pulls from should not pay.
        with shared_lock:
            if not shared:
                from ..sharing.index import build_index

                shared["index"], shared["archives"] = build_index(warn=True)
            return shared["index"], shared["archives"]

    async def catalogue_index(request: Request) -> Response:
        index, _ = await asyncio.to_thread(shared_catalogue)
        return JSONResponse(index, headers={"Cache-Control": "no-cache"})

    async def catalogue_archive(request: Request) -> Response:
        file = request.path_params["file"]
        index, archives = await asyncio.to_thread(shared_catalogue)
        name = file.removesuffix(".zoo")
        if not file.endswith(".zoo") or name not in archives:
            return _error(404, f"no archive '{file}'; GET /catalogue/index.json lists them", kind="not_found_error")
        sha256 = next(entry["archive"]["sha256"] for entry in index["variants"] if entry["name"] == name)
        etag = f'"{sha256}"'  # strong: the bytes' own hash
        wanted = [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]
        if etag in wanted or "*" in wanted:
            return Response(status_code=304, headers={"ETag": etag})
        # FileResponse answers Range (206 with Content-Range, 416 past the end) itself.
        return FileResponse(archives[name], media_type="application/zip", headers={"ETag": etag})

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette types every handler as taking any Exception; this one is registered for HTTPException.
        assert isinstance(exc, HTTPException)
        return _error(
            exc.status_code,
            exc.detail if isinstance(exc.detail, str) else "error",
            kind="not_found_error" if exc.status_code == 404 else "invalid_request_error",
        )

    async def client_gone(request: Request, exc: Exception) -> Response:
        # The client left (or was cut off for sending its body too slowly) while
        # its body was read: nobody to answer, and nothing worth a traceback.
        return Response(status_code=400)

    async def server_error(request: Request, exc: Exception) -> Response:
        return _error(500, f"internal error: {type(exc).__name__}", kind="server_error")

    routes = [
        Route("/", index),
        Route("/sample", sample_page),
        Route("/health", health),
        Route("/metrics", metrics_page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/v1/models", models),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/catalogue/index.json", catalogue_index),
        Route("/catalogue/archives/{file}", catalogue_archive),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    if site is not None:
        routes.append(Mount("/", StaticFiles(directory=site, html=True), name="gallery"))
    # Counted first, so that refused requests show in the metrics too.
    middleware = [Middleware(MetricsMiddleware, metrics=metrics), *security_middleware(security)]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error, ClientDisconnect: client_gone, Exception: server_error},
    )


def _has_weights(variant) -> bool:
    from ..api import has_published_weights

    return has_published_weights(variant)


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    site: Path | None = None,
    limits: Limits = Limits(),
    security: Security = Security(),
    connections: ConnectionLimits = ConnectionLimits(),
) -> None:
    import uvicorn

    from .connections import descriptor_shortage, protocol_for
    from .exhaustion_log import log_exhaustion_once_per

    check_bind(host, security.api_key)
    if site is not None and not (site / "index.html").is_file():
        raise ZooError(f"{site}: no gallery here (index.html missing); write one with `zoo gallery --out {site}`")
    app = create_app(site, limits, security=security)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        http=protocol_for(connections),
        loop="zoo_core.web.connections:OneAcceptPerTurnLoop",
        timeout_keep_alive=connections.keep_alive_timeout,
    )
    log_exhaustion_once_per()  # after uvicorn.Config, which sets up uvicorn's loggers
    print(
        f"zoo serve: http://{host}:{port}/  (sampling page /sample, API /v1/completions, "
        "catalogue /catalogue/index.json)",
        flush=True,
    )
    notice = bind_notice(host, security)
    if notice:
        print(notice, flush=True)
    descriptors = descriptor_shortage(connections)
    if descriptors is not None:
        print(
            f"zoo serve: warning: the descriptor limit (ulimit -n) is {descriptors}, too few for --max-connections "
            f"{connections.max_connections} and the server's own files; accepting may fail under load",
            file=sys.stderr,
            flush=True,
        )
    uvicorn.Server(config).run()
