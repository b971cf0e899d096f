"""Helpers shared by the test tiers (importable as ``helpers`` from any test module)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import psycopg

from queenpy.harness import free_port

__all__ = [
    "call_procedure",
    "closed_port_url",
    "free_port",
    "official_client",
    "run_queenpy",
    "unique",
    "wait_until",
]


def closed_port_url() -> str:
    """``http://127.0.0.1:<port>`` where nothing listens (a broker that is down)."""
    return f"http://127.0.0.1:{free_port()}"


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    message: str = "condition",
) -> Any:
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
    row = conn.execute(
        f"SELECT queen.{procedure}(%s::jsonb)::text", (orjson.dumps(payload).decode(),)
    ).fetchone()
    assert row is not None
    return orjson.loads(row[0])


def run_queenpy(
    broker: Any | None,
    *args: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout_s: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m queenpy ARGS`` as a user would, with ``QUEEN_URL`` pointing at ``broker`` (no other
    ``QUEEN_*`` variable of the test process leaks in). ``check``: fail the test on a non-zero exit."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("QUEEN_")}
    environment["COLUMNS"] = "200"
    if broker is not None:
        environment["QUEEN_URL"] = broker.url
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "queenpy", *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout_s,
    )
    if check:
        assert done.returncode == 0, (
            f"queenpy {' '.join(args)}: exit {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
        )
    return done


@contextlib.asynccontextmanager
async def official_client(url: str) -> AsyncIterator[Any]:
    """The official ``queen-mq`` client on ``url``. ``Queen()`` installs SIGINT/SIGTERM handlers and
    ``close()`` resets them to the default, so the test process's own handlers are put back afterwards."""
    from queen import Queen

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    client = Queen(url)
    try:
        yield client
    finally:
        await client.close()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
