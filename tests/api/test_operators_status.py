"""Resources and status routes (API.md section 11) against a real ``queenpy serve``: after a stats refresh
(``POST /api/v1/stats/refresh``) every number of the test's own queue equals what it pushed and consumed;
shapes are Queen's, lists are paged with ``total``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest


@pytest.fixture
def http(broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.fixture
def filled(http: httpx.Client) -> dict[str, Any]:
    """Queue ``<ns>.<task>`` with partitions a (6 messages) and b (4): queue mode acks 3 of a and holds a
    lease on 2 more of a; 1 message of b goes to the DLQ. Stats refreshed."""
    namespace, task = f"ns{uuid.uuid4().hex[:8]}", f"task{uuid.uuid4().hex[:6]}"
    queue = f"{namespace}.{task}"
    for partition, count in (("a", 6), ("b", 4)):
        items = [
            {"queue": queue, "partition": partition, "payload": {"n": n}, "transactionId": f"{partition}{n}"}
            for n in range(count)
        ]
        assert {r["status"] for r in http.post("/api/v1/push", json={"items": items}).json()} == {"queued"}
    first = http.get(f"/api/v1/pop/queue/{queue}/partition/a", params={"batch": 3}).json()["messages"]
    acks = [
        {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "leaseId": m["leaseId"],
            "status": "completed",
        }
        for m in first
    ]
    assert all(r["success"] for r in http.post("/api/v1/ack/batch", json={"acknowledgments": acks}).json())
    leased = http.get(f"/api/v1/pop/queue/{queue}/partition/a", params={"batch": 2}).json()["messages"]
    assert len(leased) == 2
    bad = http.get(f"/api/v1/pop/queue/{queue}/partition/b", params={"batch": 1}).json()["messages"][0]
    http.post(
        "/api/v1/ack",
        json={
            "transactionId": bad["transactionId"],
            "partitionId": bad["partitionId"],
            "leaseId": bad["leaseId"],
            "status": "dlq",
            "error": "broken",
        },
    )
    refreshed = http.post("/api/v1/stats/refresh", json={})
    assert refreshed.status_code == 200 and "partitions" in refreshed.json()
    return {"queue": queue, "namespace": namespace, "task": task}


def find(rows: list[dict[str, Any]], key: str, value: str) -> dict[str, Any]:
    matches = [row for row in rows if row[key] == value]
    assert len(matches) == 1, (key, value, rows[:3])
    return matches[0]


def test_resources_queue_and_partitions_count_what_happened(
    http: httpx.Client, filled: dict[str, Any]
) -> None:
    queue = filled["queue"]
    detail = http.get(f"/api/v1/resources/queues/{queue}").json()
    assert (
        detail["name"] == queue
        and detail["namespace"] == filled["namespace"]
        and detail["task"] == filled["task"]
    )
    assert detail["options"]["leaseTime"] == 300 and detail["total"] == 2
    # a: 6 stored, 3 consumed, 2 leased, 1 pending; b: 4 stored, 1 dead-lettered (consumed), 3 pending
    assert detail["totals"] == {
        "total": 10,
        "pending": 4,
        "processing": 2,
        "completed": 3,
        "failed": 1,
        "deadLetter": 1,
    }
    by_name = {p["name"]: p for p in detail["partitions"]}
    assert by_name["a"]["stats"] == {
        "total": 6,
        "pending": 1,
        "processing": 2,
        "completed": 3,
        "failed": 0,
        "deadLetter": 0,
    }
    assert by_name["b"]["stats"]["deadLetter"] == 1 and by_name["b"]["stats"]["pending"] == 3
    assert by_name["a"]["oldestMessage"] and by_name["a"]["newestMessage"]
    page = http.get(f"/api/v1/resources/queues/{queue}", params={"limit": 1, "offset": 1}).json()
    assert [p["name"] for p in page["partitions"]] == ["b"] and page["pagination"] == {
        "limit": 1,
        "offset": 1,
    }
    partitions = http.get("/api/v1/resources/partitions", params={"queue": queue}).json()
    assert partitions["total"] == 2 and [p["name"] for p in partitions["partitions"]] == ["a", "b"]
    assert partitions["partitions"][0]["messages"]["processing"] == 2
    assert partitions["partitions"][0]["queue"] == queue and partitions["partitions"][0]["offset"] == 6
    assert http.get(f"/api/v1/resources/queues/{uuid.uuid4().hex}").json() == {"error": "Queue not found"}


def test_queue_lists_namespaces_and_tasks(http: httpx.Client, filled: dict[str, Any]) -> None:
    listed = http.get("/api/v1/resources/queues", params={"namespace": filled["namespace"]}).json()
    assert listed["total"] == 1 and listed["pagination"] == {"limit": 1000, "offset": 0}
    row = listed["queues"][0]
    assert row["name"] == filled["queue"] and row["partitions"] == 2
    assert {k: row["messages"][k] for k in ("total", "pending", "processing")} == {
        "total": 10,
        "pending": 4,
        "processing": 2,
    }
    everything = http.get("/api/v1/resources/queues", params={"limit": 2}).json()
    assert len(everything["queues"]) <= 2 and everything["total"] >= 1
    namespaces = http.get("/api/v1/resources/namespaces", params={"limit": 10_000}).json()["namespaces"]
    assert find(namespaces, "namespace", filled["namespace"]) == {
        "namespace": filled["namespace"],
        "queues": 1,
        "partitions": 2,
        "messages": {"total": 10, "pending": 4, "processing": 2},
    }
    tasks = http.get("/api/v1/resources/tasks", params={"limit": 10_000}).json()["tasks"]
    assert find(tasks, "task", filled["task"])["messages"]["total"] == 10
    status_queues = http.get("/api/v1/status/queues", params={"namespace": filled["namespace"]}).json()
    assert status_queues["total"] == 1 and status_queues["pagination"] == {"limit": 100, "offset": 0}
    assert status_queues["queues"][0]["messages"]["total"] == 10


def test_status_queue_detail(http: httpx.Client, filled: dict[str, Any]) -> None:
    detail = http.get(f"/api/v1/status/queues/{filled['queue']}").json()
    assert detail["queue"]["config"] == {
        "leaseTime": 300,
        "retryLimit": 3,
        "retryDelay": 1000,
        "ttl": 3600,
        "maxQueueSize": 0,
        "deadLetterQueue": False,
    }
    assert detail["totals"]["messages"]["total"] == 10 and detail["totals"]["ingestedTotal"] == 10
    a = find(detail["partitions"], "name", "a")
    assert a["cursor"]["totalConsumed"] == 3 and a["cursor"]["offset"] == 3
    assert a["messages"]["processing"] == 2 and a["lastActivity"] and a["stats"]["offset"] == 6


def test_overview_status_and_analytics(http: httpx.Client, filled: dict[str, Any]) -> None:
    overview = http.get("/api/v1/resources/overview").json()
    assert set(overview) >= {
        "queues",
        "partitions",
        "namespaces",
        "tasks",
        "messages",
        "lag",
        "throughput",
        "timestamp",
        "statsAge",
    }
    assert (
        overview["messages"]["total"] >= 10 and overview["queues"] >= 1 and overview["statsAge"] is not None
    )
    assert set(overview["lag"]["time"]) == {"avg", "median", "min", "max"}
    status = http.get("/api/v1/status", params={"queue": filled["queue"]}).json()
    assert status["bucketMinutes"] == 1 and status["pointCount"] == len(status["throughput"]) >= 60
    assert sum(point["ingested"] for point in status["throughput"]) == 10
    assert status["messages"]["total"] == 10 and status["messages"]["deadLetter"] == 1
    assert status["leases"] == {"active": 1, "partitionsWithLeases": 1, "totalBatchSize": 2, "totalAcked": 0}
    assert (
        status["deadLetterQueue"]["totalMessages"] == 1
        and status["deadLetterQueue"]["affectedPartitions"] == 1
    )
    assert status["deadLetterQueue"]["topErrors"] == [{"error": "broken", "count": 1}]
    assert [q["name"] for q in status["queues"]] == [filled["queue"]]
    analytics = http.get(
        "/api/v1/status/analytics",
        params={"queue": filled["queue"], "interval": "minute", "from": status["timeRange"]["from"]},
    ).json()
    assert analytics["interval"] == "minute" and sum(p["messages"] for p in analytics["dataPoints"]) == 10
    hourly = http.get("/api/v1/status/analytics", params={"namespace": filled["namespace"]}).json()
    assert hourly["interval"] == "hour" and len(hourly["dataPoints"]) in (24, 25) and hourly["total"] == 10


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/v1/resources/queues", {"limit": "0"}, "limit"),
        ("/api/v1/resources/partitions", {"offset": "x"}, "offset"),
        ("/api/v1/resources/namespaces", {"limit": "100001"}, "limit"),
        ("/api/v1/status", {"from": "later"}, "from"),
        ("/api/v1/status", {"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}, "from"),
        (
            "/api/v1/status",
            {"from": "0001-01-01T00:00:00Z", "to": "9999-12-31T00:00:00Z"},
            "from and to span",
        ),
        ("/api/v1/status/queues", {"limit": "-3"}, "limit"),
        ("/api/v1/status/analytics", {"interval": "week"}, "interval"),
        ("/api/v1/status/analytics", {"interval": "minute", "from": "2000-01-01T00:00:00Z"}, "interval"),
        ("/api/v1/status/analytics", {"to": "x"}, "to"),
    ],
)
def test_bad_input_is_a_400(http: httpx.Client, path: str, params: dict[str, str], field: str) -> None:
    response = http.get(path, params=params)
    assert response.status_code == 400 and field in response.json()["error"], response.text


def test_stats_refresh_needs_a_boolean(http: httpx.Client) -> None:
    assert http.post("/api/v1/stats/refresh", json={"full": "yes"}).status_code == 400
    assert http.post("/api/v1/stats/refresh", json={"full": True}).json()["full"] is True


def test_status_over_six_years_is_answered(http: httpx.Client) -> None:
    """Six years fits under the bound (10,000 buckets of 6 h) and is answered."""
    response = http.get(
        "/api/v1/status", params={"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
    )
    assert response.status_code == 200, response.text
