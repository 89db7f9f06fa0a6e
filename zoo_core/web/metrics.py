"""`GET /metrics`: what the server is doing, in Prometheus' text format.

One ``CollectorRegistry`` per app, not prometheus_client's global one: a process
(a test, a benchmark) may build several apps, and each must count only its own.
The generation code reports through the small methods below; the request counts
and latencies come from ``MetricsMiddleware`` around every route.
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Latency buckets in seconds, from a cached page to a long generation.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "zoo_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=r
        )
        self.request_seconds = Histogram(
            "zoo_http_request_seconds",
            "Time to answer a request, to its last byte",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("zoo_generated_tokens", "Tokens generated", ["model"], registry=r)
        self.first_token_seconds = Histogram(
            "zoo_time_to_first_token_seconds",
            "From a generation's start to its first piece of text",
            ["model"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("zoo_generations_in_flight", "Requests being answered", registry=r)
        self.queue_depth = Gauge(
            "zoo_generation_queue_depth", "Rows waiting for a place in a running batch", registry=r
        )
        self.batch_size = Gauge("zoo_batch_size", "Rows decoding together now", registry=r)

    # What the generation code calls.

    def generation_started(self) -> None:
        self.in_flight.inc()

    def generation_finished(self, model: str, tokens: int) -> None:
        self.in_flight.dec()
        self.tokens.labels(model).inc(tokens)

    def first_token(self, model: str, seconds: float) -> None:
        self.first_token_seconds.labels(model).observe(seconds)

    def observe_queue(self, waiting: int) -> None:
        self.queue_depth.set(waiting)

    def observe_batch(self, size: int) -> None:
        self.batch_size.set(size)

    def exposition(self) -> tuple[bytes, str]:
        """The page's body and content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Counts every request by route (its template, so the label set stays small) and status."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def recording_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send=recording_send)
        finally:
            route = scope.get("route")
            # A path nobody routes is not a label: scanners would grow the series without end.
            label = (getattr(route, "path", None) or "/") if route is not None else "unmatched"
            self.metrics.requests.labels(label, scope["method"], str(status[0])).inc()
            self.metrics.request_seconds.labels(label).observe(time.perf_counter() - started)
