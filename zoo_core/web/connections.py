"""How long a client may take and how many may be connected at once.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but waits
forever for a request whose headers or body trickle in, and its
``limit_concurrency`` answers 503 to *every* request once the limit is reached
while the sockets stay open. So a client holding many sockets open and sending a
header line now and then (slowloris) would keep every descriptor, and ``/health``
with them. This HTTP/1.1 protocol, uvicorn's h11 one with two additions, bounds
both:

- a request's headers must arrive within ``header_timeout`` of its first byte (of
  the connection, for a new one), and its body within ``body_timeout`` of its
  headers; otherwise the connection is closed;
- a connection beyond ``max_connections`` is closed as soon as it is accepted, so
  the descriptors in use stay below the process's limit.

``OneAcceptPerTurnLoop`` is the event loop it runs on, for when descriptors run out
anyway.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Descriptors the process needs besides its connections: the listening socket, the
# event loop's own, standard streams, model and archive files being read.
RESERVED_DESCRIPTORS = 64


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: int = 5
    max_connections: int = 1000


class GuardedH11Protocol(H11Protocol):
    limits = ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        if len(self.connections) > self.limits.max_connections:
            # Closed before any byte is read: the descriptor is free again on the
            # loop's next turn, and the client sees the connection end.
            transport.close()
            return
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._set_deadline(None)
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Start the clock for the part of the request h11 is waiting for (or stop it)."""
        # Called on connect and on data only: between two requests on a kept-alive
        # connection h11 is IDLE too, but timeout_keep_alive watches that until the
        # next request's first byte starts this clock.
        self._set_deadline({h11.IDLE: "header", h11.SEND_BODY: "body"}.get(self.conn.their_state))

    def _set_deadline(self, phase: str | None) -> None:
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            seconds = self.limits.header_timeout if phase == "header" else self.limits.body_timeout
            self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


class OneAcceptPerTurnLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, accepting one connection per turn of the loop.

    asyncio accepts up to ``backlog`` connections each time the listening socket is
    ready, and when ``accept()`` fails for want of descriptors (EMFILE) it logs,
    schedules a retry a second later and then *goes on* with the next of those
    ``backlog`` attempts (CPython 3.11 to 3.13): thousands of tracebacks and retry
    timers a second, and an event loop too busy to answer anyone. With one attempt
    per turn, running out costs one failed accept and one retry a second; a burst
    of connections is still accepted, one per turn, as long as the socket is ready.
    """

    def _accept_connection(self, protocol_factory, sock, sslcontext=None, server=None, backlog=100, *rest):
        super()._accept_connection(protocol_factory, sock, sslcontext, server, 1, *rest)  # type: ignore[misc]


def protocol_for(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn builds per connection, carrying these limits."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def descriptor_shortage(limits: ConnectionLimits) -> int | None:
    """Raise the soft descriptor limit as far as the connection cap needs and the
    hard limit allows; the limit when it is still too low for the cap, else None."""
    needed = limits.max_connections + RESERVED_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    return None if raised >= needed else raised
