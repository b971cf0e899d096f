"""EXPLAIN guard for the wildcard pop over partitions that all have work (issue 44): the scale bench's bulk
seed (``queenpy.bench.kinds.scale``) gives every partition its own newest-message time, as pushes made over
time do, and the group's scan floor then skips the partitions the group has emptied. Seeded with one shared
time (the 1M run of issue 44), the floor stayed at that time and every pop's candidate scan walked all of
them: pop + ack at 1,000,000 partitions ran at 0.089 x its rate at 100 (journal, issue 44). Also: the kind's
retention pass deletes exactly one message a partition, however late after the seed it runs."""

from __future__ import annotations

import asyncio
import datetime
import json
from types import SimpleNamespace
from typing import Any

import psycopg

from queenpy.bench.kinds import scale
from queenpy.bench.postgres import Sql
from queenpy.services.jobs import Pace, _delete_kind
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

from helpers import call_procedure

PARTITIONS = 4_000
EMPTIED = PARTITIONS // 2
LIMIT = 18  # what pop_group_v1 asks of the candidate scan for 5 fused pops


def rows_removed(plan: dict[str, Any]) -> int:
    return int(plan.get("Rows Removed by Filter", 0)) + sum(rows_removed(p) for p in plan.get("Plans", []))


def seed_wide(db_url: str) -> None:
    """Queue ``wide``: PARTITIONS partitions seeded by the scale kind's own SQL (``scale._seed``)."""
    sql = Sql(db_url)
    try:
        scale._seed(SimpleNamespace(sql=sql, log=lambda line: None), "wide", PARTITIONS, scale.STORED)  # type: ignore[arg-type]
    finally:
        sql.close()


def test_wildcard_pop_skips_the_partitions_a_group_emptied_in_the_seeded_queue(db_url: str) -> None:
    seed_wide(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'wide'").fetchone()[0]  # type: ignore[index]
        # group g0 has read and acked the first half of the partitions (in the scan's order) to their end
        conn.execute(
            """
            UPDATE queen.partition_consumers c
            SET last_consumed_seq = p.last_seq, last_consumed_id = p.last_message_id,
                last_consumed_created_at = p.last_message_at
            FROM (SELECT id, last_seq, last_message_id, last_message_at FROM queen.partitions
                  WHERE queue_id = %s AND last_message_at IS NOT NULL ORDER BY last_message_at LIMIT %s) p
            WHERE c.partition_id = p.id AND c.consumer_group = 'g0'""",
            (queue_id, EMPTIED),
        )
        conn.execute("ANALYZE queen.partitions")
        conn.execute("ANALYZE queen.partition_consumers")

        # five fused wildcard pops: the first computes the floor, all get the 5 messages left of a partition
        pops = call_procedure(
            conn, "pop_group_v1", [{"queue": "wide", "consumerGroup": "g0", "batch": 10, "autoAck": True}] * 5
        )
        assert [len(p["messages"]) for p in pops] == [5] * 5
        floor = conn.execute(
            "SELECT last_empty_scan_at FROM queen.consumer_watermarks WHERE queue_name = 'wide' "
            "AND consumer_group = 'g0'"
        ).fetchone()
        assert floor is not None

        row = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM queen.pop_candidates_v2(%s, 'g0', %s, '{}', %s)",
            (queue_id, floor[0], LIMIT),
        ).fetchone()
        assert row is not None
        plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
        assert plan["Actual Rows"] == LIMIT
        # the scan starts at the first partition with work: at most the 5 just emptied are passed over, never
        # the EMPTIED partitions before them
        assert rows_removed(plan) <= 5, plan
        distinct = conn.execute(
            "SELECT count(DISTINCT last_message_at) FROM queen.partitions WHERE queue_id = %s", (queue_id,)
        ).fetchone()
        assert distinct == (PARTITIONS,)


async def retention_at(url: str, run_at: datetime.datetime) -> dict[str, int]:
    """The retention job's pass over every queue with a retention period (``_delete_kind``, its steps and
    batch size), as if it ran at ``run_at``, flat out."""
    database = Database(url, pool_size=1)
    await database.open()
    try:
        return await _delete_kind(
            database, Pace(1.0), "retention", ServiceSettings().retention_batch_size, run_at
        )
    finally:
        await database.close()


def test_retention_of_the_seeded_queue_deletes_one_message_a_partition_however_late_it_runs(
    db_url: str,
) -> None:
    """The kind's retention period is chosen from the seed's two times when the pass starts: run 28 minutes
    after the seed (as in the 1M run, whose one-hour period then deleted every message), it deletes exactly
    the first message of every partition."""
    partitions = 300
    sql = Sql(db_url)
    try:
        seeded = scale._seed(
            SimpleNamespace(sql=sql, log=lambda line: None), "kept", partitions, scale.STORED
        )  # type: ignore[arg-type]
        queue_id = scale._queue_id(SimpleNamespace(sql=sql), "kept")  # type: ignore[arg-type]
        for minutes_later in (28, 80):
            run_at = sql.fetchval(f"SELECT now() + interval '{minutes_later} minutes'")
            keep = scale.retention_seconds(seeded, run_at)
            sql.execute(
                "UPDATE queen.queues SET retention_enabled = true, retention_seconds = $1 "
                "WHERE id = $2::uuid",
                keep,
                queue_id,
            )
            done = asyncio.run(retention_at(db_url, run_at))  # the retention job's own steps, at run_at
            assert done["deleted"] == (partitions if minutes_later == 28 else 0), (minutes_later, done)
        left = sql.fetchval(
            "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
            "WHERE p.queue_id = $1::uuid",
            queue_id,
        )
        assert left == partitions * (scale.STORED - 1)
    finally:
        sql.close()


def buffers(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> int:
    """Shared buffers a call touched, everything it ran inside included."""
    row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
    assert row is not None
    plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def test_consumer_group_pages_read_a_page_not_the_group(db_url: str) -> None:
    """The consumer-group detail and lagging routes' pages (queen.consumer_group_detail_v2,
    queen.consumer_groups_lagging_v2) read about as much at 4,000 partitions x 10 groups as a page needs; v1
    read every cursor of the group (detail) or of every group (lagging)."""
    seed_wide(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("UPDATE queen.messages SET created_at = created_at - interval '1 day'")  # all lag a day
        page = json.loads(
            conn.execute("SELECT queen.consumer_group_detail_v2('g3', NULL, 50)::text").fetchone()[0]  # type: ignore[index]
        )
        assert len(page["wide"]["partitions"]) == 50 and page["wide"]["nextCursor"] is not None
        lagging = json.loads(
            conn.execute(
                "SELECT queen.consumer_groups_lagging_v2(3600, NULL, NULL, 50, 5000)::text"
            ).fetchone()[0]  # type: ignore[index]
        )
        assert len(lagging["rows"]) == 50 and lagging["nextCursor"] is not None

        detail_v1 = buffers(conn, "SELECT queen.consumer_group_detail_v1('g3')", ())
        detail_v2 = buffers(conn, "SELECT queen.consumer_group_detail_v2('g3', NULL, 50)", ())
        lagging_v1 = buffers(conn, "SELECT queen.consumer_groups_lagging_v1(3600)", ())
        lagging_v2 = buffers(conn, "SELECT queen.consumer_groups_lagging_v2(3600, NULL, NULL, 50, 5000)", ())
        # a page of 50 rows: 4 probes each (cursor, partition, queue, oldest message), the stats row, planning
        assert detail_v2 < 2_000, (detail_v2, detail_v1)
        assert lagging_v2 < 2_000, (lagging_v2, lagging_v1)
        assert detail_v1 > 10 * detail_v2 and lagging_v1 > 10 * lagging_v2, (
            detail_v1,
            detail_v2,
            lagging_v1,
            lagging_v2,
        )


def test_the_message_list_reads_the_cursors_of_its_page_not_of_every_partition(db_url: str) -> None:
    """The message list's consumption mode (queen.consumption_mode_v1, with sorting allowed) reads the cursors
    of the listed partitions only. Under the list's enable_sort = off, PostgreSQL 16 planned its
    count(DISTINCT consumer_group) as a walk of the whole (consumer_group, partition_id) index: every cursor
    of the database per list, 0.5-1.7 s at 200,000 partitions x 10 groups on the embedded server (journal,
    issue 44)."""
    seed_wide(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET jit = off")  # as the broker's connections
        for params in ({"limit": 50, "queue": "wide", "partition": "p7"}, {"limit": 50, "queue": "wide"}):
            text = json.dumps(params)
            listed = json.loads(
                conn.execute("SELECT queen.messages_list_v4(%s::jsonb)::text", (text,)).fetchone()[0]  # type: ignore[index]
            )
            # one partition: its messages of the last hour (the seed's first one is two hours old)
            assert len(listed["messages"]) == (scale.STORED - 1 if "partition" in params else 50), listed
            assert listed["mode"] == {"type": "bus", "hasQueueMode": False, "busGroupsCount": scale.GROUPS}
        # one partition's list: its page, its cursors and the partition probe (224 buffers when written), not
        # the 40,000 cursors of the queue, whose index and heap rows the mode walked on PostgreSQL 16 without
        # sorting (1,138; a gap that grows with the partitions)
        text = json.dumps({"limit": 50, "queue": "wide", "partition": "p7"})
        listed_buffers = buffers(conn, "SELECT queen.messages_list_v4(%s::jsonb)", (text,))
        assert listed_buffers < 600, listed_buffers
