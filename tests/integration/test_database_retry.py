"""A procedure call that PostgreSQL rolls back for a deadlock is made again (``Database.call``,
:data:`queenpy.store.database.Transient`): its caller sees one answer, and what it stores is stored once.

The deadlock is a real one: another transaction locks the second of the push's two partitions, the push
locks the first and waits for the second, and the other transaction then asks for the first. The push's
session, waiting longest, finds the cycle and is the one cancelled (the other's ``deadlock_timeout`` is
longer)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import orjson

from queenpy.store.database import Database

LOCK = "SELECT 1 FROM queen.partitions WHERE id = $1 FOR UPDATE"
PUSH_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%push_items_v3%'
"""
STORED = """
SELECT p.name, p.last_seq, (SELECT count(*) FROM queen.messages m WHERE m.partition_id = p.id)
FROM queen.partitions p ORDER BY p.name
"""
DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"


async def deadlocks_after(holder: asyncpg.Connection, before: int) -> int:
    """The database's deadlock count once it moved past ``before`` (a backend reports it within a second
    or so), or as it is after 10 s."""
    for _ in range(100):
        await holder.execute("SELECT pg_stat_clear_snapshot()")
        count: int = await holder.fetchval(DEADLOCKS)
        if count > before:
            return count
        await asyncio.sleep(0.1)
    return count


async def test_a_push_cancelled_by_a_deadlock_is_made_again_and_stored_once(db_url: str) -> None:
    database = Database(db_url, 2)
    await database.open()
    holder = await asyncpg.connect(db_url)
    try:
        items = [{"queue": "retry", "partition": name, "payload": 1} for name in ("a", "b")]
        made = orjson.loads(await database.call("push_items_v3", orjson.dumps(items).decode()))
        first, second = sorted(uuid.UUID(result[3]) for result in made)  # the push's lock order
        deadlocks = await holder.fetchval(DEADLOCKS)

        await holder.execute("SET deadlock_timeout = '10s'")  # the push's session (1 s) finds the cycle
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(LOCK, second)
        push = asyncio.create_task(database.call("push_items_v3", orjson.dumps(items).decode()))
        for _ in range(200):  # the push holds the first partition and waits for the second
            if await database.fetchval(PUSH_WAITING):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the push never waited for the second partition")
        await holder.execute(LOCK, first)  # granted once PostgreSQL cancelled the push's first attempt
        assert not push.done()  # its second attempt waits for this transaction
        await transaction.commit()
        answer = orjson.loads(await asyncio.wait_for(push, 30))

        assert [result[1] for result in answer] == ["q", "q"]
        assert await deadlocks_after(holder, deadlocks) == deadlocks + 1
        stored = await holder.fetch(STORED)
        assert [tuple(row) for row in stored] == [("a", 2, 2), ("b", 2, 2)]
    finally:
        await holder.close()
        await database.close()
