"""The client's fluent grammar and what it puts on the wire, checked against a recording mock transport.

No broker here: ``WireStub`` answers canned JSON per route (the answers are copied from API.md) and records
every request, so these tests pin the wire contract the client sends and how it reads the answers.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from queenpy.client import AsyncQueen, Message, RetryPolicy, Timeout
from queenpy.errors import (
    AuthenticationError,
    BrokerError,
    DatabaseUnavailable,
    InvalidRequest,
    PermissionDenied,
    TransactionFailed,
)

PARTITION_ID = "6f1c1d3e-0000-4000-8000-000000000000"
LEASE_ID = "0190c6b2-1f2e-7a00-8000-00000000abcd"

Responder = Callable[[httpx.Request], httpx.Response | Any]


class WireStub:
    """Route table for ``httpx.MockTransport``: ``(method, path regex) -> responder``; records requests."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern[str], Responder]] = []
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, responder: Responder | Any) -> WireStub:
        function = responder if callable(responder) else (lambda request, value=responder: value)
        self.routes.insert(0, (method, re.compile(path + r"$"), function))
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        for method, pattern, responder in self.routes:
            if request.method == method and pattern.match(request.url.path):
                answer = responder(request)
                if isinstance(answer, httpx.Response):
                    return answer
                if answer is None:
                    return httpx.Response(200, content=b"", headers={"content-type": "application/json"})
                return httpx.Response(200, json=answer)
        return httpx.Response(404, text="Not Found")

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and re.match(path + "$", r.url.path)]


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


def client(stub: WireStub, urls: str | list[str] = "http://broker:6632", **kwargs: Any) -> AsyncQueen:
    return AsyncQueen(urls, transport=httpx.MockTransport(stub), **kwargs)


def pop_answer(*items: dict[str, Any], queue: str = "q", group: str = "__QUEUE_MODE__") -> dict[str, Any]:
    messages = [
        {
            "id": f"m-{item['transactionId']}",
            "traceId": None,
            "producerSub": None,
            "createdAt": "2026-04-26T10:59:28.267966Z",
            "partitionId": PARTITION_ID,
            "partition": "Default",
            "leaseId": LEASE_ID,
            "consumerGroup": group,
            **item,
        }
        for item in items
    ]
    return {
        "success": True,
        "queue": queue,
        "partition": "Default",
        "partitionId": PARTITION_ID,
        "leaseId": LEASE_ID,
        "consumerGroup": group,
        "partitionsClaimed": 1,
        "messages": messages,
    }


def push_answer(request: httpx.Request) -> list[dict[str, Any]]:
    return [
        {
            "index": index,
            "transaction_id": item["transactionId"],
            "status": "queued",
            "message_id": f"m{index}",
            "partition_id": PARTITION_ID,
            "trace_id": None,
            "queueName": item["queue"],
        }
        for index, item in enumerate(body(request)["items"])
    ]


# -- queue configuration ---------------------------------------------------------------------------------


async def test_create_sends_camel_case_options_and_namespace() -> None:
    stub = WireStub().on(
        "POST",
        "/api/v1/configure",
        lambda r: {"configured": True, "queue": "orders", "options": body(r)["options"]},
    )
    async with client(stub) as q:
        answer = (
            await q.queue("orders")
            .namespace("billing")
            .config({"leaseTime": 8, "retry_limit": 2, "deadLetterQueue": True})
            .create()
        )
    assert answer["configured"] is True
    sent = body(stub.sent("POST", "/api/v1/configure")[0])
    assert sent == {
        "queue": "orders",
        "namespace": "billing",
        "options": {"leaseTime": 8, "retryLimit": 2, "deadLetterQueue": True},
    }


async def test_create_raises_the_error_of_the_answer() -> None:
    stub = WireStub().on("POST", "/api/v1/configure", {"error": "queue is required"})
    async with client(stub) as q:
        with pytest.raises(BrokerError, match="queue is required"):
            await q.queue("orders").create()


async def test_delete_uses_the_resources_route() -> None:
    stub = WireStub().on(
        "DELETE", "/api/v1/resources/queues/a.b", {"deleted": True, "queue": "a.b", "existed": True}
    )
    async with client(stub) as q:
        assert (await q.queue("a.b").delete())["existed"] is True


# -- push ------------------------------------------------------------------------------------------------


async def test_push_sends_items_to_the_partition_and_returns_results_in_order() -> None:
    stub = WireStub().on("POST", "/api/v1/push", push_answer)
    async with client(stub) as q:
        results = (
            await q.queue("chat")
            .partition("chat-7")
            .push([{"data": {"text": "a"}, "transactionId": "t-1"}, {"text": "b"}])
        )
    items = body(stub.requests[0])["items"]
    assert [item["payload"] for item in items] == [{"text": "a"}, {"text": "b"}]
    assert {item["partition"] for item in items} == {"chat-7"} and items[0]["transactionId"] == "t-1"
    assert [r.status for r in results] == ["queued", "queued"]
    assert [r.transaction_id for r in results] == [items[0]["transactionId"], items[1]["transactionId"]]


async def test_push_defaults_to_the_default_partition() -> None:
    stub = WireStub().on("POST", "/api/v1/push", push_answer)
    async with client(stub) as q:
        await q.queue("chat").push({"text": "single item"})
    assert body(stub.requests[0])["items"][0]["partition"] == "Default"


async def test_push_with_a_failed_item_raises_with_all_results() -> None:
    def answer(request: httpx.Request) -> list[dict[str, Any]]:
        results = push_answer(request)
        results[1] = {"status": "failed", "error": "queue full"}
        return results

    stub = WireStub().on("POST", "/api/v1/push", answer)
    async with client(stub) as q:
        with pytest.raises(BrokerError, match="queue full") as raised:
            await q.queue("chat").push([1, 2])
    assert [r.status for r in raised.value.details["results"]] == ["queued", "failed"]


async def test_buffered_push_waits_for_max_size_or_flush() -> None:
    stub = WireStub().on("POST", "/api/v1/push", push_answer)
    async with client(stub) as q:
        buffered = q.queue("chat").partition("p").buffer(max_size=3, max_wait_ms=60_000)
        results = await buffered.push([1, 2])
        assert [r.status for r in results] == ["pending", "pending"] and stub.requests == []
        await buffered.push([3, 4])  # reaches max_size: one batch of 3 goes out
        await q.flush_all_buffers()  # the 4th
        assert q.buffer_stats()["pending"] == 0
    batches = [[item["payload"] for item in body(r)["items"]] for r in stub.sent("POST", "/api/v1/push")]
    assert batches == [[1, 2, 3], [4]]


# -- pop -------------------------------------------------------------------------------------------------


async def test_pop_sends_the_query_of_api_md_and_builds_messages() -> None:
    stub = WireStub().on(
        "GET",
        "/api/v1/pop/queue/chat/partition/p1",
        pop_answer({"transactionId": "t-1", "data": {"x": 1}}, queue="chat", group="g"),
    )
    async with client(stub) as q:
        messages = (
            await q.queue("chat").partition("p1").group("g").batch(5).wait(True).timeout_millis(2000).pop()
        )
    request = stub.requests[0]
    assert dict(request.url.params) == {"batch": "5", "wait": "true", "timeout": "2000", "consumerGroup": "g"}
    assert request.extensions["timeout"]["read"] == pytest.approx(2.0 + 5.0)
    assert [(m.transaction_id, m.queue, m.consumer_group, m.data) for m in messages] == [
        ("t-1", "chat", "g", {"x": 1})
    ]


async def test_long_poll_http_timeout_is_the_poll_timeout_plus_five_seconds() -> None:
    stub = WireStub().on("GET", "/api/v1/pop/queue/chat", None)
    async with client(stub, timeout=Timeout(request_s=1.0)) as q:
        assert await q.queue("chat").wait(True).timeout_millis(40_000).pop() == []
    assert stub.requests[0].extensions["timeout"]["read"] == pytest.approx(45.0)


async def test_pop_without_partition_is_a_wildcard_pop_with_options() -> None:
    stub = WireStub().on("GET", "/api/v1/pop/queue/chat", None)
    async with client(stub) as q:
        await q.queue("chat").auto_ack(True).partitions(4).subscription_mode("new").pop()
    assert dict(stub.requests[0].url.params) == {
        "batch": "1",
        "wait": "false",
        "timeout": "30000",
        "autoAck": "true",
        "subscriptionMode": "new",
        "partitions": "4",
    }


@pytest.mark.parametrize(
    "answer",
    [
        None,
        {"success": False, "error": "no_available_partition", "messages": []},
        {"success": False, "error": "lease_held", "messages": []},
        {
            "success": True,
            "queue": "chat",
            "partition": "",
            "partitionId": None,
            "leaseId": None,
            "messages": [],
        },
    ],
)
async def test_pop_answers_that_mean_nothing_give_an_empty_list(answer: Any) -> None:
    stub = WireStub().on("GET", "/api/v1/pop/queue/chat", answer)
    async with client(stub) as q:
        assert await q.queue("chat").pop() == []


async def test_pop_database_error_raises() -> None:
    stub = WireStub().on(
        "GET", "/api/v1/pop/queue/chat", {"success": False, "error": "relation does not exist"}
    )
    async with client(stub) as q:
        with pytest.raises(BrokerError, match="relation"):
            await q.queue("chat").pop()


# -- ack, renew ------------------------------------------------------------------------------------------


async def test_single_ack_sends_lease_and_group_of_the_message() -> None:
    stub = WireStub().on(
        "POST",
        "/api/v1/ack",
        [
            {
                "index": 0,
                "transactionId": "t-1",
                "success": True,
                "error": None,
                "leaseReleased": True,
                "dlq": False,
            }
        ],
    )
    message = Message.from_wire(pop_answer({"transactionId": "t-1"}, group="g")["messages"][0], queue="q")
    async with client(stub) as q:
        result = await q.ack(message, False, error="boom")
    assert result.success and result.lease_released and not result.dlq
    assert body(stub.requests[0]) == {
        "transactionId": "t-1",
        "partitionId": PARTITION_ID,
        "status": "failed",
        "error": "boom",
        "consumerGroup": "g",
        "leaseId": LEASE_ID,
    }


async def test_refused_ack_is_reported_not_raised() -> None:
    stub = WireStub().on(
        "POST",
        "/api/v1/ack",
        [{"index": 0, "transactionId": "t", "success": False, "error": "Invalid or expired lease"}],
    )
    async with client(stub) as q:
        result = await q.ack({"transactionId": "t", "partitionId": PARTITION_ID, "leaseId": LEASE_ID})
    assert not result.success and result.error == "Invalid or expired lease"


async def test_list_ack_uses_the_batch_route_and_keeps_order() -> None:
    def answer(request: httpx.Request) -> list[dict[str, Any]]:
        return [
            {
                "index": 10 + i,
                "transactionId": a["transactionId"],
                "success": True,
                "dlq": a["status"] == "dlq",
            }
            for i, a in enumerate(body(request)["acknowledgments"])
        ]

    stub = WireStub().on("POST", "/api/v1/ack/batch", answer)
    messages = [
        Message.from_wire(item, queue="q")
        for item in pop_answer({"transactionId": "a"}, {"transactionId": "b"})["messages"]
    ]
    async with client(stub) as q:
        results = await q.ack(messages, "dlq", group="g")
    sent = body(stub.requests[0])
    assert sent["consumerGroup"] == "g"
    assert [a["transactionId"] for a in sent["acknowledgments"]] == ["a", "b"]
    assert [(r.transaction_id, r.dlq) for r in results] == [("a", True), ("b", True)]


async def test_renew_sends_seconds_and_reads_the_array_answer() -> None:
    stub = WireStub().on(
        "POST",
        f"/api/v1/lease/{LEASE_ID}/extend",
        [
            {
                "index": 0,
                "leaseId": LEASE_ID,
                "success": True,
                "error": None,
                "expiresAt": "2026-05-01T00:00:30.000Z",
            }
        ],
    )
    async with client(stub) as q:
        renewal = await q.renew(LEASE_ID, 30)
    assert body(stub.requests[0]) == {"seconds": 30}
    assert renewal.success and renewal.expires_at is not None and renewal.expires_at.second == 30


# -- transaction, dlq, consumer groups --------------------------------------------------------------------


async def test_transaction_sends_ack_and_push_operations() -> None:
    stub = WireStub().on(
        "POST", "/api/v1/transaction", {"transactionId": "x", "success": True, "results": []}
    )
    message = Message.from_wire(pop_answer({"transactionId": "t-1"})["messages"][0], queue="chat.translate")
    async with client(stub) as q:
        await (
            q.transaction()
            .ack(message)
            .queue("chat.route")
            .partition("chat-3")
            .push([{"data": {"text": "hola"}, "transactionId": "t-1.route"}])
            .commit()
        )
    sent = body(stub.requests[0])
    assert sent["operations"] == [
        {
            "type": "ack",
            "transactionId": "t-1",
            "partitionId": PARTITION_ID,
            "status": "completed",
            "leaseId": LEASE_ID,
        },
        {
            "type": "push",
            "items": [
                {
                    "queue": "chat.route",
                    "partition": "chat-3",
                    "payload": {"text": "hola"},
                    "transactionId": "t-1.route",
                }
            ],
        },
    ]
    assert sent["requiredLeases"] == [LEASE_ID]


async def test_rolled_back_transaction_raises_with_results() -> None:
    stub = WireStub().on(
        "POST",
        "/api/v1/transaction",
        {
            "transactionId": "x",
            "success": False,
            "error": "ACK operation failed: Message not found",
            "results": [{"index": 0, "success": False}],
        },
    )
    async with client(stub) as q:
        with pytest.raises(TransactionFailed, match="Message not found") as raised:
            await q.transaction().ack({"transactionId": "t", "partitionId": PARTITION_ID}).commit()
    assert raised.value.results == [{"index": 0, "success": False}]
    with pytest.raises(ValueError):
        await AsyncQueen("http://x:1").transaction().commit()


async def test_dlq_query_and_replay() -> None:
    row = {
        "id": "m",
        "transactionId": "t",
        "partitionId": PARTITION_ID,
        "queue": "q",
        "partition": "Default",
        "consumerGroup": "__QUEUE_MODE__",
        "errorMessage": "boom",
        "retryCount": 2,
        "data": 1,
        "createdAt": "2026-05-01T00:00:00.000Z",
        "failedAt": "2026-05-01T00:00:01.000Z",
    }
    stub = (
        WireStub()
        .on("GET", "/api/v1/dlq", {"messages": [row], "total": 7, "pagination": {}})
        .on("POST", f"/api/v1/messages/{PARTITION_ID}/t/retry", {"success": True})
    )
    async with client(stub) as q:
        page = await q.queue("q").dlq("g").limit(1).offset(2).get()
        assert await q.replay_dlq(page.messages[0]) == {"success": True}
    assert dict(stub.requests[0].url.params) == {
        "queue": "q",
        "limit": "1",
        "offset": "2",
        "consumerGroup": "g",
    }
    assert page.total == 7 and page.messages[0].error_message == "boom"


async def test_consumer_group_routes() -> None:
    stub = (
        WireStub()
        .on("GET", "/api/v1/consumer-groups", None)
        .on("GET", "/api/v1/consumer-groups/g 1", None)
        .on("POST", "/api/v1/consumer-groups/g/queues/q/seek", lambda r: {"success": True, **body(r)})
        .on("POST", "/api/v1/consumer-groups/g/subscription", lambda r: {"success": True, **body(r)})
        .on("DELETE", "/api/v1/consumer-groups/g", {"success": True})
    )
    async with client(stub) as q:
        assert await q.consumer_groups() == []
        assert await q.consumer_group("g 1") == {}
        assert (await q.seek("g", "q", to_end=True))["toEnd"] is True
        assert (await q.seek("g", "q", timestamp="2026-01-01T00:00:00Z"))[
            "timestamp"
        ] == "2026-01-01T00:00:00Z"
        assert (await q.update_consumer_group_timestamp("g", "2026-01-01T00:00:00Z"))["success"]
        await q.delete_consumer_group("g", delete_metadata=False)
        with pytest.raises(ValueError):
            await q.seek("g", "q")
    assert stub.sent("DELETE", "/api/v1/consumer-groups/g")[0].url.params["deleteMetadata"] == "false"
    assert stub.sent("GET", "/api/v1/consumer-groups/g 1")[0].url.raw_path == b"/api/v1/consumer-groups/g%201"


# -- errors, failover, auth ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, InvalidRequest), (401, AuthenticationError), (403, PermissionDenied)],
)
async def test_client_errors_map_to_the_exception_tree_and_are_not_retried(status: int, error: type) -> None:
    stub = WireStub().on("POST", "/api/v1/push", httpx.Response(status, json={"error": "nope"}))
    async with client(stub) as q:
        with pytest.raises(error, match="nope"):
            await q.queue("q").push(1)
    assert len(stub.requests) == 1


async def test_503_everywhere_raises_database_unavailable_after_the_retries() -> None:
    stub = WireStub().on("GET", "/health", httpx.Response(503, json={"status": "unhealthy"}))
    async with client(stub, retry=RetryPolicy(attempts=2, initial_delay_s=0)) as q:
        with pytest.raises(DatabaseUnavailable):
            await q.health()
    assert len(stub.requests) == 2


async def test_failover_moves_to_the_next_url_and_stays_there() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"status": "healthy", "host": request.url.host})

    stub = WireStub().on("GET", "/health", answer)
    async with client(stub, ["http://a:6632", "http://b:6632"]) as q:
        assert (await q.health())["host"] == "b"
        assert (await q.health())["host"] == "b"
    assert [r.url.host for r in stub.requests] == ["a", "b", "b"]


async def test_5xx_fails_over_too() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            return httpx.Response(500, json={"error": "internal"})
        return httpx.Response(200, json=push_answer(request))

    stub = WireStub().on("POST", "/api/v1/push", answer)
    async with client(stub, ["http://a:6632", "http://b:6632"]) as q:
        assert [r.status for r in await q.queue("q").push([1])] == ["queued"]


async def test_bearer_token_is_sent() -> None:
    stub = WireStub().on("GET", "/health", {"status": "healthy"})
    async with client(stub, token="secret-jwt") as q:
        await q.health()
    assert stub.requests[0].headers["authorization"] == "Bearer secret-jwt"


def test_bad_urls_are_refused() -> None:
    with pytest.raises(ValueError):
        AsyncQueen("localhost:6632")
    with pytest.raises(ValueError):
        AsyncQueen([])


# -- consume ---------------------------------------------------------------------------------------------


class QueueStub(WireStub):
    """Serves ``count`` messages one per pop, then empty answers; records acks and renewals."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.pending = [f"t-{n}" for n in range(count)]
        self.acks: list[tuple[str, str, str | None]] = []
        self.renewed = asyncio.Event()
        self.on("GET", "/api/v1/pop/queue/q", self.pop)
        self.on("POST", "/api/v1/ack", self.ack)
        self.on("POST", "/api/v1/ack/batch", self.ack_batch)
        self.on("POST", f"/api/v1/lease/{LEASE_ID}/extend", self.extend)

    def pop(self, request: httpx.Request) -> Any:
        batch = int(request.url.params["batch"])
        taken, self.pending = self.pending[:batch], self.pending[batch:]
        return pop_answer(*({"transactionId": t, "data": t} for t in taken)) if taken else None

    def ack(self, request: httpx.Request) -> Any:
        sent = body(request)
        self.acks.append((sent["transactionId"], sent["status"], sent.get("error")))
        if sent["status"] == "failed":  # the broker redelivers a failed batch
            self.pending.insert(0, sent["transactionId"])
        return [{"index": 0, "transactionId": sent["transactionId"], "success": True}]

    def ack_batch(self, request: httpx.Request) -> Any:
        sent = body(request)
        self.acks.extend((a["transactionId"], a["status"], a.get("error")) for a in sent["acknowledgments"])
        return [
            {"index": i, "transactionId": a["transactionId"], "success": True}
            for i, a in enumerate(sent["acknowledgments"])
        ]

    def extend(self, request: httpx.Request) -> Any:
        self.renewed.set()
        return [{"index": 0, "leaseId": LEASE_ID, "success": True, "expiresAt": None}]


async def test_consume_handles_up_to_the_limit_and_acks_each_message() -> None:
    stub = QueueStub(5)
    seen: list[str] = []

    async def handler(message: Message) -> None:
        seen.append(message.data)

    async with client(stub) as q:
        handled = await q.queue("q").limit(3).consume(handler)
    assert handled == 3 and seen == ["t-0", "t-1", "t-2"]
    assert stub.acks == [("t-0", "completed", None), ("t-1", "completed", None), ("t-2", "completed", None)]


async def test_consume_batches_go_to_the_handler_as_lists_and_are_acked_together() -> None:
    stub = QueueStub(4)
    batches: list[list[str]] = []
    async with client(stub) as q:
        await (
            q.queue("q")
            .batch(2)
            .limit(4)
            .consume(lambda messages: batches.append([m.data for m in messages]))
        )
    assert batches == [["t-0", "t-1"], ["t-2", "t-3"]]
    assert [a[1] for a in stub.acks] == ["completed"] * 4


async def test_a_failing_handler_is_acked_failed_and_redelivered() -> None:
    stub = QueueStub(2)
    attempts: list[str] = []

    async def handler(message: Message) -> None:
        attempts.append(message.data)
        if message.data == "t-0" and attempts.count("t-0") == 1:
            raise RuntimeError("poisoned once")

    async with client(stub) as q:
        await q.queue("q").limit(3).consume(handler)
    assert attempts == ["t-0", "t-0", "t-1"]
    assert stub.acks[0] == ("t-0", "failed", "poisoned once")


async def test_on_error_replaces_the_automatic_failed_ack() -> None:
    stub = QueueStub(1)
    errors: list[str] = []

    def on_error(message: Message, error: BaseException) -> None:
        errors.append(f"{message.transaction_id}: {error}")

    async with client(stub) as q:
        await q.queue("q").limit(1).auto_ack(False).consume(lambda m: 1 / 0, on_error=on_error)
    assert errors == ["t-0: division by zero"] and stub.acks == []


async def test_consume_stops_on_idle() -> None:
    stub = QueueStub(2)
    async with client(stub) as q:
        handled = await q.queue("q").wait(False).idle_millis(300).consume(lambda m: None)
    assert handled == 2


async def test_lease_is_renewed_while_the_handler_runs() -> None:
    stub = QueueStub(1)

    async def slow_handler(message: Message) -> None:
        await asyncio.wait_for(stub.renewed.wait(), timeout=10)  # returns once a renewal went out

    async with client(stub) as q:
        await q.queue("q").limit(1).renew_lease(True, interval_millis=50).consume(slow_handler)
    assert len(stub.sent("POST", f"/api/v1/lease/{LEASE_ID}/extend")) >= 1
    assert stub.acks == [("t-0", "completed", None)]


async def test_stop_event_finishes_the_handler_in_flight() -> None:
    stub = QueueStub(10)
    stop = asyncio.Event()
    done: list[str] = []

    async def handler(message: Message) -> None:
        stop.set()  # stop requested while this handler is running
        await asyncio.sleep(0)
        done.append(message.data)

    async with client(stub) as q:
        handled = await q.queue("q").consume(handler, stop=stop)
    assert handled == 1 and done == ["t-0"] and stub.acks == [("t-0", "completed", None)]


async def test_close_stops_running_consumers() -> None:
    stub = QueueStub(100)
    q = client(stub)
    started = asyncio.Event()

    async def handler(message: Message) -> None:
        started.set()

    consuming = asyncio.create_task(q.queue("q").consume(handler))
    await started.wait()
    await q.close()
    handled = await consuming
    assert handled >= 1 and len(stub.acks) == handled


def test_cli_push_honours_a_partition_key_per_json_line() -> None:
    import pytest

    from queenpy.cli.messages import _partition_runs

    items = [
        {"data": 1, "partition": "a"},
        {"data": 2, "partition": "a"},
        {"x": 3},
        {"data": 4, "partition": "b"},
    ]
    assert _partition_runs(items, None) == [("a", items[:2]), (None, [items[2]]), ("b", [items[3]])]
    assert _partition_runs([{"x": 1}], "dflt") == [("dflt", [{"x": 1}])]
    with pytest.raises(ValueError, match="partition must be a string"):
        _partition_runs([{"data": 1, "partition": 5}], None)
