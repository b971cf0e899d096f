"""Every method of the official client's admin API (``queen-mq==0.15.0``, ``queen.admin.Admin``) against
``queenpy serve`` (two workers, metrics rows written every 0.2 s), each answering real data about what the
test pushed and consumed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from queen import Queen

from helpers import official_client, unique


@pytest.fixture
async def q(metrics_broker: Any) -> AsyncIterator[Queen]:
    """The official client on the broker that writes metrics often."""
    async with official_client(metrics_broker.url) as client:
        yield client


async def until(probe: Any, accept: Any, seconds: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        result = await probe()
        if accept(result):
            return result
        assert asyncio.get_running_loop().time() < deadline, f"last answer: {result!r}"
        await asyncio.sleep(0.1)


async def test_messages_traces_groups_seek_and_maintenance(q: Queen, metrics_broker: Any) -> None:
    admin = q.admin
    queue = unique("admin")
    await q.queue(queue).partition("p").push([{"data": {"n": n}, "transactionId": f"t{n}"} for n in range(4)])
    popped = await q.queue(queue).partition("p").batch(2).wait(False).pop()
    await q.ack(popped[0], True)
    await q.ack(popped[1], "dlq")  # t1 to the dead-letter queue

    listed = await admin.list_messages(queue=queue)
    assert listed["total"] == 4
    assert {m["transactionId"]: m["status"] for m in listed["messages"]} == {
        "t0": "completed",
        "t1": "dead_letter",
        "t2": "pending",
        "t3": "pending",
    }
    partition_id = listed["messages"][0]["partitionId"]
    message = await admin.get_message(partition_id, "t1")
    assert message["payload"] == {"n": 1} and message["status"] == "dead_letter"

    retried = await admin.retry_message(partition_id, "t1")
    assert retried["success"] is True
    assert [m["transactionId"] for m in await q.queue(queue).partition("p").batch(1).wait(False).pop()] == [
        "t1"
    ]
    moved = await admin.move_message_to_dlq(partition_id, "t2")  # the lease on t1 ends; t2 is next after it
    assert moved["success"] is True
    assert (await admin.get_message(partition_id, "t2"))["status"] == "dead_letter"
    deleted = await admin.delete_message(partition_id, "t3")
    assert deleted["success"] is True and deleted["message"] == "Message deleted successfully"

    async with httpx.AsyncClient(base_url=metrics_broker.url) as http:
        traced = await http.post(
            "/api/v1/traces",
            json={
                "transactionId": "t0",
                "partitionId": partition_id,
                "traceNames": ["admin-trace"],
                "data": {"step": 1},
            },
        )
        assert traced.json()["success"] is True
    assert (await admin.get_traces_for_message(partition_id, "t0"))["traces"][0]["data"] == {"step": 1}
    by_name = await admin.get_traces_by_name("admin-trace")
    assert by_name["total"] >= 1 and by_name["traces"][0]["transaction_id"] == "t0"
    names = await admin.get_trace_names()
    assert "admin-trace" in {n["trace_name"] for n in names["trace_names"]}

    await q.queue(queue).partition("p").push([{"data": {"n": 9}, "transactionId": "t9"}])
    group_msgs = await q.queue(queue).group("g").batch(10).wait(False).pop()
    await q.ack(group_msgs, True, {"group": "g"})
    groups = await admin.list_consumer_groups()
    assert any(g["name"] == "g" and g["queueName"] == queue for g in groups)
    detail = await admin.get_consumer_group("g")
    assert detail[queue]["partitions"][0]["offsetLag"] == 0
    assert isinstance(await admin.get_lagging_consumers(0), list)
    seek = await admin.seek_consumer_group("g", queue, {"timestamp": "2000-01-01T00:00:00Z"})
    assert seek["success"] is True and seek["partitionsUpdated"] == 1
    assert (await admin.get_consumer_group("g"))[queue]["partitions"][0]["offsetLag"] > 0
    deleted_group = await admin.delete_consumer_group_for_queue("g", queue)
    assert deleted_group["deletedPartitions"] == 1

    cleared = await admin.clear_queue(queue, partition="p")
    assert cleared["success"] is True and cleared["deleted"] >= 3

    assert (await admin.set_maintenance_mode(True))["maintenanceMode"] is True
    assert (await admin.get_maintenance_mode())["maintenanceMode"] is True
    assert (await admin.set_maintenance_mode(False))["maintenanceMode"] is False
    assert (await admin.set_pop_maintenance_mode(True))["popMaintenanceMode"] is True
    assert (await admin.get_pop_maintenance_mode())["popMaintenanceMode"] is True
    assert (await admin.set_pop_maintenance_mode(False))["popMaintenanceMode"] is False
    assert (await admin.health())["status"] == "healthy"
    assert "fusion" in await admin.metrics()


async def test_system_worker_and_postgres_metrics(q: Queen) -> None:
    admin = q.admin
    queue = unique("admin-metrics")
    await q.queue(queue).push([{"data": n} for n in range(3)])
    system = await until(admin.get_system_metrics, lambda r: len(r["replicas"]) == 2)
    assert system["series"] and system["series"][0]["memory"]["rssBytes"]["max"] > 0
    workers = await until(
        admin.get_worker_metrics,
        lambda r: any(x["queueName"] == queue and x["pushMessages"] == 3 for x in r["queues"]),
    )
    assert workers["summary"]["pushMessages"] >= 3
    stats = await admin.get_postgres_stats()
    assert stats["database"]["name"] and stats["tableSizes"]


async def test_stats_based_methods(q: Queen) -> None:
    """Overview, namespaces, tasks, queues, queue, partitions, status, queue stats and detail, analytics and
    the stats refresh, after the test's own pushes and pops."""
    admin = q.admin
    namespace = unique("adminns").replace("-", "")
    queue = f"{namespace}.jobs"
    await q.queue(queue).partition("x").push([{"data": {"n": n}} for n in range(5)])
    await q.queue(queue).partition("y").push([{"data": {"n": n}} for n in range(3)])
    popped = await q.queue(queue).partition("x").batch(2).wait(False).pop()
    await q.ack(popped, True)
    refreshed = await admin.refresh_consumer_stats()
    assert refreshed["partitions"] >= 2

    overview = await admin.get_overview()
    assert overview["messages"]["total"] >= 8 and overview["partitions"] >= 2
    namespaces = (await admin.get_namespaces())["namespaces"]
    assert [n["messages"]["total"] for n in namespaces if n["namespace"] == namespace] == [8]
    tasks = (await admin.get_tasks())["tasks"]
    assert any(t["task"] == "jobs" and t["messages"]["total"] >= 8 for t in tasks)
    listed = await admin.list_queues(namespace=namespace)
    assert listed["total"] == 1 and listed["queues"][0]["messages"]["pending"] == 6
    detail = await admin.get_queue(queue)
    assert detail["totals"]["completed"] == 2 and detail["totals"]["total"] == 8
    partitions = await admin.get_partitions(queue=queue)
    assert [(p["name"], p["messages"]["total"]) for p in partitions["partitions"]] == [("x", 5), ("y", 3)]
    status = await admin.get_status(queue=queue)
    assert sum(point["ingested"] for point in status["throughput"]) == 8
    stats = await admin.get_queue_stats(namespace=namespace)
    assert stats["queues"][0]["name"] == queue
    queue_detail = await admin.get_queue_detail(queue)
    assert queue_detail["totals"]["messages"]["total"] == 8
    assert sum(p["cursor"]["totalConsumed"] for p in queue_detail["partitions"]) == 2
    analytics = await admin.get_analytics(
        queue=queue, interval="minute", **{"from": status["timeRange"]["from"]}
    )
    assert sum(point["messages"] for point in analytics["dataPoints"]) == 8


async def test_no_consumer_group_answers_valid_json_that_the_client_reads(
    new_database: Any, start_broker: Any
) -> None:
    """The original sends an empty body for these three (API.md 1.2); queenpy sends ``[]`` / ``{}``, which
    the official client reads as the same "nothing" (the JS tier checks its client likewise)."""
    broker = start_broker(new_database())
    async with httpx.AsyncClient(base_url=broker.url) as http:
        for path, empty in (
            ("/api/v1/consumer-groups", []),
            ("/api/v1/consumer-groups/lagging", []),
            ("/api/v1/consumer-groups/nobody", {}),
        ):
            answer = await http.get(path)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            assert answer.json() == empty, (path, answer.text)
    async with official_client(broker.url) as client:
        assert await client.admin.list_consumer_groups() == []
        assert await client.admin.get_lagging_consumers(0) == []
        assert await client.admin.get_consumer_group("nobody") == {}
