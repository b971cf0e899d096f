"""HTTP limits of the broker (src/queenpy/server/limits.py, docs/reliability.md "Limits"): body size, items
per push, head size, slow clients, connections per worker. Each refusal is a clear JSON error (or uvicorn's
503 for connections), and nothing of a refused request is stored.

One broker with small limits serves most tests; the 10 MB default is checked on the session broker.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from conftest import BrokerProcess
from helpers import unique

LIMITS = {
    "HTTP_MAX_BODY_BYTES": "100000",
    "PUSH_MAX_ITEMS": "50",
    "HTTP_MAX_HEADER_BYTES": "8192",
    "HTTP_HEADER_TIMEOUT_MS": "1000",
    "HTTP_BODY_TIMEOUT_MS": "1000",
    "HTTP_MAX_CONNECTIONS": "8",
}


@pytest.fixture
def limited(db_url: str, start_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return start_broker(db_url, workers=1, extra_env=LIMITS)


def stored(broker: Any, queue: str) -> int:
    with psycopg.connect(broker.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM queen.queues WHERE name = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def push_body(queue: str, payload_bytes: int, items: int = 1) -> bytes:
    return orjson.dumps({"items": [{"queue": queue, "payload": "x" * payload_bytes} for _ in range(items)]})


@contextmanager
def raw_connection(broker: BrokerProcess) -> Iterator[socket.socket]:
    host, port = broker.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        yield sock
    finally:
        sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's 30 s timeout fails the
    test if it never does)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass  # closed with bytes of ours unread: the kernel resets instead of a FIN
    return b"".join(chunks)


def status_and_json(response: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


def test_the_default_body_limit_is_10_mb(broker: Any) -> None:
    queue = unique("big")
    response = httpx.post(
        f"{broker.url}/api/v1/push",
        content=push_body(queue, 10 * 1024 * 1024),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413
    assert response.json() == {
        "error": f"Request body too large: {len(push_body(queue, 10 * 1024 * 1024))} "
        f"bytes, the limit is 10485760 bytes"
    }
    assert stored(broker, queue) == 0
    fits = httpx.post(f"{broker.url}/api/v1/push", content=push_body(queue, 9 * 1024 * 1024), timeout=60)
    assert fits.status_code == 200 and fits.json()[0]["status"] == "queued"


def test_a_body_over_the_limit_is_413_with_content_length_or_chunked(limited: BrokerProcess) -> None:
    queue = unique("big")
    response = httpx.post(f"{limited.url}/api/v1/push", content=push_body(queue, 150_000))
    assert (response.status_code, response.json()["error"]) == (
        413,
        f"Request body too large: {len(push_body(queue, 150_000))} bytes, the limit is 100000 bytes",
    )

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted as the body arrives
        body = push_body(queue, 150_000)
        for start in range(0, len(body), 16384):
            yield body[start : start + 16384]

    try:
        chunked = httpx.post(f"{limited.url}/api/v1/push", content=chunks())
        assert (chunked.status_code, chunked.json()["error"]) == (
            413,
            "Request body too large: more than 100000 bytes",
        )
    except httpx.TransportError:
        pass  # closed while the client was still sending: refused as well
    assert stored(limited, queue) == 0
    assert (
        httpx.post(f"{limited.url}/api/v1/push", content=push_body(queue, 90_000)).json()[0]["status"]
        == "queued"
    )


def test_items_per_push_are_limited(limited: BrokerProcess) -> None:
    queue = unique("many")
    response = httpx.post(f"{limited.url}/api/v1/push", content=push_body(queue, 1, items=51))
    assert (response.status_code, response.json()) == (
        400,
        {"error": "items: at most 50 items per push, got 51"},
    )
    assert stored(limited, queue) == 0
    assert len(httpx.post(f"{limited.url}/api/v1/push", content=push_body(queue, 1, items=50)).json()) == 50


def test_a_head_over_the_limit_is_431(limited: BrokerProcess) -> None:
    queue = unique("head")
    response = httpx.post(
        f"{limited.url}/api/v1/push", content=push_body(queue, 1), headers={"x-padding": "y" * 9000}
    )
    assert (response.status_code, response.json()) == (
        431,
        {"error": "Request header fields too large: more than 8192 bytes"},
    )
    assert stored(limited, queue) == 0
    with raw_connection(limited) as sock:  # a header that never ends is cut off too
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Endless: " + b"z" * 200_000)
        except (BrokenPipeError, ConnectionResetError):
            pass  # cut off while sending
        answer = read_until_closed(sock)  # returns: the server closed the connection
    assert answer == b"" or status_and_json(answer)[0] == 431


def test_a_client_that_sends_nothing_or_too_slowly_is_timed_out(limited: BrokerProcess) -> None:
    with raw_connection(limited) as sock:  # opens a connection and says nothing
        status, body = status_and_json(read_until_closed(sock))
    assert (status, body) == (408, {"error": "Request headers not received within 1 s"})

    with raw_connection(limited) as sock:  # half a head
        sock.sendall(b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\n")
        status, body = status_and_json(read_until_closed(sock))
    assert (status, body) == (408, {"error": "Request headers not received within 1 s"})

    queue = unique("slow")
    body_bytes = push_body(queue, 100)
    with raw_connection(limited) as sock:  # the head, then part of the body
        sock.sendall(
            b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body_bytes), body_bytes[:20])
        )
        status, body = status_and_json(read_until_closed(sock))
    assert (status, body) == (408, {"error": "Request body not received within 1 s"})
    assert stored(limited, queue) == 0


def test_a_long_poll_is_not_a_slow_client(limited: BrokerProcess) -> None:
    """The timeouts are for receiving a request; a pop parked longer than them still answers."""
    started = time.monotonic()
    response = httpx.get(
        f"{limited.url}/api/v1/pop/queue/{unique('idle')}",
        params={"wait": "true", "timeout": "2500"},
        timeout=30,
    )
    assert response.status_code == 200 and response.json()["messages"] == []
    assert time.monotonic() - started >= 2.0  # it did wait past the 1 s timeouts


def test_connections_beyond_the_limit_are_answered_503(limited: BrokerProcess) -> None:
    host, port = limited.url.removeprefix("http://").split(":")
    held = [socket.create_connection((host, int(port)), timeout=30) for _ in range(8)]
    try:
        with httpx.Client(base_url=limited.url) as client:
            refused = client.get("/health")
        assert refused.status_code == 503
    finally:
        for sock in held:
            sock.close()

    def answered() -> bool:
        return httpx.get(f"{limited.url}/health").status_code == 200

    deadline = time.monotonic() + 30
    while not answered():
        assert time.monotonic() < deadline, "the broker did not serve again after the connections closed"
        time.sleep(0.1)
