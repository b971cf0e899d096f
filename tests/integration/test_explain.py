"""EXPLAIN guards (STYLE.md rule 4): every dequeue is an index lookup.

- a pop from a partition 200,000 messages deep reads through the (partition_id, seq) index;
- a wildcard pop on a queue with 100,000 idle, fully consumed partitions and one busy partition finds
  the busy one through the (queue_id, last_message_at) index, not by scanning the idle ones;
- lookups stay index probes when the statistics were taken on a young or empty table, including in a session
  that made its plans while consumer rows were still being created;
- a pop and a push plan their statements once per session (generic plans), not on every call.
Both custom plans (literal arguments) and generic plans (what PL/pgSQL caches) are checked.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import psycopg
import pytest

from helpers import call_procedure

GROUP = "analytics"


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def explain(
    conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...], generic: bool
) -> list[dict[str, Any]]:
    conn.execute(f"SET plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}")
    conn.execute("DEALLOCATE ALL")
    types = ", ".join(t for t, _ in params)
    conn.execute(f"PREPARE guarded({types}) AS {sql}")
    args = ", ".join("%s" for _ in params)
    cursor = psycopg.ClientCursor(conn)  # client-side binding: EXECUTE takes literal arguments
    row = cursor.execute(
        f"EXPLAIN (FORMAT JSON) EXECUTE guarded({args})", tuple(v for _, v in params)
    ).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return plan_nodes(document[0]["Plan"])


def scans_of(nodes: list[dict[str, Any]], relation: str) -> list[str]:
    return [
        n["Node Type"] + ":" + n.get("Index Name", "") for n in nodes if n.get("Relation Name") == relation
    ]


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
def test_pop_from_deep_partition_is_an_index_lookup(conn: psycopg.Connection[Any], generic: bool) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "deep", "payload": {"n": 0}}])
    partition_id = conn.execute("SELECT id FROM queen.partitions").fetchone()[0]  # type: ignore[index]
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload)
        SELECT gen_random_uuid(), 'bulk-' || s, %s, s, jsonb_build_object('n', s)
        FROM generate_series(2, 200000) s""",
        (partition_id,),
    )
    conn.execute("UPDATE queen.partitions SET last_seq = 200000 WHERE id = %s", (partition_id,))
    conn.execute("ANALYZE queen.messages")
    conn.execute("ANALYZE queen.partitions")

    nodes = explain(
        conn,
        "SELECT * FROM queen.partition_messages_v1($1, $2, $3)",
        (("uuid", partition_id), ("bigint", 150000), ("integer", 10)),
        generic,
    )
    scans = scans_of(nodes, "messages")
    assert scans and all(s.startswith("Index Scan:messages_partition_seq_idx") for s in scans), scans

    # and the procedure really serves offset 150001 next once the cursor is there
    conn.execute(
        "INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq) "
        "VALUES (%s, '__QUEUE_MODE__', 150000)",
        (partition_id,),
    )
    result = call_procedure(conn, "pop_v1", [{"queue": "deep", "partition": "Default", "batch": 2}])[0]
    assert [m["offset"] for m in result["messages"]] == [150001, 150002]


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
def test_transaction_lookup_probes_the_primary_key_then_the_client_dedupe_index(
    conn: psycopg.Connection[Any], generic: bool
) -> None:
    """Push, ack, traces, the DLQ and the message routes find a message by (partition, transactionId) through
    queen.message_by_transaction_v1: a broker-given transactionId (the message id) is a primary-key probe, a
    client one a probe of the partial dedupe index (migration 017). Inlined, so each caller's plan holds
    both probes; measured on a partition of 100,000 messages, half with client transactionIds."""
    call_procedure(conn, "push_items_v1", [{"queue": "lookups", "payload": 0}])
    partition_id, broker_given = conn.execute(  # type: ignore[misc]
        "SELECT partition_id, transaction_id FROM queen.messages"
    ).fetchone()
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload)
        SELECT g.id, CASE WHEN g.s %% 2 = 0 THEN 'client-' || g.s ELSE g.id::text END, %s, g.s, '1'
        FROM (SELECT s, gen_random_uuid() AS id FROM generate_series(2, 100000) s) g""",
        (partition_id,),
    )
    conn.execute("ANALYZE queen.messages")
    for transaction_id, index in (
        (broker_given, "messages_pkey"),
        ("client-500", "messages_client_transaction_key"),
    ):
        nodes = explain(
            conn,
            "SELECT id FROM queen.message_by_transaction_v1($1, $2)",
            (("uuid", partition_id), ("text", transaction_id)),
            generic,
        )
        scans = scans_of(nodes, "messages")
        assert not [n for n in nodes if n["Node Type"] == "Function Scan"], "not inlined"
        assert scans and all(s.startswith("Index Scan:") for s in scans), scans
        assert "Index Scan:" + index in scans, (transaction_id, scans)
        found = conn.execute(
            "SELECT transaction_id FROM queen.message_by_transaction_v1(%s, %s)",
            (partition_id, transaction_id),
        ).fetchall()
        assert found == [(transaction_id,)]


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
def test_wildcard_pop_over_100k_idle_partitions_uses_the_index(
    conn: psycopg.Connection[Any], generic: bool
) -> None:
    call_procedure(conn, "configure_queue_v1", {"queue": "wide"})
    queue_id = conn.execute("SELECT id FROM queen.queues WHERE name = 'wide'").fetchone()[0]  # type: ignore[index]
    # 100,000 idle partitions, each with one old message the group already consumed
    conn.execute(
        """
        INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_at, last_activity)
        SELECT %s, 'idle-' || s, 1, now() - interval '1 day', now() - interval '1 day'
        FROM generate_series(1, 100000) s""",
        (queue_id,),
    )
    conn.execute(
        """
        INSERT INTO queen.partition_consumers (partition_id, consumer_group, last_consumed_seq,
                                               last_consumed_created_at)
        SELECT id, %s, 1, now() - interval '1 day' FROM queen.partitions
        WHERE queue_id = %s AND name LIKE 'idle-%%'
    """,
        (GROUP, queue_id),
    )
    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "busy", "payload": {"hot": True}}])
    conn.execute("ANALYZE queen.partitions")
    conn.execute("ANALYZE queen.partition_consumers")

    # the first wildcard pop computes the group's scan floor and finds the busy partition
    result = call_procedure(
        conn, "pop_v1", [{"queue": "wide", "consumerGroup": GROUP, "batch": 10, "autoAck": True}]
    )[0]
    assert [m["data"] for m in result["messages"]] == [{"hot": True}]
    assert result["partition"] == "busy"
    floor = conn.execute(
        "SELECT last_empty_scan_at FROM queen.consumer_watermarks WHERE queue_name = 'wide' "
        "AND consumer_group = %s",
        (GROUP,),
    ).fetchone()
    assert floor is not None
    assert conn.execute("SELECT %s > now() - interval '1 hour'", (floor[0],)).fetchone() == (True,)

    parked = [r[0] for r in conn.execute("SELECT id FROM queen.partitions WHERE name LIKE 'idle-%' LIMIT 3")]
    nodes = explain(
        conn,
        "SELECT * FROM queen.pop_candidates_v2($1, $2, $3, $4, $5)",
        (
            ("uuid", queue_id),
            ("text", GROUP),
            ("timestamptz", floor[0]),
            ("uuid[]", parked),
            ("integer", 12),
        ),
        generic,
    )
    # partitions are reached only through the (queue_id, last_message_at) index, bounded by the floor, and
    # the parked ones by id
    partition_scans = [
        n
        for n in nodes
        if n.get("Relation Name") == "partitions" or n.get("Index Name", "").startswith("partitions_")
    ]
    assert partition_scans, nodes
    for node in partition_scans:
        assert node["Node Type"] in ("Index Scan", "Bitmap Heap Scan", "Bitmap Index Scan"), node["Node Type"]
    index_nodes = [n for n in partition_scans if n["Node Type"] in ("Index Scan", "Bitmap Index Scan")]
    by_time = [n for n in index_nodes if n["Index Name"] == "partitions_queue_last_message_idx"]
    by_id = [n for n in index_nodes if n["Index Name"] == "partitions_pkey"]
    assert by_time and by_id and len(by_time) + len(by_id) == len(index_nodes), index_nodes
    assert all("last_message_at" in n.get("Index Cond", "") for n in by_time), by_time
    assert all("ANY" in n.get("Index Cond", "") for n in by_id), by_id
    assert [n.get("Relation Name") for n in nodes if n["Node Type"] == "Seq Scan"] == []
    # queen.partition_work_v1 is inlined (no function scan) and reads the group's consumer row of each
    # partition looked at by an index probe
    assert [n for n in nodes if n["Node Type"] == "Function Scan"] == []
    consumer_scans = [n for n in nodes if n.get("Relation Name") == "partition_consumers"]
    assert len(consumer_scans) == 2, consumer_scans
    assert all(n["Node Type"] == "Index Scan" for n in consumer_scans), consumer_scans

    # the next pop finds nothing, without touching the idle partitions' rows
    empty = call_procedure(conn, "pop_v1", [{"queue": "wide", "consumerGroup": GROUP, "batch": 10}])[0]
    assert empty["error"] == "no_available_partition"
    # a new message on an idle partition is found again at once
    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "idle-777", "payload": {"n": 777}}])
    woke = call_procedure(conn, "pop_v1", [{"queue": "wide", "consumerGroup": GROUP, "batch": 10}])[0]
    assert [m["data"] for m in woke["messages"]] == [{"n": 777}]


def procedure_buffers(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> int:
    """Shared buffers a procedure call touched, everything it ran inside included (EXPLAIN ANALYZE's
    buffer counts are the backend's, not the plan node's own)."""
    row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
    assert row is not None
    plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


class Plannings:
    """Counts the statements PostgreSQL plans for ``conn``: log_planner_stats reports every planning, and
    client_min_messages = log sends the report to the client as a notice. ``since()`` is the count since the
    previous call."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._count = self._seen = 0
        conn.add_notice_handler(self._on_notice)
        conn.execute("SET log_planner_stats = on")
        conn.execute("SET client_min_messages = log")

    def _on_notice(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        if "PLANNER STATISTICS" in (diagnostic.message_primary or ""):
            self._count += 1

    def since(self) -> int:
        count, self._seen = self._count - self._seen, self._count
        return count


def test_lookups_stay_unique_index_probes_when_statistics_saw_one_row_per_partition(
    conn: psycopg.Connection[Any],
) -> None:
    """Push and ack look a message up by (partition, transactionId), pop and ack a consumer row by
    (partition, group). Statistics taken when every partition held one message and every group one consumer
    row rate the indexes led by partition_id (messages) or by consumer_group (consumer rows) as good as the
    unique ones; the generic plans PL/pgSQL caches then walked a whole partition or a whole group per lookup.
    Each call is measured after one warm-up call (plans made), in buffers it touched."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "young", "partition": f"p{n}", "payload": n} for n in range(200)]
    )
    call_procedure(conn, "pop_v1", [{"queue": "young", "consumerGroup": "g0", "batch": 1, "autoAck": True}])
    conn.execute("ANALYZE queen.messages")  # n_distinct(partition_id) = every row
    conn.execute("ANALYZE queen.partition_consumers")  # n_distinct(consumer_group) = every row
    deep = conn.execute("SELECT id FROM queen.partitions WHERE name = 'p0'").fetchone()[0]  # type: ignore[index]
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload)
        SELECT gen_random_uuid(), 'bulk-' || s, %s, s, '1' FROM generate_series(2, 50000) s""",
        (deep,),
    )
    conn.execute("UPDATE queen.partitions SET last_seq = 50000 WHERE id = %s", (deep,))
    # group "wide" has consumed every partition of a 20,000-partition queue
    call_procedure(conn, "configure_queue_v1", {"queue": "broad"})
    conn.execute("""
        INSERT INTO queen.partitions (queue_id, name, last_seq)
        SELECT q.id, 'b' || s, 0 FROM queen.queues q, generate_series(1, 20000) s WHERE q.name = 'broad'""")
    conn.execute(
        "INSERT INTO queen.partition_consumers (partition_id, consumer_group) "
        "SELECT p.id, 'wide' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'broad'"
    )
    conn.execute("SET plan_cache_mode = force_generic_plan")

    def push() -> int:
        return procedure_buffers(
            conn,
            "SELECT queen.push_items_v2(%s::jsonb, false, false)",
            (json.dumps([{"index": 0, "queue": "young", "partition": "p0", "payload": "one more"}]),),
        )

    def push_client(transaction_id: str) -> int:  # the dedupe probes: a duplicate ("bulk-...") or a new id
        return procedure_buffers(
            conn,
            "SELECT queen.push_items_v2(%s::jsonb, false, false)",
            (
                json.dumps(
                    [
                        {
                            "index": 0,
                            "queue": "young",
                            "partition": "p0",
                            "payload": "again",
                            "transactionId": transaction_id,
                        }
                    ]
                ),
            ),
        )

    def ack(count: int) -> int:
        popped = call_procedure(conn, "pop_v1", [{"queue": "young", "partition": "p0", "batch": count}])[0]
        acks = [
            {
                "index": i,
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
                "status": "completed",
            }
            for i, m in enumerate(popped["messages"])
        ]
        return procedure_buffers(conn, "SELECT queen.ack_v1(%s::jsonb)", (json.dumps(acks),))

    def pop_wide() -> int:
        call_procedure(conn, "push_items_v1", [{"queue": "broad", "partition": "b777", "payload": 1}])
        return procedure_buffers(
            conn,
            "SELECT queen.pop_v1(%s::jsonb)",
            (
                json.dumps(
                    [{"index": 0, "queue": "broad", "partition": "b777", "consumerGroup": "wide", "batch": 1}]
                ),
            ),
        )

    for measure in (push, lambda: push_client("bulk-7"), lambda: ack(3), lambda: ack(1), pop_wide):
        measure()  # plans made (catalog reads are counted too)
    figures = {
        "push": push(),
        "push a duplicate": push_client("bulk-9"),
        "push a client id": push_client("new-1"),
        "ack 3": ack(3),
        "ack 1": ack(1),
        "pop in a 20,000-row group": pop_wide(),
    }
    # the partition holds 50,000 messages and the group 20,000 rows, hundreds of pages each; unique-index
    # probes touch a few dozen
    assert all(buffers < 100 for buffers in figures.values()), figures


def test_partition_lookup_is_a_probe_when_statistics_saw_one_partition_per_queue(
    conn: psycopg.Connection[Any],
) -> None:
    """Push and a named pop look a partition up by (queue_id, name). Statistics taken while every queue had
    one partition rate queue_id as selective as the unique key; the generic plans then probed the smaller
    (queue_id, last_message_at) index by queue_id and filtered every partition of the queue on name (migration
    008 keeps that index out of such lookups). Here a queue has 20,000 partitions, all holding a message;
    each call is measured after one warm-up call, in buffers it touched."""
    call_procedure(conn, "push_items_v1", [{"queue": f"solo{n}", "payload": n} for n in range(300)])
    conn.execute("ANALYZE queen.partitions")  # n_distinct(queue_id) = every row
    call_procedure(conn, "configure_queue_v1", {"queue": "broad"})
    conn.execute("""
        INSERT INTO queen.partitions (queue_id, name, last_seq, last_message_at)
        SELECT q.id, 'b' || s, 0, now() FROM queen.queues q, generate_series(1, 20000) s
        WHERE q.name = 'broad'""")

    def push() -> int:
        return procedure_buffers(
            conn,
            "SELECT queen.push_items_v2(%s::jsonb, false, false)",
            (json.dumps([{"index": 0, "queue": "broad", "partition": "b19999", "payload": "one more"}]),),
        )

    def pop() -> int:
        return procedure_buffers(
            conn,
            "SELECT queen.pop_v2(%s::jsonb)",
            (
                json.dumps(
                    [{"index": 0, "queue": "broad", "partition": "b19999", "batch": 1, "autoAck": True}]
                ),
            ),
        )

    for measure in (push, pop):
        measure()  # plans made (catalog reads are counted too)
    figures = {"push": push(), "pop": pop()}
    # the queue's 20,000 partitions span over a hundred pages of each index; a probe touches a few
    assert all(buffers < 100 for buffers in figures.values()), figures


@pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])
def test_offset_lookup_is_a_probe_while_statistics_say_the_table_is_empty(
    conn: psycopg.Connection[Any], generic: bool
) -> None:
    """Ack and an autoAck pop read one message by (partition, offset). Statistics taken while messages was
    empty (reltuples = 0, as after a deploy and a bulk load before autoanalyze) cost every index the same;
    no index may then offer a walk that looks as cheap, e.g. one with partition_id as a later column (on the
    PG15 lab with 5,000,000 rows that walk took 0.5-1.5 s per lookup)."""
    call_procedure(conn, "push_items_v1", [{"queue": "bulk", "partition": "p0", "payload": 0}])
    partition = conn.execute("SELECT id FROM queen.partitions WHERE name = 'p0'").fetchone()[0]  # type: ignore[index]
    conn.execute("DELETE FROM queen.messages")
    conn.execute("ANALYZE queen.messages")  # reltuples = 0
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload)
        SELECT gen_random_uuid(), gen_random_uuid()::text, %s, s, '1' FROM generate_series(1, 300000) s""",
        (partition,),
    )
    nodes = explain(
        conn,
        "SELECT * FROM queen.messages WHERE partition_id = $1 AND seq = $2",
        (("uuid", str(partition)), ("bigint", 777)),
        generic,
    )
    assert scans_of(nodes, "messages") == ["Index Scan:messages_partition_seq_idx"]


def test_consumer_rows_are_probed_in_a_session_that_planned_while_the_table_was_empty(db_url: str) -> None:
    """A broker connection makes its plans once and keeps them. If it made them while
    queen.partition_consumers was empty (statistics taken then say so), a sequential scan looks cheapest and
    would read the whole table per lookup as a new group over many partitions fills it, a row per pop. Pops
    and acks over 300 partitions in one transaction (the first calls make the plans): no sequential scan of
    the table."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        call_procedure(
            setup,
            "push_items_v1",
            [{"queue": "fresh", "partition": f"p{n}", "payload": n} for n in range(300)],
        )
        setup.execute("ANALYZE queen.partition_consumers")  # reltuples = 0
    with psycopg.connect(
        db_url
    ) as conn:  # one transaction: the scans it made are in pg_stat_xact_user_tables
        delivered = []
        for _ in range(150):
            message = call_procedure(
                conn, "pop_v1", [{"queue": "fresh", "consumerGroup": GROUP, "batch": 1}]
            )[0]["messages"][0]
            acked = call_procedure(
                conn,
                "ack_v1",
                [
                    {
                        "transactionId": message["transactionId"],
                        "partitionId": message["partitionId"],
                        "leaseId": message["leaseId"],
                        "status": "completed",
                        "consumerGroup": GROUP,
                    }
                ],
            )[0]
            assert acked["success"] is True
            delivered.append(message["data"])
        for _ in range(150):
            delivered += [
                m["data"]
                for m in call_procedure(
                    conn, "pop_v1", [{"queue": "fresh", "consumerGroup": GROUP, "batch": 1, "autoAck": True}]
                )[0]["messages"]
            ]
        assert sorted(delivered) == list(range(300))
        row = conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables "
            "WHERE relid = 'queen.partition_consumers'::regclass"
        ).fetchone()
        assert row == (0,)


def test_pop_plans_its_statements_once_per_session(db_url: str) -> None:
    """PL/pgSQL caches each statement's plan, but PostgreSQL's plan cache may still choose a fresh custom plan
    on every call when it rates the generic plan costlier; it did so for the wildcard candidate scan over
    10,000 partitions (planning cost more than executing). pop_v2 forces generic plans: after a session's
    first pops, a pop plans nothing. Counted with log_planner_stats, which reports every planning to the
    client at LOG level; the one planning per call left is the top-level SELECT, sent unprepared."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(
            conn,
            "push_items_v1",
            [{"queue": "wide", "partition": f"p{n}", "payload": n} for n in range(10_000)],
        )
        conn.execute("ANALYZE")
        plannings = Plannings(conn)

        def pops(count: int, group: str) -> int:
            plannings.since()
            delivered = 0
            request = orjson.dumps(
                [{"index": 0, "queue": "wide", "consumerGroup": group, "batch": 10, "autoAck": True}]
            ).decode()
            for _ in range(count):
                row = conn.execute(
                    "SELECT queen.pop_v2(%s::jsonb)::text", (request,), prepare=False
                ).fetchone()
                assert row is not None
                delivered += len(orjson.loads(row[0])[0]["messages"])
            assert delivered == count  # one message per partition: each pop meets a new partition
            return plannings.since()

        assert pops(10, "warm-up") > 10  # the session's first calls plan the procedure's statements
        assert pops(20, "measured") == 20  # only the top-level SELECT of each call


@pytest.mark.parametrize("procedure", ["push_items_v3", "push_items_v2"])
def test_push_plans_its_statements_once_per_session(db_url: str, procedure: str) -> None:
    """The bench's trap: after the heavy push scenarios, the plan cache of a broker connection went over to
    custom plans for the push procedure and re-planned on every one-message push (perf: parser and planner
    symbols 10-12% of PostgreSQL's CPU; 600 -> 1,600 µs per push). Here a burst of big batches, then
    statistics of the grown table, do the same. push_items_v3 (the broker's call) and push_items_v2 (its SQL
    API wrapper) force generic plans: a push then plans nothing but the top-level SELECT (counted as in the
    pop test above)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        plannings = Plannings(conn)

        def pushes(count: int, size: int) -> int:
            plannings.since()
            for n in range(count):
                request = orjson.dumps(
                    [
                        {"index": i, "queue": "burst", "partition": f"p{(n * size + i) % 100}", "payload": i}
                        for i in range(size)
                    ]
                ).decode()
                row = conn.execute(
                    f"SELECT queen.{procedure}(%s::jsonb, false, false)::text", (request,), prepare=False
                ).fetchone()
                assert row is not None
                answer = orjson.loads(row[0])
                statuses = (
                    [r[1] for r in answer] if procedure == "push_items_v3" else [r["status"] for r in answer]
                )
                assert statuses == (["q"] if procedure == "push_items_v3" else ["queued"]) * size
            return plannings.since()

        pushes(1, 100)  # creates the partitions
        pushes(20, 1)  # the plan cache's first custom plans are a one-message push's
        pushes(100, 1000)  # the burst: 100,000 messages
        conn.execute("ANALYZE")  # statistics of the grown table; the cached plans are invalidated
        assert pushes(20, 1) > 20  # the session's first calls after it plan the procedure's statements
        assert pushes(20, 1) == 20  # only the top-level SELECT of each call (40 without forced generic plans)
