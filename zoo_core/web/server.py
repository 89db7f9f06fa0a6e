"""`zoo serve`: the gallery, a sampling page and an OpenAI-style completions API.

- ``GET /`` the gallery (built by `zoo gallery`), ``GET /sample`` the sampling page
- ``GET /v1/models``, ``GET /v1/models/ID``, ``POST /v1/completions``,
  ``POST /v1/chat/completions`` (``"stream": true`` answers with server-sent
  events: ``data: {chunk}`` lines, then ``data: [DONE]``)
- ``GET /metrics``: Prometheus' text format (zoo_core.web.metrics)
- ``GET /catalogue/index.json`` and ``GET /catalogue/archives/NAME.zoo``: the
  read-only catalogue other machines pull from (`zoo pull`, see zoo_core.sharing);
  archives carry their sha256 as a strong ETag and answer byte ranges

The catalogue is read again when a registry file changes
(zoo_core.web.live_catalogue): variants published, installed or removed while
the server runs are listed and served, or gone, at the next request. A gallery
the server writes for itself is built on a thread of its own
(zoo_core.web.site_builder) while everything else answers. Each request is
logged in one line (zoo_core.web.access_log).

Every model is loaded once and shared. Completions (zoo_core.web.completions)
are drawn by one continuous batch per variant in its own thread
(zoo_core.web.batching), so the event loop keeps answering while tokens are
drawn; a client that goes away leaves the batch at the next token. Nothing here
writes to a catalogue. Which requests are answered at all (Host, Origin, API key)
is zoo_core.web.security; how slow a client may be and how many may connect,
zoo_core.web.connections.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import ZooError
from ..sharing.index import build_index
from ..storage.files import describe_os_error
from .access_log import AccessLog, configure
from .chat_completions import ChatCompletions
from .completions import Completions
from .connections import ConnectionLimits, descriptor_shortage, protocol_for
from .exhaustion_log import log_exhaustion_once_per
from .generation import ModelCache
from .live_catalogue import LiveCatalogue, Snapshot
from .metrics import MetricsMiddleware, ServerMetrics
from .security import Security, bind_notice, check_bind
from .security import middleware as security_middleware
from .site_builder import SiteBuilder

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; anything beyond is a 4xx naming the limit."""

    max_body_bytes: int = 64 * 1024
    max_prompt_chars: int = 8000
    max_tokens: int = 1024
    max_concurrent_generations: int = 4  # rows in one variant's running batch
    max_queued_generations: int = 64  # rows waiting for a place in a batch; past that, 429


class LimitExceeded(Exception):
    def __init__(self, status: int, limit: str, message: str):
        super().__init__(message)
        self.status, self.limit, self.message = status, limit, message


def _error(status: int, message: str, kind: str = "invalid_request_error", limit: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind}}
    if limit:
        body["error"]["limit"] = limit
    return JSONResponse(body, status_code=status)


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
    builder: SiteBuilder | None = None,
) -> Starlette:
    """The ASGI app; ``site`` is a folder written by `zoo gallery` (optional), or
    the one ``builder`` is writing (then its pages wait until it is built)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    cache = cache or ModelCache()
    metrics = metrics or ServerMetrics()

    def catalogue_changed(names: list[str]) -> None:
        answering.retire(names)  # their batches let their models go
        if builder is not None:
            builder.rebuild()

    live = LiveCatalogue(cache, on_change=catalogue_changed)
    answering = Completions(cache, limits, live, metrics)
    chatting = ChatCompletions(answering)
    templates = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape())

    async def current() -> Snapshot:
        return await asyncio.to_thread(live.current)  # a re-read after a change validates cards: off the loop

    def described(snapshot: Snapshot, name: str) -> dict:
        variant = snapshot.variants[name]
        return {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": variant.plugin,
            "context_length": variant.card.context_length,
        }

    async def models(request: Request) -> Response:
        snapshot = await current()
        return JSONResponse({"object": "list", "data": [described(snapshot, n) for n in sorted(snapshot.servable)]})

    async def model(request: Request) -> Response:
        snapshot, name = await current(), request.path_params["name"]
        if name not in snapshot.servable:
            why = "has no published weights" if name in snapshot.variants else "is unknown"
            return _error(404, f"model '{name}' {why}; GET /v1/models lists them", kind="not_found_error")
        return JSONResponse(described(snapshot, name))

    def answered_by(endpoint: Completions | ChatCompletions):
        """The route of a completions endpoint: its body read within the limit, then answered."""

        async def route(request: Request) -> Response:
            try:
                body = await _read_body(request, limits.max_body_bytes)
            except LimitExceeded as exc:
                return _error(exc.status, exc.message, limit=exc.limit)
            return await endpoint.respond(request, body)

        return route

    async def sample_page(request: Request) -> Response:
        names = sorted((await current()).servable)
        page = templates.get_template("sample.html").render(
            variants=names, limits=limits, gallery=site is not None, needs_key=bool(security.api_key)
        )
        return Response(page, media_type="text/html")

    async def index(request: Request) -> Response:
        if site is None:
            return RedirectResponse("/sample")
        await current()  # a changed catalogue starts the builder's next build
        if builder is not None and not builder.ready:
            return builder.building_page()
        if (site / "index.html").is_file():
            return FileResponse(site / "index.html")
        return RedirectResponse("/sample")

    async def metrics_page(request: Request) -> Response:
        running, waiting = answering.rows()
        metrics.observe_batch(running)
        metrics.observe_queue(waiting)
        body, content_type = metrics.exposition()
        return Response(body, headers={"Content-Type": content_type})

    async def health(request: Request) -> Response:
        gallery = "off" if site is None else builder.state if builder is not None else "ready"
        return JSONResponse(
            {"status": "ok", "loaded": cache.loaded(), "generations": answering.generations, "gallery": gallery}
        )

    routes = [
        Route("/", index),
        Route("/sample", sample_page),
        Route("/health", health),
        Route("/metrics", metrics_page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/v1/models", models),
        Route("/v1/models/{name}", model),
        Route("/v1/completions", answered_by(answering), methods=["POST"]),
        Route("/v1/chat/completions", answered_by(chatting), methods=["POST"]),
        *_catalogue_routes(live),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    if site is not None:
        pages = StaticFiles(directory=site, html=True, check_dir=builder is None)
        routes.append(Mount("/", pages if builder is None else _WhenBuilt(builder, pages), name="gallery"))
    # The access log outermost, then the metrics: refused requests show in both.
    middleware = [Middleware(AccessLog), Middleware(MetricsMiddleware, metrics=metrics), *security_middleware(security)]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, ClientDisconnect: _client_gone, Exception: _server_error},
    )


class _WhenBuilt:
    """The gallery's pages once the builder has written them; until then, the page saying it is being built."""

    def __init__(self, builder: SiteBuilder, pages: StaticFiles):
        self.builder, self.pages = builder, pages

    async def __call__(self, scope, receive, send) -> None:
        if self.builder.ready:
            await self.pages(scope, receive, send)
        else:
            await self.builder.building_page()(scope, receive, send)


def _catalogue_routes(live: LiveCatalogue) -> list[Route]:
    """The remote catalogue `zoo pull` reads: the index and the archives it lists."""
    shared: dict = {}
    shared_lock = threading.Lock()

    def shared_catalogue() -> tuple[dict, dict[str, Path]]:
        # Built on first use, not at start: packing the archives is work a server
        # that nobody pulls from should not pay. Built again for a changed
        # catalogue; archives of unchanged variants come from the archive cache.
        snapshot = live.current()
        with shared_lock:
            if shared.get("snapshot") is not snapshot:
                shared["index"], shared["archives"] = build_index(warn=True)
                shared["snapshot"] = snapshot
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

    return [Route("/catalogue/index.json", catalogue_index), Route("/catalogue/archives/{file}", catalogue_archive)]


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette types every handler as taking any Exception; this one is registered for HTTPException.
    assert isinstance(exc, HTTPException)
    return _error(
        exc.status_code,
        exc.detail if isinstance(exc.detail, str) else "error",
        kind="not_found_error" if exc.status_code == 404 else "invalid_request_error",
    )


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client left (or was cut off for sending its body too slowly) while
    # its body was read: nobody to answer, and nothing worth a traceback.
    return Response(status_code=400)


async def _server_error(request: Request, exc: Exception) -> Response:
    return _error(500, f"internal error: {type(exc).__name__}", kind="server_error")


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    site: Path | None = None,
    limits: Limits = Limits(),
    security: Security = Security(),
    connections: ConnectionLimits = ConnectionLimits(),
    build_site: bool = False,
    log_level: str = "info",
    quantize: str | None = None,
) -> None:
    """Serve until stopped. ``build_site``: ``site`` is the gallery's folder, to
    be written (in the background) rather than served as it is. ``quantize``:
    every model loaded so (``load``'s option)."""
    import uvicorn

    check_bind(host, security.api_key)
    if site is not None and not build_site and not (site / "index.html").is_file():
        raise ZooError(f"{site}: no gallery here (index.html missing); write one with `zoo gallery --out {site}`")
    listening = bind(host, port)  # before anything is printed: a busy port is one line, nothing else
    port = listening.getsockname()[1]  # the one the system chose for --port 0
    builder = SiteBuilder(site) if build_site and site is not None else None
    app = create_app(site, limits, ModelCache(quantize=quantize), security=security, builder=builder)
    config = uvicorn.Config(
        app,
        log_level=configure(log_level),
        access_log=False,  # zoo_core.web.access_log's lines say how long each request took
        timeout_graceful_shutdown=2,
        http=protocol_for(connections),
        loop="zoo_core.web.connections:OneAcceptPerTurnLoop",
        timeout_keep_alive=connections.keep_alive_timeout,
    )
    log_exhaustion_once_per()  # after uvicorn.Config, which sets up uvicorn's loggers
    print(
        f"zoo serve: http://{host}:{port}/  (sampling page /sample, "
        "API /v1/completions and /v1/chat/completions, catalogue /catalogue/index.json)",
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
    if builder is not None:
        print(f"zoo serve: building the gallery in {site} (the API answers meanwhile) ...", file=sys.stderr, flush=True)
        builder.start()
    uvicorn.Server(config).run(sockets=[listening])


def bind(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here so that a port in use is the
    zoo's one-line error, said before the banner, not uvicorn's log and exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise ZooError(f"port {port} on {host} is in use (another server?); choose another with --port") from None
        raise ZooError(f"cannot listen on {host}:{port}: {describe_os_error(exc)}") from None
    return listening
