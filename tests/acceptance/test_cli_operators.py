"""``queenpy messages ls/show/rm/retry`` and ``queenpy maintenance`` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from helpers import run_queenpy, unique


def test_messages_ls_show_rm_retry(broker: Any) -> None:
    queue = unique("cli-msg")
    items = [
        {"queue": queue, "partition": "p", "payload": {"n": n}, "transactionId": f"t{n}"} for n in range(3)
    ]
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        partition_id = http.post("/api/v1/push", json={"items": items}).json()[0]["partition_id"]
        popped = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 1}).json()["messages"][0]
        http.post(
            "/api/v1/ack",
            json={
                "transactionId": popped["transactionId"],
                "partitionId": partition_id,
                "leaseId": popped["leaseId"],
                "status": "dlq",
                "error": "bad",
            },
        )
    listed = json.loads(run_queenpy(broker, "messages", "ls", "-q", queue, "--json").stdout)
    assert listed["total"] == 3
    assert [(m["transactionId"], m["status"]) for m in listed["messages"]] == [
        ("t2", "pending"),
        ("t1", "pending"),
        ("t0", "dead_letter"),
    ]
    table = run_queenpy(broker, "messages", "ls", "-q", queue, "--status", "dead_letter").stdout
    assert "t0" in table and "t1" not in table
    shown = json.loads(run_queenpy(broker, "messages", "show", partition_id, "t0", "--json").stdout)
    assert shown["payload"] == {"n": 0} and shown["errorMessage"] == "bad"
    assert '"n": 0' in run_queenpy(broker, "messages", "show", partition_id, "t0").stdout
    retried = json.loads(run_queenpy(broker, "messages", "retry", partition_id, "t0", "--json").stdout)
    assert retried["success"] is True and retried["consumerGroups"] == ["__QUEUE_MODE__"]
    assert run_queenpy(broker, "messages", "rm", partition_id, "t2").stdout.startswith("deleted t2")
    gone = run_queenpy(broker, "messages", "rm", partition_id, "t2", check=False)
    assert gone.returncode == 1 and "Message not found" in gone.stderr
    missing = run_queenpy(broker, "messages", "show", partition_id, "t2", check=False)
    assert missing.returncode == 1 and "Message not found" in missing.stderr
    bad = run_queenpy(broker, "messages", "show", "not-a-uuid", "t2", check=False)
    assert bad.returncode == 1 and "partitionId must be a UUID" in bad.stderr


def test_maintenance_on_off(db_url: str, start_broker: Callable[..., Any]) -> None:
    broker = start_broker(db_url, workers=1)
    state = json.loads(run_queenpy(broker, "maintenance", "--json").stdout)
    assert state["maintenanceMode"] is False and state["popMaintenanceMode"] is False
    assert json.loads(run_queenpy(broker, "maintenance", "on", "--json").stdout)["maintenanceMode"] is True
    # the group's options reach its subcommand, as everywhere
    assert json.loads(run_queenpy(broker, "maintenance", "--json", "on").stdout)["maintenanceMode"] is True
    assert json.loads(run_queenpy(broker, "maintenance", "on", "--pop", "--json").stdout)[
        "popMaintenanceMode"
    ]
    assert "True" in run_queenpy(broker, "maintenance").stdout
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        answer = http.post(
            "/api/v1/push", json={"items": [{"queue": "cli-m", "payload": 1, "transactionId": "a"}]}
        )
        assert answer.status_code == 201 and answer.json()[0]["status"] == "buffered"
        assert http.get("/api/v1/pop/queue/cli-m").status_code == 204
    assert json.loads(run_queenpy(broker, "maintenance", "off", "--json").stdout)["maintenanceMode"] is False
    off = json.loads(run_queenpy(broker, "maintenance", "off", "--pop", "--json").stdout)
    assert off == {"popMaintenanceMode": False, "message": "Pop maintenance mode disabled"}


def test_status_tables_json_and_watch(broker: Any) -> None:
    queue = unique("cli-status")
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": n} for n in range(4)]})
        http.post("/api/v1/stats/refresh")
    snapshot = json.loads(run_queenpy(broker, "status", "--json", "--limit", "10000").stdout)
    assert snapshot["overview"]["messages"]["total"] >= 4
    rows = [q for q in snapshot["queues"]["queues"] if q["name"] == queue]
    assert rows and rows[0]["messages"]["total"] == 4
    tables = run_queenpy(broker, "status", "--limit", "10000").stdout
    assert "queues" in tables and queue in tables
    lines = run_queenpy(broker, "status", "--watch", "0.5", "--iterations", "2", "--json").stdout.splitlines()
    assert len(lines) == 2 and all("overview" in json.loads(line) for line in lines)
    watched = run_queenpy(broker, "status", "--watch", "0.5", "--iterations", "2").stdout
    assert watched.count("pending") >= 1
