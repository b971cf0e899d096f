"""The broker side of the Spark connector: heads, range reads, cursor commits, idempotent batch sink."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import psycopg
import pytest

from queenpy.bench.core import BULK_LOAD
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
        call_procedure(
            conn, "push_items_v1", [{"queue": "src", "partition": "a", "payload": i} for i in range(5)]
        )
        call_procedure(
            conn, "push_items_v1", [{"queue": "src", "partition": "b", "payload": i} for i in range(3)]
        )
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('src', 'spark')::text")
        heads = {p["partition"]: (p["head"], p["cursor"]) for p in offsets["partitions"]}
        assert heads == {"a": (5, None), "b": (3, None)}
        a = next(p["partitionId"] for p in offsets["partitions"] if p["partition"] == "a")
        page = sql_json(conn, "SELECT queen.spark_messages_v1(%s::uuid, 1, 4, 2)::text", a)
        assert [(m["offset"], m["data"]) for m in page["messages"]] == [(2, 1), (3, 2)]
        assert page["queue"] == "src" and page["partition"] == "a"
        # no lease was taken: a normal pop still gets everything
        assert (
            len(
                call_procedure(conn, "pop_v1", [{"queue": "src", "partition": "a", "batch": 10}])[0][
                    "messages"
                ]
            )
            == 5
        )
        result = sql_json(
            conn,
            "SELECT queen.spark_commit_cursor_v1('src', 'spark', %s::jsonb)::text",
            orjson.dumps({a: 4}).decode(),
        )
        assert result == {"success": True, "partitionsUpdated": 1}
        # never moves backwards
        sql_json(
            conn,
            "SELECT queen.spark_commit_cursor_v1('src', 'spark', %s::jsonb)::text",
            orjson.dumps({a: 2}).decode(),
        )
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('src', 'spark')::text")
        assert {p["partition"]: p["cursor"] for p in offsets["partitions"]} == {"a": 4, "b": None}
        lag = sql_json(conn, "SELECT queen.consumer_group_detail_v1('spark')::text")
        assert [p["offsetLag"] for p in lag["src"]["partitions"]] == [1]


def test_micro_batch_commit_is_all_or_nothing_and_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:

        def stage(token: str, items: list[dict[str, Any]], batch: int = 7) -> Any:
            return sql_json(
                conn,
                "SELECT queen.spark_stage_v1(%s::jsonb)::text",
                orjson.dumps({"queryId": "q1", "batchId": batch, "token": token, "items": items}).decode(),
            )

        stage("t1", [{"queue": "dst", "partition": "p", "payload": 1, "transactionId": "x1"}])
        stage("t2", [{"queue": "dst", "partition": "p", "payload": 2, "transactionId": "x2"}])
        stage("orphan", [{"queue": "dst", "partition": "p", "payload": 99}])  # a killed task attempt
        assert conn.execute("SELECT count(*) FROM queen.messages").fetchone() == (0,)
        commit = {"queryId": "q1", "batchId": 7, "tokens": ["t1", "t2"]}
        first = sql_json(
            conn, "SELECT queen.spark_commit_batch_v1(%s::jsonb)::text", orjson.dumps(commit).decode()
        )
        assert first["duplicate"] is False and first["pushed"] == 2
        # the same batch again (Spark replays it after a crash): nothing pushed twice
        stage("t1-retry", [{"queue": "dst", "partition": "p", "payload": 1, "transactionId": "x1"}])
        again = sql_json(
            conn,
            "SELECT queen.spark_commit_batch_v1(%s::jsonb)::text",
            orjson.dumps({"queryId": "q1", "batchId": 7, "tokens": ["t1-retry"]}).decode(),
        )
        assert again == {"success": True, "duplicate": True, "pushed": 0}
        assert conn.execute("SELECT count(*) FROM queen.spark_staging").fetchone() == (0,)
        rows = conn.execute("SELECT payload, seq FROM queen.messages ORDER BY seq").fetchall()
        assert rows == [(1, 1), (2, 2)]
        stage("t9", [{"queue": "dst", "payload": 3}], batch=8)
        aborted = sql_json(
            conn,
            "SELECT queen.spark_abort_v1(%s::jsonb)::text",
            orjson.dumps({"queryId": "q1", "batchId": 8, "tokens": ["t9"]}).decode(),
        )
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
        call_procedure(
            conn, "configure_queue_v1", {"queue": "events", "options": {"completedRetentionSeconds": 60}}
        )
        call_procedure(conn, "push_items_v1", [{"queue": "events", "payload": i} for i in range(10)])
        conn.execute("UPDATE queen.messages SET created_at = now() - interval '1 hour'")
        pid = sql_json(conn, "SELECT queen.spark_offsets_v1('events', 'spark')::text")["partitions"][0][
            "partitionId"
        ]
        sql_json(
            conn,
            "SELECT queen.spark_commit_cursor_v1('events', 'spark', %s::jsonb)::text",
            orjson.dumps({pid: 6}).decode(),
        )
        assert asyncio.run(retention()) == 6
        offsets = sql_json(conn, "SELECT queen.spark_offsets_v1('events', 'spark')::text")["partitions"][0]
        assert (offsets["head"], offsets["cursor"], offsets["earliest"]) == (10, 6, 6)
        page = sql_json(conn, "SELECT queen.spark_messages_v1(%s::uuid, 6, 10, 100)::text", pid)
        assert [m["offset"] for m in page["messages"]] == [7, 8, 9, 10]


def stage_rows(
    conn: psycopg.Connection[Any],
    token: str,
    first: int,
    rows: list[tuple[str, str | None, str]],
    batch: int = 3,
    queue: str = "dst2",
    query: str = "q2",
) -> int:
    row = conn.execute(
        "SELECT queen.spark_stage_v2(%s, %s, %s, %s, %s, %s::text[], %s::text[], %s::uuid[], %s::text[], "
        "NULL, false)",
        (
            query,
            batch,
            token,
            first,
            queue,
            [r[0] for r in rows],
            [r[1] for r in rows],
            [None] * len(rows),
            [r[2] for r in rows],
        ),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_range_read_v2_returns_several_ranges_as_columns(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(
            conn,
            "push_items_v1",
            [
                {"queue": "r2", "partition": "a", "payload": {"i": i}, "transactionId": f"a{i}"}
                for i in range(5)
            ],
        )
        call_procedure(
            conn, "push_items_v1", [{"queue": "r2", "partition": "b", "payload": [i]} for i in range(3)]
        )
        ids = {
            p["partition"]: p["partitionId"]
            for p in sql_json(conn, "SELECT queen.spark_offsets_v1('r2', NULL)::text")["partitions"]
        }
        missing = "00000000-0000-4000-8000-000000000000"
        rows = conn.execute(
            "SELECT * FROM queen.spark_read_v2(%s::uuid[], %s::bigint[], %s::bigint[])",
            ([ids["b"], missing, ids["a"]], [1, 0, 0], [3, 9, 2]),
        ).fetchall()
        assert [(r[0], r[2], r[3], r[4]) for r in rows] == [(1, "b", "r2", [2, 3]), (3, "a", "r2", [1, 2])]
        assert [orjson.loads(t) for t in rows[0][6]] == [[1], [2]]  # payloads as JSON text, in offset order
        assert rows[1][5] == ["a0", "a1"] and rows[1][10] == []  # transaction ids; nothing encrypted
        assert all(isinstance(us, int) and us > 1_700_000_000_000_000 for us in rows[1][7])
        v2_created = rows[1][7]
        # version 5 (the broker's binary read): the same ranges, the payloads as one text with their lengths,
        # the rows in any order (the caller sorts them by range_index), the columns the caller names
        every = ["data", "transactionIds", "createdAtUs", "traceIds", "producerSubs"]
        rows = conn.execute(
            "SELECT * FROM queen.spark_read_v5(%s::uuid[], %s::bigint[], %s::bigint[], %s::text[]) "
            "ORDER BY range_index",
            ([ids["b"], missing, ids["a"]], [1, 0, 0], [3, 9, 2], every),
        ).fetchall()
        assert [(r[0], r[2], r[3], r[4]) for r in rows] == [(1, "b", "r2", [2, 3]), (3, "a", "r2", [1, 2])]
        assert (rows[0][6], rows[0][7]) == ("[1][2]", [3, 3])
        assert rows[1][5] == ["a0", "a1"] and rows[1][11] == []  # nothing encrypted (offsets when some are)
        assert rows[1][8] == v2_created and rows[1][9] == [None, None] and rows[1][10] == [None, None]
        # a column not named is NULL; the named ones and the ranges' identity are as with every column
        some = conn.execute(
            "SELECT * FROM queen.spark_read_v5(%s::uuid[], %s::bigint[], %s::bigint[], %s::text[]) "
            "ORDER BY range_index",
            ([ids["b"], missing, ids["a"]], [1, 0, 0], [3, 9, 2], ["data", "traceIds"]),
        ).fetchall()
        assert [r[:5] for r in some] == [r[:5] for r in rows]
        assert [(r[6], r[7], r[9], r[11]) for r in some] == [(r[6], r[7], r[9], r[11]) for r in rows]
        assert {(r[5], r[8], r[10]) for r in some} == {(None, None, None)}
        bare = conn.execute(
            "SELECT * FROM queen.spark_read_v5(%s::uuid[], %s::bigint[], %s::bigint[], '{}') "
            "ORDER BY range_index",
            ([ids["b"], missing, ids["a"]], [1, 0, 0], [3, 9, 2]),
        ).fetchall()
        assert [r[:5] for r in bare] == [r[:5] for r in rows]  # offsets always come (the gap check)
        assert {r[5:] for r in bare} == {(None,) * 7}


def test_micro_batch_commit_v2_is_all_or_nothing_once_and_in_task_order(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert stage_rows(conn, "t2", 0, [("p", "y1", '{"n": 3}'), ("p", "y2", '{"n": 4}')]) == 2
        assert stage_rows(conn, "t1", 0, [("p", "x1", '{"n": 1}')]) == 1
        assert stage_rows(conn, "t1", 1, [("q", "x2", '"two"'), ("p", "x1", '{"again": 1}')]) == 2
        # a retried chunk stages nothing twice and answers the same count
        assert stage_rows(conn, "t1", 1, [("q", "x2", '"two"'), ("p", "x1", '{"again": 1}')]) == 2
        stage_rows(conn, "orphan", 0, [("p", None, "99")])  # a killed task attempt
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            stage_rows(conn, "bad", 0, [("p", None, "{oops")])
        # a token whose rows are not all staged fails the batch, records nothing
        with pytest.raises(psycopg.Error, match="missing"):
            conn.execute(
                "SELECT queen.spark_commit_batch_v2(%s::jsonb)",
                (
                    orjson.dumps(
                        {"queryId": "q2", "batchId": 3, "tokens": ["t1", "t2"], "counts": [4, 2]}
                    ).decode(),
                ),
            )
        assert conn.execute(
            "SELECT count(*) FROM queen.spark_sink_batches WHERE query_id = 'q2'"
        ).fetchone() == (0,)
        commit = {"queryId": "q2", "batchId": 3, "tokens": ["t1", "t2"], "counts": [3, 2]}
        first = sql_json(
            conn, "SELECT queen.spark_commit_batch_v2(%s::jsonb)::text", orjson.dumps(commit).decode()
        )
        assert (first["duplicate"], first["pushed"], first["staged"], first["duplicates"]) == (False, 4, 5, 1)
        stored = conn.execute(
            "SELECT p.name, m.seq, m.transaction_id, m.payload FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 'dst2' ORDER BY p.name, m.seq"
        ).fetchall()
        # task order (t1 then t2), row order inside a task; the repeated x1 of t1 is skipped
        assert stored == [
            ("p", 1, "x1", {"n": 1}),
            ("p", 2, "y1", {"n": 3}),
            ("p", 3, "y2", {"n": 4}),
            ("q", 1, "x2", "two"),
        ]
        heads = {
            p["partition"]: p["head"]
            for p in sql_json(conn, "SELECT queen.spark_offsets_v1('dst2', NULL)::text")["partitions"]
        }
        assert heads == {"p": 3, "q": 1}
        # ids increase with the offsets of a partition, across commits too (the Streams SDK orders by them)
        stage_rows(conn, "t3", 0, [("p", "z1", "5"), ("p", "z2", "6")], batch=5)
        sql_json(
            conn,
            "SELECT queen.spark_commit_batch_v2(%s::jsonb)::text",
            orjson.dumps({"queryId": "q2", "batchId": 5, "tokens": ["t3"], "counts": [2]}).decode(),
        )
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT m.id::text FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id "
                "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dst2' AND p.name = 'p' "
                "ORDER BY m.seq"
            )
        ]
        assert len(ids) == 5 and ids == sorted(ids)
        assert conn.execute(
            "SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = 'q2'"
        ).fetchone() == (0,)
        # the same batch again (a replay after a crash): nothing pushed twice
        stage_rows(conn, "t1-retry", 0, [("p", "x1", '{"n": 1}')])
        again = sql_json(
            conn,
            "SELECT queen.spark_commit_batch_v2(%s::jsonb)::text",
            orjson.dumps({"queryId": "q2", "batchId": 3, "tokens": ["t1-retry"], "counts": [1]}).decode(),
        )
        assert again["duplicate"] is True and again["pushed"] == 0
        assert conn.execute("SELECT count(*) FROM queen.spark_staging_rows").fetchone() == (0,)
        # abort drops only the named tokens' rows and is idempotent
        stage_rows(conn, "t9", 0, [("p", None, "1")], batch=4)
        stage_rows(conn, "t10", 0, [("p", None, "2")], batch=4)
        abort = orjson.dumps({"queryId": "q2", "batchId": 4, "tokens": ["t9"]}).decode()
        assert sql_json(conn, "SELECT queen.spark_abort_v2(%s::jsonb)::text", abort)["deleted"] == 1
        assert sql_json(conn, "SELECT queen.spark_abort_v2(%s::jsonb)::text", abort)["deleted"] == 0
        assert conn.execute("SELECT count(*) FROM queen.spark_staging_rows").fetchone() == (1,)


def test_commit_v2_into_a_capped_queue_fails_rather_than_dropping(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT queen.configure_queue_v1(%s::jsonb)",
            (orjson.dumps({"queue": "capped2", "options": {"maxSize": 2}}).decode(),),
        )
        stage_rows(conn, "c1", 0, [("p", None, str(i)) for i in range(3)], batch=8, queue="capped2")
        with pytest.raises(psycopg.Error, match="full"):
            conn.execute(
                "SELECT queen.spark_commit_batch_v2(%s::jsonb)",
                (orjson.dumps({"queryId": "q2", "batchId": 8, "tokens": ["c1"], "counts": [3]}).decode(),),
            )
        assert conn.execute(
            "SELECT count(*) FROM queen.spark_sink_batches WHERE batch_id = 8"
        ).fetchone() == (0,)
        stage_rows(conn, "c2", 0, [("p", None, str(i)) for i in range(2)], batch=9, queue="capped2")
        ok = sql_json(
            conn,
            "SELECT queen.spark_commit_batch_v2(%s::jsonb)::text",
            orjson.dumps({"queryId": "q2", "batchId": 9, "tokens": ["c2"], "counts": [2]}).decode(),
        )
        assert ok["pushed"] == 2


def test_pipelined_commit_records_the_batch_then_applies_it_once_in_batch_order(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:

        def commit(batch: int, tokens: list[str], counts: list[int], mode: str = "pipelined") -> Any:
            return sql_json(
                conn,
                "SELECT queen.spark_commit_batch_v2(%s::jsonb)::text",
                orjson.dumps(
                    {"queryId": "qp", "batchId": batch, "tokens": tokens, "counts": counts, "mode": mode}
                ).decode(),
            )

        def stored() -> list[tuple[int, str]]:
            return [
                (r[0], r[1])
                for r in conn.execute(
                    "SELECT m.seq, m.transaction_id FROM queen.messages m "
                    "JOIN queen.partitions p ON p.id = m.partition_id "
                    "JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dstp' ORDER BY m.seq"
                ).fetchall()
            ]

        def staged(token: str) -> int:
            row = conn.execute(
                "SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = 'qp' AND token = %s", (token,)
            ).fetchone()
            return int(row[0]) if row else -1

        def stage(token: str, batch: int, ids: list[str]) -> None:
            stage_rows(
                conn, token, 0, [("p", i, f'"{i}"') for i in ids], batch=batch, queue="dstp", query="qp"
            )

        stage("a1", 0, ["m1", "m2"])
        r0 = commit(0, ["a1"], [2])
        assert (r0["pending"], r0["duplicate"], r0["pushed"], r0["staged"]) == (True, False, 0, 2)
        assert stored() == []  # recorded, not applied yet
        assert conn.execute("SELECT queen.spark_pending_queries_v2()").fetchone() == (["qp"],)
        # Spark may abort a batch whose commit succeeded: the recorded batch's rows stay
        aborted = sql_json(
            conn,
            "SELECT queen.spark_abort_v2(%s::jsonb)::text",
            orjson.dumps({"queryId": "qp", "batchId": 0, "tokens": ["a1"]}).decode(),
        )
        assert aborted["deleted"] == 0 and staged("a1") == 2
        # a replay of the recorded batch is a duplicate: the replay's rows go, the recorded ones stay
        stage("a1-replay", 0, ["m1"])
        assert commit(0, ["a1-replay"], [1])["duplicate"] is True
        assert staged("a1-replay") == 0 and staged("a1") == 2 and stored() == []
        # the next commit applies the pending batch first, then records its own
        stage("b1", 1, ["m3"])
        r1 = commit(1, ["b1"], [1])
        assert r1["pending"] is True and r1["touched"] == ["dstp/p"]
        assert stored() == [(1, "m1"), (2, "m2")] and staged("a1") == 0
        applied = sql_json(conn, "SELECT queen.spark_apply_pending_v2('qp')::text")
        assert (applied["applied"], applied["pushed"], applied["touched"]) == (1, 1, ["dstp/p"])
        assert stored() == [(1, "m1"), (2, "m2"), (3, "m3")]
        assert sql_json(conn, "SELECT queen.spark_apply_pending_v2('qp')::text")["applied"] == 0
        assert conn.execute("SELECT queen.spark_pending_queries_v2()").fetchone() == ([],)
        # a sync commit after a pipelined one: the pending batch goes first, the sync one is applied at once
        stage("c1", 2, ["m4"])
        commit(2, ["c1"], [1])
        stage("d1", 3, ["m5", "m4"])  # m4 again: stored already, skipped
        r3 = commit(3, ["d1"], [2], mode="sync")
        assert (r3.get("pending"), r3["pushed"], r3["duplicates"]) == (None, 1, 1)
        assert stored() == [(1, "m1"), (2, "m2"), (3, "m3"), (4, "m4"), (5, "m5")]
        batches = conn.execute(
            "SELECT batch_id, pushed, pending_tokens FROM queen.spark_sink_batches "
            "WHERE query_id = 'qp' ORDER BY batch_id"
        ).fetchall()
        assert batches == [(0, 2, None), (1, 1, None), (2, 1, None), (3, 1, None)]
        assert conn.execute(
            "SELECT count(*) FROM queen.spark_staging_rows WHERE query_id = 'qp'"
        ).fetchone() == (0,)


def push_direct(
    conn: psycopg.Connection[Any],
    rows: list[tuple[str, str | None, str | None]],
    *,
    batch: int = 0,
    task: int = 0,
    token: str = "a0",
    query: str = "qd",
    queue: str = "dstd",
    stale_ok: bool = False,
) -> Any:
    """One chunk of a direct write task (spark_push_direct_v4, the broker's): rows (partition, transactionId,
    payload text or None)."""
    names = sorted({p for p, _, _ in rows})
    payloads = [None if d is None else d.encode() for _, _, d in rows]
    row = conn.execute(
        "SELECT queen.spark_push_direct_v4(%s, %s, %s, %s, %s, %s::text[], %s::int[], %s::text[], "
        "%s::uuid[], %s::bytea, %s::int[], NULL, false, %s)::text",
        (
            query,
            batch,
            task,
            token,
            queue,
            names,
            [names.index(p) for p, _, _ in rows],
            [t for _, t, _ in rows],
            [None] * len(rows),
            b"".join(d for d in payloads if d is not None),
            [-1 if d is None else len(d) for d in payloads],
            stale_ok,
        ),
    ).fetchone()
    assert row is not None
    return orjson.loads(row[0])


def stored_in(conn: psycopg.Connection[Any], queue: str) -> list[tuple[str, int, str, Any]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT p.name, m.seq, m.transaction_id, m.payload FROM queen.messages m "
            "JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = %s ORDER BY p.name, m.seq",
            (queue,),
        ).fetchall()
    ]


def test_direct_push_is_idempotent_per_transaction_id_and_the_commit_records_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        first = push_direct(conn, [("p", "x1", '{"n": 1}'), ("q", "x2", '"two"'), ("p", "x3", "3")])
        assert (first["committed"], first["pushed"], first["duplicates"]) == (False, 3, 0)
        assert sorted(first["touched"]) == ["dstd/p", "dstd/q"]
        # the task retried (another attempt token): the rows it pushed before are skipped, the rest appended
        retry = push_direct(
            conn,
            [
                ("p", "x1", '{"n": 1}'),
                ("q", "x2", '"two"'),
                ("p", "x3", "3"),
                ("p", "x4", "4"),
                ("p", "x4", "4"),
            ],
            token="a1",
        )
        assert (retry["pushed"], retry["duplicates"], retry["stale"]) == (1, 4, False)
        assert stored_in(conn, "dstd") == [
            ("p", 1, "x1", {"n": 1}),
            ("p", 2, "x3", 3),
            ("p", 3, "x4", 4),
            ("q", 1, "x2", "two"),
        ]
        push_direct(conn, [("q", "y1", "5")], task=1, token="b0")
        # the commit records the batch with what its task attempts stored, once
        commit = orjson.dumps({"queryId": "qd", "batchId": 0}).decode()
        recorded = sql_json(conn, "SELECT queen.spark_commit_direct_v1(%s::jsonb)::text", commit)
        assert (recorded["duplicate"], recorded["pushed"]) == (False, 5)
        again = sql_json(conn, "SELECT queen.spark_commit_direct_v1(%s::jsonb)::text", commit)
        assert (again["duplicate"], again["pushed"]) == (True, 0)
        assert conn.execute(
            "SELECT pushed, direct FROM queen.spark_sink_batches WHERE query_id = 'qd'"
        ).fetchall() == [(5, True)]
        assert conn.execute(
            "SELECT count(*) FROM queen.spark_direct_tasks WHERE query_id = 'qd'"
        ).fetchone() == (0,)
        # a replay of the committed batch pushes nothing, even rows it had not pushed before
        replay = push_direct(conn, [("p", "x9", "9")], token="a2")
        assert (replay["committed"], replay["pushed"]) == (True, 0)
        assert len(stored_in(conn, "dstd")) == 5


def test_a_direct_replay_older_than_the_target_retention_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT queen.configure_queue_v1(%s::jsonb)",
            (
                orjson.dumps(
                    {"queue": "dsts", "options": {"retentionEnabled": True, "completedRetentionSeconds": 60}}
                ).decode(),
            ),
        )
        assert conn.execute("SELECT queen.spark_dedupe_window_v1('dsts')").fetchone() == (60.0,)
        assert conn.execute("SELECT queen.spark_dedupe_window_v1('no-such-queue')").fetchone() == (None,)
        push_direct(conn, [("p", "s1", "1")], query="qs", queue="dsts")
        # the same attempt goes on, and a retry within the window is fine
        assert push_direct(conn, [("p", "s2", "2")], query="qs", queue="dsts")["pushed"] == 1
        assert push_direct(conn, [("p", "s1", "1")], query="qs", queue="dsts", token="r1")["duplicates"] == 1
        # the first attempt started two minutes ago: a retry now may meet deleted rows
        conn.execute(
            "UPDATE queen.spark_direct_tasks SET started_at = now() - interval '2 minutes' "
            "WHERE query_id = 'qs'"
        )
        with pytest.raises(psycopg.Error, match="staleReplay=warn"):
            push_direct(conn, [("p", "s1", "1")], query="qs", queue="dsts", token="r2")
        # the first attempt itself is not refused; with stale_ok the retry pushes and says so
        assert push_direct(conn, [("p", "s3", "3")], query="qs", queue="dsts")["stale"] is False
        warned = push_direct(
            conn, [("p", "s1", "1"), ("p", "s4", "4")], query="qs", queue="dsts", token="r2", stale_ok=True
        )
        assert (warned["stale"], warned["pushed"], warned["duplicates"]) == (True, 1, 1)


def test_direct_push_into_a_capped_queue_fails_rather_than_dropping(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT queen.configure_queue_v1(%s::jsonb)",
            (orjson.dumps({"queue": "cappedd", "options": {"maxSize": 2}}).decode(),),
        )
        with pytest.raises(psycopg.Error, match="full"):
            push_direct(conn, [("p", f"c{i}", str(i)) for i in range(3)], query="qc", queue="cappedd")
        assert stored_in(conn, "cappedd") == []
        ok = push_direct(conn, [("p", f"c{i}", str(i)) for i in range(2)], query="qc", queue="cappedd")
        assert ok["pushed"] == 2
        assert [(seq, payload) for _, seq, _, payload in stored_in(conn, "cappedd")] == [(1, 0), (2, 1)]


def test_direct_push_dedupes_a_transaction_id_that_is_a_stored_message_id(db_url: str) -> None:
    """The rule of queen.message_by_transaction_v1 holds in the direct push: a transactionId equal to the id
    of a message of the partition that the broker gave its own transactionId (a consumer re-pushing what it
    popped) is a duplicate; the same id in another partition, or an id of that length but another form, is
    not."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(conn, "push_items_v1", [{"queue": "dstu", "partition": "p", "payload": 0}])
        row = conn.execute(
            "SELECT m.id::text, m.transaction_id FROM queen.messages m JOIN queen.partitions p "
            "ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dstu'"
        ).fetchone()
        assert row is not None and row[0] == row[1]  # a broker-given transactionId: the message id's text
        stored = row[0]
        lookalike = "spark-0123456789abcdef01234567-12345"  # 36 bytes, not a UUID
        result = push_direct(
            conn, [("p", stored, "1"), ("q", stored, "2"), ("p", lookalike, "3")], query="qu", queue="dstu"
        )
        assert (result["pushed"], result["duplicates"]) == (2, 1)
        assert [(n, s, t) for n, s, t, _ in stored_in(conn, "dstu")] == [
            ("p", 1, stored),
            ("p", 2, lookalike),
            ("q", 1, stored),
        ]
        again = push_direct(
            conn, [("p", lookalike, "3"), ("q", stored, "2")], query="qu", token="u1", queue="dstu"
        )
        assert (again["pushed"], again["duplicates"]) == (0, 2)


def test_direct_push_v4_cuts_each_payload_from_the_bytes_and_checks_their_lengths(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = [("p", "b1", None), ("p", "b2", '{"é": "ü"}'), ("q", "b3", "[1, 2]")]
        assert push_direct(conn, rows, query="qb", queue="bytesd")["pushed"] == 3
        assert [(n, s, p) for n, s, _, p in stored_in(conn, "bytesd")] == [
            ("p", 1, None),
            ("p", 2, {"é": "ü"}),
            ("q", 1, [1, 2]),
        ]
        with pytest.raises(psycopg.Error, match="do not add up"):
            conn.execute(
                "SELECT queen.spark_push_direct_v4('qb', 1, 0, 't', 'bytesd', ARRAY['p'], ARRAY[0], "
                "ARRAY['b9'], ARRAY[NULL]::uuid[], '\\x7b7d'::bytea, ARRAY[3], NULL, false, false)"
            )
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            push_direct(conn, [("p", "b8", "{oops")], query="qb", batch=2, queue="bytesd")


def test_a_page_read_and_a_push_chunk_of_1kb_messages_write_no_temporary_file(db_url: str) -> None:
    """spark_read_v5 and spark_push_direct_v4 keep a reader's page (50 ranges, 10,000 messages) and a 4 MB
    push chunk in memory: their predecessors spilled them (a sort, a tuplestore) past work_mem."""
    payload = orjson.dumps({"k": "x" * 1014}).decode()
    names = [f"p{i}" for i in range(50)]

    def temp_bytes(conn: psycopg.Connection[Any]) -> int:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT queen.create_partitions_v1(%s, %s)", (["spill"] * 50, names))
        load = BULK_LOAD.replace("$1", "%(queue)s").replace("$2", "%(n)s").replace("$3", "%(payload)s")
        conn.execute(load, {"queue": "spill", "n": 200, "payload": payload})
        ids = [
            str(r[0])
            for r in conn.execute(
                "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
                "WHERE q.name = 'spill' ORDER BY p.id"
            ).fetchall()
        ]
        before = temp_bytes(conn)
        rows = conn.execute(
            "SELECT range_index, cardinality(offsets) FROM queen.spark_read_v5(%s::uuid[], %s::bigint[], "
            "%s::bigint[], %s::text[])",
            (
                ids,
                [0] * 50,
                [200] * 50,
                ["data", "transactionIds", "createdAtUs", "traceIds", "producerSubs"],
            ),
        ).fetchall()
        assert sorted(rows) == [(i, 200) for i in range(1, 51)]
        chunk = [(names[i * 50 // 3700], f"s{i}", payload) for i in range(3700)]
        assert push_direct(conn, chunk, query="qs", queue="spill-out")["pushed"] == 3700
        assert temp_bytes(conn) == before
