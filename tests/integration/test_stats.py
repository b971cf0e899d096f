"""The stats job (queen.stats_refresh_v4) and the counters it reads: the numbers equal what counting the
messages says, they follow deletions and dead letters, a run with nothing changed rewrites nothing, a run
never scans the messages table, the (queue, group) sums kept by deltas equal a re-aggregation, and the
reconcile is a pass in chunks."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from queenpy.services import jobs
from queenpy.settings import ServiceSettings
from queenpy.store.database import Database

from helpers import call_procedure

QM = "__QUEUE_MODE__"


KEYS = ("partitions", "consumers", "queues", "groups", "candidates", "full")


@pytest.fixture
def conn(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def refresh(conn: psycopg.Connection[Any], full: bool = False) -> dict[str, Any]:
    """One run (full: the whole reconcile pass in this run), the counts of its answer."""
    row = conn.execute("SELECT queen.stats_refresh_v4(%s, NULL)", (full,)).fetchone()
    assert row is not None
    return {key: row[0][key] for key in KEYS}


def partition_id(conn: psycopg.Connection[Any], queue: str, partition: str) -> Any:
    row = conn.execute(
        "SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = %s AND p.name = %s",
        (queue, partition),
    ).fetchone()
    assert row is not None
    return row[0]


def stats_of(conn: psycopg.Connection[Any], pid: Any) -> dict[str, Any]:
    cursor = conn.execute("SELECT * FROM queen.partition_stats WHERE partition_id = %s", (pid,))
    row = cursor.fetchone()
    assert row is not None and cursor.description is not None
    return dict(zip([c.name for c in cursor.description], row, strict=True))


def truth(conn: psycopg.Connection[Any], pid: Any) -> dict[str, Any]:
    """What counting the messages says about a partition: stored rows, rows after the slowest cursor, DLQ
    rows, and the creation time of the oldest row and of the first row after the slowest cursor."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM queen.messages m WHERE m.partition_id = %(p)s),
               (SELECT count(*) FROM queen.messages m WHERE m.partition_id = %(p)s
                  AND m.seq > coalesce((SELECT min(last_consumed_seq) FROM queen.partition_consumers
                                        WHERE partition_id = %(p)s), 0)),
               (SELECT count(*) FROM queen.dead_letter_queue d WHERE d.partition_id = %(p)s),
               (SELECT min(created_at) FROM queen.messages m WHERE m.partition_id = %(p)s),
               (SELECT m.created_at FROM queen.messages m WHERE m.partition_id = %(p)s
                  AND m.seq > coalesce((SELECT min(last_consumed_seq) FROM queen.partition_consumers
                                        WHERE partition_id = %(p)s), 0) ORDER BY m.seq LIMIT 1)
    """,
        {"p": pid},
    ).fetchone()
    assert row is not None
    return {
        "depth": row[0],
        "unconsumed": row[1],
        "dead_letter": row[2],
        "oldest_at": row[3],
        "oldest_unconsumed_at": row[4],
    }


def test_numbers_equal_the_counted_truth(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "configure_queue_v1", {"queue": "orders", "options": {"retryLimit": 0}})
    call_procedure(
        conn,
        "push_items_v1",
        [{"queue": "orders", "partition": f"p{n % 3}", "payload": n} for n in range(30)],
    )
    # queue mode: p0 fully consumed (autoAck), p1 leased (5 in flight), p2 one ack, one dead letter
    call_procedure(conn, "pop_v1", [{"queue": "orders", "partition": "p0", "batch": 10, "autoAck": True}])
    leased = call_procedure(conn, "pop_v1", [{"queue": "orders", "partition": "p1", "batch": 5}])[0]
    assert len(leased["messages"]) == 5
    popped = call_procedure(conn, "pop_v1", [{"queue": "orders", "partition": "p2", "batch": 2}])[0][
        "messages"
    ]
    acks = call_procedure(
        conn,
        "ack_v1",
        [
            {
                "transactionId": popped[0]["transactionId"],
                "partitionId": popped[0]["partitionId"],
                "leaseId": popped[0]["leaseId"],
                "status": "completed",
            },
            {
                "transactionId": popped[1]["transactionId"],
                "partitionId": popped[1]["partitionId"],
                "leaseId": popped[1]["leaseId"],
                "status": "failed",
                "error": "boom",
            },
        ],
    )
    assert [a["success"] for a in acks] == [True, True] and acks[1]["dlq"] is True
    # a named group has read all of p0; an operator deletes a message of p1
    call_procedure(
        conn,
        "pop_v1",
        [{"queue": "orders", "partition": "p0", "consumerGroup": "audit", "batch": 100, "autoAck": True}],
    )
    p0, p1, p2 = (partition_id(conn, "orders", name) for name in ("p0", "p1", "p2"))
    conn.execute("DELETE FROM queen.messages WHERE partition_id = %s AND seq = 10", (p1,))

    done = refresh(conn)
    # the first run is a full one: every partition looked at, the 3 whose numbers changed rewritten
    assert (done["partitions"], done["candidates"], done["full"]) == (3, 4, True)

    for pid in (p0, p1, p2):
        stats, counted = stats_of(conn, pid), truth(conn, pid)
        for key in ("depth", "unconsumed", "dead_letter", "oldest_at", "oldest_unconsumed_at"):
            assert stats[key] == counted[key], (key, stats, counted)
        assert stats["last_seq"] == 10
        assert stats["pending"] + stats["in_flight"] == stats["unconsumed"]
        assert stats["completed"] == max(stats["depth"] - stats["unconsumed"] - stats["dead_letter"], 0)
    assert stats_of(conn, p1)["in_flight"] == 5 and stats_of(conn, p1)["messages_deleted"] == 1
    assert stats_of(conn, p0)["consumer_groups"] == 2 and stats_of(conn, p0)["unconsumed"] == 0
    assert stats_of(conn, p2)["dead_letter"] == 1 and stats_of(conn, p2)["completed"] == 1

    queue = conn.execute(
        "SELECT partitions, depth, unconsumed, in_flight, dead_letter, ingested_total, "
        "consumed_total, deleted_total, dead_lettered_total, consumer_groups "
        "FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id "
        "WHERE q.name = 'orders'"
    ).fetchone()
    # 4 partitions (configure made Default); p1 9 unconsumed (one deleted), p2 8 after its cursor
    assert queue == (4, 29, 9 + 8, 5, 1, 30, 10 + 2 + 10, 1, 1, 2)

    # per (partition, group): whether it lags (the lag itself is the partition's, migration 029) and the first
    # unconsumed message's time
    lag = conn.execute(
        "SELECT consumer_group, cursor_seq, has_lag, in_flight, oldest_unconsumed_at "
        "FROM queen.consumer_stats WHERE partition_id = %s ORDER BY consumer_group",
        (p2,),
    ).fetchall()
    first_after = conn.execute(
        "SELECT created_at FROM queen.messages WHERE partition_id = %s AND seq = 3", (p2,)
    ).fetchone()
    assert lag == [(QM, 2, True, 0, first_after[0] if first_after else None)]
    groups = conn.execute(
        "SELECT consumer_group, partitions, partitions_with_lag, offset_lag, leases "
        "FROM queen.queue_group_stats ORDER BY consumer_group"
    ).fetchall()
    # offset lag counts offsets after the cursor (and after what retention removed): p1's 10 include the
    # message deleted by hand, p2 has 8
    assert groups == [(QM, 3, 2, 10 + 8, 1), ("audit", 1, 0, 0, 0)]

    # the minute's throughput: 30 offsets assigned, 22 messages consumed, 1 dead letter, 1 deleted
    minute = conn.execute(
        "SELECT sum(ingested), sum(processed), sum(dead_lettered), sum(deleted) FROM queen.queue_throughput"
    ).fetchone()
    assert minute == (30, 22, 1, 1)


def test_a_run_rewrites_only_what_changed_and_reads_no_message_it_does_not_need(
    conn: psycopg.Connection[Any],
) -> None:
    call_procedure(
        conn, "push_items_v1", [{"queue": "wide", "partition": f"p{n}", "payload": n} for n in range(200)]
    )
    deep = partition_id(conn, "wide", "p0")
    conn.execute(
        """
        INSERT INTO queen.messages (id, transaction_id, partition_id, seq, payload)
        SELECT gen_random_uuid(), 'bulk-' || s, %s, s, '1' FROM generate_series(2, 50000) s""",
        (deep,),
    )
    conn.execute("UPDATE queen.partitions SET last_seq = 50000 WHERE id = %s", (deep,))
    assert refresh(conn)["partitions"] == 200
    assert refresh(conn) == {
        "partitions": 0,
        "consumers": 0,
        "queues": 0,
        "groups": 0,
        "candidates": 0,
        "full": False,
    }

    call_procedure(conn, "push_items_v1", [{"queue": "wide", "partition": "p7", "payload": "more"}])
    counts = (
        "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relid = 'queen.messages'::regclass"
    )
    with conn.transaction():  # the backend's table statistics, not flushed before the transaction ends
        before = conn.execute(counts).fetchone()
        done = refresh(conn)
        after = conn.execute(counts).fetchone()
    assert before is not None and after is not None
    assert done["partitions"] == 1 and done["queues"] == 1
    assert after[0] == before[0]  # never a sequential scan of messages
    assert after[1] - before[1] == 0  # p7's oldest message and first unconsumed one are still the known ones
    conn.execute("DELETE FROM queen.messages WHERE partition_id = %s AND seq = 1", (deep,))
    with conn.transaction():
        before = conn.execute(counts).fetchone()
        refresh(conn)
        after = conn.execute(counts).fetchone()
    assert before is not None and after is not None
    assert after[1] - before[1] == 2  # the deep partition's new oldest and first unconsumed message
    assert stats_of(conn, partition_id(conn, "wide", "p7"))["depth"] == 2
    assert stats_of(conn, deep)["depth"] == 49999
    assert stats_of(conn, deep)["oldest_seq"] == 2


def test_a_push_rewrites_the_partition_s_stats_row_hot_and_no_consumer_row(
    conn: psycopg.Connection[Any],
) -> None:
    """After a push only the offsets change. The run rewrites each pushed partition's partition_stats row, a
    HOT update (no index entry: no index covers a column that changes, migration 025), and none of its
    consumer rows: their lags stay above zero, and the lag is derived from the partition's numbers (migration
    029); the (queue, group) sums still grow by the push. Before migration 029 the run rewrote one consumer
    row per group. (A HOT update needs room on its page: four rows leave the fill factor's room for a new
    version of each; at scale a run's rows are spread over many pages.)"""
    partitions = [f"p{n}" for n in range(4)]
    groups = ("a", "b", "c")
    call_procedure(
        conn,
        "push_items_v1",
        [{"queue": "hot", "partition": p, "payload": n} for p in partitions for n in (1, 2)],
    )
    call_procedure(
        conn,
        "pop_v1",
        [
            {"queue": "hot", "partition": p, "consumerGroup": g, "batch": 1, "autoAck": True}
            for p in partitions
            for g in groups
        ],
    )
    refresh(conn)
    lags = "SELECT consumer_group, offset_lag, partitions_with_lag FROM queen.queue_group_stats ORDER BY 1"
    assert conn.execute(lags).fetchall() == [(g, len(partitions), len(partitions)) for g in groups]
    call_procedure(
        conn, "push_items_v1", [{"queue": "hot", "partition": p, "payload": 3} for p in partitions]
    )
    counts = (
        "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
        "WHERE relid IN ('queen.consumer_stats'::regclass, 'queen.partition_stats'::regclass) ORDER BY 1"
    )
    with conn.transaction():  # the backend's table statistics of this transaction
        before = conn.execute(counts).fetchall()
        done = refresh(conn)
        after = conn.execute(counts).fetchall()
    assert done["partitions"] == len(partitions)
    assert done["consumers"] == 0
    updated = {a[0]: (a[1] - b[1], a[2] - b[2]) for a, b in zip(after, before, strict=True)}
    assert updated == {"consumer_stats": (0, 0), "partition_stats": (len(partitions),) * 2}
    assert conn.execute(lags).fetchall() == [(g, 2 * len(partitions), len(partitions)) for g in groups]
    assert conn.execute(HAS_LAG_WRONG).fetchone() == (0,)


def test_an_expired_lease_and_a_replay_change_the_numbers(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "push_items_v1", [{"queue": "q", "payload": n} for n in range(4)])
    leased = call_procedure(conn, "pop_v1", [{"queue": "q", "partition": "Default", "batch": 3}])[0]
    pid = leased["partitionId"]
    refresh(conn)
    assert stats_of(conn, pid)["in_flight"] == 3
    # the lease ends now (after the previous run: an expiry since then makes the partition a candidate)
    conn.execute("UPDATE queen.partition_consumers SET lease_expires_at = clock_timestamp()")
    assert refresh(conn)["partitions"] == 1
    assert stats_of(conn, pid)["in_flight"] == 0 and stats_of(conn, pid)["pending"] == 4


def test_new_partitions_and_queues_get_rows_and_deleted_ones_lose_them(conn: psycopg.Connection[Any]) -> None:
    call_procedure(conn, "configure_queue_v1", {"queue": "made"})
    conn.execute(
        "INSERT INTO queen.partitions (queue_id, name) SELECT id, 'by-sql' FROM queen.queues "
        "WHERE name = 'made'"
    )  # the creation trigger covers writers other than push
    counted = conn.execute(
        "SELECT count(*) FROM queen.partition_counters c JOIN queen.partitions p "
        "ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id "
        "WHERE q.name = 'made'"
    ).fetchone()
    assert counted == (2,)
    refresh(conn)
    assert conn.execute(
        "SELECT s.partitions FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id "
        "WHERE q.name = 'made'"
    ).fetchone() == (2,)
    call_procedure(conn, "push_items_v1", [{"queue": "made", "payload": 1}])
    call_procedure(conn, "pop_v1", [{"queue": "made", "consumerGroup": "g", "batch": 1, "autoAck": True}])
    refresh(conn)
    assert conn.execute("SELECT count(*) FROM queen.queue_group_stats").fetchone() == (1,)
    conn.execute("SELECT queen.consumer_group_delete_v1('g', NULL, true)")
    refresh(conn)
    assert conn.execute("SELECT count(*) FROM queen.consumer_stats").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM queen.queue_group_stats").fetchone() == (0,)
    conn.execute("SELECT queen.delete_queue_v1('made')")
    for table in ("partition_counters", "partition_stats", "queue_stats", "queue_throughput"):
        assert conn.execute(f"SELECT count(*) FROM queen.{table}").fetchone() == (0,), table


def test_full_run_repairs_missing_rows_and_sees_changes_without_a_timestamp(
    conn: psycopg.Connection[Any],
) -> None:
    call_procedure(
        conn, "push_items_v1", [{"queue": "r", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    refresh(conn)
    conn.execute(
        "DELETE FROM queen.partition_stats WHERE partition_id IN "
        "(SELECT id FROM queen.partitions WHERE name = 'p3')"
    )
    done = refresh(conn, full=True)
    assert (done["partitions"], done["candidates"], done["full"]) == (1, 5, True)  # only the repaired row
    assert stats_of(conn, partition_id(conn, "r", "p3"))["depth"] == 1
    # a seek moves cursors without a timestamp: the next incremental run does not see it, the full one does
    call_procedure(conn, "pop_v1", [{"queue": "r", "partition": "p1", "batch": 1, "autoAck": True}])
    refresh(conn)
    assert stats_of(conn, partition_id(conn, "r", "p1"))["unconsumed"] == 0
    conn.execute("SELECT queen.consumer_group_seek_v1('__QUEUE_MODE__', 'r', false, '-infinity')")
    assert refresh(conn)["partitions"] == 0
    assert refresh(conn, full=True)["partitions"] == 1
    assert stats_of(conn, partition_id(conn, "r", "p1"))["unconsumed"] == 1


def test_a_run_takes_no_lock_a_push_holds(db_url: str) -> None:
    """A push holds its partitions' rows locked for update until it commits. The stats job writes rows for a
    consumer row it has not seen yet while such a push is in flight: it must not wait for the push (a key
    check of its insert would share-lock the partition row; with the pushes' locks in id order and the job's
    in any order, a push and the job deadlocked in the soak benchmark). The job runs under a lock timeout
    here."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        call_procedure(
            conn, "push_items_v1", [{"queue": "busy", "partition": f"p{n}", "payload": n} for n in range(3)]
        )
        refresh(conn)
        call_procedure(conn, "pop_v1", [{"queue": "busy", "batch": 1, "autoAck": True, "partitions": 3}])
        pushing = psycopg.connect(db_url)
        try:
            pushing.execute("SELECT 1 FROM queen.partitions FOR UPDATE")  # a push's locks, not committed
            conn.execute("SET lock_timeout = '2s'")
            done = refresh(conn)
            assert done["consumers"] >= 1
            assert conn.execute("SELECT count(*) FROM queen.consumer_stats").fetchone() == (
                done["consumers"],
            )
        finally:
            pushing.close()
        conn.execute("SELECT queen.delete_queue_v1('busy')")  # the stats rows of its partitions go with them
        assert conn.execute("SELECT count(*) FROM queen.consumer_stats").fetchone() == (0,)


# a consumer row's lag, from the offsets the partitions hold now (not from partition_stats, which the job
# keeps)
ROW_LAG = """
(SELECT greatest(p.last_seq - greatest(cs.cursor_seq, c.head_seq, c.completed_seq, c.evicted_seq), 0)
 FROM queen.partitions p JOIN queen.partition_counters c ON c.partition_id = p.id
 WHERE p.id = cs.partition_id)
"""
GROUP_TRUTH = f"""
SELECT cs.queue_id, cs.consumer_group, count(*)::integer,
       (count(*) FILTER (WHERE {ROW_LAG} > 0))::integer, sum({ROW_LAG})::bigint,
       sum(cs.in_flight)::bigint, count(cs.lease_expires_at)::integer,
       sum(cs.total_consumed)::bigint, max(cs.last_consumed_at),
       min(cs.oldest_unconsumed_at) FILTER (WHERE {ROW_LAG} > 0)
FROM queen.consumer_stats cs GROUP BY 1, 2 ORDER BY 1, 2
"""
GROUP_KEPT = """
SELECT queue_id, consumer_group, partitions, partitions_with_lag, offset_lag, in_flight, leases,
       total_consumed, last_consumed_at, oldest_unconsumed_at
FROM queen.queue_group_stats ORDER BY 1, 2
"""
QUEUE_KEPT = "SELECT queue_id, consumer_groups, max_offset_lag FROM queen.queue_stats ORDER BY 1"
QUEUE_TRUTH = f"""
SELECT q.id,
       (SELECT count(DISTINCT cs.consumer_group) FROM queen.consumer_stats cs WHERE cs.queue_id = q.id)::int,
       coalesce((SELECT max({ROW_LAG}) FROM queen.consumer_stats cs WHERE cs.queue_id = q.id), 0)::bigint
FROM queen.queues q ORDER BY 1
"""
# rows whose kept has_lag disagrees with their lag now
HAS_LAG_WRONG = f"SELECT count(*) FROM queen.consumer_stats cs WHERE cs.has_lag <> ({ROW_LAG} > 0)"


def run(
    conn: psycopg.Connection[Any], full: bool = False, chunk: int | None = None, limit: int | None = None
) -> dict[str, Any]:
    """One run with the job's arguments (p_chunk, p_limit), its whole answer."""
    row = conn.execute("SELECT queen.stats_refresh_v4(%s, %s, %s)", (full, chunk, limit)).fetchone()
    assert row is not None
    return dict(row[0])


def test_group_sums_kept_by_deltas_equal_a_re_aggregation(
    conn: psycopg.Connection[Any],
) -> None:
    """Incremental runs add what each rewritten or removed consumer row changed; after every step of
    pushes (to partitions a group had consumed and to lagging ones), pops (leased and autoAck), acks, a lease
    that ends, retention's trim, a new group and a deleted one, the kept
    (queue, group) sums and the queues' group counts and largest lags equal what re-aggregating every row
    gives."""
    push = [{"queue": "d", "partition": f"p{n % 4}", "payload": n} for n in range(40)]
    call_procedure(conn, "push_items_v1", push)
    run(conn)  # the first run: exact

    def check(label: str) -> None:
        done = run(conn)
        assert done["exact"] is False, (label, done)
        assert conn.execute(GROUP_KEPT).fetchall() == conn.execute(GROUP_TRUTH).fetchall(), label
        assert conn.execute(QUEUE_KEPT).fetchall() == conn.execute(QUEUE_TRUTH).fetchall(), label
        assert conn.execute(HAS_LAG_WRONG).fetchone() == (0,), label

    leased = call_procedure(conn, "pop_v1", [{"queue": "d", "partition": "p1", "batch": 4}])[0]["messages"]
    call_procedure(conn, "pop_v1", [{"queue": "d", "partition": "p0", "batch": 10, "autoAck": True}])
    check("a lease and an autoAck pop")
    for group in ("a", "b"):
        call_procedure(
            conn,
            "pop_v1",
            [{"queue": "d", "consumerGroup": group, "batch": 3, "autoAck": True, "partitions": 4}],
        )
    check("two new groups")
    call_procedure(
        conn,
        "ack_v1",
        [
            {
                "transactionId": m["transactionId"],
                "partitionId": m["partitionId"],
                "leaseId": m["leaseId"],
                "status": "completed",
            }
            for m in leased[:2]
        ],
    )
    check("two of the four leased acked")
    conn.execute(
        "UPDATE queen.partition_consumers SET lease_expires_at = clock_timestamp() WHERE batch_size > 0"
    )
    check("the lease ended")
    call_procedure(conn, "push_items_v1", [{"queue": "d", "partition": "p0", "payload": 1}] * 2)
    check("a push where a group had consumed everything")
    call_procedure(
        conn, "push_items_v1", [{"queue": "d", "partition": f"p{n}", "payload": n} for n in range(4)]
    )
    check("a push to partitions that lag already")
    conn.execute(
        "UPDATE queen.partition_counters SET head_seq = 8, updated_at = clock_timestamp() "
        "WHERE partition_id IN (SELECT id FROM queen.partitions WHERE name IN ('p1', 'p2'))"
    )
    check("retention trimmed below some cursors and past others")
    call_procedure(conn, "push_items_v1", [{"queue": "d", "partition": "p9", "payload": 1}] * 3)
    check("a new partition")
    conn.execute("SELECT queen.consumer_group_delete_v1('a', NULL, true)")
    check("group a deleted")
    assert [r[1] for r in conn.execute(GROUP_KEPT).fetchall()] == [QM, "b"]


def test_reconcile_is_a_pass_in_chunks(conn: psycopg.Connection[Any]) -> None:
    """p_full starts a pass; each run adds the next p_chunk partitions (in id order) to its candidates; the
    run that reaches the end repairs and re-aggregates exactly; a change with no timestamp (a seek) is seen by
    the pass, not by the incremental runs."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "r", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    run(conn)
    call_procedure(conn, "pop_v1", [{"queue": "r", "partition": "p1", "batch": 1, "autoAck": True}])
    run(conn)
    conn.execute("SELECT queen.consumer_group_seek_v1('__QUEUE_MODE__', 'r', false, '-infinity')")
    assert run(conn, chunk=2)["partitions"] == 0  # no pass in progress: incremental
    runs = [run(conn, full=True, chunk=2)]
    while runs[-1]["pass"] != "finished":
        runs.append(run(conn, full=False, chunk=2))
        assert len(runs) < 10
    assert [r["pass"] for r in runs] == ["started", "continued", "finished"]
    assert [r["exact"] for r in runs] == [False, False, True]
    assert sum(r["partitions"] for r in runs) == 1  # p1's rows, once its chunk came
    assert stats_of(conn, partition_id(conn, "r", "p1"))["unconsumed"] == 1
    assert runs[-1]["passAfter"] is None
    state = conn.execute("SELECT value FROM queen.system_state WHERE key = 'stats_refresh'").fetchone()
    assert state is not None and "passAfter" not in state[0]


def test_changed_partitions_are_taken_p_limit_a_run_in_a_sweep(conn: psycopg.Connection[Any]) -> None:
    """p_limit bounds the changed partitions a run takes: they come in id order, a sweep of runs, until a run
    finds fewer; a partition that changes behind the sweep (after its bound) is taken by the next sweep; at
    the end every partition's numbers equal the counted truth."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "s", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    run(conn)  # the first run: every partition
    call_procedure(
        conn, "push_items_v1", [{"queue": "s", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    names = {
        row[1]: row[0]
        for row in conn.execute(
            "SELECT p.name, p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = 's'"
        ).fetchall()
    }
    ids = sorted(names)
    runs = [run(conn, limit=2)]
    assert (runs[0]["candidates"], runs[0]["sweepAfter"]) == (2, str(ids[1]))
    behind = names[ids[0]]  # taken by the first run; pushed to again, mid-sweep
    call_procedure(conn, "push_items_v1", [{"queue": "s", "partition": behind, "payload": "again"}])
    runs += [run(conn, limit=2), run(conn, limit=2)]
    assert [(r["candidates"], r["sweepAfter"]) for r in runs[1:]] == [(2, str(ids[3])), (1, None)]
    after = run(conn, limit=2)  # the next sweep: what changed behind the last one
    assert (after["candidates"], after["sweepAfter"]) == (1, None)
    assert run(conn, limit=2)["candidates"] == 0
    for pid in ids:
        kept, counted = stats_of(conn, pid), truth(conn, pid)
        assert {k: kept[k] for k in counted} == counted, names[pid]


def test_a_sweep_keeps_the_list_its_first_run_found(conn: psycopg.Connection[Any]) -> None:
    """The sweep's first run finds the changed partitions by the filtered scans and keeps them
    (queen.stats_sweep); its later runs take the next p_limit from that list without looking again, so a
    partition created mid-sweep (a later id than every listed one) is the next sweep's."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "k", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    run(conn)
    call_procedure(
        conn, "push_items_v1", [{"queue": "k", "partition": f"p{n}", "payload": n} for n in range(5)]
    )
    first = run(conn, limit=2)
    assert first["candidates"] == 2 and first["sweepAfter"] is not None
    assert conn.execute("SELECT count(*) FROM queen.stats_sweep").fetchone() == (5,)
    call_procedure(conn, "push_items_v1", [{"queue": "k", "partition": "new", "payload": "mid-sweep"}])
    assert [run(conn, limit=2)["candidates"] for _ in range(2)] == [2, 1]  # the listed five, not the new one
    nxt = run(conn, limit=2)  # the next sweep: the partition created after the first one's bound
    assert (nxt["candidates"], nxt["sweepAfter"]) == (1, None)
    assert stats_of(conn, partition_id(conn, "k", "new"))["depth"] == 1
    for name in [f"p{n}" for n in range(5)] + ["new"]:
        pid = partition_id(conn, "k", name)
        kept, counted = stats_of(conn, pid), truth(conn, pid)
        assert {k: kept[k] for k in counted} == counted, name


def test_the_queue_sums_wait_for_p_aggregate_or_the_sweep_s_end(conn: psycopg.Connection[Any]) -> None:
    """Step 4 (a queue's sums over all its partitions) runs when p_aggregate is true, or NULL and the sweep
    ends; a run without it keeps the queues to re-aggregate in the state, and the run that aggregates takes
    them."""
    call_procedure(
        conn, "push_items_v1", [{"queue": "a", "partition": f"p{n}", "payload": n} for n in range(3)]
    )
    run(conn)
    assert conn.execute(
        "SELECT s.depth FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id WHERE q.name = 'a'"
    ).fetchone() == (3,)
    call_procedure(
        conn, "push_items_v1", [{"queue": "a", "partition": f"p{n}", "payload": n} for n in range(3)]
    )
    depth = (
        "SELECT s.depth FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id WHERE q.name = 'a'"
    )
    step = "SELECT queen.stats_refresh_v4(false, NULL, 1, true, %s)"
    first = conn.execute(step, (False,)).fetchone()[0]  # type: ignore[index]
    assert (first["aggregated"], first["queues"]) == (False, 0)
    assert conn.execute(depth).fetchone() == (3,)
    state = conn.execute("SELECT value FROM queen.system_state WHERE key = 'stats_refresh'").fetchone()
    assert state is not None and len(state[0]["queues"]) == 1
    second = conn.execute(step, (True,)).fetchone()[0]  # type: ignore[index]
    assert (second["aggregated"], second["queues"]) == (True, 1)
    assert conn.execute(depth).fetchone() == (
        5,
    )  # two partitions' new numbers in (2 + 2 + 1); the third's next
    last = conn.execute(step, (False,)).fetchone()[0]  # type: ignore[index]
    assert (last["sweepAfter"], last["aggregated"]) == (None, False)  # false: not even at the sweep's end
    assert conn.execute(depth).fetchone() == (5,)
    ended = conn.execute(step, (None,)).fetchone()[0]  # type: ignore[index]
    assert (ended["sweepAfter"], ended["aggregated"], ended["queues"]) == (None, True, 1)  # NULL: at its end
    assert ended["aggregateMs"] >= 0 and last["aggregateMs"] is None
    assert conn.execute(depth).fetchone() == (6,)
    state = conn.execute("SELECT value FROM queen.system_state WHERE key = 'stats_refresh'").fetchone()
    assert state is not None and "queues" not in state[0]


def test_the_job_re_aggregates_a_slow_queue_sum_less_often(
    conn: psycopg.Connection[Any], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job re-aggregates the queues' sums at the sweep's end once due: every STATS_INTERVAL_MS, or, when
    the last re-aggregation took more than AGGREGATE_SHARE of a core, after its time divided by that share."""
    depth = (
        "SELECT s.depth FROM queen.queue_stats s JOIN queen.queues q ON q.id = s.queue_id WHERE q.name = 'j'"
    )

    def runs(share: float) -> list[tuple[Any, Any]]:
        """Two runs of one job, a push before each: each run's "aggregated" and the depth after it."""
        monkeypatch.setattr(jobs, "AGGREGATE_SHARE", share)
        job = jobs.StatsJob(ServiceSettings(stats_interval_ms=1, duty_cycle=1.0))

        async def go() -> list[tuple[Any, Any]]:
            database = Database(db_url, 2)
            await database.open()
            try:
                seen = []
                for _ in range(2):
                    call_procedure(conn, "push_items_v1", [{"queue": "j", "partition": "p", "payload": 1}])
                    details = (await job.run(database)).details
                    assert details["aggregateMs"] is None or details["aggregateMs"] >= 0
                    seen.append((details["aggregated"], conn.execute(depth).fetchone()))
                return seen
            finally:
                await database.close()

        return asyncio.run(go())

    assert runs(1.0) == [(True, (1,)), (True, (2,))]  # a 1 ms interval: due at every run
    # a share no re-aggregation can stay under: the first run's (due: the job's first) sets a long period
    assert runs(1e-12) == [(True, (3,)), (False, (3,))]


def test_a_job_run_skips_while_another_run_holds_the_lock(conn: psycopg.Connection[Any], db_url: str) -> None:
    """p_wait false (the job's runs) answers "skipped" at once while another run holds the stats lock (a whole
    pass the operators' route started), instead of waiting until the statement timeout; p_wait true waits."""
    call_procedure(conn, "push_items_v1", [{"queue": "w", "partition": "p", "payload": 1}])
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(737013)")
        skipped = conn.execute("SELECT queen.stats_refresh_v4(false, NULL, NULL, false)").fetchone()
        assert skipped is not None and skipped[0] == {"skipped": "another run holds the stats lock"}
        conn.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            conn.execute("SELECT queen.stats_refresh_v4(false)")
        conn.execute("RESET lock_timeout")
        holder.execute("SELECT pg_advisory_unlock(737013)")
    done = conn.execute("SELECT queen.stats_refresh_v4(false, NULL, NULL, false)").fetchone()
    assert done is not None and "skipped" not in done[0] and done[0]["partitions"] >= 1
