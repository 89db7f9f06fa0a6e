"""Who `zoo serve` answers: the Host, Origin, content-type and API-key checks.

Each check is a small ASGI middleware in front of the app, so it runs before any
route (and so before any model computes):

- Host: only the names the server was started for. A web page on another name
  that its DNS points at 127.0.0.1 (DNS rebinding) is the same origin as far as
  the browser knows; only the Host header gives it away.
- Origin: a browser sends it with every cross-origin request (and with same-origin
  POSTs). Anything but the server's own origin or a ``--cors-origin`` is refused,
  preflight or not: a ``text/plain`` POST is a "simple request" the browser sends
  without asking first.
- Content type: POST bodies are JSON; a declared other type (the three a form or a
  simple request can send) is 415. A missing one is accepted for clients such as
  ``urllib`` that send none; browsers always send Origin, which is checked above.
- API key: ``Authorization: Bearer KEY`` on what computes or reports (``/v1/*``,
  ``/metrics``), compared in constant time. The pages, static files, ``/health``
  and the read-only catalogue (``zoo pull`` has no way to send a key) stay open.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass, field

from ..errors import ZooError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
KEYED_PREFIXES = ("/v1/", "/metrics")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True)
class Security:
    """What the server accepts: extra Host names, cross-origin origins, the API key."""

    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)  # never in a log line or traceback
    hosts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = {host_name(name) for name in self.allowed_hosts}
        object.__setattr__(self, "hosts", frozenset(LOOPBACK_NAMES | names))

    def answers_host(self, name: str) -> bool:
        # An IP literal cannot be rebound: the page that sends it has that address
        # as its own origin, which the Origin check judges. Names must be listed.
        return "*" in self.hosts or name in self.hosts or _is_ip(name)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key (before binding anything)."""
    if not is_loopback(host) and not api_key:
        raise ZooError(
            f"refusing to serve on {host} without an API key: anyone who can reach it could use it; "
            "set ZOO_API_KEY or --api-key (or bind 127.0.0.1)"
        )


def bind_notice(host: str, security: Security) -> str | None:
    """The one line said on start when the server listens beyond this machine."""
    if is_loopback(host):
        return None
    names = ", ".join(sorted(security.hosts))
    return (
        f"zoo serve: listening beyond this machine on {host}; /v1/* and /metrics need the API key; "
        f"Host names answered: {names} and IP addresses (--allowed-host adds one)"
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def host_name(host: str) -> str:
    """``Host`` header value (or an origin's netloc) without its port, lower case, IPv6 unbracketed."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _refuse(send, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    # The completions API's error shape, so every client reads one kind of error.
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HostGuard:
    def __init__(self, app, security: Security):
        self.app, self.security = app, security

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            host = _header(scope, b"host")
            if host is None or not self.security.answers_host(host_name(host)):
                shown = "no Host header" if host is None else f"Host '{host[:100]}'"
                await _refuse(send, 400, f"{shown} is not a name this server answers (--allowed-host adds one)")
                return
        await self.app(scope, receive, send)


class OriginGuard:
    def __init__(self, app, security: Security):
        self.app = app
        self.allowed = frozenset(origin.rstrip("/").lower() for origin in security.cors_origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            origin = _header(scope, b"origin")
            if origin is not None and not self._accepts(origin, _header(scope, b"host") or ""):
                await _refuse(
                    send, 403, f"cross-origin request from '{origin[:100]}' refused (--cors-origin allows one)"
                )
                return
        await self.app(scope, receive, send)

    def _accepts(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        if "*" in self.allowed or origin in self.allowed:
            return True
        # Same origin: the page came from this server under the Host it asks for.
        # The scheme is not compared: behind a TLS proxy the page is https and the
        # server sees http; the Host check has already vouched for the name.
        _, _, netloc = origin.partition("://")
        return bool(netloc) and netloc == host.lower()


class JsonBodyGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in BODY_METHODS:
            declared = _header(scope, b"content-type")
            if declared is not None and declared.split(";", 1)[0].strip().lower() != "application/json":
                await _refuse(
                    send, 415, f"the body must be JSON (Content-Type: application/json), not '{declared[:100]}'"
                )
                return
        await self.app(scope, receive, send)


class ApiKeyGuard:
    def __init__(self, app, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(KEYED_PREFIXES):
            given = (_header(scope, b"authorization") or "").encode("latin-1")
            # compare_digest: the time taken says nothing about how much of the key matched.
            if not hmac.compare_digest(given, self.expected):
                await _refuse(
                    send,
                    401,
                    "a valid API key is required: Authorization: Bearer KEY",
                    ((b"www-authenticate", b"Bearer"),),
                )
                return
        await self.app(scope, receive, send)


def middleware(security: Security) -> list:
    """The checks, outermost first, as Starlette ``Middleware`` entries."""
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware

    stack = [Middleware(HostGuard, security=security), Middleware(OriginGuard, security=security)]
    if security.cors_origins:
        # Answers the preflight of the allowed origins and labels their answers;
        # inside OriginGuard, so it only ever sees origins that are allowed.
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(security.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    stack.append(Middleware(JsonBodyGuard))
    if security.api_key:
        stack.append(Middleware(ApiKeyGuard, api_key=security.api_key))
    return stack
