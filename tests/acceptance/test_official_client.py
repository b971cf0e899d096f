"""The official Python client, ``queen-mq==0.15.0``, drives queenpy end to end (API.md section 22).

The official clients are the judge of wire compatibility: every call here goes through ``from queen import
Queen`` exactly as a user of the original broker would write it, against a real ``queenpy serve`` subprocess
(the session ``broker`` fixture). Raw HTTP is used only to observe what the client cannot show (the DLQ's
paging, a consumer group's lease state). Each test uses its own queue and group names (uuid suffix), and
waits for conditions by polling with a deadline, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from queen import Queen

from helpers import unique

T = TypeVar("T")
DEADLINE_S = 30.0


async def eventually(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    deadline_s: float = DEADLINE_S,
    what: str = "condition",
) -> T:
    """Await ``probe()`` until ``accept(result)``; fail with the last result after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        result = await probe()
        if accept(result):
            return result
        if time.monotonic() > end:
            raise AssertionError(f"{what} not reached within {deadline_s} s; last result: {result!r}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def http(broker: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        yield client


async def drain(q: Queen, queue: str, group: str | None = None, batch: int = 10) -> list[dict[str, Any]]:
    """Pop and batch-ack until nothing more is delivered to ``group`` (queue mode when None)."""
    delivered: list[dict[str, Any]] = []
    while True:
        builder = q.queue(queue).batch(batch).wait(False)
        if group:
            builder = builder.group(group)
        messages = await builder.pop()
        if not messages:
            return delivered
        delivered.extend(messages)
        acked = await q.ack(messages, True, {"group": group} if group else None)
        assert acked["success"], acked


async def consume(
    builder: Any, handler: Callable[[Any], Awaitable[Any]], deadline_s: float = DEADLINE_S
) -> None:
    """Run ``builder.consume(handler)`` (which returns once its ``limit`` is reached) under a deadline."""
    await asyncio.wait_for(builder.consume(handler), timeout=deadline_s)


# -- configure, push, pop, ack -------------------------------------------------------------------------------


async def test_configure_creates_the_queue_and_echoes_its_options(q: Queen, http: httpx.AsyncClient) -> None:
    queue = unique("cfg")
    result = await (
        q.queue(queue)
        .namespace("billing")
        .task("invoice")
        .config({"lease_time": 45, "retry_limit": 2, "retry_delay": 0, "priority": 3})
        .create()
    )
    assert result["configured"] is True and result["queue"] == queue
    assert result["namespace"] == "billing" and result["task"] == "invoice"
    sent = {"leaseTime": 45, "retryLimit": 2, "retryDelay": 0, "priority": 3}
    assert {key: result["options"][key] for key in sent} == sent
    # the client always sends QUEUE_DEFAULTS for what the user left out
    defaults = {"maxSize": 0, "delayedProcessing": 0, "encryptionEnabled": False}
    assert {key: result["options"][key] for key in defaults} == defaults

    described = (await http.get(f"/api/v1/resources/queues/{queue}")).json()
    assert (described["name"], described["namespace"], described["task"]) == (queue, "billing", "invoice")
    assert [p["name"] for p in described["partitions"]] == ["Default"]

    # configure is a full overwrite: what is not sent again goes back to the client's defaults
    again = await q.queue(queue).config({"lease_time": 10}).create()
    overwritten = {"leaseTime": 10, "retryLimit": 3, "priority": 0}
    assert {key: again["options"][key] for key in overwritten} == overwritten


async def test_a_repeated_transaction_id_is_reported_duplicate_and_stored_once(q: Queen) -> None:
    queue = unique("dup")
    duplicates: list[Any] = []

    async def on_duplicate(items: list[dict[str, Any]], error: Exception) -> None:
        duplicates.extend(items)

    first = await (
        q.queue(queue)
        .push(
            [
                {"data": {"n": 1}, "transactionId": "order-1"},
                {"data": {"n": 2}, "transactionId": "order-1"},
                {"data": {"n": 3}, "transactionId": "order-3"},
            ]
        )
        .on_duplicate(on_duplicate)
    )
    assert [r["status"] for r in first] == ["queued", "duplicate", "queued"]
    assert first[1]["message_id"] == first[0]["message_id"]

    again = (
        await q.queue(queue).push([{"data": {"n": 4}, "transactionId": "order-3"}]).on_duplicate(on_duplicate)
    )
    assert [r["status"] for r in again] == ["duplicate"] and again[0]["message_id"] == first[2]["message_id"]
    assert [d["payload"] for d in duplicates] == [{"n": 2}, {"n": 4}]

    # the same transactionId in another partition is another message
    other = await q.queue(queue).partition("other").push([{"data": {"n": 5}, "transactionId": "order-1"}])
    assert [r["status"] for r in other] == ["queued"]

    delivered = await drain(q, queue)
    assert sorted(m["data"]["n"] for m in delivered) == [1, 3, 5]


async def test_pop_delivers_in_order_and_single_and_batch_acks_complete(q: Queen) -> None:
    queue = unique("popack")
    await q.queue(queue).config({"lease_time": 30}).create()
    await q.queue(queue).push([{"data": {"n": n}, "transactionId": f"t{n}"} for n in range(5)])

    first = await q.queue(queue).batch(3).wait(False).pop()
    assert [m["data"]["n"] for m in first] == [0, 1, 2]
    assert [m["transactionId"] for m in first] == ["t0", "t1", "t2"]
    assert all(m["leaseId"] and m["partition"] == "Default" and m["createdAt"] for m in first)
    for message in first:
        acked = await q.ack(message)
        assert acked["success"] is True and acked["error"] is None, acked
    assert acked["leaseReleased"] is True  # the third ack completed the batch

    rest = await q.queue(queue).batch(10).wait(False).pop()
    assert [m["data"]["n"] for m in rest] == [3, 4]
    batch_acked = await q.ack(rest)
    assert batch_acked["success"] is True
    assert [r["success"] for r in batch_acked["results"]] == [True, True]

    assert await q.queue(queue).batch(10).wait(False).pop() == []


# -- consumer groups -----------------------------------------------------------------------------------------


async def test_consume_fans_out_every_message_to_every_group(q: Queen) -> None:
    queue = unique("fanout")
    await q.queue(queue).config({"lease_time": 30}).create()
    await q.queue(queue).push([{"data": {"n": n}} for n in range(8)])
    seen: dict[str, list[int]] = {"billing": [], "audit": []}
    billing, audit = unique("billing"), unique("audit")

    async def single(message: dict[str, Any]) -> None:  # batch(1): one message at a time
        assert message["consumerGroup"] == billing
        seen["billing"].append(message["data"]["n"])

    async def batched(messages: list[dict[str, Any]]) -> None:  # batch(3): lists, acked with /ack/batch
        assert {m["consumerGroup"] for m in messages} == {audit}
        seen["audit"].extend(m["data"]["n"] for m in messages)

    await asyncio.gather(
        consume(q.queue(queue).group(billing).limit(8), single),
        consume(q.queue(queue).group(audit).batch(3).limit(8), batched),
    )
    assert seen == {"billing": list(range(8)), "audit": list(range(8))}

    # both groups acked everything; queue mode is a third, independent reader
    assert await q.queue(queue).group(billing).batch(10).wait(False).pop() == []
    assert await q.queue(queue).group(audit).batch(10).wait(False).pop() == []
    assert [m["data"]["n"] for m in await drain(q, queue)] == list(range(8))


async def test_subscription_mode_new_only_delivers_messages_pushed_after_joining(
    q: Queen, http: httpx.AsyncClient
) -> None:
    queue = unique("subnew")
    group = unique("late")
    await q.queue(queue).push([{"data": {"old": n}} for n in range(3)])
    received: list[Any] = []

    async def record(message: dict[str, Any]) -> None:
        received.append(message["data"])

    consumer = asyncio.create_task(
        consume(q.queue(queue).group(group).subscription_mode("new").timeout_millis(5000).limit(2), record)
    )

    async def joined() -> Any:
        response = await http.get(f"/api/v1/consumer-groups/{group}")
        return response.json() if response.content else {}

    await eventually(joined, lambda detail: queue in detail, what="the group to join the queue")
    await q.queue(queue).push([{"data": {"new": n}} for n in range(2)])
    await consumer
    assert received == [{"new": 0}, {"new": 1}]
    assert await q.queue(queue).group(group).batch(10).wait(False).pop() == []  # the old ones never come
    # a group joining with the default mode reads from the beginning
    assert len(await drain(q, queue, unique("from-start"))) == 5


# -- failures, retries, dead letters -------------------------------------------------------------------------


async def test_a_failing_handler_dead_letters_its_message_after_the_retry_limit(q: Queen) -> None:
    queue = unique("poison")
    group = unique("workers")
    await q.queue(queue).config({"lease_time": 30, "retry_limit": 1, "retry_delay": 0}).create()
    await q.queue(queue).push(
        [
            {"data": {"kind": "poison"}, "transactionId": "poison-1"},
            {"data": {"kind": "fine"}, "transactionId": "fine-1"},
        ]
    )
    deliveries: list[str] = []

    async def handler(message: dict[str, Any]) -> None:
        deliveries.append(message["transactionId"])
        if message["data"]["kind"] == "poison":
            raise RuntimeError("cannot process")  # the client nacks: POST /api/v1/ack status failed

    # retryLimit 1: the poison message is delivered twice, then dead-lettered; the next one follows
    await consume(q.queue(queue).group(group).timeout_millis(5000).limit(3), handler)
    assert deliveries == ["poison-1", "poison-1", "fine-1"]
    assert await q.queue(queue).group(group).batch(10).wait(False).pop() == []

    dlq = await q.queue(queue).dlq(group).limit(10).get()
    assert dlq["total"] == 1
    [dead] = dlq["messages"]
    expected = {
        "transactionId": "poison-1",
        "data": {"kind": "poison"},
        "consumerGroup": group,
        "queue": queue,
    }
    assert {key: dead[key] for key in expected} == expected
    # another group is not affected by this group's failures
    assert (await q.queue(queue).dlq(unique("other")).get())["total"] == 0
    assert [m["transactionId"] for m in await drain(q, queue, unique("other"))] == ["poison-1", "fine-1"]


async def test_failed_batch_acks_redeliver_until_every_message_is_dead_lettered(q: Queen) -> None:
    """A consumer that fails every batch loses nothing: each message ends in the DLQ, none is skipped.

    The retry counter is per (partition, group), not per message (API.md 6.3): the head of the batch gets
    exactly ``retryLimit + 1`` deliveries, the messages behind it may get more."""
    queue = unique("batchfail")
    retry_limit = 2
    await q.queue(queue).config({"lease_time": 30, "retry_limit": retry_limit, "retry_delay": 0}).create()
    await q.queue(queue).push([{"data": {"n": n}, "transactionId": f"b{n}"} for n in range(3)])
    deliveries: dict[str, int] = {}
    end = time.monotonic() + DEADLINE_S
    while True:
        messages = await q.queue(queue).batch(10).wait(False).pop()
        if not messages:
            break
        assert time.monotonic() < end, f"still redelivering after {DEADLINE_S} s: {deliveries}"
        for message in messages:
            deliveries[message["transactionId"]] = deliveries.get(message["transactionId"], 0) + 1
        nacked = await q.ack(messages, False, {"error": "downstream rejected the batch"})
        assert nacked["success"] is True, nacked

    dlq = await q.queue(queue).dlq().limit(10).get()
    assert sorted(m["transactionId"] for m in dlq["messages"]) == ["b0", "b1", "b2"], (dlq, deliveries)
    assert dlq["total"] == 3
    assert {m["errorMessage"] for m in dlq["messages"]} == {"downstream rejected the batch"}
    assert sorted(m["data"]["n"] for m in dlq["messages"]) == [0, 1, 2]
    assert deliveries["b0"] == retry_limit + 1, deliveries


async def test_an_ack_with_a_released_lease_is_rejected_and_loses_nothing(q: Queen) -> None:
    """Once a consumer gives its lease back (status ``retry``), an ack carrying that lease must fail with
    ``Invalid or expired lease`` (API.md 6.3); accepting it would move the cursor past the message handed
    back, which is then never delivered again."""
    queue = unique("stale")
    await q.queue(queue).config({"lease_time": 30, "retry_delay": 0}).create()
    await q.queue(queue).push([{"data": {"n": n}, "transactionId": f"s{n}"} for n in range(2)])
    first, second = await q.queue(queue).batch(2).wait(False).pop()
    handed_back = await q.ack(first, "retry")
    assert handed_back["success"] is True and handed_back["leaseReleased"] is True

    stale = await q.ack(second, True)  # still carries the leaseId that was just released
    assert stale["success"] is False and stale["error"] == "Invalid or expired lease", stale
    assert [m["transactionId"] for m in await drain(q, queue)] == ["s0", "s1"]


async def test_dlq_listing_pages_with_limit_offset_and_total(q: Queen, http: httpx.AsyncClient) -> None:
    queue = unique("dlqpage")
    group = unique("pager")
    await q.queue(queue).push([{"data": {"n": n}, "transactionId": f"d{n}"} for n in range(5)])
    messages = await q.queue(queue).group(group).batch(5).wait(False).pop()
    assert len(messages) == 5
    dead = await q.ack(messages, "dlq", {"group": group, "error": "sent straight to the DLQ"})
    assert dead["success"] is True and all(r["dlq"] for r in dead["results"]), dead

    pages: list[list[str]] = []
    for offset in (0, 2, 4):
        response = await http.get(
            "/api/v1/dlq", params={"queue": queue, "consumerGroup": group, "limit": 2, "offset": offset}
        )
        body = response.json()
        assert response.status_code == 200 and body["total"] == 5
        assert body["pagination"] == {"limit": 2, "offset": offset}
        pages.append([m["transactionId"] for m in body["messages"]])
    assert [len(page) for page in pages] == [2, 2, 1]
    assert sorted(tx for page in pages for tx in page) == [f"d{n}" for n in range(5)]  # disjoint, cover all

    beyond = (await http.get("/api/v1/dlq", params={"queue": queue, "limit": 2, "offset": 5})).json()
    assert beyond["messages"] == [] and beyond["total"] == 5

    # the official client's builder reads the same paging
    listed = await q.queue(queue).dlq(group).limit(2).get()
    assert listed["total"] == 5 and [m["transactionId"] for m in listed["messages"]] == pages[0]
    tail = await q.queue(queue).dlq(group).limit(2).offset(4).get()
    assert [m["transactionId"] for m in tail["messages"]] == pages[2]
    assert {m["errorMessage"] for m in listed["messages"]} == {"sent straight to the DLQ"}


# -- transactions --------------------------------------------------------------------------------------------


async def test_transaction_acks_and_pushes_atomically(q: Queen) -> None:
    source, sink = unique("tx-src"), unique("tx-sink")
    group = unique("translator")
    await q.queue(source).push([{"data": {"text": "hello"}, "transactionId": "src-1"}])
    [message] = await q.queue(source).group(group).wait(False).pop()

    result = await (
        q.transaction()
        .ack(message, "completed", {"consumer_group": group})
        .queue(sink)
        .partition("fr")
        .push([{"data": {"text": "bonjour"}}])
        .commit()
    )
    assert result["success"] is True
    assert [r["type"] for r in result["results"]] == ["ack", "push"]
    assert await q.queue(source).group(group).wait(False).pop() == []  # acked for this group...
    assert [m["transactionId"] for m in await drain(q, source)] == ["src-1"]  # ...not for queue mode
    delivered = await drain(q, sink)
    assert [(m["data"], m["partition"]) for m in delivered] == [({"text": "bonjour"}, "fr")]


async def test_a_failing_transaction_changes_nothing(q: Queen) -> None:
    source, sink = unique("txf-src"), unique("txf-sink")
    await q.queue(source).push([{"data": "keep me", "transactionId": "real"}])
    [message] = await q.queue(source).wait(False).pop()
    ghost = {"transactionId": "no-such-message", "partitionId": message["partitionId"]}

    with pytest.raises(Exception, match="Message not found"):
        await q.transaction().queue(sink).push([{"data": "must not appear"}]).ack(message).ack(ghost).commit()
    assert await drain(q, sink) == []
    # the ack of the real message was rolled back too: it comes back once its lease is released
    retried = await q.ack(message, "retry")
    assert retried["success"] is True
    assert [m["data"] for m in await drain(q, source)] == ["keep me"]


# -- lease renewal -------------------------------------------------------------------------------------------


async def test_renew_keeps_a_lease_past_its_lease_time(q: Queen, http: httpx.AsyncClient) -> None:
    """``renew`` extends the lease on the broker. The 0.15.0 client reports ``success: False`` even so: it
    sends no body and reads ``newExpiresAt`` from the array the broker answers (API.md 7 and 20.13), so this
    test asserts on the broker's effect: the renewed partition stays leased while an unrenewed one expires."""
    queue = unique("renew")
    group = unique("slow")
    await q.queue(queue).config({"lease_time": 3}).create()
    await q.queue(queue).partition("renewed").push([{"data": "kept"}])
    await q.queue(queue).partition("control").push([{"data": "expires"}])
    [kept] = await q.queue(queue).partition("renewed").group(group).wait(False).pop()
    [control] = await q.queue(queue).partition("control").group(group).wait(False).pop()

    renewed = await q.renew(kept)
    # 'success' in the result is the client's misreading (see the docstring): not asserted
    assert isinstance(renewed, dict) and renewed["leaseId"] == kept["leaseId"]

    # the control lease was not renewed: once it has expired, its message is delivered again...
    again = await eventually(
        lambda: q.queue(queue).partition("control").group(group).wait(False).pop(),
        bool,
        what="the unrenewed lease to expire",
    )
    assert [m["transactionId"] for m in again] == [control["transactionId"]]
    # ...while the renewed partition, leased at the same time as the control one, is still leased
    assert await q.queue(queue).partition("renewed").group(group).wait(False).pop() == []
    detail = (await http.get(f"/api/v1/consumer-groups/{group}")).json()
    leases = {p["partition"]: p["leaseActive"] for p in detail[queue]["partitions"]}
    assert leases["renewed"] is True
    acked = await q.ack(kept, True, {"group": group})  # carries the leaseId: the lease is still valid
    assert acked["success"] is True, acked


# -- queue deletion ------------------------------------------------------------------------------------------


async def test_deleting_a_queue_removes_its_messages(q: Queen, http: httpx.AsyncClient) -> None:
    queue = unique("delete")
    await q.queue(queue).push([{"data": {"n": n}, "transactionId": f"x{n}"} for n in range(3)])
    deleted = await q.queue(queue).delete()
    assert deleted["deleted"] is True and deleted["queue"] == queue and deleted["existed"] is True

    assert await q.queue(queue).batch(10).wait(False).pop() == []
    assert (await http.get(f"/api/v1/resources/queues/{queue}")).json() == {"error": "Queue not found"}
    # the transaction ids are free again: the same push is a new message, not a duplicate
    pushed = await q.queue(queue).push([{"data": {"n": 0}, "transactionId": "x0"}])
    assert [r["status"] for r in pushed] == ["queued"]
    assert [m["data"] for m in await drain(q, queue)] == [{"n": 0}]
    assert (await q.queue(unique("never-existed")).delete())["existed"] is False
