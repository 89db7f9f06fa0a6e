"""The server's request log: one line per request, at INFO on the ``zoo.access`` logger.

A line is ``METHOD PATH STATUS DURATION``, the duration to the response's last
byte (a streamed completion's line comes when its stream ends), e.g.
``2026-12-02 03:10:00 GET /v1/models 200 1.4 ms``. uvicorn's own access log
is left off: it does not say how long a request took. `zoo serve --log-level`
sets the level (see `configure`); ``warning`` and above leave the requests out.
"""

from __future__ import annotations

import logging
import sys
import time

from ..errors import printable

LOGGER = "zoo.access"


def configure(level: str) -> str:
    """Send the zoo's server log to stderr at ``level``; returns the level for
    uvicorn's own loggers, which say at INFO what the banner already said (the
    address, the start), so only ``debug`` lets those through."""
    log = logging.getLogger(LOGGER)
    log.setLevel(level.upper())
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        log.addHandler(handler)
    log.propagate = False
    return level if level != "info" else "warning"


class AccessLog:
    """ASGI middleware: logs each HTTP request's method, path, status and duration."""

    def __init__(self, app):
        self.app = app
        self.log = logging.getLogger(LOGGER)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]  # 500 unless a response starts

        async def noting_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:
            milliseconds = (time.perf_counter() - started) * 1000
            # The path only (a query string may carry what a log should not), one line whatever it holds.
            self.log.info("%s %s %d %.1f ms", scope["method"], printable(scope["path"]), status[0], milliseconds)
