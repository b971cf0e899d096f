"""Disk failover for pushes (DESIGN.md section 7): PostgreSQL goes away, pushes are answered `buffered`
from an fsync'd file, the broker is killed with SIGKILL, and after PostgreSQL and a new broker come back
every buffered message is stored exactly once."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from conftest import BrokerProcess
from helpers import unique, wait_until


@pytest.fixture
def own_postgres(tmp_path: Path) -> Any:
    """A PostgreSQL of this test alone (the session's server must stay up for the other tests)."""
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    import pgserver

    from queenpy.server.process import migrate

    data = tmp_path / "pg"
    server = pgserver.get_server(data, cleanup_mode="stop")
    migrate(server.get_uri())
    yield data, server
    server.cleanup()


def test_buffered_pushes_survive_a_database_outage_and_a_kill(
    own_postgres: Any, tmp_path: Path, start_broker: Callable[..., BrokerProcess]
) -> None:
    import pgserver

    data, server = own_postgres
    url = server.get_uri()
    buffers = tmp_path / "buffers"
    env = {"FILE_BUFFER_DIR": str(buffers)}
    broker = start_broker(url, workers=1, extra_env=env)
    queue = unique("failover")

    def push(n: int, **extra: Any) -> dict[str, Any]:
        return httpx.post(
            f"{broker.url}/api/v1/push",
            json={"items": [{"queue": queue, "partition": f"p{n % 2}", "payload": {"n": n}, **extra}]},
            timeout=30,
        ).json()[0]

    assert push(0, transactionId="tx-0")["status"] == "queued"
    server.cleanup()  # PostgreSQL stops
    statuses = [push(n, transactionId=f"tx-{n}")["status"] for n in range(1, 6)]
    statuses += [push(n)["status"] for n in range(6, 11)]  # without client transaction ids
    assert statuses == ["buffered"] * 10
    assert httpx.get(f"{broker.url}/api/v1/status/buffers").json()["dbHealthy"] is False
    broker.kill()  # SIGKILL: only what is on disk counts
    assert any(buffers.iterdir())

    server = pgserver.get_server(data, cleanup_mode="stop")  # PostgreSQL is back
    own_postgres_restarted = server
    second = start_broker(own_postgres_restarted.get_uri(), workers=1, extra_env=env)

    def stored() -> list[int]:
        with psycopg.connect(own_postgres_restarted.get_uri()) as conn:
            rows = conn.execute(
                "SELECT (m.payload->>'n')::int FROM queen.messages m JOIN queen.partitions p "
                "ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = %s ORDER BY 1",
                (queue,),
            ).fetchall()
        return [r[0] for r in rows]

    wait_until(lambda: stored() == list(range(11)), timeout_s=30, message="buffered pushes replayed")
    # the drained file is deleted after the replay's commit, so it may outlive the rows by a moment
    wait_until(
        lambda: not [p for p in buffers.iterdir() if p.name.startswith("failover_")],
        timeout_s=10,
        message="drained buffer files deleted",
    )
    assert stored() == list(range(11))  # once, not again
    assert httpx.get(f"{second.url}/api/v1/status/buffers").json()["dbHealthy"] is True
    server.cleanup()
