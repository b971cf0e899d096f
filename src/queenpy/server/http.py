"""uvicorn's httptools protocol, writing each response with one ``send`` system call instead of two.

uvicorn writes a response's status line and headers with one ``transport.write`` and its body with another.
uvloop sends each write at once, so a small response costs two system calls on the socket, and on loopback
each one runs the TCP stack and may wake the receiver. Measured under push load (benchmarks/RESULTS.md):
write system calls per request 2.95 -> 1.4 (the rest are asyncpg's), broker CPU per request at a paced
2,000 requests/s 319-341 -> 305-326 µs.

:class:`CoalescingHttpToolsProtocol` gives uvicorn's protocol a transport that keeps the writes made in one
turn of the event loop and hands them to the socket as one write when the response is complete (uvicorn's
``on_response_complete``), or at the end of the turn (``loop.call_soon``) for a response still streaming.
An ASGI app sends ``http.response.start`` and ``http.response.body`` in one turn when nothing in between
waits, as Starlette's ``Response`` does, so they leave together. Order is kept: every write goes through the
same buffer, and ``close`` flushes it first. Flow control is unchanged: the real transport still calls the
protocol's ``pause_writing``/``resume_writing``; the buffer holds data for at most one turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingHttpToolsProtocol", "CoalescingTransport"]


class CoalescingTransport:
    """An :class:`asyncio.Transport` proxy whose ``write`` calls of one event-loop turn reach the wrapped
    transport as one ``write``. Every other method is the wrapped transport's, after a flush where the
    order of bytes matters (``close``, ``write_eof``); ``abort`` drops what is pending, as the wrapped
    transport drops its own buffer."""

    __slots__ = ("_flush_handle", "_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._pending.append(data)
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self.flush)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Hand what is pending to the wrapped transport (one write), now; the flush scheduled for the end of
        the turn is cancelled."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():
            return  # the peer is gone: the wrapped transport would drop the bytes too
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(chunk) for chunk in self._pending)

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, resume_reading, set_protocol, ...:
        # the wrapped transport's
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` HTTP/1.1 protocol on a :class:`CoalescingTransport`. Pass the class as
    ``uvicorn.Config(http=...)``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        # the response's last bytes are buffered: send them now rather than at the end of the turn, after
        # whatever else is ready (the other requests of a fused batch answered in the same turn)
        self.transport.flush()  # type: ignore[attr-defined]
        super().on_response_complete()
