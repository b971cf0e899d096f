"""Helpers shared by the test tiers (importable as ``helpers`` from any test module)."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any, Callable

import orjson
import psycopg

__all__ = ["free_port", "wait_until", "unique", "call_procedure"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value or the deadline passes (then fail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def unique(prefix: str = "q") -> str:
    """A unique queue/group name for tests sharing one broker."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def call_procedure(conn: psycopg.Connection[Any], procedure: str, payload: Any) -> Any:
    """``SELECT queen.<procedure>(payload::jsonb)`` with items numbered by ``index`` when a list."""
    if isinstance(payload, list):
        payload = [{**item, "index": i} for i, item in enumerate(payload)]
    row = conn.execute(f"SELECT queen.{procedure}(%s::jsonb)::text", (orjson.dumps(payload).decode(),)).fetchone()
    assert row is not None
    return orjson.loads(row[0])
