"""HTTP limits of a worker process, enforced in the HTTP/1.1 protocol before the app sees a request.

uvicorn (httptools) bounds the number of connections (``limit_concurrency``: a request arriving while a
worker holds ``HTTP_MAX_CONNECTIONS`` connections is answered 503) and idle keep-alive connections
(``HTTP_KEEP_ALIVE_TIMEOUT_S``), but not the size of a request's head or body, nor how long a client may
take to send them: one slow client could hold a connection forever (a connection that sends nothing is
never closed) and one large request could take a worker's memory. :class:`LimitedHttpToolsProtocol` adds,
per request:

* head (request line and headers) over ``HTTP_MAX_HEADER_BYTES`` -> ``431``;
* body over ``HTTP_MAX_BODY_BYTES`` -> ``413``, refused from ``Content-Length`` before any byte of the body
  is read, or as soon as a chunked body passes the limit;
* head not complete ``HTTP_HEADER_TIMEOUT_MS`` after the connection opened or the request's first byte,
  or body not complete ``HTTP_BODY_TIMEOUT_MS`` after its head -> ``408``.

Each refusal is ``{"error": ...}`` JSON, and the connection is closed (the rest of the request is never
read). The app never runs for a refused head or an oversized ``Content-Length``; for a chunked body or a
body timeout it may have started reading, and sees the client disconnect: nothing is stored either way.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import ClassVar

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queenpy.server.http import CoalescingHttpToolsProtocol
from queenpy.settings import Settings

__all__ = ["HttpLimits", "LimitedHttpToolsProtocol", "body_limit", "protocol_with_limits"]

_REASONS = {408: b"Request Timeout", 413: b"Content Too Large", 431: b"Request Header Fields Too Large"}
_HEAD_SLACK_BYTES = 64 * 1024  # raw bytes of a head that never completes, beyond the limit, before closing


@dataclass(frozen=True)
class HttpLimits:
    """The limits of :class:`LimitedHttpToolsProtocol` (see the module docstring)."""

    max_body_bytes: int = 10 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(
            settings.http_max_body_bytes,
            settings.http_max_header_bytes,
            settings.http_header_timeout_ms / 1000,
            settings.http_body_timeout_ms / 1000,
        )


class _Sweeper:
    """The deadlines of one event loop's connections, checked every ``_SWEEP_S`` by one timer. A timer per
    request (``loop.call_later`` + ``cancel``) cost 7 us each under uvloop, two per request: 14 us, some 4% of
    a push request's CPU; a deadline is an attribute set per request, and one sweep serves every
    connection. Timeouts fire up to ``_SWEEP_S`` late."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.protocols: set[LimitedHttpToolsProtocol] = set()
        self._handle: asyncio.TimerHandle | None = None

    def add(self, protocol: LimitedHttpToolsProtocol) -> None:
        self.protocols.add(protocol)
        if self._handle is None:
            self._handle = self.loop.call_later(_SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        now = self.loop.time()
        for protocol in [p for p in self.protocols if p.deadline is not None and p.deadline <= now]:
            protocol.expired()
        self._handle = self.loop.call_later(_SWEEP_S, self._sweep) if self.protocols else None


_SWEEP_S = 0.25
_SWEEPERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sweeper] = weakref.WeakKeyDictionary()


class LimitedHttpToolsProtocol(CoalescingHttpToolsProtocol):
    """uvicorn's httptools protocol (with coalesced writes) under :class:`HttpLimits`. uvicorn makes one
    instance per connection; :func:`protocol_with_limits` binds the limits."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False
        self._in_head = True
        self._head_bytes = 0  # request line and headers as parsed
        self._raw_head_bytes = 0  # bytes received while the head was incomplete
        self._body_bytes = 0
        self._head_too_large = False
        self.deadline: float | None = None
        self._waiting_for = ""
        sweeper = _SWEEPERS.get(self.loop)
        if sweeper is None:
            sweeper = _SWEEPERS[self.loop] = _Sweeper(self.loop)
        sweeper.add(self)
        self._sweeper = sweeper
        self._arm(self.limits.header_timeout_s, "Request headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._sweeper.protocols.discard(self)
        super().connection_lost(exc)

    def _arm(self, seconds: float, what: str) -> None:
        self.deadline = self.loop.time() + seconds
        self._waiting_for = what

    def _disarm(self) -> None:
        self.deadline = None

    def expired(self) -> None:
        """The deadline passed (called by the sweeper): 408."""
        seconds = (
            self.limits.header_timeout_s
            if self._waiting_for == "Request headers"
            else self.limits.body_timeout_s
        )
        self._refuse(408, f"{self._waiting_for} not received within {seconds:g} s")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with ``{"error": message}`` unless a response has started, then close."""
        if self._refused:
            return
        self._refused = True
        self._disarm()
        if self.cycle is None or not self.cycle.response_started:
            body = orjson.dumps({"error": message})
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"access-control-allow-origin: *\r\nconnection: close\r\n\r\n%s"
                % (status, _REASONS[status], len(body), body)
            )
        self.transport.close()  # an app reading this request sees the client disconnect

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            self._raw_head_bytes += len(data)
        super().data_received(data)
        if (
            not self._refused
            and self._in_head
            and self._raw_head_bytes > self.limits.max_header_bytes + _HEAD_SLACK_BYTES
        ):
            self._refuse(
                431, f"Request header fields too large: more than {self.limits.max_header_bytes} bytes"
            )

    # parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._body_bytes = 0
        self._head_too_large = False
        self._content_length: bytes | None = None
        self._arm(self.limits.header_timeout_s, "Request headers")

    # on_url and on_header run once per request and per header: uvicorn's bodies (append the URL; lower-case
    # the name, note ``Expect: 100-continue``, append) are inlined after the size check instead of called
    # through super(), and the Content-Length is kept as it passes
    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_header_bytes:
            self._head_too_large = True
            return
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > self.limits.max_header_bytes:
            self._head_too_large = True
            return
        name = name.lower()
        if name == b"content-length":
            self._content_length = value
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._raw_head_bytes = 0
        self._disarm()
        if self._refused:
            return
        if self._head_too_large:
            self._refuse(
                431, f"Request header fields too large: more than {self.limits.max_header_bytes} bytes"
            )
            return
        length = self._content_length
        if length is not None and length.strip().isdigit() and int(length) > self.limits.max_body_bytes:
            self._refuse(
                413,
                f"Request body too large: {int(length)} bytes, the limit is "
                f"{self.limits.max_body_bytes} bytes",
            )
            return
        super().on_headers_complete()
        if not self._refused:
            self._arm(self.limits.body_timeout_s, "Request body")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            self._refuse(413, f"Request body too large: more than {self.limits.max_body_bytes} bytes")
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        if self._refused:
            return
        super().on_message_complete()


def protocol_with_limits(limits: HttpLimits) -> type[LimitedHttpToolsProtocol]:
    """A :class:`LimitedHttpToolsProtocol` subclass bound to ``limits``, for ``uvicorn.Config(http=...)``."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


def body_limit(app: ASGIApp, max_body_bytes: int) -> ASGIApp:
    """``app`` behind the body limit of :class:`HttpLimits`, for a server that has none of its own (granian):
    a ``Content-Length`` over ``max_body_bytes`` is answered ``413`` before the app runs; a chunked body
    that passes the limit makes the app's next ``receive`` a client disconnect (nothing is stored), and the
    answer ``413``. The head limits and the head timeout are the server's (granian's ``max_buffer_size``
    and ``header_read_timeout``)."""

    async def refuse(send: Send, message: str) -> None:
        body = orjson.dumps({"error": message})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"access-control-allow-origin", b"*"),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        length = next((value for name, value in scope["headers"] if name == b"content-length"), None)
        if length is not None:
            if length.strip().isdigit() and int(length) > max_body_bytes:
                await refuse(
                    send, f"Request body too large: {int(length)} bytes, the limit is {max_body_bytes} bytes"
                )
                return
            await app(scope, receive, send)
            return
        received = 0
        refused = False

        async def counted() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_body_bytes:
                    refused = True
                    return {"type": "http.disconnect"}
            return message

        async def answer(message: Message) -> None:
            if not refused:
                await send(message)

        await app(scope, counted, answer)
        if refused:
            await refuse(send, f"Request body too large: more than {max_body_bytes} bytes")

    return limited
