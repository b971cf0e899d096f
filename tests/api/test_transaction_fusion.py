"""Group commit through the route: concurrent ``POST /api/v1/transaction`` requests fused into one procedure
call, each answered on its own, and a call that dies (its backend terminated) failing every member with
nothing applied.

The broker runs one worker with one transaction call in flight (``QUEEN_TRANSACTION_MAX_CONCURRENT=1``), so
requests sent while a call is held queue up and go together into the next one. A call is held by a row lock
that this test takes on a consumer row (``SELECT ... FOR UPDATE``): the acknowledgment of that partition waits
for it inside the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import psycopg

from helpers import wait_until

QUEUE_MODE = "__QUEUE_MODE__"


async def setup(client: httpx.AsyncClient, partitions: int) -> list[dict[str, Any]]:
    """One message in each of ``partitions`` partitions of ``src``, popped with a lease."""
    await client.post(
        "/api/v1/push",
        json={
            "items": [{"queue": "src", "partition": f"p{p}", "payload": {"p": p}} for p in range(partitions)]
        },
    )
    messages = []
    for p in range(partitions):
        answer = (await client.get(f"/api/v1/pop/queue/src/partition/p{p}", params={"wait": "false"})).json()
        messages.append(answer["messages"][0])
    return messages


def hand_off(message: dict[str, Any], pushed: str, **extra: Any) -> dict[str, Any]:
    return {
        "operations": [
            {
                "type": "ack",
                "transactionId": message["transactionId"],
                "partitionId": message["partitionId"],
                "status": "completed",
                "leaseId": message["leaseId"],
            },
            {
                "type": "push",
                "items": [
                    {"queue": "dst", "payload": {"from": message["transactionId"]}, "transactionId": pushed}
                ],
            },
        ],
        "requiredLeases": [message["leaseId"]],
        **extra,
    }


def lock_consumer_rows(database_url: str, messages: list[dict[str, Any]]) -> psycopg.Connection[Any]:
    """A connection holding the consumer rows of these messages' partitions locked (until rollback)."""
    conn = psycopg.connect(database_url)
    for message in messages:
        conn.execute(
            "SELECT 1 FROM queen.partition_consumers WHERE partition_id = %s AND consumer_group = %s "
            "FOR UPDATE",
            (message["partitionId"], QUEUE_MODE),
        )
    return conn


def waiting_call(database_url: str, not_pid: int | None = None) -> Callable[[], int | None]:
    """The pid of a broker backend running queen.transaction_v3 (or v2) and waiting for a lock, if any."""

    def find() -> int | None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'queenpy' "
                "AND query LIKE '%%transaction_v%%' AND wait_event_type = 'Lock' "
                "AND pid IS DISTINCT FROM %s",
                (not_pid,),
            ).fetchone()
        return None if row is None else int(row[0])

    return find


async def fusion_stats(client: httpx.AsyncClient) -> dict[str, Any]:
    stats: dict[str, Any] = (await client.get("/metrics")).json()["fusion"]["transaction"]
    return stats


async def wait_pending(client: httpx.AsyncClient, n: int) -> None:
    for _ in range(600):
        if (await fusion_stats(client))["pending"] == n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {n} transactions pending")


def stored(database_url: str, queue: str) -> list[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON "
            "p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = %s "
            "ORDER BY m.seq",
            (queue,),
        ).fetchall()
    return [r[0] for r in rows]


async def test_concurrent_requests_fused_one_bad_among_good(db_url: str, start_broker: Any) -> None:
    broker = start_broker(db_url, workers=1, extra_env={"QUEEN_TRANSACTION_MAX_CONCURRENT": "1"})
    async with httpx.AsyncClient(base_url=broker.url, timeout=60) as client:
        m = await setup(client, 3)
        holder = lock_consumer_rows(db_url, [m[0]])
        first = asyncio.create_task(client.post("/api/v1/transaction", json=hand_off(m[0], "a")))
        await asyncio.to_thread(
            wait_until, waiting_call(db_url), message="the first call waiting on the lock"
        )
        bad_ack = hand_off(m[1], "c")
        bad_ack["operations"][0].update(transactionId="no-such-message", leaseId=None)
        del bad_ack["requiredLeases"]  # b, before it, ends that lease
        group = [
            hand_off(m[1], "b"),
            bad_ack,
            hand_off(m[2], "d"),
            {
                "operations": [
                    {"type": "push", "items": [{"queue": "dst", "payload": 1, "transactionId": "e"}]}
                ],
                "requiredLeases": ["no-such-lease"],
            },
        ]
        tasks = []
        for n, body in enumerate(group, 1):  # queued one after the other: the group commits in this order
            tasks.append(asyncio.create_task(client.post("/api/v1/transaction", json=body)))
            await wait_pending(client, n)
        holder.rollback()
        holder.close()
        answers = [(await task).json() for task in [first, *tasks]]
        assert [a["success"] for a in answers] == [True, True, False, True, False]
        assert answers[2]["error"] == "ACK operation failed: Message not found"
        assert answers[4]["error"] == "Required lease no-such-lease is expired or released"
        assert [r["transactionId"] for r in answers[1]["results"]] == [m[1]["transactionId"], "b"]
        stats = await fusion_stats(client)
        assert (stats["requests"], stats["calls"], stats["maxBatchSeen"]) == (
            5,
            2,
            7,
        )  # 2 + 2 + 2 + 1 operations
    assert stored(db_url, "dst") == ["a", "b", "d"]


async def test_a_terminated_group_fails_every_member_and_applies_nothing(
    db_url: str, start_broker: Any
) -> None:
    """The backend running a fused group is terminated while the group's second member waits (the first one
    has acked and pushed): every member is answered ``{success: false, error}`` (no results), nothing of the
    group stays, and the same requests sent again commit once each."""
    broker = start_broker(db_url, workers=1, extra_env={"QUEEN_TRANSACTION_MAX_CONCURRENT": "1"})
    async with httpx.AsyncClient(base_url=broker.url, timeout=60) as client:
        m = await setup(client, 4)
        holder = lock_consumer_rows(db_url, [m[0], m[2]])
        bodies = [hand_off(message, name) for message, name in zip(m, "abcd")]
        first = asyncio.create_task(client.post("/api/v1/transaction", json=bodies[0]))
        lone = await asyncio.to_thread(wait_until, waiting_call(db_url), message="the first call waiting")
        tasks = []
        for n, body in enumerate(bodies[1:], 1):  # queued one after the other: the group keeps this order
            tasks.append(asyncio.create_task(client.post("/api/v1/transaction", json=body)))
            await wait_pending(client, n)
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (lone,))
            lone_answer = (await first).json()
            assert lone_answer["success"] is False and "results" not in lone_answer
            # the group of b, c, d runs now: b is done, c waits for its consumer row
            grouped = await asyncio.to_thread(
                wait_until, waiting_call(db_url, lone), message="the group waiting"
            )
            assert stored(db_url, "dst") == []  # b's push is not visible: not committed
            admin.execute("SELECT pg_terminate_backend(%s)", (grouped,))
            answers = [(await task).json() for task in tasks]
        holder.rollback()
        holder.close()
        assert all(a["success"] is False and "results" not in a for a in answers), answers
        assert len({a["error"] for a in answers}) == 1  # one error, the call's
        stats = await fusion_stats(client)
        assert (stats["calls"], stats["errors"]) == (2, 2)
        assert stored(db_url, "dst") == []
        with psycopg.connect(db_url, autocommit=True) as conn:
            cursors = conn.execute(
                "SELECT last_consumed_seq FROM queen.partition_consumers WHERE partition_id = %s",
                (m[1]["partitionId"],),
            ).fetchall()
        assert cursors == [(0,)]  # b's ack was rolled back with the rest
        again = [(await client.post("/api/v1/transaction", json=body)).json() for body in bodies]
        assert [a["success"] for a in again] == [True] * 4, again
    assert sorted(stored(db_url, "dst")) == ["a", "b", "c", "d"]
