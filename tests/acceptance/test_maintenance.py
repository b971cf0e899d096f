"""Maintenance mode (API.md section 12) on real ``queenpy serve`` processes.

Push maintenance: every push is answered ``buffered`` (201) and lands in the failover buffer of whichever
worker took it; nothing reaches the queue until the mode is turned off, then everything is replayed, none
lost and none stored twice. Pop maintenance: pops answer 204. The switch is PostgreSQL's and reaches every
worker and every broker instance on the same database.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from helpers import unique, wait_until


def _stored(http: httpx.Client, queue: str) -> list[str]:
    page = http.get("/api/v1/messages", params={"queue": queue, "limit": 10_000}).json()
    return [m["transactionId"] for m in page["messages"]]


def test_push_maintenance_buffers_in_every_worker_and_replays_exactly_once(
    db_url: str, start_broker: Callable[..., Any], tmp_path: Path
) -> None:
    broker = start_broker(db_url, workers=2)
    buffer_dir = Path(broker.env["FILE_BUFFER_DIR"])
    queue = unique("maint")
    with httpx.Client(base_url=broker.url, timeout=30) as admin:
        assert (
            admin.post("/api/v1/system/maintenance", json={"enabled": True}).json()["maintenanceMode"] is True
        )
        assert admin.get("/api/v1/system/maintenance").json()["maintenanceMode"] is True

        def push(batch: int) -> list[dict[str, Any]]:
            # a fresh connection per request: the kernel spreads them over both workers' sockets
            with httpx.Client(base_url=broker.url, timeout=30) as client:
                items = [
                    {
                        "queue": queue,
                        "partition": f"p{batch % 3}",
                        "payload": {"batch": batch, "n": n},
                        "transactionId": f"b{batch}-{n}",
                    }
                    for n in range(5)
                ]
                response = client.post("/api/v1/push", json={"items": items})
                assert response.status_code == 201, response.text
                return list(response.json())

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = [r for batch in pool.map(push, range(60)) for r in batch]
        assert len(results) == 300 and {r["status"] for r in results} == {"buffered"}
        pids = {
            int(m[1]) for p in buffer_dir.iterdir() if (m := re.match(r"failover_\w+\.(\d+)\.buf", p.name))
        }
        assert len(pids) == 2, f"both workers buffered: files {sorted(p.name for p in buffer_dir.iterdir())}"
        state = admin.get("/api/v1/system/maintenance").json()
        assert state["bufferedMessages"] == 300 and state["bufferStats"]["paused"] is True
        assert _stored(admin, queue) == []  # nothing replayed while the mode is on

        assert (
            admin.post("/api/v1/system/maintenance", json={"enabled": False}).json()["maintenanceMode"]
            is False
        )
        stored = wait_until(
            lambda: (s := _stored(admin, queue)) and len(s) >= 300 and s,
            timeout_s=60,
            message="all 300 buffered pushes replayed",
        )
        wait_until(
            lambda: admin.get("/api/v1/system/maintenance").json()["bufferedMessages"] == 0,
            message="buffer drained",
        )
        stored = _stored(admin, queue)
        assert len(stored) == 300 and set(stored) == {f"b{b}-{n}" for b in range(60) for n in range(5)}
        after = admin.post(
            "/api/v1/push", json={"items": [{"queue": queue, "payload": 1, "transactionId": "x"}]}
        )
        assert after.json()[0]["status"] == "queued"


def test_pop_maintenance_answers_204_and_reaches_another_instance(
    db_url: str, start_broker: Callable[..., Any]
) -> None:
    first = start_broker(db_url, workers=2)
    second = start_broker(db_url, workers=1)
    queue = unique("popmaint")
    with (
        httpx.Client(base_url=first.url, timeout=30) as one,
        httpx.Client(base_url=second.url, timeout=30) as two,
    ):
        one.post(
            "/api/v1/push", json={"items": [{"queue": queue, "payload": {"n": 1}, "transactionId": "a"}]}
        )
        assert one.post("/api/v1/system/maintenance/pop", json={"enabled": True}).json() == {
            "popMaintenanceMode": True,
            "message": "Pop maintenance mode enabled: pops answer 204",
        }
        # the other instance hears it through NOTIFY (its own 5 s refresh would be later than this wait);
        # probed on an empty queue, so a pop that runs before the switch arrives leases nothing
        empty = unique("empty")
        wait_until(
            lambda: two.get(f"/api/v1/pop/queue/{empty}").status_code == 204,
            timeout_s=4,
            message="pop maintenance on the second instance",
        )
        for _ in range(6):  # every worker of the first instance
            assert one.get(f"/api/v1/pop/queue/{queue}").status_code == 204
        assert two.get("/api/v1/system/maintenance/pop").json()["popMaintenanceMode"] is True
        assert (
            two.post("/api/v1/system/maintenance/pop", json={"enabled": False}).json()["popMaintenanceMode"]
            is False
        )
        popped = wait_until(
            lambda: (
                (r := one.get(f"/api/v1/pop/queue/{queue}")).status_code == 200 and r.json().get("messages")
            ),
            timeout_s=4,
            message="pops served again",
        )
        assert [m["transactionId"] for m in popped] == ["a"]
        health = two.get("/health").json()
        assert health["shared_state"]["pop_maintenance_mode"] is False


def test_maintenance_needs_a_boolean(broker: Any) -> None:
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        for body in ({}, {"enabled": "true"}, {"enabled": 1}, []):
            response = http.post("/api/v1/system/maintenance", json=body)
            assert response.status_code == 400
        assert http.post("/api/v1/system/maintenance", json={"enabled": "yes"}).json() == {
            "error": "enabled (boolean) is required"
        }
        assert http.post("/api/v1/system/maintenance/pop", json={"enabled": None}).status_code == 400
