"""Queen's transactional-pipeline recipe with the official ``queen-mq`` Python client, written as Queen's own
script writes it with the JS client (``tests/js/use_case_pipeline.mjs``, issue 38) and judged by the same stop
rule:

- three queues ``uc-pipeline.translate``, ``.route`` and ``.notify``, deleted then configured with
  leaseTime 8, retryLimit 2, the DLQ on and retention, **no retryDelay**;
- 100 messages, one per partition ``chat-0`` .. ``chat-99`` (transactionId ``chat-<i>``), all pushed
  before any consumer starts;
- three ``batch(1).each()`` consumers started at once; translate fails ``idx % 7 == 0 and idx != 0``
  (14 poison messages) and its ``on_error`` nacks with the group and the error; a success hands off with a
  transaction (ack + push to the next stage's partition); notify acks on the client (auto-ack);
- every 500 ms: once notify has counted 86, read the translate DLQ once and judge.

A failed ack with retries left is redelivered on the next pop, as in Queen, so the 14 poison messages (3
attempts each) are in the DLQ by the time the 86 good ones are through.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import httpx
from queen import Queen

MESSAGES = 100
QUEUES = {"translate": "uc-pipeline.translate", "route": "uc-pipeline.route", "notify": "uc-pipeline.notify"}
OPTIONS = {
    "leaseTime": 8,
    "retryLimit": 2,
    "deadLetterQueue": True,
    "dlqAfterMaxRetries": True,
    "retentionEnabled": True,
    "retentionSeconds": 3600,
    "completedRetentionSeconds": 300,
}


async def test_queens_pipeline_by_its_stop_rule_with_the_official_python_client(
    q: Queen, broker: Any
) -> None:
    for name in QUEUES.values():
        await q.queue(name).delete()
        await q.queue(name).config(OPTIONS).create()
    for idx in range(MESSAGES):
        chat_id = f"chat-{idx}"
        await (
            q.queue(QUEUES["translate"])
            .partition(chat_id)
            .push(
                [
                    {
                        "transactionId": chat_id,
                        "data": {"chatId": chat_id, "idx": idx, "text": f"message {idx}"},
                    }
                ]
            )
        )

    counts: Counter[str] = Counter()
    stop = asyncio.Event()

    def hand_off(stage: str, following: str, group: str, done: str) -> Any:
        async def handler(message: dict[str, Any]) -> None:
            data = message["data"]
            if stage == "translate":
                counts["translate attempts"] += 1
                if data["idx"] % 7 == 0 and data["idx"] != 0:
                    raise RuntimeError(f"cannot translate message {data['idx']}")
            await (
                q.transaction()
                .ack(message, "completed", {"consumer_group": group})
                .queue(QUEUES[following])
                .partition(data["chatId"])
                .push([{"data": data}])
                .commit()
            )
            counts[done] += 1

        async def on_error(message: dict[str, Any], error: Exception) -> None:
            counts[f"{stage} failures"] += 1
            await q.ack(message, False, {"group": group, "error": str(error)})

        return (
            q.queue(QUEUES[stage])
            .group(group)
            .batch(1)
            .each()
            .auto_ack(False)
            .consume(handler, signal=stop)
            .on_error(on_error)
        )

    async def notified(_message: dict[str, Any]) -> None:
        counts["notified"] += 1

    started = time.monotonic()
    consumers = [
        asyncio.ensure_future(hand_off("translate", "route", "translator", "translated")),
        asyncio.ensure_future(hand_off("route", "notify", "router", "routed")),
        asyncio.ensure_future(
            q.queue(QUEUES["notify"]).group("notifier").batch(1).each().consume(notified, signal=stop)
        ),
    ]
    at_stop: dict[str, Any] = {}
    try:
        while time.monotonic() - started < 120 and not at_stop:
            await asyncio.sleep(0.5)
            if counts["notified"] >= MESSAGES - 14:
                at_stop = dict(counts)
                async with httpx.AsyncClient(base_url=broker.url) as http:
                    dlq = (
                        await http.get("/api/v1/dlq", params={"queue": QUEUES["translate"], "limit": 500})
                    ).json()
                at_stop["dlq"] = dlq["total"]
    finally:
        stop.set()
        for consumer in consumers:
            consumer.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)

    assert at_stop, f"notify never reached 86: {dict(counts)}"
    assert at_stop["routed"] == 86 and at_stop["notified"] == 86, at_stop
    assert at_stop["dlq"] == 14, at_stop
    assert at_stop["translate attempts"] >= 128 and at_stop["translate failures"] == 42, at_stop
