"""Message browsing and the operators' message operations (API.md 10.2) against a real ``queenpy serve``:
list with filters and paging, get, delete, move to the DLQ, retry from the DLQ, clear a queue. Every number
is checked against what the test pushed and consumed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from helpers import unique


@pytest.fixture
def http(broker: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


def push(
    http: httpx.Client, queue: str, partition: str, count: int, prefix: str = "t"
) -> list[dict[str, Any]]:
    items = [
        {"queue": queue, "partition": partition, "payload": {"n": n}, "transactionId": f"{prefix}{n}"}
        for n in range(count)
    ]
    results = http.post("/api/v1/push", json={"items": items}).json()
    assert [r["status"] for r in results] == ["queued"] * count
    return list(results)


def pop(http: httpx.Client, queue: str, batch: int, group: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"batch": batch}
    if group:
        params["consumerGroup"] = group
    return dict(http.get(f"/api/v1/pop/queue/{queue}", params=params).json())


def ack(
    http: httpx.Client, messages: list[dict[str, Any]], status: str = "completed", group: str | None = None
) -> None:
    body: dict[str, Any] = {
        "acknowledgments": [
            {
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
                "status": status,
            }
            for m in messages
        ]
    }
    if group:
        body["consumerGroup"] = group
    assert all(r["success"] for r in http.post("/api/v1/ack/batch", json=body).json())


def listing(http: httpx.Client, **params: Any) -> dict[str, Any]:
    response = http.get("/api/v1/messages", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_listing_counts_statuses_from_cursor_and_lease(http: httpx.Client) -> None:
    queue = unique("browse")
    push(http, queue, "p", 10)
    popped = pop(http, queue, 4)["messages"]
    ack(http, popped[:2])  # 2 completed, 2 still leased, 6 pending
    whole = listing(http, queue=queue)
    assert whole["total"] == 10 and len(whole["messages"]) == 10
    assert [m["transactionId"] for m in whole["messages"]] == [
        f"t{n}" for n in reversed(range(10))
    ]  # newest first
    assert whole["mode"] == {"hasQueueMode": True, "busGroupsCount": 0, "type": "queue"}
    first = whole["messages"][-1]
    assert first["queuePath"] == f"{queue}/p" and first["status"] == "completed" and first["offset"] == 1
    assert {
        "id",
        "partitionId",
        "namespace",
        "task",
        "queueStatus",
        "busStatus",
        "traceId",
        "producerSub",
        "queuePriority",
        "createdAt",
        "leaseExpiresAt",
    } <= set(first)
    counts = {
        status: listing(http, queue=queue, status=status)["total"]
        for status in ("pending", "processing", "completed", "dead_letter")
    }
    assert counts == {"pending": 6, "processing": 2, "completed": 2, "dead_letter": 0}
    leased = listing(http, queue=queue, status="processing")["messages"]
    assert [m["transactionId"] for m in leased] == ["t3", "t2"] and all(m["leaseExpiresAt"] for m in leased)


def test_the_listing_pages_with_limit_and_offset(http: httpx.Client) -> None:
    queue = unique("page")
    push(http, queue, "a", 7, "a")
    push(http, queue, "b", 5, "b")
    seen: list[str] = []
    for offset in range(0, 12, 5):
        page = listing(http, queue=queue, limit=5, offset=offset)
        assert page["total"] == 12 and page["pagination"] == {"limit": 5, "offset": offset}
        seen += [m["transactionId"] for m in page["messages"]]
    assert sorted(seen) == sorted([f"a{n}" for n in range(7)] + [f"b{n}" for n in range(5)])
    assert listing(http, queue=queue, partition="b")["total"] == 5


def test_the_time_window_excludes_older_messages(http: httpx.Client) -> None:
    queue = unique("window")
    push(http, queue, "p", 3)
    page = listing(http, queue=queue)
    newest = page["messages"][0]["createdAt"]
    assert (
        listing(http, queue=queue, **{"from": "2000-01-01T00:00:00Z", "to": "2000-01-02T00:00:00Z"})["total"]
        == 0
    )
    later = listing(http, queue=queue, **{"from": newest})
    assert later["total"] >= 1 and all(m["createdAt"] >= newest for m in later["messages"])


def test_bus_groups_complete_a_message_when_every_group_consumed_it(http: httpx.Client) -> None:
    queue = unique("bus")
    push(http, queue, "p", 3)
    ack(http, pop(http, queue, 3, "g1")["messages"], group="g1")
    ack(http, pop(http, queue, 1, "g2")["messages"], group="g2")
    page = listing(http, queue=queue)
    assert page["mode"] == {"hasQueueMode": False, "busGroupsCount": 2, "type": "bus"}
    by_id = {m["transactionId"]: m for m in page["messages"]}
    assert by_id["t0"]["status"] == "completed" and by_id["t0"]["busStatus"] == {
        "consumedBy": 2,
        "totalGroups": 2,
    }
    assert by_id["t2"]["status"] == "pending" and by_id["t2"]["busStatus"] == {
        "consumedBy": 1,
        "totalGroups": 2,
    }


def test_get_delete_and_not_found(http: httpx.Client) -> None:
    queue = unique("get")
    partition_id = push(http, queue, "p", 2)[0]["partition_id"]
    message = http.get(f"/api/v1/messages/{partition_id}/t1").json()
    assert message["payload"] == {"n": 1} and message["status"] == "pending" and message["queue"] == queue
    assert message["queueConfig"]["leaseTime"] == 300 and message["consumerGroups"] == []
    assert message["retryCount"] is None and message["isEncrypted"] is False
    deleted = http.delete(f"/api/v1/messages/{partition_id}/t1").json()
    assert deleted == {
        "success": True,
        "partitionId": partition_id,
        "transactionId": "t1",
        "message": "Message deleted successfully",
    }
    assert http.get(f"/api/v1/messages/{partition_id}/t1").json() == {"error": "Message not found"}
    assert http.delete(f"/api/v1/messages/{partition_id}/t1").json()["success"] is False
    assert [m["transactionId"] for m in pop(http, queue, 10)["messages"]] == ["t0"]  # the deleted one is gone


def test_move_to_dlq_then_retry_from_it(http: httpx.Client) -> None:
    queue = unique("dlq")
    partition_id = push(http, queue, "p", 3)[0]["partition_id"]
    refused = http.post(f"/api/v1/messages/{partition_id}/t1/dlq", json={}).json()
    assert refused["success"] is False and "1 message(s) come before it" in refused["error"]
    moved = http.post(f"/api/v1/messages/{partition_id}/t0/dlq", json={"errorMessage": "poison"}).json()
    assert moved["success"] is True and moved["consumerGroup"] == "__QUEUE_MODE__"
    assert listing(http, queue=queue, status="dead_letter")["total"] == 1
    dlq = http.get("/api/v1/dlq", params={"queue": queue}).json()
    assert [(m["transactionId"], m["errorMessage"]) for m in dlq["messages"]] == [("t0", "poison")]
    assert [m["transactionId"] for m in pop(http, queue, 10)["messages"]] == ["t1", "t2"]  # t0 skipped
    retried = http.post(f"/api/v1/messages/{partition_id}/t0/retry", json={}).json()
    assert retried["success"] is True and retried["consumerGroups"] == ["__QUEUE_MODE__"]
    assert http.get("/api/v1/dlq", params={"queue": queue}).json()["messages"] == []


def test_clear_deletes_every_message_and_moves_cursors_to_the_end(http: httpx.Client) -> None:
    queue = unique("clear")
    push(http, queue, "a", 4, "a")
    push(http, queue, "b", 3, "b")
    pop(http, queue, 2)  # a live lease that the clear must end
    one = http.delete(f"/api/v1/queues/{queue}/clear", params={"partition": "b"}).json()
    assert one == {"success": True, "queue": queue, "partition": "b", "partitions": 1, "deleted": 3}
    everything = http.delete(f"/api/v1/queues/{queue}/clear").json()
    assert everything["deleted"] == 4 and everything["partitions"] == 2
    assert listing(http, queue=queue)["total"] == 0
    push(http, queue, "a", 2, "new")
    assert sorted(m["transactionId"] for m in pop(http, queue, 10)["messages"]) == ["new0", "new1"]
    assert http.delete(f"/api/v1/queues/{unique('none')}/clear").json() == {
        "success": False,
        "error": "Queue not found",
    }


def test_status_queue_messages_is_a_paged_array(http: httpx.Client) -> None:
    queue = unique("statusmsg")
    push(http, queue, "p", 5)
    page = http.get(f"/api/v1/status/queues/{queue}/messages", params={"limit": 2, "offset": 1}).json()
    assert [m["transactionId"] for m in page] == ["t3", "t2"]
    assert set(page[0]) == {
        "id",
        "transactionId",
        "partitionId",
        "queuePath",
        "queue",
        "partition",
        "status",
        "createdAt",
    }
    assert len(http.get(f"/api/v1/status/queues/{queue}/messages").json()) == 5
    assert http.get(f"/api/v1/status/queues/{queue}/messages", params={"offset": "x"}).status_code == 400
