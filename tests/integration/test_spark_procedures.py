"""The broker side of the Spark connector: heads, range reads, cursor commits, idempotent batch sink."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import psycopg

from queenpy.services.jobs import RetentionJob
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

from helpers import call_procedure


def sql_json(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return orjson.loads(row[0])


def test_heads_range_reads_and_cursor(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(conn, "push_items_v1", [{"queue": "src", "partition": "a", "payload": i} for i in range(5)])
        call_procedure(conn, "push_items_v1", [{"queue": "src", "partition": "b", "payload": i} for i in range(3)])
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('src', 'spark')::text")
        heads = {p["partition"]: (p["head"], p["cursor"]) for p in offsets["partitions"]}
        assert heads == {"a": (5, None), "b": (3, None)}
        a = next(p["partitionId"] for p in offsets["partitions"] if p["partition"] == "a")
        page = sql_json(conn, "SELECT queen.spark_messages_v1(%s::uuid, 1, 4, 2)::text", a)
        assert [(m["offset"], m["data"]) for m in page["messages"]] == [(2, 1), (3, 2)]
        assert page["queue"] == "src" and page["partition"] == "a"
        # no lease was taken: a normal pop still gets everything
        assert len(call_procedure(conn, "pop_v1", [{"queue": "src", "partition": "a", "batch": 10}])[0]
                   ["messages"]) == 5
        result = sql_json(conn, "SELECT queen.spark_commit_cursor_v1('src', 'spark', %s::jsonb)::text",
                          orjson.dumps({a: 4}).decode())
        assert result == {"success": True, "partitionsUpdated": 1}
        # never moves backwards
        sql_json(conn, "SELECT queen.spark_commit_cursor_v1('src', 'spark', %s::jsonb)::text",
                 orjson.dumps({a: 2}).decode())
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('src', 'spark')::text")
        assert {p["partition"]: p["cursor"] for p in offsets["partitions"]} == {"a": 4, "b": None}
        lag = sql_json(conn, "SELECT queen.consumer_group_detail_v1('spark')::text")
        assert [p["offsetLag"] for p in lag["src"]["partitions"]] == [1]


def test_micro_batch_commit_is_all_or_nothing_and_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        def stage(token: str, items: list[dict[str, Any]], batch: int = 7) -> Any:
            return sql_json(conn, "SELECT queen.spark_stage_v1(%s::jsonb)::text", orjson.dumps(
                {"queryId": "q1", "batchId": batch, "token": token, "items": items}).decode())

        stage("t1", [{"queue": "dst", "partition": "p", "payload": 1, "transactionId": "x1"}])
        stage("t2", [{"queue": "dst", "partition": "p", "payload": 2, "transactionId": "x2"}])
        stage("orphan", [{"queue": "dst", "partition": "p", "payload": 99}])  # a killed task attempt
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (0,)
        commit = {"queryId": "q1", "batchId": 7, "tokens": ["t1", "t2"]}
        first = sql_json(conn, "SELECT queen.spark_commit_batch_v1(%s::jsonb)::text", orjson.dumps(commit).decode())
        assert first["duplicate"] is False and first["pushed"] == 2
        # the same batch again (Spark replays it after a crash): nothing pushed twice
        stage("t1-retry", [{"queue": "dst", "partition": "p", "payload": 1, "transactionId": "x1"}])
        again = sql_json(conn, "SELECT queen.spark_commit_batch_v1(%s::jsonb)::text", orjson.dumps(
            {"queryId": "q1", "batchId": 7, "tokens": ["t1-retry"]}).decode())
        assert again == {"success": True, "duplicate": True, "pushed": 0}
        assert conn.execute("SELECT count(*) FROM queen.spark_staging").fetchone() == (0,)
        rows = conn.execute("SELECT payload, seq FROM queen.messages ORDER BY seq").fetchall()
        assert rows == [(1, 1), (2, 2)]
        stage("t9", [{"queue": "dst", "payload": 3}], batch=8)
        aborted = sql_json(conn, "SELECT queen.spark_abort_v1(%s::jsonb)::text", orjson.dumps(
            {"queryId": "q1", "batchId": 8, "tokens": ["t9"]}).decode())
        assert aborted == {"success": True, "deleted": 1}


def test_retention_and_the_spark_reader_agree_on_offsets(db_url: str) -> None:
    """Completed retention deletes up to the Spark group's cursor and no further; the offsets report it as the
    partition's earliest offset, and a read from the group's cursor (or from earliest) meets no gap."""
    async def retention() -> int:
        database = Database(db_url, 2)
        await database.open()
        try:
            return (await RetentionJob(ServiceSettings()).run(database)).rows
        finally:
            await database.close()

    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(conn, "configure_queue_v1", {"queue": "events", "options": {"completedRetentionSeconds": 60}})
        call_procedure(conn, "push_items_v1", [{"queue": "events", "payload": i} for i in range(10)])
        conn.execute("UPDATE queen.messages SET created_at = now() - interval '1 hour'")
        pid = sql_json(conn, "SELECT queen.spark_offsets_v1('events', 'spark')::text")["partitions"][0]["partitionId"]
        sql_json(conn, "SELECT queen.spark_commit_cursor_v1('events', 'spark', %s::jsonb)::text",
                 orjson.dumps({pid: 6}).decode())
        assert asyncio.run(retention()) == 6
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('events', 'spark')::text")["partitions"][0]
        assert (offsets["head"], offsets["cursor"], offsets["earliest"]) == (10, 6, 6)
        page = sql_json(conn, "SELECT queen.spark_messages_v1(%s::uuid, 6, 10, 100)::text", pid)
        assert [m["offset"] for m in page["messages"]] == [7, 8, 9, 10]
