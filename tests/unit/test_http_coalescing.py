"""queenpy.server.http: one socket write per response, and HTTP/1.1 unchanged on a real uvicorn server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from queenpy.harness import bound_socket
from queenpy.server.http import CoalescingHttpToolsProtocol, CoalescingTransport


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what it is asked to do, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7


async def test_writes_of_one_turn_reach_the_socket_as_one_write() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"")
    transport.write(b"{}")
    assert inner.calls == []
    assert transport.get_write_buffer_size() == 7 + 38 + 2
    await asyncio.sleep(0)
    assert inner.calls == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert inner.calls[1:] == [("write", b"next")]


async def test_a_flush_sends_now_and_cancels_the_one_at_the_end_of_the_turn() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    transport.flush()  # what the protocol does when uvicorn reports the response complete
    assert inner.calls == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]
    await asyncio.sleep(0)
    assert len(inner.calls) == 1
    transport.write(b"next")
    await asyncio.sleep(0)
    assert inner.calls[1:] == [("write", b"next")]


async def test_close_flushes_first_and_abort_drops() -> None:
    loop = asyncio.get_running_loop()
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, loop)
    transport.write(b"last bytes")
    transport.close()
    assert inner.calls == [("write", b"last bytes"), ("close", b"")]
    await asyncio.sleep(0)  # the scheduled flush finds nothing left
    assert len(inner.calls) == 2

    inner = RecordingTransport()
    transport = CoalescingTransport(inner, loop)
    transport.write(b"never sent")
    transport.abort()
    await asyncio.sleep(0)
    assert inner.calls == [("abort", b"")]


async def test_nothing_is_written_to_a_transport_that_is_closing() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"to a peer that left")
    inner.closing = True
    await asyncio.sleep(0)
    assert inner.calls == []
    assert transport.is_closing()  # other methods are the wrapped transport's


BIG = bytes(range(256)) * 40_000  # 10 MB: well past the transport's high-water mark (flow control)


async def small(_request: Request) -> Response:
    return Response(b'{"ok":true}', media_type="application/json")


async def big(_request: Request) -> Response:
    return Response(BIG, media_type="application/octet-stream")


async def echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


async def stream(_request: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(5):
            await asyncio.sleep(0.01)
            yield f"chunk {i};".encode()

    return StreamingResponse(chunks(), media_type="text/plain")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = Starlette(
        routes=[
            Route("/small", small),
            Route("/big", big),
            Route("/echo", echo, methods=["POST"]),
            Route("/stream", stream),
        ]
    )
    sock = bound_socket()  # handed to uvicorn: the port is never free for another process
    config = uvicorn.Config(app, http=CoalescingHttpToolsProtocol, lifespan="off", log_level="warning")
    instance = uvicorn.Server(config)
    task = asyncio.create_task(instance.serve(sockets=[sock]))
    while not instance.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        instance.should_exit = True
        await task


async def test_responses_over_a_real_server(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        for _ in range(20):  # one keep-alive connection
            response = await client.get("/small")
            assert (response.status_code, response.content) == (200, b'{"ok":true}')
            assert response.headers["content-length"] == "11"
        response = await client.get("/big")
        assert response.content == BIG
        response = await client.post("/echo", content=BIG)
        assert response.content == BIG
        response = await client.get("/stream")
        assert response.text == "".join(f"chunk {i};" for i in range(5))
        response = await client.get("/small", headers={"Connection": "close"})
        assert (response.status_code, response.headers["connection"]) == (200, "close")
        responses = await asyncio.gather(*(client.get("/small") for _ in range(50)))
        assert {r.content for r in responses} == {b'{"ok":true}'}


async def test_pipelined_requests_are_answered_in_order(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    bodies = [f"request {i}".encode() for i in range(10)]
    writer.write(
        b"".join(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies
        )
    )
    await writer.drain()
    for body in bodies:
        status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 200")
        length = None
        while (line := await reader.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        assert await reader.readexactly(length or 0) == body
    writer.close()
    await writer.wait_closed()
