"""The hot routes' error mapping (``server/app.py`` ``guarded``) for failures of the database layer that are
not SQL errors: each is a retryable 503 with ``Retry-After``, never a 500, and a cancellation of the request
itself still propagates. The handlers raise what asyncpg or a torn-down connection raise; no database is
involved (tests/acceptance/test_primary_failover.py drives the same answers through a real promotion)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import asyncpg
import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from queenpy.server.app import guarded
from queenpy.server.auth import Level


def _worker() -> Any:
    """What ``guarded`` reads of a worker: its latency histogram and its counters."""
    return SimpleNamespace(
        instruments=SimpleNamespace(
            request_latency=lambda method, path: SimpleNamespace(observe=lambda s: None)
        ),
        metrics=SimpleNamespace(errors=0, requests=0),
    )


def _request() -> Request:
    return Request(
        {"type": "http", "method": "POST", "path": "/api/v1/ack", "headers": [], "query_string": b""}
    )


def _wrapped(exc: BaseException) -> Any:
    async def handler(request: Request) -> Response:
        raise exc

    return guarded(handler, Level.PUBLIC, None, _worker(), "POST", "/api/v1/ack")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [
        asyncio.CancelledError(),  # a database call cancelled under the request
        asyncpg.exceptions.ProtocolError("unexpected message"),  # asyncpg's InternalClientError family
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.exceptions.TargetServerAttributeNotMatched("None of the hosts match"),
    ],
    ids=lambda exc: exc.__class__.__name__,
)
async def test_a_broken_database_call_is_a_retryable_503(exc: BaseException) -> None:
    response = await _wrapped(exc)(_request())
    assert response.status_code == 503
    assert dict(response.headers)["retry-after"] == "1"
    assert orjson.loads(bytes(response.body))["success"] is False


async def test_a_cancelled_request_is_not_answered() -> None:
    started = asyncio.Event()

    async def handler(request: Request) -> Response:
        started.set()
        await asyncio.sleep(60)
        return Response(b"")

    wrapped = guarded(handler, Level.PUBLIC, None, _worker(), "POST", "/api/v1/ack")  # type: ignore[arg-type]
    task = asyncio.create_task(wrapped(_request()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
