"""Issue 16's three-stage pipeline, written with the official ``queen-mq`` client the way Queen's users write
it: ``batch(1).each().auto_ack(False)`` consumers, an ``on_error`` callback that nacks with the group and the
error text, and a transaction that acks and hands off to the next stage. The queues keep the default
``retryDelay`` (1000 ms), so every redelivery waits for it: the DLQ path runs through ``retry_available_at``
and the long-poll re-checks, not through an immediate re-pop.

Expected: each of the 14 poison messages delivered 3 times (retryLimit 2) and dead-lettered, the other 86
through every stage once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from queen import Queen

from helpers import unique

MESSAGES, PARTITIONS, POISON_EVERY = 100, 10, 7



async def test_pipeline_with_each_consumers_on_error_nacks_and_default_retry_delay(q: Queen) -> None:
    suffix = unique("")
    queues = {stage: f"chat.{stage}.{suffix}" for stage in ("translate", "route", "notify")}
    for name in queues.values():
        await q.queue(name).config({
            "leaseTime": 8, "retryLimit": 2, "deadLetterQueue": True, "dlqAfterMaxRetries": True,
            "retentionEnabled": True, "retentionSeconds": 3600, "completedRetentionSeconds": 300}).create()
    counts: Counter[str] = Counter()
    through: Counter[int] = Counter()
    stop = asyncio.Event()

    def stage(name: str, following: str | None) -> Any:
        group = f"{name}-worker"

        async def handler(message: dict[str, Any]) -> None:
            counts[f"{name} attempts"] += 1
            if message["data"]["poison"]:
                raise RuntimeError(f"cannot {name} message {message['data']['n']}")
            if following is None:
                await q.ack(message, True, {"group": group})
                through[message["data"]["n"]] += 1
                return
            await (q.transaction().ack(message, "completed", {"consumer_group": group})
                   .queue(queues[following]).partition(message["partition"])
                   .push([{"data": message["data"]}]).commit())

        async def on_error(message: dict[str, Any], error: Exception) -> None:
            counts[f"{name} failures"] += 1
            await q.ack(message, False, {"group": group, "error": str(error)})

        return (q.queue(queues[name]).group(group).batch(1).each().auto_ack(False)
                .consume(handler, signal=stop).on_error(on_error))

    consumers = [asyncio.ensure_future(stage("translate", "route")),
                 asyncio.ensure_future(stage("route", "notify")), asyncio.ensure_future(stage("notify", None))]
    try:
        for n in range(1, MESSAGES + 1):
            await q.queue(queues["translate"]).partition(f"chat-{n % PARTITIONS}").push(
                [{"data": {"n": n, "poison": n % POISON_EVERY == 0}, "transactionId": f"msg-{n}"}])
        poisoned = MESSAGES // POISON_EVERY
        deadline = time.monotonic() + 60
        dead: dict[str, Any] = {}
        while time.monotonic() < deadline:
            dead = await q.queue(queues["translate"]).dlq("translate-worker").limit(100).get()
            if dead["total"] >= poisoned and len(through) >= MESSAGES - poisoned:
                break
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        for consumer in consumers:
            consumer.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)

    assert dead["total"] == poisoned, (dict(counts), dead["total"])
    assert sorted(m["data"]["n"] for m in dead["messages"]) == [n for n in range(1, MESSAGES + 1)
                                                                if n % POISON_EVERY == 0]
    assert counts["translate failures"] == poisoned * 3
    assert counts["translate attempts"] == (MESSAGES - poisoned) + poisoned * 3
    assert sorted(through) == [n for n in range(1, MESSAGES + 1) if n % POISON_EVERY]
    assert set(through.values()) == {1}  # none duplicated
    assert counts["route attempts"] == counts["notify attempts"] == MESSAGES - poisoned
