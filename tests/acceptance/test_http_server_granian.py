"""``QUEENPY_HTTP_SERVER=granian`` (docs/configuration.md): the same broker under granian's embedded server.
The hot path and Starlette's routes answer as under uvicorn, the body limit is the app's (413, nothing
stored), and the workers stop on SIGTERM. uvicorn's other limits are not granian's (the configuration page
says which); tests/acceptance/test_limits.py checks them under the default server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import httpx
import orjson
import psycopg
import pytest

from conftest import BrokerProcess
from helpers import unique


def test_the_broker_under_granian_serves_the_api_and_its_body_limit(
    db_url: str, start_broker: Callable[..., BrokerProcess]
) -> None:
    pytest.importorskip("granian", reason="granian is not installed (pip install 'queenpy[granian]')")
    broker = start_broker(
        db_url, workers=2, extra_env={"QUEENPY_HTTP_SERVER": "granian", "HTTP_MAX_BODY_BYTES": "100000"}
    )
    queue = unique("granian")
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        items = [{"queue": queue, "partition": "p", "payload": {"n": n}} for n in range(3)]
        pushed = http.post("/api/v1/push", json={"items": items})
        assert pushed.status_code == 200 and {r["status"] for r in pushed.json()} == {"queued"}
        assert pushed.headers["access-control-allow-origin"] == "*"
        popped = http.get(f"/api/v1/pop/queue/{queue}/partition/p", params={"batch": 3})
        messages = popped.json()["messages"]
        assert [m["data"] for m in messages] == [{"n": 0}, {"n": 1}, {"n": 2}]
        acks = [
            {
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
                "status": "completed",
            }
            for m in messages
        ]
        acked = http.post("/api/v1/ack/batch", json={"acknowledgments": acks})
        assert [r["success"] for r in acked.json()] == [True, True, True]
        bad = http.post("/api/v1/push", json={"items": [{"queue": queue, "partition": 5}]})
        assert bad.status_code == 400 and bad.json() == {"error": "Partition must be a string"}
        assert http.get("/api/v1/nowhere").status_code == 404
        assert http.options("/api/v1/push").status_code == 204
        big = orjson.dumps({"items": [{"queue": unique("granian-big"), "payload": "x" * 200_000}]})
        refused = http.post("/api/v1/push", content=big, headers={"content-type": "application/json"})
        assert refused.status_code == 413 and "the limit is 100000 bytes" in refused.json()["error"]
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM queen.queues WHERE name LIKE 'granian-big%'").fetchone()
    assert row is not None and row[0] == 0
    broker.stop()
    assert broker.process is not None and broker.process.returncode == 0  # a clean stop of every worker


def test_an_unknown_http_server_stops_the_broker_at_start() -> None:
    env = {
        **os.environ,
        "QUEENPY_HTTP_SERVER": "hypercorn",
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x",
    }
    done = subprocess.run(
        [sys.executable, "-m", "queenpy", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "QUEENPY_HTTP_SERVER must be one of uvicorn, granian" in done.stdout + done.stderr
