"""The queenpy client against the real broker (``broker`` fixture: ``queenpy serve`` on its own PostgreSQL).

Every test uses its own queue names (uuid suffix), since the broker is shared by the session. Conditions that
take a moment on the broker side are awaited by polling with a deadline, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from queenpy.client import AsyncQueen, Message, Queen, RetryPolicy
from queenpy.errors import TransactionFailed

from helpers import closed_port_url

T = TypeVar("T")
DEADLINE_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], deadline_s: float = DEADLINE_S
) -> T:
    """Call ``probe`` until ``accept(result)``; fail with the last result after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        result = await probe()
        if accept(result) or time.monotonic() > end:
            assert accept(result), f"condition not reached within {deadline_s} s; last result: {result!r}"
            return result
        await asyncio.sleep(0.05)


@pytest.fixture
async def q(broker: Any) -> AsyncIterator[AsyncQueen]:
    async with AsyncQueen(broker.url) as client:
        yield client


async def drain(q: AsyncQueen, queue: str, group: str | None = None, batch: int = 10) -> list[Message]:
    """Pop and ack until the queue has nothing more for ``group``."""
    delivered: list[Message] = []
    while True:
        builder = q.queue(queue).batch(batch)
        if group:
            builder = builder.group(group)
        messages = await builder.pop()
        if not messages:
            return delivered
        delivered.extend(messages)
        assert all(result.success for result in await q.ack(messages))


# -- push, pop, ack ----------------------------------------------------------------------------------------


async def test_pushed_messages_are_popped_once_in_order(q: AsyncQueen) -> None:
    queue = unique("order")
    await (
        q.queue(queue).partition("p").push([{"data": {"n": n}, "transactionId": f"t{n}"} for n in range(25)])
    )
    delivered = await drain(q, queue, batch=7)
    assert [m.data["n"] for m in delivered] == list(range(25))
    assert {m.partition for m in delivered} == {"p"} and {m.queue for m in delivered} == {queue}
    assert all(m.created_at is not None and m.lease_id for m in delivered)


async def test_a_repeated_transaction_id_is_a_duplicate(q: AsyncQueen) -> None:
    queue = unique("dedupe")
    first = await q.queue(queue).push([{"data": 1, "transactionId": "same"}])
    again = await q.queue(queue).push([{"data": 2, "transactionId": "same"}])
    assert [r.status for r in first + again] == ["queued", "duplicate"]
    assert again[0].message_id == first[0].message_id
    assert [m.data for m in await drain(q, queue)] == [1]


async def test_consumer_groups_each_get_every_message(q: AsyncQueen) -> None:
    queue = unique("fanout")
    await q.queue(queue).push([{"n": n} for n in range(5)])
    for group in ("billing", "audit"):
        delivered = await drain(q, queue, group)
        assert [m.data["n"] for m in delivered] == list(range(5))
        assert {m.consumer_group for m in delivered} == {group}


async def test_long_poll_returns_a_message_pushed_while_waiting(q: AsyncQueen) -> None:
    queue = unique("longpoll")
    await q.queue(queue).config({"leaseTime": 30}).create()
    waiting = asyncio.create_task(q.queue(queue).wait(True).timeout_millis(20_000).pop())
    await q.queue(queue).push([{"hello": "world"}])
    messages = await waiting
    assert [m.data for m in messages] == [{"hello": "world"}]


async def test_server_auto_ack_pop_holds_no_lease(q: AsyncQueen) -> None:
    queue = unique("autoack")
    await q.queue(queue).push([1, 2])
    first = await q.queue(queue).auto_ack(True).pop()
    assert [m.data for m in first] == [1] and first[0].lease_id is None
    assert [m.data for m in await q.queue(queue).pop()] == [2]


async def test_buffered_pushes_arrive_in_order_after_flush(q: AsyncQueen) -> None:
    queue = unique("buffer")
    for n in range(25):
        await q.queue(queue).partition("p").buffer(max_size=10, max_wait_ms=60_000).push({"n": n})
    await q.flush_all_buffers()
    assert q.buffer_stats()["pending"] == 0
    assert [m.data["n"] for m in await drain(q, queue)] == list(range(25))


async def test_one_pop_can_claim_several_partitions(q: AsyncQueen) -> None:
    queue = unique("multi")
    for partition in ("a", "b", "c"):
        await q.queue(queue).partition(partition).push([{"p": partition}])
    messages = await q.queue(queue).partitions(3).batch(10).pop()
    assert sorted(m.data["p"] for m in messages) == ["a", "b", "c"]
    assert len({m.lease_id for m in messages}) == 1  # one lease covers every claimed partition
    assert all(result.success for result in await q.ack(messages))


async def test_namespace_pop_finds_the_queue_by_namespace(q: AsyncQueen) -> None:
    namespace = unique("ns")
    queue = f"{namespace}.jobs"
    await q.queue(queue).namespace(namespace).task("jobs").create()
    await q.queue(queue).push([{"job": 1}])
    messages = await q.queue().namespace(namespace).pop()
    assert [(m.queue, m.data) for m in messages] == [(queue, {"job": 1})]
    assert (await q.ack(messages[0])).success


# -- failures, retries, dead letters ----------------------------------------------------------------------


async def test_failed_acks_redeliver_then_dead_letter_after_retry_limit(q: AsyncQueen) -> None:
    queue = unique("retry")
    await (
        q.queue(queue)
        .config({"leaseTime": 30, "retryLimit": 2, "retryDelay": 0, "deadLetterQueue": True})
        .create()
    )
    await q.queue(queue).push(
        [{"data": "poison", "transactionId": "bad"}, {"data": "fine", "transactionId": "ok"}]
    )
    attempts = 0
    results = []
    while attempts < 10:
        messages = await q.queue(queue).wait(True).timeout_millis(5000).pop()
        assert messages and messages[0].data == "poison"
        attempts += 1
        result = await q.ack(messages[0], False, error=f"attempt {attempts} failed")
        results.append(result)
        if result.dlq:
            break
    assert attempts == 3 and [r.dlq for r in results] == [False, False, True]
    page = await q.queue(queue).dlq().get()
    assert [(row.transaction_id, row.error_message) for row in page.messages] == [("bad", "attempt 3 failed")]
    assert page.total == 1 and page.messages[0].data == "poison"
    assert [m.data for m in await drain(q, queue)] == ["fine"]


async def test_consume_with_auto_ack_retries_a_failing_handler(q: AsyncQueen) -> None:
    queue = unique("consume-retry")
    await q.queue(queue).config({"leaseTime": 30, "retryLimit": 5, "retryDelay": 0}).create()
    await q.queue(queue).push([{"n": 1}, {"n": 2}])
    attempts: list[int] = []

    async def flaky(message: Message) -> None:
        attempts.append(message.data["n"])
        if attempts.count(1) < 2 and message.data["n"] == 1:
            raise RuntimeError("first attempt fails")

    handled = await q.queue(queue).limit(3).consume(flaky)
    assert handled == 3 and attempts == [1, 1, 2]
    assert await q.queue(queue).pop() == []


async def test_consume_spreads_partitions_over_workers_and_delivers_each_message_once(q: AsyncQueen) -> None:
    queue = unique("workers")
    for partition in ("a", "b", "c"):
        await q.queue(queue).partition(partition).push([{"p": partition, "n": n} for n in range(10)])
    seen: list[tuple[str, int]] = []

    async def record(message: Message) -> None:
        seen.append((message.data["p"], message.data["n"]))

    handled = await q.queue(queue).concurrency(3).batch(4).each().limit(30).consume(record)
    assert handled == 30 and len(seen) == 30 and len(set(seen)) == 30
    for partition in ("a", "b", "c"):
        assert [n for p, n in seen if p == partition] == list(range(10))  # order per partition


@pytest.mark.slow
async def test_lease_is_renewed_while_a_slow_handler_runs(q: AsyncQueen, broker: Any) -> None:
    queue = unique("renew")
    lease_time_s = 2
    await q.queue(queue).config({"leaseTime": lease_time_s}).create()
    await q.queue(queue).push([{"slow": True}])
    stolen: list[Message] = []
    handling = asyncio.Event()

    async def slow(message: Message) -> None:
        handling.set()
        await asyncio.sleep(lease_time_s * 2.5)  # simulated work, longer than the lease

    async def thief() -> None:
        async with AsyncQueen(broker.url) as other:
            await handling.wait()
            while not consumer.done():
                stolen.extend(await other.queue(queue).pop())
                await asyncio.sleep(0.1)

    consumer = asyncio.create_task(q.queue(queue).limit(1).consume(slow))
    await asyncio.gather(consumer, thief())
    assert consumer.result() == 1 and stolen == []
    assert await q.queue(queue).pop() == []


# -- transactions --------------------------------------------------------------------------------------------


async def test_transaction_acks_and_pushes_atomically(q: AsyncQueen) -> None:
    source, target = unique("tx-src"), unique("tx-dst")
    await q.queue(source).push([{"step": 1}])
    [message] = await q.queue(source).pop()
    answer = await (
        q.transaction()
        .ack(message)
        .queue(target)
        .partition("p9")
        .push([{"data": {"step": 2}, "transactionId": "next"}])
        .commit()
    )
    assert answer["success"] is True
    assert await q.queue(source).pop() == []
    [moved] = await q.queue(target).pop()
    assert (moved.data, moved.partition, moved.transaction_id) == ({"step": 2}, "p9", "next")


async def test_a_failed_transaction_changes_nothing(q: AsyncQueen) -> None:
    source, target = unique("tx-src"), unique("tx-dst")
    await q.queue(source).push([{"step": 1}])
    [message] = await q.queue(source).pop()
    ghost = {"transactionId": "does-not-exist", "partitionId": message.partition_id}
    with pytest.raises(TransactionFailed):
        await q.transaction().queue(target).push([{"never": True}]).ack(ghost).commit()
    assert await q.queue(target).pop() == []
    assert (await q.ack(message)).success


# -- consumer groups, seek, subscription ---------------------------------------------------------------------


async def test_seek_to_end_skips_old_messages_for_a_group(q: AsyncQueen) -> None:
    queue = unique("seek")
    await q.queue(queue).push([{"old": n} for n in range(3)])
    [first] = await q.queue(queue).group("g").pop()
    assert (await q.ack(first)).success
    answer = await q.seek("g", queue, to_end=True)
    assert answer["success"] is True
    assert await q.queue(queue).group("g").pop() == []
    await q.queue(queue).push([{"new": 1}])
    assert [m.data for m in await drain(q, queue, "g")] == [{"new": 1}]


async def test_seek_to_a_timestamp_replays_from_there(q: AsyncQueen) -> None:
    queue = unique("seek-ts")
    await q.queue(queue).push([{"n": 0}])
    assert len(await drain(q, queue, "g")) == 1
    answer = await q.seek("g", queue, timestamp=datetime(2000, 1, 1, tzinfo=UTC))
    assert answer["success"] is True
    assert [m.data for m in await drain(q, queue, "g")] == [{"n": 0}]


async def test_subscription_mode_new_skips_history(q: AsyncQueen) -> None:
    queue = unique("sub-new")
    await q.queue(queue).push([{"history": True}])
    assert await q.queue(queue).group("late").subscription_mode("new").pop() == []
    await q.queue(queue).push([{"history": False}])
    delivered = await eventually(
        lambda: q.queue(queue).group("late").subscription_mode("new").wait(True).timeout_millis(2000).pop(),
        lambda messages: bool(messages),
    )
    assert [m.data for m in delivered] == [{"history": False}]


async def test_consumer_group_listing_detail_and_delete(q: AsyncQueen) -> None:
    queue, group = unique("groups"), unique("grp")
    await q.queue(queue).partition("p").push([{"n": 1}, {"n": 2}])
    [message] = await q.queue(queue).group(group).pop()
    assert (await q.ack(message)).success
    rows = await q.consumer_groups()
    assert any(row["name"] == group and row["queueName"] == queue for row in rows)
    detail = await q.consumer_group(group)
    [partition] = detail[queue]["partitions"]
    assert partition["partition"] == "p" and partition["offsetLag"] == 1
    assert (await q.update_consumer_group_timestamp(group, datetime.now(UTC)))["success"] is True
    assert (await q.delete_consumer_group(group))["success"] is True
    assert await q.consumer_group(group) == {}


async def test_queue_listing_and_description(q: AsyncQueen) -> None:
    queue = unique("describe")
    await q.queue(queue).config({"leaseTime": 15}).create()
    await q.queue(queue).partition("p1").push([1, 2, 3])
    # counts come from the stats job (every STATS_INTERVAL_MS, 10 s by default)
    listed = await eventually(
        q.queues, lambda rows: any(row["name"] == queue and row["partitions"] >= 1 for row in rows)
    )
    assert next(row for row in listed if row["name"] == queue)["messages"]["total"] == 3
    described = await eventually(
        lambda: q.describe_queue(queue),
        lambda answer: any(p["name"] == "p1" and p["stats"]["total"] == 3 for p in answer["partitions"]),
    )
    assert described["name"] == queue
    assert (await q.queue(queue).delete())["deleted"] is True
    assert not any(row["name"] == queue for row in await q.queues())


async def test_dlq_replay_delivers_the_message_again(q: AsyncQueen) -> None:
    queue = unique("replay")
    await q.queue(queue).config({"retryLimit": 0, "retryDelay": 0, "deadLetterQueue": True}).create()
    await q.queue(queue).push([{"data": "again", "transactionId": "r1"}])
    [message] = await q.queue(queue).pop()
    assert (await q.ack(message, False, error="boom")).dlq
    page = await q.queue(queue).dlq().get()
    assert [row.transaction_id for row in page.messages] == ["r1"]
    await q.replay_dlq(page.messages[0])
    assert [m.transaction_id for m in await q.queue(queue).pop()] == ["r1"]


# -- failover, sync facade -----------------------------------------------------------------------------------


async def test_failover_to_the_second_url_when_the_first_is_down(broker: Any) -> None:
    queue = unique("failover")
    async with AsyncQueen([closed_port_url(), broker.url], retry=RetryPolicy(attempts=1)) as client:
        await client.queue(queue).push([{"via": "second"}])
        assert [m.data for m in await drain(client, queue)] == [{"via": "second"}]
        assert client._transport.current_url == broker.url


def test_sync_client_round_trip(broker: Any) -> None:
    queue = unique("sync")
    with Queen(broker.url) as q:
        q.queue(queue).config({"leaseTime": 30}).create()
        assert [r.status for r in q.queue(queue).push([{"n": 1}, {"n": 2}])] == ["queued", "queued"]
        seen: list[int] = []
        handled = q.queue(queue).limit(2).consume(lambda message: seen.append(message.data["n"]))
        assert handled == 2 and seen == [1, 2]
        assert q.queue(queue).pop() == []
